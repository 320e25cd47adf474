"""Engine updates -> OpenAI response objects (one JSON body, or SSE chunks).

A :class:`ResponseBuilder` follows one request. The engine streams :class:`RequestOutput`
updates whose ``CompletionOutput`` entries are *deltas* per sequence; the builder keeps the
running text, token count and finish reason of each of the ``n`` choices and turns each update
into chunks (``stream=true``) or, at the end, into one body::

    update k: outputs=[(index 0, text "ab"), (index 2, text "x", finish "length")]
      stream   -> chunk{choices:[{index 0, "ab"}]}, chunk{choices:[{index 2, "x", "length"}]}
      no stream-> texts[0] += "ab"; texts[2] += "x"; finish[2] = "length"

Shapes follow OpenAI: ``text_completion`` / ``chat.completion`` bodies, ``text_completion`` /
``chat.completion.chunk`` chunks; with ``stream_options.include_usage`` a last chunk has
``"choices": []`` and the usage (with vLLM's ``continuous_usage_stats`` each chunk also has the
usage so far). Which keys each body and chunk carries: vllm_keys.py. Chat ``echo`` (vLLM):
the final assistant message opens the content (a stream's echo chunks, after the role chunks).

Several prompts (completions): prompt i's sequence j is choice ``i * n + j`` (OpenAI's order);
usage sums over the prompts. ``best_of`` > n: each prompt's ``best_of`` sequences run and the
n of highest cumulative logprob are its choices (vLLM v0's rule), usage counting those. A
choice's ``stop_reason`` (vLLM's) is the stop string or stop token id that ended it, or
``"repetition_detected"`` with finish_reason ``"repetition"``, else null; logprobs per
logprob_format.py.

NOTE(echo-chunk): a streamed completions ``echo`` has no chunk of its own, as in vLLM 0.33's
generator: each choice's first chunk carries the prompt's text (none with
``return_token_ids``) before its first tokens' text, the prompt's logprobs before theirs, and
``prompt_token_ids`` (the prompt's, asked for or not); with ``max_tokens`` 0 that one chunk
also ends the choice.
"""

from __future__ import annotations

import bisect
import time
import uuid
from typing import Any

from kvpool.runtime.engine.output_processor import CompletionOutput, RequestOutput
from kvpool.server.choice_reader import ChoiceReader, chat_message, reads_choices
from kvpool.server.first_updates import FirstLogprobs, first_logprobs
from kvpool.server.logprob_format import CONTEXT, LogprobFormatter, joined_logprobs
from kvpool.server.middleware import APIError, error_body
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.returned_ids import ReturnedIds
from kvpool.server.vllm_keys import (BODY_NULLS, CHOICE_NULLS, choice_chunk, chunk_choice,
                                     echo_choice, usage_so_far, with_nulls)

__all__ = ["ResponseBuilder"]

# what a successful choice may report ("repetition": vLLM's repetition_detection stopped it)
OPENAI_FINISH = ("stop", "length", "repetition")


