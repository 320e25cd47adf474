"""bench/json_answer.py: how long a huge non-streamed answer's JSON encode stalls the loop.

    python -m bench.json_answer [--json FILE] [--quick] [--repeats N] [--n N] [--tokens T]

The answer is a chat completion of the real builder's shape (LogprobFormatter.chat entries of
the built-in tiny tokenizer, ``top_logprobs`` 20) with ``n`` choices of ``tokens`` tokens each;
the default, 16 x 8,191, was the largest the tiny model's server allowed while ``--max-n``
defaulted to 16 (its 8,192-token context; n may now reach ``--max-num-seqs``, 64). While it
is encoded a ticker task asks the loop for a turn every millisecond; ``stall_ms`` is the
longest the loop went without one. Three ways:

    inline   web.json_response(body): one json.dumps on the loop (before NOTE(encode-slices))
    thread   the same json.dumps on run_in_executor: it holds the GIL all the same
    sliced   json_answer.json_encoded(body), answered by bytes_answer (after)

``small_us.*``: one small answer (a chat body of a few tokens) through json_response and
the sliced way, microseconds per call (what staying inline saves). Never pass/fail.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from aiohttp import web

from bench.common import Stat, bench_parser, machine, put, timing_from_args, write_json
from kvpool.runtime.model import TokenLogprob
from kvpool.runtime.model.tiny import build_tiny_model
from kvpool.server.json_answer import bytes_answer, json_encoded
from kvpool.server.logprob_format import LogprobFormatter

TOP = 20


def chat_body(n: int, tokens: int, top: int = TOP) -> dict[str, Any]:
    """A chat.completion body of n choices, each ``tokens`` logprob entries (one shared list:
    json.dumps writes it n times all the same)."""
    rnd = random.Random(0)
    fmt = LogprobFormatter(build_tiny_model(0)[2])
    lps = [TokenLogprob(rnd.randrange(4, 260), -rnd.random(), 1,
                        tuple((rnd.randrange(4, 260), -rnd.random()) for _ in range(top)))
           for _ in range(tokens)]
    content = fmt.chat(lps)
    text = "".join(e["token"] for e in content)
    choices = [{"index": i, "message": {"role": "assistant", "content": text},
                "logprobs": {"content": content}, "finish_reason": "length"} for i in range(n)]
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": choices, "usage": {"prompt_tokens": 5, "completion_tokens": n * tokens}}


async def _ticker(gaps: list[float], stop: asyncio.Event) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


async def _encode(how: str, body: dict[str, Any]) -> web.Response:
    if how == "inline":
        return web.json_response(body)
    if how == "thread":
        loop = asyncio.get_running_loop()
        return web.json_response(text=await loop.run_in_executor(None, json.dumps, body))
    return bytes_answer(await json_encoded(body))


async def one_run(how: str, body: dict[str, Any]) -> dict[str, float]:
    """One encode of ``body`` the ``how`` way beside the ticker: its stall and wall time."""
    gaps: list[float] = []
    stop = asyncio.Event()
    tick = asyncio.create_task(_ticker(gaps, stop))
    await asyncio.sleep(0.02)
    start = time.perf_counter()
    resp = await _encode(how, body)
    wall = time.perf_counter() - start
    await asyncio.sleep(0.005)
    stop.set()
    await tick
    return {"stall_ms": max(gaps) * 1e3, "encode_ms": wall * 1e3, "mb": len(resp.body) / 1e6}


async def small_us(calls: int) -> dict[str, float]:
    """Microseconds per small answer: json_response against the sliced way, alternating."""
    body = chat_body(1, 8, 0)
    body["choices"][0]["logprobs"] = None
    out = {"inline": 0.0, "sliced": 0.0}
    for _ in range(calls):
        for how in out:
            start = time.perf_counter()
            await _encode(how, body)
            out[how] += time.perf_counter() - start
    return {how: s / calls * 1e6 for how, s in out.items()}


async def run(args) -> dict[str, Any]:
    timing = timing_from_args(args)
    n, tokens = (2, 1000) if timing.quick else (args.n, args.tokens)
    body = chat_body(n, tokens)
    res: dict[str, Any] = {"n": n, "tokens": tokens, "top_logprobs": TOP, "machine": machine()}
    runs: dict[str, list[dict[str, float]]] = {"inline": [], "thread": [], "sliced": []}
    for _ in range(timing.repeats):  # round robin: drift hits every way alike
        for how, got in runs.items():
            got.append(await one_run(how, body))
    for how, got in runs.items():
        for key in ("stall_ms", "encode_ms"):
            put(res, f"{how}.{key}", Stat.of(r[key] for r in got))
    res["answer_mb"] = runs["inline"][0]["mb"]
    smalls = [await small_us(200 if timing.quick else 2000) for _ in range(timing.repeats)]
    for how in ("inline", "sliced"):
        put(res, f"small_us.{how}", Stat.of(s[how] for s in smalls))
    return res


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("json_answer", __doc__)
    ap.add_argument("--n", type=int, default=16, help="choices (default 16: --max-n's old default)")
    ap.add_argument("--tokens", type=int, default=8191,
                    help="tokens per choice (default 8191: the tiny model's context less one)")
    args = ap.parse_args(argv)
    res = asyncio.run(run(args))
    for key, value in res.items():
        if key != "machine" and not key.endswith((".min", ".max")):
            spread = f" [{res[key + '.min']:.1f}-{res[key + '.max']:.1f}]" \
                if key + ".min" in res else ""
            print(f"{key:24s} {value if isinstance(value, int) else f'{value:.1f}'}{spread}")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
