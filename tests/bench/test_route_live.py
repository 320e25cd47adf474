"""bench.route_live: its workload's shape (bench/route_workload.py), and a --quick live run (2 real
replicas + router)."""

import json

from hypothesis import given
from hypothesis import strategies as st

from bench import route_live
from bench.route import DEFAULT_TRACE, Req, load_reqs
from bench.route_workload import Turn, build_workload, prompt_ids
from stress.http.servers import ROOT


def test_conversations_keep_the_trace_structure():
    reqs = load_reqs(DEFAULT_TRACE, 3000)
    turns = build_workload(reqs, 40, max_blocks=30, system_prompts=3, seed=1)
    assert turns == build_workload(reqs, 40, max_blocks=30, system_prompts=3, seed=1)
    convs = {}
    for t in turns:
        assert t.blocks[0] < 0 and all(h > 0 for h in t.blocks[1:]) and len(t.blocks) <= 30
        convs.setdefault(t.blocks[1], []).append(t)
    assert len(convs) == 40 and {t.blocks[0] for t in turns} <= {-1, -2, -3}
    # a turn's trace blocks are that trace request's own (cut at max_blocks), in trace order
    picked = [r for r in reqs if len(r.hash_ids) > 1 and r.hash_ids[1] in convs]
    assert [t.blocks[1:] for t in turns] == [r.hash_ids[1:30] for r in picked]
    assert all(len({t.blocks[0] for t in ts}) == 1 for ts in convs.values())


def test_a_lone_system_block_is_no_conversation():
    reqs = [Req(0, 1, (0,)), Req(0, 1, (0, 5, 6)), Req(1, 1, (0, 5, 7))]
    turns = build_workload(reqs, 10, system_prompts=1)
    assert [t.blocks for t in turns] == [(-1, 5, 6), (-1, 5, 7)]


@given(st.lists(st.integers(1, 30), min_size=1, max_size=6),
       st.lists(st.integers(1, 30), min_size=1, max_size=6), st.sampled_from([4, 16]))
def test_shared_blocks_are_shared_tokens_and_tails_never_are(a, b, bs):
    ta, tb = Turn(0, 1, tuple(a)), Turn(1, 1, tuple(b))
    pa, pb = prompt_ids(ta, "s", bs), prompt_ids(tb, "s", bs)
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    assert pa[:k * bs] == pb[:k * bs]
    assert len(pa) == len(a) * bs + bs // 2
    assert prompt_ids(ta, "other", bs)[:bs] != pa[:bs]  # salted runs share nothing


def test_quick_live_run(tmp_path):
    out = tmp_path / "route_live.json"
    # --baseline: this checkout again, as the <arm>@base arms (a second checkout in real use)
    assert route_live.main(["--quick", "--overhead", "2", "--epp", "2", "--baseline", str(ROOT),
                            "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    turns = res["workload"]["turns"]
    rr, pa = res["modes"]["round_robin"], res["modes"]["prefix"]
    for m in (rr, pa):
        (run,) = m["runs"]
        assert run["failed"] == 0 and run["requests"] == turns
        # the clients' usage.cached_tokens and the replicas' own counters agree
        assert run["hit_rate"] == run["metrics_hit_rate"]
    assert rr["runs"][0]["decisions"]["round_robin"] == turns
    assert rr["runs"][0]["decisions"]["prefix"] == 0
    assert pa["runs"][0]["decisions"]["prefix"] > 0
    assert pa["hit_rate"] > rr["hit_rate"] > 0
    # the picker path (Envoy + kvpool epp) and the router against direct, interleaved
    assert res["epp"]["rounds"] == 2
    assert all(res["epp"][a]["p50_ms"] > 0 for a in ("router", "epp", "router@base", "epp@base"))
    ev = res["modes"]["kv_events"]  # the prefix policy fed by KV events: no lookups
    assert ev["runs"][0]["failed"] == 0 and ev["runs"][0]["decisions"]["prefix"] > 0
    assert ev["hit_rate"] > rr["hit_rate"]
    o = res["overhead"]
    assert o["rounds"] == 2 and {"round_robin", "prefix", "kv_events"} <= set(o)
    assert all(o[a]["p50_ms"] > 0 for a in ("round_robin", "prefix", "kv_events"))
    assert all(len(o[a + "@base"]["added_per_round_ms"]) == 3 for a in ("prefix", "kv_events"))
