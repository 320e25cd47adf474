"""bench/tool_calls.py: what the function-calling path costs a streamed chat request.

    python -m bench.tool_calls [--rounds 40] [--max-tokens 32]

A real app (built-in tiny model, ``--tool-call-parser hermes``) on 127.0.0.1; streamed chat
requests rotate, ``P N T P N T``, between a plain body (P), the same with two ``tools`` and
``tool_choice: none`` (N: the template renders the tools, nothing reads the output) and with
``tool_choice: auto`` (T: the same prompt, every delta read by the hermes parser). Greedy with
``ignore_eos``: every request generates the same ``--max-tokens`` tokens. Reports the median
[min-max] wall time per request of each kind, the median of the per-round ratios T/N (the
tools reading path alone), the parse alone (RequestParser.parse_chat, microseconds) of each
body, and the response side alone (``--max-tokens`` one-token updates through ResponseBuilder
and sse_event, in-process, microseconds). Never pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import aiohttp
from aiohttp.test_utils import TestServer

from bench.api_fields import fmt, one_request, parse_seconds
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.output_processor import CompletionOutput, RequestOutput
from kvpool.server.app import ROUTES_KEY, build_app
from kvpool.server.sse import sse_event
from kvpool.server.responses import ResponseBuilder

WORDS = ("The", " weather", " in", " Paris", " is", " <", "mild", " today", ".")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}}]


def _bodies(max_tokens: int) -> dict[str, bytes]:
    plain = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
             "max_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True}
    out = {"P": plain, "N": {**plain, "tools": TOOLS, "tool_choice": "none"},
           "T": {**plain, "tools": TOOLS, "tool_choice": "auto"}}
    return {k: json.dumps(v).encode() for k, v in out.items()}


async def _rounds(url: str, bodies: dict[str, bytes], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in bodies}
    async with aiohttp.ClientSession() as s:
        for body in bodies.values():  # warm-up
            await one_request(s, url, body)
        for _ in range(rounds):
            for k, body in bodies.items():
                times[k].append(await one_request(s, url, body))
    return times


async def main(rounds: int, max_tokens: int) -> None:
    engine = AsyncEngine(EngineConfig(num_device_blocks=128, num_host_blocks=0, seed=0,
                                      max_model_len=1024))
    app = build_app(engine, tool_call_parser="hermes")
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    bodies = _bodies(max_tokens)
    try:
        times = await _rounds(f"http://127.0.0.1:{server.port}/v1/chat/completions", bodies,
                              rounds)
        parser = app[ROUTES_KEY].parser
        parse = {k: parse_seconds(lambda raw: parser.parse_chat(parser.decode_body(raw)), v,
                                  n=500) for k, v in bodies.items()}
        respond = {k: _response_seconds(parser.parse_chat(parser.decode_body(v)), max_tokens)
                   for k, v in bodies.items()}
    finally:
        await server.close()
    print(f"streamed chat request, {max_tokens} tokens, {rounds} interleaved rounds")
    names = {"P": "plain", "N": "tools, none", "T": "tools, auto"}
    for k in bodies:
        print(f"  {names[k]:<12} {fmt(times[k], 1e3, 'ms')}   parse {fmt(parse[k], 1e6, 'us')}"
              f"   response {fmt(respond[k], 1e6, 'us')}")
    ratios = [t / n for t, n in zip(times["T"], times["N"])]
    print(f"  ratio T/N    {fmt(ratios, 1, '')}")


def _response_seconds(req, max_tokens: int, n: int = 500, groups: int = 5) -> list[float]:
    """Seconds per request of the response side: role chunk, one update per token, SSE."""
    ups = [RequestOutput("r", (CompletionOutput(0, (5,), WORDS[i % len(WORDS)], i + 1,
                                                "length" if i == max_tokens - 1 else None),),
                         i == max_tokens - 1, 10) for i in range(max_tokens)]

    def respond(_: bytes) -> None:
        builder = ResponseBuilder(req)
        for c in builder.role_chunks():
            sse_event(c)
        for u in ups:
            for c in builder.update(u):
                sse_event(c)
    return parse_seconds(respond, b"", n=n, groups=groups)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.max_tokens))
