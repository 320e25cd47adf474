"""The block manager's state machine (test_manager_machine.py) with kept token ids
(NOTE(event-tokens)) checked, in all four combinations of hit verification on/off x a KV-event
observer on/off, plus decode steps (``slots.append_decodes``: the fast paths ``_append_each``
and ``_open_block``) and recompute preemption (free, then allocate prompt + output again,
sharing the common prefix with ``share_with``).

Whenever tokens are kept (prefix caching with verification or an observer), each live table's
kept ids must equal exactly the tokens the test fed that sequence, across fork, copy-on-write,
swap out/in, recompute, prefix hits and frees; with neither, none are kept. Every GPU
BlockStored must carry ``block_size`` token ids per block, each block's hash recomputed from its
parent hash (null: a root) and those tokens, the parent stored before, and the chain's tokens a
prefix of a sequence the test fed (docs/kv_events.md "What is published"). CPU ones (swap-outs)
carry theirs too, checked the same way, their parent a block the host tier was told before
(kvpool/core/swap.py NOTE(host-tokens)). A chain's first block, on either medium, comes with
the salt its root was made from (NOTE(event-salt)).
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device
from kvpool.core.block_table import SeqAlloc
from tests.core.test_manager_machine import BASES, ManagerMachine

SALTS = (None, "t1")


class RecordingObserver:
    """The pools' observer (kvpool.core.block.PoolObserver): every call, in order."""

    def __init__(self) -> None:
        self.stored_calls: list[tuple] = []  # (device, hashes, parent, tokens, salt)
        self.host_live: set[bytes] = set()  # CPU hashes stored and not removed since
        self.host_twice: list[tuple[str, bytes]] = []  # stored while live, removed while not

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        self.stored_calls.append((device, list(hashes), parent,
                                  None if tokens is None else list(tokens), salt))
        if device is Device.HOST:
            self.host_twice += [("stored", h) for h in hashes if h in self.host_live]
            self.host_live.update(hashes)

    def removed(self, device, hashes) -> None:
        if device is Device.HOST:
            self.host_twice += [("removed", h) for h in hashes if h not in self.host_live]
            self.host_live.difference_update(hashes)

    def cleared(self, device) -> None:
        pass


