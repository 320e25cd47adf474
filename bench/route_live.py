"""Routing live, end to end: N ``kvpool serve`` replicas behind ``kvpool router`` on 127.0.0.1,
one conversation-shaped replay sent through the router per mode (issue 16, "Then beat these
figures live").

    python -m bench.route_live [--replicas 3] [--conversations 200] [--repeats 3] [--quick]
                               [--no-kv-events] [--overhead ROUNDS] [--overhead-chat]
                               [--epp ROUNDS] [--baseline DIR] [--json out/route_live.json]

Workload (derived from the Mooncake conversation trace, scaled down):

- A conversation is the trace's requests sharing ``hash_ids[1]`` (a later turn repeats the earlier
  turn's full blocks, then diverges: the trace's own structure). ``--conversations`` of them are
  sampled (seeded) and replayed in trace order, each turn cut to ``--max-blocks`` hash ids.
- Every trace request starts with hash id 0, one system prompt. Here each conversation draws one
  of ``--system-prompts`` shared system prompts of ``--system-blocks`` blocks instead.
- A hash id becomes one model block (``--block-size`` tokens) of seeded pseudo-random token ids;
  each request adds a half-block tail of its own (the new user message, never cached). A run's
  token ids are salted per (repeat, mode), so no run hits another run's blocks and every mode
  starts from the same cold-for-it cache (old runs' blocks are least recent: they go first).

Modes: ``round_robin`` and ``prefix`` (``kvpool router --policy``) and ``kv_events`` (the prefix
policy fed by the replicas' KV events, ``kvpool router --kv-events``: no lookup per request) on
replicas without a remote tier; with ``--tier`` also round_robin and prefix again on replicas
started with ``--remote-url`` (one Redis from bench/redis_servers.py) and
``--remote-write-policy write_back``. ``--overhead ROUNDS`` then measures each router arm
against a direct request, interleaved (bench/route_overhead.py); ``--epp ROUNDS`` the endpoint
picker path (Envoy + ``kvpool epp``) and the router (bench/route_epp.py).
Per mode: prefix hit tokens / prompt tokens from usage.cached_tokens (local + remote: a fetched
block is served from the host pool), the replicas' kvpool_prefix_cache_hits_total /
queries_total deltas, remote hit blocks, TTFT p50/p99 (stream, first content chunk), output
tok/s (completion tokens over the replay's wall time), routing decisions by reason; medians over
``--repeats``. The same workload also runs through bench/route.py's Simulation (block = one
model block, the replicas' device pool as the LRU) so the live and simulated figures sit side
by side. Everything started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import aiohttp

from bench.common import machine, write_json
from bench.remote_faults import RouterProcess, scrape_sync, start_replicas
from bench.route import DEFAULT_TRACE, load_reqs
from bench.route_epp import epp_overhead, start_all
from bench.route_overhead import measure_overhead
from bench.route_workload import Turn, block_tokens, build_workload, prompt_ids, simulate
from stress.report import percentile
from stress.http.servers import SpawnedServer
from bench.redis_servers import RedisServer

KV_EVENTS = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                        "endpoint": "tcp://127.0.0.1:0", "replay_endpoint": "tcp://127.0.0.1:0"})


async def one(session: aiohttp.ClientSession, url: str, turn: Turn, salt: str,
              args) -> dict:
    body = {"prompt": prompt_ids(turn, salt, args.block_size), "temperature": 0,
            "max_tokens": max(1, min(turn.output_length, args.max_tokens)), "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    ttft, usage = None, None
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            return {"error": f"{resp.status}: {(await resp.text())[:200]}"}
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if ttft is None and event.get("choices"):
                ttft = time.monotonic() - t0
            usage = event.get("usage") or usage
    if ttft is None or usage is None:
        return {"error": "stream ended without a token or usage"}
    return {"ttft": ttft, "prompt": usage["prompt_tokens"],
            "cached": usage["prompt_tokens_details"]["cached_tokens"],
            "completion": usage["completion_tokens"]}


async def replay(url: str, turns: list[Turn], salt: str, args) -> tuple[list[dict], float]:
    """``--clients`` closed-loop clients take the turns in trace order."""
    queue: asyncio.Queue[Turn] = asyncio.Queue()
    for t in turns:
        queue.put_nowait(t)
    results: list[dict] = []

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            turn = queue.get_nowait()
            try:
                results.append(await one(session, url, turn, salt, args))
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                results.append({"error": repr(exc)})

    t0 = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(args.clients)))
    return results, time.monotonic() - t0


SERIES = ("kvpool_prefix_cache_hits_total", "kvpool_prefix_cache_queries_total",
          "kvpool_remote_hit_blocks_total")


def replica_sums(urls: list[str]) -> dict[str, float]:
    scrapes = [scrape_sync(u) for u in urls]
    if any(m is None for m in scrapes):
        raise RuntimeError("a replica's /metrics did not answer")
    return {name: sum(m.get(name) for m in scrapes) for name in SERIES}


def router_args(policy: str, args) -> list[str]:
    """``kvpool router`` flags of a mode: kv_events is the prefix policy fed by KV events."""
    flags = ["--policy", "prefix", "--kv-events"] if policy == "kv_events" else [
        "--policy", policy]
    return flags + ["--lookup-timeout-ms", str(args.lookup_timeout_ms)]


def feed_counts(scrape) -> dict[str, float]:
    """The router's KV event batches by kind, summed over its replicas."""
    out: dict[str, float] = {}
    for labels, v in scrape.samples.get("kvpool_router_kv_events_total", {}).items():
        kind = dict(labels).get("kind", "")
        out[kind] = out.get(kind, 0.0) + v
    return out


