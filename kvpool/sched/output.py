"""Plain objects the scheduler hands to the runtime: one step's work and finished requests.

Nothing here references scheduler or manager internals; the runtime may keep them as long as
it likes. Every scheduled entry carries what the forward needs (input tokens, first position,
the block ids it reads and writes) and every copy names the request it serves, so the runtime
never asks the manager again. A step is executed in this order (swap-outs free device blocks
that later items of the same step may reuse, and defrag copies must see the KV that the step's
compute writes)::

    1. copies of kind swap_out   (device -> host), one CopyBatch per request
    2. copies of kind swap_in    (host -> device)
    3. copies of kind cow        (copy-on-write, device -> device)
    4. model forward: prefills (chunks) and decodes, then sampling
    5. defrag_moves              (device -> device), then on_step_done(...) commits the plan
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kvpool.sched.config import PreemptionMode
from kvpool.sched.sequence import SeqStatus


@dataclass(frozen=True, slots=True)
class ScheduledPrefill:
    """Compute prompt tokens ``[start, end)`` of one prefill unit this step.

    The KV of ``[0, start)`` is already in the cache (earlier chunks, prefix hits, or the
    shared blocks another unit of the request wrote in an earlier step: sequence.py);
    ``block_ids`` is the table of ``seq_ids[0]`` (all listed sequences share those blocks).
    When ``is_last``, sample one token per sequence in ``seq_ids`` from the logits of position
    ``end - 1`` (``sample_seq_ids``).
    """

    request_id: str  # the request (sequence group)
    seq_ids: tuple[int, ...]  # sequences sharing this computation
    start: int  # first token position computed this step
    end: int  # one past the last position computed this step
    num_tokens: int  # length of the whole prompt being computed (prompt [+ recomputed output])
    num_cached_tokens: int  # prefix-cache tokens skipped this step (first chunk only, else 0)
    token_ids: list[int]  # the tokens [start, end)
    block_ids: list[int]  # the blocks the forward reads and writes (table of seq_ids[0])
    # the request had its first token: this is a recompute after a preemption, which vLLM's
    # iteration stats do not count again (NOTE(iteration-tokens), SchedulerOutput.stats_tokens)
    recompute: bool = False

    @property
    def is_last(self) -> bool:
        return self.end == self.num_tokens

    @property
    def input_ids(self) -> list[int]:
        """The tokens this entry feeds the forward (positions ``start`` onwards)."""
        return self.token_ids

    @property
    def sample_seq_ids(self) -> tuple[int, ...]:
        """Sequences that get a sampled token from this entry's last position."""
        return self.seq_ids if self.end == self.num_tokens else ()

    @property
    def num_new_tokens(self) -> int:
        return self.end - self.start


@dataclass(slots=True)  # NOTE(speed): not frozen (3x cheaper to build); treat as read-only
class ScheduledDecode:
    """Feed ``token_id`` at ``position`` of ``seq_id`` (its slot is reserved), sample one."""

    request_id: str  # the request (sequence group)
    seq_id: int  # the sequence
    token_id: int  # input token: the last sampled one
    position: int  # its index in the sequence (num_tokens - 1)
    block_ids: list[int]  # the sequence's block table, the new token's slot included

    @property
    def start(self) -> int:
        return self.position

    @property
    def input_ids(self) -> list[int]:
        return [self.token_id]

    @property
    def seq_ids(self) -> tuple[int, ...]:
        return (self.seq_id,)

    @property
    def sample_seq_ids(self) -> tuple[int, ...]:
        return (self.seq_id,)


class DecodeBatch:
    """A step's decodes, column by column: entry ``i`` is ``ScheduledDecode(request_ids[i],
    seq_ids[i], token_ids[i], positions[i], block_ids[i])``. It reads like a list of them
    (``len``, iteration, indexing); a runtime that builds tensors reads the columns.
    NOTE(columns): a step allocates a few lists, not one object per sequence; objects made
    per sequence per step, alive across the next schedule(), start a collection per step
    once a batch outnumbers the collector's threshold (700), which made a sequence cost more
    in a batch of 1024 than of 256 (docs/benchmarks.md, bench.sched)."""

    __slots__ = ("request_ids", "seq_ids", "token_ids", "positions", "block_ids", "_items")

    def __init__(self) -> None:
        self.request_ids: list[str] = []
        self.seq_ids: list[int] = []
        self.token_ids: list[int] = []  # input tokens: each sequence's last sampled one
        self.positions: list[int] = []  # their indices in the sequences (num_tokens - 1)
        self.block_ids: list[list[int]] = []  # block tables, the new slots included
        self._items: list[ScheduledDecode] | None = None

    def extend(self, request_ids: list[str], seq_ids: list[int], token_ids: list[int],
               positions: list[int], block_ids: list[list[int]]) -> None:
        """Add entries (the scheduler, while it plans the step)."""
        self.request_ids += request_ids
        self.seq_ids += seq_ids
        self.token_ids += token_ids
        self.positions += positions
        self.block_ids += block_ids
        self._items = None

    def _entries(self) -> list[ScheduledDecode]:
        """The entries as objects, made on first use and kept."""
        if self._items is None:
            self._items = list(map(ScheduledDecode, self.request_ids, self.seq_ids,
                                   self.token_ids, self.positions, self.block_ids))
        return self._items

    def __len__(self) -> int:
        return len(self.seq_ids)

    def __iter__(self) -> Iterator[ScheduledDecode]:
        return iter(self._entries())

    def __getitem__(self, i: int) -> ScheduledDecode:
        return self._entries()[i]

    def __eq__(self, other: object) -> bool:
        """Equal to a list (or batch) of the same entries, as the list it replaced was."""
        if isinstance(other, DecodeBatch):
            other = list(other)
        return self._entries() == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable while the step is planned

    def __repr__(self) -> str:
        return f"DecodeBatch({self._entries()!r})"


