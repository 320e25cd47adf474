"""The router's response id map (a kvpool/core/fair_lru.py FairLru, NOTE(fair-lru)) against a
plain model: bounded, least recently used order within a tenant, and an id only ever taken from
the tenant holding the most, so a tenant within its share keeps every id whatever another
sends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.router.affinity import ResponseAffinity
from kvpool.core.fair_lru import FairLru
from kvpool.router.replicas import Replica

TENANTS = st.sampled_from(["a", "b", "c", ""])
OPS = st.lists(st.tuples(st.sampled_from(["put", "get"]), TENANTS,
                         st.integers(0, 9), st.sampled_from(["u1", "u2"])), max_size=120)


def _use(model: dict[str, list[str]], tenant: str, key: str) -> None:
    model[tenant].remove(key)
    model[tenant].append(key)


def _put(m: FairLru[str], model: dict[str, list[str]], urls: dict, tenant: str, key: str,
         url: str) -> None:
    shelf = model.setdefault(tenant, [])
    if key in shelf:
        _use(model, tenant, key)
    else:
        shelf.append(key)
    urls[tenant, key] = url
    holders = sum(1 for ids in model.values() if ids)
    most = max(len(ids) for ids in model.values())
    gone = m.put(tenant, key, url)
    if not gone:
        assert sum(map(len, model.values())) <= m.max_entries
        return
    [(victim, old, _)] = gone  # one put evicts one entry at most
    assert len(model[victim]) == most  # the largest holder gives up an id...
    assert len(model[victim]) * holders > m.max_entries  # ...so one within its share never does
    assert old == model[victim][0]  # its least recently used
    model[victim].pop(0)
    del urls[victim, old]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 8), OPS)
def test_the_map_is_bounded_fair_and_lru_within_a_tenant(max_ids, ops):
    m, model, urls = FairLru(max_ids), {}, {}
    for op, tenant, n, url in ops:
        key = f"resp_{n}"
        if op == "put":
            _put(m, model, urls, tenant, key, url)
        else:
            got = m.get(tenant, key)
            assert got == urls.get((tenant, key))
            if got is not None:
                _use(model, tenant, key)
        assert len(m) <= max_ids
        assert len(m) == sum(map(len, model.values()))
        for t in ("a", "b", "c", ""):
            assert m.keys(t) == model.get(t, [])
        assert m.tenants() == sum(1 for ids in model.values() if ids)  # none kept empty


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 30), st.integers(1, 200), st.integers(0, 2))
def test_a_flood_never_takes_an_id_from_a_tenant_within_its_share(max_ids, flood, others):
    m = FairLru(max_ids)
    tenants = ["a", *(f"o{i}" for i in range(others))]
    share = max_ids // (len(tenants) + 1)  # the flooding tenant holds some too
    for t in tenants:
        for i in range(share):
            m.put(t, f"{t}_{i}", "u")
    for i in range(flood):
        m.put("flood", f"f_{i}", "u")
    for t in tenants:
        assert m.keys(t) == [f"{t}_{i}" for i in range(share)]
    assert len(m) <= max_ids


def test_told_tenants_the_affinity_map_keeps_each_tenants_ids_apart():
    aff = ResponseAffinity(max_ids=4, tenant_header="X-Tenant")
    one, two = Replica("http://one"), Replica("http://two")
    learn_a = aff.learner([("X-Tenant", "a")])
    learn_a("resp_a", two)
    for i in range(20):
        aff.learner([("x-tenant", "b")])(f"resp_b{i}", one)
    assert aff.owner_url("resp_a", "a") == "http://two"  # before the fix: evicted by b
    assert aff.owner_url("resp_a", "b") is None  # b's part of the map does not hold it
    held_b = [i for i in range(20) if aff.owner_url(f"resp_b{i}", "b") == "http://one"]
    assert (len(aff), held_b) == (4, [17, 18, 19])  # a's one id and b's newest three
    assert aff.tenant([("X-Tenant", "a"), ("X-Tenant", "b")]) is None  # the replicas' 400
    aff.learner([("X-Tenant", "a"), ("X-Tenant", "b")])("resp_x", one)
    assert len(aff) == 4 and aff.learnt["answer"] == 21


def test_told_no_tenants_the_map_is_one_lru_as_before():
    aff = ResponseAffinity(max_ids=2)
    one = Replica("http://one")
    aff.learner([("X-Tenant", "a")])("resp_a", one)
    aff.learner([("X-Tenant", "b")])("resp_b1", one)
    aff.learner([("X-Tenant", "b")])("resp_b2", one)
    assert aff.owner_url("resp_a") is None and len(aff) == 2
    assert aff.owner_url("resp_b1") == aff.owner_url("resp_b2") == "http://one"
    keyed = ResponseAffinity(keyed=True)  # tenants by API key, as a keyed replica's
    assert keyed.tenant([("Authorization", "Bearer k1")]) != \
        keyed.tenant([("Authorization", "Bearer k2")])
    with pytest.raises(ValueError):
        FairLru(-1)
    with pytest.raises(ValueError):
        ResponseAffinity(max_ids=0)
