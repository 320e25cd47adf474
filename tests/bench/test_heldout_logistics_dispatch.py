"""bench/heldout_logistics_dispatch.py: the held-out shape logistics_dispatch has the
properties its docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_logi_desk import CONTEXT, DAILY, THREAD
from bench.heldout_logi_jobs import CORRECTED, MANIFEST, NIGHT, STEPS
from bench.heldout_logi_parts import BOARD_ROW, DAY, END, HOUR, MINUTE
from bench.heldout_logistics_dispatch import KINDS, generate, logistics_dispatch
from tests.bench.trace_parts import SmallRuns, by_kind, check_chains, common, shared_tokens, tokens

SCALE = 0.2


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first_seen = SMALL.run, SMALL.first


@pytest.fixture(scope="module", params=[1, 2])
def run(request):
    return _small(request.param)


def _extends(a, b):
    """Whether block list ``b`` starts with all of ``a``."""
    return b[:len(a)] == a


def test_deterministic_and_seeded():
    assert logistics_dispatch(1, 0.05) == logistics_dispatch(1, 0.05)
    assert logistics_dispatch(1, 0.05) != logistics_dispatch(2, 0.05)
    assert generate(3, 0.05).trace == logistics_dispatch(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert [g.weight for g in a.regions] != [g.weight for g in b.regions]
    assert [(s.region, s.start) for s in a.storms] != [(s.region, s.start) for s in b.storms]
    assert Counter(m[0] for m in _small(1).meta) != Counter(m[0] for m in _small(2).meta)
    assert [len(g.depots) for g in generate(1, 0.5).state.regions] != [
        len(g.depots) for g in generate(2, 0.5).state.regions]


def test_kinds_sizes_and_span(run):
    """Every kind is there; 200K..500K blocks over two days, in time order."""
    assert {m[0] for m in run.meta} == set(KINDS) and all(run.trace)
    assert run.times == sorted(run.times) and 0 <= run.times[0] and run.times[-1] < END
    assert run.times[-1] > 44 * HOUR
    assert 200_000 <= sum(map(len, run.trace)) <= 500_000


def test_prefix_chains_are_well_formed(run):
    """A block always follows the same parent, each request is the full blocks of its
    segments (the same segments always the same ids), and two requests share exactly the
    blocks of the segments they start with."""
    check_chains(run, 2)


def test_board_snapshots_change_later_rows(run):
    """A board snapshot keeps the rows before its first change and replaces that one; rows
    stay in BOARD_ROW's range."""
    for region in run.state.regions:
        for (_, old), (_, new) in itertools.pairwise(region.board.versions):
            assert len(old) == len(new)
            k = next(i for i, (x, y) in enumerate(zip(old, new)) if x != y)
            assert old[:k] == new[:k]
        assert all(BOARD_ROW[2] <= n <= BOARD_ROW[3]
                   for _, rows in region.board.versions for _, n in rows)
    assert len(run.state.snapshots) > 8 * 200  # every few minutes, two days


def test_board_turns_resend_the_board_as_it_stands(run):
    """A dispatcher's turn: system prompt, board head, the board at that moment, history,
    message. Two turns share exactly up to the board's first changed row (all of the earlier
    turn when the board did not change)."""
    st, cut, same = run.state, 0, 0
    for n, chat in enumerate(st.chats["board"]):
        g = st.regions[chat.about]
        for i in chat.sent:
            head = [st.system["board"], g.head, *g.board.at(run.times[i])]
            assert run.meta[i][3][:len(head)] == head and run.meta[i][:2] == ("board", n)
        for i, j in itertools.pairwise(chat.sent):
            a, b = run.meta[i][3], run.meta[j][3]
            assert common(run.trace[i], run.trace[j]) == shared_tokens(a, b) // BLOCK
            if g.board.at(run.times[i]) == g.board.at(run.times[j]):
                assert _extends(run.trace[i], run.trace[j])
                same += 1
            else:
                assert not _extends(run.trace[i], run.trace[j])
                cut += 1
    assert cut >= 20 and same >= 5


