"""BlockTable: one sequence's ordered list of physical blocks, plus its hashing state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvpool.core.block import Device
from kvpool.core.hashing import ExtraKey
from kvpool.errors import InvariantError, UnknownSequenceError


@dataclass(frozen=True, slots=True)
class SeqAlloc:
    """One allocation in a batch: sequences ``seq_ids`` share the prompt ``token_ids``.

    With ``share_with``, the new tables reuse that (device) table's first ``num_shared``
    blocks, which hold the same tokens: the recompute of a request whose sequences diverged
    keeps one copy of their common prefix. Those blocks' KV is whatever that table's owner
    computes; the allocation counts it as cached only where it is a prefix-cache hit.

    NOTE(preempted-queries): ``resumed`` says the sequences come back after a recompute
    preemption (their request was admitted before). Their lookup finds their own earlier
    blocks (preemption keeps them findable), so its query and hit tokens go to
    ``preempted_query_tokens`` / ``preempted_hit_tokens``, not to the prefix-cache counters
    of first admissions, as vLLM's PrefixCacheStats books a request with num_preemptions > 0
    under preempted_queries / preempted_hits. Only a successful allocation is counted (vLLM
    records at admission, never a lookup that was not scheduled).

    NOTE(skip-read): ``skip_read`` allocates as if nothing were cached (no hits, the lookup
    not counted) but hashes the new tables' full blocks under ``cache_salt`` as usual, so they
    are indexed (and published) once computed and later prompts hit them: vLLM's
    ``Request.skip_reading_prefix_cache`` (a request that needs every prompt position's
    logits, kvpool/runtime/engine/prompt_logprobs.py)."""

    seq_ids: Sequence[int]
    token_ids: Sequence[int]
    block_hashes: Sequence[bytes] | None = None  # precomputed prompt hashes (else hashed here)
    cache_salt: str | None = None  # tenant isolation, mixed into the first block's hash
    extra_keys: Sequence[ExtraKey] | None = None  # e.g. multimodal keys, mixed into each hash
    share_with: int | None = None  # a sequence whose leading blocks the new tables reuse
    num_shared: int = 0  # how many of its leading (full) blocks
    resumed: bool = False  # re-admits preempted sequences: NOTE(preempted-queries)
    skip_read: bool = False  # looks nothing up, still caches its blocks: NOTE(skip-read)


@dataclass(slots=True, eq=False)
class BlockTable:
    """Where a sequence's KV lives: logical block ``i`` is physical block ``blocks[i]``.

    Invariant: ``len(blocks) == ceil(num_tokens / block_size)``; only ``blocks[-1]`` may be
    partially filled; with prefix caching ``len(hashes) == num_tokens // block_size`` and
    ``len(tail) == num_tokens % block_size``; ``num_registered <= len(hashes)``;
    ``num_computed <= num_tokens`` (slots beyond it are reserved but not yet written);
    ``copy_pending`` implies ``num_registered == 0`` (nothing is hashed before its bytes are).

    Token ``t`` of the sequence sits in slot ``t % block_size`` of block ``blocks[t // bs]``::

        tokens   0 .. 15 | 16 .. 31 | 32 .. 37
        blocks   [  7   ][   3    ][  12 (6 of 16 used) ]      bs = 16, num_tokens = 38
        hashes   [ h0   ][  h1    ]                             tail = tokens 32..37

    Owned by the BlockSpaceManager; callers get copies (``get_block_table``), never this.
    """

    seq_id: int  # the sequence this table belongs to
    blocks: list[int]  # physical block ids, in the pool given by ``device``
    num_tokens: int  # token slots in use (the last block holds num_tokens % bs, or bs)
    device: Device = Device.DEVICE  # HOST while swapped out
    hashes: list[bytes] = field(default_factory=list)  # full-block content hashes (caching)
    tail: list[int] = field(default_factory=list)  # token ids of the partial last block
    num_registered: int = 0  # leading full blocks indexed in the prefix cache
    root: bytes = b""  # parent hash of block 0 (salt, model, block size)
    extra: bytes = b""  # encoded extra keys mixed into every block hash
    # NOTE(event-tokens): all token ids, kept while the table lives when hit verification is
    # on or KV events are published (each BlockStored carries its blocks' token ids, as
    # vLLM's do: docs/kv_events.md "What is published"); None otherwise: no events, no ids
    tokens: list[int] | None = None
    num_computed: int = 0  # leading tokens whose KV is written (mark_computed / append_slots)
    # NOTE(copy-pending): set by swap_in, cleared by mark_computed once the step that ran the
    # swap-in copies is done. While set no block of the table is registered in the prefix
    # cache: its bytes are still being copied (or the copy failed) and must not be a hit.
    # On a swapped (HOST) table: set by swap_out, cleared by swap.confirm_out; until then its
    # host blocks are told to no observer (core/swap.py NOTE(swap-out-confirm)).
    copy_pending: bool = False
    # NOTE(speed): the copy of ``blocks`` handed out by the last decode append; every change
    # of ``blocks`` (append, copy-on-write, swap, defrag) clears it. 15 of 16 decode steps
    # leave the blocks as they were, so the step reuses it instead of allocating a list per
    # sequence (each one a GC-tracked object the next collection would walk), and stores
    # nothing to keep it valid.
    view: list[int] | None = None
    # NOTE(tail-sharers): created sharing its blocks with a sibling (fork, an n > 1
    # allocation), so its partial last block may be shared; counted in
    # ManagerCounters.tail_sharers while the table lives
    shares_tail: bool = False
    # NOTE(event-salt): the salt ``root`` was made from (SeqAlloc.cache_salt), told to the
    # KV-event observer with the chain's first block (docs/kv_events.md "Salts in extra_keys")
    salt: str | None = None

    def blocks_changed(self) -> None:
        """Called after every change of ``blocks``: the cached view is stale."""
        self.view = None

    def block_fill(self, index: int, block_size: int) -> int:
        return min(block_size, self.num_tokens - index * block_size)

    def check_invariants(self, block_size: int, caching: bool) -> None:
        """Raise InvariantError if the table breaks the invariant in the class docstring."""
        n = self.num_tokens
        if len(self.blocks) != -(-n // block_size):
            raise InvariantError(f"seq {self.seq_id}: {len(self.blocks)} blocks for {n} tokens")
        if not 0 <= self.num_computed <= n:
            raise InvariantError(f"seq {self.seq_id}: num_computed {self.num_computed} outside "
                                 f"[0, {n}]")
        if caching and (len(self.hashes) != n // block_size or len(self.tail) != n % block_size
                        or self.num_registered > len(self.hashes)):
            raise InvariantError(f"seq {self.seq_id}: hashing state out of step")
        if self.copy_pending and self.num_registered:
            raise InvariantError(f"seq {self.seq_id}: {self.num_registered} blocks registered "
                                 "while their swap-in copy is unconfirmed")
        if self.tokens is not None and len(self.tokens) != n:
            raise InvariantError(f"seq {self.seq_id}: {len(self.tokens)} token ids kept for {n}")


class BlockTables(dict[int, BlockTable]):
    """The manager's tables by sequence id. ``tables[seq_id]`` of an unknown sequence raises
    UnknownSequenceError naming the likely cause; a known one costs a plain dict lookup (the
    hook runs only on a miss, so no Python frame is entered on a request's path)."""

    def __missing__(self, seq_id: int) -> BlockTable:
        raise UnknownSequenceError(f"sequence {seq_id} has no block table (never "
                                   "allocated, or already freed)")
