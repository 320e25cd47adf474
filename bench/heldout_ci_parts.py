"""bench.heldout's ``ci_triage`` shape, its world: a software company's code (one monorepo, or
24..40 repositories of Zipf popularity), each repository's contributing/triage guide (new
versions when the guide template changes mid-trace on some seeds), its ownership file (edited
now and then), its manifests, its main branch's commits, its flaky-test candidates (a header
and a run history that grows as the test keeps running), the developers' pushes from three
sites (each push a new diff of a pull request; some of its CI jobs fail) and, on some seeds, a
broken main branch that fails every push of one repository until the revert. The event clock.
See bench/heldout_ci_triage.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Tuesday 00:00 UTC and ends Thursday 00:00 UTC
SITES = ((-7.0, 0.5), (1.0, 0.32), (5.5, 0.18))  # (UTC offset, share of the developers)
OFFICE = (0.5, 0.9, 1.0, 1.0, 0.7, 0.8, 1.0, 1.0, 0.9, 0.7, 0.4, 0.25, 0.15)  # local 08..20
MONO = 0.5  # seeds whose code is one monorepo (else 24..40 repositories)
REPOS = (24, 40)
GUIDE = {"mono": (4500, 0.3, 2500, 8000), "multi": (2200, 0.5, 800, 5000)}  # tokens
OWNERS = {"mono": (7000, 0.3, 4000, 12000), "multi": (900, 0.6, 200, 3000)}  # tokens
OWNER_EDITS = {"mono": 3.0, "multi": 0.08}  # a day: the monorepo's file, each repository's
MANIFESTS = {"mono": 12, "multi": 1}  # dependency manifests per repository
MANIFEST = (1200, 0.6, 300, 4000)  # tokens of a manifest (package.json, go.mod, ...)
TESTS = 1200  # flaky-test candidates at scale 1.0 (x 0.8..1.2, at least 60)
HEADER = (400, 0.6, 120, 1500)  # tokens of a test's header (name, file, owners, source)
PAST = (900, 0.5, 300, 2500)  # tokens of its 30-day flake summary
RECORD = (26, 0.3, 14, 48)  # tokens of one run's record (commit, job, status, duration)
WINDOW = 50  # run records a history shows (the newest)
RUNS = (2.0, 0.8, 0.3, 8.0)  # runs an hour of a test (lognormal median, sigma, clip)
DIFF = (900, 1.0, 60, 12000)  # tokens of a push's diff
PUSHES = 1100  # pushes a day at scale 1.0 (x 0.85..1.15 per seed)
UPDATE = 0.4  # pushes to an open pull request of the repository (a new diff of it)
FAILS = ((0, 0.72), (1, 0.2), (2, 0.06), (3, 0.02))  # CI jobs of a push that fail
FINISH = (4.0, 45.0)  # minutes from a push to a job's end
MERGE = (0.5, (10.0, 60.0))  # green pushes merged to main, minutes after the push
GUIDE_CHANGE = (0.5, (0.25, 0.75), HOUR)  # seeds, when (share of END), sync spread (s)
STORM = (0.5, (1.0, 3.0), (14.0, 20.0), (2500, 0.4, 1200, 6000))  # seeds, hours it lasts,
# UTC hours it starts, tokens of the failing test's shared log tail


@dataclass
class Repo:
    """A repository: its popularity, guide and ownership file (versions), manifests, the
    commits on main as (time, diff) in order, its flaky-test candidates and open PRs."""

    weight: float
    guide: Versioned
    owners: Versioned
    manifests: list[Versioned]
    commits: list[tuple[float, Segment]] = field(default_factory=list)
    tests: list[int] = field(default_factory=list)
    open: list[int] = field(default_factory=list)


@dataclass
class Test:
    """A flaky-test candidate: its repository, flakiness weight, header, 30-day summary, the
    run records since the clock's start, runs an hour and when the records were brought up to
    date."""

    repo: int
    weight: float
    header: Segment
    past: Segment
    rate: float
    records: list[Segment] = field(default_factory=list)
    seen: float = 0.0


@dataclass
class PR:
    """A pull request: its repository, the developer's site and each push's diff."""

    repo: int
    site: int
    diffs: list[Segment] = field(default_factory=list)


@dataclass
class Storm:
    """A broken main branch: the repository, from when to the revert, the shared log tail."""

    repo: int
    start: float
    end: float
    log: Segment


def count(rng: random.Random, mean: float) -> int:
    """A Poisson count; a normal one with the same mean and variance past a mean of 50."""
    if mean < 50:
        return poisson(rng, mean)
    return max(0, round(rng.gauss(mean, math.sqrt(mean))))


def office_time(rng: random.Random, day: int, tz: float) -> float:
    """A moment of local ``day``'s office hours (by OFFICE) on the clock (may be off it)."""
    hour = rng.choices(range(8, 8 + len(OFFICE)), OFFICE)[0] + rng.random()
    return (day * 24 + hour - tz) * HOUR


