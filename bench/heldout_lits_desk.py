"""bench.heldout's ``lit_screen`` shape, the full-text side and the people: the PDF of each
record included at title and abstract is retrieved hours later and re-read against the
criteria (whole, or window by window), an included paper's data are extracted field group by
field group behind the review's extraction template (each group on its own, or one thread
per paper), its risk of bias is assessed domain by domain behind the tool's guidance (RoB 2
or ROBINS-I, shared by every review), reviewers chat with the assistant about one record or
paper, and one-off ad-hoc queries come in. See bench/heldout_lit_screen.py's docstring for
the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_lits_jobs import DECODE, Jobs, Stream
from bench.heldout_lits_world import HOUR, OFFICE, SITES
from bench.heldout_meeting_parts import pick

SYSTEM = {"fulltext": 500, "extract": 550, "rob": 500, "chat": 700, "adhoc": 250}
OUTPUT = {"fulltext": (200, 0.4, 60, 500), "extract": (300, 0.4, 100, 900),
          "rob": (180, 0.4, 60, 450)}  # tokens written (median, sigma, lo, hi)
FT_CUE = 45  # the full-text eligibility instruction
PAPER = (6500, 0.45, 2500, 20000)  # tokens of a paper's text (parsed from the PDF)
PAPER_SECTION = 1200  # tokens of a parsed section
TOOLS = {"rob2": (4200, 6), "robins": (5200, 8)}  # guidance tokens, domains (+ overall)
GUIDANCE_SECTION = 800
DOMAIN = (90, 0.3, 40, 200)  # tokens of a domain's signalling questions
RCT = 0.6  # papers that are randomised trials (RoB 2; else ROBINS-I)
BACKLOG = {"fulltext": (8, 0.5, 2, 30), "extract": (4, 0.5, 1, 15), "rob": (3, 0.5, 1, 12)}
# papers of each review waiting at the start for each stage (x scale, rounded at random)
RETRIEVE = (16 * HOUR, 0.8, 2 * HOUR, 72 * HOUR)  # from inclusion to the PDF's full-text run
FT_INCLUDE = (0.7, 0.15)  # P(included at full text) if relevant, if not
TO_EXTRACT = (3 * HOUR, 0.8, 0.3 * HOUR, 30 * HOUR)  # full-text inclusion to extraction
ROB_SHARE = 0.75  # extracted papers whose risk of bias is assessed during the trace
TO_ROB = (5 * HOUR, 0.8, 0.5 * HOUR, 30 * HOUR)  # extraction to the risk-of-bias walk
CHATS = 50  # reviewers' chats a day at scale 1.0 (by review weight, local 08..17)
TURNS, MESSAGE, REPLY = (3, 0.7, 1, 12), (40, 0.9, 6, 400), (220, 0.5, 60, 800)
PAUSE = (60.0, 1.0)  # seconds a reviewer takes after a reply (median, sigma)
TARGETS = (("conflict", 0.45), ("paper", 0.35), ("record", 0.2))  # what a chat is about
RECENT = 20  # a conflict chat picks one of the review's last adjudicated records
ADHOC = 70  # one-off queries a day at scale 1.0 (by site, local 08..19)
ADHOC_TEXT = (300, 1.0, 20, 4000)
ADHOC_HOURS = (*OFFICE, 0.3, 0.2)
MAX_CONTEXT = 32000  # tokens of a chat's context that end it


@dataclass
class Paper:
    """A retrieved paper: its record, review, parsed sections, risk-of-bias tool, and its
    walks (full text, extraction, risk of bias) once started."""

    rec: int
    review: int
    sections: list[Segment]
    tool: str
    walks: dict[str, Stream] = field(default_factory=dict)


@dataclass
class LitChat(Chat):
    """A Chat (owner: the review; fixed after the criteria: the record's text or the paper's
    sections), what it is about (TARGETS) and the record's id."""

    target: str = ""
    about: int = -1


