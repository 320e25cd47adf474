"""bench.heldout's ``manufacturing_qc`` shape, the quality office: 8D / CAPA investigations as
chats that grow over days (sessions in office hours, a history summarised once it is long,
a PFMEA or control plan revised after some sessions), PFMEA and control-plan reviews,
questions over the plant's quality procedures, supplier quality email threads, audit
preparation walks over a plant's documents clause by clause, and the containment walk over
every suspect lot, started again each time its brief is revised. A recall adds its war-room
8D, the implicated supplier's thread and a sorting instruction on each suspect line. See
bench/heldout_manufacturing_qc.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_mfg_floor import CHATS, DEFECT, Floor, MfgChat
from bench.heldout_mfg_parts import CLAUSES, DAY, END, HOUR, OFFICE_HOURS, WI, utc
from bench.heldout_recruit_parts import hour_of

GUIDE = 2200  # tokens of the 8D guide (the disciplines D0..D8, what each needs)
OPEN_8D = 0.6  # investigations open at the clock's start, per line
PRIOR = (6, 0.8, 1, 24)  # turns an open investigation has had before the clock's start
PICKS = (2, 3)  # PFMEA sections an investigation holds (as they stand)
SESSIONS = 1.3  # sessions an investigation a local day (Poisson), by OFFICE_HOURS
UPDATE = (0.12, (0.5, 4.0))  # sessions after which the PFMEA or control plan is revised, hours
FMEA = 0.25  # PFMEA / control-plan reviews a line a day, by OFFICE_HOURS
SOP = 3.0  # procedure questions a line a day, local 06..21
SOP_HOURS = (0.4, 0.8, 1.0, 1.0, 1.0, 0.9, 0.7, 0.9, 1.0, 0.9, 0.7, 0.5, 0.4, 0.3, 0.3, 0.2)
AUDIT_BOOST = 2.5  # SOP and FMEA questions at the audited plant in an audit week
EMAILS = 2.0  # supplier emails a day, per line of the plant, by OFFICE_HOURS
CONTINUE = 0.65  # emails on the supplier's open thread (else a new thread)
OPEN_THREADS = (0.4, (2, 0.6, 1, 6))  # suppliers with an open thread, its earlier emails
PREFILL, DECODE = 6000.0, 35.0  # tokens a second a walk reads and writes
SYSTEM = {"audit": 1100, "containment": 900}
CUE = {"audit": 40, "containment": 40}
OUTPUT = {"audit": (350, 0.4, 120, 900), "containment": (200, 0.4, 80, 500)}
# the documents each clause mostly draws its evidence from (the rest: any of the plant's)
EVIDENCE = ("procedure", "procedure", "procedure", "procedure", "procedure", "spec", "cp",
            "pfmea", "pfmea", "cp", "wi", "wi", "wi", "procedure")
PRIMARY = 0.7
AUDIT_DOCS = (10, 30)  # documents a clause in the audit week (x scale, at least 2)
FIXES = (20, (12.0, 20.0))  # documents revised (x scale) between the walks, local hours
INTERNAL = (4, (6, 12), (9.0, 11.0))  # the internal audit: clauses, documents, local hours
BRIEF = (1200, 0.4, 600, 2500)  # tokens of a containment brief
BRIEF_UPDATE = (500, 0.4, 200, 1200)  # tokens of each update appended to it
COMPLAINT = (900, 0.4, 400, 1800)  # tokens of the customer complaint (the recall's 8D)
RECALL = ((6.0, 16.0), (2, 3), (1.5, 3.0), (3.0, 6.0), 0.35, (0.5, 1.5))  # start (UTC h,
# day 0), lines, window (days), hours between revisions, chance one widens it, by
HOLD = ((2.0, 40.0), (1.0, 3.0), (0, 1), (2.0, 6.0))  # start (h), window (days),
# revisions, hours after
WAR_ROOM = ((1.0, 2.5), (1.0, 3.0), (1.0, 2.0))  # hours: 8D sessions, supplier emails, the
# sorting instruction after the start


@dataclass
class Walk:
    """A job's walk, one request at a time at its pace: kind (audit, containment), plant,
    label (prep, final, internal; the brief's version), items (clause and document
    reference; lot ids), how far it is, its requests, whether it was stopped."""

    kind: str
    plant: int
    label: str
    items: list
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    stopped: bool = False


@dataclass
class Containment:
    """The trace's containment: recall or quality hold, plant, product, suspect lines, the
    window's start, the brief (versions: each revision appends an update) and its walks."""

    recall: bool
    plant: int
    product: int
    lines: list[int]
    since: float
    brief: Versioned
    walks: list[int] = field(default_factory=list)