COPY_ORDER = ("swap_out", "swap_in", "cow")  # execution order of a step's copy kinds


@dataclass(slots=True)
class CopyBatch:
    """Block copies one request needs before this step's forward (or, for a swap-out, before
    its device blocks are reused). A failed batch fails ``request_id`` alone."""

    kind: str  # one of COPY_ORDER
    request_id: str  # the request whose blocks these are
    pairs: list[tuple[int, int]]  # (src, dst): swap_out (device, host), swap_in (host,
    #                               device), cow (device src, device dst)


@dataclass(frozen=True, slots=True)
class PreemptedRequest:
    """A request that gave back its device blocks this step."""

    request_id: str  # the request
    mode: PreemptionMode  # SWAP (blocks in blocks_to_swap_out) or RECOMPUTE (back to WAITING)
    seq_ids: tuple[int, ...]  # its live sequences
    num_blocks: int  # distinct device blocks it held
    cause: str  # "decode" (no room to append) or "priority" (a higher priority waits)


@dataclass(frozen=True, slots=True)
class SeqOutput:
    """The final state of one sequence."""

    seq_id: int  # the sequence
    output_token_ids: list[int]  # everything it generated (kept across preemptions)
    status: SeqStatus  # one of the FINISHED_* statuses
    finish_reason: str | None  # e.g. "eos", "stop_token 7", "max_tokens", "aborted"

    @property
    def stop_token(self) -> int | None:
        """The stop token id that ended it; None for any other end, the eos included (vLLM's
        stop_reason is null for the model's own end: NOTE(ignore-eos-stop))."""
        r = self.finish_reason
        return int(r.split()[-1]) if r is not None and r.startswith("stop_token ") else None

    @property
    def by_stop_id(self) -> bool:
        """Its last token ended it as a stop id (the eos, another eos id, a stop_token_ids
        id): vLLM's ``stop_terminated``, the token whose text the detokenizer leaves out. A
        stop string or a completed grammar is a FINISHED_STOPPED too, but not this."""
        r = self.finish_reason
        return r == "eos" or (r is not None and r.startswith("stop_token "))


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """A request that left the scheduler (finished, aborted or ignored); its blocks are freed."""

    request_id: str  # the request
    status: SeqStatus  # request-level outcome: ABORTED/IGNORED, else the first sequence's
    reason: str | None  # why (IGNORED: the clear reason it can never be served)
    seqs: tuple[SeqOutput, ...]  # per sequence
    num_prompt_tokens: int  # user prompt length
    num_cached_tokens: int  # prompt tokens served by the prefix cache at first admission
    arrival_time: float  # as given to add_request
    first_scheduled_time: float | None  # first chunk scheduled (queueing = this - arrival)
    first_token_time: float | None  # first token sampled (TTFT = this - arrival)
    finished_time: float | None  # last sequence finished
    num_preemptions: int  # times preempted
    params: object  # the caller's sampling parameters, untouched

    @property
    def output_token_ids(self) -> list[int]:
        """The first sequence's output (the only one when n == 1)."""
        return self.seqs[0].output_token_ids if self.seqs else []