class Desk(Jobs):
    """The whole replica: the world, the title-and-abstract walks (``Jobs``), the full-text
    walks, the reviewers' chats and the ad-hoc queries."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system.update({k: self.new(n) for k, n in SYSTEM.items()})
        self.cue["fulltext"] = self.new(FT_CUE)
        self.guidance = {t: [self.new(GUIDANCE_SECTION) for _ in range(n // GUIDANCE_SECTION)]
                         + [self.new(n % GUIDANCE_SECTION)] for t, (n, _) in TOOLS.items()}
        self.domains = {t: [self.new(clipped_length(rng, *DOMAIN)) for _ in range(d)]
                        for t, (_, d) in TOOLS.items()}
        self.papers: dict[int, Paper] = {}
        self.pending: set[int] = set()
        self.chats: list[LitChat] = []
        self.adhoc = 0
        for k in range(len(self.reviews)):
            self._backlog(k)
        self.daily(CHATS, [(rv.tz, rv.weight) for rv in self.reviews], OFFICE, 8, "chat")
        self.daily(ADHOC, list(SITES), ADHOC_HOURS, 8, "adhoc")

    def _backlog(self, k: int) -> None:
        """Review ``k``'s papers included before the trace that wait for each stage, each
        read at a time in the team's working hours."""
        rng, rv = self.rng, self.reviews[k]
        lib = [r for r in rv.library if self.records[r].status == "included"]
        rng.shuffle(lib)
        for stage, size in BACKLOG.items():
            x = clipped_length(rng, *size) * self.scale
            n = int(x) + (rng.random() < x - int(x))
            for r in lib[:n]:
                self.pending.add(r)
                self.at(self.work_time(rv.tz, rng), stage, r)
            lib = lib[n:]

    def paper(self, r: int) -> Paper:
        """Record ``r``'s paper, parsed into sections when first read."""
        if r not in self.papers:
            rng = self.rng
            total = clipped_length(rng, *PAPER)
            parts = max(1, round(total / PAPER_SECTION))
            sections = [self.new(total // parts + (i < total % parts)) for i in range(parts)]
            tool = "rob2" if rng.random() < RCT else "robins"
            self.papers[r] = Paper(r, self.records[r].review, sections, tool)
            self.pending.discard(r)
        return self.papers[r]

    def included(self, r: int) -> None:
        """Record ``r`` was included at title and abstract: its PDF is retrieved and read in
        the team's working hours if the review fetches full texts as it goes."""
        rv = self.reviews[self.records[r].review]
        if r in self.papers or r in self.pending or not rv.rolling:
            return
        self.pending.add(r)
        self.at_work(self.now + clipped_length(self.rng, *RETRIEVE), rv.tz, "fulltext", r)

    def _on_fulltext(self, r: int) -> None:
        """The paper is parsed into sections and read against the criteria, in windows of
        consecutive sections up to the setup's window (each at least one section)."""
        paper, k = self.paper(r), self.records[r].review
        windows: list[list[Segment]] = [[]]
        for sec in paper.sections:
            if windows[-1] and sum(n for _, n in windows[-1]) + sec[1] > self.setup.window:
                windows.append([])
            windows[-1].append(sec)
        paper.walks["fulltext"] = s = Stream("fulltext", k, [(r, i) for i in range(len(windows))],
                                             windows)
        self.start(s)

    def step_fulltext(self, s: Stream, step: tuple) -> tuple[list[Segment], int]:
        """Eligibility: system prompt, the criteria as they stand, the window, the cue."""
        rv = self.reviews[s.owner]
        segs = [self.system["fulltext"], *rv.protocol.at(self.now), *s.info[step[1]],
                self.cue["fulltext"]]
        return segs, clipped_length(self.rng, *OUTPUT["fulltext"])

    def done_fulltext(self, s: Stream) -> None:
        """Included at full text (by relevance): extraction some hours later."""
        r = s.steps[0][0]
        if self.rng.random() < FT_INCLUDE[0 if self.records[r].relevant else 1]:
            tz = self.reviews[s.owner].tz
            self.at_work(self.now + clipped_length(self.rng, *TO_EXTRACT), tz, "extract", r)

    def _on_extract(self, r: int) -> None:
        """Data extraction: the template as it stands and the paper, then one field group's
        instruction per request (``info``: the head, the groups' asks, the thread so far)."""
        paper, rv = self.paper(r), self.reviews[self.records[r].review]
        groups = rv.template.at(self.now)
        head = [self.system["extract"], *groups, *paper.sections]
        steps = [(r, g) for g in range(len(groups))]
        paper.walks["extract"] = s = Stream("extract", paper.review, steps,
                                            (head, rv.asks[:len(groups)], []))
        self.start(s, ordered=self.setup.threaded)

    def step_extract(self, s: Stream, step: tuple) -> tuple[list[Segment], int]:
        """Each group on its own: the head, its ask; threaded: the head, the earlier asks
        and answers, its ask (then its answer joins the thread)."""
        head, asks, thread = s.info
        ask, out = asks[step[1]], self.new(clipped_length(self.rng, *OUTPUT["extract"]))
        if not self.setup.threaded:
            return [*head, ask], out[1]
        segs = [*head, *thread, ask]
        thread += [ask, out]
        return segs, out[1]

    def done_extract(self, s: Stream) -> None:
        """Most extracted papers get a risk-of-bias walk some hours later."""
        if self.rng.random() < ROB_SHARE:
            r = s.steps[0][0]
            tz = self.reviews[s.owner].tz
            self.at_work(self.now + clipped_length(self.rng, *TO_ROB), tz, "rob", r)

    def _on_rob(self, r: int) -> None:
        """Risk of bias: one request per domain of the paper's tool (and the overall call)."""
        paper = self.paper(r)
        steps = [(r, d) for d in range(len(self.domains[paper.tool]))]
        paper.walks["rob"] = s = Stream("rob", paper.review, steps, paper.tool)
        self.start(s)

    def step_rob(self, s: Stream, step: tuple) -> tuple[list[Segment], int]:
        """A domain: system prompt, the tool's guidance, the paper, the domain's questions."""
        paper = self.papers[step[0]]
        segs = [self.system["rob"], *self.guidance[paper.tool], *paper.sections,
                self.domains[paper.tool][step[1]]]
        return segs, clipped_length(self.rng, *OUTPUT["rob"])

    def done_rob(self, s: Stream) -> None:
        """Nothing follows a risk-of-bias walk."""

    def _on_chat(self, k: int) -> None:
        """A reviewer of review ``k`` opens a chat about a recently adjudicated record, a
        paper read at full text, or any record it screened (whichever exists)."""
        rng, rv = self.rng, self.reviews[k]
        target = pick(rng, TARGETS)
        papers = [p for p in self.papers.values() if p.review == k]
        if target == "conflict" and self.adjudicated[k]:
            r = rng.choice(self.adjudicated[k][-RECENT:])
            fixed = [self.records[r].text]
        elif target == "paper" and papers:
            paper = rng.choice(papers)
            r, fixed = paper.rec, list(paper.sections)
        else:
            target, r = "record", rng.choice(rv.library + rv.pool)
            fixed = [self.records[r].text]
        self.chats.append(LitChat("chat", k, clipped_length(rng, *TURNS), fixed,
                                  target=target, about=r))
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: system prompt, the criteria as they stand, the record or paper, the
        history, the message; the reply joins the history."""
        chat, rng = self.chats[n], self.rng
        rv = self.reviews[chat.owner]
        head = [self.system["chat"], *rv.protocol.at(self.now), *chat.fixed]
        msg = self.new(clipped_length(rng, *MESSAGE))
        segs, out = self.turn(chat, head, msg, REPLY, ("chat", n, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / DECODE + rng.lognormvariate(0.0, PAUSE[1]) * PAUSE[0]
            self.at(self.now + gap, "turn", n)

    def _on_adhoc(self, site: int) -> None:
        """A one-off query (a PRISMA paragraph, a translated abstract, a search string)."""
        text = self.new(clipped_length(self.rng, *ADHOC_TEXT))
        self.emit("adhoc", site, self.adhoc, [self.system["adhoc"], text])
        self.adhoc += 1