class EventTokensMachine(ManagerMachine):
    config = CacheConfig(num_device_blocks=20, num_host_blocks=12, block_size=4,
                         watermark=0.05)
    events = False

    def __init__(self):
        super().__init__()
        self.obs = RecordingObserver() if self.events else None
        self.mgr = BlockSpaceManager(self.config, observer=self.obs)
        self.salt: dict[int, str | None] = {}  # gid -> cache salt
        self.history: dict[int, list[int]] = {}  # every sequence ever seen -> its tokens
        self.known: dict[bytes, list[int]] = {}  # stored GPU hash -> tokens from the root
        self.host_known: dict[bytes, list[int]] = {}  # the same for CPU (swapped-out) hashes
        self.seen = 0  # observer calls checked so far

    @rule(base=st.integers(0, len(BASES) - 1), cut=st.integers(1, 12),
          suffix=st.lists(st.integers(0, 3), max_size=5), n=st.integers(1, 3),
          salt=st.sampled_from([None, None, "t1"]))
    def allocate(self, base, cut, suffix, n, salt):
        before = set(self.groups)
        super().allocate(base, cut, suffix, n, salt)
        for g in set(self.groups) - before:
            self.salt[g] = salt

    def _device_seqs(self) -> list[int]:
        return [s for g, ss in self.groups.items() if self.where[g] is Device.DEVICE for s in ss]

    @precondition(lambda self: self.groups)
    @rule(data=st.data(), toks=st.lists(st.integers(0, 3), min_size=1, max_size=8),
          per_seq=st.booleans())
    def decode(self, data, toks, per_seq):
        """One decode step over some device sequences (``append_decodes``)."""
        seqs = self._device_seqs()
        if not seqs:
            return
        seqs = data.draw(st.lists(st.sampled_from(seqs), min_size=1, unique=True))
        toks = (toks * len(seqs))[:len(seqs)]
        ends = list(range(1, len(seqs) + 1)) if per_seq else None
        cows, _, groups = self.mgr.slots.append_decodes(seqs, toks, ends)
        done = len(cows)
        assert done == (groups if per_seq else groups * len(seqs))
        for s, tok, pairs in zip(seqs[:done], toks, cows):
            self._copy(pairs, Device.DEVICE, Device.DEVICE)
            self.tokens[s].append(tok)
            self._write(s, len(self.tokens[s]) - 1)

    @precondition(lambda self: self.groups)
    @rule(data=st.data(), share=st.booleans())
    def recompute(self, data, share):
        """Preempt a group by recompute: free it, allocate each sequence's tokens again."""
        gid = data.draw(st.sampled_from(sorted(self.groups)))
        salt = self.salt.get(gid)
        old = list(self.groups.pop(gid))
        del self.where[gid]
        self.mgr.free(*old)
        toks = [self.tokens.pop(s) for s in old]
        new = [self._new_id() for _ in old]
        reqs = [SeqAlloc([new[0]], toks[0], cache_salt=salt)]
        for s, t in zip(new[1:], toks[1:]):
            k = self._common_blocks(toks[0], t) if share else 0
            reqs.append(SeqAlloc([s], t, cache_salt=salt, share_with=new[0] if k else None,
                                 num_shared=k))
        res = self.mgr.prompts.allocate_batch(reqs)
        kept = [(s, t, c) for s, t, c in zip(new, toks, res) if c is not None]
        if not kept:
            return
        gid = self._new_id()
        self.groups[gid], self.where[gid], self.salt[gid] = [s for s, _, _ in kept], \
            Device.DEVICE, salt
        for s, t, cached in kept:
            self.tokens[s] = list(t)
            self._write(s, cached)
        for s, _, _ in kept:
            self.mgr.mark_computed(s)

    def _common_blocks(self, a: list[int], b: list[int]) -> int:
        """Leading full blocks ``a`` and ``b`` share, leaving ``b`` a token to compute."""
        bs, k = self.bs, 0
        while (k + 1) * bs < len(b) and (k + 1) * bs <= len(a) \
                and a[k * bs:(k + 1) * bs] == b[k * bs:(k + 1) * bs]:
            k += 1
        return k

    @invariant()
    def kept_ids_match_fed_tokens(self):
        keep = self.config.enable_prefix_caching and (self.config.verify_hits or self.events)
        for s, toks in self.tokens.items():
            kept = self.mgr.slots.tables[s].tokens
            assert kept == toks if keep else kept is None, (s, kept, toks)

    @invariant()
    def host_tier_told_each_hash_once(self):
        """core/swap.py NOTE(host-hashes): the CPU tier hears a hash arrive with its first
        confirmed swapped holder and leave with the last, forks included (NOTE(host-fork))."""
        if self.obs is None:
            return
        tables = self.mgr.slots.tables
        held = {h for s in self.tokens if (t := tables[s]).device is Device.HOST
                and not t.copy_pending for h in t.hashes}
        assert not self.obs.host_twice and self.obs.host_live == held

    @invariant()
    def stored_events_carry_their_tokens(self):
        self.history.update(self.tokens)
        if self.obs is None:
            return
        calls = self.obs.stored_calls
        for dev, hashes, parent, toks, salt in calls[self.seen:]:
            known = self.host_known if dev is Device.HOST else self.known
            self._check_stored(hashes, parent, toks, salt, known)
        self.seen = len(calls)

    def _check_stored(self, hashes, parent, toks, salt, known):
        bs, hb = self.bs, self.mgr.hasher.hash_block
        assert toks is not None and len(toks) == len(hashes) * bs, (hashes, toks)
        assert parent is None or parent in known, "parent never stored"
        prefix = [] if parent is None else list(known[parent])
        prev = parent
        for i, h in enumerate(hashes):
            chunk = toks[i * bs:(i + 1) * bs]
            parents = {self.mgr.hasher.root(salt)} if prev is None else {prev}
            assert any(hb(p, chunk) == h for p in parents), (i, chunk, salt)
            prefix += chunk
            known[h] = list(prefix)
            prev = h
        assert any(t[:len(prefix)] == prefix for t in self.history.values()), prefix


def _machine(name: str, verify: bool, events: bool):
    cfg = CacheConfig(num_device_blocks=20, num_host_blocks=12, block_size=4, watermark=0.05,
                      verify_hits=verify)
    return type(name, (EventTokensMachine,), {"config": cfg, "events": events})


_settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
TestPlain = _machine("Plain", False, False).TestCase
TestVerify = _machine("Verify", True, False).TestCase
TestEvents = _machine("Events", False, True).TestCase
TestVerifyEvents = _machine("VerifyEvents", True, True).TestCase
TestNoCacheEvents = type("NoCacheEvents", (EventTokensMachine,), {
    "config": CacheConfig(num_device_blocks=16, num_host_blocks=10, block_size=3,
                          enable_prefix_caching=False, watermark=0.0),
    "events": True}).TestCase
for _case in (TestPlain, TestVerify, TestEvents, TestVerifyEvents, TestNoCacheEvents):
    _case.settings = _settings
del _case