@dataclass(slots=True)
class SchedulerOutput:
    """Everything the runtime does in one step. Built by ``Scheduler.schedule``; hand it back
    to ``on_step_done`` unchanged (outputs without ``has_work`` need not be)."""

    step_id: int  # increasing per schedule() call
    prefills: list[ScheduledPrefill] = field(default_factory=list)  # chunks to compute
    decodes: DecodeBatch = field(default_factory=DecodeBatch)  # one token each
    copies: list[CopyBatch] = field(default_factory=list)  # per request, via add_copies
    defrag_moves: tuple[tuple[int, int], ...] = ()  # (src, dst) device copies after compute
    defrag_plan_id: int | None = None  # the plan to commit/abort (defrag_done)
    preempted: list[PreemptedRequest] = field(default_factory=list)  # this step's victims
    ignored: list[FinishedRequest] = field(default_factory=list)  # rejected (FINISHED_IGNORED)
    num_batched_tokens: int = 0  # prefill chunk tokens + decodes
    # sequences swapped in this step: on_step_done confirms their copies (prefix hashes then)
    swapped_in: list[int] = field(default_factory=list)

    @property
    def stats_tokens(self) -> int:
        """NOTE(iteration-tokens): the tokens vLLM's iteration stats count for this step: the
        batched tokens less those recomputing a preempted request's prompt (vLLM counts a
        prompt once, at its first token), plus the token each recomputed sequence samples."""
        n = self.num_batched_tokens
        for p in self.prefills:
            if p.recompute:
                n += len(p.sample_seq_ids) - p.num_new_tokens
        return n

    def add_copies(self, kind: str, request_id: str, pairs: list[tuple[int, int]]) -> None:
        """Record copies of ``request_id``; consecutive calls for one request share a batch."""
        if not pairs:
            return
        last = self.copies[-1] if self.copies else None
        if last is not None and last.kind == kind and last.request_id == request_id:
            last.pairs.extend(pairs)
        else:
            self.copies.append(CopyBatch(kind, request_id, list(pairs)))

    def copies_in_order(self) -> list[CopyBatch]:
        """The copy batches in execution order (see the module docstring; stable by kind)."""
        return sorted(self.copies, key=lambda c: COPY_ORDER.index(c.kind))

    def _pairs(self, kind: str) -> list[tuple[int, int]]:
        return [p for c in self.copies if c.kind == kind for p in c.pairs]

    @property
    def blocks_to_swap_in(self) -> list[tuple[int, int]]:
        """Every (host, device) swap-in pair of this step (a read-only view)."""
        return self._pairs("swap_in")

    @property
    def blocks_to_swap_out(self) -> list[tuple[int, int]]:
        """Every (device, host) swap-out pair of this step (a read-only view)."""
        return self._pairs("swap_out")

    @property
    def blocks_to_copy(self) -> list[tuple[int, int]]:
        """Every copy-on-write (src, dst) pair of this step (a read-only view)."""
        return self._pairs("cow")

    @property
    def entries(self) -> list[ScheduledPrefill | ScheduledDecode]:
        """What the forward computes: the prefill chunks, then the decodes."""
        return [*self.prefills, *self.decodes]

    @property
    def num_seqs(self) -> int:
        """Sequences computed this step (decodes plus sequences of prefill chunks)."""
        return len(self.decodes) + sum(len(p.seq_ids) for p in self.prefills)

    @property
    def has_work(self) -> bool:
        """Whether the runtime must run a step (compute or copies) and call on_step_done."""
        return bool(self.prefills or self.decodes or self.copies or self.defrag_moves)


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """Counters and gauges for metrics (a snapshot; counters are monotonic)."""

    step: int  # schedule() calls so far
    num_running: int  # requests RUNNING
    num_waiting: int  # requests WAITING
    num_swapped: int  # requests SWAPPED
    num_running_seqs: int  # live sequences in RUNNING requests
    num_waiting_seqs: int  # live sequences in WAITING requests (an n > 1 request's n)
    num_swapped_seqs: int  # live sequences in SWAPPED requests
    preemptions: dict[str, int]  # by mode: {"swap": n, "recompute": n}
    swap_out_blocks: int  # blocks scheduled device -> host
    swap_in_blocks: int  # blocks scheduled host -> device
    cow_blocks: int  # copy-on-write copies scheduled
    prefix_hit_tokens: int  # prompt tokens served by the prefix cache at admission
    prompt_tokens: int  # prompt tokens computed (prefill chunks scheduled)
    generation_tokens: int  # tokens sampled and accepted
    finished: int  # requests finished (stopped or length)
    aborted: int  # requests aborted
    ignored: int  # requests rejected as never servable
    defrag_plans: int  # defrag plans emitted
    defrag_moves: int  # defrag moves committed
    defrag_retried: int  # planned moves dropped at commit (a table changed)
    defrag_aborted: int  # plans aborted (copies failed)
    preempted_seqs: int  # live sequences of the preempted requests (NOTE(preempted-seqs))

    @property
    def seqs_by_state(self) -> dict[str, int]:
        """Live sequences by queue (the metrics' MetricsSnapshot.sequences)."""
        return {"running": self.num_running_seqs, "waiting": self.num_waiting_seqs,
                "swapped": self.num_swapped_seqs}