class ResponseBuilder:
    """Accumulates one request's updates (all its prompts); renders chunks and the final body."""

    def __init__(self, req: ParsedRequest, *, created: int | None = None,
                 formatter: LogprobFormatter | None = None, shown_id: str | None = None,
                 metrics: bool = False) -> None:
        self.req, self.chat = req, req.kind == "chat"
        prefix = "chatcmpl-" if self.chat else "cmpl-"
        own = uuid.uuid4().hex
        self.engine_id = prefix + own  # NOTE(own-engine-id) in request_ids.py: never shown
        self.id = prefix + (own if shown_id is None else shown_id)  # the client's id
        self.created = int(time.time()) if created is None else created
        self.fmt, self.lp = formatter, req.logprob
        if (self.lp.logprobs is not None or self.lp.prompt_logprobs is not None) \
                and formatter is None:
            raise ValueError("a request with logprobs needs a LogprobFormatter")
        self.n = req.params.n
        total = len(req.prompts) * self.n
        self.texts: list[list[str]] = [[] for _ in range(total)]
        self.num_generated = [0] * total
        self.finish: list[str | None] = [None] * total
        self.stop_reason: list[str | int | None] = [None] * total
        self.offsets = [0] * total  # completions text_offset of the next token
        self.logprobs: list[Any] = [None] * total  # per choice: merged logprobs object / list
        self.chars = [0] * total  # chat: the characters of text so far
        self.lp_starts: list[list[int]] = [[] for _ in range(total)]  # chat: NOTE(own-logprobs)
        self.recent: list[list[int]] = [[] for _ in range(total)]  # NOTE(logprob-names)
        self.cum_logprob = [0.0] * total  # best_of: the ranking of the choices
        self.prompt_tokens = [len(p) for p in req.prompts]
        self.cached_tokens = [0] * len(req.prompts)
        self.prompt_finished = [False] * len(req.prompts)
        self.started = [False] * len(req.prompts)  # first update seen (echo held)
        self.echo_heads: list[tuple[str, Any] | None] = [None] * total  # NOTE(echo-chunk)
        self.prompt_lps: list[Any] = [None] * len(req.prompts)  # vLLM prompt_logprobs per prompt
        self.rids = ReturnedIds(req.prompts, self.n, chat=self.chat, on=req.extras.token_ids)
        self.error: str | None = None
        self.per_request_metrics = metrics  # NOTE(per-request-metrics) in request_timing.py
        self.timings: dict[int, list[dict[str, float]]] = {}  # per prompt, per choice
        self.own: list[dict[str, float]] = [{} for _ in range(total)]  # NOTE(child-metrics)
        self.readers = [ChoiceReader(req) for _ in range(total)] \
            if reads_choices(req) and req.stream else None  # reasoning, tool calls per choice
        self.thinking = [0] * total  # reasoning tokens per choice; thinks: reasoning.py's count
        self.thinks = [req.reasoning and req.reasoning.counter() for _ in range(total)]

    @property
    def finished(self) -> bool:
        return all(self.prompt_finished)

    # ---- accumulation -------------------------------------------------------------------------
    def update(self, out: RequestOutput, prompt: int = 0,
               first: FirstLogprobs | None = None) -> list[dict[str, Any]]:
        """Fold one engine update of prompt ``prompt`` in; return its stream chunks (one per
        choice with news). ``first``: the prompt's first update's logprobs, formatted
        (first_updates.py NOTE(format-off-loop)); else they are formatted here."""
        self.prompt_tokens[prompt] = out.num_prompt_tokens or self.prompt_tokens[prompt]
        self.cached_tokens[prompt] = out.num_cached_tokens
        self.prompt_finished[prompt] = self.prompt_finished[prompt] or out.finished
        self.error = out.error or self.error
        chunks = []
        if not self.started[prompt]:
            self.started[prompt] = True
            self._start(prompt, out, first)
        for c in out.outputs:
            if not 0 <= c.index < self.n:
                continue  # NOTE(index): never trust an index past n; drop rather than crash
            i = prompt * self.n + c.index
            if self.req.echo_only:
                chunks += self._echo_only_finish(i, c)
                continue
            self._fold(i, c, out.metrics)
            lp = self._fold_logprobs(i, c)
            ids = c.token_ids if self.rids.on else ()  # returned_ids.py: in their chunk
            if c.text or c.token_ids or c.finish_reason or self.echo_heads[i]:  # NOTE(echo-chunk)
                reason = c.finish_reason if c.finish_reason in OPENAI_FINISH else None
                if self.readers is None:
                    chunks.append(self._chunk(i, c.text, reason, lp, ids=ids))
                else:
                    chunks += self._read_chunks(i, c.text, reason, lp,
                                                c.finish_reason is not None, ids)
        if out.finished:  # the request's metrics under each choice's own (NOTE(child-finish))
            b = prompt * self.n
            self.timings[prompt] = [{**out.metrics, **own} for own in self.own[b:b + self.n]]
        return chunks

    def _fold(self, i: int, c: CompletionOutput, metrics: dict[str, float]) -> None:
        """Choice i's counts, ids, text and finish (with ``metrics``, its update's: a child
        request's own, NOTE(child-metrics)); its reasoning tokens (reasoning.py)."""
        self.num_generated[i] = max(self.num_generated[i], c.num_generated)
        self.rids.add(i, c.token_ids)
        think = self.req.reasoning  # a choice whose thinking ended, never to reopen, counts no more
        if think is not None and (self.thinks[i] or think.reopens):
            n, self.thinks[i] = think.count(c.token_ids, self.thinks[i])
            self.thinking[i] += n
        if c.text:
            self.texts[i].append(c.text)
        if c.finish_reason is not None:
            self.finish[i], self.stop_reason[i] = c.finish_reason, c.stop_reason
            self.own[i] = {**metrics, **({} if c.e2e is None else {"e2e": c.e2e})}
        if c.logprobs:
            self.cum_logprob[i] += sum(x.logprob for x in c.logprobs)

    def _read_chunks(self, i: int, text: str, reason: str | None, lp: Any,
                     done: bool, ids: tuple[int, ...]) -> list[dict[str, Any]]:
        """Choice i's text read for reasoning and tool calls: their deltas; the last chunk
        carries the finish (``tool_calls`` once a call went out), the logprobs and the ids."""
        reader = self.readers[i]
        deltas = reader.feed(text, done)
        if reason == "stop" and reader.called and self.req.tools.call_finish:
            reason = "tool_calls"
        if not deltas:
            return [self._chunk(i, "", reason, lp, {}, ids)] if reason or lp or ids else []
        last = len(deltas) - 1
        return [self._chunk(i, "", reason if k == last else None, lp if k == last else None,
                            delta, ids if k == last else ()) for k, delta in enumerate(deltas)]

    def _start(self, prompt: int, out: RequestOutput, first: FirstLogprobs | None) -> None:
        """The prompt's first update: its prompt logprobs (first_updates.py
        ``first_logprobs``), and the echo (completions), held for each choice's first chunk
        (NOTE(echo-chunk)). NOTE(echo-once): the echo's logprobs are formatted once for the n
        choices: per choice, n=16 with logprobs=20 over a 7000-token prompt held the loop for
        seconds (an outside probe)."""
        ids = self.req.prompts[prompt]
        if first is None:
            first = first_logprobs(self.fmt, self.lp, ids, out)
        self.prompt_lps[prompt] = first.prompt
        if not self.lp.echo:
            return
        text = (self.req.prompt_texts[prompt] if prompt < len(self.req.prompt_texts) else None)
        if text is None:
            text = self.fmt.tokenizer.decode(ids, skip_special_tokens=False) if self.fmt \
                else ""  # vLLM's echo of token ids keeps their special tokens
        if self.rids.on:  # returned_ids.py: the ids stand for the echoed text
            text = ""
        for j in range(self.n):  # NOTE(echo-once); every choice starts at offset 0
            i = prompt * self.n + j
            self.texts[i].append(text)
            if first.echo is not None:
                self.offsets[i] = first.end
                self._merge(i, first.echo)  # a copy: the shared object is never changed
            self.echo_heads[i] = (text, first.echo)

    def _echo_only_finish(self, i: int, c: CompletionOutput) -> list[dict[str, Any]]:
        """NOTE(echo-only) in parsed_request.py: the engine's one token is not shown; the
        choice ends with ``length`` (max_tokens 0 reached), as vLLM's does, in the chunk that
        holds the echo (NOTE(echo-chunk))."""
        if c.finish_reason is None or self.finish[i] is not None:
            return [self._chunk(i, "", None)] if self.echo_heads[i] is not None else []
        self.finish[i] = c.finish_reason if c.finish_reason not in OPENAI_FINISH else "length"
        return [self._chunk(i, "", self.finish[i])]

    def _fold_logprobs(self, i: int, c: CompletionOutput) -> Any:
        """This update's logprobs for choice i (also merged into the body's), or None; a chat
        choice's tokens are noted at the offset where their update's text begins."""
        if self.lp.logprobs is None:  # no logprobs asked: nothing to note or fold
            return None
        if self.chat:  # NOTE(own-logprobs): where this update's text begins
            start, self.chars[i] = self.chars[i], self.chars[i] + len(c.text or "")
        ctx = self.recent[i]  # the choice's last ids before this update's: names read them
        self.recent[i] = (ctx + list(c.token_ids))[-CONTEXT:]
        if not c.logprobs:
            return None
        if self.chat:
            lp = {"content": self.fmt.chat(c.logprobs, ctx)}
            self.lp_starts[i] += [start] * len(c.logprobs)
        else:
            lp, self.offsets[i] = self.fmt.completion(c.token_ids, c.logprobs, self.offsets[i],
                                                      ctx)
        self._merge(i, lp)
        return lp

    def _merge(self, i: int, lp: dict[str, list]) -> None:
        have = self.logprobs[i]
        if have is None:
            self.logprobs[i] = {k: list(v) for k, v in lp.items()}
        else:
            for k, v in lp.items():
                have[k].extend(v)

    def logprobs_before(self, i: int, chars: int) -> list[dict[str, Any]]:
        """NOTE(own-logprobs): the chat logprobs of choice i's tokens whose update's text began
        before character ``chars``: the tokens of a message read before a tool call (the
        Responses API's message item, responses_view.py), not the call's. An update's tokens
        go together (one token each, but for a held-back stop string's or character's)."""
        entries = (self.logprobs[i] or {}).get("content") or []
        return entries[:bisect.bisect_left(self.lp_starts[i], chars)]

    def failure(self) -> APIError | None:
        """Why the finished request did not succeed (engine error or abort), if it did not."""
        reasons = set(self.finish)
        if self.error or "error" in reasons:
            return APIError(500, f"generation failed: {self.error or 'engine error'}",
                            param=self._grammar_param(), code="generation_error")
        if "abort" in reasons or not self.finished:
            return APIError(503, "the request was aborted by the server (shutting down or "
                                 "overloaded); retry later", code="request_aborted",
                            headers={"Retry-After": "1"})
        return None

    def _grammar_param(self) -> str | None:
        """The field the grammar came in when the error is its grammar breaking midway:
        grammar_matchers.py NOTE(grammar-error) starts the engine's message with it."""
        spec = self.req.params.response_format
        if spec is None or not (self.error or "").startswith(f"{spec.param}: "):
            return None
        return spec.param

    # ---- rendering ----------------------------------------------------------------------------
    def returned(self) -> list[int]:
        """The choices a response shows: all, or (best_of > n) each prompt's ``return_n``
        of highest cumulative logprob, best first."""
        keep = self.req.return_n
        if keep is None:
            return list(range(len(self.texts)))
        out = []
        for start in range(0, len(self.texts), self.n):
            group = range(start, start + self.n)
            out += sorted(group, key=lambda i: -self.cum_logprob[i])[:keep]
        return out

    @property
    def completion_tokens(self) -> int:
        return sum(self.num_generated[i] for i in self.returned())

    @property
    def num_prompt_tokens(self) -> int:
        return sum(self.prompt_tokens)

    def usage(self) -> dict[str, Any]:
        completion = self.completion_tokens
        prompt = self.num_prompt_tokens
        out = {"prompt_tokens": prompt, "completion_tokens": completion,
               "total_tokens": prompt + completion,
               "prompt_tokens_details": {"cached_tokens": sum(self.cached_tokens)}}
        return self._with_thinking(out, self.returned())

    def _with_thinking(self, usage: dict[str, Any], choices: list[int]) -> dict[str, Any]:
        """Chat usage under a reasoning parser: ``choices``' reasoning tokens (vLLM's key)."""
        if self.req.reasoning is not None:
            usage["completion_tokens_details"] = {
                "reasoning_tokens": sum(self.thinking[i] for i in choices)}
        return usage

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.req.model}

    def _stop_reason(self, i: int, finish: str | None) -> str | int | None:
        return self.stop_reason[i] if finish in ("stop", "repetition") else None

    def _chunk(self, index: int, text: str, finish: str | None, logprobs: Any = None,
               delta: dict[str, Any] | None = None, ids: tuple[int, ...] = ()
               ) -> dict[str, Any]:
        head, self.echo_heads[index] = self.echo_heads[index], None  # NOTE(echo-chunk)
        if head is not None:
            text, logprobs = head[0] + text, joined_logprobs(head[1], logprobs)
        if self.chat:
            if delta is None:  # NOTE(vllm-chunk-keys): {} only before any token
                delta = {"content": text} if text or self.num_generated[index] else {}
            choice = {"index": index, "delta": delta, "logprobs": logprobs,
                      "finish_reason": finish}
            chunk = self._envelope("chat.completion.chunk")
        else:
            choice = {"index": index, "text": text, "logprobs": logprobs,
                      "finish_reason": finish}
            chunk = self._envelope("text_completion")
        self.rids.stream_choice(choice, index, ids)
        if head is not None:  # the echoed prompt's ids, asked for or not
            choice["prompt_token_ids"] = list(self.req.prompts[index // self.n])
        chunk_choice(choice, self._stop_reason(index, finish), chat=self.chat,
                     final=finish is not None)
        usage = self._usage_of(index) if self.req.continuous_usage else None
        return choice_chunk(chunk, choice, usage, chat=self.chat)

    def _usage_of(self, i: int, generated: int | None = None) -> dict[str, Any]:
        """continuous_usage_stats' counts on choice i's chunks (NOTE(vllm-chunk-keys)): its
        prompt's tokens and its own tokens so far, as vLLM counts them."""
        prompt = self.prompt_tokens[i // self.n]
        done = self.num_generated[i] if generated is None else generated
        usage = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
        return self._with_thinking(usage, [i] if generated is None else [])

    def role_chunks(self) -> list[dict[str, Any]]:
        """Chat streams open each choice with an assistant-role delta (OpenAI does), then
        (``echo``) each choice's echo."""
        if not self.chat:
            return []
        out = []
        for i in range(len(self.texts)):
            chunk = self._envelope("chat.completion.chunk")
            chunk["prompt_token_ids"] = self.rids.prompt(0)
            chunk["choices"] = [echo_choice(i, {"role": "assistant", "content": ""})]
            chunk["prompt_text"] = self.req.prompt_text  # return_prompt_text, else None
            out.append(chunk)
        echoes = [self.req.echo_at(i // self.n) for i in range(len(self.texts))]
        if any(echoes):  # NOTE(vllm-chunk-keys): the echo, a chunk of its own
            out += [{**self._envelope("chat.completion.chunk"),
                     "choices": [echo_choice(i, {"content": e})]} for i, e in enumerate(echoes)]
        if self.req.continuous_usage:
            for chunk in out:
                i = chunk["choices"][0]["index"]
                chunk["usage"] = usage_so_far(self._usage_of(i, 0), chat=True)
        return out

    def usage_chunk(self) -> dict[str, Any]:
        chunk = self._envelope("chat.completion.chunk" if self.chat else "text_completion")
        chunk["choices"] = []
        chunk["usage"] = self.usage()
        return chunk

    @staticmethod
    def error_event(err: APIError) -> dict[str, Any]:
        """What a stream sends when it fails after its headers went out."""
        return error_body(err.message, err.type, err.param, err.code)

    def body(self) -> dict[str, Any]:
        """The non-streaming response."""
        choices = []
        want_prompt = self.lp.engine_prompt_logprobs is not None  # echo + logprobs: vLLM's
        for shown_at, i in enumerate(self.returned()):
            text = "".join(self.texts[i])
            reason = self.finish[i] if self.finish[i] in OPENAI_FINISH else "stop"
            lp = self.logprobs[i]
            if self.chat:
                message, reason = chat_message(self.req, text, reason,
                                               self.req.echo_at(i // self.n))
                choice = {"index": shown_at, "message": message,
                          "logprobs": lp if lp is not None or self.lp.logprobs is None
                          else {"content": []}, "finish_reason": reason}
            else:
                choice = {"index": shown_at, "text": text, "logprobs": lp,
                          "finish_reason": reason}
                if want_prompt:
                    choice["prompt_logprobs"] = self.prompt_lps[i // self.n]
            choice["stop_reason"] = self._stop_reason(i, self.finish[i])
            self.rids.body_choice(choice, i)
            choices.append(with_nulls(choice, CHOICE_NULLS[self.chat]))
        body = self._envelope("chat.completion" if self.chat else "text_completion")
        body["choices"] = choices
        body["usage"] = self.usage()
        if self.chat:
            body["prompt_logprobs"] = self.prompt_lps[0] if want_prompt else None
            body["prompt_token_ids"] = self.rids.prompt(0)
            body["prompt_text"] = self.req.prompt_text  # return_prompt_text, else None
        return with_nulls(body, BODY_NULLS[self.chat])

