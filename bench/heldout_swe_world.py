"""bench.heldout's ``swe_agent`` shape, its world: one company's engineering org as one replica
of its coding-agent service sees it over a working day. The agent framework (a system prompt
and tool definitions), the repositories (a README, a repo map cut into sections per file
group, in a monorepo a top-level map and one map per package, and the commit line), merges to
main that rewrite map sections and move the commit, CI pipelines that fail now and then, the
clock and the engineers' hours. See bench/heldout_swe_agent.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import sections

HOUR, MINUTE = 3600.0, 60.0
END = 24 * HOUR  # Monday 00:00 to Tuesday 00:00, one site, one clock
PAST = -1e18  # "before the trace"
# how busy the engineers are in each hour of the day (08..19, a lunch dip)
WORK = (0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.03, 0.15, 0.6, 1.0, 1.0, 0.9, 0.5, 0.8, 1.0,
        1.0, 0.9, 0.7, 0.4, 0.2, 0.1, 0.06, 0.03, 0.02)
MAP_SECTION = 600  # tokens of a repo map's section (a directory's files and their symbols)
COMMIT = 30  # the environment's commit line (sha, branch, date) after the repo map
TOP_EDIT, README_EDIT = 0.05, 0.03  # odds a merge also changes the top-level map, the README
FILES = (1, 3)  # map sections a merge rewrites
CI_DELAY = (8 * MINUTE, 40 * MINUTE)  # a merge's pipeline fails this long after the merge
CI_JOBS = (1, 5)  # failing jobs of a pipeline, one agent run each
NIGHTLY_AT = (1.5, 2.5)  # hours: the nightly pipelines fail (or pass) then


@dataclass(frozen=True)
class Layout:
    """How the seed's org works: repos and packages per repo, README, top-level map (0: none)
    and package map tokens (median, sigma, lo, hi), Zipf exponent of where work lands, the
    framework's system prompt and tool definitions, attempts per issue ((k, weight) pairs),
    scripted setup steps shared by the attempts, the compaction threshold and the steps kept
    after it, issues and merges a day (x scale), odds a merge's pipeline fails, and the
    nightly pipeline (odds a repo's fails, failing jobs lo..hi)."""

    name: str
    repos: tuple[int, int]
    packages: tuple[int, int]
    readme: tuple
    top: int
    pmap: tuple
    zipf: float
    system: int
    tools: int
    k: tuple[tuple[int, float], ...]
    setup: tuple[int, int]
    compact: int
    keep: int
    issues: float
    merges: float
    ci_fail: float
    nightly: tuple[float, int, int]


LAYOUTS = (
    Layout("monorepo", (1, 1), (8, 14), (2500, 0.3, 1500, 4000), 5000,
           (4500, 0.5, 1500, 14000), 0.8, 3200, 6800, ((1, 0.7), (2, 0.3)), (0, 0), 80000,
           2, 20.0, 120.0, 0.05, (1.0, 2, 6)),
    Layout("polyrepo", (12, 20), (1, 1), (900, 0.5, 300, 3000), 0,
           (3500, 0.6, 1000, 12000), 1.0, 1200, 2300, ((4, 1.0),), (0, 0), 32000, 3, 8.0,
           40.0, 0.15, (0.15, 1, 3)),
    Layout("platform", (4, 6), (1, 1), (1600, 0.4, 600, 4000), 0, (9000, 0.5, 3000, 20000),
           0.9, 2200, 4500, ((1, 0.5), (2, 0.5)), (0, 0), 64000, 2, 14.0, 60.0, 0.1,
           (0.4, 1, 4)),
    Layout("sampling", (3, 4), (1, 1), (1200, 0.4, 500, 3000), 0, (7000, 0.5, 2500, 16000),
           0.9, 4000, 8000, ((4, 0.5), (8, 0.5)), (2, 4), 48000, 2, 5.0, 30.0, 0.1,
           (0.3, 1, 3)))


@dataclass
class Repo:
    """A repository: its README, top-level map (None: no packages above it), one
    map per package and the packages' popularity, the commit line, all versioned, and its
    merges as (when, package, first map section rewritten, the top or README changed)."""

    readme: Versioned
    top: Versioned | None
    maps: list[Versioned]
    weights: list[float]
    commit: Versioned
    merges: list[tuple[float, int, int, bool]] = field(default_factory=list)


def zipf_weights(rng: random.Random, n: int, s: float) -> list[float]:
    """Zipf(``s``) weights for ``n`` items by a random rank."""
    return [r ** -s for r in rng.sample(range(1, n + 1), n)]


def work_times(rng: random.Random, per_day: float) -> list[float]:
    """About ``per_day`` times over the day by the engineers' hours (Poisson per hour)."""
    total, out = sum(WORK), []
    for h in range(24):
        out += [(h + rng.random()) * HOUR for _ in range(poisson(rng, per_day * WORK[h] / total))]
    return out


def day_times(rng: random.Random, n: int) -> list[float]:
    """``n`` times over the day by the engineers' hours."""
    return [(h + rng.random()) * HOUR for h in rng.choices(range(24), WORK, k=n)]


class World(ClockedState):
    """The org on the clock. bench.heldout_swe_runs.Runs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, 0, scale)
        self.layout, new = layout, self.new
        self.system, self.tools = new(layout.system), new(layout.tools)
        self.repos = [self.repo() for _ in range(rng.randint(*layout.repos))]
        self.repo_weights = zipf_weights(rng, len(self.repos), layout.zipf)
        self.pipelines: list[tuple[float, int, int, float, int]] = []  # (when, repo, package,
        # commit time, jobs) of each failed pipeline, nightly ones included
        for t in work_times(rng, max(2.0, layout.merges * scale)):
            self.at(t, "merge", self.a_repo())
        self.at(rng.uniform(*NIGHTLY_AT) * HOUR, "nightly", None)

    def repo(self) -> Repo:
        """A repository of the layout: its README, maps and popularity."""
        rng, lay, new = self.rng, self.layout, self.new
        n = rng.randint(*lay.packages)
        top = Versioned([(PAST, sections(new, lay.top, MAP_SECTION))]) if lay.top else None
        maps = [Versioned([(PAST, sections(new, clipped_length(rng, *lay.pmap), MAP_SECTION))])
                for _ in range(n)]
        return Repo(Versioned([(PAST, [new(clipped_length(rng, *lay.readme))])]), top,
                    maps, zipf_weights(rng, n, lay.zipf), Versioned([(PAST, [new(COMMIT)])]))

    def a_repo(self) -> int:
        """A repository by where the org's work lands (Zipf by a random rank)."""
        return self.rng.choices(range(len(self.repos)), self.repo_weights)[0]

    def a_package(self, r: int) -> int:
        """A package of repo ``r`` by its popularity (the only one outside a monorepo)."""
        repo = self.repos[r]
        return self.rng.choices(range(len(repo.maps)), repo.weights)[0]

    def ctx(self, r: int, p: int, t: float) -> list[Segment]:
        """What an agent sees of repo ``r``'s package ``p`` checked out at time ``t``: the
        README, the top-level map (monorepo), the package's map, the commit line."""
        repo = self.repos[r]
        top = repo.top.at(t) if repo.top else []
        # NOTE(commit-last): the commit line goes after the maps, as an environment block
        # that lists the checkout last; a merge then leaves the README and the untouched
        # packages' maps shared, and only the rewritten sections and what follows are new
        return [*repo.readme.at(t), *top, *repo.maps[p].at(t), *repo.commit.at(t)]

    def _on_merge(self, r: int) -> None:
        """A PR merges into repo ``r``: 1..3 sections of a package's map rewritten (now and
        then the top-level map or the README too), a new commit; its pipeline may fail."""
        rng, repo, new = self.rng, self.repos[r], self.new
        p = self.a_package(r)
        secs = list(repo.maps[p].current)
        changed = rng.sample(range(len(secs)), min(len(secs), rng.randint(*FILES)))
        for k in changed:
            secs[k] = new(max(60, round(secs[k][1] * rng.uniform(0.85, 1.2))))
        repo.maps[p].versions.append((self.now, secs))
        wide = False
        for text, odds in ((repo.top, TOP_EDIT), (repo.readme, README_EDIT)):
            if text and rng.random() < odds:
                k = rng.randrange(len(text.current))
                text.versions.append((self.now, [*text.current[:k], new(text.current[k][1]),
                                                 *text.current[k + 1:]]))
                wide = True
        repo.commit.versions.append((self.now, [new(COMMIT)]))
        repo.merges.append((self.now, p, min(changed), wide))
        if rng.random() < self.layout.ci_fail:
            jobs = rng.randint(*CI_JOBS)
            self.at(self.now + rng.uniform(*CI_DELAY), "pipeline", (r, p, self.now, jobs))

    def _on_nightly(self, _) -> None:
        """The nightly pipelines: each repo's fails with the layout's odds (at least one
        fails), its failing jobs scaled (at least one), each in a package by popularity
        (package -1)."""
        odds, lo, hi = self.layout.nightly
        failed = [r for r in range(len(self.repos)) if self.rng.random() < odds]
        for r in failed or [self.a_repo()]:
            jobs = max(1, round(self.rng.randint(lo, hi) * min(1.0, 2 * self.scale)))
            self._on_pipeline((r, -1, self.now, jobs))

    def _on_pipeline(self, arg: tuple[int, int, float, int]) -> None:
        """A failed pipeline; the runs (bench.heldout_swe_desk) start its agent runs."""
        self.pipelines.append((self.now, *arg))
