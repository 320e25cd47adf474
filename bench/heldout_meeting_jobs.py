"""bench.heldout's ``meeting_assist`` shape, around the meetings: the hourly clock that books
ad-hoc meetings in each org's waves, cross-meeting search over a team's recent summaries,
glossary edits, and the nightly job walking every meeting of the day in order for digests,
then each org's roll-up. See bench/heldout_meeting_assist.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_live import EVER, Live
from bench.heldout_meeting_parts import (ADHOC, HOUR, RATE, STARTS, edit, next_slot, pick,
                                         poisson, slot, start_weight)

ADHOC_RATE = 1.0  # ad-hoc meetings a team books a weekday
SEARCH = 1.2  # cross-meeting questions a team asks a weekday
EDITS = 0.25  # glossary edits an org makes a weekday
NIGHT_AT = 4.0  # UTC hour the nightly digest job starts
MEMORY = 6  # summaries in a "team memory" search context (the newest, oldest first)
RECENT = 30  # summaries a retrieval search ranks


@dataclass
class Search:
    """A cross-meeting search thread: its team, "memory" (the team's last MEMORY summaries,
    oldest first) or "retrieval" (3..5 of the last RECENT, most relevant first), the
    summaries it holds, its request indices."""

    team: int
    mode: str
    context: list[Segment]
    sent: list[int] = field(default_factory=list)


@dataclass
class Night:
    """One run of the nightly job: when it started, the meetings it walks (every meeting
    ended since the last run, by start time), its request indices (digests, then roll-ups)
    and the orgs of the roll-ups."""

    start: float
    meetings: list[int]
    orgs: list[int]
    sent: list[int] = field(default_factory=list)


class Jobs(Live):
    """The whole generator: Live's meetings plus the hourly clock, search, edits and the
    nightly job. ``run`` (EventState's) walks it until the trace has its requests."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.searches: list[Search] = []
        self.nights: list[Night] = []
        self.pending: set[int] = set()  # meetings (by index, so by start) not walked yet
        self.seen = 0  # meetings the nightly job has looked at
        self.at(0.0, "hour", None)
        self.at(NIGHT_AT * HOUR, "night", None)
        for sid, s in enumerate(self.series):
            self.at(next_slot(0.0, self.tz(s.team), s.at, s.days), "series", sid)

    def _on_hour(self, _: None) -> None:
        """Book this hour's ad-hoc meetings, search questions and glossary edits."""
        self.at(self.now + HOUR, "hour", None)
        rng, norm = self.rng, sum(STARTS)
        for o, org in enumerate(self.orgs):
            w = start_weight(self.now, org.tz) / norm
            for _ in range(poisson(rng, ADHOC_RATE * len(org.teams) * w)):
                team = rng.choice(org.teams)
                payload = (team, None, "adhoc", pick(rng, ADHOC),
                           clipped_length(rng, 4, 0.5, 2, 12))
                self.at(slot(rng, self.now), "begin", payload)
            for team in org.teams:
                for _ in range(poisson(rng, SEARCH * w)):
                    self.at(self.now + rng.uniform(0, HOUR), "search", (None, team, ()))
            if rng.random() < EDITS * w:
                self.at(self.now + rng.uniform(0, HOUR), "edit", o)

    def _on_edit(self, o: int) -> None:
        org = self.orgs[o]
        org.glossary.append((self.now, edit(self.rng, self.new, org.glossary_at(self.now))))

    def _context(self, team: int) -> tuple[str, list[Segment]]:
        """A new search thread's summaries: 60 % the team memory, else retrieval (recent
        summaries likelier, in relevance order)."""
        rng, past = self.rng, [s for _, s in self.teams[team].summaries]
        if rng.random() < 0.6:
            return "memory", past[-MEMORY:]
        recent = past[-RECENT:]
        weights = [0.9 ** (len(recent) - 1 - k) for k in range(len(recent))]
        out: list[Segment] = []
        for _ in range(min(len(recent), rng.randint(3, 5))):
            k = rng.choices(range(len(recent)), weights)[0]
            out.append(recent.pop(k))
            weights.pop(k)
        return "retrieval", out

    def _on_search(self, payload: tuple) -> None:
        """A question over the team's summaries; 30 % ask a follow-up in the same thread
        (same summaries, the earlier questions and answers after them), at most 3 more."""
        sid, team, thread = payload
        rng = self.rng
        if sid is None:
            sid = len(self.searches)
            self.searches.append(Search(team, *self._context(team)))
        s = self.searches[sid]
        q = self.new(clipped_length(rng, 30, 0.7, 6, 300))
        gloss = self.orgs[self.teams[team].org].glossary_at(self.now)
        s.sent.append(len(self.out))
        self.send("search", sid, len(s.sent) - 1,
                  [self.system, *gloss, self.tasks["search"], *s.context, *thread, q])
        if len(thread) < 6 and rng.random() < 0.3:
            a = self.new(clipped_length(rng, 200, 0.6, 30, 900))
            later = self.now + a[1] / RATE + rng.uniform(20, 300)
            self.at(later, "search", (sid, team, (*thread, q, a)))

    def _on_night(self, _: None) -> None:
        """Start the nightly job: every meeting summarized since the last run in the orgs
        that have digests on, in start order (meetings are listed as they begin)."""
        self.at(self.now + 24 * HOUR, "night", None)
        self.pending.update(range(self.seen, len(self.meetings)))
        self.seen = len(self.meetings)
        ready = sorted(k for k in self.pending if self.meetings[k].summary is not None
                       and self.orgs[self.meetings[k].org].digest)
        self.pending.difference_update(ready)
        orgs = sorted({self.meetings[k].org for k in ready})
        self.nights.append(Night(self.now, ready, orgs))
        self.at(self.now, "digest", (len(self.nights) - 1, 0))

    def _on_digest(self, payload: tuple) -> None:
        """The night's k-th meeting: its full transcript behind the glossary of tonight, the
        digest task; the next one once the reply is written. After the last, roll-ups."""
        n, k = payload
        night = self.nights[n]
        if k == len(night.meetings):
            self.at(self.now, "rollup", (n, 0))
            return
        m = self.meetings[night.meetings[k]]
        gloss = self.orgs[m.org].glossary_at(self.now)
        night.sent.append(len(self.out))
        self.send("digest", n, k, [*m.context(self.system, EVER, gloss), self.tasks["digest"]])
        reply = clipped_length(self.rng, 250, 0.4, 80, 700)
        self.at(self.now + 1.0 + reply / RATE, "digest", (n, k + 1))

    def _on_rollup(self, payload: tuple) -> None:
        """The night's j-th org: its glossary, the roll-up task, the final summaries of its
        walked meetings in walk order."""
        n, j = payload
        night = self.nights[n]
        if j == len(night.orgs):
            return
        o = night.orgs[j]
        sums = [self.meetings[k].summary for k in night.meetings if self.meetings[k].org == o]
        night.sent.append(len(self.out))
        self.send("rollup", n, len(night.sent) - 1,
                  [self.system, *self.orgs[o].glossary_at(self.now), self.tasks["rollup"],
                   *sums])
        reply = clipped_length(self.rng, 400, 0.4, 100, 1000)
        self.at(self.now + 1.0 + reply / RATE, "rollup", (n, j + 1))
