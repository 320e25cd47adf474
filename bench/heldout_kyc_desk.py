"""bench.heldout's ``bank_kyc`` shape, the analysts' side: chats over a case file (escalated
alerts, enhanced-due-diligence onboardings), suspicious-activity reports drafted from the
jurisdiction's template and revised after review, adverse-media checks reading news articles
once, the regulatory-change burst when a guidance note lands (a gap-analysis walk over the
policy, every analyst asking about the note, an erratum, the policy amended the next
morning), internal audit's sampling walks over closed cases and the policy FAQ bot. See
bench/heldout_bank_kyc.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_kyc_jobs import FINDINGS, WINDOW, Case, Jobs
from bench.heldout_kyc_parts import (BEFORE, DAY, DECODE, HOUR, MINUTE, PROFILE, SECTION, TYPES,
                                     Stream)
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_recruit_parts import sections

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"chat": (900, (4, 0.6, 2, 12), (40, 0.9, 6, 400), (250, 0.5, 60, 900), (60.0, 1.0)),
         "guidance": (900, (2, 0.6, 1, 4), (50, 0.8, 8, 300), (300, 0.5, 80, 900),
                      (45.0, 0.8)),
         "faq": (600, (2, 0.6, 1, 5), (30, 0.7, 6, 200), (180, 0.5, 50, 500), (40.0, 0.8))}
MAX_CONTEXT = 32000  # tokens of a chat's context that end it
CHAT_CASE = 0.75  # new cases an analyst chats over, 10..90 minutes later (on duty)
SAR = 0.5  # escalated alerts that get a suspicious-activity report, 1..6 h later
MEDIA_CASE = 0.3  # escalated alerts that get an adverse-media check (EDD ones all do)
SAR_SYSTEM, SAR_CUE = 700, 50
NOTES = (400, 0.5, 200, 800)  # tokens of the analyst's notes for the SAR
DRAFT = (1300, 0.4, 800, 2000)  # tokens of a SAR draft
COMMENTS = (200, 0.6, 80, 400)  # tokens of the reviewer's comments on a draft
REVISIONS = ((0, 0.4), (1, 0.35), (2, 0.2), (3, 0.05))  # 30..180 minutes apart (on duty)
MEDIA_SYSTEM, MEDIA_CUE = 700, 40
ARTICLES = (8, 0.6, 3, 25)  # news articles a check reads
ARTICLE = (1100, 0.6, 400, 3000)  # tokens of an article
MEDIA_NOTE = (120, 0.5, 40, 300)  # tokens of the check's note per article
NOTE = (6000, 0.4, 3500, 11000)  # tokens of the guidance note, 800-token sections
NOTE_HOURS = (9.5, 15.0)  # when it lands, on day 0 or 1
SESSIONS = (80, 180)  # analysts' sessions about it at scale 1.0
SESSION_DELAY = (5 * MINUTE, 1.2 * HOUR)  # after it lands: the first plus Exp(mean)
RETRIEVE = 0.5  # sessions that pull in one section of a policy chapter
ERRATUM = (0.3, 1.0, 3.0)  # seeds whose note is corrected, hours after it lands
AMEND = (0.6, 8.0, 9.5, (2, 4))  # a day-0 note: the policy amended on day 1 (seeds, hours,
# sections)
GAP_SYSTEM, GAP_CUE = 800, 40
AUDIT_SYSTEM, AUDIT_CUE = 1000, 40
CHECKLIST = (2200, 0.3, 1500, 3000)  # tokens of audit's checklist per case kind
DISPOSITION = (400, 0.5, 200, 800)  # tokens of a closed case's disposition memo
AUDITS = ((13.0, 15.0), (34.0, 36.0), (39.0, 40.0))  # runs (hours); the third on half the seeds
SAMPLE = (60, 0.3, 30, 120)  # cases a run samples at scale 1.0
FROM_TRACE = 0.3  # of them (at most) closed during the trace, the rest before
FAQ = (4000, 0.4, 2500, 8000)  # tokens of the policy FAQ, 500-token sections
FAQS = 130  # FAQ sessions a day at scale 1.0 (analysts' hours)


# a Chat's owner is its case (0 for guidance and faq); what it holds fixed after its head:
# guidance, a retrieved policy section


@dataclass
class Report:
    """A SAR: its case, the case file as exported, the notes, drafts and comments, requests."""

    case: int
    file: list[Segment]
    notes: Segment
    drafts: list[Segment] = field(default_factory=list)
    comments: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(Jobs):
    """The whole replica: the world and the jobs (``Jobs``) and the analysts' side."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        new = self.new
        self.chat_system = {k: new(v[0]) for k, v in CHATS.items()}
        self.sar_system, self.sar_cue = new(SAR_SYSTEM), new(SAR_CUE)
        self.media_system, self.media_cue = new(MEDIA_SYSTEM), new(MEDIA_CUE)
        self.gap_system, self.gap_cue = new(GAP_SYSTEM), new(GAP_CUE)
        self.audit_system, self.audit_cue = new(AUDIT_SYSTEM), new(AUDIT_CUE)
        self.checklists = {k: new(clipped_length(rng, *CHECKLIST)) for k in ("alert", "onboard")}
        self.faq = Versioned([(BEFORE, sections(new, clipped_length(rng, *FAQ), 500))])
        self.chats: list[Chat] = []
        self.reports: list[Report] = []
        self.media: list[tuple[int, int | None, Stream]] = []  # (customer, case, walk)
        self.media_queue: list[int] = []
        self.summaries: dict[int, Segment] = {}
        self.memos: dict[int, Segment] = {}
        self.audits: list[Stream] = []
        self.gaps: list[Stream] = []
        self.plan_guidance()
        for k, (lo, hi) in enumerate(AUDITS):
            if k < 2 or rng.random() < 0.5:
                self.at(rng.uniform(lo, hi) * HOUR, "audit", k)
        for d in (0, 1):
            for _ in range(poisson(rng, FAQS * scale)):
                self.at(self.staff_time(d), "chat", ("faq", 0, False))

    def plan_guidance(self) -> None:
        """The guidance note's landing on day 0 or 1, its erratum (some seeds) and the policy
        amendment the next morning (some seeds whose note lands on day 0)."""
        rng = self.rng
        self.landed = rng.choice((0, 1)) * DAY + rng.uniform(*NOTE_HOURS) * HOUR
        self.note = Versioned([(self.landed, sections(self.new, clipped_length(rng, *NOTE),
                                                      800))])
        self.at(self.landed, "guidance", None)
        self.erratum = self.amended = None
        if rng.random() < ERRATUM[0]:
            self.erratum = self.landed + rng.uniform(*ERRATUM[1:]) * HOUR
            self.at(self.erratum, "erratum", None)
        if self.landed < DAY and rng.random() < AMEND[0]:
            self.amended = DAY + rng.uniform(*AMEND[1:3]) * HOUR
            self.at(self.amended, "amend", None)

    def chat_head(self, chat: Chat) -> list[Segment]:
        """What a chat's turn sends before its history."""
        sys = self.chat_system[chat.kind]
        if chat.kind == "chat":
            return [sys, *self.cases[chat.owner].file]
        if chat.kind == "guidance":
            return [sys, *self.note.at(self.now), *chat.fixed]
        return [sys, *self.faq.at(self.now)]

    def _on_chat(self, spec: tuple[str, int, bool]) -> None:
        """A chat starts (a guidance session may retrieve a policy section, fixed after the
        note) with its first turn."""
        kind, owner, retrieve = spec
        rng = self.rng
        fixed = [rng.choice(self.policy[pick(rng, TYPES)].at(self.now))] if retrieve else []
        turns = clipped_length(rng, *CHATS[kind][1])
        self.chats.append(Chat(kind, owner, turns, fixed))
        self._on_turn(len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause = CHATS[chat.kind]
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.chat_head(chat), msg, reply,
                              (chat.kind, n, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / DECODE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)

    def opened(self, n: int) -> None:
        """A new case: an analyst's chat over it, a SAR (escalated alerts), a media check."""
        rng, case = self.rng, self.cases[n]
        if rng.random() < CHAT_CASE:
            when = self.next_duty(self.now + rng.uniform(10, 90) * MINUTE)
            self.at(when, "chat", ("chat", n, False))
        if case.kind == "onboard" or rng.random() < MEDIA_CASE:
            self.check(case.customer, n)
        if case.kind == "alert" and rng.random() < SAR:
            self.at(self.next_duty(self.now + rng.uniform(1, 6) * HOUR), "sar", n)

    def _on_sar(self, n: int) -> None:
        """The analyst exports the case file and writes notes; the first draft."""
        notes = self.new(clipped_length(self.rng, *NOTES))
        self.reports.append(Report(n, list(self.cases[n].file), notes))
        self._on_draft((len(self.reports) - 1, 1 + pick(self.rng, REVISIONS)))

    def _on_draft(self, arg: tuple[int, int]) -> None:
        """A draft: system prompt, the template, the case file, the notes (a revision: then
        the last draft and the reviewer's comments on it), cue."""
        r, left = arg
        rep, rng = self.reports[r], self.rng
        tail = [rep.drafts[-1], rep.comments[-1]] if rep.drafts else []
        jur = self.jurs[self.customers[self.cases[rep.case].customer].jur]
        segs = [self.sar_system, jur.sar, *rep.file, rep.notes, *tail, self.sar_cue]
        rep.sent.append(self.emit("sar", r, len(rep.sent), segs))
        rep.drafts.append(self.new(clipped_length(rng, *DRAFT)))
        if left > 1:
            rep.comments.append(self.new(clipped_length(rng, *COMMENTS)))
            when = self.next_duty(self.now + rng.uniform(30, 180) * MINUTE)
            self.at(when, "draft", (r, left - 1))

    def check(self, c: int, case: int | None = None) -> None:
        """An adverse-media check on customer ``c`` joins the media job's queue."""
        self.media_queue.append(len(self.media))
        self.media.append((c, case, None))
        if len(self.media_queue) == 1:
            self.next_check()

    def next_check(self) -> None:
        """The media job reads one check at a time: each article (the profile, the article,
        cue), then a summary over its notes that joins the case file, if any."""
        m = self.media_queue[0]
        c, case, _ = self.media[m]
        k = clipped_length(self.rng, *ARTICLES)
        notes: list[Segment] = []

        def prompt(i: int) -> tuple:
            body = self.new(clipped_length(self.rng, *ARTICLE)) if i < k else None
            segs = [self.media_system, self.profile(c), *([body] if body else notes),
                    self.media_cue]
            notes.append(self.new(clipped_length(self.rng, *MEDIA_NOTE)))
            return "media", m, i, segs

        self.media[m] = (c, case, self.walk(Stream(list(range(k + 1)), prompt,
                                                   lambda: self.checked(m, notes[-1]))))

    def checked(self, m: int, summary: Segment) -> None:
        """A check is done: its summary joins the case file (if any); the next one starts."""
        _, case, _ = self.media[m]
        self.summaries[m] = summary
        if case is not None:
            self.cases[case].file.append(summary)
        self.media_queue.pop(0)
        if self.media_queue:
            self.next_check()

    def policy_sections(self) -> list[Segment]:
        """Every section of the policy as it stands: the chapters, periodic, screening."""
        docs = [*(self.policy[t] for t, _ in TYPES), self.periodic, self.screening]
        return [s for d in docs for s in d.at(self.now)]

    def _on_guidance(self, _: None) -> None:
        """The note lands: the gap analysis walks the policy against it; analysts ask."""
        rng = self.rng
        when = self.now + rng.uniform(30, 60) * MINUTE
        secs, g = self.policy_sections(), len(self.gaps)
        self.gaps.append(self.walk(Stream(list(range(len(secs))), lambda i: (
            "gap", g, i, [self.gap_system, *self.note.at(self.now), secs[i], self.gap_cue])),
            when))
        for _ in range(round(rng.uniform(*SESSIONS) * self.scale)):
            t = self.now + SESSION_DELAY[0] + rng.expovariate(1 / SESSION_DELAY[1])
            if (t := self.next_duty(t)) < self.END:
                self.at(t, "chat", ("guidance", 0, rng.random() < RETRIEVE))

    def _on_erratum(self, _: None) -> None:
        """A section of the note is corrected (blocks from it on are new)."""
        secs = list(self.note.current)
        k = self.rng.randrange(len(secs))
        secs[k] = self.new(secs[k][1])
        self.note.versions.append((self.now, secs))

    def _on_amend(self, _: None) -> None:
        """The bank amends its policy after the gap analysis: a few sections of its chapters
        replaced; the FAQ gets a new section at its end."""
        rng = self.rng
        docs = [*(self.policy[t] for t, _ in TYPES), self.periodic]
        for _ in range(rng.randint(*AMEND[3])):
            doc = rng.choice(docs)
            secs = list(doc.current)
            k = rng.randrange(len(secs))
            secs[k] = self.new(clipped_length(rng, SECTION, 0.3, 300, 1000))
            doc.versions.append((self.now, secs))
        self.faq.versions.append((self.now, [*self.faq.current, self.new(500)]))

    def _on_audit(self, k: int) -> None:
        """Audit samples closed cases (some closed during the trace, the rest before it) and
        walks them: system, the case kind's checklist, the file, the disposition, cue."""
        rng = self.rng
        size = max(3, round(clipped_length(rng, *SAMPLE) * self.scale))
        closed = [n for n, c in enumerate(self.cases) if c.owner >= 0
                  and c.closed is not None and c.closed <= self.now]
        picks = sorted(rng.sample(closed, min(len(closed), round(FROM_TRACE * size))))
        past = [self.past_case() for _ in range(size - len(picks))]
        s = Stream([*past, *picks], lambda n: ("audit", k, n, self.audit_prompt(n)))
        self.audits.append(self.walk(s))

    def past_case(self) -> int:
        """A case closed before the trace: an alert's or an onboarding's file."""
        rng = self.rng
        c = rng.randrange(len(self.customers))
        kind = "alert" if rng.random() < 0.7 else "onboard"
        file = [self.profile(c), self.new(clipped_length(rng, *WINDOW)),
                self.new(clipped_length(rng, *FINDINGS))]
        if kind == "onboard":
            file[1] = self.new(clipped_length(rng, *PROFILE))
        self.cases.append(Case(kind, -1, c, file, BEFORE))
        return len(self.cases) - 1

    def audit_prompt(self, n: int) -> list[Segment]:
        case = self.cases[n]
        if n not in self.memos:
            self.memos[n] = self.new(clipped_length(self.rng, *DISPOSITION))
        return [self.audit_system, self.checklists[case.kind], *case.file, self.memos[n],
                self.audit_cue]
