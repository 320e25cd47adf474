"""bench/tool_calls.py: what the function-calling path costs a streamed chat request.

    python -m bench.tool_calls [--rounds 40] [--max-tokens 32] [--plain-only]

A real app (built-in tiny model, ``--tool-call-parser hermes``) on 127.0.0.1; streamed chat
requests rotate, ``P N T P N T``, between a plain body (P), the same with two ``tools`` and
``tool_choice: none`` (N: the template renders the tools, nothing reads the output) and with
``tool_choice: auto`` (T: the same prompt, every delta read by the hermes parser). Greedy with
``ignore_eos``: every request generates the same ``--max-tokens`` tokens. Reports the median
[min-max] wall time per request of each kind, the median of the per-round ratios T/N (the
tools reading path alone) and the parse alone (RequestParser.parse_chat, microseconds) of
each body. ``--plain-only``: P and its parse only, for a checkout without function calling
(run this file with that checkout on PYTHONPATH to compare). Never pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import aiohttp
from aiohttp.test_utils import TestServer

from kvpool.runtime.engine import AsyncEngine
from kvpool.runtime.engine_config import EngineConfig
from kvpool.server.app import ROUTES_KEY, build_app

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}}]


def _fmt(xs: list[float], scale: float, unit: str) -> str:
    return (f"{statistics.median(xs) * scale:.3f} [{min(xs) * scale:.3f}-"
            f"{max(xs) * scale:.3f}] {unit}")


async def _one(s: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 200, await r.text()
        async for _ in r.content:
            pass
    return time.perf_counter() - t0


def _bodies(max_tokens: int, plain_only: bool) -> dict[str, bytes]:
    plain = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
             "max_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True}
    out = {"P": plain}
    if not plain_only:
        out["N"] = {**plain, "tools": TOOLS, "tool_choice": "none"}
        out["T"] = {**plain, "tools": TOOLS, "tool_choice": "auto"}
    return {k: json.dumps(v).encode() for k, v in out.items()}


async def _rounds(url: str, bodies: dict[str, bytes], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in bodies}
    async with aiohttp.ClientSession() as s:
        for body in bodies.values():  # warm-up
            await _one(s, url, body)
        for _ in range(rounds):
            for k, body in bodies.items():
                times[k].append(await _one(s, url, body))
    return times


async def main(rounds: int, max_tokens: int, plain_only: bool) -> None:
    engine = AsyncEngine(EngineConfig(num_device_blocks=128, num_host_blocks=0, seed=0,
                                      max_model_len=1024))
    app = build_app(engine) if plain_only else build_app(engine, tool_call_parser="hermes")
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    bodies = _bodies(max_tokens, plain_only)
    try:
        times = await _rounds(f"http://127.0.0.1:{server.port}/v1/chat/completions", bodies,
                              rounds)
        parser = app[ROUTES_KEY].parser
        parse = {k: _parse_seconds(parser, v) for k, v in bodies.items()}
    finally:
        await server.close()
    print(f"streamed chat request, {max_tokens} tokens, {rounds} interleaved rounds")
    names = {"P": "plain", "N": "tools, none", "T": "tools, auto"}
    for k in bodies:
        print(f"  {names[k]:<12} {_fmt(times[k], 1e3, 'ms')}   parse {_fmt(parse[k], 1e6, 'us')}")
    if not plain_only:
        ratios = [t / n for t, n in zip(times["T"], times["N"])]
        print(f"  ratio T/N    {_fmt(ratios, 1, '')}")


def _parse_seconds(parser, raw: bytes, n: int = 500, groups: int = 5) -> list[float]:
    out = []
    for _ in range(groups):
        t0 = time.perf_counter()
        for _ in range(n):
            parser.parse_chat(parser.decode_body(raw))
        out.append((time.perf_counter() - t0) / n)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--plain-only", action="store_true")
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.max_tokens, args.plain_only))
