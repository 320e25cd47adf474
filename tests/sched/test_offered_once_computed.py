"""A block is offered for reuse only once the KV of all its tokens is written (vLLM's rule:
v0 marks blocks computed after the step, v1 caches only blocks that num_computed_tokens
covers). In decode a block is full, and hashed, as soon as the sampled token that fills it is
appended (schedule()), but that token's KV is written only when the step runs; such a block
must be neither findable in the device prefix index nor published (BlockStored, GPU or CPU)
before then.

A hypothesis state machine over the real Scheduler and BlockSpaceManager, with the pools'
observer recording what each tier published; the test plays the runtime with a KV store of
token ids per slot (None: never written), written only by the entries a step computes, and
moved only by the copies the step names. Requests extend live sequences' prompt + output (so
later prompts share blocks a decode filled), some requests fail in the step (their KV is
never written), swap-in copies fail, swap-out copies fail (their request aborted at the next
step, as the engine does) or complete only after the step (confirmed at the next one), the
pool preempts by swap and by recompute, and the priority policy preempts for better requests.
As the engine does, the runtime confirms each swap-out only once its copy completed
(``on_step_done(swap_outs_done=False)``, then ``swap_out_done``; core/swap.py
NOTE(swap-out-confirm)). Checked:

- right after schedule(), and after on_step_done, every block the device index holds has all
  its slots written with the tokens its GPU BlockStored named (a prefix hit reads only those);
- after every call into the scheduler (schedule, the copies, abort, on_step_done,
  swap_out_done), every hash the host tier published (CPU BlockStored, not removed) is held
  by a swapped sequence's host block written with its tokens (a host block a swap-out just
  took holds nothing written until its copy ran);
- every entry the forward computes reads, at each earlier position, its own tokens' KV.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device
from kvpool.sched import RequestParams, Scheduler, SchedulerConfig, SeqStatus

DEV, HOST = Device.DEVICE, Device.HOST
MAX_LEN = 24  # tokens a sequence may hold (prompt + output)


class Heard:
    """The pools' observer (kvpool.core.block.PoolObserver): what each tier published."""

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.tokens: dict[Device, dict[bytes, list[int] | None]] = {DEV: {}, HOST: {}}
        self.live_host: set[bytes] = set()

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        bs = self.bs
        for i, h in enumerate(hashes):
            self.tokens[device][h] = None if tokens is None else list(tokens[i * bs:(i + 1) * bs])
            if device is HOST:
                assert h not in self.live_host, "a host hash published twice"
                self.live_host.add(h)

    def removed(self, device, hashes) -> None:
        if device is HOST:
            self.live_host.difference_update(hashes)

    def cleared(self, device) -> None:
        raise AssertionError("nothing here resets the prefix cache")


