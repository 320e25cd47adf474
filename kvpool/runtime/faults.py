"""FaultPlan: the one place where failures may be injected into the runtime.

The product calls it at three points and its default does nothing there:

    CopyEngine worker   plan.before_copy(kind, pairs, tag)  before each batch runs; an exception
                        fails that batch alone (its request fails, nobody else)
    EngineCore.step     plan.on_step(request_id)            once per scheduled request, after
                        the copies and before the forward; an exception fails that request
    grammar mask thread plan.before_mask(seq_ids)           before each token mask of those
                        sequences is computed; a delay makes the mask late (row_sampler.py)

Implementations that do inject (rules, delays, armed request ids) live with the tests and the
stress harness (``stress/faults.py``); the product never builds one itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["NO_FAULTS", "FaultPlan"]


class FaultPlan:
    """No faults. Subclass and override any hook; they may be called from other threads
    (``before_copy`` on the copy worker, ``on_step`` on the step thread, ``before_mask`` on
    the grammar mask thread)."""

    def before_copy(self, kind: str, pairs: Sequence[tuple[int, int]], tag: Any) -> None:
        """Called by the copy worker before a batch of ``kind`` copies ``pairs`` (``tag`` is
        the submitter's, e.g. the request id). Raise to fail the batch; sleep to delay it."""

    def on_step(self, request_id: str) -> None:
        """Called by the engine step for each request it is about to compute. Raise to fail
        that request as if its part of the step had raised."""

    def before_mask(self, seq_ids: Sequence[int]) -> None:
        """Called on the grammar mask thread before the token mask of ``seq_ids`` is
        computed. Sleep (or block) to make the mask late."""


NO_FAULTS = FaultPlan()  # shared default: stateless
