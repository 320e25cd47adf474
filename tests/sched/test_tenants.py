"""Tenant fairness in the scheduler: a per-tenant cap on running sequences and
least-running-first admission across tenants (issue "Serving never lies", item 6)."""

from __future__ import annotations

import pytest

from kvpool.errors import ConfigError
from kvpool.sched import SchedulerConfig, SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt


def _hog_then_small(**kw):
    s = make(blocks=400, max_num_seqs=16, max_num_batched_tokens=64, max_model_len=512, **kw)
    rt = FakeRuntime(s)
    for i in range(4):  # the hog: 4 requests of n=4 at a long max_tokens take all 16 slots
        s.add_request(f"hog{i}", prompt(8, 100 * i), params(max_tokens=300, n=4),
                      tenant="hog")
    rt.step()
    s.add_request("small", prompt(8, 5000), params(max_tokens=2), tenant="other")
    return s, rt


def _steps_until_admitted(s, rt, rid, bound):
    for n in range(1, bound + 1):
        rt.step()
        if s.request_status(rid) is not SeqStatus.WAITING:
            return n
    return None


def test_without_a_cap_the_hog_holds_every_slot_and_the_small_request_waits():
    s, rt = _hog_then_small()
    assert _steps_until_admitted(s, rt, "small", 30) is None  # what the issue saw
    assert s.stats().num_running_seqs == 16


def test_a_capped_hog_cannot_starve_another_tenants_small_request():
    s, rt = _hog_then_small(tenant_max_running_seqs=8)
    assert s.stats().num_running_seqs == 8  # two hog requests run, two wait at the cap
    assert _steps_until_admitted(s, rt, "small", 2) == 1
    rt.drain()
    f = rt.by_id()
    assert f["small"].status is SeqStatus.FINISHED_LENGTH
    # the small request finished long before the hog's last one
    assert f["small"].finished_time < min(f[f"hog{i}"].finished_time for i in range(4))
    assert_empty(s)


def test_a_slot_goes_to_the_tenant_running_fewest_not_to_the_queue_head():
    s = make(blocks=200, max_num_seqs=2, max_model_len=64)
    rt = FakeRuntime(s)
    s.add_request("a0", prompt(4, 100), params(max_tokens=3), tenant="a")
    s.add_request("a1", prompt(4, 200), params(max_tokens=3), tenant="a")  # queued before b
    s.add_request("a2", prompt(4, 300), params(max_tokens=3), tenant="a")
    s.add_request("b0", prompt(4, 400), params(max_tokens=3), tenant="b")
    out = rt.step()
    assert [p.request_id for p in out.prefills] == ["a0", "b0"]  # a runs one, b none
    assert s.request_status("a1") is SeqStatus.WAITING
    rt.drain()
    order = [f.request_id for f in rt.finished]
    assert order.index("a1") < order.index("a2")  # FCFS within a tenant
    assert_empty(s)


def test_a_request_wider_than_the_tenant_cap_is_ignored_with_a_reason():
    s = make(blocks=64, tenant_max_running_seqs=2)
    rt = FakeRuntime(s)
    s.add_request("wide", prompt(4), params(n=3), tenant="t")
    s.add_request("ok", prompt(4, 500), params(n=2), tenant="t")
    rt.drain()
    f = rt.by_id()
    assert f["wide"].status is SeqStatus.FINISHED_IGNORED
    assert "tenant_max_running_seqs=2" in f["wide"].reason
    assert f["ok"].status is SeqStatus.FINISHED_LENGTH
    assert_empty(s)


def test_tenant_cap_is_validated():
    with pytest.raises(ConfigError, match="tenant_max_running_seqs"):
        SchedulerConfig(tenant_max_running_seqs=0)
