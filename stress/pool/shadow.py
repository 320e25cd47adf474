"""ShadowRuntime: the BlockSpaceManager plus a fake KV store that plays the runtime's part.

Every slot of every block holds the token whose "KV" was written there, and every block holds
the tenant (cache_salt) whose request wrote it. The runtime performs the copies the manager
asks for (copy-on-write, swap out / in, defrag moves) and writes the tokens each "step"
computes. Reading a sequence back through its block table must then give exactly its tokens,
and every block it references must carry its own tenant: that catches a block handed out twice,
a wrong prefix hit, a lost or misplaced copy, a wrong remap and any sharing across tenants, on
top of ``check_invariants()``.

Where the copies happen (why this is not a harness artifact)::

    allocate / append / fork / free / swap   manager call + copies + writes + verification in
                                             ONE ``manager.batch()`` (the real copy engine is
                                             FIFO, so a freed block is never written before a
                                             swap-out read it; holding the lock models that)
    defrag                                   plan (locked) -> copy OUTSIDE the lock while the
                                             other workers keep going -> commit (locked): the
                                             version-retry path the design relies on

The object quacks like a BlockSpaceManager for PoolFront (``batch``, ``device_pool``
and the operation methods), so the coroutines' batched calls go through the same checks.
Failures are recorded (``violations``), never raised into the workers.

NOTE(direct): one batch per operation also holds the lock for the manager call, so a mutator
that lost its own writer section would never race here. DirectRuntime (stress/pool/direct.py)
adds unbatched calls; the sequences one of them is changing are ``in_flight``, and the full
checks here skip them until it verifies them itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kvpool.core import AllocStatus, BlockSpaceManager, Device

__all__ = ["ShadowRuntime"]

MAX_RECORDED = 20  # violation messages kept verbatim (the count is exact)


class ShadowRuntime:
    """Manager + fake KV. ``expected[seq] = (tokens, salt)`` is the model of every live sequence.

    Invariant (checked by ``verify``/``check_all``): for every live sequence ``s``, reading
    slot ``p`` of block ``table[p // bs]`` in ``s``'s pool gives ``expected[s].tokens[p]``, and
    each block of the table carries ``expected[s].salt``.
    """

    def __init__(self, manager: BlockSpaceManager) -> None:
        self.manager = manager
        self.bs = bs = manager.block_size
        nd, nh = manager.device_pool.num_blocks, manager.host_pool.num_blocks
        self._kv = {Device.DEVICE: [[None] * bs for _ in range(nd)],
                    Device.HOST: [[None] * bs for _ in range(nh)]}
        self._salt: dict[Device, list[object]] = {Device.DEVICE: [None] * nd,
                                                  Device.HOST: [None] * nh}
        self.expected: dict[int, tuple[list[int], str | None]] = {}
        self.in_flight: set[int] = set()  # NOTE(direct): in an unbatched call right now
        self.violations = 0
        self.messages: list[str] = []
        self._vlock = threading.Lock()
        self.defrag_committed = 0
        self.defrag_retried = 0
        self.defrag_aborted = 0
        self.prefix_hits = 0

    # ---------------------------------------------------------------- manager look-alike
    @property
    def device_pool(self):
        return self.manager.device_pool

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self.manager.batch():
            yield

    def has_seq(self, seq_id: int) -> bool:
        return self.manager.has_seq(seq_id)

    # ---------------------------------------------------------------- recording
    def violation(self, message: str) -> None:
        with self._vlock:
            self.violations += 1
            if len(self.messages) < MAX_RECORDED:
                self.messages.append(message)

    # ---------------------------------------------------------------- fake KV primitives
    def _copy(self, pairs: Sequence[tuple[int, int]], src: Device, dst: Device) -> None:
        skv, dkv, ss, ds = self._kv[src], self._kv[dst], self._salt[src], self._salt[dst]
        for s, d in pairs:
            dkv[d] = list(skv[s])
            ds[d] = ss[s]

    def _write(self, seq_id: int, tokens: Sequence[int], start: int, salt: str | None) -> None:
        """Write ``tokens[start:]`` through the sequence's (device) table."""
        table = self.manager.get_block_table(seq_id)
        kv, sl, bs = self._kv[Device.DEVICE], self._salt[Device.DEVICE], self.bs
        for pos in range(start, len(tokens)):
            b = table[pos // bs]
            kv[b][pos % bs] = tokens[pos]
            sl[b] = salt

    def _verify_locked(self, seq_ids: Sequence[int], where: str) -> None:
        mgr, bs = self.manager, self.bs
        for s in seq_ids:
            exp = self.expected.get(s)
            if exp is None or s in self.in_flight:  # NOTE(direct): it checks them itself
                continue
            toks, salt = exp
            if not mgr.has_seq(s):
                self.violation(f"{where}: seq {s} vanished from the manager")
                continue
            dev = mgr.get_device(s)
            table = mgr.get_block_table(s)
            if len(table) != -(-len(toks) // bs) or mgr.get_num_tokens(s) != len(toks):
                self.violation(f"{where}: seq {s} has {len(table)} blocks / "
                               f"{mgr.get_num_tokens(s)} tokens, expected {len(toks)} tokens")
                continue
            self._verify_kept(s, toks, where)
            kv, sl = self._kv[dev], self._salt[dev]
            for i, b in enumerate(table):
                if sl[b] != salt:
                    self.violation(f"{where}: seq {s} (tenant {salt!r}) reads {dev.value} block "
                                   f"{b} written by tenant {sl[b]!r}")
                    break
                want = toks[i * bs:(i + 1) * bs]
                if kv[b][:len(want)] != want:
                    self.violation(f"{where}: seq {s} block {i} ({dev.value} {b}) holds "
                                   f"{kv[b][:len(want)]}, expected {want}")
                    break

    def _verify_kept(self, seq_id: int, toks: list[int], where: str) -> None:
        """NOTE(event-tokens): with hit verification or an observer a table keeps exactly
        its sequence's token ids; with neither it keeps none."""
        index = self.manager.device_pool.index
        kept = self.manager.slots.tables[seq_id].tokens
        if (index is not None and index.wants_tokens) != (kept is not None):
            self.violation(f"{where}: seq {seq_id} keeps token ids: {kept is not None}")
        elif kept is not None and kept != toks:
            self.violation(f"{where}: seq {seq_id} keeps {len(kept)} token ids "
                           f"{kept[-8:]} (last 8), expected {len(toks)} ({toks[-8:]})")

    # ---------------------------------------------------------------- operations
    def allocate(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                 cache_salt: str | None = None) -> int | None:
        """Allocate a group; compute (write) the uncached part; mark it computed."""
        mgr = self.manager
        with mgr.batch():
            cached = mgr.allocate(seq_ids, token_ids, cache_salt=cache_salt)
            if cached is None:
                return None
            n = len(token_ids)
            if not (0 <= cached < n and cached % self.bs == 0):
                self.violation(f"allocate: {cached} cached tokens of a {n}-token prompt")
            toks = list(token_ids)
            self._write(seq_ids[0], toks, cached, cache_salt)
            for s in seq_ids:
                mgr.mark_computed(s)
                self.expected[s] = (list(toks), cache_salt)
            self.prefix_hits += cached
            self._verify_locked(seq_ids, "allocate")
            return cached

    def allocate_uncomputed(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                            cache_salt: str | None = None) -> bool:
        """Allocate and free again before the prefill ran (a request aborted at admission)."""
        with self.manager.batch():
            return self._allocate_then_free(seq_ids, token_ids, cache_salt, "abort")

    def _allocate_then_free(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                            cache_salt: str | None, what: str) -> bool:
        """Allocate ``seq_ids`` and free them at once; False when the pool had no room."""
        mgr = self.manager
        if mgr.allocate(seq_ids, token_ids, cache_salt=cache_salt) is None:
            return False
        mgr.free(*seq_ids)
        for s in seq_ids:
            if mgr.has_seq(s):
                self.violation(f"{what}: seq {s} still has a table after free")
        return True

    def append_slots(self, seq_id: int, token_ids: Sequence[int]) -> list | None:
        mgr = self.manager
        with mgr.batch():
            toks, salt = self.expected[seq_id]
            can = mgr.slots.can_append([seq_id], len(token_ids))
            pairs = mgr.append_slots(seq_id, token_ids)
            if pairs is None:
                if can:
                    self.violation(f"append: seq {seq_id} refused although slots.can_append")
                return None
            self._copy(pairs, Device.DEVICE, Device.DEVICE)  # NOTE(cow): before the write
            start = len(toks)
            new = toks + list(token_ids)
            self.expected[seq_id] = (new, salt)
            self._write(seq_id, new, start, salt)
            self._verify_locked([seq_id], "append")
            return pairs

    def decode_step(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                    group_ends: Sequence[int] | None = None) -> int:
        """A scheduler step's decodes (``slots.append_decodes``): the copy-on-write copies,
        then every appended token's write, then the checks of ``append_slots`` on every
        listed sequence; the views handed out must be the tables now. Returns the groups."""
        mgr = self.manager
        with mgr.batch():
            ends = [len(seq_ids)] if group_ends is None else list(group_ends)
            fit = sum(1 for e in ends if mgr.slots.can_append(seq_ids[:e]))
            cows, views, groups = mgr.slots.append_decodes(seq_ids, token_ids, group_ends)
            want = fit if group_ends is not None else int(fit == 1)
            n = ends[groups - 1] if groups else 0
            if groups != want or len(cows) != n or len(views) != n:
                self.violation(f"decode_step: {groups} groups ({len(cows)} cows, {len(views)} "
                               f"views) appended, {want} of {ends} fit")
                n = min(n, len(cows), len(views))
            for cow in cows[:n]:
                self._copy(cow, Device.DEVICE, Device.DEVICE)  # NOTE(cow): before the writes
            for s, tok in zip(seq_ids[:n], token_ids):
                toks, salt = self.expected[s]
                self.expected[s] = (toks + [tok], salt)
                self._write(s, toks + [tok], len(toks), salt)
            self._check_views(seq_ids[:n], views)
            self._verify_locked(seq_ids, "decode_step")
            return groups

    def _check_views(self, seq_ids: Sequence[int], views: Sequence[Sequence[int]]) -> None:
        """Each view handed out by a decode step is a copy of its sequence's table now."""
        tables = self.manager.slots.tables
        for s, view in zip(seq_ids, views):
            blocks = tables[s].blocks
            if list(view) != blocks or view is blocks:
                self.violation(f"decode_step: seq {s} got view {list(view)}"
                               f"{' (its table itself)' if view is blocks else ''}, "
                               f"table {blocks}")

    def fork(self, parent: int, child: int) -> None:
        mgr = self.manager
        with mgr.batch():
            mgr.fork(parent, child)
            toks, salt = self.expected[parent]
            self.expected[child] = (list(toks), salt)
            self._verify_locked([parent, child], "fork")

    def free(self, *seq_ids: int) -> None:
        mgr = self.manager
        with mgr.batch():
            mgr.free(*seq_ids)
            for s in seq_ids:
                self.expected.pop(s, None)

    def swap_out(self, seq_ids: Sequence[int]) -> list | None:
        mgr = self.manager
        with mgr.batch():
            can = mgr.swap.can_swap_out(seq_ids)
            pairs = mgr.swap.swap_out(seq_ids)
            if (pairs is not None) != can:
                self.violation(f"swap_out: can_swap_out said {can}, swap_out gave {pairs!r}")
            if pairs is not None:
                self._copy(pairs, Device.DEVICE, Device.HOST)
                mgr.swap.confirm_out(seq_ids)  # copied: published now (NOTE(swap-out-confirm))
                self._verify_locked(seq_ids, "swap_out")
            return pairs

    def swap_in(self, seq_ids: Sequence[int]) -> list | None:
        mgr = self.manager
        with mgr.batch():
            status = mgr.admission(swapped=seq_ids).status
            pairs = mgr.swap.swap_in(seq_ids)
            if status is AllocStatus.OK and pairs is None:
                self.violation("swap_in: refused although admission said OK")
            if pairs is not None:
                self._copy(pairs, Device.HOST, Device.DEVICE)
                self._verify_locked(seq_ids, "swap_in")
            return pairs

    # ---------------------------------------------------------------- defrag (version-retry)
    def defrag(self, *, abort: bool = False, copy_pause: float = 0.0) -> int:
        """Plan, copy outside the lock (optionally pausing to let others interfere), then
        commit (or abort, as a failed copy would). Returns the moves committed."""
        mgr = self.manager
        plan = mgr.defrag.plan()
        if plan is None:
            return 0
        pool = mgr.device_pool
        for _, dst in plan.moves:
            if pool.ref_count(dst) != 1:
                self.violation(f"defrag: reserved destination {dst} has ref "
                               f"{pool.ref_count(dst)}")
        if abort:
            mgr.defrag.abort(plan)
            self.defrag_aborted += len(plan)
            return 0
        kv, sl = self._kv[Device.DEVICE], self._salt[Device.DEVICE]
        for src, dst in plan.moves:  # NOTE(defrag): outside the lock, like the copy engine
            kv[dst] = list(kv[src])
            sl[dst] = sl[src]
            if copy_pause:
                time.sleep(copy_pause)
        with mgr.batch():
            res = mgr.defrag.commit(plan)
            if sorted(res.committed + res.retried) != sorted(plan.moves):
                self.violation("defrag: commit lost or invented moves")
            self.defrag_committed += len(res.committed)
            self.defrag_retried += len(res.retried)
            moved = {dst for _, dst in res.committed}
            if moved:
                # a copy first: direct calls change ``expected`` outside the lock (NOTE(direct))
                touched = [s for s in list(self.expected) if mgr.has_seq(s)
                           and mgr.get_device(s) is Device.DEVICE
                           and moved.intersection(mgr.get_block_table(s))]
                self._verify_locked(touched, "defrag")
        return len(res.committed)

    # ---------------------------------------------------------------- full check
    def check_all(self) -> None:
        """From a quiescent point (both pool locks held): the manager's invariants, then every
        live sequence's content and tenant. Raises nothing; records violations."""
        mgr = self.manager
        with mgr.batch():
            try:
                mgr.check_invariants()
            except AssertionError as e:  # InvariantError is an AssertionError
                self.violation(f"check_invariants: {e}")
            flying = set(self.in_flight)  # first: a call adds its ids before it starts
            live = set(mgr.seq_ids()) - flying
            known = set(self.expected) - flying
            if live != known:
                self.violation(f"check: manager has {len(live - known)} unknown and misses "
                               f"{len(known - live)} known sequences")
            self._verify_locked(sorted(known & live), "check")
