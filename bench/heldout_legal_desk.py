"""bench.heldout's ``legal_review`` shape, the lawyers' desk: question sessions over a matter's
documents, drafting sessions that grow turn by turn, uploads summarized, negotiation rounds
(the counterparty's draft redlined against the last one and reviewed against the playbook, our
markup back), briefs revised before their deadline with citation checks. See
bench/heldout_legal_review.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_legal_matters import make_doc, matter
from bench.heldout_legal_parts import (DAY, FIRM_MIX, HOUR, MATTER_KINDS, RATE, Doc, Matter,
                                       firms, next_busy, revise)
from bench.heldout_meeting_parts import pick

SYSTEM = 800  # tokens of the product's system prompt (role, citation rules, confidentiality)
TASKS = {"ask": 120, "summary": 160, "draft": 220, "redline": 300, "issues": 260, "cite": 240,
         "extract": 200, "review": 180, "qc": 120}  # the task instructions' tokens
MATTERS = 4  # open matters a firm of mean size has at the start
DOC_CAP = 24_000  # tokens of documents an ask session holds at most
ASK_DOCS = ((0, 0.3), (1, 0.4), (2, 0.13), (3, 0.09), (5, 0.05), (8, 0.03))
ASK_TURNS = ((1, 0.4), (2, 0.2), (3, 0.15), (4, 0.1), (6, 0.1), (10, 0.05))
RESUME = {"ask": 0.12, "draft": 0.25}  # sessions taken up again hours or days later
CONTEXT_CAP = 180_000  # tokens at which a session ends
CITES = 3000  # brief tokens per citation-check request (about 12 citations)


@dataclass
class Session:
    """A lawyer's thread in a matter: "ask" (questions over documents, ``base`` the documents
    as selected when it began, in workspace order) or "draft" (``base`` the brief or contract
    version it drafts against, maybe nothing); turns left, the thread so far, whether it has
    been resumed, its request indices."""

    matter: int
    kind: str
    docs: list[int]
    base: list[Segment]
    turns: int
    thread: list[Segment] = field(default_factory=list)
    resumed: bool = False
    sent: list[int] = field(default_factory=list)


class Desk(EventState):
    """The interactive side. Every request's meta is (kind, matter, key, segments); the key is
    a session for "ask" and "draft", a document for "summary", "redline", "issues" and "cite"
    (the brief), a job for the batch kinds (bench/heldout_legal_jobs.py)."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.firms = firms(rng, self.new, scale)
        self.system = self.new(SYSTEM)
        self.tasks = {k: self.new(n) for k, n in TASKS.items()}
        self.docs: list[Doc] = []
        self.matters: list[Matter] = []
        self.sessions: list[Session] = []
        self.rounds: dict[int, int] = {}  # counterparty rounds left where no signing date

    def open(self, f: int, t: float) -> int:
        """Open a matter of firm ``f`` at ``t`` (0: before the trace) and plan its events."""
        rng, firm = self.rng, self.firms[f]
        kind = pick(rng, FIRM_MIX[firm.inhouse])
        self.matters.append(matter(rng, self.new, self.docs, f, kind, t))
        firm.matters.append(len(self.matters) - 1)
        self.plan(len(self.matters) - 1, t)
        return len(self.matters) - 1

    def plan(self, mid: int, t: float) -> None:
        """The first counterparty round of each negotiated contract within 3 days, each
        brief's revisions and citation checks."""
        m, rng, tz = self.matters[mid], self.rng, self.tz(mid)
        for d in m.negotiated:
            if not m.deadlines:
                self.rounds[d] = rng.randint(3, 8)
            self.at(next_busy(rng, t + rng.uniform(0, 3 * DAY), tz), "round", (mid, d, False))
        for b, due in zip(m.briefs, m.deadlines):
            self.at(next_busy(rng, max(t, due - 6 * DAY), tz), "revise", (mid, b, due))
            self.at(due - rng.uniform(2, 12) * HOUR, "cite", (mid, b, 0))
            if rng.random() < 0.3:
                self.at(due - rng.uniform(0.3, 2) * HOUR, "cite", (mid, b, 0))

    def tz(self, mid: int) -> float:
        return self.firms[self.matters[mid].firm].tz

    def head(self, mid: int, task: str, book: bool = False) -> list[Segment]:
        """System prompt, the firm's profile, its practice playbook as of now (``book``), the
        task, the matter's header."""
        m = self.matters[mid]
        firm = self.firms[m.firm]
        pb = firm.playbooks[MATTER_KINDS[m.kind]].at(self.now) if book else []
        return [self.system, firm.profile, *pb, self.tasks[task], m.header]

    def pick_docs(self, mid: int) -> list[int]:
        """ASK_DOCS documents by popularity, in workspace order, at most DOC_CAP tokens."""
        m, rng = self.matters[mid], self.rng
        order = list(range(len(m.docs)))
        want, chosen, total = pick(rng, ASK_DOCS), [], 0
        weights = list(m.pop)
        while order and len(chosen) < want:
            k = rng.choices(range(len(order)), weights)[0]
            size = sum(n for _, n in self.docs[m.docs[order[k]]].body())
            if total + size <= DOC_CAP or not chosen:
                chosen.append(order[k])
                total += size
            order.pop(k)
            weights.pop(k)
        return [m.docs[k] for k in sorted(chosen)]

    def _on_start(self, payload: tuple) -> None:
        """A new session: (matter, "ask" or "draft", documents or None to pick, base)."""
        mid, kind, docs, base = payload
        if kind == "ask":
            docs = self.pick_docs(mid) if docs is None else docs
            base = [s for d in docs for s in self.docs[d].body(self.now)]
        turns = pick(self.rng, ASK_TURNS) if kind == "ask" else clipped_length(
            self.rng, 4, 0.6, 2, 12)
        self.sessions.append(Session(mid, kind, docs or [], base or [], turns))
        self._on_turn(len(self.sessions) - 1)

    def _on_turn(self, sid: int) -> None:
        """The session's next question or drafting instruction after everything before it;
        the reply joins the thread; the next turn after reading time and think time, or
        (RESUME, once) hours or days later."""
        s, rng = self.sessions[sid], self.rng
        ask = s.kind == "ask"
        q = self.new(clipped_length(rng, 45, 0.8, 8, 400) if ask else
                     clipped_length(rng, 80, 0.9, 10, 600))
        segs = [*self.head(s.matter, s.kind, not ask), *s.base, *s.thread, q]
        s.sent.append(len(self.out))
        self.send(s.kind, s.matter, sid, segs)
        a = self.new(clipped_length(rng, 250, 0.7, 60, 2000) if ask else
                     clipped_length(rng, 450, 0.7, 120, 3000))
        s.thread += [q, a]
        s.turns -= 1
        if sum(n for _, n in segs) + a[1] > CONTEXT_CAP:
            return
        think = clipped_length(rng, 90, 1.0, 15, 3600) if ask else clipped_length(
            rng, 240, 1.0, 30, 5400)
        if s.turns > 0:
            self.at(self.now + a[1] / RATE + think, "turn", sid)
        elif not s.resumed and rng.random() < RESUME[s.kind]:
            s.resumed, s.turns = True, rng.randint(1, 4)
            later = self.now + rng.uniform(0.5, 3) * DAY
            self.at(next_busy(rng, later, self.tz(s.matter)), "turn", sid)

    def _on_upload(self, mid: int) -> None:
        """A lawyer adds a document to the matter and asks for a summary; 40 % go on to
        question it."""
        m, rng = self.matters[mid], self.rng
        self.docs.append(make_doc(rng, self.new, "upload"))
        d = len(self.docs) - 1
        m.docs.append(d)
        m.pop.append(rng.uniform(0.5, 2.0))
        self.send("summary", mid, d, [*self.head(mid, "summary"), *self.docs[d].body()])
        if rng.random() < 0.4:
            later = self.now + clipped_length(rng, 400, 0.4, 100, 1200) / RATE
            self.at(later + rng.uniform(30, 600), "start", (mid, "ask", [d], None))

    def signed(self, mid: int, d: int) -> bool:
        """Whether negotiation of ``d`` is over: the matter's signing date passed, or its
        counterparty rounds (where it has none) are used up."""
        m = self.matters[mid]
        if m.deadlines:
            return self.now > max(m.deadlines)
        return self.rounds[d] <= 0

    def _on_round(self, payload: tuple) -> None:
        """A new version of negotiated contract ``d``: the counterparty's draft (1..8 edits,
        1..3 in a crunch) is redlined against ours minutes to hours later and 30 % of the time
        drafted against; our markup (1..6 edits) goes back 0.6 days (median) later; their
        next draft comes 1.5 days (median) after ours; a crunch cuts the gaps to a quarter."""
        mid, d, ours = payload
        m, rng, doc = self.matters[mid], self.rng, self.docs[d]
        if self.signed(mid, d):
            return
        crunch = m.crunch(self.now)
        edits = rng.randint(1, 3 if crunch else 6 if ours else 8)
        doc.text.versions.append((self.now, revise(rng, self.new, doc.text.current, edits)))
        k = len(doc.text.versions) - 1
        if not ours:
            self.rounds[d] = self.rounds.get(d, 0) - 1
            self.at(self.now + clipped_length(rng, 1200, 1.0, 120, 14400), "redline",
                    (mid, d, k, ours))
            if rng.random() < 0.3:
                self.at(self.now + rng.uniform(1, 6) * HOUR, "start",
                        (mid, "draft", [d], list(doc.text.current)))
        elif rng.random() < 0.3:  # a change summary of our own markup
            self.at(self.now + rng.uniform(60, 1800), "redline", (mid, d, k, ours))
        gap = clipped_length(rng, 0.6 * DAY if not ours else 1.5 * DAY, 0.7, 0.1 * DAY, 6 * DAY)
        gap *= 0.25 if crunch else 1.0
        self.at(next_busy(rng, self.now + gap, self.tz(mid)), "round", (mid, d, not ours))

    def _on_redline(self, payload: tuple) -> None:
        """Compare version k-1 with version k (the second mostly the first's sections); for
        the counterparty's draft, a playbook review of it where the firm runs them, and half
        the time a question session over the new version."""
        mid, d, k, ours = payload
        rng, v = self.rng, self.docs[d].text.versions
        self.send("redline", mid, d, [*self.head(mid, "redline"), *v[k - 1][1], *v[k][1]])
        if ours:
            return
        later = self.now + clipped_length(rng, 900, 0.5, 200, 3000) / RATE
        if self.firms[self.matters[mid].firm].issues:
            self.at(later, "issues", (mid, d, k))
        if rng.random() < 0.5:
            self.at(later + rng.uniform(60, 1800), "start", (mid, "ask", [d], None))

    def _on_issues(self, payload: tuple) -> None:
        mid, d, k = payload
        self.send("issues", mid, d, [*self.head(mid, "issues", True),
                                     *self.docs[d].text.versions[k][1]])

    def _on_revise(self, payload: tuple) -> None:
        """A brief's next draft (1..6 edits) before its deadline; 35 % get a citation check
        and 15 % a drafting session against it; the next one 8 h on average (4 in a crunch)."""
        mid, b, due = payload
        if self.now >= due:
            return
        rng, text = self.rng, self.docs[b].text
        text.versions.append((self.now, revise(rng, self.new, text.current, rng.randint(1, 6))))
        if rng.random() < 0.35:
            self.at(self.now + rng.uniform(60, 900), "cite", (mid, b, 0))
        if rng.random() < 0.15:
            self.at(self.now + rng.uniform(60, 900), "start", (mid, "draft", [b],
                                                                list(text.current)))
        mean = (4 if self.matters[mid].crunch(self.now) else 8) * HOUR
        later = next_busy(rng, self.now + rng.expovariate(1 / mean), self.tz(mid))
        self.at(later, "revise", (mid, b, due))

    def _on_cite(self, payload: tuple) -> None:
        """A citation check over the brief as it stands: one request per CITES tokens of it,
        each the whole brief then that group's citations, one after another."""
        mid, b, k, *v = payload
        versions = self.docs[b].text.versions
        version = v[0] if v else len(versions) - 1  # a check reads one version throughout
        brief = versions[version][1]
        groups = math.ceil(sum(n for _, n in brief) / CITES)
        group = self.new(self.rng.randint(60, 200))
        self.send("cite", mid, b, [*self.head(mid, "cite"), *brief, group])
        if k + 1 < groups:
            reply = clipped_length(self.rng, 250, 0.5, 60, 900)
            self.at(self.now + reply / RATE + 1.0, "cite", (mid, b, k + 1, version))
