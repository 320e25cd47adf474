"""Where a request goes: the longest prefix hit, unless the replicas' loads are imbalanced.

The rule is SGLang's cache-aware router's imbalance guard::

    imbalanced = max_load - min_load > abs_threshold  and  max_load > rel_ratio * min_load
    imbalanced           -> the least-loaded replica                     reason "load"
    one candidate        -> it                                           reason "only"
    no replica has a hit -> round robin over the candidates              reason "round_robin"
    else                 -> a longest-hit replica, least loaded of those reason "prefix"

``load`` is whatever the caller counts as in flight (the live router: running + waiting
requests from each replica's lookup answer; bench/route.py: simulated in-flight requests).
Ties break on the lower index so a decision is a pure function of its inputs (tests rely on it).
Pure Python, no I/O: the live router and the trace simulation share this one function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_GUARD", "TEMPLATE_TOKENS", "LoadGuard", "REASONS", "choose", "lookup_counts",
           "prompt_bound", "whole_counts"]

REASONS = ("prefix", "load", "round_robin", "only", "retry")
_COUNTS = ("device_hit_tokens", "host_hit_tokens", "num_running", "num_waiting")
_MAX_COUNT = 1 << 53  # past what a JSON double holds exactly: no replica counts that far
# NOTE(hit-cap): a lookup's hit is the replica's word, but it cannot exceed the prompt, and the
# router knows the body: a text's tokens are at most its UTF-8 bytes (a BPE or byte-fallback
# token holds one byte or more), ids take two bytes or more each ("1,"), and the JSON around
# them only adds bytes; a chat template adds its own text (a default system prompt, special
# tokens) and the tokenizer a BOS: TEMPLATE_TOKENS more. A replica claiming 10**9 hit tokens
# for a 3-token prompt drew the request and added 10**9 to the predicted-hit counter; a claim
# is now counted and compared at most at this bound (with --kv-events the router's own index
# is bounded by the prompt's blocks already: kv_routing.py)
TEMPLATE_TOKENS = 1024


def whole_counts(answer: object, keys: Sequence[str], default: int | None = None
                 ) -> list[int] | None:
    """``answer[k]`` for each of ``keys`` (``default`` where one is missing), or None unless
    ``answer`` is an object and each is an integer in 0..2**53 (not a bool, not 1e999)."""
    if not isinstance(answer, dict):
        return None
    vals = [answer.get(k, default) for k in keys]
    return vals if all(type(v) is int and 0 <= v <= _MAX_COUNT for v in vals) else None


def prompt_bound(size: int) -> int:
    """The most tokens the prompt of a request body of ``size`` bytes can have (NOTE(hit-cap))."""
    return size + TEMPLATE_TOKENS


def lookup_counts(answer: object, most: int = _MAX_COUNT) -> tuple[int, int] | None:
    """(hit tokens, at most ``most``: NOTE(hit-cap); load) of a replica's /v1/kvpool/lookup
    answer; None unless its four counts are whole (``whole_counts``): a confused or hostile
    replica's answer scores like a silent one's (no hit, its own load), and the choice goes on
    for the others."""
    vals = whole_counts(answer, _COUNTS)
    return None if vals is None else (min(vals[0] + vals[1], most), vals[2] + vals[3])


@dataclass(frozen=True, slots=True)
class LoadGuard:
    """The imbalance thresholds (both must be exceeded for the guard to trip)."""

    abs_threshold: float = 8  # in-flight requests: max - min must exceed this
    rel_ratio: float = 1.5  # and max must exceed this times min

    def __post_init__(self) -> None:
        if self.abs_threshold < 0 or self.rel_ratio < 1:
            raise ValueError("load guard: use abs_threshold >= 0 and rel_ratio >= 1")

    def imbalanced(self, loads: Sequence[float]) -> bool:
        hi, lo = max(loads), min(loads)
        return hi - lo > self.abs_threshold and hi > self.rel_ratio * lo


DEFAULT_GUARD = LoadGuard()


def choose(hits: Sequence[int], loads: Sequence[float], guard: LoadGuard = DEFAULT_GUARD,
           rr: int = 0) -> tuple[int, str]:
    """(index of the chosen candidate, reason). ``rr`` is the caller's round-robin counter."""
    n = len(hits)
    if n == 0 or n != len(loads):
        raise ValueError(f"choose: {n} hit counts for {len(loads)} loads (need >= 1, equal)")
    if n == 1:
        return 0, "only"
    if guard.imbalanced(loads):
        return min(range(n), key=lambda i: (loads[i], i)), "load"
    best = max(hits)
    if best <= 0:
        return rr % n, "round_robin"
    return min((i for i in range(n) if hits[i] == best), key=lambda i: (loads[i], i)), "prefix"
