"""bench.heldout's ``sales_crm`` shape, the CRM's jobs: recorded calls summarized once they end
(summary, action items, and the opportunity's fields extracted, each a request over the same
transcript), pipeline reviews walking a team's open opportunities in order (the manager's
review, then each AE's one-on-one; the quarter's end walks its deals every morning and once
more for the commit call), lead enrichment batches over one-off records (inbound forms every
half hour, a purchased list each night, a trade show's badge scans), and SDRs' outreach
campaigns over enriched leads. See bench/heldout_sales_crm.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_crm_world import DAY, END, HOUR, MINUTE, SEGMENTS, World, hour_of, utc
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson

SYSTEM = {"call": 800, "pipeline": 900, "enrich": 600, "outreach": 700}  # system prompts
RUBRIC, ICP = 1400, (1500, 0.3, 900, 2500)  # forecast methodology; ideal customer profile
CUES = {"call": (40, 35, 60), "pipeline": (45,), "enrich": (40,), "outreach": (35,)}
OUTPUT = {"call": (450, 0.4, 150, 1200), "pipeline": (220, 0.4, 80, 600),
          "enrich": (300, 0.3, 150, 500), "outreach": (180, 0.3, 90, 400)}
PREFILL, DECODE = 6000.0, 40.0  # tokens a second the replica reads and writes for a job
TALK = 180  # transcript tokens a minute of a call
SDR_CALL = (6.0, 0.6, 2.0, 25.0)  # minutes of an SDR's connected call
DIALS = 4.0  # connected SDR calls a day an SDR has summarized
RECENT = 5  # history entries a pipeline review shows
REVIEW = (8.0, 9.5)  # local hours a team's pipeline review starts
ONE_ON_ONE = (11, (0.8, 1.0, 1.0, 0.7, 0.9, 1.0, 0.8))  # first hour, weights, local 11..17
REVIEW_HORIZON = 45 * DAY  # opportunities a review covers close within it
TIDY = (0.5, (1, 3))  # AEs who rewrite some opportunities before the review, how many
COMMIT = (14.0, 15.0)  # quarter_end: local hours of the commit call on the last workday
QUARTER_EDITS = 2.0  # quarter_end: record rewrites a day per AE (office hours)
INBOUND = 200  # inbound leads a day at scale 1.0 (quarter_end x 0.7)
LEAD_HOURS = (0.3, 0.2, 0.2, 0.2, 0.2, 0.3, 0.5, 0.8, 1.0, 1.0, 0.9, 0.8, 0.9, 1.0, 1.0, 1.0,
              1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)  # inbound leads by UTC hour
LIST = 200  # leads in a night's purchased list at scale 1.0 (none at a quarter's end)
BADGES = (900, 1500)  # event: badge scans imported at the show's evening, x scale
RAW = {"inbound": (700, 0.5, 200, 2500), "list": (500, 0.5, 150, 2000),
       "badge": (250, 0.5, 80, 900)}  # tokens of a lead's raw record by source
ENRICHED = (300, 0.3, 150, 500)  # tokens of an enriched lead record
CAMPAIGNS = 1.0  # outreach campaigns a day per SDR (event x 2 on day 1), local 09..16
CAMPAIGN = (30, 0.5, 10, 80)  # leads a campaign writes to
NEW_PRODUCT = 0.6  # launch: campaigns after the launch on the new product
OFFICE = (0.5, 1.0, 1.0, 1.0, 0.7, 0.8, 1.0, 1.0, 0.9, 0.7, 0.4)  # work by local hour 08..18


@dataclass
class Stream:
    """A job's walk, one request at a time at the job's pace: kind, owner (call, walk, batch
    or campaign id), items, how far it is, its request indices, what it was for (a walk's
    team and label, a call's account or lead)."""

    kind: str
    owner: int
    items: list[int]
    about: tuple = ()
    pos: int = 0
    sent: list[int] = field(default_factory=list)


@dataclass
class Call:
    """A recorded call to summarize: the AE's account (or the SDR's lead), opportunity or
    None, what precedes the transcript, the transcript, when it ended."""

    account: int | None
    lead: int | None
    opp: int | None
    head: list[Segment]
    transcript: Segment
    ended: float


@dataclass
class Lead:
    """A lead: when it came, segment, source, raw record, enriched record (after the batch),
    whether a campaign wrote to it."""

    time: float
    segment: int
    source: str
    raw: Segment
    enriched: Segment | None = None
    contacted: bool = False


def count(rng: random.Random, mean: float) -> int:
    """A Poisson count, its normal approximation when ``mean`` is large."""
    if mean < 30:
        return poisson(rng, mean)
    return max(0, round(rng.gauss(mean, math.sqrt(mean))))


class Jobs(World):
    """The world (``World``) and the CRM's jobs."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cues = {k: [self.new(n) for n in v] for k, v in CUES.items()}
        self.rubric, self.icp = self.new(RUBRIC), self.new(clipped_length(rng, *ICP))
        self.calls: list[tuple[Call, Stream]] = []
        self.walks: list[Stream] = []
        self.batches: list[Stream] = []
        self.campaigns: list[Stream] = []
        self.leads: list[Lead] = []
        self.pending: list[int] = []
        self._plan_reviews()
        self._plan_leads()
        for r, rep in enumerate(self.reps):
            if rep.sdr:
                factor = (1, 2) if scenario == "event" else (1, 1)
                for d, f in zip((0, 1), factor):
                    self.daily_on(d, self.tz_of(r), CAMPAIGNS * f, OFFICE[1:9], 9, "campaign", r)
                self.daily(self.tz_of(r), DIALS, OFFICE[1:10], 9, "dial", r)

    def daily_on(self, day: int, tz: float, rate: float, hours: tuple, first: int, name: str,
                 payload: object) -> None:
        """``daily`` for local ``day`` only."""
        if self.workday(day):
            for _ in range(poisson(self.rng, rate)):
                self.later(utc(day, hour_of(self.rng, hours, first), tz), name, payload)

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds until a job's next request: reading the prompt, writing the output."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        return (sum(n for _, n in segs) / PREFILL + out / DECODE) * self.rng.uniform(0.8, 1.25)

    def start(self, s: Stream, group: list) -> None:
        group.append(s)
        self.at(self.now, "step", s)

    def _on_step(self, s: Stream) -> None:
        """The walk's next item: its request, then what the request's answer changes."""
        if s.pos >= len(s.items):
            return
        item = s.items[s.pos]
        s.pos += 1
        segs = self._prompt(s, item)
        s.sent.append(self.emit(s.kind, s.owner, item, segs))
        self._answered(s, item)
        self.at(self.now + self.pace(segs, s.kind), "step", s)

    def _prompt(self, s: Stream, item: int) -> list[Segment]:
        """A job request's segments (see each kind in the shape's docstring)."""
        if s.kind == "call":
            call = self.calls[s.owner][0]
            return [self.system["call"], *call.head, call.transcript, self.cues["call"][item]]
        if s.kind == "pipeline":
            opp = self.opps[item]
            return [self.system["pipeline"], self.rubric, self.accounts[opp.account].profile,
                    *self.history(opp.account)[-RECENT:], *opp.record.at(self.now),
                    self.cues["pipeline"][0]]
        if s.kind == "enrich":
            return [self.system["enrich"], self.icp, self.leads[item].raw, self.cues["enrich"][0]]
        product, template, _ = s.about
        return [self.system["outreach"], *self.sheets[product].at(self.now), template,
                self.leads[item].enriched, self.cues["outreach"][0]]

    def _answered(self, s: Stream, item: int) -> None:
        """A call's summary joins the account's history, its fields rewrite the opportunity;
        an enrichment writes the lead's record."""
        if s.kind == "call":
            call = self.calls[s.owner][0]
            if item == 0 and call.account is not None:
                self.note(call.account, self.new(clipped_length(self.rng, *OUTPUT["call"])))
            if item == 2 and call.opp is not None:
                self.update(call.opp)
        elif s.kind == "enrich":
            self.leads[item].enriched = self.new(clipped_length(self.rng, *ENRICHED))

    def record_call(self, account: int | None, lead: int | None, opp: int | None,
                    minutes: float) -> None:
        """A recorded call ends now: summary and action items (an AE's), the fields too when
        it was about an opportunity; an SDR's call, the summary and half the time the action
        items."""
        rng = self.rng
        if account is not None:
            acc = self.accounts[account]
            head = [acc.profile, *(self.opps[opp].record.at(self.now) if opp is not None else [])]
            tasks = [0, 1, 2] if opp is not None else [0, 1]
        else:
            head, tasks = [self.leads[lead].enriched], [0, 1][:1 + (rng.random() < 0.5)]
        transcript = self.new(clipped_length(rng, TALK * minutes, 0.25, 300, 20000))
        call = Call(account, lead, opp, head, transcript, self.now)
        self.calls.append((call, s := Stream("call", len(self.calls), tasks)))
        self.at(self.now + rng.uniform(1, 4) * MINUTE, "step", s)

    def _on_dial(self, r: int) -> None:
        """An SDR's connected call with a lead a campaign wrote to, of the team's segment."""
        seg = self.teams[self.reps[r].team].segment
        pool = [n for n in range(max(0, len(self.leads) - 3000), len(self.leads))
                if self.leads[n].contacted and self.leads[n].segment == seg]
        if pool:
            self.record_call(None, self.rng.choice(pool), None,
                             clipped_length(self.rng, *SDR_CALL))

    def _plan_reviews(self) -> None:
        """Each team's weekly review (08:00..09:30 on its review day, reps tidying before,
        one-on-ones after); at a quarter's end, a forecast walk every workday morning and a
        commit call on the last."""
        rng = self.rng
        for t, team in enumerate(self.teams):
            for d in (-1, 0, 1, 2):
                if not self.workday(d):
                    continue
                start = utc(d, rng.uniform(*REVIEW), team.tz)
                if self.scenario == "quarter_end":
                    self.later(start, "review", (t, "forecast", -1))
                    if not self.workday(d + 1):
                        self.later(utc(d, rng.uniform(*COMMIT), team.tz), "review",
                                   (t, "commit", -1))
                elif (self.weekday + d) % 7 == team.review_day:
                    self.later(start, "review", (t, "review", -1))
                    self._plan_one_on_ones(t, d, start)
            if self.scenario == "quarter_end":
                for r in team.reps:
                    if not self.reps[r].sdr:
                        self.daily(team.tz, QUARTER_EDITS, OFFICE, 8, "edit", r)

    def _plan_one_on_ones(self, t: int, d: int, start: float) -> None:
        """The review day's tidying (half the AEs, the hour before) and each AE's one-on-one
        that day or the next (local 11..17)."""
        team, rng = self.teams[t], self.rng
        for r in team.reps:
            if self.reps[r].sdr:
                continue
            if rng.random() < TIDY[0]:
                self.later(start - rng.uniform(0.1, 1.0) * HOUR, "tidy", r)
            day = d + (rng.random() < 0.4)
            self.later(utc(day, hour_of(rng, ONE_ON_ONE[1], ONE_ON_ONE[0]), team.tz),
                       "review", (t, "one_on_one", r))

    def in_review(self, t: int, label: str, rep: int) -> list[int]:
        """The opportunities a walk covers, by rep (team order) then close time: closing by
        the quarter's end for a forecast or commit walk, within REVIEW_HORIZON otherwise."""
        cut = END if label in ("forecast", "commit") else self.now + REVIEW_HORIZON
        reps = [rep] if rep >= 0 else self.teams[t].reps
        out = []
        for r in reps:
            opps = [o for a in self.reps[r].accounts for o in self.accounts[a].opps
                    if self.opps[o].close <= cut]
            out += sorted(opps, key=lambda o: (self.opps[o].close, o))
        return out

    def _on_review(self, arg: tuple[int, str, int]) -> None:
        t, label, rep = arg
        items = self.in_review(t, label, rep)
        if items:
            self.start(Stream("pipeline", len(self.walks), items, (t, label, rep)), self.walks)

    def _on_tidy(self, r: int) -> None:
        """An AE rewrites 1..3 of the opportunities the review will cover."""
        mine = self.in_review(self.reps[r].team, "review", r)
        for o in self.rng.sample(mine, min(len(mine), self.rng.randint(*TIDY[1]))):
            self.update(o)

    def _on_edit(self, r: int) -> None:
        """quarter_end: an AE rewrites one of the deals closing this quarter."""
        mine = self.in_review(self.reps[r].team, "forecast", r)
        if mine:
            self.update(self.rng.choice(mine))

    def _plan_leads(self) -> None:
        """Inbound leads through the day and the enrichment batch every half hour; the
        nightly purchased list (not at a quarter's end); the show's badge scans (event)."""
        rng, scale = self.rng, self.scale
        inbound = INBOUND * (0.7 if self.scenario == "quarter_end" else 1.0)
        for d in (0, 1):
            for _ in range(count(rng, inbound * scale)):
                self.later(utc(d, hour_of(rng, LEAD_HOURS, 0), 0.0), "lead", "inbound")
            if self.scenario != "quarter_end":
                self.later(utc(d, rng.uniform(1, 2), 0.0), "import",
                           ("list", count(rng, LIST * scale)))
        for k in range(int(END / (30 * MINUTE))):
            self.at(k * 30 * MINUTE + 29 * MINUTE, "batch", None)
        if self.scenario == "event":
            n = round(rng.randint(*BADGES) * scale)
            self.later(utc(0, rng.uniform(19, 20), -7.0), "import", ("badge", n))

    def lead(self, source: str) -> int:
        rng = self.rng
        self.leads.append(Lead(self.now, pick(rng, SEGMENTS), source,
                               self.new(clipped_length(rng, *RAW[source]))))
        return len(self.leads) - 1

    def _on_lead(self, source: str) -> None:
        self.pending.append(self.lead(source))

    def _on_batch(self, _: None) -> None:
        """The half-hourly enrichment batch over the inbound leads that came since the last."""
        if self.pending:
            self.start(Stream("enrich", len(self.batches), self.pending, ("inbound",)),
                       self.batches)
            self.pending = []

    def _on_import(self, arg: tuple[str, int]) -> None:
        """A list (or the show's badge scans) imported and enriched in one walk."""
        source, n = arg
        items = [self.lead(source) for _ in range(n)]
        if items:
            self.start(Stream("enrich", len(self.batches), items, (source,)), self.batches)

    def campaign_product(self) -> int:
        """A campaign's product: by popularity (1 / rank), the new one after a launch most of
        the time."""
        live = self.live_products()
        if self.launch is not None and self.now >= self.launch and self.rng.random() < NEW_PRODUCT:
            return live[-1]
        return self.rng.choices(live, [1 / (p + 1) for p in live])[0]

    def _on_campaign(self, r: int) -> None:
        """An SDR's campaign: one product, one of the team's templates, up to CAMPAIGN
        enriched leads of the segment not yet written to (the show's badges first, then the
        newest)."""
        rng, team = self.rng, self.teams[self.reps[r].team]
        fresh = [n for n in range(len(self.leads) - 1, -1, -1)
                 if self.leads[n].enriched is not None and not self.leads[n].contacted
                 and self.leads[n].segment == team.segment]
        fresh.sort(key=lambda n: self.leads[n].source != "badge")
        items = fresh[:clipped_length(rng, *CAMPAIGN)]
        for n in items:
            self.leads[n].contacted = True
        if items:
            about = (self.campaign_product(), rng.choice(team.templates), r)
            self.start(Stream("outreach", len(self.campaigns), items, about), self.campaigns)
