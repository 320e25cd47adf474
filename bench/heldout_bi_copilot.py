"""bench.heldout's ``bi_copilot`` shape: one inference replica behind an enterprise BI /
text-to-SQL copilot. Written after ``adaptive`` was frozen (at 395a810), by someone who had
not read the eviction policies (blind: no policy, LRU, OPT or hit rate was run or computed on
it); the workload is modelled on how such traffic looks, not on any policy. Prompts are laid
out in token segments and cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts on a Monday 00:00 UTC; replies decode at 40 tokens/s;
rates are a weekday's totals at scale 1.0, Poisson, shaped by each office's local hour (0.03
at night, 0.35 at 07, 1.0 at 09..11 and 14..15, 0.65 at lunch, 0.5 at 17, 0.15 at 19;
weekends 0.08 x). Rates, teams and dashboards are scaled (each with a floor), so a
scaled-down trace still spans about three days.

The company: 24 analytics teams (scaled, at least 3) in three offices (New York UTC-5 half
of them, London 0, Bangalore +5.5), Zipf(0.9) activity by a random rank. A team's warehouse
is Snowflake, BigQuery or Postgres (50/30/20 %: a 300..700-token dialect guide each); its
metric glossary is 300..2500 tokens (median 900) and its schema 4..60 tables (median 12) of
40..1200-token DDL (median 130), put in the prompt in table order up to 8000 tokens. A team
migrates 0.7 times a weekday on average, in deploy hours (10..17 local, weekdays) or the
nightly warehouse build (01..04): 1..3 tables' DDL change (-10..+35 %), 25 % of the time a
table is added at the end, 15 % the glossary is edited. Every prompt that holds a schema is
rendered at the time it is sent, so a migration makes the blocks from the first changed
table (or the glossary) on new content, mid-session too.

- analyst sessions (160 a weekday): copilot prompt (1200..2000) + dialect + glossary +
  schema + the history. 1..25 questions a sitting (median 3), each 10..250 tokens (median
  35), the reply SQL and a note (60..700, median 150). The SQL runs 1..300 s (median 8);
  22 % fail and the tool sends the error (20..200) back 2..10 s later for a fix (a fix fails
  again 30 %, at most 3 in a row); else 35 % of the time the analyst pastes a result preview
  (100..1500, median 300) with a question 3..20 s after the run; then thinks 5..1800 s
  (median 75). A session whose context passes 16000 tokens ends. 30 % of sittings are
  followed by a return (half as often after each): 40 % 20 min..2 h later, 60 % the next
  working morning (08:30..10:30 local), the whole conversation re-sent.
- dashboard narration: 28 dashboards (scaled, at least 3), each a team's, 2..14 tiles (median
  6) of 80..500-token SQL, refreshed hourly 07..19 local on weekdays (15 %), every 4 hours
  (30 %) or daily at 06:00 local (55 %); a run starts 0..240 s after its slot and narrates
  the tiles one after another: narration prompt (700..1100) + glossary + the dashboard's
  header (40..200) + the tile's SQL + its fresh result (40..900, median 160, new each run).
- nightly reports: at 07:00 UTC (02:00 in New York) a job walks every team in order and each
  of its 3..10 report sections: report prompt (1500..2500) + glossary + schema + the
  section's template (100..400) + the day's data (200..2500, median 700, new).
- table docs: after a migration the catalog bot documents each changed or added table: docs
  prompt (600..900) + dialect + the new DDL + sample rows (100..600, new).
- metrics chat bot (350 a weekday): bot prompt (500..900) + the team's glossary + a question:
  40 % one of the team's 25 frequent questions (Zipf 1.1, the same prompt again), else new.
- pastes (10 a weekday): copilot prompt + dialect + a query log or legacy SQL file
  (3000..30000, median 8000) + an ask, once.

9000 requests at scale 1.0 span 69..90 hours (Monday into Thursday, 3..4 report nights) over
seeds 1..10, generated in about 2 s each: 2.62M..3.36M blocks requested, 197k..220k distinct
(6.5..7.8 %: the schema prompts, glossaries and dashboard heads come back all day, while
histories, results, report data and pastes are new). Analyst sessions are 46..54 % of the
requests (69..76 % of the blocks; 484..590 sessions), dashboards 25..36 % (10..20 %), reports
4.2..7.3 % (5.2..9.7 %), table docs 0.9..1.2 % (0.3..0.5 %; 43..64 migrations), the chat bot
11..14 % (3.3..5.3 %), pastes 0.2..0.5 % (0.6..1.2 %). At scale 0.25 (6 teams, 7 dashboards)
seeds 1..5: 69..89 h, 693k..822k blocks, 6.2..7.1 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_bi_jobs import Jobs
from bench.heldout_bi_parts import Dashboard, Migration, Team
from bench.heldout_bi_sim import Night, Session
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
KINDS = ("analyst", "dashboard", "report", "docs", "slack", "paste")
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments):
    ("analyst", session, request of the session), ("dashboard", dashboard, tile),
    ("report", night, request of the night), ("docs", migration, table of the migration),
    ("slack", team, 0), ("paste", team, 0). ``times``: seconds from Monday 00:00 UTC."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    heads: dict[str, Segment]
    dialects: list[Segment]
    teams: list[Team]
    dashboards: list[Dashboard]
    sessions: list[Session]
    nights: list[Night]
    migrations: list[Migration]
    pastes: list[int]


def bi_copilot(seed: int, scale: float = 1.0) -> Trace:
    """An enterprise BI / text-to-SQL copilot: analysts' sessions behind their team's
    warehouse schema (migrations make later blocks new), SQL-error retries, result
    questions, sessions resumed later, scheduled dashboard narrations, a nightly report job,
    table documentation after migrations, a metrics chat bot, one-off pastes. See the module
    docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = Jobs(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.heads, s.dialects, s.teams, s.dashboards, s.sessions,
               s.nights, s.migrations, s.pastes)
