"""Test helpers: build a scheduler over a small real BlockSpaceManager, and a fake runtime
that executes SchedulerOutputs (checking the contract) and samples tokens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.sched import RequestParams, Scheduler, SchedulerConfig, SchedulerOutput

BS = 4  # block size used by the scenario tests


def make(blocks: int = 16, host: int = 0, watermark: float = 0.0, caching: bool = True,
         bs: int = BS, **sched_kw) -> Scheduler:
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=blocks, num_host_blocks=host,
                                        block_size=bs, watermark=watermark,
                                        enable_prefix_caching=caching))
    sched_kw.setdefault("max_num_seqs", 8)
    sched_kw.setdefault("max_num_batched_tokens", 64)
    sched_kw.setdefault("max_model_len", 256)
    return Scheduler(mgr, SchedulerConfig(**sched_kw), clock=lambda: 0.0)


def params(max_tokens: int = 4, n: int = 1, stop=(), ignore_eos: bool = True) -> RequestParams:
    return RequestParams(max_tokens=max_tokens, n=n, stop_token_ids=tuple(stop),
                         ignore_eos=ignore_eos)


def prompt(n: int, base: int = 1000) -> list[int]:
    return list(range(base, base + n))


@dataclass
class FakeRuntime:
    """Executes outputs like the real runtime would (minus the model) and checks them."""

    sched: Scheduler
    token: int = 7  # the token sampled unless ``tokens`` says otherwise
    tokens: dict[int, int] = field(default_factory=dict)  # seq_id -> next token override
    finished: list = field(default_factory=list)  # every FinishedRequest seen (incl. ignored)
    outputs: list[SchedulerOutput] = field(default_factory=list)
    now: float = 0.0
    sample_fn: Callable[[int, int], int] | None = None  # (seq_id, step) -> token

    def _sample(self, seq_id: int, step: int) -> int:
        if seq_id in self.tokens:
            return self.tokens.pop(seq_id)
        return self.token if self.sample_fn is None else self.sample_fn(seq_id, step)

    def sample_for(self, out: SchedulerOutput) -> dict[int, int]:
        sampled = {}
        for p in out.prefills:
            if p.is_last:
                for s in p.seq_ids:
                    sampled[s] = self._sample(s, out.step_id)
        for d in out.decodes:
            sampled[d.seq_id] = self._sample(d.seq_id, out.step_id)
        return sampled

    def check(self, out: SchedulerOutput) -> None:
        cfg = self.sched.config
        mgr = self.sched.manager
        assert out.num_batched_tokens <= cfg.max_num_batched_tokens
        assert out.num_batched_tokens == (sum(p.end - p.start for p in out.prefills)
                                          + len(out.decodes))
        assert self.sched.num_running_seqs <= cfg.max_num_seqs
        for p in out.prefills:
            assert 0 <= p.start < p.end <= p.num_tokens
            assert len(p.token_ids) == p.end - p.start
            for s in p.seq_ids:
                assert mgr.get_num_tokens(s) == p.num_tokens
        for d in out.decodes:
            assert mgr.get_num_tokens(d.seq_id) == d.position + 1
        seen = [d.seq_id for d in out.decodes] + [s for p in out.prefills for s in p.seq_ids]
        assert len(seen) == len(set(seen)), "a sequence computed twice in one step"
        check_entries_and_copies(self.sched, out)

    def step(self, now: float | None = None) -> SchedulerOutput:
        self.now = self.now + 1.0 if now is None else now
        out = self.sched.schedule(now=self.now)
        self.finished += out.ignored
        self.check(out)
        self.outputs.append(out)
        if out.has_work:
            self.finished += self.sched.on_step_done(out, self.sample_for(out), now=self.now)
        return out

    def drain(self, max_steps: int = 10_000) -> int:
        n = 0
        while self.sched.has_unfinished():
            self.step()
            n += 1
            assert n <= max_steps, f"not drained after {max_steps} steps"
        return n

    def by_id(self) -> dict:
        return {f.request_id: f for f in self.finished}


def check_entries_and_copies(sched: Scheduler, out: SchedulerOutput) -> None:
    """The runtime needs nothing but the output: each entry's block ids are its sequence's
    table right after schedule(), and each copy batch moves blocks of the request it names
    (one batch per request and kind)."""
    mgr = sched.manager
    for e in out.entries:
        assert e.block_ids == mgr.get_block_table(e.seq_ids[0]), e
        assert len(e.input_ids) == (e.end - e.start if e in out.prefills else 1)
    keys = [(c.kind, c.request_id) for c in out.copies]
    assert len(keys) == len(set(keys)), keys
    for c in out.copies:
        assert c.pairs
        held = {b for s in sched.seq_ids(c.request_id) if mgr.has_seq(s)
                for b in mgr.get_block_table(s)}
        assert {dst for _, dst in c.pairs} <= held, c  # its table points at the destinations


def assert_empty(sched: Scheduler) -> None:
    """No request, no block table, no referenced block left anywhere."""
    sched.check_invariants()
    st = sched.manager.stats()
    assert not sched.has_unfinished()
    assert st.num_seqs == 0 and st.num_swapped_seqs == 0
    assert st.device.num_used == 0, st
    assert st.host.num_used == 0, st
    assert st.used_slots == 0