def _case_head(st, c, t):
    """What case ``c``'s first request starts with: system prompt, playbook, the region's
    policy (and the storm's advisory as it stood)."""
    case = st.cases[c]
    r = st.shipments[case.shipment].region
    head = [st.system["exception"], *st.playbook, st.regions[r].policy]
    if case.kind == "weather":
        storm = next(s for s in st.storms if c in s.cases)
        head += storm.advisory.at(t)
    return head


def test_exception_cases_grow_step_by_step(run):
    """A case's first request is the head, the shipment's tracking record (its last scan the
    exception, just now) and the cue; each later step re-sends the case so far plus the
    call and the tool's result: exactly its blocks and more. 1..4 steps (storms 1..2)."""
    st, steps = run.state, Counter()
    for c, case in enumerate(st.cases):
        i0 = case.sent[0]
        t, segs = run.times[i0], run.meta[i0][3]
        ship = st.shipments[case.shipment]
        head = _case_head(st, c, t)
        assert segs == [*head, *ship.history(t), st.cues[case.kind]]
        assert (t, segs[-2]) in ship.scans and ship.history(t)[-1] == segs[-2]
        for i, j in itertools.pairwise(case.sent):
            assert run.meta[j][3][:-2] == run.meta[i][3] and run.times[j] > run.times[i]
            assert _extends(run.trace[i], run.trace[j]) and len(run.trace[j]) > len(run.trace[i])
        assert all(run.meta[i][:3] == (case.kind, c, k) for k, i in enumerate(case.sent))
        steps[(case.kind, len(case.sent))] += 1
    assert {n for k, n in steps if k == "exception"} == set(range(1, len(STEPS) + 1))
    assert {n for k, n in steps if k == "weather"} == {1, 2}


def test_a_shipment_excepted_again_resends_its_grown_history():
    """A second exception on a shipment re-sends its tracking record as it grew: the earlier
    case's head and record are a prefix of the later one's, and the later record is longer."""
    again = 0
    for seed in (1, 2):
        r = _small(seed)
        st = r.state
        by_ship: dict[int, list] = {}
        for case in st.cases:
            by_ship.setdefault(case.shipment, []).append(case)
        for cases in by_ship.values():
            plain = [c for c in cases if c.kind == "exception"]
            for a, b in itertools.pairwise(plain):
                sa, sb = r.meta[a.sent[0]][3][:-1], r.meta[b.sent[0]][3][:-1]
                assert sb[:len(sa)] == sa and len(sb) > len(sa)
                assert common(r.trace[a.sent[0]], r.trace[b.sent[0]]) >= tokens(sa) // BLOCK - 1
                again += 1
    assert again >= 2


def test_a_storm_floods_its_region_behind_the_advisory(run):
    """A storm's cases fall in its window, all in its region, far above the background rate;
    each sends the advisory issued last, and cases under two advisories share exactly the
    blocks before it."""
    st = run.state
    plain = [i for i, m in enumerate(run.meta) if m[0] == "exception" and m[2] == 0]
    for storm in st.storms:
        starts = [st.cases[c].sent[0] for c in storm.cases]
        assert all(storm.start <= run.times[i] <= storm.end for i in starts)
        assert all(st.shipments[st.cases[c].shipment].region == storm.region
                   for c in storm.cases)
        hours = (storm.end - storm.start) / HOUR
        background = sum(storm.start <= run.times[i] <= storm.end for i in plain)
        assert len(starts) / hours > 5 * max(1, background) / hours
        advisories = {tuple(storm.advisory.at(run.times[i])) for i in starts}
        assert len(advisories) >= 3
        head = _case_head(st, storm.cases[0], storm.start)[:-1]
        firsts = {tuple(storm.advisory.at(run.times[i])): i for i in starts}
        for i, j in itertools.pairwise(firsts.values()):
            assert common(run.trace[i], run.trace[j]) == tokens(head) // BLOCK
    assert len(st.storms[0].cases) >= 400 * SCALE


