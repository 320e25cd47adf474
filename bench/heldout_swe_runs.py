"""bench.heldout's ``swe_agent`` shape, the agent runs: a task (an issue, or a failing CI job)
is tried by k attempts that start together from one prompt (the framework's system prompt and
tools, the repo at the task's commit, the task, the harness's scripted setup), each a
trajectory that re-sends its whole growing context every step (the model's action, then the
tool's observation: a file view, a search, an edit, a test log, a shell command, now and then
the engineer's answer to a question), compacted into a summary when it passes the layout's
window; when every attempt has submitted a patch a selector picks one. See
bench/heldout_swe_agent.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length, segment_tokens
from bench.heldout_swe_world import END, HOUR, MINUTE, Layout, World

ACTION = (180, 0.7, 30, 1500)  # the model's reasoning and tool call in one step
# tool -> (weight, observation tokens (median, sigma, lo, hi), seconds it runs (lo, hi))
OBSERVE = (("view", 0.33, (900, 0.5, 200, 3000), (0.3, 1.5)),
           ("search", 0.2, (350, 0.7, 40, 2000), (0.5, 3.0)),
           ("edit", 0.2, (120, 0.5, 30, 600), (0.2, 1.0)),
           ("test", 0.12, (1200, 0.8, 80, 8000), (10.0, 240.0)),
           ("shell", 0.15, (250, 0.9, 20, 3000), (1.0, 30.0)))
ASK = 0.03  # odds a step of a one-attempt issue run asks the engineer a question
WAIT = (12 * MINUTE, 1.0)  # the engineer answers after (median, sigma), in the work hours
ANSWER = (60, 0.8, 5, 600)
HOURS = (8.0, 19.0)  # when engineers answer, open runs and chat; else 08..10 or never
STEPS = {"issue": (24, 0.6, 6, 90), "ci": (10, 0.6, 3, 40)}  # steps to a submitted patch
SETUP = ((80, 0.3, 40, 200), (1200, 0.6, 200, 5000))  # a scripted setup step: command, output
PATCH = (600, 0.7, 80, 4000)  # the diff an attempt submits (its last observation)
COMPACT_CUE = 150  # the framework's summarise-the-trajectory instruction
SUMMARY = (1500, 0.4, 600, 4000)
SELECTOR = 700  # the selector's system prompt
PREFILL, DECODE = 9000.0, 60.0  # tokens a second the replica reads and writes per run
LAUNCH = 3.0  # seconds over which a task's attempts start


@dataclass
class Task:
    """An issue or a failing CI job ("issue" or "ci"): repo, package, checkout time, start
    (later than the checkout for a CI job), the repo as checked out (``ctx``), the task text
    (the issue; the CI cue and the job's log), the prompt every attempt starts from
    (``head``, scripted setup included), its attempts (trajectory indices), the selector's
    request (None until all have submitted) and whether it is closed (its patches picked)."""

    kind: str
    repo: int
    package: int
    commit: float
    start: float
    ctx: list[Segment]
    text: list[Segment]
    head: list[Segment]
    attempts: list[int] = field(default_factory=list)
    select: int | None = None
    closed: bool = False


@dataclass
class Traj:
    """One attempt: its task, steps left, history after the head (actions and observations;
    after a compaction the summary and the steps kept), request indices (``sent``: steps
    only), the compaction requests, the steps (indices into ``sent``) after which the agent
    waited for the engineer, steps since the last compaction, and the patches it submitted
    (a second one after a resume) with the requests whose action submitted them."""

    task: int
    left: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    compactions: list[int] = field(default_factory=list)
    asks: list[int] = field(default_factory=list)
    since: int = 0
    patches: list[Segment] = field(default_factory=list)
    submits: list[int] = field(default_factory=list)


def in_hours(rng: random.Random, when: float) -> float | None:
    """``when`` if engineers are in then; before the day starts at 08..10; after it, never
    (None) since the trace ends at midnight."""
    hour = when / HOUR
    if HOURS[0] <= hour < HOURS[1]:
        return when
    return rng.uniform(8.0, 10.0) * HOUR if hour < HOURS[0] else None


class Runs(World):
    """The world (``World``) and its agent runs."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        self.compact_cue, self.selector = self.new(COMPACT_CUE), self.new(SELECTOR)
        self.tasks: list[Task] = []
        self.trajs: list[Traj] = []

    def start_task(self, kind: str, r: int, p: int, commit: float, text: list[Segment],
                   k: int) -> int:
        """Task of ``kind`` on repo ``r``'s package ``p`` as of ``commit``: ``k`` attempts
        start within LAUNCH seconds from one head (the issue's after the scripted setup)."""
        rng, new = self.rng, self.new
        ctx = self.ctx(r, p, commit)
        head = [self.system, self.tools, *ctx, *text]
        for _ in range(rng.randint(*self.layout.setup) if kind == "issue" else 0):
            head += [new(clipped_length(rng, *SETUP[0])), new(clipped_length(rng, *SETUP[1]))]
        self.tasks.append(Task(kind, r, p, commit, self.now, ctx, text, head))
        for _ in range(k):
            self.trajs.append(Traj(len(self.tasks) - 1, clipped_length(rng, *STEPS[kind])))
            self.tasks[-1].attempts.append(len(self.trajs) - 1)
            self.at(self.now + rng.uniform(0.0, LAUNCH), "step", len(self.trajs) - 1)
        return len(self.tasks) - 1

    def prompt(self, t: int) -> list[Segment]:
        """What trajectory ``t`` sends now: its task's head, then its history."""
        return [*self.tasks[self.trajs[t].task].head, *self.trajs[t].history]

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds the replica takes to read ``segs`` and write ``out`` tokens."""
        return segment_tokens(segs) / PREFILL + out / DECODE

    def _on_step(self, t: int) -> None:
        """A step of trajectory ``t`` (a compaction first when it is past the window and has
        taken enough steps since the last); the action and the observation join the history;
        the last step's observation is the patch."""
        traj, rng, new = self.trajs[t], self.rng, self.new
        segs, lay = self.prompt(t), self.layout
        # NOTE(compact-gap): a compacted trajectory keeps its last ``keep`` steps, so with a
        # large head (sampling's) it can still be past the window; it takes keep + 2 steps
        # before the next compaction instead of compacting at every step
        if segment_tokens(segs) > lay.compact and traj.since >= lay.keep + 2:
            self.compact(t, segs)
            return
        traj.sent.append(self.emit(self.tasks[traj.task].kind, t, len(traj.sent), segs))
        traj.since, traj.left = traj.since + 1, traj.left - 1
        action = new(clipped_length(rng, *ACTION))
        if not traj.left:
            traj.patches.append(new(clipped_length(rng, *PATCH)))
            traj.submits.append(traj.sent[-1])
            traj.history += [action, traj.patches[-1]]
            self.attempt_done(t)
            return
        obs, wait = self.observe(t)
        traj.history += [action, obs]
        if wait is not None:
            self.at(self.now + self.pace(segs, action[1]) + wait, "step", t)

    def observe(self, t: int) -> tuple[Segment, float | None]:
        """The observation of trajectory ``t``'s step and the seconds until it is there: a
        tool's output, or in a one-attempt issue run now and then the engineer's answer (in
        the work hours; None: not before the trace ends). Best-of-k attempts run unattended."""
        rng, traj = self.rng, self.trajs[t]
        task = self.tasks[traj.task]
        if task.kind == "issue" and len(task.attempts) == 1 and rng.random() < ASK:
            when = in_hours(rng, self.now + rng.lognormvariate(0.0, WAIT[1]) * WAIT[0])
            traj.asks.append(len(traj.sent) - 1)
            wait = None if when is None or when >= END else when - self.now
            return self.new(clipped_length(rng, *ANSWER)), wait
        _, _, size, secs = rng.choices(OBSERVE, [o[1] for o in OBSERVE])[0]
        return self.new(clipped_length(rng, *size)), rng.uniform(*secs)

    def compact(self, t: int, segs: list[Segment]) -> None:
        """Trajectory ``t`` is compacted: its context and the cue go out, the summary then
        stands for its history but the last ``keep`` steps."""
        traj, keep = self.trajs[t], self.layout.keep
        i = self.emit("compact", t, len(traj.compactions), [*segs, self.compact_cue])
        traj.compactions.append(i)
        summary = self.new(clipped_length(self.rng, *SUMMARY))
        traj.history = [summary, *traj.history[-2 * keep:]]
        traj.since = 0
        self.at(self.now + self.pace(segs, summary[1]), "step", t)

    def attempt_done(self, t: int) -> None:
        """Trajectory ``t`` submitted its patch; once every attempt of its task has, the
        selector reads the repo, the task and the patches (k > 1) and the task closes. A
        resumed trajectory that submits again changes nothing here."""
        task_id = self.trajs[t].task
        task = self.tasks[task_id]
        if task.closed or not all(self.trajs[a].patches for a in task.attempts):
            return
        if len(task.attempts) > 1:
            patches = [self.trajs[a].patches[0] for a in task.attempts]
            segs = [self.selector, *task.ctx, *task.text, *patches]
            task.select = self.emit("select", task_id, 0, segs)
        task.closed = True
        self.task_done(task_id)

    def task_done(self, n: int) -> None:
        """A hook for the desk (an engineer may open the run)."""
