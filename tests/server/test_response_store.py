"""ResponseStore (kvpool/server/response_store.py) bounded by count and by bytes: neither bound
is ever passed, a tenant only reads its own responses, eviction is NOTE(fair-evict)'s (the
largest holder's least recently used; a tenant within its share loses nothing), and a response
larger than the whole byte budget is not stored (NOTE(response-bytes))."""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.response_store import ResponseStore, StoredResponse

TENANTS = ("a", "b", "c")
FIXED = 1024  # NOTE(response-bytes)'s per-entry cost left out, with room: about 250 bytes


def entry(payload: int) -> StoredResponse:
    """A response of ``payload`` + 9 bytes ({"t": "..."} as JSON, no messages)."""
    return StoredResponse({"t": "x" * payload}, ())


def test_size_is_the_body_json_and_the_messages_objects():
    """NOTE(response-bytes): the body is kept as its JSON (json_response's), the messages as
    they are, each object counted by sys.getsizeof."""
    msgs = ({"role": "user", "content": "\ud800ab"},)
    e = StoredResponse({"a": "é"}, msgs)
    assert e.raw == b'{"a": "\\u00e9"}' and json.loads(e.raw) == {"a": "é"}
    held = (msgs[0], "role", "user", "content", "\ud800ab")
    assert e.nbytes == len(e.raw) + sum(map(sys.getsizeof, held))
    assert entry(10).nbytes == 19
    assert StoredResponse({}, (), b"event: x").nbytes == 2 + 8


async def test_a_logprob_response_holds_no_more_memory_than_its_size(srv):
    """The probe's case: a response with top_logprobs held as Python dicts cost about 4.6x its
    JSON, which was its size. Now what the entry keeps (tracemalloc) is within its size (but
    the fixed per-entry cost the note leaves out), and its size within twice that."""
    body = {"input": "Count to ten", "max_output_tokens": 120, "ignore_eos": True,
            "top_logprobs": 20, "include": ["message.output_text.logprobs"]}
    async with aiohttp.ClientSession() as s, s.post(srv.v1 + "/responses", json=body) as r:
        assert r.status == 200
        text = await r.text()
    gc.collect()
    tracemalloc.start()
    try:
        answer = json.loads(text)  # fresh objects, as the server's view makes them
        assert len(answer["output"][0]["content"][0]["logprobs"]) == 120
        kept = StoredResponse(answer, ({"role": "user", "content": body["input"]},))
        del answer
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held - FIXED <= kept.nbytes <= 2 * held, (held, kept.nbytes, len(text))


def test_a_response_over_the_whole_budget_is_not_stored_and_evicts_nothing():
    store = ResponseStore(max_entries=8, max_bytes=100)
    store.put("a", "small", entry(10))
    store.put("b", "huge", entry(92))  # 101 bytes
    assert store.get("b", "huge") is None
    assert (store.held_ids("a"), len(store), store.nbytes) == (["small"], 1, 19)
    store.put("b", "fits", entry(72))  # 81 bytes: 100 together, exactly the budget
    assert store.nbytes == 100 and store.held_ids("b") == ["fits"]


def test_zero_bytes_stores_nothing():
    store = ResponseStore(max_bytes=0)
    store.put("a", "r", entry(0))
    assert (len(store), store.nbytes, store.get("a", "r")) == (0, 0, None)
    with pytest.raises(ValueError, match="max_bytes=-1"):
        ResponseStore(max_bytes=-1)


def test_byte_pressure_evicts_the_tenant_holding_the_most_bytes():
    """b's one large response goes before any of a's many small ones, and b's own oldest
    goes first."""
    store = ResponseStore(max_entries=100, max_bytes=200)
    for i in range(5):
        store.put("a", f"a{i}", entry(11))  # 5 x 20 bytes
    store.put("b", "b0", entry(51))  # 60: a holds 100, b 60
    store.put("b", "b1", entry(51))  # 220 > 200: b holds the most bytes (120)
    assert (store.held_ids("a"), store.held_ids("b")) == ([f"a{i}" for i in range(5)], ["b1"])
    assert (store.held_bytes("a"), store.held_bytes("b"), store.nbytes) == (100, 60, 160)


