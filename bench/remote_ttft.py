"""bench.remote's TTFT section: a remote hit against recompute, by prefix length.

Per prefix length B (blocks of 16 tokens, plus a 5-token suffix no block holds), on one real
redis-server, in-process engines with the tiny model (bench.remote_loop's helpers):

- engine 1 computes the prompt and stores its B full blocks (write_through);
- then ``repeats`` interleaved rounds, each of four fresh engines serving the prompt once:
  ``fetch`` reads the tier with the cost model's own decision (``RemoteLink.fetch_bias`` 1),
  ``forced`` reads it with ``fetch_bias`` 0 (fetches every stored block), ``declined`` with
  ``fetch_bias`` inf (probes, then recomputes: the alternative the cost model weighs, since
  the probe is paid before it decides), ``recompute`` has no tier. The readers never write
  (write policy off), so Redis holds engine 1's blocks only.

Each engine first serves two unrelated prompts: one of the same length (at least 3 blocks:
only a step of >= 32 prompt tokens measures the prefill rate) that it computes, and one of B
blocks that engine 1 also stored, which the readers fetch (the recompute arm computes it).
Without them a fresh engine's cost model has no measured rate (it always fetches) and no
measured fixed cost of a fetch, so its decision would say nothing about a running replica's;
with them the model reads what this engine measured at this length, and all four arms have
warmed the model alike. The tier's bandwidth EMA keeps its assumption
(1 GiB/s) until a fetch of at least 1 MiB measures it.

Keys (medians over repeats, with ``.min`` / ``.max``): ``ttft.B.fetch_ms``,
``ttft.B.forced_ms``, ``ttft.B.declined_ms``, ``ttft.B.recompute_ms``,
``ttft.B.fetched_blocks`` (fetch arm),
``ttft.B.forced_fetched_blocks``, ``ttft.B.declined_fetched_blocks`` (0), ``ttft.B.est_fetch_ms`` / ``ttft.B.est_recompute_ms`` (the
cost model's estimates before the request); ``ttft.B.decided_fetch``: the share of repeats
in which the cost model fetched. ``ttft.break_even_blocks``: the smallest B whose forced-fetch
median is below its declined median (None: none is); ``ttft.disagree_blocks``: the lengths
where the cost model's majority decision is not the faster arm; ``ttft.forced_slower_blocks``:
the lengths where forced fetch was not faster (the break-even need not be monotone);
``ttft.stored_blocks.B``: the blocks engine 1's stores put into Redis.
"""

from __future__ import annotations

import random
import statistics

from bench.remote_loop import one, store_prefix

LENGTHS = (1, 2, 4, 8, 16, 32, 64, 128)
QUICK_LENGTHS = (1, 8, 128)
SUFFIX = 5  # tokens after the last full block: never stored, always computed
ARMS = ("fetch", "forced", "declined", "recompute")


def prompt_of(blocks: int, salt: int) -> list[int]:
    """``blocks`` full blocks plus the suffix; ``salt`` keeps prompts of different lengths
    (and the warm-up prompts) from sharing a first block."""
    rng = random.Random(salt)
    return [rng.randrange(1, 500) for _ in range(16 * blocks + SUFFIX)]


