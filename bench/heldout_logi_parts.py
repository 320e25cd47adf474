"""bench.heldout's ``logistics_dispatch`` shape, its world: a carrier's regions (a live
dispatch board each, whose rows change every few minutes, an exception policy, a road and
constraints text), its depots and the shipments the replica is asked about (a header, then
the tracking scans as they arrive). The event clock and the generator's base that sends
requests. See bench/heldout_logistics_dispatch.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the trace ends at the second midnight
REGIONS = 8
REGION_WEIGHT = 0.9  # Zipf exponent of the regions' volumes (by a random rank)
BOARD_HEAD = (2000, 0.3, 1000, 4000)  # tokens of a board's fixed part (depots, lanes, cutoffs)
BOARD_ROWS = (6, 11)  # row groups of a board's live part (one per lane group)
BOARD_ROW = (450, 0.4, 150, 1200)  # tokens of a row group
TICK = (120.0, 360.0)  # seconds between a region's board snapshots (by region)
CHANGE = (0.3, 0.08)  # chance a row group changes in a snapshot: 05..22, at night
POLICY = (900, 0.3, 400, 2000)  # tokens of a region's exception policy
ROADS = (3000, 0.35, 1500, 6000)  # tokens of a region's roads and constraints text
DEPOTS = 80  # depots at scale 1.0 (at least 2 a region)
PROFILE = (1200, 0.3, 600, 2500)  # tokens of a depot's profile (docks, fleet, hours)
HEADER = (260, 0.3, 120, 600)  # tokens of a shipment's header (parties, service, pieces)
SCAN = (45, 0.3, 20, 120)  # tokens of a tracking scan
SCAN_GAP = (3 * HOUR, 0.8, 10 * MINUTE, 20 * HOUR)  # between two scans (median, sigma, lo, hi)
AGE = (0.0, 3 * DAY)  # how long before it is first asked about a shipment was picked up
TRANSIT = 5 * DAY  # scans are drawn until this long after pickup
EXCEPTION_SCAN = (60, 0.3, 30, 150)  # tokens of an exception scan (delay, address, damage)


@dataclass
class Shipment:
    """A shipment: its region, header and tracking scans as (time, scan), in time order; an
    exception's scan is inserted when it happens."""

    region: int
    header: Segment
    scans: list[tuple[float, Segment]]

    def history(self, t: float) -> list[Segment]:
        """The tracking record as it stood at ``t``: the header, then every scan up to t."""
        k = bisect.bisect_right(self.scans, (t, (float("inf"), 0)))
        return [self.header, *(s for _, s in self.scans[:k])]

    def scan(self, t: float, seg: Segment) -> None:
        bisect.insort(self.scans, (t, seg))


@dataclass
class Region:
    """A region: its volume weight, live board (head, then row groups, as versions), exception
    policy, roads text (sections), depots and the shipments asked about so far."""

    weight: float
    head: Segment
    board: Versioned
    policy: Segment
    roads: list[Segment]
    tick: float
    depots: list[int] = field(default_factory=list)
    shipments: list[int] = field(default_factory=list)


def sections(rng: random.Random, new: Callable, total: int, size: int = 600) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``size`` tokens."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


def make_region(rng: random.Random, new: Callable, weight: float) -> Region:
    rows = [new(clipped_length(rng, *BOARD_ROW)) for _ in range(rng.randint(*BOARD_ROWS))]
    return Region(weight, new(clipped_length(rng, *BOARD_HEAD)), Versioned([(-1e18, rows)]),
                  new(clipped_length(rng, *POLICY)),
                  sections(rng, new, clipped_length(rng, *ROADS)), rng.uniform(*TICK))


def busy(t: float) -> bool:
    """Whether ``t`` falls in the day's busy hours (05..22)."""
    return 5 * HOUR <= t % DAY < 22 * HOUR


class Network(ClockedState):
    """The regions, depots and shipments on the event clock; ``emit`` sends a request.
    bench.heldout_logi_jobs.Operations builds on it (through the desk)."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        ranks = rng.sample(range(1, REGIONS + 1), REGIONS)
        self.regions = [make_region(rng, self.new, r ** -REGION_WEIGHT) for r in ranks]
        self.depots: list[tuple[int, Segment]] = []  # (region, profile) in the walk's order
        n = max(2 * REGIONS, round(DEPOTS * scale))
        counts = [2] * REGIONS
        for r in rng.choices(range(REGIONS), [g.weight for g in self.regions], k=n - 2 * REGIONS):
            counts[r] += 1
        for r, region in enumerate(self.regions):
            for _ in range(counts[r]):
                region.depots.append(len(self.depots))
                self.depots.append((r, self.new(clipped_length(rng, *PROFILE))))
        self.shipments: list[Shipment] = []
        self.snapshots: list[tuple[float, int, int]] = []  # (time, region, first changed row)
        for r, region in enumerate(self.regions):
            self.at(rng.uniform(0, region.tick), "tick", r)

    def region_by_volume(self) -> int:
        return self.rng.choices(range(REGIONS), [g.weight for g in self.regions])[0]

    def daily(self, name: str, per_day: float, hours: tuple[float, ...], first: int) -> None:
        """Schedule ``per_day`` x scale (x 0.8..1.2, at least 1) events ``name`` on each day,
        their hours drawn by ``hours`` (weights from hour ``first`` on)."""
        rng = self.rng
        for day in (0.0, DAY):
            for _ in range(max(1, round(per_day * self.scale * rng.uniform(0.8, 1.2)))):
                h = rng.choices(range(first, first + len(hours)), hours)[0]
                self.at(day + (h + rng.random()) * HOUR, name, None)

    def _on_tick(self, r: int) -> None:
        """A new snapshot of region ``r``'s board: each row group is re-rendered (new, its
        length drawn again) with CHANGE's chance (a load assigned, an ETA moved); every row
        from the first change on is new."""
        region, rng = self.regions[r], self.rng
        rows = list(region.board.current)
        p = CHANGE[0] if busy(self.now) else CHANGE[1]
        changed = [k for k in range(len(rows)) if rng.random() < p]
        for k in changed:
            rows[k] = self.new(clipped_length(rng, *BOARD_ROW))
        if changed:
            region.board.versions.append((self.now, rows))
            self.snapshots.append((self.now, r, changed[0]))
        self.at(self.now + region.tick * rng.uniform(0.9, 1.1), "tick", r)

    def new_shipment(self, r: int) -> int:
        """A shipment of region ``r`` first asked about now: picked up 0..3 days ago, its scans
        drawn from then until TRANSIT later; its id."""
        rng = self.rng
        t = self.now - rng.uniform(*AGE)
        scans, end = [], t + TRANSIT
        while t < end:
            scans.append((t, self.new(clipped_length(rng, *SCAN))))
            t += clipped_length(rng, *SCAN_GAP)
        self.shipments.append(Shipment(r, self.new(clipped_length(rng, *HEADER)), scans))
        self.regions[r].shipments.append(len(self.shipments) - 1)
        return len(self.shipments) - 1

    def except_(self, s: int) -> list[Segment]:
        """An exception scan on shipment ``s`` now; its tracking record as it stands."""
        self.shipments[s].scan(self.now, self.new(clipped_length(self.rng, *EXCEPTION_SCAN)))
        return self.shipments[s].history(self.now)
