"""bench.heldout's ``ci_triage`` shape, the machines' side: a triage request for every failed CI
job (the system prompt, the repository's guide as it stands, the job's log tail, the diff
under test), the storm of look-alike failures while a main branch is broken, release
branches' nightly runs failing in bursts at fixed hours over the branch's build-config files,
bisect assistants walking a range of main's commits, the weekly flaky-test report walking
many tests' run histories, and the dependency-bump bot's nightly walk. See
bench/heldout_ci_triage.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_ci_parts import DAY, HOUR, MINUTE, World
from bench.heldout_legal_parts import Versioned

SYSTEM = {"triage": 1200, "nightly": 1000, "bisect": 900, "weekly": 800, "depbump": 600}
CUE = {"triage": 60, "nightly": 60, "bisect": 50, "weekly": 40, "depbump": 40}
OUTPUT = {"bisect": (150, 0.4, 60, 400), "weekly": (200, 0.4, 80, 500),
          "depbump": (250, 0.4, 100, 600)}  # tokens a stream's step writes
PREFILL, DECODE = 8000.0, 40.0  # tokens a second the replica reads and writes for a stream
LOG = (3000, 0.7, 600, 12000)  # tokens of a failed job's log tail
FOOTER = (40, 0.3, 20, 80)  # tokens of a storm job's own lines after the shared tail
RETRY = (0.4, (5.0, 20.0))  # storm failures re-run by the developer, minutes after
BRANCHES = {"mono": (3, 3), "multi": (2, 4)}  # release branches
NIGHTLY_HOURS = (0.5, 1.5, 2.5, 3.5, 5.0, 22.0)  # UTC hours a branch's run may be fixed at
MIDDAY = (12.0, 13.0)  # the newest branch's second daily run, UTC hour
CONFIGS = ((3, 8), (3000, 0.5, 1200, 8000))  # a branch's build-config files, tokens each
MATRIX = (30, 90)  # jobs of a run (x scale, at least 6)
BROKEN = (0.3, 0.6, 0.05, 0.9)  # share of a run's jobs that fail (lognormal, clipped)
NIGHTLY_LOG = (2000, 0.6, 800, 5000)
NIGHTLY_FINISH = (20.0, 55.0)  # minutes from a run's start to a failing job's end
BACKPORT = 0.4  # runs after a backport changed one config file (not the first)
BISECTS = 5.0  # developers' bisects a day at scale 1.0 (office hours)
RANGE = (30, 0.8, 8, 200)  # commits a bisect walks
STORM_BISECT = ((15.0, 40.0), (20, 80))  # minutes after the storm starts, commits
NIGHTLY_BISECT = (0.4, (10.0, 30.0), (5, 30))  # runs, minutes after the first failure, range
WEEKLY = (1, 6.0, 250)  # the report: day, UTC hour, tests at scale 1.0
DEPBUMP = (3.0, (8, 25), 300, 0.9)  # UTC hour, deps a run, dep pool, Zipf of popularity
DEP_USERS = {"mono": (2, 0.6, 1, 6), "multi": (4, 0.8, 1, 15)}  # manifests using a dep
CHANGELOG = (2000, 0.7, 400, 8000)  # tokens of a dependency release's notes
LOCKDIFF = (500, 0.8, 80, 3000)  # tokens of the lockfile diff


@dataclass
class Failure:
    """A triaged failure: PR (or branch), its kind, the segments sent, the log and request."""

    owner: int
    kind: str
    segs: list[Segment]
    log: list[Segment]
    sent: int


@dataclass
class Branch:
    """A release branch: its repository, fixed UTC hours, config files (versions) and runs
    as (start, request indices)."""

    repo: int
    hours: list[float]
    configs: Versioned
    runs: list[tuple[float, list[int]]] = field(default_factory=list)


@dataclass
class Stream:
    """A job's walk, one request at a time at its pace: kind, owner (a bisect's repository,
    the report's 0, a bump run's day), its items, the head every step sends first, how far
    it is, its requests."""

    kind: str
    owner: int
    items: list
    head: list[Segment]
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    index: int = -1  # in ``Jobs.streams``


class Jobs(World):
    """The world (``World``) and the CI machinery's requests."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.failures: list[Failure] = []
        self.streams: list[Stream] = []
        self.branches = self._branches()
        self.deps = self._deps()
        for d in (0, 1):
            self.at(d * DAY + DEPBUMP[0] * HOUR + rng.uniform(0, 10) * MINUTE, "depbump", d)
            for b, branch in enumerate(self.branches):
                for h in branch.hours:
                    self.at(d * DAY + h * HOUR, "nightly", b)
        self.at(WEEKLY[0] * DAY + WEEKLY[1] * HOUR, "weekly", 0)
        self.daily(BISECTS, "bisect", None)
        if self.storm:
            when = self.storm.start + rng.uniform(*STORM_BISECT[0]) * MINUTE
            self.at(when, "storm_bisect", rng.randint(*STORM_BISECT[1]))

    def _branches(self) -> list[Branch]:
        """Release branches of the most popular repositories, each at fixed UTC hours (the
        newest one also at midday), with 3..8 build-config files."""
        rng = self.rng
        n = rng.randint(*BRANCHES[self.layout])
        big = sorted(range(len(self.repos)), key=lambda e: -self.repos[e].weight)
        hours = rng.sample(NIGHTLY_HOURS, n)
        out = []
        for k in range(n):
            files = [self.new(clipped_length(rng, *CONFIGS[1]))
                     for _ in range(rng.randint(*CONFIGS[0]))]
            at = [hours[k], rng.uniform(*MIDDAY)] if k == n - 1 else [hours[k]]
            out.append(Branch(big[k % len(big)], at, Versioned([(-1e18, files)])))
        return out

    def _deps(self) -> list[list[tuple[int, int]]]:
        """Each dependency's users as (repository, manifest)."""
        rng, out = self.rng, []
        pairs = [(r, m) for r, repo in enumerate(self.repos) for m in range(len(repo.manifests))]
        weights = [self.repos[r].weight for r, _ in pairs]
        for _ in range(DEPBUMP[2]):
            k = min(len(pairs), clipped_length(rng, *DEP_USERS[self.layout]))
            users: set[tuple[int, int]] = set()
            while len(users) < k:
                users.add(rng.choices(pairs, weights)[0])
            out.append(sorted(users))
        return out

    def triage_prompt(self, pr: int, log: list[Segment], diff: Segment) -> list[Segment]:
        """A triage: system prompt, the repository's guide as it stands, the job's log tail,
        the diff under test, the instruction."""
        repo = self.repos[self.prs[pr].repo]
        return [self.system["triage"], *repo.guide.at(self.now), *log, diff,
                self.cue["triage"]]

    def _on_fail(self, arg: tuple[int, Segment, bool]) -> None:
        """A CI job of PR ``p`` failed: a triage request (a storm's shared log tail and the
        job's own lines, else a log tail of its own); a storm failure may be re-run."""
        p, diff, storm = arg
        rng = self.rng
        if storm:
            if self.now >= self.storm.end:
                return  # the re-run came after the revert: green
            log = [self.storm.log, self.new(clipped_length(rng, *FOOTER))]
        else:
            log = [self.new(clipped_length(rng, *LOG))]
        segs = self.triage_prompt(p, log, diff)
        kind = "storm" if storm else "triage"
        i = self.emit(kind, p, len(self.failures), segs)
        self.failures.append(Failure(p, kind, segs, log, i))
        if storm and rng.random() < RETRY[0]:
            self.at(self.now + rng.uniform(*RETRY[1]) * MINUTE, "fail", arg)
        self.failed(len(self.failures) - 1)

    def failed(self, n: int) -> None:
        """A hook for the desk (follow-up chats, flaky classification, owner routing)."""

    def _on_nightly(self, b: int) -> None:
        """Branch ``b``'s scheduled run: a backport may have changed one config file; a share
        of its jobs fail within the hour, each a triage over the config files."""
        rng, branch = self.rng, self.branches[b]
        if branch.runs and rng.random() < BACKPORT:
            files = list(branch.configs.current)
            k = rng.randrange(len(files))
            files[k] = self.new(clipped_length(rng, *CONFIGS[1]))
            branch.configs.versions.append((self.now, files))
        branch.runs.append((self.now, []))
        jobs = max(6, round(rng.randint(*MATRIX) * self.scale))
        ends = sorted(rng.uniform(*NIGHTLY_FINISH) for _ in
                      range(max(1, round(jobs * clipped_length_f(rng, BROKEN)))))
        for k, m in enumerate(ends):
            self.at(self.now + m * MINUTE, "nightly_fail", (b, len(branch.runs) - 1, k))

    def _on_nightly_fail(self, arg: tuple[int, int, int]) -> None:
        b, run, k = arg
        branch, rng = self.branches[b], self.rng
        start, sent = branch.runs[run]
        log = [self.new(clipped_length(rng, *NIGHTLY_LOG))]
        segs = [self.system["nightly"], *branch.configs.at(start), *log, self.cue["nightly"]]
        sent.append(self.emit("nightly", b, run, segs))
        self.failures.append(Failure(b, "nightly", segs, log, sent[-1]))
        if k == 0 and rng.random() < NIGHTLY_BISECT[0]:
            when = self.now + rng.uniform(*NIGHTLY_BISECT[1]) * MINUTE
            self.at(when, "walk", ("bisect", branch.repo, log,
                                   rng.randint(*NIGHTLY_BISECT[2])))

    def _on_bisect(self, _: object) -> None:
        """A developer bisects a recent triaged failure's log over main's commits."""
        recent = [f for f in self.failures[-50:] if f.kind == "triage"]
        if recent:
            f = self.rng.choice(recent)
            n = clipped_length(self.rng, *RANGE)
            self._on_walk(("bisect", self.prs[f.owner].repo, f.log, n))

    def _on_storm_bisect(self, n: int) -> None:
        self._on_walk(("bisect", self.storm.repo, [self.storm.log], n))

    def _on_walk(self, arg: tuple[str, int, list[Segment], int]) -> None:
        """A bisect: the head (system prompt, the failure's log) then each commit's diff."""
        kind, r, log, n = arg
        self.start(Stream(kind, r, self.last_commits(r, n), [self.system["bisect"], *log]))

    def _on_weekly(self, _: object) -> None:
        """The weekly flaky report: the most flaky tests, repository by repository."""
        n = max(20, round(WEEKLY[2] * self.scale))
        top = sorted(range(len(self.tests)), key=lambda t: -self.tests[t].weight)[:n]
        top.sort(key=lambda t: (self.tests[t].repo, -self.tests[t].weight))
        self.start(Stream("weekly", 0, top, [self.system["weekly"]]))

    def _on_depbump(self, day: int) -> None:
        """The bump bot's run: popular dependencies (Zipf), each over the manifests using it."""
        rng = self.rng
        k = max(3, round(rng.randint(*DEPBUMP[1]) * self.scale))
        w = [(d + 1) ** -DEPBUMP[3] for d in range(DEPBUMP[2])]
        deps: list[int] = []
        while len(deps) < k:
            d = rng.choices(range(DEPBUMP[2]), w)[0]
            deps += [] if d in deps else [d]
        items = [(d, u, notes) for d in deps
                 for notes in [self.new(clipped_length(rng, *CHANGELOG))] for u in self.deps[d]]
        self.start(Stream("depbump", day, items, [self.system["depbump"]]))

    def start(self, s: Stream) -> None:
        s.index = len(self.streams)
        self.streams.append(s)
        self.at(self.now, "stream", s)

    def step_prompt(self, s: Stream, item) -> list[Segment]:
        """A stream's step: its head, then the item (a commit's diff; a test's header and
        history; a release's notes, the manifest as it stands, the lockfile diff)."""
        if s.kind == "bisect":
            return [*s.head, item, self.cue["bisect"]]
        if s.kind == "weekly":
            return [*s.head, self.tests[item].header, *self.history(item), self.cue["weekly"]]
        d, (r, m), notes = item
        manifest = self.repos[r].manifests[m]
        segs = [*s.head, notes, *manifest.at(self.now),
                self.new(clipped_length(self.rng, *LOCKDIFF)), self.cue["depbump"]]
        manifest.versions.append((self.now, [self.new(manifest.current[0][1])]))
        return segs

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item, after the last one's reading and writing."""
        if s.pos >= len(s.items):
            return
        segs = self.step_prompt(s, s.items[s.pos])
        s.sent.append(self.emit(s.kind, s.index, s.pos, segs))
        s.pos += 1
        out = clipped_length(self.rng, *OUTPUT[s.kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        self.at(self.now + work * self.rng.uniform(0.8, 1.25), "stream", s)


def clipped_length_f(rng: random.Random, spec: tuple) -> float:
    """``clipped_length`` without the rounding (a share)."""
    median, sigma, lo, hi = spec
    return max(lo, min(hi, rng.lognormvariate(0.0, sigma) * median))