def run_mode(urls: list[str], policy: str, turns: list[Turn], salt: str, args) -> dict:
    router = RouterProcess(urls, router_args(policy, args))
    url = router.start()
    try:
        before = replica_sums(urls)
        results, wall = asyncio.run(replay(url, turns, salt, args))
        after = replica_sums(urls)
        decisions = scrape_sync(url)
    finally:
        router.stop()
    ok = [r for r in results if "error" not in r]
    d = {k: after[k] - before[k] for k in SERIES}
    prompt = sum(r["prompt"] for r in ok) or 1
    ttfts = [r["ttft"] for r in ok]
    return {"requests": len(results), "failed": len(results) - len(ok),
            "errors": [r["error"] for r in results if "error" in r][:3],
            "hit_rate": round(sum(r["cached"] for r in ok) / prompt, 4),
            "metrics_hit_rate": round(d["kvpool_prefix_cache_hits_total"]
                                      / (d["kvpool_prefix_cache_queries_total"] or 1), 4),
            "remote_hit_tokens": round(d["kvpool_remote_hit_blocks_total"] * args.block_size),
            "prompt_tokens": prompt,
            "ttft_p50_ms": round(1000 * percentile(ttfts, 50), 2) if ttfts else None,
            "ttft_p99_ms": round(1000 * percentile(ttfts, 99), 2) if ttfts else None,
            "output_tok_s": round(sum(r["completion"] for r in ok) / wall, 1),
            "wall_s": round(wall, 2),
            "decisions": {r: decisions.get("kvpool_router_decisions_total", reason=r)
                          for r in ("prefix", "load", "round_robin", "retry")}
            if decisions is not None else None,
            # kv_events mode: what the router's feeds did (gaps, lost, malformed, ...)
            "kv_feed": feed_counts(decisions)
            if decisions is not None and policy == "kv_events" else None}


def replica_args(args, i: int, remote_url: str | None) -> list[str]:
    out = ["--block-size", str(args.block_size), "--num-device-blocks",
           str(args.device_blocks), "--num-host-blocks", str(args.host_blocks),
           "--max-model-len", "1024", "--max-num-seqs", "16", "--num-threads", "1",
           "--enable-prefix-caching", "--replica-id", f"r{i + 1}", "--log-level", "warning"]
    if remote_url:
        out += ["--remote-url", remote_url, "--remote-write-policy", "write_back"]
    if args.kv_events:
        out += ["--kv-events-config", KV_EVENTS]
    return out


MEDIAN_KEYS = ("hit_rate", "metrics_hit_rate", "remote_hit_tokens", "ttft_p50_ms",
               "ttft_p99_ms", "output_tok_s", "wall_s")


def summarize(runs: list[dict]) -> dict:
    out = {k: statistics.median(r[k] for r in runs) for k in MEDIAN_KEYS
           if all(r[k] is not None for r in runs)}
    out["failed"] = sum(r["failed"] for r in runs)
    out["runs"] = runs
    return out