class OfferedMachine(RuleBasedStateMachine):
    @initialize(pools=st.sampled_from([2, 3, 4]), bs=st.sampled_from([2, 4]),
                host=st.sampled_from([0, 24]), mode=st.sampled_from([None, "swap", "recompute"]),
                policy=st.sampled_from(["fcfs", "priority"]), chunked=st.booleans(),
                budget=st.integers(8, MAX_LEN), max_seqs=st.integers(2, 6),
                defrag=st.sampled_from([None, 0.0]), mix=st.sampled_from([0, 1]))
    def setup(self, pools, bs, host, mode, policy, chunked, budget, max_seqs, defrag, mix):
        """The pools (``pools`` halves of a longest sequence: crowded), the scheduler, and a
        first request (11 tokens, up to 16 to generate)."""
        blocks = pools * MAX_LEN // bs // 2
        self.bs, self.mix = bs, mix
        self.heard = Heard(bs)
        self.mgr = BlockSpaceManager(CacheConfig(
            num_device_blocks=blocks, num_host_blocks=host, block_size=bs, watermark=0.0,
            enable_prefix_caching=True), observer=self.heard)
        self.sched = Scheduler(self.mgr, SchedulerConfig(
            max_num_seqs=min(max_seqs, budget), preemption_mode=mode, policy=policy,
            max_num_batched_tokens=budget if chunked else MAX_LEN, max_model_len=MAX_LEN,
            enable_chunked_prefill=chunked, defrag_threshold=defrag), clock=lambda: 0.0)
        self.kv: dict[Device, dict[int, list]] = {DEV: {}, HOST: {}}
        self.next_id = 0
        self.late: list[tuple[str, int]] = []  # swap-outs copied after their step
        self.doomed: list[str] = []  # requests whose swap-out copy failed
        self._add(list(range(1, 12)), 16, 1, 1)

    # ---------------------------------------------------------------- the fake runtime
    def _slots(self, dev: Device, b: int) -> list:
        return self.kv[dev].setdefault(b, [None] * self.bs)

    def _copy(self, pairs, src: Device, dst: Device) -> None:
        for s, d in pairs:
            self.kv[dst][d] = list(self._slots(src, s))

    def _write(self, e) -> None:
        for k, tok in enumerate(e.input_ids):
            pos = e.start + k
            self._slots(DEV, e.block_ids[pos // self.bs])[pos % self.bs] = tok

    def _sample(self, entries) -> dict[int, int]:
        """A deterministic "model": the next token from the last one and its position (so
        equal prefixes continue alike), per sequence when ``mix``."""
        out = {}
        for e in entries:
            pos = e.start + len(e.input_ids)
            for s in e.sample_seq_ids:
                out[s] = 20 + (e.input_ids[-1] * 31 + pos * 7 + self.mix * s) % 5
        return out

    # ---------------------------------------------------------------- checks
    def _check_device(self, when: str) -> None:
        pool = self.mgr.device_pool
        for b in range(pool.num_blocks):
            h = pool.block(b).block_hash
            if h is None:
                continue
            want = self.heard.tokens[DEV].get(h)
            assert want is not None, f"{when}: block {b} findable but never published"
            assert self.kv[DEV].get(b) == want, \
                f"{when}: block {b} findable with KV {self.kv[DEV].get(b)} for tokens {want}"

    def _check_host(self, when: str) -> None:
        held: dict[bytes, list[tuple[list, list[int]]]] = {}
        for s in self.sched.state.seqs.values():
            if s.status is not SeqStatus.SWAPPED:
                continue
            toks = s.token_slice(0, self.mgr.get_num_tokens(s.seq_id))
            table = self.mgr.get_block_table(s.seq_id)
            for i, h in enumerate(self.mgr.hasher.hash_blocks(toks, s.group.cache_salt)):
                want = toks[i * self.bs:(i + 1) * self.bs]
                held.setdefault(h, []).append((self.kv[HOST].get(table[i]), want))
        for h in self.heard.live_host:
            assert h in held, f"{when}: a CPU block is published that no swapped table holds"
            told = self.heard.tokens[HOST][h]
            assert any(got == want for got, want in held[h]), \
                f"{when}: CPU block published, held with KV {held[h]} only"
            assert all(told is None or told == want for _, want in held[h])

    def _check_reads(self, entries) -> None:
        """What the forward reads: positions [0, start + len) of each entry's sequence."""
        seqs, bs = self.sched.state.seqs, self.bs
        for e in entries:
            end = e.start + len(e.input_ids)
            want = seqs[e.seq_ids[0]].token_slice(0, end)
            got = [self.kv[DEV].get(e.block_ids[p // bs], [None] * bs)[p % bs]
                   for p in range(end)]
            assert got == want, f"request {e.request_id} reads KV {got} for tokens {want}"

    # ---------------------------------------------------------------- rules
    def _add(self, prompt: list[int], max_tokens: int, n: int, priority: int) -> None:
        self.next_id += 1
        self.sched.add_request(f"r{self.next_id}", prompt, RequestParams(
            max_tokens=max_tokens, n=n, ignore_eos=True), priority=priority)

    @rule(data=st.data(), whole=st.booleans(), suffix=st.integers(0, 5),
          max_tokens=st.sampled_from([1, 4, 16]), n=st.integers(1, 2),
          priority=st.integers(0, 2))
    def add(self, data, whole, suffix, max_tokens, n, priority):
        """A prompt extending a live sequence's tokens (all of them when ``whole``: the last
        sampled one included, whose KV the next step writes), or a fresh one."""
        live = [s for s in self.sched.state.seqs.values()
                if s.status in (SeqStatus.RUNNING, SeqStatus.SWAPPED)]
        base: list[int] = []
        if live and data.draw(st.integers(0, 3)):
            toks = data.draw(st.sampled_from(live)).all_token_ids()
            base = toks if whole else toks[:data.draw(st.integers(1, len(toks)))]
        fresh = [100 + self.next_id * 8 + i for i in range(suffix)]
        self._add((base + fresh) or [7], max_tokens, n, priority)

    @rule(data=st.data(), fail=st.sampled_from(
        ["none"] * 4 + ["forward", "swap_in", "swap_out", "late", "abort"]))
    def step(self, data, fail):
        """A step; ``abort``: a request aborted before it (a client left); ``swap_out``: the
        step's first swap-out copy fails; ``late``: its swap-outs complete after it."""
        pick = lambda rids: data.draw(st.sampled_from(rids))  # noqa: E731
        if fail == "abort" and self.sched.has_unfinished():
            self.sched.abort(pick(sorted(self.sched.request_ids())))
            self._check_host("after an abort")
        self._step(fail, pick)

    def _before_schedule(self) -> None:
        """What the engine does first (core.py step()): fail the requests whose swap-out
        failed, confirm the swap-outs that completed since."""
        s = self.sched
        for rid in self.doomed:
            s.abort(rid, "KV copy failed")
            self._check_host("after a failed swap-out's abort")
        for rid, step_id in self.late:
            s.swap_out_done(rid, step_id)
            self._check_host("after a late swap-out's confirmation")
        self.doomed, self.late = [], []

    def _copies(self, out, fail: str, failed: set[str]) -> list[tuple[str, int]]:
        """The step's copies; returns the swap-outs that completed with it."""
        done = []
        for c in out.copies_in_order():
            if fail == "swap_in" and c.kind == "swap_in" and not failed:
                failed.add(c.request_id)  # its copy never ran
                continue
            if c.kind == "swap_out":
                if fail == "swap_out" and not self.doomed:
                    self.doomed.append(c.request_id)  # copied nothing: its bytes unwritten
                    continue
                (self.late if fail == "late" else done).append((c.request_id, out.step_id))
            src, dst = {"swap_out": (DEV, HOST), "swap_in": (HOST, DEV)}.get(c.kind, (DEV, DEV))
            self._copy(c.pairs, src, dst)
        return done

    def _step(self, fail: str, pick) -> None:
        """One step as the engine runs it (core.py): copies, requests failed by their copy
        or their forward aborted, the forward's writes, defrag copies, on_step_done, the
        swap-outs that completed confirmed."""
        s = self.sched
        self._before_schedule()
        out = s.schedule()
        for d in out.blocks_to_swap_out:  # a host block just taken: nothing written yet
            self.kv[HOST].pop(d[1], None)
        self._check_device("after schedule")
        self._check_host("after schedule")
        failed: set[str] = set()
        done = self._copies(out, fail, failed)
        rids = sorted({e.request_id for e in out.entries})
        if fail == "forward" and rids:
            failed.add(pick(rids))  # its part of the step raised
        for rid in failed:
            s.abort(rid, "failed in the step")
        self._check_host("after the copies")
        entries = [e for e in out.entries if e.request_id not in failed]
        for e in entries:
            self._write(e)
        self._check_reads(entries)
        self._copy(out.defrag_moves, DEV, DEV)
        if out.has_work:
            s.on_step_done(out, self._sample(entries), swap_outs_done=False)
        self._check_host("after on_step_done")
        for rid, step_id in done:
            s.swap_out_done(rid, step_id)
        self._check_device("after the step")
        self._check_host("after the step")

    @rule(data=st.data())
    def fork(self, data):
        s = self.sched
        cands = [q.seq_id for g in s.state.running for q in g.seqs
                 if q.status is SeqStatus.RUNNING and q.unit is None and not q.awaiting]
        if cands and s.num_running_seqs < s.config.max_num_seqs:
            s.fork(data.draw(st.sampled_from(cands)))

    def teardown(self):
        if not hasattr(self, "sched") or self.sched.state.inflight is not None:
            return  # not set up, or a check failed mid-step
        for _ in range(2000):
            if not self.sched.has_unfinished() and not self.doomed + self.late:
                break
            self._step("none", None)
        assert not self.sched.has_unfinished()
        self.sched.check_invariants()
        st_ = self.mgr.stats()
        assert st_.device.num_used == 0 and st_.host.num_used == 0


OfferedMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestOfferedMachine = OfferedMachine.TestCase
