"""An admitted request is never dropped for capacity (issue "Serving never lies and never
stalls", item 2): preempted by swap or by recompute, it comes back and finishes, also with
tenants and a per-tenant cap on running sequences (item 6). Only a request
that admission itself refuses (NEVER at its first admission) may end FINISHED_IGNORED."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvpool.config import CacheConfig
from kvpool.core import AllocStatus, BlockSpaceManager, Device
from kvpool.sched import Scheduler, SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt


def _sched(blocks: int, bs: int, host: int, watermark: float, caching: bool,
           mode: str | None = None, **kw) -> Scheduler:
    kw.setdefault("max_model_len", 64)
    return make(blocks, host, watermark, caching, bs, preemption_mode=mode, **kw)


def test_swapped_request_whose_seed_formula_says_never_still_finishes():
    # the reproduction: r1 (15 + 5 tokens = 5 blocks) is swapped out holding 5
    # blocks; the seeds' "blocks + 1 per sequence" made its swap-in 6 > 6 - 1 (watermark):
    # NEVER, and r1 ended FINISHED_IGNORED although it was admitted and fits
    for mode in (None, "recompute", "swap"):
        s = _sched(6, 4, 6, 0.2, False, mode)
        rt = FakeRuntime(s)
        s.add_request("r0", prompt(2), params(max_tokens=9))
        s.add_request("r1", prompt(15, 2000), params(max_tokens=5))
        rt.drain()
        done = rt.by_id()
        assert {k: f.status for k, f in done.items()} == {
            "r0": SeqStatus.FINISHED_LENGTH, "r1": SeqStatus.FINISHED_LENGTH}, mode
        assert done["r1"].output_token_ids == [7] * 5
        assert done["r0"].output_token_ids == [7] * 9
        assert_empty(s)


def test_swap_in_admission_counts_the_next_decode_exactly():
    m = BlockSpaceManager(CacheConfig(num_device_blocks=6, block_size=4, num_host_blocks=6,
                                      watermark=0.2, enable_prefix_caching=False))
    m.allocate([1], prompt(17))  # 5 blocks, the last holds 1 token: the next one fits in it
    m.swap.swap_out([1])
    adm = m.admission(swapped=[1])
    assert (adm.status, adm.capacity, adm.need) == (AllocStatus.OK, 5, 5)  # 6 - 5 >= 1
    assert m.admission(swapped=[1]).status is AllocStatus.OK
    assert m.admission([(18, ())]).status is AllocStatus.OK  # recomputing it: same answer
    assert m.swap.swap_in([1]) is not None and m.get_device(1) is Device.DEVICE
    assert m.slots.append_batch([(1, [5])]) is not None
    m.free(1)
    m.allocate([2], prompt(20))  # 5 full blocks: its next token needs a 6th
    m.swap.swap_out([2])
    adm = m.admission(swapped=[2])
    assert (adm.status, adm.capacity) == (AllocStatus.NEVER, 6)
    assert "can never fit" in adm.reason and "6 blocks" in adm.reason
    assert m.admission([(21, ())]).status is AllocStatus.NEVER  # as admission says
    m.check_invariants()


def _outgrown(mode: str):
    """r grows to 5 full blocks (20 tokens) in a pool that admits 5 of 6: its next token
    needs a 6th block, and a foreign table (10_000) holds the last free one: r is preempted
    (its own request is the only victim). Returns the scheduler, its runtime and r's seq."""
    s = _sched(6, 4, 6, 0.2, False, mode)
    rt = FakeRuntime(s)
    s.add_request("r", prompt(16), params(max_tokens=8))
    for _ in range(4):
        rt.step()
    (sid,) = s.seq_ids("r")
    assert s.manager.get_num_tokens(sid) == 19
    s.manager.allocate([10_000], prompt(4, 9000))  # someone else takes the last free block
    rt.step()  # r needs no block for token 20 (its fifth block has room)
    out = rt.step()  # token 21 needs a 6th block: r is the only victim
    assert [(p.request_id, p.mode) for p in out.preempted] == [("r", s.config.forced_mode)]
    return s, rt


def test_admitted_request_that_outgrows_the_watermark_comes_back_and_finishes():
    # NOTE(alone): r's prompt + max_tokens (23 tokens in its table at most) fits the whole
    # pool but not the pool minus the watermark. It was admitted, so it is never dropped:
    # it waits while the pool is short, then runs alone with every block (it used to end
    # FINISHED_IGNORED: "prompt + generated tokens needs 6 blocks ... can never fit")
    for mode in ("swap", "recompute"):
        s, rt = _outgrown(mode)
        out = rt.step()  # the foreign block is still held: 5 free of the 6 it needs
        assert out.ignored == [] and s.has_unfinished(), mode
        s.manager.free(10_000)
        rt.drain()
        (f,) = rt.by_id().values()
        assert f.status is SeqStatus.FINISHED_LENGTH, (mode, f.reason)
        assert f.output_token_ids == [7] * 8
        assert_empty(s)