def modes_of(args) -> list[tuple[str, bool]]:
    """(router mode, replicas with the Redis tier) in the order they run each repeat."""
    modes = [("round_robin", False), ("prefix", False)]
    if args.kv_events:
        modes.append(("kv_events", False))
    if args.tier:
        modes += [("round_robin", True), ("prefix", True)]
    return modes


def workload_info(turns: list[Turn], args) -> dict:
    """The result's description of the workload, with each policy's simulated hit rate."""
    unique = len({h for t in turns for h in t.blocks})
    return {"workload": {"turns": len(turns), "unique_blocks": unique,
                         "blocks": sum(len(t.blocks) for t in turns),
                         "device_blocks_per_replica": args.device_blocks},
            "simulated_hit_rate": {p: simulate(turns, p, args.replicas, args.device_blocks)
                                   for p in ("round_robin", "prefix")}}


def run_modes(urls: dict[bool, list[str]], modes: list[tuple[str, bool]],
              turns: list[Turn], args) -> dict:
    """Every mode once per repeat, in order; each mode's summary."""
    runs: dict[str, list[dict]] = {}
    for rep in range(args.repeats):
        for policy, tier in modes:
            name = policy + ("+write_back" if tier else "")
            runs.setdefault(name, []).append(
                run_mode(urls[tier], policy, turns, f"{args.seed}:{rep}:{name}", args))
    return {name: summarize(rs) for name, rs in runs.items()}


def run(args) -> dict:
    turns = build_workload(load_reqs(args.trace), args.conversations, max_blocks=args.max_blocks,
                           system_prompts=args.system_prompts,
                           system_blocks=args.system_blocks, seed=args.seed)
    modes = modes_of(args)
    result: dict = {"bench": "route_live", "machine": machine(), "config": vars(args),
                    **workload_info(turns, args)}
    redis = RedisServer() if args.tier else None
    fleets: dict[bool, list[SpawnedServer]] = {}
    try:
        if redis is not None:
            redis.start()
        urls: dict[bool, list[str]] = {}
        for tier in sorted({t for _, t in modes}):
            fleets[tier] = [SpawnedServer(replica_args(args, i, redis.url if tier else None),
                                          startup_timeout=120) for i in range(args.replicas)]
            urls[tier] = start_replicas(fleets[tier])
        m = result["modes"] = run_modes(urls, modes, turns, args)
        rr = m["round_robin"]["hit_rate"]
        result["prefix_over_round_robin"] = round(m["prefix"]["hit_rate"] / rr, 3) if rr else None
        result["failed_requests"] = sum(v["failed"] for v in m.values())
        if args.epp:
            result["epp"] = epp_arm(urls[False], args)
        if args.overhead:
            result["overhead"] = overhead(urls[False], args)
        return result
    finally:
        for fleet in fleets.values():
            for s in fleet:
                s.stop(timeout=20)
        if redis is not None:
            redis.stop()


def epp_arm(urls: list[str], args) -> dict:
    """The picker path and the router against direct (route_epp.py), on KV events or lookups."""
    ids = [t for h in range(8) for t in block_tokens(h, "epp", args.block_size)] + [11]
    mode = "kv_events" if args.kv_events else "prefix"
    return {"decision": mode, **epp_overhead(urls, ids, args.epp, router_args(mode, args),
                                             args.baseline)}


def overhead(urls: list[str], args) -> dict:
    """Added latency of each router arm over a direct request (bench/route_overhead.py)."""
    arms = ["round_robin", "prefix"] + (["kv_events"] if args.kv_events else [])
    routers = {a: RouterProcess(urls, router_args(a, args)) for a in arms}
    if args.baseline:  # the same arms from the other checkout, in the same rounds
        routers.update({f"{a}@base": RouterProcess(urls, router_args(a, args),
                                                   root=args.baseline) for a in arms})
    try:
        started = start_all(routers)
        ids = [t for h in range(8) for t in block_tokens(h, "overhead", args.block_size)] + [11]
        chat = " ".join(f"w{i}" for i in range(100)) if args.overhead_chat else None
        return measure_overhead(urls[0], started, ids, args.overhead, chat)
    finally:
        for r in routers.values():
            r.stop()


