"""bench.heldout's ``patent_search`` shape, the firm's jobs: prior-art searches whose ranked
hits are read one by one against the matter's claims (prosecution screens, litigation
invalidity searches), claim charts built element by element against one reference, nightly
family and citation walks, the translator working through foreign references, nightly
landscape reports walking an area's index under a client's taxonomy, and the morning triage
of office actions as they arrive. See bench/heldout_patent_search.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_pats_world import AREA_DOCS, DAY, FRONT, HOUR, MINUTE, Claim, World

PROS_SEARCHES = {"pros": 16.0, "lit": 9.0}  # prosecution searches a day at scale 1.0
BATCH = {"screen": 15, "invalidity": 25}  # hits a page of results holds
PAGES = ((1, 0.4), (2, 0.3), (3, 0.2), (4, 0.1))  # pages a prosecution search reads
LIT_ACTIVE = (2, 3)  # litigations worked on a litigation-led day
LIT_SEARCHES = (2, 3)  # invalidity searches each of them runs that day
LIT_PAGES = (2, 6)  # pages each reads (x scale, at least 1)
QUIET_LIT = (2, 3)  # pages of the one small search a litigation runs on a prosecution day
REPEAT = {"screen": 0.5, "invalidity": 0.6}  # of a search's tail found by an earlier one
TRANSLATE_TOP = 5  # foreign hits ranked this high are sent to the translator
CHART_PROS = 0.3  # prosecution searches followed by a chart of one key reference
CHART_LIT = (2, 4)  # references charted after an invalidity search (x scale, at least 1)
CHART_CLAIMS = (1, 2)  # asserted independent claims a litigation chart covers
REVISE = 0.2  # chart rows run a second time with the attorney's note
NOTE = (60, 0.6, 15, 250)  # tokens of that note
OUTPUT = {"screen": (220, 0.4, 80, 500), "invalidity": (260, 0.4, 80, 600),
          "chart": (350, 0.4, 120, 900), "family": (90, 0.4, 30, 250),
          "translate": (700, 0.4, 250, 1600), "landscape": (80, 0.4, 40, 200)}
PREFILL, DECODE = 6000.0, 40.0  # tokens a second a stream's request reads and writes
FAMILY_HOURS = (1.0, 4.0)  # Eastern hours the nightly walk starts (nights 0 and 1)
FAMILY = (0.3, 8)  # share of the day's searched prosecution matters walked that night;
# matters walked on the first night (x scale: searched before the clock)
FAMILY_REFS = (1, 2)  # key references whose family and citations a walk follows
CITES = {"pros": (25, 0.6, 8, 80), "lit": (80, 0.5, 30, 200)}  # per reference (lit x scale)
IN_INDEX = 0.4  # citations that are documents of the area's index
LANDSCAPE_HOURS = (21.5, 23.5)  # Eastern hours the reports start (nights 0 and 1)
REPORTS = ((1, 0.7), (2, 0.3))  # reports a night
REPORT_DOCS = (200, 500)  # documents a report walks (the area's top ranks, x scale)
CLUSTERS = (6, 12)  # clusters a report summarises at the end
DIGEST = 30  # document outputs a cluster summary holds
REFRESH = (0.5, (0.03, 0.08))  # night 1 re-runs a night-0 report, new publications added
MAIL = 20.0  # office actions a day at scale 1.0, triaged on arrival 07..10 Eastern
PENDING = 20  # office actions waiting from before the clock (x scale)
GLOSSARY = (700, 0.4, 300, 1400)  # tokens of a language's translation glossary
TAXONOMY = (1500, 0.4, 700, 3000)  # tokens of a client's taxonomy for a landscape


@dataclass
class Stream:
    """A job's walk, one request at a time at its pace: kind, owner (the job's id), items,
    how far it is, its request indices, whether it is running."""

    kind: str
    owner: int
    items: list
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    live: bool = True


@dataclass
class Search:
    """A search: its matter, kind ("screen" or "invalidity"), day, ranked hits (the stream's
    items), and for a re-screen the amendment's time."""

    matter: int
    kind: str
    day: int
    stream: Stream
    amended: float | None = None  # a re-screen: when the amendment it checks landed


