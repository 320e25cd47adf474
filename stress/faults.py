"""Fault injection for the tests and the stress harness: InjectedFaults (a FaultPlan that
fails or delays copies and fails engine steps) and FaultDriver (random faults at a rate).

Off unless asked for (``python -m stress http --faults``, or the tests): build the engine with
``AsyncEngine(config, faults=InjectedFaults())``; the product only knows the no-op
:class:`kvpool.runtime.faults.FaultPlan` it calls.

Kinds of fault::

    copy delay     InjectedFaults.add(kind, delay=..., fail=False): a swap / copy-on-write batch
                   is slow; compute must wait for exactly the blocks it needs; outputs unchanged
    copy failure   InjectedFaults.add(kind, fail=True, times=1): the request owning the batch
                   fails (500 / SSE error "KV copy failed"); nobody else notices
    swap-in burst  InjectedFaults.add("swap_in", fail=True, times=k): the next k swap-ins fail.
                   With prefix caching on and a small pool this is what could poison the
                   cache (a block hashed before its bytes were copied); a later greedy probe
                   with the same prompt then reads wrong KV, which the harness counts as a
                   greedy mismatch
    step failure   InjectedFaults.arm(): on_step raises for the next scheduled request: that
                   request fails ("engine step failed"); the engine and the others go on

``failures_injected`` is an upper bound on the requests that may fail because of faults (a copy
failure rule whose kind never comes up fails nobody); ``pending_steps()`` and ``clear()`` let
a caller stop injecting before it drains.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.kv.copy_engine import COPY_KINDS as ALL_COPY_KINDS

__all__ = ["FaultDriver", "InjectedFaults"]

COPY_KINDS = ("swap_out", "swap_in", "cow")  # the kinds the driver picks from


@dataclass(slots=True)
class _CopyRule:
    kind: str | None  # None matches every kind
    block: int | None  # matches a batch whose pairs mention this id (src or dst); None: any
    delay: float  # seconds to sleep before the copy (busy blocks stay busy meanwhile)
    fail: bool  # raise instead of copying
    times: int | None  # batches left to affect; None = forever


class InjectedFaults(FaultPlan):
    """Copy rules and armed step faults; thread-safe (rules are added from any thread, copies
    consult them on the copy worker, steps on the step thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_CopyRule] = []
        self._any = 0  # step faults armed for whichever request comes next
        self._ids: set[str] = set()  # step faults armed for these request ids
        self.failed: list[str] = []  # request ids a step fault failed, in order

    # ------------------------------------------------------------------ copies
    def add(self, kind: str | None = None, block: int | None = None, *, delay: float = 0.0,
            fail: bool = True, times: int | None = 1) -> None:
        """Make the next ``times`` matching copy batches sleep ``delay`` s, then fail
        (``fail``) or copy normally."""
        if kind is not None and kind not in ALL_COPY_KINDS:
            raise ValueError(f"unknown copy kind {kind!r}: use one of "
                             f"{', '.join(ALL_COPY_KINDS)}")
        with self._lock:
            self._rules.append(_CopyRule(kind, block, float(delay), bool(fail), times))

    def before_copy(self, kind: str, pairs: Sequence[tuple[int, int]], tag: Any) -> None:
        delay, fail = 0.0, None
        with self._lock:
            for rule in self._rules:
                if rule.kind not in (None, kind):
                    continue
                if rule.block is not None and not any(rule.block in p for p in pairs):
                    continue
                delay += rule.delay
                if rule.fail and fail is None:
                    fail = rule
                if rule.times is not None:
                    rule.times -= 1
            self._rules = [r for r in self._rules if r.times is None or r.times > 0]
        if delay:
            time.sleep(delay)
        if fail is not None:
            raise RuntimeError(f"injected copy fault (kind={fail.kind}, block={fail.block})")

    # ------------------------------------------------------------------ steps
    def arm(self, request_id: str | None = None) -> None:
        """Fail the next scheduled request (or ``request_id`` when it is next scheduled)."""
        with self._lock:
            if request_id is None:
                self._any += 1
            else:
                self._ids.add(request_id)

    def pending_steps(self) -> int:
        with self._lock:
            return self._any + len(self._ids)

    def on_step(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._ids:
                self._ids.discard(request_id)
            elif self._any > 0:
                self._any -= 1
            else:
                return
            self.failed.append(request_id)
        raise RuntimeError(f"injected step fault for {request_id}")

    def clear(self) -> None:
        """Drop every copy rule and armed step fault."""
        with self._lock:
            self._rules.clear()
            self._any = 0
            self._ids.clear()


class FaultDriver:
    """Random faults at a given rate through the InjectedFaults an engine was built with."""

    def __init__(self, faults: InjectedFaults, seed: int = 0) -> None:
        if not isinstance(faults, InjectedFaults):
            raise TypeError(f"FaultDriver needs the InjectedFaults the engine was built with "
                            f"(AsyncEngine(config, faults=...)), not {type(faults).__name__}")
        self.injector = faults
        self.rng = random.Random(seed)
        self.delays_injected = 0
        self.copy_failures_injected = 0
        self.step_failures_injected = 0
        self.swap_in_bursts = 0

    @property
    def failures_injected(self) -> int:
        return self.copy_failures_injected + self.step_failures_injected

    def inject_one(self) -> str:
        """One random fault; returns its description."""
        r = self.rng.random()
        kind = self.rng.choice(COPY_KINDS)
        if r < 0.4:
            delay = self.rng.uniform(0.01, 0.08)
            self.injector.add(kind, delay=delay, fail=False, times=self.rng.randint(1, 3))
            self.delays_injected += 1
            return f"delay {kind} {delay * 1000:.0f}ms"
        if r < 0.6:
            self.injector.add(kind, fail=True, times=1)
            self.copy_failures_injected += 1
            return f"fail {kind}"
        if r < 0.8:
            k = self.rng.randint(1, 3)
            self.injector.add("swap_in", fail=True, times=k)
            self.copy_failures_injected += k  # each failed batch fails one request at most
            self.swap_in_bursts += 1
            return f"fail swap_in x{k}"
        self.injector.arm()
        self.step_failures_injected += 1
        return "fail step"

    def clear(self) -> None:
        """Stop injecting: drop pending copy rules and armed step faults."""
        self.injector.clear()

    def figures(self) -> dict[str, int]:
        return {"fault_delays_injected": self.delays_injected,
                "fault_copy_failures_injected": self.copy_failures_injected,
                "fault_step_failures_injected": self.step_failures_injected,
                "fault_swap_in_bursts": self.swap_in_bursts,
                "fault_step_failures_fired": len(self.injector.failed)}
