"""Remote hits while a cluster master is lost: bench.remote_faults's cross-replica hit probe.

The case NOTE(node-breaker) (kvpool/remote/node_breakers.py) is about: a master killed or
SIGSTOPped while the others live. Every ``interval`` a fresh 30-block prompt is sent to one
replica directly (write_through stores its blocks in the cluster), then, ``gap`` later, to the
next replica, whose only way to have it is a remote hit (``usage.prompt_tokens_details.
cached_tokens``). A 30-block prompt's keys share one hash tag (docs/architecture.md, key spec
v2), so each pair lands on one master chosen by its random prompt: about a third on the lost
master, two thirds on the live ones. With one breaker for the tier, the lost master's first
timeout or refusal made every pair miss until it answered again; with a breaker per node only
the lost master's pairs miss. Windows (``windows``): the baseline, the first ``early``
seconds after each fault (before the cluster's own failover, node timeout 1 s: the case the
per-node breakers change), and the rest of each fault.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time

BLOCK = 16
PROMPT_BLOCKS = 30  # 480 tokens: recompute costs past a fetch (the cost model fetches)


def _post(url: str, prompt: list[int]) -> int | None:
    """cached_tokens of one max_tokens=1 completion at ``url``; None if it failed."""
    host, _, port = url.removeprefix("http://").rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0,
                       "ignore_eos": True}).encode()
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            return None
        usage = json.loads(data).get("usage") or {}
        return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


class HitProbe(threading.Thread):
    """Pairs (start, hit or None: a request failed) of write-here, read-there requests."""

    def __init__(self, replicas: list[str], interval: float = 0.25, gap: float = 0.25,
                 seed: int = 2) -> None:
        super().__init__(daemon=True, name="hit-probe")
        self.replicas, self.interval, self.gap = replicas, interval, gap
        self.rng = random.Random(seed)
        self.samples: list[tuple[float, bool | None]] = []
        self.stop_evt = threading.Event()

    def one(self, k: int) -> bool | None:
        n = len(self.replicas)
        prompt = [self.rng.randrange(1, 500) for _ in range(BLOCK * PROMPT_BLOCKS + 3)]
        if _post(self.replicas[k % n], prompt) is None:
            return None
        self.stop_evt.wait(self.gap)  # the write-through put lands
        got = _post(self.replicas[(k + 1) % n], prompt)
        return None if got is None else got >= BLOCK * PROMPT_BLOCKS

    def run(self) -> None:
        k = 0
        while not self.stop_evt.is_set():
            t0 = time.monotonic()
            self.samples.append((t0, self.one(k)))
            k += 1
            self.stop_evt.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def finish(self, marks: dict[str, float]) -> dict:
        """Stop, wait for the pair in flight, and the windows' figures."""
        self.stop_evt.set()
        self.join(60)
        return self.windows(marks)

    def window(self, lo: float, hi: float) -> dict:
        got = [h for t, h in self.samples if lo <= t < hi]
        hits = sum(1 for h in got if h)
        done = sum(1 for h in got if h is not None)
        return {"pairs": len(got), "hits": hits, "failed": len(got) - done,
                "hit_ratio": None if not done else round(hits / done, 3)}

    def windows(self, marks: dict[str, float], early: float = 2.0) -> dict:
        out = {"baseline": self.window(0.0, marks["sigstop"])}
        for fault, start, end in (("stop", "sigstop", "sigcont"), ("kill", "kill", "restart")):
            split = min(marks[start] + early, marks[end])
            out[f"{fault}_first_{early:g}s"] = self.window(marks[start], split)
            out[f"{fault}_rest"] = self.window(split, marks[end])
        return out
