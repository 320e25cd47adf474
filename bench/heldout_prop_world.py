"""bench.heldout's ``property_mgmt`` shape, its world: a residential property manager's
portfolio (3..4 cities in US time zones, each with its local rules and a lease form whose
versions a lease keeps from its signing; the buildings, each with house rules and amenities,
a marketing text, a maintenance profile and a rent survey; the units and their tenants'
leases, with addenda and the abstract made from them), the portfolio's resident handbook and
the policy updates that rewrite a document from some section on, and the building incidents
whose notices residents see. The event clock and the local calendar. See
bench/heldout_property_mgmt.py's docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_recruit_parts import hour_of, sections, utc

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts at 00:00 UTC of day 0 and ends two days later
WEEKS = ("normal", "move_in", "incident", "month_end")  # seed 1, 2, 3, 4, 5, ...
ZONES = (-7.0, -6.0, -5.0, -4.0)  # Pacific, Mountain, Central, Eastern (daylight time)
BUILDINGS = 64  # at scale 1.0 (x 0.85..1.15, at least 6)
UNITS = (65, 0.9, 8, 600)  # units of a building
VACANT = {"move_in": 0.08}  # units empty at the start (0.05 in the other weeks)
ELEVATOR = 40  # buildings of this many units or more have elevators
HOA = 0.25  # buildings that are condo associations (their board is the owner)
INVESTORS = 20  # other owners at scale 1.0 (at least 2), Zipf(1) by rank
HANDBOOK = (2400, 0.3, 1500, 3500)  # tokens of the portfolio's resident handbook
LOCAL_RULES = (800, 0.4, 400, 1500)  # a city's ordinances (notice periods, fees, deposits)
RULES = (1600, 0.4, 800, 3500)  # a building's house rules and amenities
MARKETING = (1800, 0.35, 1000, 3500)  # a building's marketing text (listings, prospects)
PLANT = (1500, 0.4, 800, 3000)  # a building's maintenance profile (equipment, vendors)
COMPS = (1100, 0.4, 600, 2000)  # a building's rent survey (renewal pricing)
FORM = (10000, 0.2, 7000, 14000)  # a city's lease form
RIDER = (500, 0.3, 300, 800)  # a lease's own terms (parties, unit, rent, dates)
ADDENDUM = (550, 0.5, 250, 1200)  # a pet, parking, roommate or concession addendum
ABSTRACT = (700, 0.3, 400, 1100)  # the abstract made from a lease (residents' prompts)
PROFILE = (260, 0.35, 150, 450)  # a unit's profile (floor plan, appliances)
TEMPLATE = (1100, 0.4, 600, 1800)  # an owner's report template and instructions
SECTION = {"handbook": 400, "rules": 300, "form": 600}  # tokens a section of each
LANGS = ((0, 0.72), (1, 0.24), (2, 0.04))  # tenants' language: English, Spanish, other
AUTOPAY = 0.45
INCIDENTS = {"incident": (4, 6)}  # incidents in a trace (1..2 in the other weeks)
INCIDENT_KINDS = ("water", "elevator", "power", "heat", "leak")
PLANNED = 0.4  # incidents (not leaks) that are planned work, noticed the afternoon before
NOTICE = (450, 0.4, 250, 900)  # tokens of an incident notice
HANDBOOK_UPDATE = 0.6  # traces with a handbook update (local 10..16 at headquarters)
RULE_EDITS = 3.0  # building rule edits a day at scale 1.0 (local 09..17)
FORM_UPDATE = {"move_in": 1.0}  # chance of a lease form revision (0.2 in the other weeks)
# per week, the factor on the daily count of each kind of event it names (else 1.0)
FACTORS = {"normal": {},
           "move_in": {"listing": 4.0, "prospect": 1.6, "apply": 3.5, "signing": 3.0,
                       "ticket": 1.3, "question": 1.5, "tenant": 1.1},
           "incident": {"ticket": 1.6, "tenant": 1.2, "email": 1.3},
           "month_end": {"tenant": 1.1, "email": 1.2, "addendum": 1.3}}
OFFICE = (0.7, 1.0, 1.0, 0.9, 0.6, 0.9, 1.0, 0.9, 0.7)  # office hours 09..17


@dataclass
class City:
    """A city: its UTC offset, local rules, lease form versions and buildings."""

    tz: float
    rules: Segment
    form: Versioned
    buildings: list[int] = field(default_factory=list)
    share: float = 0.0  # of the portfolio's units


@dataclass
class Lease:
    """A tenant's lease: the form version signed, the rider, addenda, the abstract (new each
    time the lease changes), the end of the term (days from the clock's start), autopay and
    the tenant's language."""

    form: list[Segment]
    rider: Segment
    addenda: list[Segment]
    abstract: Versioned
    end: float
    autopay: bool
    lang: int

    def document(self) -> list[Segment]:
        return [*self.form, self.rider, *self.addenda]


@dataclass
class Building:
    """A building: city, owner, units, house rules (versions), marketing text, maintenance
    profile, rent survey (versions) and the incident notice residents see ([] when none)."""

    city: int
    owner: int
    units: list[int]
    rules: Versioned
    marketing: Segment
    plant: Segment
    comps: Versioned
    alert: Versioned


@dataclass
class Unit:
    """A unit: its building, profile, lease (None while vacant) and listing (None when not
    listed: else fact sheet versions, photo captions, generated texts)."""

    building: int
    profile: Segment
    lease: Lease | None
    listing: object = None  # bench.heldout_prop_jobs.Listing


@dataclass
class Incident:
    """A building incident: building, kind, planned, start, end, the quick-reply button
    residents tap, the handbook sections questions about it retrieve, the notices as posted
    and the chats it caused."""

    building: int
    kind: str
    planned: bool
    start: float
    end: float
    button: Segment
    topics: tuple[int, ...]  # the handbook's sections its questions retrieve
    notices: list[tuple[float, Segment]] = field(default_factory=list)
    chats: list[int] = field(default_factory=list)


def revise_from(rng: random.Random, new: Callable, secs: list[Segment], size: int,
                first: int | None = None) -> list[Segment]:
    """``secs`` rewritten from section ``first`` on (drawn when None): the leading sections
    kept, the rest new content of 0.9..1.2 times its tokens."""
    k = first if first is not None else rng.randrange(1, len(secs)) if len(secs) > 1 else 0
    rest = sum(n for _, n in secs[k:])
    return [*secs[:k], *sections(new, max(size // 2, round(rest * rng.uniform(0.9, 1.2))), size)]


class Portfolio(ClockedState):
    """The portfolio on the clock: cities, buildings, units, leases, owners, documents and
    their versions, incidents; ``emit`` sends a request."""

    END = END

    def __init__(self, rng: random.Random, scale: float, week: str) -> None:
        super().__init__(rng, 0, scale)
        self.week = week
        self.handbook = Versioned([(-1e18, self.doc(HANDBOOK, "handbook"))])
        self.rank = rng.sample(range(len(self.handbook.current)), len(self.handbook.current))
        zones = sorted(rng.sample(ZONES, 3 + (rng.random() < 0.5)))
        self.cities = [City(tz, self.new(clipped_length(rng, *LOCAL_RULES)), self._form())
                       for tz in zones]
        self.buildings: list[Building] = []
        self.units: list[Unit] = []
        self.owners: list[tuple[Segment, list[int], bool]] = []  # template, buildings, board
        investors = [self.new(clipped_length(rng, *TEMPLATE))
                     for _ in range(max(2, round(INVESTORS * scale)))]
        self.owners += [(t, [], False) for t in investors]
        n = max(6, round(BUILDINGS * scale * rng.uniform(0.85, 1.15)))
        weights = [rng.uniform(0.5, 1.5) for _ in zones]  # the cities' shares of buildings
        for k in range(n):
            c = k if k < len(zones) else rng.choices(range(len(zones)), weights)[0]
            self._building(c, len(investors))
        total = len(self.units)
        for city in self.cities:
            city.share = sum(len(self.buildings[b].units) for b in city.buildings) / total
        self.incidents: list[Incident] = []
        self._plan_updates()
        self._plan_incidents()

    def doc(self, size: tuple, kind: str) -> list[Segment]:
        """A new document of ``size`` tokens (clipped_length) in sections of its kind."""
        return sections(self.new, clipped_length(self.rng, *size), SECTION[kind])

    def _form(self) -> Versioned:
        """A city's lease form: the one in use 1..3 years ago, revised twice since (from some
        section on each time)."""
        rng, form = self.rng, Versioned([(-1e18, self.doc(FORM, "form"))])
        for t in (-rng.uniform(200, 500) * DAY, -rng.uniform(30, 180) * DAY):
            form.versions.append((t, revise_from(rng, self.new, form.current, SECTION["form"])))
        return form

    def _building(self, c: int, investors: int) -> None:
        rng, new, b = self.rng, self.new, len(self.buildings)
        if rng.random() < HOA:
            self.owners.append((new(clipped_length(rng, *TEMPLATE)), [], True))
            owner = len(self.owners) - 1
        else:
            owner = rng.choices(range(investors), [1 / (r + 1) for r in range(investors)])[0]
        self.owners[owner][1].append(b)
        size, first = clipped_length(rng, *UNITS), len(self.units)
        rules = Versioned([(-1e18, self.doc(RULES, "rules"))])
        comps = Versioned([(-1e18, [new(clipped_length(rng, *COMPS))])])
        self.buildings.append(Building(c, owner, list(range(first, first + size)), rules,
                                       new(clipped_length(rng, *MARKETING)),
                                       new(clipped_length(rng, *PLANT)), comps,
                                       Versioned([(-1e18, [])])))
        self.cities[c].buildings.append(b)
        vacant = VACANT.get(self.week, 0.05)
        for _ in range(size):
            lease = None if rng.random() < vacant else self.lease(c, rng.uniform(-20, 345), -1e18)
            self.units.append(Unit(b, new(clipped_length(rng, *PROFILE)), lease))

    def lease(self, c: int, end: float, signed: float) -> Lease:
        """A lease in city ``c`` ending ``end`` days from the clock's start, on the form in
        use a year before its end (or at ``signed`` if later), with 0..4 addenda."""
        rng, new = self.rng, self.new
        form = self.cities[c].form.at(max(signed, (end - 365) * DAY))
        addenda = [new(clipped_length(rng, *ADDENDUM)) for _ in range(min(4, poisson(rng, 1.2)))]
        return Lease(form, new(clipped_length(rng, *RIDER)), addenda,
                     Versioned([(signed, [new(clipped_length(rng, *ABSTRACT))])]), end,
                     rng.random() < AUTOPAY, pick(rng, LANGS))

    def at_local(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time if it falls on the clock (0..END)."""
        t = utc(day, hour, tz)
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def daily(self, rate: float, hours: tuple, first: int, name: str) -> None:
        """Each local day in each city, its share (by units) of ``rate`` x scale x the week's
        factor for ``name`` events (Poisson) at local hours by ``hours`` from ``first``."""
        for c, city in enumerate(self.cities):
            mean = rate * self.scale * city.share * self.factor(name)
            for d in (-1, 0, 1, 2):
                for _ in range(poisson(self.rng, mean)):
                    self.at_local(d, hour_of(self.rng, hours, first), city.tz, name, c)

    def factor(self, name: str) -> float:
        """The week's factor on the daily count of ``name`` events."""
        return FACTORS[self.week].get(name, 1.0)

    def building_in(self, c: int) -> int:
        """A building of city ``c`` by units."""
        bs = self.cities[c].buildings
        return self.rng.choices(bs, [len(self.buildings[b].units) for b in bs])[0]

    def tenant_in(self, c: int) -> int:
        """An occupied unit of city ``c`` (each unit alike; of any city after 100 tries)."""
        for _ in range(100):
            u = self.rng.choice(self.buildings[self.building_in(c)].units)
            if self.units[u].lease is not None:
                return u
        return self.rng.choice([u for u, x in enumerate(self.units) if x.lease is not None])

    def topics(self, k: int) -> list[int]:
        """``k`` distinct handbook section indices a question retrieves, Zipf(1) over the
        sections by a rank drawn per trace."""
        n = len(self.rank)
        out: list[int] = []
        while len(out) < min(k, n):
            rank = self.rng.choices(range(n), [1 / (r + 1) for r in range(n)])[0]
            if self.rank[rank] not in out:
                out.append(self.rank[rank])
        return out

    def retrieve(self, topics: tuple[int, ...] | list[int]) -> list[Segment]:
        """The handbook's sections ``topics`` as it stands (the last for one past its end)."""
        secs = self.handbook.at(self.now)
        return [secs[min(k, len(secs) - 1)] for k in topics]

    def resident_head(self, system: Segment, b: int) -> list[Segment]:
        """What a resident-facing prompt starts with: the system prompt, the city's rules,
        the building's house rules and its incident notice, as they stand."""
        bld, t = self.buildings[b], self.now
        return [system, self.cities[bld.city].rules, *bld.rules.at(t), *bld.alert.at(t)]

    def _plan_updates(self) -> None:
        """Policy updates on the clock: the handbook (HANDBOOK_UPDATE), building rules
        (RULE_EDITS a day), rent surveys (each building weekly), a lease form (FORM_UPDATE)."""
        rng, hq = self.rng, max(self.cities, key=lambda c: c.share).tz
        if rng.random() < HANDBOOK_UPDATE:
            self.at_local(rng.choice((0, 1)), rng.uniform(10, 16), hq, "handbook", 0)
        for d in (0, 1):
            for _ in range(poisson(rng, RULE_EDITS * self.scale + 0.5)):
                b = rng.randrange(len(self.buildings))
                self.at_local(d, hour_of(rng, OFFICE, 9), self.cities[self.buildings[b].city].tz,
                              "rules", b)
        for b, bld in enumerate(self.buildings):
            if rng.random() < 2 / 7:
                self.at_local(rng.choice((0, 1)), 6.0, self.cities[bld.city].tz, "comps", b)
        if rng.random() < FORM_UPDATE.get(self.week, 0.2):
            c = rng.randrange(len(self.cities))
            self.at_local(0, 8.0, self.cities[c].tz, "form", c)

    def _on_handbook(self, _: int) -> None:
        secs = revise_from(self.rng, self.new, self.handbook.current, SECTION["handbook"])
        self.handbook.versions.append((self.now, secs))

    def _on_rules(self, b: int) -> None:
        rules = self.buildings[b].rules
        rules.versions.append((self.now, revise_from(self.rng, self.new, rules.current,
                                                     SECTION["rules"])))

    def _on_comps(self, b: int) -> None:
        self.buildings[b].comps.versions.append((self.now, [self.new(clipped_length(
            self.rng, *COMPS))]))

    def _on_form(self, c: int) -> None:
        form = self.cities[c].form
        form.versions.append((self.now, revise_from(self.rng, self.new, form.current,
                                                    SECTION["form"])))

    def _plan_incidents(self) -> None:
        """INCIDENTS (else 1..2), each in another building by units; an elevator outage only
        where there are elevators, a leak never planned. The incident week's first is a
        water main break or a leak in the largest building."""
        rng = self.rng
        lo, hi = INCIDENTS.get(self.week, (1, 2))
        sizes = [len(b.units) for b in self.buildings]
        for k in range(min(rng.randint(lo, hi), len(sizes))):
            if k == 0 and lo > 1:
                b = sizes.index(max(sizes))
                kind, planned = rng.choice(("water", "leak")), False
            else:
                b = rng.choices(range(len(sizes)), sizes)[0]
                big = len(self.buildings[b].units) >= ELEVATOR
                kind = rng.choice([x for x in INCIDENT_KINDS if x != "elevator" or big])
                planned = kind != "leak" and rng.random() < PLANNED
            sizes[b] = 0  # one incident a building
            self._incident(b, kind, planned)

    def _incident(self, b: int, kind: str, planned: bool) -> None:
        """An incident on day 0 or 1: unplanned from local 06..20 for 2..10 hours, planned work
        from local 09..13 for 3..6 (noticed at local 15..18 the day before and an hour
        before). A notice 5..20 minutes in, an update every 45..150 minutes, one at the end
        (those before the clock's start posted at once); the alert clears 2..6 hours after."""
        rng, tz = self.rng, self.cities[self.buildings[b].city].tz
        day = rng.choice((0, 1))
        start = utc(day, rng.uniform(9, 13) if planned else rng.uniform(6, 20), tz)
        end = start + rng.uniform(3, 6) * HOUR if planned else start + rng.uniform(2, 10) * HOUR
        inc = Incident(b, kind, planned, start, end, self.new(12), tuple(self.topics(2)))
        self.incidents.append(inc)
        n = len(self.incidents) - 1
        posts = [utc(day - 1, rng.uniform(15, 18), tz), start - HOUR] if planned else []
        t = start + rng.uniform(5, 20) * MINUTE
        while t < end:
            posts.append(t)
            t += rng.uniform(45, 150) * MINUTE
        for t in [*posts, end]:
            if t < 0:
                self.post(n, t)
            else:
                self.at(t, "notice", n)
        self.at(end + rng.uniform(2, 6) * HOUR, "clear", b)

    def post(self, n: int, t: float) -> None:
        """Incident ``n``'s next notice at ``t``: the building's alert from then."""
        inc = self.incidents[n]
        inc.notices.append((t, self.new(clipped_length(self.rng, *NOTICE))))
        self.buildings[inc.building].alert.versions.append((t, [inc.notices[-1][1]]))

    def _on_notice(self, n: int) -> None:
        self.post(n, self.now)

    def _on_clear(self, b: int) -> None:
        self.buildings[b].alert.versions.append((self.now, []))
