"""bench.heldout's ``manufacturing_qc`` shape, its world: the plants (each in a time zone,
running three shifts), their production lines (stations with work instructions, SPC
characteristics with reaction plans, the products each line runs, the lots it completes),
the products' controlled documents (inspection plan, control plan, PFMEA), each plant's
quality procedures, operator handbook, supplier quality agreement and suppliers, the audit
standard's clauses, and document control revising these now and then. The event clock and
the local-time calendar. See bench/heldout_manufacturing_qc.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import hour_of, local, sections, utc

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Monday 00:00 UTC and ends Wednesday 00:00 UTC
SCENARIOS = ("normal", "audit", "recall")  # seed 1, 2, 3, 4, ... -> normal, audit, recall, ...
ZONES = (-6.0, -5.0, 1.0, 2.0, 5.5, 8.0)  # plants' UTC offsets, a sample of 3..5 of them
PLANTS = (3, 5)
LINES = (6, 16)  # production lines a plant, x scale (at least 1)
LINE_WEIGHT = (0.6, 1.6)  # a line's staffing and volume, uniform
PROFILE = (600, 0.3, 300, 1000)  # tokens of a line's profile (equipment, crew, takt)
STATIONS = (5, 14)  # stations a line, each with a work instruction
WI = (1400, 0.5, 500, 4000)  # tokens of a work instruction
CHARACTERISTICS = (6, 20)  # SPC characteristics a line, each with its reaction plan
REACTION = (350, 0.4, 150, 800)  # tokens of a characteristic's control-plan row and reaction
LOTS = (4, 16)  # lots a line completes a day
MAIN_PRODUCT = 0.75  # of a line's lots are its main product, the rest its others
SPEC = (2400, 0.4, 1000, 6000)  # tokens of a product's inspection plan and specification
CONTROL_PLAN = ((4000, 0.4, 1800, 9000), 600)  # tokens of a control plan, its sections
PFMEA = ((9000, 0.4, 4000, 20000), 800)  # tokens of a process FMEA, its sections
HANDBOOK = (1500, 0.3, 800, 3000)  # tokens of a plant's operator handbook (safety, rules)
PROCEDURES = (20, 35)  # quality procedures a plant, Zipf(1) popularity by a random rank
PROCEDURE = ((3500, 0.5, 1200, 10000), 600)  # tokens of a procedure, its sections
SQA = ((4000, 0.3, 2500, 7000), 700)  # tokens of a plant's supplier quality agreement
SUPPLIERS = (12, 30)  # suppliers a plant, Zipf(1.1) by a random rank
SCORECARD = (600, 0.4, 250, 1400)  # tokens of a supplier's scorecard, refreshed each local day
CLAUSES = 14  # clauses of the quality-management standard an audit walks
CLAUSE = (700, 0.4, 300, 1500)  # tokens of a clause's text and checklist
BLOCK_MIN = 16  # tokens of the shortest revised section
WI_REVISIONS = 0.5  # work-instruction revisions a line a day (local 08..17)
ECN = (0.1, (2, 5))  # revisions that are an engineering change: stations, and the spec too
PROCEDURE_REVISIONS = 0.8  # procedure revisions (one section) a plant a day (local 07..17)
SHIFTS = (6.0, 14.0, 22.0)  # local shift changes
# how busy the floor is in each local hour: day shift, swing shift, a lighter night shift
SHIFT_HOURS = (0.5, 0.5, 0.45, 0.4, 0.4, 0.5, 0.8, 1.0, 1.0, 1.0, 0.9, 1.0, 1.0, 0.9,
               0.7, 0.9, 0.9, 0.85, 0.8, 0.85, 0.8, 0.7, 0.5, 0.5)
OFFICE_HOURS = (0.5, 1.0, 1.0, 1.0, 0.8, 0.6, 0.9, 1.0, 0.9, 0.7, 0.4)  # local 07..17


@dataclass
class Product:
    """A product (part number) of a plant: its inspection plan and spec (one section), control
    plan and PFMEA (sections), each as versions."""

    plant: int
    spec: Versioned
    cp: Versioned
    pfmea: Versioned


@dataclass
class Lot:
    """A lot: its line, product, completion time, batch record (traveler), inspection results
    and whether it failed inspection."""

    line: int
    product: int
    time: float
    record: Segment
    results: Segment
    failed: bool


@dataclass
class Line:
    """A production line: its plant, weight, profile, products (the main one first), stations'
    work instructions (versions), how often each station is asked about, its SPC
    characteristics' reaction plans, lots a day and its lots (ids, in time order)."""

    plant: int
    weight: float
    profile: Segment
    products: list[int]
    stations: list[Versioned]
    station_weight: list[float]
    reactions: list[Segment]
    lots_a_day: int
    lots: list[int] = field(default_factory=list)


