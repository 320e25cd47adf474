"""bench/heldout_ad_creative.py: the held-out shape ad_creative has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import pytest

from bench.heldout_ad_creative import KINDS, ad_creative, generate
from bench.heldout_ad_creative_desk import AB_AT, ANGLES, REVIEW_DELAY, SWEEP_DELAY, WINNERS
from bench.heldout_ad_creative_world import DAY, HOUR, LAYOUTS, SEASONAL, SYNC_AT, SYSTEM
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, chats_of, check_chains, check_ordered, common,
                                     of_kind, shared_tokens, tokens)

SCALE = 0.1
SMALL = SmallRuns(generate, SCALE)  # each seed's run, made once
_small = SMALL.run


def _task(s, k: int) -> list:
    return [s.specs[s.cells[k].format], s.locale_guides[s.cells[k].locale]]


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds 1..4 have the four layouts, which differ in their
    formats, in how many feed entries a prompt carries (retail) and in agencies (all on the
    agency tool); every kind is there, in time order."""
    assert ad_creative(1, 0.03) == ad_creative(1, 0.03) != ad_creative(2, 0.03)
    assert generate(3, 0.03).trace == ad_creative(3, 0.03)
    states = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert [s.layout for s in states] == list(LAYOUTS)
    for seed in (1, 2, 3, 4):
        check_ordered(_small(seed), KINDS)
    search, social, retail, agency = states
    assert max(len(c.products) for c in search.campaigns) <= 3
    assert min(len(c.products) for c in retail.campaigns) >= 8
    assert "video_script" in {c.format for c in social.cells} - set(search.layout.formats)
    assert all(a.agency is not None for a in agency.advertisers)
    assert any(a.agency is None for a in search.advertisers)


@pytest.mark.parametrize("seed", [1, 4])
def test_head_order(seed):
    """A generation prompt is the system prompt, the region's and category's policies, the
    agency's style (before the policies on the agency tool), brand, brief, feed entries."""
    s = _small(seed).state
    checked = 0
    for c, camp in enumerate(s.campaigns):
        adv = s.advertisers[camp.advertiser]
        if camp.brief is None or adv.agency is None:
            continue
        pol = [s.region_policy[adv.region].at(0.0)[0], s.category_policy[adv.category]]
        style = [s.styles[adv.agency]]
        mid = style + pol if seed == 4 else pol + style
        feed = adv.feed.at(0.0)
        assert s.head(c, 0.0) == [s.system, *mid, adv.brand, camp.brief,
                                  *(feed[k] for k in camp.products)]
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("seed", [1, 3])
def test_bulk_jobs_walk_cells_variant_by_variant(seed):
    """A job walks its campaign's cells in order, each with its variants: head as it stands,
    format spec, locale guide, the variants it wrote in the cell so far, an angle cue in
    turn; the cell's review follows with the variants it wrote."""
    r = _small(seed)
    s = r.state
    for j, job in enumerate(s.jobs):
        assert [k for k, _ in job.plan] == s.campaigns[job.campaign].cells
        steps = [(k, v) for k, n in job.plan for v in range(n)]
        assert len(job.sent) == len(steps)
        for (k, v), i in zip(steps, job.sent):
            segs = r.meta[i][3]
            head = [*s.head(job.campaign, r.times[i]), *_task(s, k)]
            assert r.meta[i][:3] == (job.kind, j, job.sent.index(i))
            assert segs[:len(head)] == head and len(segs) == len(head) + v + 1
            assert segs[-1] == s.angles[(job.shift + v) % ANGLES[0]]
        for (a, b), (i, n) in zip(zip(steps, steps[1:]), zip(job.sent, job.sent[1:])):
            x, y = r.meta[i][3], r.meta[n][3]
            assert common(r.trace[i], r.trace[n]) == shared_tokens(x, y) // BLOCK
            if a[0] == b[0]:
                assert y[:-2] == x[:-1]  # the variant written last joins the prompt
    news = [x for x in s.reviews if x[2] == "new"]
    assert len(news) >= 10
    for c, (k,), _, i in news[:20]:
        t = r.times[i]
        wrote = [n for n in of_kind(r, "bulk") + of_kind(r, "seasonal")
                 if r.times[n] <= t and s.jobs[r.meta[n][1]].campaign == c
                 and r.meta[n][3][len(s.head(c, r.times[n]))] == s.specs[s.cells[k].format]
                 and r.meta[n][3][len(s.head(c, r.times[n])) + 1] == _task(s, k)[1]]
        last = r.meta[wrote[-1]][3]
        ads = r.meta[i][3][3:-1]
        assert REVIEW_DELAY[0] <= t - r.times[wrote[-1]] <= REVIEW_DELAY[1] + 60
        assert ads[:-1] == last[len(last) - len(ads):-1]


@pytest.mark.parametrize("seed", [2, 3])
def test_seasonal_wave_behind_the_template(seed):
    """The seasonal event launches on its day at 09..10 h; at least 3 advertisers' seasonal
    campaigns (no brief) each get a job soon after, behind the system prompt and the
    template, so all of them share those blocks."""
    r = _small(seed)
    s = r.state
    assert s.launch // DAY == s.layout.seasonal[1] and 9 <= s.launch % DAY / HOUR < 10
    owners = {s.campaigns[s.jobs[j].campaign].advertiser for j in s.season}
    assert len(owners) >= 3 and all(s.jobs[j].kind == "seasonal" for j in s.season)
    firsts = [s.jobs[j].sent[0] for j in s.season]
    assert all(0 <= r.times[i] - s.launch < 4 * HOUR for i in firsts)
    for j in s.season:
        assert s.campaigns[s.jobs[j].campaign].brief is None
    for i, n in zip(firsts, firsts[1:]):
        assert r.meta[i][3][:2] == [s.system, s.seasonal]
        assert common(r.trace[i], r.trace[n]) >= (SYSTEM + SEASONAL) // BLOCK


