"""bench.heldout's ``bank_kyc`` shape, the automated jobs: the onboarding review agent (each
applicant's documents read behind the KYC policy's chapter for the customer type and the
jurisdiction's rules, the parties screened, a risk assessment over the findings, a re-review
when a requested document is uploaded), the nightly periodic-review walk over the due
accounts, and the transaction-monitoring agent whose loop re-sends the case file as tool
results join it. See bench/heldout_bank_kyc.py's docstring for the numbers."""

from __future__ import annotations

import random
from collections import deque
from itertools import accumulate
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_kyc_parts import (DAY, DECODE, HOUR, MEMO, MINUTE, NAMES, PREFILL, PROFILE,
                                     RISKS, SCREEN_OUT, TYPES, Stream, World, hour_of)
from bench.heldout_meeting_parts import pick, poisson

SYSTEM = {"onboard": 1200, "periodic": 1000, "alert": 1500}  # system prompts
CUE = {"doc": 40, "assess": 60, "periodic": 50, "alert": 50}  # instructions at the end
APPLICATIONS = 50  # a day at scale 1.0 (x 0.85..1.15 a day)
# how likely a (personal) application arrives in each hour: the app all day, evening bump
APPLY_HOURS = (0.15, 0.08, 0.04, 0.03, 0.03, 0.05, 0.2, 0.5, 0.8, 1.0, 1.0, 0.9, 1.0, 0.9,
               0.8, 0.8, 0.8, 0.9, 1.1, 1.3, 1.3, 1.1, 0.7, 0.35)
BUSINESS_HOURS = (0.6, 1.0, 1.0, 1.0, 0.7, 0.9, 1.0, 1.0, 0.8, 0.5)  # corporate, 08..17
FORM = (600, 0.5, 250, 1500)  # tokens of an application form
DOCS = {"individual": ("id", "address"), "sole": ("id", "address", "registration"),
        "corporate": ("incorporation", "ownership", "articles")}  # per application
PARTY_DOCS = ("id", "address")  # a corporate's further parties (directors, owners) each send
DOC = {"id": (550, 0.4, 300, 900), "address": (400, 0.4, 200, 700),
       "registration": (500, 0.4, 250, 1000), "incorporation": (600, 0.4, 300, 1000),
       "ownership": (900, 0.5, 400, 2000), "articles": (1800, 0.5, 800, 4000)}
JOINT = 0.15  # personal applications with a second holder (who sends id and address too)
UBOS = (2, 5)  # a corporate's directors and owners
FINDING = (220, 0.4, 100, 450)  # tokens the agent writes per document
QUEUE = (1.0, 10.0)  # minutes from arrival to the review
RFI = 0.15  # applications where a document is requested again
UPLOAD = (5 * HOUR, 0.8, HOUR, 20 * HOUR)  # from the request to the new document
EDD = {"individual": 0.08, "sole": 0.15, "corporate": 0.35}  # enhanced due diligence
NIGHT = (1.0, 1.75)  # hours the periodic-review walk starts
DUE = 240  # accounts due a night at scale 1.0 (x 0.8..1.2)
DUE_WEIGHT = {"low": 1.0, "medium": 3.0, "high": 10.0}  # high risk reviewed yearly, ...
DEFER = 0.15  # reviews left pending (information missing), walked again the next night
MEDIA_DUE = 0.25  # completed high-risk reviews whose screening vendor flags new media
TM_RUN = (4.5, 5.5)  # hours the monitoring system's overnight alerts land
ALERTS = 55  # overnight alerts a day at scale 1.0 (x 0.7..1.3); INTRADAY more all day
INTRADAY = 12
WORKERS = 4  # agent loops working the alert queue at once
SCENARIOS = 12  # monitoring scenarios, Zipf(1), each with a playbook
PLAYBOOK = (1500, 0.4, 800, 3000)
WINDOW = (2000, 0.5, 800, 5000)  # tokens of the alert's transactions window
PRIOR = ((0, 0.5), (1, 0.25), (2, 0.15), (3, 0.1))  # earlier alerts on the account
PRIOR_ALERT = (350, 0.4, 200, 600)
STEPS = (5, 0.4, 3, 12)  # agent steps (the last writes the findings)
CALL, RESULT = (70, 0.4, 30, 120), (400, 0.8, 120, 2000)  # a tool call and its result
FINDINGS = (500, 0.4, 250, 900)  # tokens of the agent's write-up (the last step's output)
TOOL = (4.0, 0.8, 1.0, 20.0)  # seconds a tool takes
ALERT_WEIGHT = {"low": 1.0, "medium": 3.0, "high": 8.0}
REPEAT = 0.15  # day-1 alerts on an account alerted on day 0
ESCALATE = 0.25  # alerts the agent escalates to an analyst