@dataclass
class Chart:
    """A claim chart: matter, reference, the claims as charted, rows (claim, element, pass)."""

    matter: int
    doc: int
    claims: list[Claim]
    stream: Stream


@dataclass
class Report:
    """A landscape report: area, the client's taxonomy, documents walked, each one's cluster
    and output, the report it refreshes (or None)."""

    area: int
    taxonomy: Segment
    docs: list[int]
    cluster: dict[int, int]
    stream: Stream
    outputs: dict[int, Segment] = field(default_factory=dict)
    refreshes: int | None = None


class Jobs(World):
    """The world (``World``) and the firm's jobs."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.glossary = {lang: self.new(clipped_length(rng, *GLOSSARY))
                         for lang in ("ja", "zh", "de", "ko")}
        self.searches: list[Search] = []
        self.charts: list[Chart] = []
        self.walks: list[tuple[int, Stream]] = []  # (night, stream of (matter, doc or -1))
        self.reports: list[Report] = []
        self.triaged: dict[int, int] = {}  # office action -> its triage request
        self.translator = Stream("translate", 0, [], live=False)
        self.lit_days: list[list[int]] = [[], []]
        for d in (0, 1):
            self.plan_day(d)
            self.at(d * DAY + rng.uniform(*FAMILY_HOURS) * HOUR, "family", d)
            self.at(d * DAY + rng.uniform(*LANDSCAPE_HOURS) * HOUR, "landscape", d)
            for _ in range(poisson(rng, MAIL * scale)):
                self.at(d * DAY + rng.uniform(7.0, 10.0) * HOUR, "mail", d)

    def plan_day(self, d: int) -> None:
        """Day ``d``'s searches: prosecution ones by matter weight; on a litigation-led day
        2..3 litigations run 2..3 large invalidity searches each, else one runs a small one."""
        rng, mode = self.rng, self.modes[d]
        for _ in range(poisson(rng, PROS_SEARCHES[mode] * self.scale)):
            m = self.matter_by_weight("pros")
            n = pick(rng, PAGES) * BATCH["screen"]
            self.at_local(d, self.office_hour(), self.matters[m].tz, "search",
                          (m, "screen", n, None))
        lits = [m for m, x in enumerate(self.matters) if x.kind == "lit"]
        if mode == "lit":
            active = rng.sample(lits, rng.randint(*LIT_ACTIVE))
            searches, pages = LIT_SEARCHES, LIT_PAGES
        else:
            active, searches, pages = [rng.choice(lits)], (1, 1), QUIET_LIT
        self.lit_days[d] = active
        for m in active:
            for _ in range(rng.randint(*searches)):
                n = max(1, round(rng.randint(*pages) * self.scale)) * BATCH["invalidity"]
                self.at_local(d, self.office_hour(), self.matters[m].tz, "search",
                              (m, "invalidity", n, None))

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds until a stream's next request: reading the prompt, writing the output."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25)

    def start(self, s: Stream, delay: float = 0.0) -> None:
        s.live = True
        self.at(self.now + delay, "stream", s)

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item (a finished walk's ``finished`` hook runs once)."""
        if s.pos >= len(s.items):
            if s.live:
                s.live = False
                self.finished(s)
            return
        item = s.items[s.pos]
        s.pos += 1
        segs = getattr(self, "prompt_" + s.kind)(s, item)
        s.sent.append(self.emit(s.kind, s.owner, s.pos - 1, segs))
        self.at(self.now + self.pace(segs, s.kind), "stream", s)

    def _on_search(self, arg: tuple[int, str, int, float | None]) -> None:
        """A search for matter ``m``: its ranked hits, read in order."""
        m, kind, n, amended = arg
        s = Stream(kind, len(self.searches), self.ranked(m, n, REPEAT[kind]))
        self.searches.append(Search(m, kind, min(1, int(self.now // DAY)), s, amended))
        self.start(s)

    def prompt_screen(self, s: Stream, d: int) -> list[Segment]:
        """A hit read against the claims: system prompt, instruction, the claims as they
        stand, the document as shown, the cue. A foreign hit near the top is translated."""
        if s.pos <= TRANSLATE_TOP:
            self.translate(d)
        m = self.searches[s.owner].matter
        return [*self.head(s.kind), *self.claim_segs(m), *self.shown(d), self.cue[s.kind]]

    prompt_invalidity = prompt_screen

    def finished(self, s: Stream) -> None:
        """A search done: a prosecution one may chart a key reference against the first
        independent claim; an invalidity one charts 2..5 more against the asserted claims."""
        if s.kind not in ("screen", "invalidity"):
            return
        rng, m = self.rng, self.searches[s.owner].matter
        matter, claims = self.matters[m], self.matters[m].claims(self.now)
        charted = {c.doc for c in self.charts if c.matter == m}
        ready = [d for d in matter.keys if self.docs[d].english and d not in charted]
        for d in matter.keys[:2]:
            self.translate(d)
        if s.kind == "screen":
            refs, covered = ready[:1] if rng.random() < CHART_PROS else [], 1
        else:
            k = max(1, round(rng.randint(*CHART_LIT) * self.scale))
            refs, covered = ready[:k], rng.randint(*CHART_CLAIMS)
        indep = [i for i, c in enumerate(claims) if c.indep][:covered]
        for d in refs:
            rows = [(i, e, p) for i in indep for e in range(len(claims[i].elements))
                    for p in (0, 1) if p == 0 or rng.random() < REVISE]
            st = Stream("chart", len(self.charts), rows)
            self.charts.append(Chart(m, d, claims, st))
            self.start(st, rng.uniform(5, 30) * MINUTE)

    def prompt_chart(self, s: Stream, row: tuple[int, int, int]) -> list[Segment]:
        """A chart row: system prompt, instruction, the claims as charted, the reference in
        full, the element, (on a second pass the attorney's note,) the cue."""
        chart, (i, e, p) = self.charts[s.owner], row
        note = [self.new(clipped_length(self.rng, *NOTE))] if p else []
        return [*self.head("chart"), *(c.seg for c in chart.claims),
                *self.shown(chart.doc, full=True), chart.claims[i].elements[e], *note,
                self.cue["chart"]]

    def translate(self, d: int) -> None:
        """Queue foreign document ``d`` for the translator, section by section."""
        doc = self.docs[d]
        if doc.english is None and not doc.queued:
            doc.queued = True
            self.translator.items += [(d, k) for k in range(len(doc.source))]
            if not self.translator.live:
                self.start(self.translator)

    def prompt_translate(self, s: Stream, item: tuple[int, int]) -> list[Segment]:
        """A source section: system prompt, instruction, the language's glossary, the
        section, the cue. After the last the document reads in English (new text)."""
        d, k = item
        doc = self.docs[d]
        segs = [*self.head("translate"), self.glossary[doc.lang], doc.source[k],
                self.cue["translate"]]
        if k == len(doc.source) - 1:
            front, *rest = [self.new(n) for _, n in doc.source]
            doc.english, doc.translated = (front, rest), self.now
        return segs

    def _on_family(self, night: int) -> None:
        """The night's family and citation walk: matters searched the day before (the first
        night: a sample), each key reference's family and citations in turn."""
        rng = self.rng
        if night == 0:
            pros = [m for m, x in enumerate(self.matters) if x.kind == "pros"]
            ms = rng.sample(pros, max(2, round(FAMILY[1] * self.scale)))
        else:
            day = dict.fromkeys(s.matter for s in self.searches if s.day == 0)
            ms = [m for m in day if self.matters[m].kind == "lit" or rng.random() < FAMILY[0]]
        items = []
        for m in ms:
            matter = self.matters[m]
            for _ in matter.keys[:rng.randint(*FAMILY_REFS)]:
                n = clipped_length(rng, *CITES[matter.kind])
                n = max(5, round(n * self.scale)) if matter.kind == "lit" else n
                items += [(m, self.doc(matter.area, self.rank_draw(AREA_DOCS))
                           if rng.random() < IN_INDEX else -1) for _ in range(n)]
        self.walks.append((night, s := Stream("family", len(self.walks), items)))
        self.start(s)

    def prompt_family(self, s: Stream, item: tuple[int, int]) -> list[Segment]:
        """A citation triaged against the claims: system prompt, instruction, the claims as
        they stand, the citation's front page (one-off if outside the index), the cue."""
        m, d = item
        front = self.shown(d)[:1] if d >= 0 else [self.new(clipped_length(self.rng, *FRONT))]
        return [*self.head("family"), *self.claim_segs(m), *front, self.cue["family"]]

    def _on_landscape(self, night: int) -> None:
        """The night's landscape reports (night 1 may refresh a night-0 one first)."""
        rng = self.rng
        for k in range(pick(rng, REPORTS)):
            old = [r for r, x in enumerate(self.reports) if x.refreshes is None]
            if night and not k and old and rng.random() < REFRESH[0]:
                self.refresh(old[0])
                continue
            area = rng.choices(range(len(self.area_weight)), self.area_weight)[0]
            n = max(20, round(rng.randint(*REPORT_DOCS) * self.scale))
            docs = [self.doc(area, r) for r in range(n)]
            self.report(area, self.new(clipped_length(rng, *TAXONOMY)), docs, {}, None)

    def report(self, area: int, taxonomy: Segment, docs: list[int], cluster: dict[int, int],
               refreshes: int | None) -> None:
        """A report walking ``docs`` then summarising each cluster (negative items)."""
        k = max(cluster.values()) + 1 if cluster else self.rng.randint(*CLUSTERS)
        for d in docs:
            cluster.setdefault(d, self.rng.randrange(k))
        s = Stream("landscape", len(self.reports), [*docs, *(-c - 1 for c in range(k))])
        self.reports.append(Report(area, taxonomy, docs, cluster, s, refreshes=refreshes))
        self.start(s)

    def refresh(self, r: int) -> None:
        """Report ``r`` again, its documents plus the week's new publications of the area."""
        old, rng = self.reports[r], self.rng
        new = round(len(old.docs) * rng.uniform(*REFRESH[1]))
        docs = list(dict.fromkeys([*old.docs, *(self.doc(old.area, self.rank_draw(AREA_DOCS))
                                                 for _ in range(new))]))
        self.report(old.area, old.taxonomy, docs, dict(old.cluster), r)

    def prompt_landscape(self, s: Stream, item: int) -> list[Segment]:
        """A document classified under the taxonomy (system prompt, instruction, taxonomy,
        front page, cue), or a cluster's summary over its documents' outputs."""
        rep = self.reports[s.owner]
        if item >= 0:
            rep.outputs[item] = self.new(clipped_length(self.rng, *OUTPUT["landscape"]))
            return [*self.head("landscape"), rep.taxonomy, *self.shown(item)[:1],
                    self.cue["landscape"]]
        digest = [rep.outputs[d] for d in rep.docs if rep.cluster[d] == -item - 1][:DIGEST]
        return [*self.head("landscape"), rep.taxonomy, *digest, self.cue["cluster"]]

    def _on_mail(self, day: int) -> None:
        """An office action arrives on a prosecution matter and is triaged at once: system
        prompt, instruction, the rejection, the cue; its foreign references go to the
        translator."""
        oa = self.office_action(self.matter_by_weight("pros"), self.now)
        segs = [*self.head("triage"), *self.oas[oa].rejection, self.cue["triage"]]
        self.triaged[oa] = self.emit("triage", oa, 0, segs)
        for d, _ in self.oas[oa].cited:
            self.translate(d)
        self.oa_arrived(oa)

    def oa_arrived(self, oa: int) -> None:
        """A hook for the desk (the response's drafting sessions)."""