def test_admitted_request_waits_for_running_ones_before_taking_the_watermark():
    # r needs the watermark's block to come back; while q runs it waits (LATER, not
    # NEVER), and when q is done it runs alone and finishes
    s, rt = _outgrown("recompute")
    s.manager.free(10_000)
    s.add_request("q", prompt(2, 5000), params(max_tokens=1))
    rt.drain()
    done = rt.by_id()
    assert {k: f.status for k, f in done.items()} == {
        "r": SeqStatus.FINISHED_LENGTH, "q": SeqStatus.FINISHED_LENGTH}
    assert done["r"].output_token_ids == [7] * 8
    assert_empty(s)


def test_a_request_that_outgrows_the_whole_pool_is_refused_only_by_admission():
    # without the engine's up-front check (prompt + max_tokens beyond the whole pool), a
    # request growing past 6 blocks cannot come back: admission refuses it with its reason
    s = _sched(6, 4, 6, 0.2, False, "recompute")
    rt = FakeRuntime(s)
    s.add_request("r", prompt(16), params(max_tokens=12))
    rt.drain()
    (f,) = rt.by_id().values()
    assert f.status is SeqStatus.FINISHED_IGNORED
    assert f.reason.startswith("prompt + generated tokens needs 7 blocks"), f.reason
    assert_empty(s)


@st.composite
def scenario(draw):
    bs = draw(st.sampled_from([2, 4]))
    blocks = draw(st.integers(3, 14))
    watermark = draw(st.sampled_from([0.0, 0.1, 0.2, 0.3]))
    host = draw(st.sampled_from([0, 4, 16]))
    caching = draw(st.booleans())
    mode = draw(st.sampled_from([None, "swap", "recompute"]))
    policy = draw(st.sampled_from(["fcfs", "priority"]))
    chunked = draw(st.booleans())
    room = blocks - int(watermark * blocks)  # blocks admission lets one request have
    reqs = []
    for i in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 2))
        if draw(st.integers(0, 5)) == 0:  # one that admission refuses outright
            p_len = room * bs + draw(st.integers(1, bs))
            max_tokens = 1
        else:  # one whose every sequence, at full length, fits what admission accepts
            if room < n:
                continue
            top = (room // n) * bs  # prompt + max_tokens <= top for each sequence
            if top < 2:
                continue
            p_len = draw(st.integers(1, top - 1) | st.integers(max(1, top - 2 * bs), top - 1))
            # NOTE(bias): mostly at or near full length, where preemption bites hardest
            max_tokens = max(1, top - p_len - draw(st.sampled_from([0, 0, 1, 2, top])))
        reqs.append((f"q{i}", p_len, max_tokens, n, draw(st.integers(0, 2)),
                     draw(st.integers(0, 3)), draw(st.sampled_from(["", "a", "b"]))))
    cap = draw(st.sampled_from([None, 2, 3]))  # per-tenant running sequences (n <= 2)
    return bs, blocks, watermark, host, caching, mode, policy, chunked, reqs, cap


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), st.booleans())
@example((4, 6, 0.2, 6, False, None, "fcfs", True,  # the reproduction, always tried
          [("q0", 2, 9, 1, 0, 0, ""), ("q1", 15, 5, 1, 0, 0, "")], None), False)
def test_no_admitted_request_is_ever_ignored_and_every_request_finishes(sc, diverge):
    bs, blocks, watermark, host, caching, mode, policy, chunked, reqs, cap = sc
    s = _sched(blocks, bs, host, watermark, caching, mode, policy=policy,
               enable_chunked_prefill=chunked, tenant_max_running_seqs=cap)
    # diverging outputs make n=2 requests recompute as two units (sharing the prompt blocks)
    rt = FakeRuntime(s, sample_fn=(lambda sid, step: 10 + sid % 3) if diverge else None)
    arrivals: dict[int, list] = {}
    for r in reqs:
        arrivals.setdefault(r[5], []).append(r)
    step = 0
    while arrivals or s.has_unfinished():
        for rid, p_len, max_tokens, n, prio, _, tenant in arrivals.pop(step, []):
            s.add_request(rid, prompt(p_len, 100 * int(rid[1:]) % 300), params(max_tokens, n=n),
                          priority=prio, tenant=tenant)
        rt.step()
        s.check_invariants()
        step += 1
        assert step < 2000, "not drained: a request stalled"
    done = rt.by_id()
    assert sorted(done) == sorted(r[0] for r in reqs)
    room = blocks - int(watermark * blocks)
    for rid, p_len, max_tokens, n, *_ in reqs:
        f = done[rid]
        if f.status is SeqStatus.FINISHED_IGNORED:
            # only what admission refuses at first sight: never an admitted request
            assert f.first_scheduled_time is None, (rid, f.reason)
            assert -(-p_len // bs) > room, (rid, f.reason)
        else:
            assert f.status is SeqStatus.FINISHED_LENGTH, (rid, f.status)
            assert all(len(o.output_token_ids) == max_tokens for o in f.seqs), rid
    assert_empty(s)
