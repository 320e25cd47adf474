"""bench.heldout's ``property_mgmt`` shape, the batch jobs and the leasing office's documents:
rent reminders walking each city's tenants behind a shared template, renewal offers walking
the leases that near their end, owner and board reports walking every unit's ledger page by
page behind the building's month summary, listing descriptions generated per unit (a long
and a short one), application screening summaries (re-run when a document is added) and the
lease abstracts re-made when a lease is signed or an addendum executed. See
bench/heldout_property_mgmt.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_prop_world import ABSTRACT, ADDENDUM, DAY, HOUR, LANGS, OFFICE, Portfolio

SYSTEM = {"reminder": 500, "renewal": 1100, "report": 1500, "listing": 900,
          "screening": 1300, "abstract": 900}
CUE = {"reminder": 20, "renewal": 40, "report": 40, "rollup": 45, "long": 45, "short": 35,
       "screening": 40, "abstract": 35}
OUTPUT = {"reminder": (110, 0.3, 50, 250), "renewal": (350, 0.3, 150, 700),
          "report": (300, 0.4, 100, 800), "listing": (380, 0.3, 150, 700)}
# requests a job runs at once (its pace is its requests' reading and writing over this)
WIDTH = {"reminder": 6, "renewal": 2, "report": 1, "listing": 2}
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a stream
REMINDER = (380, 0.3, 250, 550)  # tokens of a reminder template (a language and a notice)
REMINDER_NOTE = (140, 0.4, 60, 260)  # a tenant's one-off part (balance, ledger lines, unit)
# the week's reminder runs by local day: (notice, share of tenants without autopay who
# did not opt out)
REMIND = {"month_end": {0: (0, 0.85), 1: (1, 0.5)}, "move_in": {1: (0, 0.6)}}
PAST_DUE = 0.04  # tenants with a balance reminded each day (notice 2)
RENEWAL_POLICY = (2200, 0.3, 1500, 3000)  # the portfolio's renewal pricing policy
HISTORY = (250, 0.4, 120, 400)  # a tenant's payment history (one-off)
RENEW_AHEAD = 90  # days before a lease's end its offer goes out (month-end: a month of them)
SUMMARY = (2400, 0.3, 1500, 4000)  # tokens of a building's month summary (budget, actual)
LEDGER = (220, 0.5, 80, 700)  # tokens of a unit's month ledger
PAGE = 12  # units' ledgers a report request holds
DELINQUENT = (500, 0.6, 150, 1200)  # a building's delinquency list (the roll-up)
PACKETS = 1.0  # condo boards' packets a day at scale 1.0 (not in the month-end week)
LISTINGS = 30  # new listings a day at scale 1.0 (x the week's factor)
RELIST = 0.12  # listed units re-listed a day (price change: a new fact sheet)
FACT = (320, 0.35, 150, 600)  # tokens of a unit's fact sheet (rent, size, availability)
PHOTOS = ((4, 14), (75, 0.4, 30, 150))  # photo captions of a listing, tokens each
TEXT = (380, 0.3, 150, 700)  # tokens of a generated listing text
APPLICATIONS = 45  # a day at scale 1.0 (x the week's factor), prospects' hours
CRITERIA = (2500, 0.25, 1800, 3200)  # tokens of the portfolio's screening criteria
FORM_DATA = (550, 0.35, 300, 800)  # an application form
DOCS = ((1, 4), (550, 0.4, 250, 900))  # income documents (pay stubs, bank statements)
CHECK = (900, 0.3, 500, 1300)  # a credit and background report summary
LATE_DOC = (0.35, 2.0, 20.0)  # applications that add a document later, hours after
SIGNINGS, ADDENDA = 12, 18  # new leases and addenda a day at scale 1.0 (office hours)
PROSPECT_HOURS = (0.2, 0.1, 0.05, 0.03, 0.03, 0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.0,
                  0.9, 0.9, 0.9, 1.0, 1.2, 1.4, 1.5, 1.3, 0.9, 0.5)


@dataclass
class Stream:
    """A job's walk at its pace: kind, what it walks for (city, or owner for a report),
    items (units; (building, units of a page) for a report, no units for the roll-up; (unit,
    0 long or 1 short) for listings), how far it is and its request indices."""

    kind: str
    owner: int
    items: list
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    notice: int = 0  # a reminder run's notice: 0 due soon, 1 due today, 2 past due
    index: int = 0  # in ``Jobs.streams`` (its requests' owner)


@dataclass
class Listing:
    """A unit's listing: fact sheet versions (a new one when re-listed), photo captions, the
    generated texts (versions) and when it was listed."""

    fact: Versioned
    photos: list[Segment]
    text: Versioned
    since: float


@dataclass
class Application:
    """An application for a listed unit: its form, documents, report and request indices."""

    unit: int
    form: Segment
    docs: list[Segment]
    check: Segment
    sent: list[int] = field(default_factory=list)


class Jobs(Portfolio):
    """The portfolio (``Portfolio``) and its batch jobs and leasing-office documents."""

    def __init__(self, rng: random.Random, scale: float, week: str) -> None:
        super().__init__(rng, scale, week)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.templates = {(lang, k): self.new(clipped_length(rng, *REMINDER))
                          for lang, _ in LANGS for k in range(3)}
        self.renewal = self.doc(RENEWAL_POLICY, "handbook")
        self.criteria = self.doc(CRITERIA, "handbook")
        self.streams: list[Stream] = []
        self.apps: list[Application] = []
        self.summaries: dict[int, Segment] = {}
        self.ledgers: dict[int, Segment] = {}
        self.listed: list[set[int]] = [set() for _ in self.cities]
        for u, unit in enumerate(self.units):
            if unit.lease is None:
                self.list_unit(u, -1e18)
        self._plan_jobs()

    def _plan_jobs(self) -> None:
        rng = self.rng
        for c, city in enumerate(self.cities):
            for d in (-1, 0, 1, 2):
                self.at_local(d, rng.uniform(8.0, 8.5), city.tz, "reminders", (c, d))
                self.at_local(d, rng.uniform(9.0, 10.0), city.tz, "renewals", (c, d))
                self.at_local(d, rng.uniform(10.0, 11.0), city.tz, "listings", c)
        for o, (_, bs, _) in enumerate(self.owners):
            if self.week == "month_end" and bs:
                tz = self.cities[self.buildings[bs[0]].city].tz
                self.at_local(1, rng.uniform(1.0, 3.0), tz, "report", o)
        if self.week != "month_end":
            self._plan_packets()
        self.daily(APPLICATIONS, PROSPECT_HOURS, 0, "apply")
        self.daily(SIGNINGS, OFFICE, 9, "signing")
        self.daily(ADDENDA, OFFICE, 9, "addendum")

    def _plan_packets(self) -> None:
        """Condo boards' meeting packets (PACKETS a day, at least one a trace; an investor's
        report where no building is a condo) at local 09..17 of day 0 or 1."""
        rng = self.rng
        boards = [o for o, (_, bs, board) in enumerate(self.owners) if board and bs]
        boards = boards or [o for o, (_, bs, _) in enumerate(self.owners) if bs]
        n = [poisson(rng, PACKETS * self.scale) for _ in (0, 1)]
        n[rng.randrange(2)] += not sum(n)
        for d in (0, 1):
            for _ in range(n[d]):
                o = rng.choice(boards)
                tz = self.cities[self.buildings[self.owners[o][1][0]].city].tz
                self.at_local(d, rng.uniform(9.0, 17.0), tz, "report", o)

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds until a job's next request: reading the prompt and writing the output,
        WIDTH at once."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25) / WIDTH[kind]

    def walk(self, kind: str, owner: int, items: list, notice: int = 0) -> None:
        if items:
            self.streams.append(s := Stream(kind, owner, items, notice=notice,
                                            index=len(self.streams)))
            self.at(self.now, "stream", s)

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item."""
        item = s.items[s.pos]
        s.pos += 1
        segs, step = getattr(self, s.kind + "_prompt")(s, item)
        s.sent.append(self.emit(s.kind, s.index, step, segs))
        if s.pos < len(s.items):
            self.at(self.now + self.pace(segs, s.kind), "stream", s)

    def city_tenants(self, c: int) -> list[int]:
        """City ``c``'s occupied units, building by building."""
        return [u for b in self.cities[c].buildings for u in self.buildings[b].units
                if self.units[u].lease is not None]

    def _on_reminders(self, arg: tuple[int, int]) -> None:
        """A city's reminder run: the week's notice for its share of tenants without
        autopay (REMIND), else past-due notices (PAST_DUE)."""
        c, day = arg
        notice, share = REMIND.get(self.week, {}).get(day, (2, 0.0))
        rng, lease = self.rng, lambda u: self.units[u].lease
        if share:
            todo = [u for u in self.city_tenants(c) if not lease(u).autopay
                    and rng.random() < share]
        else:
            todo = [u for u in self.city_tenants(c) if rng.random() < PAST_DUE]
        self.walk("reminder", c, todo, notice)

    def reminder_prompt(self, s: Stream, u: int) -> tuple[list[Segment], int]:
        note = self.new(clipped_length(self.rng, *REMINDER_NOTE))
        template = self.templates[(self.units[u].lease.lang, s.notice)]
        return [self.system["reminder"], template, note, self.cue["reminder"]], u

    def _on_renewals(self, arg: tuple[int, int]) -> None:
        """A city's renewal run: leases ending RENEW_AHEAD days from now (a day of them; in
        the month-end week on the 1st, the whole month)."""
        c, day = arg
        lo = self.now / DAY + RENEW_AHEAD
        hi = lo + (31 if self.week == "month_end" and day == 1 else 1)
        self.walk("renewal", c, [u for u in self.city_tenants(c)
                                 if lo <= self.units[u].lease.end < hi])

    def renewal_prompt(self, _: Stream, u: int) -> tuple[list[Segment], int]:
        bld, lease = self.buildings[self.units[u].building], self.units[u].lease
        history = self.new(clipped_length(self.rng, *HISTORY))
        return [self.system["renewal"], *self.renewal, *bld.comps.at(self.now),
                *lease.abstract.at(self.now), history, self.cue["renewal"]], u

    def _on_report(self, o: int) -> None:
        """An owner's report: each building's units' ledgers in pages of PAGE, then the
        building's roll-up."""
        items = []
        for b in self.owners[o][1]:
            us = self.buildings[b].units
            items += [(b, tuple(us[k:k + PAGE])) for k in range(0, len(us), PAGE)]
            items.append((b, ()))
        self.walk("report", o, items)

    def report_prompt(self, s: Stream, item: tuple) -> tuple[list[Segment], int]:
        b, us = item
        rng = self.rng
        if b not in self.summaries:
            self.summaries[b] = self.new(clipped_length(rng, *SUMMARY))
        head = [self.system["report"], self.owners[s.owner][0], self.summaries[b]]
        if not us:
            return [*head, self.new(clipped_length(rng, *DELINQUENT)), self.cue["rollup"]], b
        for u in us:
            if u not in self.ledgers:
                self.ledgers[u] = self.new(clipped_length(rng, *LEDGER))
        return [*head, *(self.ledgers[u] for u in us), self.cue["report"]], b

    def list_unit(self, u: int, t: float) -> None:
        """Unit ``u`` listed at ``t``: a fact sheet and photos (a text too if before the
        clock's start; else the listing job writes it)."""
        rng = self.rng
        photos = [self.new(clipped_length(rng, *PHOTOS[1]))
                  for _ in range(rng.randint(*PHOTOS[0]))]
        fact = Versioned([(t, [self.new(clipped_length(rng, *FACT))])])
        text = Versioned([(t, [self.new(clipped_length(rng, *TEXT))])] if t < 0 else [])
        self.units[u].listing = Listing(fact, photos, text, t)
        self.listed[self.buildings[self.units[u].building].city].add(u)

    def _on_listings(self, c: int) -> None:
        """A city's listing job: units to list (vacant, or a lease ending within 60 days)
        and re-listings (a new fact sheet); a long and a short text for each."""
        rng, todo = self.rng, []
        n = poisson(rng, LISTINGS * self.scale * self.cities[c].share * self.factor("listing"))
        due = self.now / DAY + 60
        fresh = [u for b in self.cities[c].buildings for u in self.buildings[b].units
                 if self.units[u].listing is None and (self.units[u].lease is None
                                                       or self.units[u].lease.end < due)]
        for u in rng.sample(fresh, min(n, len(fresh))):
            self.list_unit(u, self.now)
            todo.append(u)
        for b in self.cities[c].buildings:
            for u in self.buildings[b].units:
                listing = self.units[u].listing
                if listing and u not in todo and rng.random() < RELIST:
                    listing.fact.versions.append((self.now, [self.new(clipped_length(
                        rng, *FACT))]))
                    todo.append(u)
        self.walk("listing", c, [(u, v) for u in sorted(todo) for v in (0, 1)])

    def listing_prompt(self, _: Stream, item: tuple[int, int]) -> tuple[list[Segment], int]:
        """A listing text: the building's marketing text, the fact sheet, the photos' captions
        and the long or short cue; the long one becomes the unit's listing text."""
        u, v = item
        listing = self.units[u].listing
        segs = [self.system["listing"], self.buildings[self.units[u].building].marketing,
                *listing.fact.at(self.now), *listing.photos,
                self.cue["short" if v else "long"]]
        if not v:
            listing.text.versions.append((self.now, [self.new(clipped_length(
                self.rng, *TEXT))]))
        return segs, u

    def listed_in(self, c: int) -> list[int]:
        """City ``c``'s units listed now (with a listing text)."""
        return sorted(u for u in self.listed[c] if self.units[u].listing.text.versions)

    def _on_apply(self, c: int) -> None:
        """An application for a listed unit of city ``c``: screened at once; LATE_DOC of
        them add a document hours later and are screened again."""
        rng, listed = self.rng, self.listed_in(c)
        if not listed:
            return
        docs = [self.new(clipped_length(rng, *DOCS[1])) for _ in range(rng.randint(*DOCS[0]))]
        self.apps.append(Application(rng.choice(listed), self.new(clipped_length(
            rng, *FORM_DATA)), docs, self.new(clipped_length(rng, *CHECK))))
        self.at(self.now, "screen", len(self.apps) - 1)
        if rng.random() < LATE_DOC[0]:
            self.at(self.now + rng.uniform(*LATE_DOC[1:]) * HOUR, "late_doc", len(self.apps) - 1)

    def _on_late_doc(self, n: int) -> None:
        self.apps[n].docs.append(self.new(clipped_length(self.rng, *DOCS[1])))
        self._on_screen(n)

    def _on_screen(self, n: int) -> None:
        """A screening summary: the criteria, the city's rules, the form, the documents, the
        report."""
        app = self.apps[n]
        city = self.cities[self.buildings[self.units[app.unit].building].city]
        segs = [self.system["screening"], *self.criteria, city.rules, app.form, *app.docs,
                app.check, self.cue["screening"]]
        app.sent.append(self.emit("screening", n, len(app.sent), segs))

    def abstract(self, u: int, step: int) -> None:
        """The lease of ``u`` abstracted (the whole document), its abstract new from now."""
        lease = self.units[u].lease
        segs = [self.system["abstract"], *lease.document(), self.cue["abstract"]]
        self.emit("abstract", u, step, segs)
        lease.abstract.versions.append((self.now, [self.new(clipped_length(self.rng,
                                                                          *ABSTRACT))]))

    def _on_signing(self, c: int) -> None:
        """A new lease on the current form for a listed unit of city ``c`` (a vacant one if
        any), which is delisted."""
        listed = self.listed_in(c)
        if listed:
            empty = [u for u in listed if self.units[u].lease is None]
            u = self.rng.choice(empty or listed)
            self.units[u].lease = self.lease(c, self.now / DAY + 365, self.now)
            self.units[u].listing = None
            self.listed[c].discard(u)
            self.abstract(u, 0)

    def _on_addendum(self, c: int) -> None:
        """An addendum (pet, parking, roommate, renewal) executed on a lease of city ``c``."""
        u = self.tenant_in(c)
        self.units[u].lease.addenda.append(self.new(clipped_length(self.rng, *ADDENDUM)))
        self.abstract(u, len(self.units[u].lease.addenda))