def print_table(res: dict) -> None:
    w = res["workload"]
    print(f"workload: {w['turns']} turns, {w['blocks']} blocks ({w['unique_blocks']} unique), "
          f"{w['device_blocks_per_replica']} device blocks per replica; simulated hit rate "
          f"{res['simulated_hit_rate']}")
    print(f"{'mode':<24}{'hit rate':>9}{'metrics':>9}{'remote tok':>11}{'TTFT p50':>10}"
          f"{'p99 ms':>8}{'out tok/s':>10}{'failed':>7}")
    for name, m in res["modes"].items():
        print(f"{name:<24}{m['hit_rate']:>9.4f}{m['metrics_hit_rate']:>9.4f}"
              f"{m['remote_hit_tokens']:>11.0f}{m.get('ttft_p50_ms', float('nan')):>10.2f}"
              f"{m.get('ttft_p99_ms', float('nan')):>8.2f}{m['output_tok_s']:>10.1f}"
              f"{m['failed']:>7}")
    print(f"prefix / round_robin hit rate: {res['prefix_over_round_robin']}x")
    if "epp" in res:
        o = res["epp"]
        print(f"added latency over direct ({o['rounds']} interleaved rounds, {o['decision']} "
              f"decisions; direct p50 {o['direct_p50_ms']} ms):")
        print_added(o)
    if "overhead" in res:
        o = res["overhead"]
        print(f"added latency over direct ({o['rounds']} interleaved rounds; direct p50 "
              f"{o['direct_p50_ms']} ms, p99 {o['direct_p99_ms']} ms):")
        print_added(o)


def print_added(o: dict) -> None:
    for arm in [k for k, v in o.items() if isinstance(v, dict)]:
        med, lo, hi = o[arm]["added_per_round_ms"]
        print(f"  {arm:<16} +{o[arm]['added_p50_ms']:.3f} ms p50  +{o[arm]['added_p99_ms']:.3f} "
              f"ms p99  per round {med:.3f} [{lo:.3f}-{hi:.3f}] ms")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.route_live", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--conversations", type=int, default=200)
    p.add_argument("--max-blocks", type=int, default=60, help="trace hash ids kept per turn")
    p.add_argument("--system-prompts", type=int, default=4)
    p.add_argument("--system-blocks", type=int, default=1)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--device-blocks", type=int, default=256, help="per replica")
    p.add_argument("--host-blocks", type=int, default=64, help="per replica")
    p.add_argument("--clients", type=int, default=6, help="closed-loop clients")
    p.add_argument("--max-tokens", type=int, default=8, help="cap on the trace's output length")
    p.add_argument("--lookup-timeout-ms", type=float, default=1000.0,
                   help="router lookup deadline (generous: the box is shared)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tier", action=argparse.BooleanOptionalAction, default=True,
                   help="also run both policies on replicas sharing a Redis tier (write_back)")
    p.add_argument("--epp", type=int, default=0, metavar="ROUNDS",
                   help="then the endpoint picker path (Envoy + kvpool epp) and the router vs "
                        "a direct request, ROUNDS interleaved rounds (bench/route_epp.py); "
                        "both on KV events unless --no-kv-events")
    p.add_argument("--kv-events", action=argparse.BooleanOptionalAction, default=True,
                   help="replicas publish KV events and a kv_events mode runs "
                        "(kvpool router --kv-events: no lookup per request)")
    p.add_argument("--overhead", type=int, default=0, metavar="ROUNDS",
                   help="then measure each router's added latency over a direct request, "
                        "ROUNDS interleaved rounds (bench/route_overhead.py)")
    p.add_argument("--overhead-chat", action="store_true",
                   help="the overhead rounds send one chat message (100 short words) to "
                        "/v1/chat/completions: the kv_events router renders the template")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="another checkout: its router/picker as <arm>@base in the same rounds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="2 replicas, 6 conversations, 1 repeat, no tier (the smoke test)")
    p.add_argument("--json", default=None, help="write the figures here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        args.replicas, args.conversations, args.repeats, args.tier = 2, 6, 1, False
        args.device_blocks, args.clients = 256, 2
    res = run(args)
    print_table(res)
    write_json(args.json, res)
    return 0 if res["failed_requests"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