@pytest.mark.parametrize("seed", [1, 2])
def test_wismo_chats_resend_the_tracking_record(seed):
    """A customer's turn: the bot's prompt, its policies, the tracking record as it stands,
    history, message. Chats land on shipments excepted in the last day, on ones asked about
    before, and on new ones."""
    run = _small(seed)
    st, kinds = run.state, Counter()
    for n, chat in enumerate(st.chats["wismo"]):
        ship = st.shipments[chat.about]
        for i in chat.sent:
            head = [st.system["wismo"], *st.faq, *ship.history(run.times[i])]
            assert run.meta[i][3][:len(head)] == head and run.meta[i][:2] == ("wismo", n)
        t = run.times[chat.sent[0]]
        cases = [run.times[c.sent[0]] for c in st.cases if c.shipment == chat.about]
        asked = [m for m, other in enumerate(st.chats["wismo"][:n]) if other.about == chat.about]
        kinds["excepted" if any(t - DAY < x <= t for x in cases) else "again" if asked
              else "new"] += 1
    assert kinds["excepted"] >= 5 and kinds["new"] >= 10 and kinds["again"] >= 1


def test_driver_messages_are_translated_with_a_sliding_context(run):
    """Message k of a thread: system prompt, its direction's prompt (driver's on even k), the
    glossary, the CONTEXT messages before it, the message, the cue; 20..240 s apart."""
    st = run.state
    for n, th in enumerate(st.threads):
        assert 1 <= len(th.sent) <= THREAD[0][3]
        for k, i in enumerate(th.sent):
            ctx = th.messages[max(0, k - CONTEXT):k]
            assert run.meta[i] == ("translate", n, k, [
                st.system["translate"], st.pairs[th.lang][k % 2], st.glossary, *ctx,
                th.messages[k], st.translate_cue])
        for i, j in itertools.pairwise(th.sent):
            assert THREAD[2][0] <= run.times[j] - run.times[i] <= THREAD[2][1]
    assert sum(len(th.sent) > CONTEXT + 2 for th in st.threads) >= 5


def test_claim_turns_resend_the_file_exactly():
    """A claim's every turn starts with its file (system prompt, terms, the tracking record
    as opened, form, photo notes), block for block; claims come on shipments the exception
    agent marked damaged and on ones first seen."""
    kinds = Counter()
    for run in map(_small, (1, 2, 3)):
        _claims(run, kinds)
    assert kinds[True] >= 1 and kinds[False] >= 1


def _claims(run, kinds):
    st = run.state
    for n, chat in enumerate(st.chats["claim"]):
        ship = st.shipments[chat.about]
        t0 = run.times[chat.sent[0]]
        file = chat.fixed
        assert file[:1 + len(st.terms)] == [st.system["claim"], *st.terms]
        history = ship.history(t0)
        assert file[1 + len(st.terms):1 + len(st.terms) + len(history)] == history
        n_file = tokens(file) // BLOCK
        for i in chat.sent:
            assert run.meta[i][3][:len(file)] == file and run.meta[i][:2] == ("claim", n)
            assert run.trace[i][:n_file] == run.trace[chat.sent[0]][:n_file]
        kinds[any(c.shipment == chat.about and run.times[c.sent[0]] < t0
                  for c in st.cases)] += 1


def test_customs_filings_and_corrections(run):
    """A filing: system prompt, its country's rules, the tariff chapter as it stands, the
    documents, the cue. A correction comes 10..90 minutes later with one document changed:
    it shares exactly the blocks before that document."""
    st, fixes = run.state, 0
    for f, (country, chapter, sent) in enumerate(st.filings):
        assert 1 <= len(sent) <= 2
        for k, i in enumerate(sent):
            segs = run.meta[i][3]
            head = [st.system["customs"], *st.regulations[country],
                    *st.chapters[chapter].at(run.times[i])]
            assert segs[:len(head)] == head and run.meta[i][:3] == ("customs", f, k)
        if len(sent) == 2:
            i, j = sent
            lo, hi = CORRECTED[1]
            assert lo * MINUTE <= run.times[j] - run.times[i] <= hi * MINUTE
            a, b = run.meta[i][3], run.meta[j][3]
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
            assert common(run.trace[i], run.trace[j]) == shared_tokens(a, b) // BLOCK
            fixes += 1
    assert fixes >= 3


