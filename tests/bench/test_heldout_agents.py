"""bench/heldout_agents.py: the held-out shapes tool_agent, doc_window and doc_fanout have the
properties their docstrings name (bench.heldout replays them as SHAPES)."""

from collections import Counter

from bench.heldout import SHAPES
from bench.heldout_agents import doc_fanout, doc_window, tool_agent


def _extends(reqs, lo=1):
    """How many requests start with an earlier request whole (at least ``lo`` blocks longer
    or equal): an agent's next step or a retry."""
    seen = {tuple(r) for r in reqs}
    return sum(any(tuple(r[:k]) in seen for k in range(lo, len(r) + 1)) for r in reqs)


def test_both_are_held_out_shapes_and_seeded():
    assert SHAPES["tool_agent"] is tool_agent and SHAPES["doc_window"] is doc_window
    for gen in (tool_agent, doc_window):
        assert gen(1, 0.05) == gen(1, 0.05) != gen(2, 0.05)


def test_tool_agents_share_schemas_retry_and_extend_their_context():
    reqs = tool_agent(1, 0.3)
    heads = Counter(r[0] for r in reqs if len(r) >= 40)
    assert heads.most_common(1)[0][1] > 0.1 * len(reqs)  # a popular tool schema
    repeats = Counter(tuple(r) for r in reqs)
    assert sum(c > 1 for c in repeats.values()) > 20  # retries and template re-runs
    assert _extends(reqs) > 0.3 * len(reqs)  # steps resend the context so far
    firsts = Counter(r[0] for r in reqs)
    assert sum(firsts[r[0]] == 1 for r in reqs) > 0.1 * len(reqs)  # one-off requests


def test_doc_windows_share_content_only_from_the_same_start():
    reqs = doc_window(1, 0.3)
    system = Counter(r[0] for r in reqs).most_common(1)[0][0]
    qa = [r for r in reqs if r[0] == system]
    assert 0.6 * len(reqs) < len(qa) < 0.9 * len(reqs)  # the rest are tenant bursts
    starts = Counter(r[6] for r in qa)  # after the 6-block system prompt: (doc, start)
    assert sum(c > 1 for c in starts.values()) > 50  # questions on the same window
    by_start: dict[int, set[int]] = {}
    for r in qa:
        by_start.setdefault(r[6], set()).update(r[6:-6])
    firsts = list(by_start)
    assert all(not by_start[a] & by_start[b] for a, b in zip(firsts, firsts[1:]))
    tails = [r[-1] for r in reqs]
    assert len(set(tails)) == len(tails)  # every question and query ends unique


def test_doc_fanout_reads_each_document_several_times_beside_chats_and_uploads():
    assert SHAPES["doc_fanout"] is doc_fanout
    assert doc_fanout(1, 0.05) == doc_fanout(1, 0.05) != doc_fanout(2, 0.05)
    reqs = doc_fanout(1, 0.3)
    heads = Counter(r[0] for r in reqs)
    assert 0.85 * len(reqs) < sum(c for _, c in heads.most_common(3)) < 0.95 * len(reqs)
    bodies = Counter(tuple(r[:-4]) for r in reqs if len(r) > 40)
    assert sum(c >= 3 for c in bodies.values()) > 50  # documents fanned out to tasks
    assert _extends(reqs[:600], lo=2) > 0.2 * 600  # chat turns resend their history
    assert sum(heads[r[0]] == 1 for r in reqs) > 0.05 * len(reqs)  # one-off uploads
