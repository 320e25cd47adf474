"""vLLM's ``repetition_detection``: end a sequence early once its output ends in the same
pattern of tokens repeated, as a model caught in a loop does ("abcdabcdabcd...").

A request sends ``{"max_pattern_size": M, "min_pattern_size": m, "min_count": c}``. After
each generated token, for every pattern length ``L`` from ``m`` (1 when 0) to ``M``, the
output's last ``L * c`` tokens are checked for ``c`` copies of its last ``L``; the first
length that matches ends the sequence with ``finish_reason: "repetition"`` and
``stop_reason: "repetition_detected"`` (docs/architecture.md "vLLM's request fields").
``max_pattern_size`` 0 turns it off. The check runs only where no other stop applies: before
``min_tokens``, on an eos or stop token, and at ``max_tokens`` the sequence ends as it would
without it.

Cost: per token, at most one comparison per pattern length that mismatches at once, and the
lengths stop where ``L * c`` exceeds the output; a length that matches ends the sequence. The
output processor runs it on the engine's step thread, only for requests that ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvpool.errors import RequestError, shown

__all__ = ["RepeatStop", "tail_repeats"]

PARAM = "repetition_detection"


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


@dataclass(frozen=True, slots=True)
class RepeatStop:
    """Invariant: every field an integer >= 0, ``min_pattern_size <= max_pattern_size``, and
    ``min_count >= 2`` where ``max_pattern_size > 0`` (vLLM's RepetitionDetectionParams'
    rules; a violation is a 400 naming ``repetition_detection``)."""

    max_pattern_size: int = 0  # 0: off
    min_pattern_size: int = 0  # 0: 1
    min_count: int = 0

    def __post_init__(self) -> None:
        for name in ("max_pattern_size", "min_pattern_size", "min_count"):
            v = getattr(self, name)
            if not _is_count(v):
                raise RequestError.field(PARAM, f"{name} must be an integer >= 0, got {shown(v)}")
        if self.min_pattern_size > self.max_pattern_size:
            raise RequestError.field(PARAM, "max_pattern_size, min_pattern_size must be >= 0, "
                                     "with min_pattern_size <= max_pattern_size; set both to 0 "
                                     "to disable repetitive pattern detection")
        if self.max_pattern_size > 0 and self.min_count < 2:
            raise RequestError.field(PARAM, "min_count must be >= 2 to detect repetitive "
                                     "patterns; set max_pattern_size to 0 to disable it")

    @property
    def on(self) -> bool:
        return self.max_pattern_size > 0


def tail_repeats(ids: Sequence[int], spec: RepeatStop) -> bool:
    """Whether ``ids`` ends in ``spec.min_count`` copies of one pattern of a length in
    ``[spec.min_pattern_size or 1, spec.max_pattern_size]``."""
    count, n = spec.min_count, len(ids)
    if not spec.on:
        return False
    for length in range(max(spec.min_pattern_size, 1), spec.max_pattern_size + 1):
        span = length * count
        if span > n:
            return False
        # the last ``span`` tokens have period ``length``: compare each with the one ``length``
        # before it, nearest the end first (a mismatch there is the common case)
        if all(ids[n - k] == ids[n - k - length] for k in range(1, span - length + 1)):
            return True
    return False