class Office(Floor):
    """The floor (``Floor``) and the quality office: the whole replica."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.guide = self.new(GUIDE)
        self.system.update({k: self.new(v) for k, v in SYSTEM.items()})
        self.cue.update({k: self.new(v) for k, v in CUE.items()})
        self.threads: dict[int, int] = {}  # supplier -> its open thread (a chat)
        self.walks: list[Walk] = []
        self.audited = max(range(len(self.plants)), key=lambda p: len(self.plants[p].lines))
        for _ in range(round(OPEN_8D * len(self.lines))):
            n = rng.randrange(len(self.lines))
            case = [self.new(clipped_length(rng, *DEFECT)) for _ in range(2)]
            self.open_8d(self.lines[n].products[0], case, clipped_length(rng, *PRIOR), 0.0)
        for s in range(len(self.supplier_plant)):
            if rng.random() < OPEN_THREADS[0]:
                self._thread(s, clipped_length(rng, *OPEN_THREADS[1]))
        self._plan_office()
        self._plan_audits()
        self._plan_containment()

    def _plan_office(self) -> None:
        """Each local day: procedure questions and PFMEA reviews per line (x AUDIT_BOOST at
        the audited plant in an audit week), supplier emails per plant."""
        for p, plant in enumerate(self.plants):
            boost = AUDIT_BOOST if self.scenario == "audit" and p == self.audited else 1.0
            for n in plant.lines:
                self.daily(p, SOP * boost, SOP_HOURS, 6, "sop", p)
                self.daily(p, FMEA * boost, OFFICE_HOURS, 7, "fmea", n)
            self.daily(p, EMAILS * len(plant.lines), OFFICE_HOURS, 7, "email", p)

    def open_8d(self, product: int, case: list[Segment], prior: int, after: float) -> int:
        """An 8D investigation of ``product`` over ``case`` with ``prior`` turns of history
        (from before the clock's start), its sessions from ``after`` on; its chat."""
        rng, prod = self.rng, self.products[product]
        size = len(prod.pfmea.current)
        chat = MfgChat("eightd", product, 0, case, plant=prod.plant, origin=after)
        for _ in range(prior):
            for spec in CHATS["eightd"][2:4]:
                chat.history.append(self.new(clipped_length(rng, *spec)))
        chat.picks = sorted(rng.sample(range(size), min(size, rng.randint(*PICKS))))
        self.chats.append(chat)
        n = len(self.chats) - 1
        tz = self.plants[prod.plant].tz
        for d in (-1, 0, 1, 2):
            for _ in range(poisson(rng, SESSIONS)):
                t = utc(d, hour_of(rng, OFFICE_HOURS, 7), tz)
                if after <= t < END:
                    self.at(t, "session", (n, clipped_length(rng, *CHATS["eightd"][1])))
        return n

    def head_eightd(self, chat: MfgChat) -> list[Segment]:
        prod = self.products[chat.owner]
        pfmea = prod.pfmea.at(self.now)
        return [self.system["eightd"], self.guide, *chat.fixed, *prod.cp.at(self.now),
                *(pfmea[k] for k in chat.picks)]

    def head_fmea(self, chat: MfgChat) -> list[Segment]:
        prod = self.products[chat.owner]
        return [self.system["fmea"], *prod.pfmea.at(self.now), *prod.cp.at(self.now)]

    def head_sop(self, chat: MfgChat) -> list[Segment]:
        return [self.system["sop"], *self.plants[chat.owner].procedures[chat.doc].at(self.now)]

    def head_supplier(self, chat: MfgChat) -> list[Segment]:
        return [self.system["supplier"], *self.plants[chat.plant].sqa, self.card(chat.owner)]

    def _on_escalate(self, n: int) -> None:
        """NCR chat ``n`` becomes an 8D investigation: a first session now, more after."""
        ncr = self.chats[n]
        e = self.open_8d(ncr.doc, list(ncr.fixed), 0, self.now)
        self._on_session((e, clipped_length(self.rng, *CHATS["eightd"][1])))

    def idle(self, n: int) -> None:
        """After some 8D sessions the team revises the PFMEA (a section it holds) or the
        control plan hours later."""
        if self.chats[n].kind == "eightd" and self.rng.random() < UPDATE[0]:
            self.at(self.now + self.rng.uniform(*UPDATE[1]) * HOUR, "capa", n)

    def _on_capa(self, n: int) -> None:
        prod = self.chats[n].owner
        if self.rng.random() < 0.5:
            k = self.rng.choice(self.chats[n].picks)
            self.revise(self.products[prod].pfmea, "pfmea", (prod,), k)
        else:
            self.revise(self.products[prod].cp, "cp", (prod,))

    def _on_fmea(self, n: int) -> None:
        """An engineer reviews the PFMEA and control plan of line ``n``'s main product."""
        line = self.lines[n]
        turns = clipped_length(self.rng, *CHATS["fmea"][1])
        self.start(MfgChat("fmea", line.products[0], turns, [], plant=line.plant))

    def _on_sop(self, p: int) -> None:
        """A question over one of plant ``p``'s procedures (by popularity)."""
        plant = self.plants[p]
        k = self.rng.choices(range(len(plant.procedures)), plant.procedure_weight)[0]
        turns = clipped_length(self.rng, *CHATS["sop"][1])
        self.start(MfgChat("sop", p, turns, [], plant=p, doc=k))

    def _thread(self, s: int, prior: int) -> int:
        """A supplier thread open since before the clock's start, ``prior`` emails and replies
        long; not started."""
        chat = MfgChat("supplier", s, 0, [], plant=self.supplier_plant[s])
        for _ in range(prior):
            for spec in CHATS["supplier"][2:4]:
                chat.history.append(self.new(clipped_length(self.rng, *spec)))
        self.chats.append(chat)
        self.threads[s] = len(self.chats) - 1
        return self.threads[s]

    def email(self, s: int, keep: float) -> None:
        """An email from supplier ``s``: on its open thread (chance ``keep``), else a new one;
        the thread so far, the email, the drafted reply joins."""
        if s in self.threads and self.rng.random() < keep:
            self._on_session((self.threads[s], 1))
        else:
            chat = MfgChat("supplier", s, 1, [], plant=self.supplier_plant[s])
            self.threads[s] = self.start(chat)

    def _on_email(self, p: int) -> None:
        sups = self.plants[p].suppliers
        s = self.rng.choices(sups, [self.supplier_weight[s] for s in sups])[0]
        self.email(s, CONTINUE)

    def _on_walk(self, w: int) -> None:
        """A walk's next item, then the next after this one's reading and writing."""
        walk = self.walks[w]
        if walk.stopped or walk.pos >= len(walk.items):
            return
        segs = self.walk_prompt(walk, walk.items[walk.pos])
        walk.sent.append(self.emit(walk.kind, w, walk.pos, segs))
        walk.pos += 1
        out = clipped_length(self.rng, *OUTPUT[walk.kind])
        pace = (sum(n for _, n in segs) / PREFILL + out / DECODE) * self.rng.uniform(0.8, 1.25)
        self.at(self.now + pace, "walk", w)

    def walk_prompt(self, walk: Walk, item: object) -> list[Segment]:
        """audit: the clause and the document as it stands; containment: the brief as it
        stands, the product's spec, the lot's record and results."""
        if walk.kind == "audit":
            clause, ref = item
            return [self.system["audit"], self.clauses[clause], *self.document(ref).at(self.now),
                    self.cue["audit"]]
        lot, c = self.lots[item], self.containment
        return [self.system["containment"], *c.brief.at(self.now),
                *self.products[c.product].spec.at(self.now), lot.record, lot.results,
                self.cue["containment"]]

    def start_walk(self, walk: Walk) -> int:
        self.walks.append(walk)
        self.at(self.now, "walk", len(self.walks) - 1)
        return len(self.walks) - 1

    def _plan_audits(self) -> None:
        """The internal audit (every scenario) and, in an audit week, the audited plant's
        preparation walk, documents fixed that afternoon and the final walk next morning."""
        rng = self.rng
        clauses, docs, hours = INTERNAL
        p = rng.randrange(len(self.plants))
        items = self.audit_items(p, rng.sample(range(CLAUSES), clauses), docs)
        self.at_local(1, rng.uniform(*hours), self.plants[p].tz, "audit", (p, "internal", items))
        if self.scenario != "audit":
            return
        p, tz = self.audited, self.plants[self.audited].tz
        items = self.audit_items(p, list(range(CLAUSES)), AUDIT_DOCS)
        day = 0 if utc(0, 7.0, tz) >= 0 else 1
        self.at_local(day, rng.uniform(7.0, 8.0), tz, "audit", (p, "prep", items))
        for _ in range(max(3, round(FIXES[0] * self.scale))):
            self.at_local(day, rng.uniform(*FIXES[1]), tz, "fix", rng.choice(items)[1])
        self.at_local(day + 1, rng.uniform(5.5, 6.5), tz, "audit", (p, "final", items))

    def audit_items(self, p: int, clauses: list[int], docs: tuple) -> list[tuple[int, tuple]]:
        """Each clause's evidence in the checklist's order: documents of the clause's kind
        PRIMARY of the time, else any of the plant's; none twice in a clause."""
        rng, everything = self.rng, self.evidence(p, None)
        items = []
        for c in clauses:
            primary = self.evidence(p, EVIDENCE[c])
            want = min(len(everything), max(2, round(rng.randint(*docs) * self.scale)))
            chosen: list[tuple] = []
            while len(chosen) < want:
                ref = rng.choice(primary if rng.random() < PRIMARY else everything)
                if ref not in chosen:
                    chosen.append(ref)
            items += [(c, ref) for ref in chosen]
        return items

    def _on_audit(self, arg: tuple[int, str, list]) -> None:
        p, label, items = arg
        self.start_walk(Walk("audit", p, label, list(items)))

    def _on_fix(self, ref: tuple) -> None:
        """A document the preparation walk found lacking is revised (one section)."""
        self.revise(self.document(ref), ref[0], ref[1:])

    def _plan_containment(self) -> None:
        """The trace's containment (a recall, else a quality hold on one line): opened, then
        its brief revised; a recall's war room."""
        rng, recall = self.rng, self.scenario == "recall"
        p, q, suspect, t0, revisions = self._recall() if recall else self._hold()
        window = rng.uniform(*(RECALL[2] if recall else HOLD[1])) * DAY
        brief = Versioned([(t0, [self.new(clipped_length(rng, *BRIEF))])])
        self.containment = Containment(recall, p, q, sorted(suspect), t0 - window, brief)
        self.at(t0, "contain", False)
        for t in revisions:
            self.at(t, "contain", True)
        self.war_room, self.recall_supplier = -1, -1
        if recall:
            self._plan_war_room(t0)

    def _recall(self) -> tuple[int, int, list[int], float, list[float]]:
        """A customer complaint on day 0: a product of a plant (by its lines) on 2..3 of its
        lines (added to lines' products if fewer run it), the brief revised every few hours
        to the end."""
        rng = self.rng
        start, lines, _, gaps, _, _ = RECALL
        p = rng.choices(range(len(self.plants)), [len(x.lines) for x in self.plants])[0]
        plant = self.plants[p]
        q = rng.choice(plant.products)
        suspect = [n for n in plant.lines if q in self.lines[n].products]
        others = [n for n in plant.lines if n not in suspect]
        rng.shuffle(others)
        for n in others[:max(0, min(len(plant.lines), rng.randint(*lines)) - len(suspect))]:
            self.lines[n].products.append(q)
            suspect.append(n)
        t0 = rng.uniform(*start) * HOUR
        revisions = [t0 + rng.uniform(*gaps) * HOUR]
        while revisions[-1] < END:
            revisions.append(revisions[-1] + rng.uniform(*gaps) * HOUR)
        return p, q, suspect, t0, revisions[:-1]

    def _hold(self) -> tuple[int, int, list[int], float, list[float]]:
        """A quality hold on one line (by weight), its main product, revised 0..1 times."""
        rng = self.rng
        start, _, count, after = HOLD
        n = rng.choices(range(len(self.lines)), [x.weight for x in self.lines])[0]
        t0 = rng.uniform(*start) * HOUR
        revisions = [t0 + rng.uniform(*after) * HOUR for _ in range(rng.randint(*count))]
        return self.lines[n].plant, self.lines[n].products[0], [n], t0, revisions

    def _plan_war_room(self, t0: float) -> None:
        """A recall's 8D on the complaint, in sessions every 1..2.5 h at any hour; emails on
        the implicated supplier's thread; a sorting instruction on each suspect line."""
        rng, c = self.rng, self.containment
        case = [self.new(clipped_length(rng, *COMPLAINT))]
        t = t0 + rng.uniform(*WAR_ROOM[0]) * HOUR
        self.war_room = n = self.open_8d(c.product, case, 0, END)
        self.chats[n].origin = t
        while t < END:
            self.at(t, "session", (n, clipped_length(rng, *CHATS["eightd"][1])))
            t += rng.uniform(*WAR_ROOM[0]) * HOUR
        sups = self.plants[c.plant].suppliers
        self.recall_supplier = s = rng.choices(sups, [self.supplier_weight[s] for s in sups])[0]
        t = t0 + rng.uniform(*WAR_ROOM[1]) * HOUR
        while t < END:
            self.at(t, "recall_email", s)
            t += rng.uniform(*WAR_ROOM[1]) * HOUR
        for n in c.lines:
            self.at(t0 + rng.uniform(*WAR_ROOM[2]) * HOUR, "sorting", n)

    def _on_contain(self, revised: bool) -> None:
        """The containment opens or its brief is revised (an update appended; a recall's may
        widen the window): the running walk stops and every suspect lot is walked again,
        line by line in time order."""
        c, rng = self.containment, self.rng
        if revised:
            update = self.new(clipped_length(rng, *BRIEF_UPDATE))
            c.brief.versions.append((self.now, [*c.brief.current, update]))
            self.revisions.append((self.now, "brief", (), len(c.brief.current) - 1))
            if c.recall and rng.random() < RECALL[4]:
                c.since -= rng.uniform(*RECALL[5]) * DAY
        for w in c.walks:
            self.walks[w].stopped = self.walks[w].pos < len(self.walks[w].items)
        items = [k for n in c.lines for k in self.lots_since(n, c.since)
                 if self.lots[k].product == c.product]
        label = str(len(c.brief.versions) - 1)
        c.walks.append(self.start_walk(Walk("containment", c.plant, label, items)))

    def _on_recall_email(self, s: int) -> None:
        self.email(s, 1.0)

    def _on_sorting(self, n: int) -> None:
        """A sorting instruction released for suspect line ``n``: asked about as often as all
        its other stations together."""
        line = self.lines[n]
        line.stations.append(Versioned([(self.now, [self.new(clipped_length(self.rng, *WI))])]))
        line.station_weight.append(sum(line.station_weight))
        self.revisions.append((self.now, "sorting", (n, len(line.stations) - 1), 0))
