"""bench.heldout's ``bi_copilot`` shape, its simulation: an event queue on the clock of
bench/heldout_bi_parts.py, where each event sends at most one request and schedules what
follows it. See bench/heldout_bi_copilot.py's docstring for what each stream models."""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from bench import heldout_bi_parts as parts
from bench.heldout_bi_parts import HOUR, RATE
from bench.heldout_fewshot import Blocks, Segment, clipped_length

# weekday totals at scale 1.0 (scaled, at least the second number)
PER_DAY = {"session": (160.0, 3.0), "slack": (350.0, 3.0), "paste": (10.0, 0.5)}
DASHBOARDS = (28, 3)
REPORT_AT = 7.0  # UTC hour of the nightly report job (02:00 in New York)
ERROR, ERROR_AGAIN, RESULTS = 0.22, 0.3, 0.35  # SQL error, error after a fix, results ask
FAQ_SHARE = 0.4
MAX_CONTEXT = 16000
HEADS = {"system": (1200, 2000), "narrate": (700, 1100), "report": (1500, 2500),
         "docs": (600, 900), "slack": (500, 900)}


@dataclass
class Session:
    """An analyst's copilot session: its team, asks left in the sitting, history after the
    schema, each sent request's step ("ask", "fix", "results") and index, where each sitting
    starts (positions in ``sent``) and the chance of a return after this sitting."""

    team: int
    turns: int
    back: float
    history: list[Segment] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    sittings: list[int] = field(default_factory=lambda: [0])


@dataclass
class Night:
    """A nightly report run: its start and the (team, section) it walks, with indices sent."""

    start: float
    requests: list[tuple[int, int]]
    sent: list[int] = field(default_factory=list)


