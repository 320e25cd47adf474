"""bench/heldout_ide.py: the held-out shape ide_tree has the properties its docstring names
(bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_ide import CODE, CONTEXT_HEAD, generate, ide_tree
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import by_kind, common


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.3)


def _first_context(m):
    """(start, end) tokens of the first context file of completion meta ``m``."""
    ide = m[4]
    k = len(ide.ends) - len(ide.contexts)
    return ide.ends[k - 1], ide.ends[k]


def test_registered_deterministic_and_seeded():
    assert SHAPES["ide_tree"] is ide_tree
    assert ide_tree(1, 0.05) == ide_tree(1, 0.05) != ide_tree(2, 0.05)
    assert generate(3, 0.05).trace == ide_tree(3, 0.05)
    for scale in (0.05, 0.02):  # tiny scales still have every part and non-empty requests
        small = generate(4, scale)
        assert all(small.trace) and small.saves
        assert {m[0] for m in small.meta} == {"ide", "tree", "chat"}


def test_a_burst_extends_its_previous_request_or_shares_it_up_to_a_deletion(run):
    forward = deleted = 0
    for idx in by_kind(run, "ide", lambda m: m[2]).values():
        for i, j in zip(idx, idx[1:]):
            a, b = run.meta[i][4], run.meta[j][4]
            assert run.meta[i][1] == run.meta[j][1] and (a.repo, a.file) == (b.repo, b.file)
            assert [f for f, _ in a.contexts] == [f for f, _ in b.contexts]
            if a.contexts != b.contexts:
                continue  # a teammate saved a context file in between
            c = common(run.trace[i], run.trace[j])
            assert c == (run.meta[j][3] + b.keep) // BLOCK and b.keep <= a.cursor
            assert not set(run.trace[j][c:]) & set(run.trace[i])  # new content from there
            if b.keep == a.cursor:
                forward += 1
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
                assert len(run.trace[j]) >= len(run.trace[i])
            else:
                deleted += 1
                assert len(run.trace[i]) - c <= 80 // BLOCK + 2  # a short deletion
    assert forward > 1000 and deleted > 0.08 * forward


def test_a_saved_edit_changes_a_files_ids_from_the_edit_on_only(run):
    for _, r, _, old, new, edit in run.saves:
        pre = run.repos[r].preamble
        a, b = run.blocks.ids(CODE, [pre, *old]), run.blocks.ids(CODE, [pre, *new])
        c = (pre[1] + edit) // BLOCK
        assert common(a, b) == min(c, len(a))
        assert not set(a[c:]) & set(b[c:])
    assert len(run.saves) > 150
    assert sum(e < 0.5 * sum(t for _, t in old) for *_, old, _, e in run.saves) > 30


def _head(segments, tokens):
    """The first ``tokens`` tokens of ``segments``."""
    out = []
    for content, t in segments:
        if tokens > 0:
            out.append((content, min(t, tokens)))
        tokens -= t
    return out


def test_everyone_sends_the_saved_content_of_a_file_from_its_save_on(run):
    version, contents = Counter(), defaultdict(list)  # (repo, file) -> content per version
    saves, begun = iter(run.saves), {}
    nxt = next(saves)
    checked = Counter()
    for i, m in enumerate(run.meta):
        while nxt and nxt[0] < i:
            contents[nxt[1], nxt[2]][:] = contents[nxt[1], nxt[2]] or [nxt[3]]
            contents[nxt[1], nxt[2]].append(nxt[4])
            version[nxt[1], nxt[2]] += 1
            nxt = next(saves, None)
        if m[0] != "ide":
            continue
        ide, repo = m[4], run.repos[m[4].repo]
        assert all(v == version[ide.repo, f] for f, v in ide.contexts)
        assert ide.version == begun.setdefault(m[2], version[ide.repo, ide.file])
        files = [(f, v, CONTEXT_HEAD) for f, v in ide.contexts]
        if m[2] not in checked:  # a burst's first request: the file up to the edit as saved
            files.append((ide.file, ide.version, ide.keep))
        if all(contents[ide.repo, f] for f, _, _ in files):
            segments = [repo.preamble, *repo.rules]
            for f, v, tokens in files:
                segments += _head(contents[ide.repo, f][v], tokens)
            k = sum(t for _, t in segments) // BLOCK
            assert run.trace[i][:k] == run.blocks.ids(CODE, segments)[:k]
            checked["edited"] += any(v for _, v, _ in files)
        checked[m[2]] += 1
    assert checked["edited"] > 50  # requests that send a teammate's (or their own) edit


def test_a_context_file_changes_from_the_edit_on_after_a_save(run):
    edits = defaultdict(list)  # (repo, file) -> the edit point of each save, in order
    for _, r, f, _, _, e in run.saves:
        edits[r, f].append(e)
    firsts = by_kind(run, "ide", lambda m: (m[4].repo, *(m[4].contexts or ((-1, -1),))[0]))
    checked = others = 0
    for (r, f, v), idx in firsts.items():
        if (r, f, v + 1) not in firsts:
            continue
        i, j = idx[-1], firsts[r, f, v + 1][0]
        start = _first_context(run.meta[i])[0]
        c = common(run.trace[i], run.trace[j])
        if edits[r, f][v] < CONTEXT_HEAD - BLOCK:
            assert c == (start + edits[r, f][v]) // BLOCK
        else:  # the part of the file that is sent did not change
            assert c >= (start + CONTEXT_HEAD) // BLOCK
        checked += 1
        others += run.meta[i][1] != run.meta[j][1]
    assert checked > 10 and others > 0


def test_teammates_share_the_repositorys_context_blocks_in_orders_of_their_own(run):
    shared = set()
    for (r, f, v), idx in by_kind(run, "ide", lambda m: (m[4].repo, *(
            m[4].contexts or ((-1, -1),))[0])).items():
        if f < 0:
            continue
        for i, j in zip(idx, idx[1:]):
            if run.meta[i][1] != run.meta[j][1]:
                end = _first_context(run.meta[i])[1] // BLOCK
                assert run.trace[i][:end] == run.trace[j][:end]
                shared.add(frozenset((run.meta[i][1], run.meta[j][1])))
    assert len(shared) > 20  # pairs of developers
    teams = [d.team for d in run.devs]
    assert sum(teams[a] == teams[b] for a, b in shared) > 0.8 * len(shared)
    at = defaultdict(set)
    for m in run.meta:
        if m[0] == "ide":
            for pos, (f, _) in enumerate(m[4].contexts):
                at[m[4].repo, f].add(pos)
    assert sum(len(p) == 2 for p in at.values()) > 20  # first for one, second for another
    preamble = {}
    for r, m in zip(run.trace, run.meta):
        if m[0] == "ide":
            preamble.setdefault(m[4].repo, (r, m[4].ends[0] // BLOCK))
    for a, (ra, pa) in preamble.items():  # another repository: the preamble at most
        assert all(common(ra, rb) <= pa for b, (rb, _) in preamble.items() if a != b)


def test_tree_branches_share_their_parent_and_pruned_branches_never_return(run):
    last = {}
    for i, r in enumerate(run.trace):
        for h in r:
            last[h] = i
    pruned = kept = 0
    searches = by_kind(run, "tree", lambda m: m[1])
    for idx in searches.values():  # levels in order: no pruned branch is taken up later
        levels = [len(run.meta[i][2]) - (run.meta[i][4] == "score") for i in idx]
        assert levels == sorted(levels)
        node = {run.meta[i][2]: i for i in idx if run.meta[i][4] == "propose"}
        scores = {run.meta[i][2]: i for i in idx if run.meta[i][4] == "score"}
        answer = [run.meta[i][2] for i in idx if run.meta[i][4] == "answer"]
        for path, i in scores.items():
            p = node[path[:-1]]  # the parent was proposed from before its children
            head = run.meta[p][3] // BLOCK
            assert p < i and run.trace[i][:head] == run.trace[p][:head]
            sibling = scores.get(path[:-1] + ((path[-1] + 1),))
            if sibling:
                assert common(run.trace[i], run.trace[sibling]) == head
            if path in node or path in answer:
                kept += 1
                k = run.meta[i][3] // BLOCK
                assert run.trace[node.get(path, idx[-1])][:k] == run.trace[i][:k]
            elif answer:  # in a finished search, a child never proposed from was pruned
                pruned += 1
                assert last[run.trace[i][-1]] == i
                thought = run.meta[i][3] // BLOCK - 1
                if thought >= head:
                    assert last[run.trace[i][thought]] == i
        if answer:  # a finished search: its task never comes back
            root = run.trace[idx[0]][run.meta[idx[0]][3] // BLOCK - 1]
            assert last[root] == idx[-1]
    assert pruned > 80 and kept > 25
    sizes = Counter(len(path) for idx in searches.values() for i in idx
                    if run.meta[i][4] == "score" for path in [run.meta[i][2]])
    assert max(sizes) >= 4 and sizes[1] > 25
    spans = sorted((idx[0], idx[-1]) for idx in searches.values())
    assert sum(b[0] < a[1] for a, b in zip(spans, spans[1:])) > 0.6 * len(spans)  # at once


def test_a_chat_turn_resends_the_previous_request_of_its_conversation(run):
    convs = by_kind(run, "chat", lambda m: m[1])
    for idx in convs.values():
        assert [run.meta[i][2] for i in idx] == list(range(len(idx)))
        for i, j in zip(idx, idx[1:]):
            assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            assert len(run.trace[j]) > len(run.trace[i])
    turns = Counter(len(idx) for idx in convs.values())
    total = sum(turns.values())
    assert 0.45 < turns[1] / total < 0.85 and max(turns) >= 6


def test_bursts_are_rapid_and_teams_type_in_working_hours_only(run):
    bursts = by_kind(run, "ide", lambda m: m[2])
    for idx in bursts.values():
        t = [run.times[i] for i in idx]
        assert all(1 <= b - a <= 10 for a, b in zip(t, t[1:]))  # debounced typing
        team = run.devs[run.meta[idx[0]][1]].team
        assert any(a <= t[0] < b for a, b in run.windows[team])  # starts at work
    pauses = []
    for idx in by_kind(run, "ide", lambda m: m[1]).values():
        pauses += [run.times[j] - run.times[i] for i, j in zip(idx, idx[1:])
                   if run.meta[i][2] != run.meta[j][2]]
    assert sorted(pauses)[len(pauses) // 2] > 100  # a pause is much longer than a gap
    span = run.times[-1]
    for windows in run.windows:  # quiet for most of the trace
        assert sum(min(b, span) - a for a, b in windows if a < span) < 0.5 * span
    busy = Counter(run.devs[run.meta[idx[0]][1]].team for idx in bursts.values())
    assert len(busy) == len(run.windows)
    thirds = Counter(int(3 * run.times[i] / span) for idx in bursts.values() for i in idx)
    assert max(thirds.values()) < 0.5 * sum(thirds.values())  # every day has its share


def test_size_at_scale_one_and_scaled_down():
    check_size(ide_tree, (650_000, 880_000), (60_000, 100_000), (0.07, 0.15), 0.35)
