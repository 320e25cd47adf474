"""bench.heldout's ``ci_triage`` shape: one inference replica behind a large software
company's CI failure-triage service for two days (Tuesday 00:00 UTC to Thursday 00:00 UTC).
Written blind at a5a8d48: by someone who had not read the policies, and no policy or hit rate
was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload is modelled on how
such a service builds its prompts, never on any policy.

Where the numbers come from: the structure (a triage bot given the repository's contributing
and triage guide, the failing job's log tail and the diff; flaky-test tools reading a test's
run history; bisect helpers reading each commit of a range; nightly release-branch runs over
the build configuration; code-owner routing over an ownership file; dependency-bump bots
summarising release notes) follows public descriptions of CI-triage assistants and bots.
Every rate, size and share below is this writer's estimate; the replica is one of several,
the counts its share. Prompts are token segments cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space).

World (bench/heldout_ci_parts.py). Seeds differ in structure, drawn before anything that
depends on the scale: 50 % one monorepo (guide 2500..8000 tokens, median 4500; ownership file
4000..12000, median 7000, edited 3 times a day; 12 manifests), else 24..40 repositories of
Zipf(1) popularity (guide 800..5000, median 2200; ownership 200..3000, 0.08 edits a day each;
one manifest each); 50 % a guide-template change at 25..75 % of the clock (every guide gets a
new version, synced over an hour); 50 % a broken main branch of the most popular repository
from 14..20 UTC on day 0 or 1 for 1..3 h (a shared failing log tail of 1200..6000 tokens).
1200 x scale flaky-test candidates (Pareto(1.2) flakiness): a header (120..1500, median 400),
a 30-day summary (300..2500), run records (14..48 tokens) at 0.3..8 runs an hour; a history
is the summary and the newest 50 records. Developers at UTC -7 (50 %), +1 (32 %), +5.5 (18 %)
push 1100 x scale (x 0.85..1.15) times a day at local office hours (08..20, a morning and an
afternoon peak): 40 % a new diff of an open PR of the repository, else a new PR; diffs
60..12000 tokens (median 900); 28 % of pushes fail 1..3 CI jobs 4..45 minutes later; half of
the green ones merge onto main 10..60 minutes later.

Requests (bench/heldout_ci_jobs.py, bench/heldout_ci_desk.py):

- triage: each failed job: system (1200), the guide as it stands, the log tail (600..12000,
  median 3000, one-off), the diff, cue (60). About 400 a day at scale 1.0.
- storm: while main is broken every push of the repository fails its integration job too:
  the same head, the shared log tail, the job's own 20..80 tokens, the diff; 40 % re-run
  5..20 minutes later (failing again until the revert).
- followup: 18 % of triage and storm failures, 2..40 minutes later: the triage prompt, its
  answer (120..900), then history and a message (5..400, median 40; 10 % paste 300..5000 more
  log); 1..12 turns (median 2), replies 60..900, 60 s median pause; ends past 32000 tokens.
- flaky: 35 % of triage failures, 3..15 minutes later, on one of the repository's candidates
  by flakiness: system (700), header, history as it stands (records since the last look
  added), cue (45).
- owners: 45 % of triage and 30 % of storm failures, 1..5 minutes later: system (400), the
  ownership file as it stands, the changed paths (30..400), cue (30).
- nightly: 2..4 release branches (3 in the monorepo) of the most popular repositories, each
  at a fixed UTC hour (one of 00:30, 01:30, 02:30, 03:30, 05:00, 22:00; the newest also at
  12..13): 30..90 jobs (x scale), 5..90 % (median 30 %) fail 20..55 minutes after the start,
  each system (1000), the branch's 3..8 build-config files (1200..8000 tokens each) as of the
  run, a log tail (800..5000), cue; 40 % of later runs follow a backport that changed one
  config file.
- bisect: a walk over main's commits, one request after the last one's reading (8000 tok/s)
  and writing (60..400 at 40/s): system (900), the failure's log, the commit's diff, cue.
  5 a day x scale by developers on a recent triage (8..200 commits, median 30), one 15..40
  minutes into a storm (20..80), 40 % of nightly runs after their first failure (5..30).
- weekly: Wednesday 06:00 UTC the report walks the 250 x scale flakiest tests, repository by
  repository: system (800), header, history, cue.
- depbump: 03:00 UTC each day the bot walks 8..25 x scale dependencies (of 300, Zipf(0.9)),
  each over the manifests using it (1..6 in the monorepo, 1..15 repositories): system (600),
  the release notes (400..8000, shared by the dependency's manifests that run), the manifest
  as it stands (a new version after each bump), the lockfile diff (80..3000), cue.
- oneoff: 90 a day x scale at office hours: system (350), pasted content (60..8000), a
  question (8..300).

At scale 1.0, seeds 1..4 (layout, storm, guide change): 1 mono, no storm, guide change;
2 multi (25 repositories), storm, no change; 3 mono, storm, no change; 4 mono, storm, guide
change. 2.8K..3.5K requests, 1.42M..1.88M blocks requested (seed 1 1.53M, 2 1.42M, 3 1.85M,
4 1.88M), 0.45M..0.53M distinct (26..37 %), generated in 1.6..2.6 s each on a shared 2-core
box. Blocks by kind: triage 25..36 %, followup 15..22 %, nightly 8..22 %, bisect 6..18 %,
owners 3..11 % (multi lowest), storm 0..9 %, flaky 3..4 %, weekly 3..4 %, depbump 1..4 %,
oneoff about 1 %. At scale 0.2 (the tests): 590..990 requests, 0.29M..0.56M blocks (seed 1
0.31M, 2 0.29M, 3 0.41M, 4 0.56M), 24..39 % distinct, 0.26..0.46 s each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_ci_desk import Desk
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("triage", "storm", "followup", "flaky", "owners", "nightly", "bisect", "weekly",
         "depbump", "oneoff")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    triage and storm have the PR and the failure (``state.failures``), followup the chat and
    the turn, flaky the test and the failure, owners the repository and the failure, nightly
    the branch and its run, bisect, weekly and depbump the walk (``state.streams``) and the
    step, oneoff its own index. ``times``: seconds from Tuesday 00:00 UTC. ``state``: the
    generator (repositories, tests, PRs, the storm, failures, branches, walks, chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def ci_triage(seed: int, scale: float = 1.0) -> Trace:
    """A company's CI failure-triage service: triage of each failed job over the guide,
    log tail and diff, a broken main's storm, follow-up chats, flaky-test classification,
    owner routing, release nightlies failing in bursts, bisect walks, the weekly flaky report,
    dependency bumps and one-off questions. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
