"""Sequences and sequence groups (requests): statuses, token counts, prefill units.

A request (``SequenceGroup``) owns ``n`` sequences that share its prompt blocks. A sequence's
tokens are ``prompt + output``; its block table (in the BlockSpaceManager) holds the KV of::

    prefill (unit.computed < unit.num_tokens)   table = all tokens at admission, KV written for
                                                [0, unit.computed); chunks fill the rest
    decoding                                    table = prompt + output[:-1]; the last sampled
                                                token gets its slot when the next step is
                                                scheduled (append_slots) and its KV then
    awaiting                                    table = prompt + output: the step computed the
                                                last token's KV but the runtime deferred its
                                                sample (a late grammar mask); no step schedules
                                                it until ``accept_late`` brings the token

A ``PrefillUnit`` is one prompt computation shared by the sequences listed in it: normally all
``n`` sequences of a fresh request; after a recompute preemption, sequences whose outputs
differ each get their own unit (their "prompt for recompute" is prompt + their own output).
Those units still hold their common prefix once: the first unit computes its full blocks, the
others reuse them (``after`` / ``shared_tokens``) and start computing where they end::

    prompt 32 tokens, bs 8, outputs [a b c] and [d e f]
    unit 0   [p0-7][p8-15][p16-23][p24-31][a b c]      computes tokens 0..34
    unit 1   (the same four blocks)       [d e f]      computes 32..34 once unit 0 has 32
"""

from __future__ import annotations

import enum
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class SeqStatus(enum.Enum):
    """Lifecycle of a sequence (and, for the live ones, of its request)."""

    WAITING = "waiting"  # holds no block; queued for (re)admission
    RUNNING = "running"  # holds device blocks
    SWAPPED = "swapped"  # holds host blocks
    FINISHED_STOPPED = "finished_stopped"  # eos / stop token / runtime stop string
    FINISHED_LENGTH = "finished_length"  # max_tokens or max_model_len reached
    FINISHED_ABORTED = "finished_aborted"  # abort() or the runtime failed it
    FINISHED_IGNORED = "finished_ignored"  # can never be served (the reason says why)

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({SeqStatus.FINISHED_STOPPED, SeqStatus.FINISHED_LENGTH,
                       SeqStatus.FINISHED_ABORTED, SeqStatus.FINISHED_IGNORED})


@runtime_checkable
class StopParams(Protocol):
    """What the scheduler reads from a request's (otherwise opaque) sampling parameters. Any
    object with these attributes works; missing ones take RequestParams' defaults."""

    max_tokens: int | None
    n: int
    stop_token_ids: Seq[int]
    ignore_eos: bool


@dataclass(frozen=True, slots=True)
class RequestParams:
    """A minimal StopParams (the runtime may pass its own SamplingParams instead)."""

    max_tokens: int | None = 16  # output tokens per sequence; None = up to max_model_len
    n: int = 1  # sequences sampled from the prompt (they share the prompt's blocks)
    stop_token_ids: tuple[int, ...] = ()  # tokens that finish a sequence (FINISHED_STOPPED)
    ignore_eos: bool = False  # keep generating after the eos token
    eos_token_id: int | None = None  # overrides SchedulerConfig.eos_token_id when set