def test_count_pressure_evicts_the_tenant_holding_the_most_entries():
    """Each bound picks by its own measure: a's two large responses are not what the count
    is over, b's many small ones are."""
    store = ResponseStore(max_entries=5, max_bytes=10_000)
    store.put("a", "a0", entry(991))
    store.put("a", "a1", entry(991))
    for i in range(4):
        store.put("b", f"b{i}", entry(1))
    assert store.held_ids("a") == ["a0", "a1"] and store.held_ids("b") == ["b1", "b2", "b3"]


def test_lowered_bounds_evict_now_by_the_same_rule():
    store = ResponseStore(max_entries=10, max_bytes=1000)
    for i in range(3):
        store.put("a", f"a{i}", entry(11))
    store.put("b", "b0", entry(91))  # a: 60 bytes in 3, b: 100 in 1
    store.set_bounds(10, 100)
    assert (store.held_ids("a"), store.held_ids("b")) == (["a0", "a1", "a2"], [])
    store.set_bounds(2, 100)
    assert store.held_ids("a") == ["a1", "a2"] and store.nbytes == 40
    with pytest.raises(ValueError, match="max_entries=-1"):
        store.set_bounds(-1, 100)


def _check_put(store: ResponseStore, tenant: str, rid: str, new: StoredResponse,
               before: dict[str, list[str]], sizes: dict[tuple[str, str], int]) -> None:
    after = {t: store.held_ids(t) for t in TENANTS}
    old = [r for r in before[tenant] if r != rid]
    if new.nbytes > store.max_bytes:  # not stored, nothing else moves
        assert after == {**before, tenant: old}
        return
    pre = {**before, tenant: old + [rid]}  # after the insertion, before any eviction
    lost = {t: [r for r in pre[t] if r not in after[t]] for t in TENANTS}
    held = {t: (len(pre[t]), sum(sizes[t, r] for r in pre[t])) for t in TENANTS if pre[t]}
    k = len(held)
    for t in TENANTS:
        assert pre[t][:len(lost[t])] == lost[t], "a tenant loses its least recently used first"
        count, nbytes = held.get(t, (0, 0))
        if count * k <= store.max_entries and nbytes * k <= store.max_bytes:
            assert not lost[t], f"{t} held no more than its share yet lost {lost[t]}"
    evicted = [sizes[t, r] for t in TENANTS for r in lost[t]]
    if evicted:  # no more went than needed: putting any one back would pass a bound
        assert len(store) + 1 > store.max_entries or \
            store.nbytes + max(evicted) > store.max_bytes
    else:
        assert after == pre


OPS = st.lists(st.tuples(st.sampled_from(("put", "put", "get")), st.sampled_from(TENANTS),
                         st.integers(0, 5), st.integers(0, 90)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 6), st.integers(0, 300), OPS)
def test_bounds_isolation_and_fair_eviction_hold_for_any_sequence(max_entries, max_bytes, ops):
    store = ResponseStore(max_entries=max_entries, max_bytes=max_bytes)
    sizes: dict[tuple[str, str], int] = {}
    last: dict[tuple[str, str], StoredResponse] = {}
    for op, tenant, i, payload in ops:
        rid = f"r{i}"  # ids collide across tenants: each still reads only its own
        if op == "put":
            before = {t: store.held_ids(t) for t in TENANTS}
            new = entry(payload)
            store.put(tenant, rid, new)
            sizes[tenant, rid], last[tenant, rid] = new.nbytes, new
            _check_put(store, tenant, rid, new, before, sizes)
        else:
            got = store.get(tenant, rid)
            assert got is None or got is last[tenant, rid]
            assert (got is not None) == (rid in store.held_ids(tenant))
            assert got is None or store.held_ids(tenant)[-1] == rid  # a lookup is a use
        assert len(store) <= max_entries and store.nbytes <= max_bytes
        assert len(store) == sum(store.held(t) for t in TENANTS)
        assert store.nbytes == sum(store.held_bytes(t) for t in TENANTS)
        for t in TENANTS:
            assert store.held_bytes(t) == sum(sizes[t, r] for r in store.held_ids(t))
