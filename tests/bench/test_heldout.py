"""bench.heldout: its shapes are seeded and deterministic, each has the property it is named
for, and main reports every policy against LRU per cell."""

from collections import Counter

import pytest

from bench.heldout import SHAPES, cell, main
from bench.heldout_early import agent, code_edit, loop, mooncake, rag_bursty, tenants
from bench.heldout_eval import batch_eval
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_are_deterministic_per_seed(name):
    # one test per shape, so the workers share them (46 shapes, ~11 s in all)
    gen = SHAPES[name]
    first = gen(1, 0.05)
    assert first == gen(1, 0.05)
    assert first != gen(2, 0.05)


def test_loop_defeats_lru_when_longer_than_the_pool():
    reqs = loop(1, 0.5)
    looped = len({h for r in reqs for h in r})
    # product policies and classic baselines (W-TinyLFU among them) with OPT: the research
    # candidates run on every shape, loop included, in test_main_reports_every_policy_against_lru
    rates = cell(reqs, looped // 2, candidates=[])
    assert rates["lru"] == 0.0  # every block is evicted just before its next use
    assert rates["wtinylfu"] > 0.0  # an admission filter keeps part of the loop


def test_tenants_share_system_prompts_and_agents_resend_their_context():
    reqs = tenants(1, 0.05)
    assert len({tuple(r[:16]) for r in reqs}) <= 8
    sessions = agent(1, 0.1)
    firsts = [r[0] for r in sessions if len(r) >= 10]
    assert len(firsts) > len(set(firsts))  # contexts come back


def test_mooncake_mixes_shared_prompts_returning_chats_and_scans():
    reqs = mooncake(1, 0.1)
    firsts = Counter(r[0] for r in reqs)
    shared = sum(n for _, n in firsts.most_common(4))  # the 4 system prompts
    assert 0.6 * len(reqs) < shared < 0.95 * len(reqs)  # RAG + chats; the rest are scans
    assert sum(n == 1 for n in firsts.values()) > 0.1 * len(reqs)  # one-shot scans
    seen = {tuple(r) for r in reqs}
    turns = [r for r in reqs
             if any(tuple(r[:k]) in seen for k in range(max(1, len(r) - 6), len(r)))]
    assert turns  # a chat's next turn extends a request sent before


def test_rag_bursty_moves_its_hot_documents_and_keeps_background_chats():
    reqs = rag_bursty(1, 0.5)
    docs = [r for r in reqs if len(r) >= 33 and r[0] != reqs_system(reqs)]
    quarter = len(reqs) // 4
    early = Counter(r[0] for r in docs if reqs.index(r) < quarter)
    late = Counter(r[0] for r in docs[len(docs) * 3 // 4:])
    assert early.most_common(1)[0][0] != late.most_common(1)[0][0]  # the hot set moved
    tails = [r[-1] for r in docs]
    assert len(set(tails)) == len(tails)  # every query is unique
    chats = [r for r in reqs if r[0] == reqs_system(reqs)]
    assert 0.25 * len(reqs) < len(chats) < 0.45 * len(reqs)


def test_batch_eval_repeats_items_and_reruns_tasks():
    reqs = batch_eval(1)
    first = Counter(r[0] for r in reqs)
    assert len(first) <= 31  # 30 task headers and the chats' shared system prompt
    runs = Counter(tuple(r) for r in reqs)
    assert sum(c > 1 for c in runs.values()) > 500  # self-consistency repeats and re-runs
    gaps = []  # a re-run sends an item again long after its task's first run
    last: dict[tuple, int] = {}
    for i, r in enumerate(map(tuple, reqs)):
        if r in last and i - last[r] > 500:
            gaps.append(i - last[r])
        last[r] = i
    assert gaps


def test_code_edit_shares_repo_contexts_and_edits_change_later_blocks():
    reqs = code_edit(1, 0.2)
    heads = Counter(r[0] for r in reqs)
    assert len(heads) <= 12  # every request starts with one of the 12 repository contexts
    seen: set[int] = set()
    edited = 0
    for prev, cur in zip(reqs, reqs[1:]):
        seen.update(prev)
        k = 0  # a turn that resends an earlier request's prefix, then content never seen
        while k < min(len(prev), len(cur)) and prev[k] == cur[k]:
            k += 1
        if k and any(h not in seen for h in cur[k:k + 1]) and len(cur) > k + 4:
            edited += cur[k + 1] not in seen
    assert edited > 0  # an edit: the file's blocks from the edit on are new content
    assert max(heads.values()) > 2 * min(heads.values())  # Zipf-popular repositories


def reqs_system(reqs):
    """The first id of the background chats' shared system prompt (the commonest head)."""
    return Counter(r[0] for r in reqs).most_common(1)[0][0]


def head(reqs: list[list[int]], blocks: int = 2000) -> list[list[int]]:
    """The first requests of ``reqs`` up to about ``blocks`` blocks (one at least)."""
    out, n = [], 0
    for r in reqs:
        if out and n + len(r) > blocks:
            break
        out.append(r)
        n += len(r)
    return out


@pytest.mark.parametrize("part", range(4))
def test_main_reports_every_policy_against_lru(part, tmp_path, capsys, monkeypatch):
    # every shape's first 2000 blocks or so at scale 0.002: some shapes keep fixed-size parts
    # (100K+ blocks at that scale), and every policy and candidate replays each trace here;
    # a quarter of the shapes per test, so the workers share them
    for name, gen in list(SHAPES.items()):
        monkeypatch.setitem(SHAPES, name, lambda seed, scale, gen=gen: head(gen(seed, scale)))
    shapes = sorted(SHAPES)[part::4]
    res = main(["--shapes", *shapes, "--seeds", "1", "--capacities", "200", "--scale",
                "0.002", "--json", str(tmp_path / "h.json")])
    assert set(res["cells"]) == {f"{n}@1@200" for n in shapes}
    for rates in res["cells"].values():
        assert set(POLICIES) | set(CANDIDATES) <= set(rates)
        assert all(0.0 <= v <= 1.0 for v in rates.values())
    assert set(res["below_lru"]) == (set(POLICIES) | set(CANDIDATES)) - {"lru"}
    assert set(res["below_best_classic"]) == set(res["below_lru"])
    assert "below lru:" in capsys.readouterr().out
    assert (tmp_path / "h.json").exists()
