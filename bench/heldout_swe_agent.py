"""bench.heldout's ``swe_agent`` shape: one inference replica behind an engineering org's
autonomous coding agents over a working day. Written blind at 5cfc54c: by someone who had not
read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay or any reuse
statistic, distinct-block counts included); the workload is modelled on how such an agent
framework builds its prompts, not on any policy. Every rate, size and share below is this
writer's estimate of the domain, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Monday 00:00 (one site) and ends 24 h later; the
engineers work 08..19 (peak 09..11 and 14..16, a lunch dip); agents and CI run around the
clock.

Seeds differ in how the org is laid out: seed s has layout (s - 1) % 4 of ``LAYOUTS``
(bench/heldout_swe_world.py):

- "monorepo": one repo of 8..14 packages (a 5000-token top-level map, then the package's own),
  a heavy framework (system prompt 3200 tokens, tool definitions 6800), 70 % of the issues one
  attempt and 30 % two, compaction past 80000 tokens keeping 2 steps, 20 issues and 120 merges
  a day, 5 % of the merges' pipelines fail, the nightly suite fails in 2..6 jobs.
- "polyrepo": 12..20 small repos, a lean framework (1200 + 2300), best-of-4 on every issue,
  compaction past 32000 keeping 3 steps, 8 issues, 40 merges, 15 % fail, 15 % of the repos'
  nightly pipelines fail in 1..3 jobs.
- "platform": 4..6 big repos (maps of 3000..20000), 2200 + 4500, one or two attempts (half
  each), 64000 keeping 2, 14 issues, 60 merges, 10 % fail, 40 % of the nightlies in 1..4 jobs.
- "sampling": 3..4 repos, 4000 + 8000, best-of-4 or best-of-8 (half each) after 2..4 scripted
  setup steps (a command of 40..200 tokens and its output, 200..5000) that every attempt
  shares, 48000 keeping 2, 5 issues, 30 merges, 10 % fail, 30 % of the nightlies in 1..3 jobs.

The world: the framework's system prompt and tool definitions; repos by Zipf popularity (0.8..1
by layout, a random rank), each a README (300..4000), in the monorepo the top-level map, a map
per package (median 3500..9000 by layout, in 600-token sections; packages by Zipf too) and a
30-token commit line, last (NOTE(commit-last)). Merges land by the engineers' hours (about the
layout's rate x scale, at least 2 a day): each rewrites 1..3 sections of a package's map (5 %
also the top-level map, 3 % the README) and moves the commit. A run checks out the repo as it
stands when it starts, a CI job's run the commit that failed.

Requests (bench/heldout_swe_runs.py, bench/heldout_swe_desk.py):

- issue: the day's issues (the layout's rate x scale x 0.8..1.2, at least one) are assigned by
  the engineers' hours, each on a repo and package by popularity (issue text 150..2500 tokens,
  median 600). Its k attempts start within 3 s from one head: system, tools, README, (monorepo)
  top-level map, package map, commit line, issue, setup; their first requests are identical.
  An attempt is a trajectory of 6..90 steps (median 24): a step re-sends the head and the
  whole history, then the model's action (30..1500, median 180) and the tool's observation
  join the history: a file view (33 %, 200..3000), a search (20 %, 40..2000), an edit (20 %,
  30..600), a test run (12 %, 80..8000, 10..240 s) or a shell command (15 %, 20..3000); the
  next step follows the reading (9000 tokens/s), the writing (60 tokens/s) and the tool's
  time. The last step's observation is the patch (80..4000). In a one-attempt run 3 % of the
  steps ask the engineer, who answers (5..600 tokens) after a lognormal 12 min within 08..19
  (else at 08..10, or not before the day ends: the run stalls).
- ci: a failed pipeline (8..40 min after its merge, or the nightly one at 01:30..02:30) starts
  one run per failing job (1..5; nightly by the layout, x min(1, 2 x scale), at least one)
  0.5..4 s apart on the failing commit: system, tools, the repo, the CI cue (350), the job's
  log tail (800..12000, median 3000); 3..40 steps (median 10), one attempt, no questions; a
  nightly job in a package by popularity.
- compact: a trajectory whose next prompt is past the layout's window (having taken keep + 2
  steps since its last compaction, NOTE(compact-gap)) sends it with the framework's summarise
  cue (150); the summary (600..4000) then stands for the history but the last ``keep`` steps,
  so the next step shares only the head.
- select: once every attempt of a k > 1 task has submitted, the selector: its prompt (700), the
  repo as checked out, the task, the k patches.
- chat: an engineer opens a closed task's run (35 % of the issues, 10 % of the CI jobs; one
  attempt at random) 10 min..3 h later within 08..19 (else at 08..10; never after 19:00): the
  run's whole context (its last step, the action and the patch), the chat so far, a message
  (8..800, median 60); 1..5 turns (median 2), replies of 60..1500 (median 300), each next
  message a lognormal 90 s after the reply's decoding. After the last turn 45 % of the runs go
  back to work: the chat joins the history, 2..15 more steps to a second patch (the task stays
  closed).

At scale 1.0, seeds 1..4 (monorepo, polyrepo, platform, sampling): 0.63K..1.28K requests over
the day (a step re-sends 8K..80K tokens, so lab_notebook's block volume comes in a quarter of
its requests), 1.28M..2.35M blocks requested, generated in 0.9..2.4 s each on a shared 2-core
box; 4..19 issues, 5..34 CI jobs, 29..56 trajectories (median 16..20 steps), 3..27
compactions, 4..9 selections, 4..7 chats. Blocks by kind: issue 61..88 %, ci 8..36 % (platform
the most), compact 1..3 %, chat 2..3 %, select under 1 %. At scale 0.3 (the tests): 0.26M..0.59M
blocks, 0.2..0.5 s each; a scaled-down day keeps at least one issue, two merges a day and one
failed nightly job, so it shrinks less than the scale.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_swe_desk import Desk
from bench.heldout_swe_world import LAYOUTS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("issue", "ci", "compact", "select", "chat")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): issue and ci have the trajectory (``state.trajs``) and its step, compact the
    trajectory and its compaction, select the task (``state.tasks``) and 0, chat the chat
    (``state.chats``) and its turn. ``times``: seconds from Monday 00:00. ``state``: the
    generator (layout, repos, tasks, trajectories, pipelines, chats, resumes)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def swe_agent(seed: int, scale: float = 1.0) -> Trace:
    """Coding agents over an engineering org's working day: issue runs with best-of-k
    attempts, CI-triggered runs in bursts, trajectories re-sending a growing context behind
    the framework's prompt and the repo map at a commit, compactions, selections, engineers'
    chats that send a run back to work. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s has LAYOUTS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, LAYOUTS[(seed - 1) % len(LAYOUTS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