@dataclass
class Application:
    """An onboarding application: type, jurisdiction, arrival, form, documents as (kind,
    party, text) as they stand, the agent's finding per document, the screening result per
    party, whether it needs EDD, its review walks and the customer it became."""

    type: str
    jur: int
    time: float
    form: Segment
    docs: list[tuple[str, int, Segment]]
    parties: int
    edd: bool
    findings: list[Segment] = field(default_factory=list)
    results: list[Segment] = field(default_factory=list)
    rounds: list[Stream] = field(default_factory=list)
    customer: int | None = None


@dataclass
class Alert:
    """A monitoring alert: customer, scenario, arrival, transactions window, prior alerts,
    agent steps, the trail of (call, result) pairs, the findings, its requests, and whether
    it was escalated."""

    customer: int
    scenario: int
    time: float
    window: Segment
    prior: list[Segment]
    steps: int
    trail: list[Segment] = field(default_factory=list)
    findings: Segment | None = None
    sent: list[int] = field(default_factory=list)
    escalated: bool = False


@dataclass
class Case:
    """A case file (``file``, the segments an analyst sees) of an alert or an onboarding, its
    customer and when it closed (None while open)."""

    kind: str
    owner: int
    customer: int
    file: list[Segment]
    closed: float | None = None


class Jobs(World):
    """The world (``World``) and the automated jobs."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.playbooks = [self.new(clipped_length(rng, *PLAYBOOK)) for _ in range(SCENARIOS)]
        self.apps: list[Application] = []
        self.nights: list[tuple[list[int], set[int], Stream]] = []  # (walk, deferred, stream)
        self.alerts: list[Alert] = []
        self.cases: list[Case] = []
        self.queue: deque[int] = deque()
        self.idle = WORKERS
        self.alert_cum = list(accumulate(ALERT_WEIGHT[x.risk] for x in self.customers))
        for d in (0, 1):
            for _ in range(poisson(rng, APPLICATIONS * scale * rng.uniform(0.85, 1.15))):
                personal = rng.random() >= dict(TYPES)["corporate"]
                h = hour_of(rng, APPLY_HOURS) if personal else hour_of(rng, BUSINESS_HOURS, 8)
                self.at((d * 24 + h) * HOUR, "apply", personal)
            self.at(d * DAY + rng.uniform(*NIGHT) * HOUR, "night", d)
            self.at(d * DAY + rng.uniform(*TM_RUN) * HOUR, "alerts", d)
            for _ in range(poisson(rng, INTRADAY * scale)):
                self.at(d * DAY + rng.uniform(0, 24) * HOUR, "alert", d)

    def _on_apply(self, personal: bool) -> None:
        """An application arrives; the agent reviews it a few minutes later."""
        rng = self.rng
        kind = pick(rng, TYPES[:2]) if personal else "corporate"
        holders = 1 + (kind == "individual" and rng.random() < JOINT)
        if kind == "corporate":
            holders = rng.randint(*UBOS)
        docs = [(d, 0) for d in DOCS[kind]]
        docs += [(d, p) for p in range(kind != "corporate", holders) for d in PARTY_DOCS
                 if (d, p) not in docs]
        app = Application(kind, self.jur_by_weight(), self.now,
                          self.new(clipped_length(rng, *FORM)),
                          [(d, p, self.new(clipped_length(rng, *DOC[d]))) for d, p in docs],
                          holders, rng.random() < EDD[kind])
        app.findings = [None] * len(app.docs)
        app.results = [None] * holders
        self.apps.append(app)
        items = [("doc", k) for k in range(len(app.docs))]
        items += [("screen", p) for p in range(holders)] + [("assess", 0)]
        self.review(len(self.apps) - 1, items, self.now + rng.uniform(*QUEUE) * MINUTE)

    def review(self, a: int, items: list, when: float) -> None:
        """A review walk of application ``a`` over ``items``."""
        s = Stream(items, lambda item: self.onboard_prompt(a, item),
                   lambda: self.reviewed(a))
        self.apps[a].rounds.append(self.walk(s, when))

    def review_head(self, app: Application) -> list[Segment]:
        """The review's head: system prompt, the type's policy chapter and the jurisdiction's
        rules as they stand, the form."""
        return [self.system["onboard"], *self.policy[app.type].at(self.now),
                *self.jurs[app.jur].rules, app.form]

    def onboard_prompt(self, a: int, item: tuple[str, int]) -> tuple:
        """A document (the head, the document, cue), a party's screening (its id document's
        finding against the list) or the assessment (the head, every finding, every
        screening result, cue); the agent's output joins the application."""
        app, (what, k) = self.apps[a], item
        if what == "doc":
            app.findings[k] = self.new(clipped_length(self.rng, *FINDING))
            return "onboard", a, k, [*self.review_head(app), app.docs[k][2], self.cue["doc"]]
        if what == "screen":
            ids = [i for i, (d, p, _) in enumerate(app.docs) if p == k and d == "id"]
            party = app.findings[ids[0]] if ids else app.form
            app.results[k] = self.new(clipped_length(self.rng, *SCREEN_OUT))
            name = self.rng.choices(range(NAMES), self.name_weights)[0]
            return self.screen("onboard", a, name, party)
        return "onboard", a, -1, [*self.review_head(app), *app.findings, *app.results,
                                  self.cue["assess"]]

    def reviewed(self, a: int) -> None:
        """After a walk: the first may ask for a document again (re-reviewed when it is
        uploaded); otherwise the applicant becomes a customer (EDD: a case and media)."""
        app, rng = self.apps[a], self.rng
        if len(app.rounds) == 1 and rng.random() < RFI:
            self.at(self.now + clipped_length(rng, *UPLOAD), "upload", a)
            return
        profile = self.new(clipped_length(rng, *PROFILE))
        app.customer = self.customer(self.now, app.type, app.jur, profile)
        if app.edd:
            self.cases.append(Case("onboard", a, app.customer, [app.form, *app.findings]))
            self.opened(len(self.cases) - 1)

    def _on_upload(self, a: int) -> None:
        """The applicant uploads the requested document again: reviewed, then reassessed."""
        app = self.apps[a]
        k = self.rng.randrange(len(app.docs))
        d, p, _ = app.docs[k]
        app.docs[k] = (d, p, self.new(clipped_length(self.rng, *DOC[d])))
        self.review(a, [("doc", k), ("assess", 0)], self.now)

    def opened(self, n: int) -> None:
        """A hook for the desk (analysts' chats, SARs, media checks on a new case)."""

    def _on_night(self, night: int) -> None:
        """The periodic-review walk: the accounts left pending last night and those due now
        (by risk), in id order."""
        rng, done = self.rng, {c for walk, _, _ in self.nights for c in walk}
        due = DUE * self.scale * rng.uniform(0.8, 1.2)
        groups = {r: [c for c, x in enumerate(self.customers) if x.risk == r and c not in done]
                  for r, _ in RISKS}
        total = sum(DUE_WEIGHT[r] * len(g) for r, g in groups.items())
        todo = set(self.nights[-1][1]) if self.nights else set()
        for r, g in groups.items():
            todo |= set(rng.sample(g, min(len(g), round(due * DUE_WEIGHT[r] * len(g) / total))))
        walk = sorted(todo)
        deferred = {c for c in walk if rng.random() < DEFER}
        s = Stream(walk, lambda c: self.periodic_prompt(night, c, c in deferred))
        self.nights.append((walk, deferred, self.walk(s)))

    def periodic_prompt(self, night: int, c: int, deferred: bool) -> tuple:
        """System prompt, the periodic-review chapter, the jurisdiction's rules, the profile,
        the last memo, the activity summary, cue. A completed review writes a new memo and
        profile (from after this request); high-risk ones get a media check."""
        x = self.customers[c]
        segs = [self.system["periodic"], *self.periodic.at(self.now), *self.jurs[x.jur].rules,
                self.profile(c), x.memo, x.activity, self.cue["periodic"]]
        if not deferred:
            x.memo = self.new(clipped_length(self.rng, *MEMO))
            x.profile.versions.append((self.now + 1, [self.new(clipped_length(self.rng,
                                                                              *PROFILE))]))
            if x.risk == "high" and self.rng.random() < MEDIA_DUE:
                self.check(c)
        return "periodic", night, c, segs

    def check(self, c: int, case: int | None = None) -> None:
        """A hook for the desk (an adverse-media check on customer ``c``, for ``case``)."""

    def _on_alerts(self, day: int) -> None:
        """The overnight monitoring run lands its alerts in the agents' queue."""
        n = ALERTS * self.scale * self.rng.uniform(0.7, 1.3)
        for _ in range(max(2, round(n))):
            self._on_alert(day)

    def _on_alert(self, day: int) -> None:
        """An alert on a customer (by risk; on day 1 some on an account alerted on day 0,
        whose earlier findings join its prior alerts), queued for an agent."""
        rng = self.rng
        first = [a for a in self.alerts if a.time < DAY and a.findings]
        if day and first and rng.random() < REPEAT:
            old = rng.choice(first)
            c, prior = old.customer, [*old.prior, old.findings]
        else:
            c = rng.choices(range(len(self.alert_cum)), cum_weights=self.alert_cum)[0]
            prior = [self.new(clipped_length(rng, *PRIOR_ALERT)) for _ in range(pick(rng, PRIOR))]
        scenario = rng.choices(range(SCENARIOS), [1 / (k + 1) for k in range(SCENARIOS)])[0]
        self.alerts.append(Alert(c, scenario, self.now, self.new(clipped_length(rng, *WINDOW)),
                                 prior, clipped_length(rng, *STEPS)))
        self.queue.append(len(self.alerts) - 1)
        self.dispatch()

    def dispatch(self) -> None:
        """Idle agent loops take alerts from the queue in order."""
        while self.idle and self.queue:
            self.idle -= 1
            self.at(self.now, "step", self.queue.popleft())

    def alert_prompt(self, a: int) -> list[Segment]:
        """System prompt, the scenario's playbook, the profile, the transactions window, the
        prior alerts, the tool calls and results so far, cue."""
        x = self.alerts[a]
        return [self.system["alert"], self.playbooks[x.scenario], self.profile(x.customer),
                x.window, *x.prior, *x.trail, self.cue["alert"]]

    def _on_step(self, a: int) -> None:
        """An agent step: the case file as it stands; a tool call and its result join it,
        or the last step writes the findings and the alert is closed or escalated."""
        x, rng = self.alerts[a], self.rng
        segs = self.alert_prompt(a)
        x.sent.append(self.emit("alert", a, len(x.sent), segs))
        if len(x.sent) < x.steps:
            call = self.new(clipped_length(rng, *CALL))
            x.trail += [call, self.new(clipped_length(rng, *RESULT))]
            work = sum(t for _, t in segs) / PREFILL + call[1] / DECODE
            self.at(self.now + work + clipped_length(rng, *TOOL), "step", a)
            return
        x.findings = self.new(clipped_length(rng, *FINDINGS))
        x.escalated = rng.random() < ESCALATE
        file = [self.profile(x.customer), x.window, *x.prior, *x.trail, x.findings]
        self.cases.append(Case("alert", a, x.customer, file,
                               None if x.escalated else self.now + 1))
        if x.escalated:
            self.opened(len(self.cases) - 1)
        self.idle += 1
        self.dispatch()
