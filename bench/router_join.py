"""How soon a replica added to a running router takes traffic (target: within 2 s).

    python -m bench.router_join [--rounds 5] [--json out/router_join.json]

Two real ``kvpool serve`` replicas on 127.0.0.1 and a ``kvpool router`` process over the
first, with ``--admin-token-file``. Each round: ``POST /v1/kvpool/replicas`` the second, then
send requests (``--policy round_robin``, so the second gets every other one once it is healthy)
until one is answered by it (its ``/v1/kvpool/lookup`` reports the prompt cached), then
``DELETE`` it again. Reported: seconds from the POST to that first answer, median [min-max].
Everything started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

from bench.common import machine, write_json
from bench.remote_faults import RouterProcess, start_replicas
from stress.http.servers import SpawnedServer

REPLICA = ["--block-size", "16", "--num-device-blocks", "160", "--max-model-len", "1024",
           "--num-threads", "1", "--log-level", "warning"]
TOKEN = "bench-join"
BOUND = 30.0  # seconds a round may take before it counts as failed


async def first_answer(s: aiohttp.ClientSession, router: str, new: str) -> float:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    t0 = time.monotonic()
    async with s.post(router + "/v1/kvpool/replicas", json={"url": new}, headers=auth) as r:
        assert r.status == 201, await r.text()
    try:
        while time.monotonic() - t0 < BOUND:
            p = f"{uuid.uuid4().hex} join probe"
            async with s.post(router + "/v1/completions",
                              json={"prompt": p, "max_tokens": 1}) as r:
                assert r.status == 200, await r.text()
            async with s.post(new + "/v1/kvpool/lookup", json={"prompt": p}) as r:
                if (await r.json())["device_hit_tokens"] > 0:
                    return time.monotonic() - t0
        raise RuntimeError(f"{new} took no request within {BOUND} s")
    finally:
        async with s.delete(router + "/v1/kvpool/replicas", json={"url": new},
                            headers=auth) as r:
            assert r.status == 200, await r.text()


async def rounds(router: str, new: str, n: int) -> list[float]:
    async with aiohttp.ClientSession() as s:
        out = []
        for _ in range(n):
            out.append(await first_answer(s, router, new))
            await asyncio.sleep(0.5)
        return out


def run(args) -> dict:
    fleet = [SpawnedServer([*REPLICA, "--replica-id", f"j{i}"], startup_timeout=120)
             for i in range(2)]
    with tempfile.TemporaryDirectory() as d:
        token = Path(d) / "token"
        token.write_text(TOKEN)
        router = None
        try:
            urls = start_replicas(fleet)
            router = RouterProcess(urls[:1], ["--policy", "round_robin",
                                              "--admin-token-file", str(token)])
            secs = asyncio.run(rounds(router.start(), urls[1], args.rounds))
        finally:
            if router is not None:
                router.stop()
            for s in fleet:
                s.stop(timeout=20)
    return {"bench": "router_join", "machine": machine(), "rounds": args.rounds,
            "seconds": [round(x, 4) for x in secs],
            "median_s": round(statistics.median(secs), 4), "min_s": round(min(secs), 4),
            "max_s": round(max(secs), 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.router_join", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    res = run(args)
    print(f"a new replica's first answer after POST: {res['median_s']} s median "
          f"[{res['min_s']}-{res['max_s']}] over {res['rounds']} rounds (target 2 s)")
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