class Sim:
    """The company (teams, dashboards) and the trace sent so far; ``run`` fills it (on a
    ``bench.heldout_bi_jobs.Jobs``, which adds the scheduled streams)."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        self.rng, self.size, self.scale = rng, size, scale
        self._ids, self._seq, self._heap = itertools.count(), itertools.count(), []
        self._blocks = Blocks()
        self.out: list[list[int]] = []
        self.meta: list[tuple] = []
        self.times: list[float] = []
        self.heads = {k: self.new(rng.randint(*v)) for k, v in HEADS.items()}
        self.dialects = [self.new(rng.randint(300, 700)) for _ in parts.WAREHOUSES]
        n = max(3, round(parts.TEAMS * scale))
        ranks = rng.sample(range(1, n + 1), n)
        self.teams = [parts.make_team(rng, self.new, o, r)
                      for o, r in zip(parts.offices(n), ranks)]
        weights = [t.weight for t in self.teams]
        self.dashboards = [parts.make_dashboard(rng, self.new, rng.choices(range(n), weights)[0])
                           for _ in range(max(DASHBOARDS[1], round(DASHBOARDS[0] * scale)))]
        self.sessions: list[Session] = []
        self.nights: list[Night] = []
        self.migrations: list[parts.Migration] = []
        self.pastes: list[int] = []

    def new(self, tokens: int) -> Segment:
        """A piece of text never seen before."""
        return (next(self._ids), tokens)

    def at(self, t: float, fn, *args) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), fn, args))

    def send(self, t: float, kind: str, key: int, step: int, segs: list[Segment]) -> int:
        self.out.append(self._blocks.ids(0, segs))
        self.meta.append((kind, key, step, list(segs)))
        self.times.append(t)
        return len(self.out) - 1

    def run(self) -> None:
        """Start every stream at Monday 00:00 UTC and send until ``size`` requests."""
        for kind in PER_DAY:
            self.at(0.0, self._arrive, kind)
        for k in range(len(self.teams)):
            self.at(0.0, self._migration_due, k)
        for k, d in enumerate(self.dashboards):
            self.at(d.next_run(0.0, self.teams[d.team].tz), self._refresh, k)
        self.at(REPORT_AT * HOUR, self._night)
        while len(self.out) < self.size:
            t, _, fn, args = heapq.heappop(self._heap)
            fn(t, *args)

    def _active(self, t: float) -> tuple[float, list[float]]:
        """How busy the company is at ``t`` (0..1, by team weight) and each team's part."""
        parts_ = [team.weight * parts.busy(t, team.tz) for team in self.teams]
        return sum(parts_) / sum(team.weight for team in self.teams), parts_

    def _arrive(self, t: float, kind: str) -> None:
        """A candidate arrival of a stream (Poisson thinned by how busy the offices are)."""
        full, least = PER_DAY[kind]
        per_hour = max(least, full * self.scale) / sum(parts.WORK)
        self.at(t + self.rng.expovariate(per_hour / HOUR), self._arrive, kind)
        share, weights = self._active(t)
        if self.rng.random() >= share:
            return
        team = self.rng.choices(range(len(self.teams)), weights)[0]
        if kind == "session":
            turns = clipped_length(self.rng, 3, 0.8, 1, 25)
            self.sessions.append(Session(team, turns, 0.3))
            self._ask(t, len(self.sessions) - 1)
        elif kind == "slack":
            self._slack(t, team)
        else:
            self._paste(t, team)

    def _prefix(self, t: float, team: int) -> list[Segment]:
        tm = self.teams[team]
        return [self.heads["system"], self.dialects[tm.warehouse], tm.glossary_at(t),
                *tm.schema(t)]

    def _turn(self, t: float, key: int, step: str, added: list[Segment], reply: Segment):
        """Send session ``key``'s request with ``added`` after its history; the reply then
        joins the history. Returns when the reply has decoded."""
        s = self.sessions[key]
        s.history += added
        s.sent.append(self.send(t, "analyst", key, len(s.steps),
                                self._prefix(t, s.team) + s.history))
        s.steps.append(step)
        s.history.append(reply)
        return t + reply[1] / RATE

    def _ask(self, t: float, key: int) -> None:
        """A question (10..250 tokens, median 35); the reply is SQL and a note (60..700,
        median 150)."""
        rng = self.rng
        q = self.new(clipped_length(rng, 35, 0.8, 10, 250))
        done = self._turn(t, key, "ask", [q], self.new(clipped_length(rng, 150, 0.6, 60, 700)))
        self._after_sql(done, key, ERROR)

    def _after_sql(self, t: float, key: int, error: float) -> None:
        """The SQL runs (1..300 s, median 8): an error comes back to the copilot 2..10 s
        later, or the analyst asks about the results, or thinks and asks the next question."""
        rng = self.rng
        runtime = clipped_length(rng, 8, 1.0, 1, 300)
        if rng.random() < error:
            self.at(t + rng.uniform(2, 10), self._fix, key)
        elif rng.random() < RESULTS:
            self.at(t + runtime + rng.uniform(3, 20), self._results, key)
        else:
            self._next(t + runtime, key)

    def _fix(self, t: float, key: int) -> None:
        """The error message (20..200, median 60) sent back; a corrected query comes back."""
        rng = self.rng
        err = self.new(clipped_length(rng, 60, 0.6, 20, 200))
        done = self._turn(t, key, "fix", [err], self.new(clipped_length(rng, 150, 0.6, 40, 600)))
        fixes = 0
        for step in reversed(self.sessions[key].steps):
            if step != "fix":
                break
            fixes += 1
        self._after_sql(done, key, ERROR_AGAIN if fixes < 3 else 0.0)

    def _results(self, t: float, key: int) -> None:
        """A preview of the result rows (100..1500, median 300) and an ask (10..60)."""
        rng = self.rng
        rows = self.new(clipped_length(rng, 300, 0.7, 100, 1500))
        ask = self.new(clipped_length(rng, 20, 0.5, 10, 60))
        done = self._turn(t, key, "results", [rows, ask],
                          self.new(clipped_length(rng, 200, 0.6, 60, 600)))
        self._next(done, key)

    def _next(self, t: float, key: int) -> None:
        """The next question after a think time (5..1800 s, median 75), or the sitting ends:
        a return later (20 min..2 h, or the next working morning), or the session's end."""
        s, rng = self.sessions[key], self.rng
        s.turns -= 1
        size = sum(n for _, n in self._prefix(t, s.team) + s.history)
        if size > MAX_CONTEXT:
            return
        if s.turns > 0:
            self.at(t + clipped_length(rng, 75, 1.0, 5, 1800), self._ask, key)
            return
        if rng.random() >= s.back:
            return
        s.back /= 2
        s.turns = clipped_length(rng, 3, 0.7, 1, 12)
        tz = self.teams[s.team].tz
        if rng.random() < 0.4:
            back = t + clipped_length(rng, 45, 0.6, 20, 120) * 60.0
        else:
            back = parts.next_local(t, tz, rng.uniform(8.5, 10.5), True)
        self.at(back, self._resume, key)

    def _resume(self, t: float, key: int) -> None:
        s = self.sessions[key]
        s.sittings.append(len(s.sent))
        self._ask(t, key)

    def _slack(self, t: float, team: int) -> None:
        """A metric question to the chat bot: one of the team's FAQ (Zipf 1.1) or new."""
        tm, rng = self.teams[team], self.rng
        if rng.random() < FAQ_SHARE:
            q = rng.choices(tm.faq, [1 / (k + 1) ** 1.1 for k in range(len(tm.faq))])[0]
        else:
            q = self.new(clipped_length(rng, 30, 0.7, 8, 150))
        self.send(t, "slack", team, 0, [self.heads["slack"], tm.glossary_at(t), q])

    def _paste(self, t: float, team: int) -> None:
        """A one-off paste (a query log, a legacy SQL file: 3000..30000 tokens, median 8000)."""
        rng = self.rng
        body = self.new(clipped_length(rng, 8000, 0.7, 3000, 30000))
        ask = self.new(clipped_length(rng, 30, 0.5, 10, 80))
        tm = self.teams[team]
        self.pastes.append(self.send(t, "paste", team, 0, [
            self.heads["system"], self.dialects[tm.warehouse], body, ask]))
