"""The operations the event loop hands the AsyncEngine's step thread (through its inbox).

Plain frozen objects, built on the loop and read once by the step thread; the inbox deque is
their only shared state (one atomic extend per loop iteration, popleft on the other side).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvpool.runtime.model import SamplingParams

if TYPE_CHECKING:
    from kvpool.runtime.engine.core import EngineCore


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Queue a request in the EngineCore (its stream already exists on the loop)."""

    request_id: str
    prompt_ids: list[int]  # validated by EngineCore.validate on the loop
    params: SamplingParams
    cache_salt: str | None  # tenant isolation of the prefix cache
    priority: int  # smaller is served first under the priority policy
    arrival: float  # time.monotonic() at generate()
    tenant: str | None = None  # fair-scheduling identity (server/tenant.py), None: anonymous
    remote: object | None = None  # remote_reader.FetchedPrefix: prefix fetched into host blocks


@dataclass(frozen=True, slots=True)
class AbortRequest:
    """Abort a request in any state (idempotent: an unknown id is a no-op)."""

    request_id: str


@dataclass(frozen=True, slots=True)
class ResetPrefixCache:
    """Reset the prefix cache between two steps (EngineCore.reset_prefix_cache); the step
    thread sets ``result`` to its answer (or its failure), the loop awaits it."""

    reset_running_requests: bool
    result: Future = field(default_factory=Future)

    def run(self, core: EngineCore) -> None:
        try:
            self.result.set_result(core.reset_prefix_cache(self.reset_running_requests))
        except Exception as e:  # noqa: BLE001 - the caller's answer, not the step loop's end
            self.result.set_exception(e)


EngineOp = AddRequest | AbortRequest | ResetPrefixCache
