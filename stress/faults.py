"""FaultDriver: injects copy-engine faults and engine-step faults into a live in-process engine.

Test-only and off unless asked for (``python -m stress http --faults``, or the tests): the
engine must have been built with ``AsyncEngine(config, fault_injector=FaultInjector())``.

Kinds of fault::

    copy delay     FaultInjector.add(kind, delay=..., fail=False): a swap / copy-on-write batch
                   is slow; compute must wait for exactly the blocks it needs; outputs unchanged
    copy failure   FaultInjector.add(kind, fail=True, times=1): the request owning the batch
                   fails (500 / SSE error "KV copy failed"); nobody else notices
    swap-in burst  FaultInjector.add("swap_in", fail=True, times=k): the next k swap-ins fail.
                   With prefix caching on and a small pool this is what could poison the
                   cache (a block hashed before its bytes were copied); a later greedy probe
                   with the same prompt then reads wrong KV, which the harness counts as a
                   greedy mismatch
    step failure   EngineCore.step_fault_hook raises for the next scheduled request: that
                   request fails ("engine step failed"); the engine and the others go on

``failures_injected`` is an upper bound on the requests that may fail because of faults (a copy
failure rule whose kind never comes up fails nobody); ``pending_step_faults()`` and
``clear()`` let a caller stop injecting before it drains.
"""

from __future__ import annotations

import random
import threading
from typing import Any

__all__ = ["FaultDriver", "StepFaults"]

COPY_KINDS = ("swap_out", "swap_in", "cow")


class StepFaults:
    """A ``step_fault_hook``: raises for the next ``n`` request ids it sees (or one given id).

    Thread-safe: armed from any thread, called on the engine's step thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._any = 0
        self._ids: set[str] = set()
        self.failed: list[str] = []  # request ids it failed, in order

    def arm(self, request_id: str | None = None) -> None:
        with self._lock:
            if request_id is None:
                self._any += 1
            else:
                self._ids.add(request_id)

    def pending(self) -> int:
        with self._lock:
            return self._any + len(self._ids)

    def clear(self) -> None:
        with self._lock:
            self._any = 0
            self._ids.clear()

    def __call__(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._ids:
                self._ids.discard(request_id)
            elif self._any > 0:
                self._any -= 1
            else:
                return
            self.failed.append(request_id)
        raise RuntimeError(f"injected step fault for {request_id}")


class FaultDriver:
    """Random faults at a given rate against one engine (its FaultInjector and step hook)."""

    def __init__(self, engine: Any, seed: int = 0) -> None:
        self.engine = engine
        injector = engine.core.copies.fault_injector
        if injector is None:
            raise ValueError("fault injection needs AsyncEngine(..., "
                             "fault_injector=FaultInjector())")
        self.injector = injector
        self.steps = StepFaults()
        engine.core.step_fault_hook = self.steps
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
        self.steps.arm()
        self.step_failures_injected += 1
        return "fail step"

    def clear(self) -> None:
        """Stop injecting: drop pending copy rules and armed step faults."""
        self.injector.clear()
        self.steps.clear()

    def detach(self) -> None:
        self.clear()
        self.engine.core.step_fault_hook = None

    def figures(self) -> dict[str, int]:
        return {"fault_delays_injected": self.delays_injected,
                "fault_copy_failures_injected": self.copy_failures_injected,
                "fault_step_failures_injected": self.step_failures_injected,
                "fault_swap_in_bursts": self.swap_in_bursts,
                "fault_step_failures_fired": len(self.steps.failed)}