@dataclass(frozen=True, slots=True)
class StopLimits:
    """StopParams resolved once per request (read on every sampled token)."""

    max_tokens: int  # output tokens per sequence
    n: int  # sequences
    stop_ids: frozenset[int]  # finishing tokens, eos included unless ignore_eos
    eos_token_id: int | None  # the eos in effect (for the finish reason)

    @classmethod
    def resolve(cls, params: Any, default_eos: int | None, max_model_len: int,
                prompt_len: int, other_eos: tuple[int, ...] = ()) -> StopLimits:
        max_tokens = getattr(params, "max_tokens", 16)
        if max_tokens is None:
            max_tokens = max(1, max_model_len - prompt_len)
        stop, eos = cls.stop_tokens(params, default_eos, other_eos)
        n = getattr(params, "n", 1)
        return cls(int(max_tokens), 1 if n is None else int(n), _shared(stop), eos)

    @staticmethod
    def stop_tokens(params: Any, default_eos: int | None, other_eos: tuple[int, ...] = ()
                    ) -> tuple[frozenset[int], int | None]:
        """The tokens that finish a sequence (stop_token_ids, and unless ignore_eos the eos in
        effect and the model's ``other_eos``), and that eos (None under ignore_eos:
        NOTE(ignore-eos-stop)): the one rule the scheduler and the detokenizer share.

        NOTE(eos-ids): a model may end a turn on any of several ids (Llama 3.x Instruct's
        generation_config lists <|end_of_text|>, <|eom_id|> and <|eot_id|>; Phi-3's adds
        <|end|>). vLLM stops on each: the tokenizer's eos, and the rest as stop_token_ids (so
        their stop_reason is the id). Only the first stopped here: a Llama 3.2 chat ran past
        <|eot_id|> to max_tokens, writing the user's next turn itself."""
        eos = getattr(params, "eos_token_id", None)
        eos = default_eos if eos is None else eos
        stop = set(getattr(params, "stop_token_ids", None) or ())
        if getattr(params, "ignore_eos", False):
            # NOTE(ignore-eos-stop): under ignore_eos vLLM sets no eos_token_id
            # (update_from_generation_config), so an eos listed in stop_token_ids stops as a
            # stop token: stop_reason is its id, not null as for the model's own end
            return frozenset(stop), None
        stop.update(other_eos)
        if eos is not None:
            stop.add(eos)
        return frozenset(stop), eos


_STOP_SETS: dict[frozenset[int], frozenset[int]] = {}


def _shared(stop: frozenset[int]) -> frozenset[int]:
    """One object per common stop set (none, or the eos alone), so that the check every token
    makes reads memory shared by all requests (NOTE(speed)); bounded."""
    if len(stop) > 1:
        return stop
    if len(_STOP_SETS) >= 64 and stop not in _STOP_SETS:
        return stop
    return _STOP_SETS.setdefault(stop, stop)


@dataclass(slots=True, eq=False)
class PrefillUnit:
    """One prompt computation. Invariant: ``cached <= computed <= num_tokens``; every sequence
    in ``seqs`` has the same tokens ``[0, num_tokens)`` and shares the unit's prompt blocks."""

    seqs: list[Sequence]  # sequences fed by this computation (the first one leads)
    num_tokens: int  # tokens to compute before sampling resumes (prompt [+ output])
    block_hashes: list[bytes]  # full-block hashes of those tokens (prefix-cache keys)
    computed: int = 0  # tokens whose KV is written (set to the prefix hits on allocation)
    cached: int = 0  # tokens served by the prefix cache at allocation
    after: PrefillUnit | None = None  # the unit computing this one's shared blocks
    shared_tokens: int = 0  # leading tokens (full blocks) whose blocks ``after`` holds too

    @property
    def lead(self) -> Sequence:
        return self.seqs[0]

    def allocated(self, cached: int) -> None:
        """Its tables exist; the prefix cache served their first ``cached`` tokens. A unit
        reusing shared blocks starts computing after them (when they are not all hits)."""
        self.cached = self.computed = cached
        if self.after is not None:
            if cached >= self.shared_tokens:
                self.after = None
            else:
                self.computed = self.shared_tokens

    def waits(self) -> bool:
        """Whether this unit must not compute yet: the unit it shares blocks with has not
        written them. When that unit's sequences all finished first, the first unit still
        waiting on it computes the shared part itself (the others then wait on that one)."""
        first = self.after
        if first is None:
            return False
        if first.computed >= self.shared_tokens:
            self.after = None
            return False
        if any(s.unit is first for s in first.seqs):
            return True
        waiting = [u for u in self.lead.group.units or () if u.after is first]
        heir = waiting[0]
        heir.after = None
        heir.computed = max(heir.cached, min(heir.computed, first.computed))
        for u in waiting[1:]:
            u.after = heir
        return self is not heir

    def token_ids(self, start: int, end: int) -> list[int]:
        return self.seqs[0].token_slice(start, end)