async def ttft_by_prefix(url: str, lengths=LENGTHS, repeats: int = 5) -> dict:
    res: dict = {"ttft.lengths": list(lengths), "ttft.repeats": repeats}
    for b in lengths:
        prompt = prompt_of(b, b)
        # warm-ups, sharing no block with the prompt: one computed (the prefill rate), one
        # stored and fetched (a fetch's fixed cost); the readers do not write
        warm = [prompt_of(max(b, 3), 1000 + b), prompt_of(b, 2000 + b)]
        res[f"ttft.stored_blocks.{b}"] = await store_prefix(b, prompt, url)
        await store_prefix(b, warm[1], url)
        runs: dict[str, list[dict]] = {a: [] for a in ARMS}
        for _ in range(repeats):  # interleaved: drift hits every arm alike
            kw = dict(monitor=False, warm=warm)
            runs["fetch"].append(await one(b, prompt, url, write_policy="off", **kw))
            runs["forced"].append(await one(b, prompt, url, write_policy="off",
                                            fetch_bias=0.0, **kw))
            runs["declined"].append(await one(b, prompt, url, write_policy="off",
                                              fetch_bias=float("inf"), **kw))
            runs["recompute"].append(await one(b, prompt, None, **kw))
        # the warm-up shares no block with the prompt: recompute computes all of it
        assert all(r["cached_tokens"] == 0 for r in runs["recompute"]), b
        _put(res, f"ttft.{b}.fetch_ms", runs["fetch"], "ttft_ms")
        _put(res, f"ttft.{b}.forced_ms", runs["forced"], "ttft_ms")
        _put(res, f"ttft.{b}.declined_ms", runs["declined"], "ttft_ms")
        _put(res, f"ttft.{b}.recompute_ms", runs["recompute"], "ttft_ms")
        _put(res, f"ttft.{b}.fetched_blocks", runs["fetch"], "fetched_blocks")
        _put(res, f"ttft.{b}.forced_fetched_blocks", runs["forced"], "fetched_blocks")
        _put(res, f"ttft.{b}.declined_fetched_blocks", runs["declined"], "fetched_blocks")
        _put(res, f"ttft.{b}.est_fetch_ms", runs["fetch"], "est_fetch_ms")
        _put(res, f"ttft.{b}.est_recompute_ms", runs["fetch"], "est_recompute_ms")
        res[f"ttft.{b}.decided_fetch"] = sum(r["declined_cost"] == 0 for r in runs["fetch"]
                                             ) / repeats
    _verdict(res, lengths)
    return res


def _put(res: dict, key: str, runs: list[dict], field: str) -> None:
    vals = [float(r[field]) for r in runs]
    res[key] = statistics.median(vals)
    res[f"{key}.min"], res[f"{key}.max"] = min(vals), max(vals)


def _verdict(res: dict, lengths) -> None:
    """The break-even and where the cost model's decisions disagree with it."""
    wins = {b: res[f"ttft.{b}.forced_ms"] < res[f"ttft.{b}.declined_ms"] for b in lengths}
    res["ttft.break_even_blocks"] = next((b for b in lengths if wins[b]), None)
    res["ttft.disagree_blocks"] = [b for b in lengths
                                   if (res[f"ttft.{b}.decided_fetch"] >= 0.5) != wins[b]]
    res["ttft.forced_slower_blocks"] = [b for b in lengths if not wins[b]]


def print_ttft(res: dict) -> None:
    def cell(key: str) -> str:
        return f"{res[key]:.1f} [{res[key + '.min']:.1f}-{res[key + '.max']:.1f}]"

    print(f"TTFT by prefix length: blocks of 16 tokens + {SUFFIX}, {res['ttft.repeats']} "
          f"interleaved repeats, ms median [min-max]")
    print(f"{'blocks':>6} {'tokens':>6} {'cost model':>19} {'forced fetch':>19} "
          f"{'declined':>19} {'recompute':>19} {'fetched':>7} {'forced':>6} {'fetch?':>6} "
          f"{'est f/r ms':>12}")
    for b in res["ttft.lengths"]:
        k = f"ttft.{b}"
        print(f"{b:>6} {16 * b + SUFFIX:>6} {cell(k + '.fetch_ms'):>19} "
              f"{cell(k + '.forced_ms'):>19} {cell(k + '.declined_ms'):>19} "
              f"{cell(k + '.recompute_ms'):>19} "
              f"{res[k + '.fetched_blocks']:>7.0f} {res[k + '.forced_fetched_blocks']:>6.0f} "
              f"{res[k + '.decided_fetch']:>6.0%} "
              f"{res[k + '.est_fetch_ms']:>5.2f}/{res[k + '.est_recompute_ms']:<6.2f}")
    be, dis = res["ttft.break_even_blocks"], res["ttft.disagree_blocks"]
    slower = [b for b in res["ttft.forced_slower_blocks"] if be is not None and b > be]
    print("break-even: " + (f"{be} blocks ({16 * be} tokens), the shortest prefix whose forced "
                            "fetch beat probe + recompute" if be is not None else
                            "none: probe + recompute was faster at every length")
          + (f" (but not at {slower} blocks)" if slower else "")
          + "; cost model " + (f"disagrees at {dis} blocks" if dis else "agrees everywhere"))
