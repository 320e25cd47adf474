"""bench.heldout's ``swe_agent`` shape, the engineers' side and CI's: issues assigned to the
agent in the work hours (k attempts each by the layout), agent runs for every failing job of a
failed pipeline (after a merge, or the nightly one) started in a burst on the failing commit,
and engineers who open a finished run and chat with it over its whole context, then now and
then send it back to work with the chat in its history. See bench/heldout_swe_agent.py's
docstring for the numbers."""

from __future__ import annotations

import random

from bench.heldout_fewshot import Chat, clipped_length
from bench.heldout_meeting_parts import pick
from bench.heldout_swe_runs import DECODE, Runs, in_hours
from bench.heldout_swe_world import HOUR, MINUTE, Layout, day_times

ISSUE = (600, 0.7, 150, 2500)  # an issue's text with its comments
CI_CUE = 350  # the CI mode's instruction (fix the failing job, do not touch unrelated tests)
CI_LOG = (3000, 0.6, 800, 12000)  # the failing job's log tail
JOB_GAP = (0.5, 4.0)  # seconds between a failed pipeline's agent runs
OPEN = {"issue": 0.35, "ci": 0.1}  # odds an engineer opens a closed task's run
OPEN_AFTER = (10 * MINUTE, 3 * HOUR)
TURNS = (2, 0.6, 1, 5)
MESSAGE = (60, 0.9, 8, 800)  # the engineer's message
REPLY = (300, 0.6, 60, 1500)
PAUSE = (90.0, 0.9)  # seconds the engineer takes before the next message (median, sigma)
RESUME = (0.45, (6, 0.5, 2, 15))  # odds the run goes back to work after the chat, its steps


class Desk(Runs):
    """The whole replica: the world, the runs, the issues, CI's runs and the chats."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        self.ci_cue = self.new(CI_CUE)
        self.chats: list[Chat] = []
        self.resumes: list[tuple[int, int]] = []  # (chat, trajectory)
        issues = max(1, round(layout.issues * scale * rng.uniform(0.8, 1.2)))
        for t in day_times(rng, issues):
            self.at(t, "issue", None)

    def _on_issue(self, _) -> None:
        """An engineer assigns one of the day's issues (the layout's rate x scale x 0.8..1.2,
        at least one, by the engineers' hours): repo and package by where work lands, k by the
        layout, the repo as it stands now."""
        r = self.a_repo()
        text = [self.new(clipped_length(self.rng, *ISSUE))]
        self.start_task("issue", r, self.a_package(r), self.now, text, pick(self.rng,
                                                                            self.layout.k))

    def _on_pipeline(self, arg: tuple[int, int, float, int]) -> None:
        """A failed pipeline: one agent run per failing job, seconds apart, on the commit it
        failed at (package -1: each job's own, by popularity)."""
        super()._on_pipeline(arg)
        r, p, commit, jobs = arg
        when = self.now
        for _ in range(jobs):
            self.at(when, "job", (r, p if p >= 0 else self.a_package(r), commit))
            when += self.rng.uniform(*JOB_GAP)

    def _on_job(self, arg: tuple[int, int, float]) -> None:
        r, p, commit = arg
        text = [self.ci_cue, self.new(clipped_length(self.rng, *CI_LOG))]
        self.start_task("ci", r, p, commit, text, 1)

    def task_done(self, n: int) -> None:
        """An engineer may open the closed task's run (an attempt, the selector's pick) in
        the work hours and chat with it."""
        rng, task = self.rng, self.tasks[n]
        if rng.random() >= OPEN[task.kind]:
            return
        when = in_hours(rng, self.now + rng.uniform(*OPEN_AFTER))
        if when is None:
            return
        t = rng.choice(task.attempts)
        chat = Chat("chat", t, clipped_length(rng, *TURNS), [])
        self.chats.append(chat)
        self.at(when, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn of chat ``n``: the run's whole context as it stands (taken at the first
        turn), the chat so far, the message. After the last the run may go back to work:
        the chat joins its history and its next step follows the reply."""
        chat, rng = self.chats[n], self.rng
        if not chat.sent:
            chat.fixed = self.prompt(chat.owner)
        msg = self.new(clipped_length(rng, *MESSAGE))
        _, out = self.turn(chat, chat.fixed, msg, REPLY, ("chat", n, len(chat.sent)))
        wait = out[1] / DECODE
        if chat.turns:
            self.at(self.now + wait + rng.lognormvariate(0.0, PAUSE[1]) * PAUSE[0], "turn", n)
        elif rng.random() < RESUME[0]:
            traj = self.trajs[chat.owner]
            traj.history += chat.history
            traj.left = clipped_length(rng, *RESUME[1])
            self.resumes.append((n, chat.owner))
            self.at(self.now + wait, "step", chat.owner)