@dataclass(slots=True, eq=False)
class Sequence:
    """One generated continuation. Invariant: ``status`` is WAITING/RUNNING/SWAPPED exactly
    while the sequence is live; it holds a block table in the manager exactly while RUNNING or
    SWAPPED; ``unit`` is set exactly while its prompt is still being computed."""

    seq_id: int  # key in the BlockSpaceManager; unique per scheduler
    group: SequenceGroup  # the request it belongs to
    status: SeqStatus = SeqStatus.WAITING  # lifecycle (see SeqStatus)
    output_token_ids: list[int] = field(default_factory=list)  # sampled tokens, for the user
    unit: PrefillUnit | None = None  # the prefill in progress, or None while decoding
    finish_reason: str | None = None  # why it finished (stop token, length, abort, ...)
    awaiting: bool = False  # its sample was deferred: the runtime owes its next token
    # NOTE(speed): what StepCompletion reads per token, kept here so that a decode's common
    # token touches this object alone: a token is judged in full (StepCompletion._judge) once
    # the outputs reach ``judge_at`` (0 before the first judgement, so the first token always
    # is; then the length limits) or when it is in ``stop_ids`` (the request's, once judged)
    judge_at: int = 0
    stop_ids: frozenset[int] = frozenset()

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.group.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self.group.prompt_token_ids) + len(self.output_token_ids)

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``[start, end)`` of prompt + output, without building the whole list."""
        prompt = self.group.prompt_token_ids
        p = len(prompt)
        if end <= p:
            return prompt[start:end]
        out = self.output_token_ids
        if start >= p:
            return out[start - p:end - p]
        return prompt[start:] + out[:end - p]

    def all_token_ids(self) -> list[int]:
        return self.group.prompt_token_ids + self.output_token_ids


@dataclass(slots=True, eq=False)
class SequenceGroup:
    """A request: a prompt, its sequences and its stop limits.

    Invariant: every live sequence has the group's ``status``; ``sort_key`` never changes (the
    queues are kept sorted by it); ``prompt_block_hashes`` is computed once, on first use.
    """

    request_id: str  # caller's id, unique among unfinished requests
    prompt_token_ids: list[int]  # the user's prompt (never extended)
    params: Any  # opaque sampling parameters, handed back untouched
    limits: StopLimits  # resolved stop conditions
    priority: int  # smaller is served first under the priority policy
    arrival_time: float  # caller's clock (seconds)
    order: int  # submission counter: the FCFS tie-break
    sort_key: tuple  # queue position: (arrival, order) or (priority, arrival, order)
    cache_salt: str | None = None  # prefix-cache isolation domain (tenant)
    tenant: str = ""  # fairness domain: who the server says sent it ("": anonymous)
    # every admission computes the whole prompt, its blocks still cached for others: vLLM's
    # Request.skip_reading_prefix_cache (NOTE(skip-read) in kvpool/core/block_table.py)
    skip_reading_prefix_cache: bool = False
    seqs: list[Sequence] = field(default_factory=list)  # all sequences, finished included
    status: SeqStatus = SeqStatus.WAITING  # status of the live sequences
    units: list[PrefillUnit] | None = None  # admission units, built while WAITING
    prompt_block_hashes: list[bytes] | None = None  # hasher.hash_blocks(prompt, salt), memoised
    num_cached_tokens: int | None = None  # prefix hits at first admission (None: not yet)
    first_scheduled_time: float | None = None  # when its first chunk was scheduled
    first_token_time: float | None = None  # when its first token was sampled
    finished_time: float | None = None  # when its last sequence finished
    num_preemptions: int = 0  # times preempted (either mode)
    finish_reason: str | None = None  # request-level reason (abort / ignore)
    # the step whose swap-out copy is not confirmed yet (None: none; NOTE(swap-out-confirm))
    swap_out_step: int | None = None
    prompt_len: int = field(default=0, init=False)  # len(prompt_token_ids), which never changes

    def __post_init__(self) -> None:
        self.prompt_len = len(self.prompt_token_ids)

    @property
    def live_seqs(self) -> list[Sequence]:
        return [s for s in self.seqs if not s.status.is_finished]

    @property
    def num_live(self) -> int:
        return sum(1 for s in self.seqs if not s.status.is_finished)

    @property
    def is_finished(self) -> bool:
        return all(s.status.is_finished for s in self.seqs)

    @property
    def is_prefilling(self) -> bool:
        return any(s.unit is not None for s in self.seqs if not s.status.is_finished)

    def set_status(self, status: SeqStatus) -> None:
        self.status = status
        for s in self.seqs:
            if not s.status.is_finished:
                s.status = status
