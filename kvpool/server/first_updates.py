"""Every prompt's first update folded into its ResponseBuilder without holding the event loop.

NOTE(format-off-loop): a prompt's first update carries its prompt logprobs (``prompt_logprobs``,
or ``echo`` with ``logprobs``): an entry per prompt position with up to 20 alternatives, each
named by the tokenizer (logprob_format.py). Formatted on the loop, one 30k-token prompt's held
it 0.6-5 s, and 64 prompts' first updates, formatted back to back, 3.4 s: /health and every
stream waited (an outside probe). So a prompt whose formatting names more than
``OFFLOAD_NAMES`` tokens is formatted on a worker thread (``first_logprobs``, which reads the
request and changes nothing), the builder folding the result in on the loop. Naming is
interpreted Python, so the thread gives the GIL up every switch interval (0.5 ms in a server:
NOTE(latency) in process_tuning.py) and the loop runs between; ``json.dumps`` would not
(NOTE(encode-slices) in json_answer.py). A smaller prompt is formatted inline, a thread hop
costing more than its naming, and the loop gets a turn each time the names formatted inline
since its last pass ``OFFLOAD_NAMES``: many prompts' first updates never add up to one stall.
A request cancelled while its formatting runs leaves the thread to finish it (it cannot be
stopped): the result is dropped. The formatter is the server's, used on the loop at the same
time: its name cache is a dict whose reads, writes and clear are each atomic under the GIL,
and the tokenizer's decode is safe from any thread (the parse pool tokenizes on its threads).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvpool.runtime.engine.output_processor import RequestOutput
from kvpool.server.logprob_fields import LogprobRequest
from kvpool.server.logprob_format import LogprobFormatter

__all__ = ["FORMAT_THREADS", "OFFLOAD_NAMES", "FirstLogprobs", "FirstUpdates", "first_logprobs",
           "first_names"]

# NOTE(format-off-loop): ~1 us a name on the cheap path (a complete token), up to ~5 us where
# split characters are decoded again: 4,096 names hold the loop ~4-20 ms
OFFLOAD_NAMES = 4096
FORMAT_THREADS = 2  # prompts formatted at once off the loop (the parse pool's count)


@dataclasses.dataclass(frozen=True)
class FirstLogprobs:
    """A prompt's formatted first-update logprobs, as ResponseBuilder shows them."""

    prompt: list[dict[str, Any] | None] | None = None  # vLLM's prompt_logprobs, when computed
    echo: dict[str, list] | None = None  # the echo's completions logprobs (echo + logprobs)
    end: int = 0  # the echo's text_offset after its last token


NO_FIRST = FirstLogprobs()  # a first update with nothing to format


def first_names(lp: LogprobRequest, ids: Sequence[int], out: RequestOutput) -> int:
    """About how many token names ``first_logprobs`` makes (the chosen and the top k each)."""
    if out.prompt_logprobs is None and not lp.echo:  # NOTE(plain-first): nothing to name
        return 0
    names = len(out.prompt_logprobs or ()) * (1 + (lp.engine_prompt_logprobs or 0))
    if lp.echo and lp.logprobs is not None and out.prompt_logprobs is None:
        names += len(ids)  # the echo's tokens, named plainly
    return names


def first_logprobs(fmt: LogprobFormatter | None, lp: LogprobRequest, ids: Sequence[int],
                   out: RequestOutput) -> FirstLogprobs:
    """The prompt logprobs of prompt ``ids``' first update ``out``, formatted: the
    ``prompt_logprobs`` list (asked for, or computed for echo with logprobs, which vLLM shows
    too), and the echo's logprobs from offset 0 (NOTE(name-once) in logprob_format.py)."""
    lps = out.prompt_logprobs
    # NOTE(plain-first): a plain request (no prompt logprobs, no echo) reads no logprob field
    # past the two here: its path runs no code of logprob_fields.py (tests/bench/
    # test_request_path.py)
    if fmt is None or lps is None and not lp.echo or lp.engine_prompt_logprobs is None:
        return NO_FIRST
    if not (lp.echo and lp.logprobs is not None):
        return FirstLogprobs(None if lps is None else fmt.prompt(lps))
    if lps is None:
        echo, end = fmt.completion(ids, (None,) * len(ids), 0)
        return FirstLogprobs(None, echo, end)
    return FirstLogprobs(*fmt.echoed(ids, lps))


class FirstUpdates:
    """Folds a request's first updates into its builder (NOTE(format-off-loop)); shared by
    every request of the server."""

    def __init__(self, threads: int = FORMAT_THREADS, offload_names: int = OFFLOAD_NAMES) -> None:
        self.offload_names = offload_names  # more names than this: formatted on the pool
        self.offloaded = 0  # first updates formatted on the pool so far (tests watch it)
        self.yields = 0  # turns given the loop between inline formattings (tests watch it)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kvpool-logprobs")

    async def fold(self, builder: Any, updates: Any) -> list[dict[str, Any]]:
        """``updates.firsts()`` (handlers.py PromptStreams) into ``builder``
        (responses.py ResponseBuilder); their chunks."""
        chunks: list[dict[str, Any]] = []
        inline = 0  # names formatted on the loop since its last turn
        for i, first in updates.firsts():
            ids = builder.req.prompts[i]
            names = first_names(builder.lp, ids, first)
            if names > self.offload_names:
                self.offloaded += 1
                formatted = await asyncio.get_running_loop().run_in_executor(
                    self._pool, first_logprobs, builder.fmt, builder.lp, ids, first)
            else:
                inline += names
                formatted = first_logprobs(builder.fmt, builder.lp, ids, first)
            chunks += builder.update(first, i, formatted)
            if inline > self.offload_names:
                inline = 0
                self.yields += 1
                await asyncio.sleep(0)
        return chunks

    def close(self) -> None:
        """Stop the pool (the app's cleanup); a formatting still running finishes first."""
        self._pool.shutdown(wait=False, cancel_futures=True)
