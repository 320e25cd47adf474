"""A hypothesis state machine over the BlockSpaceManager.

The test plays the runtime: it keeps a fake KV store (token id per slot, per pool), performs the
copies the manager asks for (copy-on-write, swap, defrag) and writes the tokens each step
computes. After every step every sequence's tokens, read back through its block table, must equal
the simple model's tokens: this catches wrong sharing, a bad prefix hit, a lost copy, a block
handed out twice or remapped wrongly, on top of ``check_invariants()``.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvpool.config import CacheConfig
from kvpool.core import AllocStatus, BlockSpaceManager, Device

BASES = [[1, 2, 3, 1, 2, 3, 1, 2, 3], [3, 3, 2, 2, 1, 1], [0] * 12]


class ManagerMachine(RuleBasedStateMachine):
    config = CacheConfig(num_device_blocks=20, num_host_blocks=12, block_size=2, watermark=0.05)

    def __init__(self):
        super().__init__()
        self.mgr = BlockSpaceManager(self.config)
        self.bs = self.config.block_size
        self.kv = {Device.DEVICE: {}, Device.HOST: {}}  # (block) -> list of slots
        self.tokens: dict[int, list[int]] = {}  # model: seq -> tokens
        self.groups: dict[int, list[int]] = {}  # gid -> seq ids (share prompt / forks)
        self.where: dict[int, Device] = {}  # gid -> device
        self.next_id = 0

    # ---------------------------------------------------------------- fake runtime
    def _slot(self, dev, block):
        return self.kv[dev].setdefault(block, [None] * self.bs)

    def _write(self, seq, start):
        table = self.mgr.get_block_table(seq)
        for pos in range(start, len(self.tokens[seq])):
            self._slot(Device.DEVICE, table[pos // self.bs])[pos % self.bs] = self.tokens[seq][pos]

    def _copy(self, pairs, src_dev, dst_dev):
        for s, d in pairs:
            self.kv[dst_dev][d] = list(self._slot(src_dev, s))

    def _new_id(self):
        self.next_id += 1
        return self.next_id

    def _gid_of(self, seq):
        return next(g for g, ss in self.groups.items() if seq in ss)

    # ---------------------------------------------------------------- rules
    @rule(base=st.integers(0, len(BASES) - 1), cut=st.integers(1, 12),
          suffix=st.lists(st.integers(0, 3), max_size=5), n=st.integers(1, 3),
          salt=st.sampled_from([None, None, "t1"]))
    def allocate(self, base, cut, suffix, n, salt):
        prompt = BASES[base][:cut] + suffix
        if not prompt:
            return
        hashes = self.mgr.hasher.hash_blocks(prompt, salt)
        status = self.mgr.admission([(len(prompt), hashes)]).status
        seqs = [self._new_id() for _ in range(n)]
        before = self.mgr.stats()
        cached = self.mgr.allocate(seqs, prompt, cache_salt=salt)
        if cached is None:
            assert status is not AllocStatus.OK
            after = self.mgr.stats()
            assert after.device.num_free == before.device.num_free
            assert after.num_seqs == before.num_seqs
            return
        assert 0 <= cached < len(prompt) and cached % self.bs == 0
        gid = self._new_id()
        self.groups[gid] = seqs
        self.where[gid] = Device.DEVICE
        for s in seqs:
            self.tokens[s] = list(prompt)
        self._write(seqs[0], cached)  # compute the uncached part once (blocks are shared)
        for s in seqs:
            self.mgr.mark_computed(s)

    @precondition(lambda self: self.groups)
    @rule(data=st.data(), tok=st.integers(0, 3), k=st.integers(1, 3))
    def append(self, data, tok, k):
        gid = data.draw(st.sampled_from(sorted(self.groups)))
        if self.where[gid] is not Device.DEVICE:
            return
        seq = data.draw(st.sampled_from(self.groups[gid]))
        new = [tok] * k
        can = self.mgr.slots.can_append([seq], k)
        pairs = self.mgr.append_slots(seq, new)
        if pairs is None:
            assert not can
            return
        assert can
        self._copy(pairs, Device.DEVICE, Device.DEVICE)
        start = len(self.tokens[seq])
        self.tokens[seq] += new
        self._write(seq, start)

    @precondition(lambda self: self.groups)
    @rule(data=st.data())
    def fork(self, data):
        gid = data.draw(st.sampled_from(sorted(self.groups)))
        parent = data.draw(st.sampled_from(self.groups[gid]))
        child = self._new_id()
        self.mgr.fork(parent, child)
        self.tokens[child] = list(self.tokens[parent])
        self.groups[gid].append(child)

    @precondition(lambda self: self.groups)
    @rule(data=st.data(), whole=st.booleans())
    def free(self, data, whole):
        gid = data.draw(st.sampled_from(sorted(self.groups)))
        seqs = list(self.groups[gid]) if whole else [data.draw(st.sampled_from(self.groups[gid]))]
        self.mgr.free(*seqs)
        for s in seqs:
            del self.tokens[s]
            self.groups[gid].remove(s)
        if not self.groups[gid]:
            del self.groups[gid], self.where[gid]

    @precondition(lambda self: self.groups)
    @rule(data=st.data())
    def swap(self, data):
        gid = data.draw(st.sampled_from(sorted(self.groups)))
        seqs = self.groups[gid]
        if self.where[gid] is Device.DEVICE:
            can = self.mgr.swap.can_swap_out(seqs)
            pairs = self.mgr.swap.swap_out(seqs)
            assert (pairs is not None) == can
            if pairs is not None:
                self._copy(pairs, Device.DEVICE, Device.HOST)
                self.where[gid] = Device.HOST
                if data.draw(st.sampled_from([True, True, False])):  # else as if it failed
                    self.mgr.swap.confirm_out(seqs)  # NOTE(swap-out-confirm)
        else:
            status = self.mgr.admission(swapped=seqs).status
            pairs = self.mgr.swap.swap_in(seqs)
            if status is AllocStatus.OK:
                assert pairs is not None
            if pairs is not None:
                self._copy(pairs, Device.HOST, Device.DEVICE)
                self.where[gid] = Device.DEVICE

    @rule(data=st.data(), meddle=st.sampled_from(["none", "before_copy", "after_copy",
                                                  "reuse_after_copy"]))
    def defrag(self, data, meddle):
        plan = self.mgr.defrag.plan()
        if plan is None:
            return
        for _, dst in plan.moves:  # destinations are reserved: never handed out meanwhile
            assert self.mgr.device_pool.ref_count(dst) == 1
        if meddle == "before_copy" and self.groups:
            self.free(data, whole=data.draw(st.booleans()))
        self._copy(plan.moves, Device.DEVICE, Device.DEVICE)
        if meddle == "after_copy":
            self.allocate(0, 12, [], 1, None)
        if meddle == "reuse_after_copy" and self.groups:
            self._reuse_id(data, {src for src, _ in plan.moves})
        res = self.mgr.defrag.commit(plan)
        assert sorted(res.committed + res.retried) == sorted(plan.moves)

    def _reuse_id(self, data, moving: set[int]):
        """A sequence finishes and a new prompt comes back under its id (as a library user
        reusing ids may do): its new table may get the same blocks at the same indices
        (core/defrag.py NOTE(defrag-aba)). A sequence holding a block that is ``moving``
        is picked when there is one."""
        seqs = sorted(s for ss in self.groups.values() for s in ss)
        holders = [s for s in seqs if moving & set(self.mgr.get_block_table(s))]
        seq = data.draw(st.sampled_from(holders or seqs))
        gid = self._gid_of(seq)
        self.mgr.free(seq)
        del self.tokens[seq]
        self.groups[gid].remove(seq)
        if not self.groups[gid]:
            del self.groups[gid], self.where[gid]
        prompt = data.draw(st.lists(st.integers(4, 6), min_size=1, max_size=8))
        cached = self.mgr.allocate([seq], prompt)
        if cached is None:
            return
        gid = self._new_id()
        self.groups[gid], self.where[gid], self.tokens[seq] = [seq], Device.DEVICE, prompt
        self._write(seq, cached)
        self.mgr.mark_computed(seq)

    # ---------------------------------------------------------------- checks
    @invariant()
    def consistent(self):
        self.mgr.check_invariants()
        st_ = self.mgr.stats()
        d = st_.device
        assert d.num_free + d.num_evictable + d.num_used == d.num_blocks
        assert st_.num_seqs == len(self.tokens)
        assert st_.num_swapped_seqs == sum(
            len(ss) for g, ss in self.groups.items() if self.where[g] is Device.HOST)
        frag = self.mgr.stats.fragmentation()
        assert 0.0 <= frag.internal < 1.0 and 0.0 <= frag.external < 1.0

    @invariant()
    def contents_match_model(self):
        for gid, seqs in self.groups.items():
            dev = self.where[gid]
            for s in seqs:
                assert self.mgr.get_device(s) is dev
                table = self.mgr.get_block_table(s)
                toks = self.tokens[s]
                assert len(table) == -(-len(toks) // self.bs)
                got = [self.kv[dev].get(table[p // self.bs], [None] * self.bs)[p % self.bs]
                       for p in range(len(toks))]
                assert got == toks, (s, dev, table)

    def teardown(self):
        self.mgr.free(*list(self.tokens))
        self.mgr.check_invariants()
        st_ = self.mgr.stats()
        assert st_.device.num_used == 0 and st_.host.num_used == 0


class NoCacheMachine(ManagerMachine):
    config = CacheConfig(num_device_blocks=16, num_host_blocks=10, block_size=3,
                         enable_prefix_caching=False, watermark=0.0)


class BlockSize1Machine(ManagerMachine):
    config = CacheConfig(num_device_blocks=30, num_host_blocks=8, block_size=1, watermark=0.1,
                         verify_hits=True)


class ClassLRUMachine(ManagerMachine):  # classlru behind the real BlockPool
    config = CacheConfig(num_device_blocks=20, num_host_blocks=12, block_size=2, watermark=0.05,
                         eviction_policy="classlru")


class AdaptiveMachine(ManagerMachine):  # adaptive (window, ghost, tuner) behind the pool
    config = CacheConfig(num_device_blocks=20, num_host_blocks=12, block_size=2, watermark=0.05,
                         eviction_policy="adaptive")


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
_policy_settings = settings(max_examples=25, stateful_step_count=40, deadline=None)
TestManagerMachine = ManagerMachine.TestCase
TestNoCacheMachine = NoCacheMachine.TestCase
TestBlockSize1Machine = BlockSize1Machine.TestCase
TestClassLRUMachine = ClassLRUMachine.TestCase
TestAdaptiveMachine = AdaptiveMachine.TestCase
for _case in (TestManagerMachine, TestNoCacheMachine, TestBlockSize1Machine):
    _case.settings = _settings
for _case in (TestClassLRUMachine, TestAdaptiveMachine):
    _case.settings = _policy_settings
del _case  # a module-level TestCase alias would be collected and run a second time