@pytest.mark.parametrize("seed", [1, 2])
def test_ab_refresh_pastes_winners_before_each_loser(seed):
    """Each night's refresh starts at 03:00..03:30 and walks its cells: per loser, head,
    task, up to WINNERS winners, the loser, the cue; a cell's losers share all up to it;
    the cell's review then holds the winners and not the losers."""
    r = _small(seed)
    s = r.state
    assert len(s.refreshes) == 5 and sum(len(x.sent) for x in s.refreshes) >= 10
    for n, ref in enumerate(s.refreshes):
        for step, (k, winners, loser, i) in enumerate(ref.sent):
            t = r.times[i]
            assert AB_AT[0] <= t / HOUR - 24 * n < AB_AT[1] + 2 and r.meta[i][:3] == (
                "abtest", n, step)
            head = [*s.head(s.cells[k].campaign, t), *_task(s, k)]
            assert r.meta[i][3] == [*head, *winners, loser, s.ab_cue]
            assert 1 <= len(winners) <= WINNERS and loser not in winners
        for a, b in zip(ref.sent, ref.sent[1:]):
            if a[0] == b[0]:
                assert common(r.trace[a[3]], r.trace[b[3]]) == tokens(
                    r.meta[a[3]][3][:-2]) // BLOCK
    refreshed = [(cells[0], i) for _, cells, why, i in s.reviews if why == "ab"]
    assert refreshed
    for k, i in refreshed:
        done = [x for ref in s.refreshes for x in ref.sent if x[0] == k and x[3] < i]
        ads = r.meta[i][3][3:-1]
        assert set(done[-1][1]) <= set(ads) and done[-1][2] not in ads


@pytest.mark.parametrize("seed", [1, 2])
def test_edit_sessions_resend_the_chat_and_the_draft(seed):
    """An editing turn is head, the editing prompt, the task, then the draft before the chat
    (social) or the chat before the draft (search), then the message; the first draft is a
    variant the cell had, and a session's last draft is reviewed."""
    r = _small(seed)
    s = r.state
    chats = chats_of(r, "edit")
    assert len(chats) >= 5
    for n, chat in chats:
        k = chat.owner
        assert len(chat.drafts) == len(chat.sent) + 1
        for step, i in enumerate(chat.sent):
            head = [*s.head(s.cells[k].campaign, r.times[i]), s.editor, *_task(s, k)]
            hist, draft = chat.history[:2 * step], chat.drafts[step]
            tail = [draft, *hist] if seed == 2 else [*hist, draft]
            assert r.meta[i] == ("edit", n, step, [*head, *tail, chat.history[2 * step]])
        for a, b in zip(chat.sent, chat.sent[1:]):
            assert common(r.trace[a], r.trace[b]) == shared_tokens(
                r.meta[a][3], r.meta[b][3]) // BLOCK
    reviewed = {v for _, _, why, i in s.reviews if why == "edit" for v in r.meta[i][3]}
    assert sum(chat.drafts[-1] in reviewed for _, chat in chats) >= len(chats) // 2


@pytest.mark.parametrize("seed", [1, 3])
def test_reviews_and_the_policy_sweep(seed):
    """A review is the reviewer's prompt, the policies as they stand, variants, the cue; a
    rewritten region policy is in every later prompt of the region, and a sweep 10..30 min
    later re-checks only that region's campaigns, each once, one after another."""
    r = _small(seed)
    s = r.state
    for c, cells, _, i in s.reviews:
        adv = s.campaigns[c].advertiser
        segs = r.meta[i][3]
        assert segs[:3] == [s.reviewer, *s.policies(adv, r.times[i])] and segs[-1] == s.review_cue
    (t0, region), = s.policy_edits
    old, new = s.region_policy[region].at(t0 - 1)[0], s.region_policy[region].at(t0)[0]
    sweep = [x for x in s.reviews if x[2] == "policy"]
    assert sweep and old != new
    assert len({x[0] for x in sweep}) == len(sweep)
    for c, cells, _, i in sweep:
        assert s.advertisers[s.campaigns[c].advertiser].region == region
        assert r.meta[i][3][1] == new and cells == tuple(
            k for k in s.campaigns[c].cells if k in cells)
    assert SWEEP_DELAY[0] <= r.times[sweep[0][3]] - t0 <= SWEEP_DELAY[1] + 60


@pytest.mark.parametrize("seed", [3, 4])
def test_feed_sync_and_block_chains(seed):
    """The feed sync runs at 02:00 each night, rewriting entries (most on retail); prompts
    carry the entries as they stand; every request is the full blocks of its segments,
    chained."""
    r = _small(seed)
    s = r.state
    assert s.syncs == [d * DAY + SYNC_AT * HOUR for d in range(5)]
    changed = sum(len(set(v[1]) - set(u[1])) for a in s.advertisers
                  for u, v in zip(a.feed.versions, a.feed.versions[1:]))
    total = sum(len(a.feed.current) for a in s.advertisers)
    assert changed >= (0.3 if seed == 3 else 0.05) * total
    check_chains(r, 5)
