"""bench/heldout_swe_agent.py: the held-out shape swe_agent has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_swe_agent import KINDS, generate, swe_agent
from bench.heldout_swe_desk import JOB_GAP, OPEN_AFTER
from bench.heldout_swe_runs import LAUNCH
from bench.heldout_swe_world import CI_DELAY, END, HOUR, LAYOUTS, NIGHTLY_AT
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, common, extends,
                                     shared_tokens, tokens)

SCALE = 0.3
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first
SEEDS = (1, 2, 3, 4)  # monorepo, polyrepo, platform, sampling


def _requests(s, t: int) -> list[int]:
    """Trajectory ``t``'s requests (steps and compactions) in order."""
    return sorted(s.trajs[t].sent + s.trajs[t].compactions)


def _new_from(r, first, i, prefix) -> bool:
    """Every block of request ``i`` after the segments ``prefix`` is new there."""
    return all(first[b] == i for b in r.trace[i][tokens(prefix) // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace, another seed of the same layout another; seeds 1..4 have the
    four layouts (a monorepo with packages under a top-level map, many small repos, a few
    big ones, best-of-k sampling); every request is non-empty and in time order, issue and
    CI runs in every layout, every kind in some."""
    assert swe_agent(1, 0.05) == swe_agent(1, 0.05) != swe_agent(5, 0.05)  # one layout
    assert generate(7, 0.05).trace == swe_agent(7, 0.05)
    runs = [_small(seed) for seed in SEEDS]
    assert [r.state.layout for r in runs] == list(LAYOUTS)
    for r in runs:
        s, lay = r.state, r.state.layout
        assert lay.repos[0] <= len(s.repos) <= lay.repos[1]
        assert all(lay.packages[0] <= len(x.maps) <= lay.packages[1] for x in s.repos)
        assert all((x.top is not None) == (lay.name == "monorepo") for x in s.repos)
        assert r.times == sorted(r.times) and all(r.trace) and r.times[-1] < END
        assert {"issue", "ci"} <= {m[0] for m in r.meta} <= set(KINDS)
    assert {m[0] for r in runs for m in r.meta} == set(KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_chains_and_the_day(seed):
    """At scale 0.25: 300K..1M blocks over the day, issue runs the most; block ids chain;
    issues are assigned in the engineers' hours."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 300_000 <= sum(blocks.values()) <= 1_000_000
    assert blocks["issue"] == max(blocks.values())
    starts = [t.start / HOUR for t in r.state.tasks if t.kind == "issue"]
    assert sum(7 <= h < 20 for h in starts) >= 0.8 * len(starts)
    check_chains(r, 5)


def test_trajectories_resend_their_whole_growing_context():
    """A trajectory starts from its task's head (framework prompt and tools, the repo at its
    commit, the task, the scripted setup); each step extends the last by its action and
    observation (and a chat's turns after a resume); a compaction request is past the window
    and ends with the cue, and the step after it sends the head, the summary and the last
    ``keep`` steps."""
    compacted = 0
    for r in map(_small, SEEDS):
        compacted += _check_trajectories(r)
    assert compacted >= 5


def _check_trajectories(r) -> int:
    """test_trajectories_resend_their_whole_growing_context on run ``r``; its compactions."""
    s, lay = r.state, r.state.layout
    resumed = {t for _, t in s.resumes}
    compacted = 0
    for t, traj in enumerate(s.trajs):
        task = s.tasks[traj.task]
        if not traj.sent:
            continue
        assert r.meta[traj.sent[0]][3] == task.head == [s.system, s.tools, *task.ctx,
                                                        *task.text, *task.head[len(
                                                            task.ctx) + len(task.text) + 2:]]
        for i, j in itertools.pairwise(_requests(s, t)):
            a, b = r.meta[i][3], r.meta[j][3]
            assert common(r.trace[i], r.trace[j]) == shared_tokens(a, b) // BLOCK
            if r.meta[i][0] == "compact":
                keep = a[-1 - 2 * lay.keep:-1]
                assert b[:len(task.head)] == task.head and b[len(task.head) + 1:] == keep
                assert b[len(task.head)] not in a
                compacted += 1
            elif r.meta[j][0] == "compact":
                assert tokens(b[:-1]) > lay.compact and b[-1] == s.compact_cue
                assert b[:len(a)] == a and len(b) == len(a) + 3
            else:
                assert b[:len(a)] == a
                assert len(b) == len(a) + 2 or t in resumed
    return compacted


def test_best_of_k_attempts_branch_after_the_shared_head():
    """An issue's k attempts (polyrepo 4, sampling 4 or 8 after 2..4 scripted setup steps)
    start within seconds with the same first request, then share exactly the head; once all
    have submitted, the selector reads the repo, the task and every patch."""
    assert sum(_check_attempts(_small(seed)) for seed in (2, 4)) >= 2


def _check_attempts(r) -> int:
    """test_best_of_k_attempts_branch_after_the_shared_head on run ``r``; its selections."""
    s, lay = r.state, r.state.layout
    selected = 0
    for n, task in enumerate(s.tasks):
        if task.kind == "ci":
            assert len(task.attempts) == 1 and task.head == [s.system, s.tools, *task.ctx,
                                                             *task.text]
            continue
        assert len(task.attempts) in [k for k, _ in lay.k]
        setup = len(task.head) - len(task.ctx) - len(task.text) - 2
        assert lay.setup[0] <= setup // 2 <= lay.setup[1] and setup % 2 == 0
        firsts = [s.trajs[a].sent[0] for a in task.attempts]
        assert len({tuple(r.trace[i]) for i in firsts}) == 1
        assert max(r.times[i] for i in firsts) - task.start <= LAUNCH + 1
        seconds = [s.trajs[a].sent[1] for a in task.attempts if len(s.trajs[a].sent) > 1]
        for i, j in itertools.combinations(seconds, 2):
            assert common(r.trace[i], r.trace[j]) == tokens(task.head) // BLOCK
        if task.select is not None:
            patches = [s.trajs[a].patches[0] for a in task.attempts]
            assert r.meta[task.select] == ("select", n, 0, [s.selector, *task.ctx, *task.text,
                                                            *patches])
            assert max(s.trajs[a].submits[0] for a in task.attempts) < task.select
            selected += 1
    return selected


@pytest.mark.parametrize("seed", [1, 3])
def test_merges_move_the_repo_and_failed_pipelines_burst(seed):
    """A task sees its repo at its commit; after a merge the first request on the new map is
    new from the first rewritten section on. A failed pipeline starts one CI run per failing
    job seconds apart on the failing commit, minutes after the merge or in the nightly
    window, sharing the head up to the job's log."""
    r, first = _small(seed), _first(seed)
    s = r.state
    checked = 0
    for task in s.tasks:
        repo, c = s.repos[task.repo], task.commit
        top = repo.top.at(c) if repo.top else []
        assert task.ctx == [*repo.readme.at(c), *top, *repo.maps[task.package].at(c),
                            *repo.commit.at(c)]
    for ri, repo in enumerate(s.repos):
        for when, p, k, _ in repo.merges:
            later = [min(s.trajs[a].sent[0] for a in t.attempts if s.trajs[a].sent)
                     for t in s.tasks if (t.repo, t.package) == (ri, p) and t.commit >= when
                     and any(s.trajs[a].sent for a in t.attempts)]
            if later:
                top = repo.top.at(when) if repo.top else []
                prefix = [s.system, s.tools, *repo.readme.at(when), *top,
                          *repo.maps[p].at(when)[:k]]
                assert _new_from(r, first, min(later), prefix)
                checked += 1
    assert checked >= 3 and s.pipelines
    for when, ri, p, commit, jobs in s.pipelines:
        runs = [t for t in s.tasks if t.kind == "ci" and t.commit == commit and t.repo == ri
                and when <= t.start <= when + jobs * JOB_GAP[1]]
        assert len(runs) == jobs
        nightly = NIGHTLY_AT[0] <= when / HOUR <= NIGHTLY_AT[1] and commit == when
        assert nightly or CI_DELAY[0] <= when - commit <= CI_DELAY[1]
        for a, b in itertools.combinations([t for t in runs if s.trajs[t.attempts[0]].sent], 2):
            i, j = s.trajs[a.attempts[0]].sent[0], s.trajs[b.attempts[0]].sent[0]
            if a.package == b.package:
                assert r.meta[i][3][:-1] == r.meta[j][3][:-1] != r.meta[i][3]
            assert common(r.trace[i], r.trace[j]) == shared_tokens(r.meta[i][3],
                                                                   r.meta[j][3]) // BLOCK


def test_chats_open_a_finished_run_and_send_it_back_to_work():
    """An engineer opens a closed task's run in the work hours and chats over its whole
    context (its last step, then the final action and the patch); turns extend each other;
    a resumed run's next step extends the last turn by the reply. A question the agent asks
    is answered in the work hours."""
    chats = resumed = asked = 0
    for seed in SEEDS:
        r = _small(seed)
        s = r.state
        for n, chat in enumerate(s.chats):
            if not chat.sent:
                continue
            traj = s.trajs[chat.owner]
            last = max(i for i in _requests(s, chat.owner) if i < chat.sent[0])
            a = r.meta[last][3]
            assert chat.fixed[:len(a)] == a and chat.fixed[len(a) + 1:] == traj.patches[:1]
            assert r.trace[chat.sent[0]][:len(r.trace[last])] == r.trace[last]
            hour = r.times[chat.sent[0]] / HOUR
            assert 8 <= hour < 19 and r.times[chat.sent[0]] - r.times[last] >= OPEN_AFTER[0]
            chats += extends(r, chat.sent, lambda i, j: True) + 1
        for n, t in s.resumes:
            chat = s.chats[n]
            i = chat.sent[-1]
            j = min(x for x in _requests(s, t) if x > i)
            assert r.meta[j][3][:len(r.meta[i][3])] == r.meta[i][3]
            assert r.meta[j][3][len(r.meta[i][3])] == chat.history[-1]
            resumed += 1
        for traj in s.trajs:
            for k in traj.asks:
                if k + 1 < len(traj.sent):
                    hour = r.times[traj.sent[k + 1]] / HOUR
                    assert 8 <= hour < 19.2 and s.tasks[traj.task].kind == "issue"
                    asked += 1
    assert chats >= 3 and resumed >= 2 and asked >= 1