def test_a_tariff_amendment_makes_later_blocks_new():
    """After a chapter's section is rewritten, the chapter's next filing holds no block from
    that section on that was requested before."""
    checked = 0
    for seed in (1, 2, 3):
        r, first = _small(seed), _first_seen(seed)
        st = r.state
        for t, ch, k in st.amendments:
            nxt = [i for i, m in enumerate(r.meta) if m[0] == "customs"
                   and st.filings[m[1]][1] == ch and r.times[i] >= t][:1]
            for j in nxt:
                country = st.filings[r.meta[j][1]][0]
                before = [st.system["customs"], *st.regulations[country],
                          *st.chapters[ch].at(t)[:k]]
                cut = tokens(before) // BLOCK
                assert all(first[b] == j for b in r.trace[j][cut:])
                checked += 1
    assert checked >= 1


def test_rate_confirmations_share_the_carrier_boilerplate(run):
    """A confirmation: extractor prompt, schema, the carrier's terms, the load's page, the
    cue; two of one carrier share exactly the blocks before the load's page."""
    st = run.state
    groups = by_kind(run, "rateconf", lambda m: m[1])
    for c, idx in groups.items():
        head = [st.system["rateconf"], st.schema, *st.carriers[c]]
        for i in idx:
            assert run.meta[i][3][:-2] == head
        for i, j in itertools.pairwise(idx):
            assert common(run.trace[i], run.trace[j]) == tokens(head) // BLOCK
    assert max(map(len, groups.values())) >= 5 and len(groups) >= 20


def test_the_nightly_route_walk(run):
    """Each night from 01:00..02:00 the planner walks every depot in order, a plan then its
    check (the plan's prompt, the plan, the check cue: its blocks extend the plan's), one
    request after another; the two nights' plans of a depot share exactly the blocks before
    the manifest, which is new each night."""
    st = run.state
    assert len(st.walks) == 2
    for night, walk in enumerate(st.walks):
        assert [(d, s) for d, s, _ in walk] == [(d, s) for d in range(len(st.depots))
                                                for s in (1, 2)]
        idx = [i for _, _, i in walk]
        assert NIGHT[0] * HOUR <= run.times[idx[0]] - night * DAY <= NIGHT[1] * HOUR
        assert all(run.times[i] < run.times[j] for i, j in itertools.pairwise(idx))
        assert all(run.meta[i][:3] == ("route", d, 2 * night + s - 1) for d, s, i in walk)
        for (d, _, p), (_, _, c) in zip(walk[::2], walk[1::2]):
            r, profile = st.depots[d]
            plan = run.meta[p][3]
            head = [st.system["route"], *st.regions[r].roads, profile]
            assert plan[:len(head)] == head and plan[-1] == st.cues["plan"]
            manifest = plan[len(head):-1]
            assert MANIFEST[2] <= tokens(manifest) <= MANIFEST[3]
            assert run.meta[c][3][:-2] == plan and run.meta[c][3][-1] == st.cues["check"]
            assert _extends(run.trace[p], run.trace[c])
    for (d, _, p), (_, _, q) in zip(st.walks[0][::2], st.walks[1][::2]):
        head = run.meta[p][3][:2 + len(st.regions[st.depots[d][0]].roads)]
        assert common(run.trace[p], run.trace[q]) == tokens(head) // BLOCK


def test_people_work_their_hours(run):
    """Chats, threads, filings and confirmations start in their kinds' hours."""
    firsts = {"board": "session", "wismo": "wismo", "claim": "claim"}
    st = run.state
    for kind, name in firsts.items():
        _, hours, first = DAILY[name]
        for chat in st.chats[kind]:
            h = run.times[chat.sent[0]] % DAY / HOUR
            assert first <= h < first + len(hours)
    _, hours, first = DAILY["thread"]
    assert all(first <= run.times[th.sent[0]] % DAY / HOUR < first + len(hours)
               for th in st.threads)
    for kind in ("customs", "rateconf"):
        starts = [i for i, m in enumerate(run.meta) if m[0] == kind and m[2] == 0]
        assert all(7 <= run.times[i] % DAY / HOUR < 19 for i in starts)
