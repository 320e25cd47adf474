"""bench/api_fields.py: what ignoring unknown body fields costs a streamed request.

    python -m bench.api_fields [--rounds 40] [--max-tokens 16]

A real app (built-in tiny model) on 127.0.0.1; streamed completions alternate, ``A B A B``,
between a plain body and the same body plus the fields gateways add (OpenAI's ``metadata``,
``store``, ``service_tier``, ``modalities``; SGLang's ``no_stop_trim``), which the server
ignores, logs once and lists in ``X-Kvpool-Ignored-Fields``. Reports the median [min-max]
wall time per request of each kind, the median of the per-round ratios B/A, and the parse
alone (RequestParser.parse_completion, microseconds) of each body. Never pass/fail.
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

FOREIGN = {"metadata": {"trace": "t1"}, "store": False, "service_tier": "auto",
           "modalities": ["text"], "no_stop_trim": True}


def fmt(xs: list[float], scale: float, unit: str) -> str:
    return (f"{statistics.median(xs) * scale:.2f} [{min(xs) * scale:.2f}-"
            f"{max(xs) * scale:.2f}] {unit}")


async def one_request(s: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        async for _ in r.content:
            pass
    return time.perf_counter() - t0


async def main(rounds: int, max_tokens: int) -> None:
    engine = AsyncEngine(EngineConfig(num_device_blocks=64, num_host_blocks=0, seed=0,
                                      max_model_len=256))
    app = build_app(engine)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    plain = {"prompt": "The quick brown fox", "max_tokens": max_tokens, "stream": True,
             "temperature": 0, "ignore_eos": True}
    bodies = {"A": json.dumps(plain).encode(), "B": json.dumps({**plain, **FOREIGN}).encode()}
    url = f"http://127.0.0.1:{server.port}/v1/completions"
    times: dict[str, list[float]] = {"A": [], "B": []}
    ratios = []
    try:
        async with aiohttp.ClientSession() as s:
            for body in bodies.values():  # warm-up (and the one-time warning)
                await one_request(s, url, body)
            for _ in range(rounds):
                a, b = await one_request(s, url, bodies["A"]), await one_request(s, url, bodies["B"])
                times["A"].append(a)
                times["B"].append(b)
                ratios.append(b / a)
        parser = app[ROUTES_KEY].parser
        parse = {k: parse_seconds(lambda raw: parser.parse_completion(parser.decode_body(raw)),
                                  v) for k, v in bodies.items()}
    finally:
        await server.close()
    print(f"streamed request, {max_tokens} tokens, {rounds} interleaved rounds")
    print(f"  plain body       {fmt(times['A'], 1e3, 'ms')}")
    print(f"  + 5 foreign      {fmt(times['B'], 1e3, 'ms')}")
    print(f"  ratio B/A        {fmt(ratios, 1, '')}")
    print(f"  parse plain      {fmt(parse['A'], 1e6, 'us')}")
    print(f"  parse + foreign  {fmt(parse['B'], 1e6, 'us')}")


def parse_seconds(parse, raw: bytes, n: int = 2000, groups: int = 5) -> list[float]:
    """Seconds per ``parse(raw)``, one figure per group of ``n`` calls."""
    out = []
    for _ in range(groups):
        t0 = time.perf_counter()
        for _ in range(n):
            parse(raw)
        out.append((time.perf_counter() - t0) / n)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    asyncio.run(main(args.rounds, args.max_tokens))