@dataclass
class Plant:
    """A plant: its UTC offset, operator handbook, supplier quality agreement (sections), quality
    procedures (versions of sections) and their popularity, suppliers, lines and products."""

    tz: float
    handbook: Segment
    sqa: list[Segment]
    procedures: list[Versioned]
    procedure_weight: list[float]
    suppliers: list[int] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    products: list[int] = field(default_factory=list)


class World(ClockedState):
    """Plants, lines, products, documents and suppliers, document control's revisions on the
    clock (``revisions``: (time, what, key, section) in time order); ``emit`` sends a
    request.
    bench.heldout_mfg_floor.Floor builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, 0, scale)
        self.scenario = scenario
        self.plants: list[Plant] = []
        self.lines: list[Line] = []
        self.products: list[Product] = []
        self.lots: list[Lot] = []
        self.supplier_plant: list[int] = []
        self.supplier_weight: list[float] = []
        self.cards: dict[tuple[int, int], Segment] = {}
        self.clauses = [self.new(clipped_length(rng, *CLAUSE)) for _ in range(CLAUSES)]
        self.revisions: list[tuple[float, str, tuple, int]] = []
        for tz in rng.sample(ZONES, rng.randint(*PLANTS)):
            self._plant(tz)
        for p, plant in enumerate(self.plants):
            self.daily(p, PROCEDURE_REVISIONS, OFFICE_HOURS, 7, "procrev", p)
            for n in plant.lines:
                self.daily(p, WI_REVISIONS, OFFICE_HOURS[1:], 8, "wirev", n)

    def versioned(self, size: tuple, section: int = 0) -> Versioned:
        """A document from before the trace: one segment, or sections of about ``section``."""
        n = clipped_length(self.rng, *size)
        return Versioned([(-1e18, sections(self.new, n, section) if section else [self.new(n)])])

    def _plant(self, tz: float) -> None:
        rng, p = self.rng, len(self.plants)
        k = rng.randint(*PROCEDURES)
        ranks = rng.sample(range(1, k + 1), k)
        plant = Plant(tz, self.new(clipped_length(rng, *HANDBOOK)), self.versioned(*SQA).current,
                      [self.versioned(*PROCEDURE) for _ in range(k)], [1 / r for r in ranks])
        self.plants.append(plant)
        lines = max(1, round(rng.randint(*LINES) * self.scale))
        for _ in range(max(2, round(lines * 0.6))):
            plant.products.append(len(self.products))
            self.products.append(Product(p, self.versioned(SPEC), self.versioned(*CONTROL_PLAN),
                                         self.versioned(*PFMEA)))
        for _ in range(lines):
            self._line(p)
        k = rng.randint(*SUPPLIERS)
        for r in rng.sample(range(1, k + 1), k):
            plant.suppliers.append(len(self.supplier_plant))
            self.supplier_plant.append(p)
            self.supplier_weight.append(r ** -1.1)

    def _line(self, p: int) -> None:
        rng, plant = self.rng, self.plants[p]
        products = rng.sample(plant.products, min(len(plant.products), rng.randint(1, 3)))
        k = rng.randint(*STATIONS)
        reactions = [self.new(clipped_length(rng, *REACTION))
                     for _ in range(rng.randint(*CHARACTERISTICS))]
        plant.lines.append(len(self.lines))
        self.lines.append(Line(p, rng.uniform(*LINE_WEIGHT),
                               self.new(clipped_length(rng, *PROFILE)), products,
                               [self.versioned(WI) for _ in range(k)],
                               [rng.paretovariate(1.2) for _ in range(k)], reactions,
                               rng.randint(*LOTS)))

    def at_local(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time if it falls on the clock (0..END)."""
        t = utc(day, hour, tz)
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def daily(self, p: int, rate: float, hours: tuple, first: int, name: str,
              payload: object) -> None:
        """Each local day of plant ``p``, ``rate`` events (Poisson) at local hours by
        ``hours`` from ``first``."""
        tz = self.plants[p].tz
        for d in (-1, 0, 1, 2):
            for _ in range(poisson(self.rng, rate)):
                self.at_local(d, hour_of(self.rng, hours, first), tz, name, payload)

    def revise(self, doc: Versioned, what: str, key: tuple, k: int | None = None) -> None:
        """A new version of ``doc`` from now: section ``k`` (a random one if None) rewritten,
        about as long as before; logged in ``revisions`` with the section."""
        cur = list(doc.current)
        k = self.rng.randrange(len(cur)) if k is None else k
        cur[k] = self.new(max(BLOCK_MIN, round(cur[k][1] * self.rng.uniform(0.85, 1.2))))
        doc.versions.append((self.now, cur))
        self.revisions.append((self.now, what, key, k))

    def _on_wirev(self, n: int) -> None:
        """Document control releases a revised work instruction of line ``n`` (a station by
        how often it is asked about); an engineering change revises 2..5 stations and the
        main product's spec at once."""
        rng, line = self.rng, self.lines[n]
        stations = range(len(line.stations))
        if rng.random() < ECN[0]:
            picked = rng.sample(stations, min(len(line.stations), rng.randint(*ECN[1])))
            self.revise(self.products[line.products[0]].spec, "spec", (line.products[0],))
        else:
            picked = rng.choices(stations, line.station_weight)
        for s in picked:
            self.revise(line.stations[s], "wi", (n, s))

    def _on_procrev(self, p: int) -> None:
        """A plant's procedure (by popularity) gets one section revised."""
        plant = self.plants[p]
        k = self.rng.choices(range(len(plant.procedures)), plant.procedure_weight)[0]
        self.revise(plant.procedures[k], "procedure", (p, k))

    def card(self, s: int) -> Segment:
        """Supplier ``s``'s scorecard as refreshed at its plant's last local midnight."""
        day = int(local(self.now, self.plants[self.supplier_plant[s]].tz) // 24)
        if (s, day) not in self.cards:
            self.cards[(s, day)] = self.new(clipped_length(self.rng, *SCORECARD))
        return self.cards[(s, day)]

    def product_of(self, n: int) -> int:
        """The product line ``n`` runs for its next lot: the main one MAIN_PRODUCT of the time."""
        line = self.lines[n]
        if len(line.products) == 1 or self.rng.random() < MAIN_PRODUCT:
            return line.products[0]
        return self.rng.choice(line.products[1:])

    def document(self, ref: tuple) -> Versioned:
        """The controlled document ``ref`` names: (procedure, plant, k), (wi, line, station)
        or (spec / cp / pfmea, product)."""
        if ref[0] == "procedure":
            return self.plants[ref[1]].procedures[ref[2]]
        if ref[0] == "wi":
            return self.lines[ref[1]].stations[ref[2]]
        return getattr(self.products[ref[1]], ref[0])

    def evidence(self, p: int, kind: str | None) -> list[tuple]:
        """Plant ``p``'s documents of ``kind`` (all of them if None)."""
        if kind is None:
            return [r for k in ("procedure", "spec", "cp", "pfmea", "wi")
                    for r in self.evidence(p, k)]
        plant = self.plants[p]
        if kind == "procedure":
            return [("procedure", p, k) for k in range(len(plant.procedures))]
        if kind == "wi":
            return [("wi", n, s) for n in plant.lines for s in range(len(self.lines[n].stations))]
        return [(kind, q) for q in plant.products]
