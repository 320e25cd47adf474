"""bench.heldout's ``permits_office`` shape, the people's side: applicants' chats about a
permit type's requirements (the type's guide and fee section up front, code sections
retrieved into each turn), the burst of questions after a policy change (the fee schedule or
a code amendment re-issued, sometimes corrected hours later), inspectors' chats in the field
over the permit file as it stands (each result joins the file), zoning lookups over a
district's regulations and a parcel record (a contested project's parcel drawing a crowd on
some seeds), and the translation desk. See bench/heldout_permits_office.py's docstring for
the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_permit_jobs import Jobs
from bench.heldout_permit_parts import CHAPTERS, DAY, DISTRICTS, HOUR, MINUTE, hour_of

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"applicant": (1100, (2, 0.6, 1, 10), (45, 0.9, 6, 400), (260, 0.5, 60, 900),
                       (50.0, 0.9)),
         "policy": (900, (2, 0.5, 1, 6), (40, 0.8, 6, 300), (220, 0.5, 60, 700), (40.0, 0.8)),
         "inspect": (900, (2, 0.5, 1, 5), (35, 0.8, 8, 200), (150, 0.5, 40, 500), (90.0, 0.8)),
         "zoning": (800, (1.5, 0.5, 1, 5), (40, 0.8, 8, 300), (200, 0.5, 60, 600), (45.0, 0.8))}
RATE = 35.0  # tokens a second a reply decodes at
MAX_CONTEXT = 20000  # tokens of a chat's context that end it
APPLICANTS = 170  # applicant chats a day at scale 1.0
PUBLIC_HOURS = (0.1, 0.05, 0.03, 0.02, 0.02, 0.05, 0.2, 0.5, 0.9, 1.0, 1.0, 1.0, 1.1, 1.0,
                1.0, 0.9, 0.8, 0.6, 0.5, 0.6, 0.7, 0.6, 0.4, 0.2)
STATUS = 0.2  # applicant chats about one's own permit (its file after the fee section)
RETRIEVE = (1, 3)  # code sections retrieved into each applicant turn
INSPECTORS = 20  # field inspectors at scale 1.0 (at least 3)
ROUTE = ((6, 12), (7.5, 8.25), (25.0, 50.0))  # stops a day, first stop (hours), minutes each
FAIL = (0.3, 0.6)  # inspections that fail, and of those re-inspected the next day
ZONINGS = 160  # zoning lookups a day at scale 1.0
ZONING_HOURS = (0.5, 1.0, 1.0, 1.0, 0.9, 1.0, 1.0, 1.0, 0.9, 0.7, 0.4, 0.4, 0.4, 0.3)  # 07..20
ON_PERMIT = 0.35  # zoning lookups on the parcel of a permit in the system
HOT = (0.5, (60, 150), (9.0, 11.0), 3 * HOUR)  # seeds with a contested project, its lookups
# on day 1 (x scale), the hours its staff report is published, their mean delay
REPORT = (3500, 0.3, 2000, 6000)  # tokens of the contested project's staff report
CHANGE = (("fee", 0.45), ("code", 0.35), ("both", 0.2))  # what a seed's policy change re-issues
CHANGE_HOURS = (9.5, 14.0)  # when, on day 0 or 1
AMEND = ((1, 2), 8, (1, 3))  # chapters amended (of the 8 most popular), sections each
BURST = ((150, 300), 1.5 * HOUR)  # policy sessions after a change (x scale), mean delay
NOTICE_TOKENS = (900, 0.4, 400, 2000)  # tokens of the change's notice
REISSUE = (0.3, (1.0, 3.0))  # changes whose notice is corrected, hours after
TRANSLATES = 110  # translation requests a day at scale 1.0, office hours 08..17
LANGS = (0.45, 0.2, 0.15, 0.1, 0.1)  # Spanish, Chinese, Vietnamese, Tagalog, Korean
SOURCE = (("fresh", 0.5), ("letter", 0.35), ("code", 0.15))  # what the desk translates
TEXT = (350, 0.8, 60, 2500)  # tokens of a fresh text (a letter, an applicant's message)


@dataclass
class Chat:
    """A chat: kind, owner (type, permit or parcel), turns left, the content it holds fixed
    after the head (a permit's file, the staff report), the topic of a policy chat (types
    whose fees it asks about, empty for the amended code), history and request indices."""

    kind: str
    owner: int
    turns: int
    fixed: list[Segment] = field(default_factory=list)
    topic: list[int] = field(default_factory=list)
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the city, the jobs (``Jobs``) and the people's chats."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.langs = [(self.new(clipped_length(rng, 500, 0.3, 300, 800)),
                       self.new(clipped_length(rng, 1000, 0.3, 600, 1600))) for _ in LANGS]
        self.translate_system, self.translate_cue = self.new(450), self.new(25)
        self.chats: list[Chat] = []
        self.translations: list[tuple[int, int, str]] = []  # (request, language, source)
        self.reinspect: dict[int, list[int]] = {0: [], 1: [], 2: []}
        self.inspections: list[tuple[int, int, float]] = []  # (permit, chat, result time)
        self.change, self.amended = pick(rng, CHANGE), []
        self.changed: list[float] = []  # when the change, then its correction, came out
        self.notice = Versioned([])
        self.at(rng.choice((0, 1)) * DAY + rng.uniform(*CHANGE_HOURS) * HOUR, "change", None)
        self.hot = self.plan_hot()
        for d in (0, 1):
            self.daily(d, APPLICANTS, PUBLIC_HOURS, 0, "applicant")
            self.daily(d, ZONINGS, ZONING_HOURS, 7, "zoning")
            self.daily(d, TRANSLATES, (1.0,) * 9, 8, "translate")
            for _ in range(max(3, round(INSPECTORS * scale))):
                self.at(d * DAY + rng.uniform(*ROUTE[1]) * HOUR, "stop",
                        (d, rng.randint(*ROUTE[0])))

    def daily(self, d: int, rate: float, hours: tuple, first: int, name: str) -> None:
        """Day ``d``'s ``rate`` x scale events (Poisson) at hours by ``hours`` from ``first``."""
        for _ in range(poisson(self.rng, rate * self.scale)):
            self.at(d * DAY + hour_of(self.rng, hours, first) * HOUR, name, None)

    def head(self, chat: Chat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        sys = self.chat_system[chat.kind]
        if chat.kind == "applicant":
            kind = self.kinds[chat.owner]
            return [sys, kind.guide, *kind.fees.at(self.now), *chat.fixed]
        if chat.kind == "policy":
            topic = [s for k in chat.topic for s in self.kinds[k].fees.at(self.now)]
            return [sys, *self.notice.at(self.now), *(topic or self.code(self.amended))]
        if chat.kind == "inspect":
            permit = self.permits[chat.owner]
            return [sys, self.kinds[permit.kind].inspection, *permit.file()]
        district, record = self.parcels[chat.owner]
        return [sys, *self.districts[district], record, *chat.fixed]

    def retrieve(self, k: int) -> list[Segment]:
        """Code sections retrieved for an applicant's question about type ``k``: chapters of
        its disciplines by popularity, early sections (general requirements) more often."""
        rng, discs = self.rng, self.kinds[k].discs
        mine = [c for c in range(CHAPTERS) if self.discipline_of[c] in discs]
        out = []
        for c in rng.choices(mine, [self.chapter_weight[c] for c in mine],
                             k=rng.randint(*RETRIEVE)):
            n = len(self.chapters[c].at(self.now))
            out.append((c, rng.choices(range(n), [1 / (i + 1) for i in range(n)])[0]))
        return self.code(out)

    def start(self, chat: Chat) -> int:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)
        return len(self.chats) - 1

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, retrieved code (applicants), the message; what was
        retrieved, the message and the reply join the history."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause = CHATS[chat.kind]
        extra = self.retrieve(chat.owner) if chat.kind == "applicant" else []
        msg = self.new(clipped_length(rng, *message))
        segs = [*self.head(chat), *chat.history, *extra, msg]
        chat.sent.append(self.emit(chat.kind, n, len(chat.sent), segs))
        out = self.new(clipped_length(rng, *reply))
        chat.history += [*extra, msg, out]
        chat.turns -= 1
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)

    def turns(self, kind: str) -> int:
        return clipped_length(self.rng, *CHATS[kind][1])

    def _on_applicant(self, _: object) -> None:
        """An applicant asks about a permit type (by weight); some about their own permit,
        whose file as it stands follows the fee section."""
        rng = self.rng
        fixed, k = [], rng.choices(range(len(self.kinds)), [x.weight for x in self.kinds])[0]
        if rng.random() < STATUS:
            p = rng.randrange(len(self.permits))
            k, fixed = self.permits[p].kind, self.permits[p].file()
        self.start(Chat("applicant", k, self.turns("applicant"), fixed))

    def _on_stop(self, arg: tuple[int, int]) -> None:
        """An inspector's next stop on day ``d``: a re-inspection due that day, else an issued
        permit; a chat over its file a few minutes in; the result joins the file at the end."""
        d, left = arg
        rng = self.rng
        if self.reinspect[d]:
            p = self.reinspect[d].pop(0)
        else:
            p = rng.choice([q for q, x in enumerate(self.permits) if x.state == "issued"])
        length = rng.uniform(*ROUTE[2]) * MINUTE
        chat = Chat("inspect", p, self.turns("inspect"))
        self.at(self.now + rng.uniform(2, 10) * MINUTE, "field", (chat, len(self.inspections)))
        self.at(self.now + length, "result", (d, p))
        self.inspections.append((p, -1, self.now + length))
        if left > 1:
            self.at(self.now + length + rng.uniform(5, 20) * MINUTE, "stop", (d, left - 1))

    def _on_field(self, arg: tuple[Chat, int]) -> None:
        """The inspector's chat at the site (recorded with its inspection)."""
        chat, k = arg
        p, _, end = self.inspections[k]
        self.inspections[k] = (p, self.start(chat), end)

    def _on_result(self, arg: tuple[int, int]) -> None:
        """An inspection's result joins the permit's file; a failed one may be re-inspected
        the next day."""
        d, p = arg
        self.note(p, self.entry())
        if self.rng.random() < FAIL[0] and self.rng.random() < FAIL[1]:
            self.reinspect[d + 1].append(p)

    def _on_zoning(self, _: object) -> None:
        """A zoning lookup: the parcel of a permit in the system, else any parcel."""
        rng = self.rng
        if rng.random() < ON_PERMIT:
            parcel = self.permits[rng.randrange(len(self.permits))].parcel
        else:
            parcel = rng.randrange(len(self.parcels))
        self.start(Chat("zoning", parcel, self.turns("zoning")))

    def plan_hot(self) -> tuple[int, Segment, float] | None:
        """On HOT[0] of seeds a contested project: its parcel (in one of the 4 busiest
        districts) and staff report, published on day 1; lookups on it follow."""
        rng = self.rng
        if rng.random() >= HOT[0]:
            return None
        busy = sorted(range(DISTRICTS), key=lambda d: -self.district_weight[d])[:4]
        parcel = rng.choice([p for p, (d, _) in enumerate(self.parcels) if d in busy])
        report = self.new(clipped_length(rng, *REPORT))
        published = DAY + rng.uniform(*HOT[2]) * HOUR
        for _ in range(max(2, round(rng.randint(*HOT[1]) * self.scale))):
            t = published + rng.expovariate(1 / HOT[3])
            if t < self.END:
                self.at(t, "hot", None)
        return parcel, report, published

    def _on_hot(self, _: object) -> None:
        parcel, report, _ = self.hot
        self.start(Chat("zoning", parcel, self.turns("zoning"), [report]))

    def _on_change(self, _: object) -> None:
        """The policy change: the fee schedule re-issued (every type's fee section new),
        chapters amended (sections replaced), or both; a notice; the burst of questions;
        the notice translated into every language; on some seeds a correction after."""
        rng = self.rng
        self.changed.append(self.now)
        if self.change != "code":
            for kind in self.kinds:
                kind.fees.versions.append((self.now, [self.new(kind.fees.current[0][1])]))
        if self.change != "fee":
            self.amend()
        self.notice.versions.append((self.now, [self.new(clipped_length(rng, *NOTICE_TOKENS))]))
        for _ in range(max(2, round(rng.randint(*BURST[0]) * self.scale))):
            self.at(self.now + 5 * MINUTE + rng.expovariate(1 / BURST[1]), "burst", None)
        for lang in range(len(LANGS)):
            self.at(self.now + rng.uniform(20, 180) * MINUTE, "translate", ("notice", lang))
        if rng.random() < REISSUE[0]:
            self.at(self.now + rng.uniform(*REISSUE[1]) * HOUR, "reissue", None)

    def amend(self) -> None:
        """Sections of 1..2 of the most popular chapters replaced (a code amendment)."""
        rng = self.rng
        top = sorted(range(CHAPTERS), key=lambda c: -self.chapter_weight[c])[:AMEND[1]]
        for c in rng.sample(top, rng.randint(*AMEND[0])):
            secs = list(self.chapters[c].current)
            ks = rng.sample(range(len(secs)), min(len(secs), rng.randint(*AMEND[2])))
            for k in ks:
                secs[k] = self.new(max(100, round(secs[k][1] * rng.uniform(0.9, 1.3))))
                self.amended.append((c, k))
            self.chapters[c].versions.append((self.now, secs))
        self.amended.sort()

    def _on_reissue(self, _: object) -> None:
        """The notice corrected (and, for a fee change, a type's fee section again)."""
        self.changed.append(self.now)
        self.notice.versions.append((self.now, [self.new(self.notice.current[0][1])]))
        if self.change != "code":
            kind = self.rng.choice(self.kinds)
            kind.fees.versions.append((self.now, [self.new(kind.fees.current[0][1])]))

    def _on_burst(self, _: object) -> None:
        """A question after the change: about 1..2 types' fees, or the amended code."""
        rng = self.rng
        fees = self.change == "fee" or (self.change == "both" and rng.random() < 0.5)
        ks = rng.choices(range(len(self.kinds)), [x.weight for x in self.kinds],
                         k=rng.randint(1, 2)) if fees else []
        self.start(Chat("policy", -1, self.turns("policy"), topic=sorted(set(ks))))

    def _on_translate(self, arg: tuple[str, int] | None) -> None:
        """The translation desk: system prompt, the language's prompt and glossary, the text
        (fresh, a letter or notice template, a code section, or the change's notice)."""
        rng = self.rng
        source, lang = arg or (pick(rng, SOURCE), pick(rng, tuple(enumerate(LANGS))))
        if source == "fresh":
            text = [self.new(clipped_length(rng, *TEXT))]
        elif source == "letter":
            text = [rng.choice([*self.notices, *(k.letter for k in self.kinds)])]
        elif source == "code":
            text = self.retrieve(rng.randrange(len(self.kinds)))[:1]
        else:
            text = self.notice.at(self.now)
        segs = [self.translate_system, *self.langs[lang], *text, self.translate_cue]
        self.translations.append((self.emit("translate", lang, len(self.translations), segs),
                                  lang, source))