class World(ClockedState):
    """The repositories, tests, pull requests and pushes on the clock; ``emit`` sends a
    request. bench.heldout_ci_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.layout = "mono" if rng.random() < MONO else "multi"
        n = 1 if self.layout == "mono" else rng.randint(*REPOS)
        self.repos = [self._repo(r ** -1.0) for r in rng.sample(range(1, n + 1), n)]
        self.guide_change = self._plan_guide_change()  # the structure before any draw
        self.storm = self._plan_storm()  # that depends on the scale
        self.tests: list[Test] = []
        for _ in range(max(60, round(TESTS * scale * rng.uniform(0.8, 1.2)))):
            self._test(self.repo_by_weight())
        self.prs: list[PR] = []
        for e in range(len(self.repos)):
            self.daily(OWNER_EDITS[self.layout] / scale, "owners_edit", e)  # not scaled
        rate = PUSHES * rng.uniform(0.85, 1.15)
        for s, (tz, share) in enumerate(SITES):
            for d in (-1, 0, 1, 2):
                for _ in range(count(rng, rate * share * scale)):
                    self.at_if(office_time(rng, d, tz), "push", s)

    def _repo(self, weight: float) -> Repo:
        rng, new, lay = self.rng, self.new, self.layout
        return Repo(weight, Versioned([(-1e18, [new(clipped_length(rng, *GUIDE[lay]))])]),
                    Versioned([(-1e18, [new(clipped_length(rng, *OWNERS[lay]))])]),
                    [Versioned([(-1e18, [new(clipped_length(rng, *MANIFEST))])])
                     for _ in range(MANIFESTS[lay])])

    def _test(self, r: int) -> None:
        rng, new = self.rng, self.new
        self.tests.append(Test(r, rng.paretovariate(1.2), new(clipped_length(rng, *HEADER)),
                               new(clipped_length(rng, *PAST)), clipped_length(rng, *RUNS)))
        self.repos[r].tests.append(len(self.tests) - 1)

    def _plan_guide_change(self) -> float | None:
        """When the guide template changes (None on seeds where it does not)."""
        seeds, (lo, hi), spread = GUIDE_CHANGE
        if self.rng.random() >= seeds:
            return None
        t = self.rng.uniform(lo, hi) * END
        for e, repo in enumerate(self.repos):
            when = t + (self.rng.uniform(0, spread) if e else 0.0)
            repo.guide.versions.append(
                (when, [self.new(clipped_length(self.rng, *GUIDE[self.layout]))]))
        return t

    def _plan_storm(self) -> Storm | None:
        """A broken main branch of the most popular repository (None on seeds without one)."""
        seeds, hours, starts, log = STORM
        rng = self.rng
        if rng.random() >= seeds:
            return None
        big = max(range(len(self.repos)), key=lambda e: self.repos[e].weight)
        start = rng.randint(0, 1) * DAY + rng.uniform(*starts) * HOUR
        return Storm(big, start, start + rng.uniform(*hours) * HOUR,
                     self.new(clipped_length(rng, *log)))

    def at_if(self, when: float, name: str, payload: object) -> None:
        """Schedule ``name`` if ``when`` falls on the clock (0..END)."""
        if 0 <= when < self.END:
            self.at(when, name, payload)

    def daily(self, rate: float, name: str, payload: object) -> None:
        """``rate`` x scale events a day (Poisson) at the sites' office hours."""
        for d in (-1, 0, 1, 2):
            for _ in range(poisson(self.rng, rate * self.scale)):
                self.at_if(office_time(self.rng, d, pick(self.rng, SITES)), name, payload)

    def repo_by_weight(self) -> int:
        return self.rng.choices(range(len(self.repos)), [r.weight for r in self.repos])[0]

    def storming(self, r: int) -> bool:
        """Whether repository ``r``'s main is broken now."""
        s = self.storm
        return s is not None and s.repo == r and s.start <= self.now < s.end

    def _on_owners_edit(self, r: int) -> None:
        """Someone edits repository ``r``'s ownership file (a new version)."""
        lay = self.layout
        self.repos[r].owners.versions.append(
            (self.now, [self.new(clipped_length(self.rng, *OWNERS[lay]))]))

    def _on_push(self, site: int) -> None:
        """A developer pushes: a new diff of an open PR or of a new one; some CI jobs fail
        (and, while its main is broken, the repository's integration job always does); a
        green push may merge onto main."""
        rng, r = self.rng, self.repo_by_weight()
        repo = self.repos[r]
        if repo.open and rng.random() < UPDATE:
            p = rng.choice(repo.open)
        else:
            self.prs.append(PR(r, site))
            p = len(self.prs) - 1
            repo.open.append(p)
        diff = self.new(clipped_length(rng, *DIFF))
        self.prs[p].diffs.append(diff)
        fails = pick(rng, FAILS)
        for _ in range(fails):
            self.at(self.now + rng.uniform(*FINISH) * MINUTE, "fail", (p, diff, False))
        if self.storming(r):
            self.at(self.now + rng.uniform(*FINISH) * MINUTE, "fail", (p, diff, True))
        elif not fails and rng.random() < MERGE[0]:
            self.at(self.now + rng.uniform(*MERGE[1]) * MINUTE, "merge", p)

    def _on_merge(self, p: int) -> None:
        """PR ``p`` merges: its last diff is main's newest commit; it is no longer open."""
        pr = self.prs[p]
        repo = self.repos[pr.repo]
        repo.commits.append((self.now, pr.diffs[-1]))
        if p in repo.open:
            repo.open.remove(p)

    def last_commits(self, r: int, n: int) -> list[Segment]:
        """The newest ``n`` commits on repository ``r``'s main, oldest first (commits from
        before the clock's start are made up as needed)."""
        repo = self.repos[r]
        while len(repo.commits) < n:
            repo.commits.insert(0, (-1e18, self.new(clipped_length(self.rng, *DIFF))))
        return [d for _, d in repo.commits[-n:]]

    def history(self, t: int) -> list[Segment]:
        """Test ``t``'s run history as a flaky tool reads it now: the 30-day summary and the
        newest WINDOW run records (records of the runs since the last look added first)."""
        test = self.tests[t]
        runs = min(200, count(self.rng, test.rate * (self.now - test.seen) / HOUR))
        test.records += [self.new(clipped_length(self.rng, *RECORD)) for _ in range(runs)]
        test.seen = self.now
        return [test.past, *test.records[-WINDOW:]]
