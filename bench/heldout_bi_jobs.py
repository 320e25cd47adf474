"""bench.heldout's ``bi_copilot`` shape, its scheduled work: schema migrations and the table
documentation they trigger, dashboard refreshes that narrate each tile, and the nightly report
job. See bench/heldout_bi_copilot.py's docstring for what each models."""

from __future__ import annotations

from bench import heldout_bi_parts as parts
from bench.heldout_bi_parts import DAY, HOUR, RATE
from bench.heldout_bi_sim import Night, Sim
from bench.heldout_fewshot import clipped_length

WINDOWS = 10.0  # hours a weekday a migration can land in (10..17 and 01..04 local)


def in_window(t: float, tz: float) -> bool:
    """Whether a migration can land at ``t``: a weekday's 10..17 (deploys) or any night's
    01..04 (the scheduled warehouse builds), local time."""
    h = parts.local_hour(t, tz)
    return 1 <= h < 4 or (10 <= h < 17 and parts.weekday(t, tz) < 5)


class Jobs(Sim):
    """The simulation with its scheduled streams (``Sim`` holds the interactive ones)."""

    def _migration_due(self, t: float, team: int) -> None:
        """A candidate migration of ``team`` (MIGRATIONS a weekday, in its windows)."""
        per_hour = parts.MIGRATIONS / WINDOWS
        self.at(t + self.rng.expovariate(per_hour / HOUR), self._migration_due, team)
        if t == 0.0 or not in_window(t, self.teams[team].tz):
            return
        m = parts.migrate(self.rng, self.new, self.teams[team], team, t)
        self.migrations.append(m)
        self.at(t + self.rng.uniform(5, 60), self._doc, len(self.migrations) - 1, 0)

    def _doc(self, t: float, key: int, k: int) -> None:
        """The catalog bot documents each changed or added table: doc prompt + dialect + the
        new DDL + sample rows (100..600, median 250), one table after another."""
        m = self.migrations[key]
        tables = m.changed + ([m.added] if m.added is not None else [])
        if k >= len(tables):
            return
        tm, rng = self.teams[m.team], self.rng
        ddl = tm.tables[tables[k]].at(t)
        rows = self.new(clipped_length(rng, 250, 0.5, 100, 600))
        self.send(t, "docs", key, k, [self.heads["docs"], self.dialects[tm.warehouse], ddl, rows])
        reply = clipped_length(rng, 250, 0.5, 80, 800)
        self.at(t + reply / RATE + rng.uniform(1, 5), self._doc, key, k + 1)

    def _refresh(self, t: float, key: int) -> None:
        """A scheduled refresh of dashboard ``key``: its run starts 0..240 s later."""
        d = self.dashboards[key]
        self.at(d.next_run(t, self.teams[d.team].tz), self._refresh, key)
        d.runs.append([])
        self.at(t + self.rng.uniform(0, 240), self._tile, key, 0)

    def _tile(self, t: float, key: int, k: int) -> None:
        """Narrate tile ``k`` of the running refresh: narration prompt + the team's glossary +
        the dashboard's header + the tile's SQL + its fresh result (40..900, median 160)."""
        d, rng = self.dashboards[key], self.rng
        result = self.new(clipped_length(rng, 160, 0.8, 40, 900))
        segs = [self.heads["narrate"], self.teams[d.team].glossary_at(t), d.header, d.tiles[k],
                result]
        d.runs[-1].append(self.send(t, "dashboard", key, k, segs))
        if k + 1 < len(d.tiles):
            reply = clipped_length(rng, 120, 0.5, 40, 400)
            self.at(t + reply / RATE + rng.uniform(0.5, 3), self._tile, key, k + 1)

    def _night(self, t: float) -> None:
        """The nightly report job starts: every team in order, each of its sections."""
        self.at(t + DAY, self._night)
        reqs = [(k, s) for k, team in enumerate(self.teams) for s in range(len(team.sections))]
        self.nights.append(Night(t, reqs))
        self._section(t, len(self.nights) - 1)

    def _section(self, t: float, key: int) -> None:
        """One report section: report prompt + glossary + schema + the section's template +
        the day's data (200..2500, median 700); the next once the reply (300..1200) is in."""
        night, rng = self.nights[key], self.rng
        team, s = night.requests[len(night.sent)]
        tm = self.teams[team]
        data = self.new(clipped_length(rng, 700, 0.6, 200, 2500))
        segs = [self.heads["report"], tm.glossary_at(t), *tm.schema(t), tm.sections[s], data]
        night.sent.append(self.send(t, "report", key, len(night.sent), segs))
        if len(night.sent) < len(night.requests):
            reply = clipped_length(rng, 500, 0.4, 300, 1200)
            self.at(t + reply / RATE + rng.uniform(1, 5), self._section, key)

