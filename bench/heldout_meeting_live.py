"""bench.heldout's ``meeting_assist`` shape, a meeting's life: the assistant joins, the
transcript grows, rolling summaries and participants' questions re-send it so far, live
captions are translated over a sliding window, and at the end come the final summary, action
items, follow-up emails and translated summaries. See bench/heldout_meeting_assist.py's
docstring for the numbers."""

from __future__ import annotations

import math
import random

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_meeting_parts import (DAY, LANGUAGES, RATE, Meeting, Series, Team, next_slot,
                                        poisson, talk, world)

SYSTEM = 900  # tokens of the assistant's system prompt (persona, format, tool rules)
TASKS = {"summary": 180, "qa": 90, "highlight": 140, "final": 260, "notes": 320,
         "actions": 200, "email": 150, "digest": 220, "rollup": 200,
         "search": 160}  # the task instructions' tokens
CAPTION_SPAN = 240.0  # seconds of transcript a live-caption translation request holds
CAPTION_EVERY = 90.0
HIGHLIGHT_SPAN, HIGHLIGHT_EVERY = 300.0, 180.0  # live highlights: the last 5 minutes, every 3
EVER = math.inf  # a time after every utterance: the whole transcript


class Live(EventState):
    """The generator's meetings: ``_on_series`` books a recurring instance, ``_on_begin``
    starts a meeting (its events planned up front), the rest send its requests. Every
    request's meta is (kind, key, step, segments); a meeting's key is its index."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.orgs, self.teams, self.series = world(rng, self.new, scale)
        self.system = self.new(SYSTEM)
        self.tasks = {k: self.new(n) for k, n in TASKS.items()}
        self.captions = [self.new(rng.randint(90, 160)) for _ in range(LANGUAGES)]
        self.into = [self.new(rng.randint(40, 80)) for _ in range(LANGUAGES)]
        self.meetings: list[Meeting] = []

    def ask(self, kind: str, mid: int, segs: list[Segment]) -> None:
        m = self.meetings[mid]
        m.sent.append(len(self.out))
        self.send(kind, mid, len(m.sent) - 1, segs)

    def tz(self, team: int) -> float:
        return self.orgs[self.teams[team].org].tz

    def _on_series(self, sid: int) -> None:
        s = self.series[sid]
        skip = 7 * DAY if s.kind == "allhands" else 0.0
        self.at(next_slot(self.now + 60 + skip, self.tz(s.team), s.at, s.days), "series", sid)
        if self.rng.random() < (0.02 if s.kind == "allhands" else 0.08):
            return  # cancelled, a holiday, everyone out
        begin = self.now + self.rng.uniform(0, 120)
        self.at(begin, "begin", (s.team, sid, s.kind, s.minutes, s.people))

    def _on_begin(self, payload: tuple) -> None:
        team, sid, kind, minutes, people = payload
        rng, org = self.rng, self.orgs[self.teams[team].org]
        f = rng.uniform(0.9, 1.15) if kind == "allhands" else rng.uniform(0.6, 1.1)
        said = talk(rng, self.new, self.now, self.now + minutes * 60 * f, kind == "allhands")
        langs = [g for g in org.languages if kind == "allhands" or rng.random() < 0.15]
        m = Meeting(self.teams[team].org, team, sid, kind, self.now, said[-1][0] + 2.0, people,
                    self._head(sid), org.glossary_at(self.now), said, langs)
        mid = len(self.meetings)
        self.meetings.append(m)
        if sid is not None:
            self.series[sid].meetings.append(mid)
        self._plan_live(mid, org.every)
        self._plan_questions(mid)
        self._plan_after(mid)

    def _head(self, sid: int | None) -> list[Segment]:
        """The header after the glossary: an ad-hoc meeting's invite (title, attendees,
        agenda); a recurring one's fixed head, the last instance's summary, this week's
        agenda additions (none for a standup)."""
        rng = self.rng
        if sid is None:
            return [self.new(clipped_length(rng, 180, 0.7, 40, 900))]
        s: Series = self.series[sid]
        if s.kind == "standup":
            return [s.head, s.last]
        extra = (250, 80, 800) if s.kind == "allhands" else (60, 10, 400)
        return [s.head, s.last, self.new(clipped_length(rng, extra[0], 0.6, *extra[1:]))]

    def _plan_live(self, mid: int, every: float | None) -> None:
        """Rolling summaries every ``every`` seconds (an all-hands every 300 s even where the
        org has them off), live captions every CAPTION_EVERY per language, highlights every
        HIGHLIGHT_EVERY where the host turns them on."""
        m = self.meetings[mid]
        if self.rng.random() < self.orgs[m.org].highlights:
            self._every(mid, "highlight", HIGHLIGHT_EVERY, mid)
        if m.kind == "allhands":
            every = min(every or 300.0, 300.0)
        t = m.start + (every or EVER)
        while t < m.end - 60:
            self.at(t, "summary", mid)
            t += every
        for lang in m.languages:
            self._every(mid, "caption", CAPTION_EVERY, (mid, lang))

    def _every(self, mid: int, name: str, every: float, payload: object) -> None:
        m = self.meetings[mid]
        t = m.start + every
        while t < m.end:
            self.at(t, name, payload)
            t += every

    def _plan_questions(self, mid: int) -> None:
        """Ad-hoc questions spread over the meeting (more in longer, bigger ones), a late
        joiner's catch-up; an all-hands has bursts of listeners asking at once after
        announcements, and a trickle."""
        m, rng = self.meetings[mid], self.rng
        minutes = (m.end - m.start) / 60
        if m.kind != "allhands":
            n = rng.uniform(0.2, 1.0) * minutes / 30 * (m.people / 5) ** 0.3
            times = [rng.uniform(m.start + 120, m.end) for _ in range(poisson(rng, n))]
            if m.people >= 5 and rng.random() < 0.3:
                times.append(m.start + rng.uniform(300, 1200))
        else:
            times = [rng.uniform(m.start + 120, m.end) for _ in range(poisson(rng, minutes / 10))]
            for _ in range(max(1, round(minutes / 30 * rng.uniform(0.6, 1.4)))):
                t0 = rng.uniform(m.start + 300, m.end - 60)
                size = clipped_length(rng, 15 * (m.people / 400) ** 0.5, 0.6, 6, 80)
                times += [t0 + min(180.0, rng.expovariate(1 / 40)) for _ in range(size)]
        for t in times:
            if t < m.end:  # after it, the assistant's panel is closed
                self.at(t, "qa", (mid, ()))

    def _plan_after(self, mid: int) -> None:
        """Final summary and action items (one request or two) seconds after the end; a
        follow-up email (40 % of meetings, 10 % of standups, 30 % of all-hands) when the
        organizer gets to it."""
        m, rng = self.meetings[mid], self.rng
        self.at(m.end + rng.uniform(3, 15), "final", mid)
        if self.orgs[m.org].separate:
            self.at(m.end + rng.uniform(3, 15), "actions", mid)
        if rng.random() < {"standup": 0.1, "allhands": 0.3}.get(m.kind, 0.4):
            self.at(m.end + clipped_length(rng, 300, 1.0, 30, 7200), "email", (mid, 0))

    def _on_summary(self, mid: int) -> None:
        m = self.meetings[mid]
        self.ask("summary", mid, [*m.context(self.system, self.now), self.tasks["summary"]])

    def _on_qa(self, payload: tuple) -> None:
        """A participant's question over the transcript so far; a follow-up in the same
        side thread re-sends the earlier questions and answers after the (grown) transcript."""
        mid, thread = payload
        m, rng = self.meetings[mid], self.rng
        q = self.new(clipped_length(rng, 25, 0.7, 5, 300))
        self.ask("qa", mid, [*m.context(self.system, self.now), self.tasks["qa"], *thread, q])
        if len(thread) < 6 and rng.random() < (0.1 if m.kind == "allhands" else 0.25):
            a = self.new(clipped_length(rng, 150, 0.7, 20, 800))
            later = self.now + a[1] / RATE + rng.uniform(15, 120)
            if later < m.end:
                self.at(later, "qa", (mid, (*thread, q, a)))

    def _on_caption(self, payload: tuple) -> None:
        """Live captions into a language: the glossary, then the last CAPTION_SPAN seconds."""
        mid, lang = payload
        m = self.meetings[mid]
        window = m.window(self.now, CAPTION_SPAN)
        if window:
            self.ask("caption", mid, [self.system, *m.glossary, self.captions[lang], *window])

    def _on_highlight(self, mid: int) -> None:
        """Live highlights (decisions, action items so far) over the last HIGHLIGHT_SPAN."""
        m = self.meetings[mid]
        window = m.window(self.now, HIGHLIGHT_SPAN)
        if window:
            self.ask("highlight", mid,
                     [self.system, *m.glossary, self.tasks["highlight"], *window])

    def notes(self, m: Meeting) -> tuple[Segment, Segment]:
        """The final and action-item tasks: "final" and "actions" in an org that asks for
        them apart, else both "notes" (one request for summary and action items)."""
        if self.orgs[m.org].separate:
            return self.tasks["final"], self.tasks["actions"]
        return self.tasks["notes"], self.tasks["notes"]

    def _on_final(self, mid: int) -> None:
        """The final summary (with the action items where the org has them together); it
        becomes the series' last summary and joins the team's."""
        m, rng = self.meetings[mid], self.rng
        self.ask("final", mid, [*m.context(self.system, EVER), self.notes(m)[0]])
        if self.orgs[m.org].separate:
            m.summary = self.new(clipped_length(rng, 350, 0.4, 120, 1000))
        else:
            m.summary = m.actions = self.new(clipped_length(rng, 500, 0.4, 150, 1400))
        if m.series is not None:
            self.series[m.series].last = m.summary
        team: Team = self.teams[m.team]
        team.summaries.append((self.now, m.summary))
        for lang in m.languages:
            self.at(self.now + m.summary[1] / RATE + rng.uniform(2, 30), "translate", (mid, lang))

    def _on_actions(self, mid: int) -> None:
        m = self.meetings[mid]
        self.ask("actions", mid, [*m.context(self.system, EVER), self.notes(m)[1]])
        m.actions = self.new(clipped_length(self.rng, 200, 0.6, 30, 900))

    def _on_email(self, payload: tuple) -> None:
        """The follow-up email after the action items, with the organizer's note; 20 % ask
        again with another note (at most twice)."""
        mid, redo = payload
        m, rng = self.meetings[mid], self.rng
        note = self.new(clipped_length(rng, 40, 0.8, 5, 400))
        self.ask("email", mid, [*m.context(self.system, EVER), self.notes(m)[1], m.actions,
                                self.tasks["email"], note])
        if redo < 2 and rng.random() < 0.2:
            self.at(self.now + rng.uniform(30, 240), "email", (mid, redo + 1))

    def _on_translate(self, payload: tuple) -> None:
        mid, lang = payload
        m = self.meetings[mid]
        self.ask("translate", mid, [*m.context(self.system, EVER), self.notes(m)[0],
                                    m.summary, self.into[lang]])

