"""The clock, the customers and their prompt deploys, and the template-call, one-off document,
nightly-batch, eval and retry-storm parts of bench.heldout's ``api_gateway`` shape;
bench/heldout_gateway.py's docstring states what each part models and its parameters, and adds
the chat conversations and the agent sessions. Every handler sends at most one request."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_vision_parts import Length, Profile

DAY = 86400.0
START_HOUR = 6  # UTC hour at the trace's start (a Tuesday)
HORIZON = 3 * DAY  # deploys and nightly jobs are planned this far (the trace ends sooner)
SLOTS = 48  # half-hour slots of the UTC day (time zones are whole or half hours)
# customers
CUSTOMERS, MIN_CUSTOMERS = 400, 12  # customers whose traffic this replica gets (scaled)
KINDS = (("chat", 0.35), ("agent", 0.15), ("task", 0.5))  # customer kinds and shares
ZONES = ((-8, 0.25), (-5, 0.22), (0, 0.1), (1, 0.15), (5.5, 0.08), (8, 0.12), (9, 0.08))
CUSTOMER_ZIPF = 0.8  # traffic weight by a customer's rank (ranks shuffled over kinds)
PROMPT: dict[str, Length] = {"chat": (700, 0.8, 200, 8000), "agent": (8000, 0.4, 3000, 30000),
                             "task": (700, 0.9, 150, 10000)}  # system prompt + tools
APPS = (1, 3)  # a template customer's prompts (endpoints), weights 1, 1/2, 1/3
# deploys of a new prompt version
DEPLOYS_PER_DAY, TOP_DEPLOYS, TOP_SHARE = 0.3, 1.5, 0.1  # a prompt's; the top 10 % ship more
DEPLOY_HOURS = (10.0, 18.0)  # local hours a deploy starts in
ROLLOUT = (120.0, 1800.0)  # seconds old and new versions are both sent
REWRITE = 0.1  # deploys that change the prompt from its first token
# local-hour profiles
OFFICE: Profile = (0.05, 0.04, 0.03, 0.03, 0.03, 0.05, 0.1, 0.3, 0.8, 1.5, 1.9, 2.0, 1.6, 1.8,
                   2.0, 1.9, 1.6, 1.1, 0.6, 0.4, 0.3, 0.25, 0.15, 0.08)
CONSUMER: Profile = (0.5, 0.3, 0.2, 0.15, 0.12, 0.15, 0.3, 0.6, 0.9, 1.0, 1.1, 1.2, 1.3, 1.2,
                     1.1, 1.1, 1.2, 1.3, 1.5, 1.7, 1.8, 1.7, 1.3, 0.8)
BACKEND: Profile = (0.4, 0.35, 0.3, 0.3, 0.3, 0.35, 0.5, 0.8, 1.2, 1.5, 1.6, 1.6, 1.5, 1.6, 1.6,
                    1.5, 1.4, 1.2, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
# streams: customer kinds drawn from, profile, arrivals a day at scale 1.0, floor when scaled
STREAMS = {"task": (("task",), BACKEND, 2400.0, 4.0), "chat": (("chat",), CONSUMER, 300.0, 4.0),
           "agent": (("agent",), OFFICE, 4.0, 1.0), "doc": (("chat", "task"), OFFICE, 30.0, 4.0)}
INPUT: Length = (100, 1.0, 5, 4000)  # a template call's input
DOCUMENT: Length = (12000, 0.9, 3000, 150000)  # a one-off document or PDF's text
ASK: Length = (40, 0.8, 8, 400)  # the instruction after the document
# nightly batch jobs
BATCHERS, BATCH_HOURS = 3, (1, 3)  # backends with a nightly job (scaled); local start hour
BATCH_TEMPLATE, BATCH_ITEMS = (300, 1200), (300, 1000)  # tokens; items a night (scaled)
BATCH_ITEM: Length = (120, 0.8, 20, 2000)
BATCH_GAP = (0.5, 1.5)  # mean seconds between a job's requests (exponential)
# the eval run
EVAL_AT = (1800.0, 2.5 * 3600.0)  # seconds into the trace; run again a day later
EVAL_TASKS, EVAL_SHOTS = (3, 5), (3, 10)  # tasks in the suite; exemplars a header
EVAL_INSTRUCTION, EVAL_SHOT = (80, 300), (80, 250)
EVAL_ITEMS = (50, 150)  # questions a task (scaled, at least 3)
EVAL_QUESTION: Length = (150, 0.7, 20, 800)
EVAL_GAP = 0.25  # mean seconds between the harness's requests (exponential)
# the retry storm
STORM_HOURS = (11.0, 16.0)  # local hours it starts in
STORM_FIRST, STORM_WINDOW = (20, 60), (180.0, 600.0)  # failed requests (scaled); seconds
STORM_TRIES = (3, 8)  # sends of each (all fail until the last)
BACKOFF, BACKOFF_CAP = 1.0, 30.0  # seconds: first retry delay (doubling), its cap


def local_hour(t: float, zone: float) -> float:
    """The local hour (0..24) in ``zone`` (hours from UTC) at ``t`` seconds into the trace."""
    return (START_HOUR + zone + t / 3600.0) % 24


def at_local(zone: float, hour: float, day: int) -> float:
    """Seconds into the trace when ``zone``'s clock shows ``hour`` on its ``day``-th local
    day (day 0 is its date at the trace's start; negative when that is before the start)."""
    return (day * 24 + hour - (START_HOUR + zone) % 24) * 3600.0


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson count of the given mean."""
    n, t = 0, rng.expovariate(1.0)
    while t < mean:
        n, t = n + 1, t + rng.expovariate(1.0)
    return n


def first_tokens(segs: list[Segment], x: int) -> list[Segment]:
    """The first ``x`` tokens of ``segs``: a segment cut short keeps its id (its first tokens
    are the same text, so they hash the same)."""
    out, at = [], 0
    for cid, n in segs:
        if at + n > x:
            return out + ([(cid, x - at)] if x > at else [])
        out.append((cid, n))
        at += n
    return out


@dataclass
class Prompt:
    """A customer's system prompt + tools for one app: (start, rollout seconds, segments) per
    version. A client with rollout draw ``u`` (0..1) sends a version once ``start + u *
    rollout`` has passed."""

    versions: list[tuple[float, float, list[Segment]]]

    def at(self, t: float, u: float) -> list[Segment]:
        """The version a client with draw ``u`` sends at ``t``."""
        for start, roll, segs in reversed(self.versions):
            if t >= start + u * roll:
                return segs
        return self.versions[0][2]


@dataclass
class Customer:
    """A customer: kind (chat, agent, task), time zone, traffic weight, prompts (one per app)
    and their weights."""

    kind: str
    zone: float
    weight: float
    prompts: list[Prompt]
    apps: list[float]


class GatewayState(EventState):
    """The generator's clock (seconds), event heap, customers and their deploys, and the
    template calls, one-off documents, nightly batches, eval runs and retry storm;
    bench/heldout_gateway.py's state adds the chat conversations and agent sessions."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.customers = self._customers()
        self.tables = {name: self._table(name) for name in STREAMS}
        for name in STREAMS:
            self.at(self.arrival(name), name, None)
        self.batches: list[tuple[int, Segment, list[float]]] = []
        for c in self._pick_by_weight("task", max(1, round(BATCHERS * scale))):
            self._plan_batch(c)
        self.evals: dict[str, object] = {}
        self._plan_eval()
        self.storm: dict[str, object] = {}
        self._plan_storm()

    def send_as(self, kind: str, c: int, key: int, step: int, segs: list[Segment]) -> None:
        """Append a request and its metadata; the customer is in every block's key (the
        provider isolates each organisation's cache)."""
        self.out.append(self.blocks.ids(c, segs))
        self.meta.append((kind, c, key, step, segs))
        self.times.append(self.now)

    def _customers(self) -> list[Customer]:
        """The customers: kinds by share (at least 2 of each), zones, Zipf weights over a
        shuffled ranking, prompts and their deploys."""
        rng = self.rng
        n = max(MIN_CUSTOMERS, round(CUSTOMERS * self.scale))
        kinds = [k for k, share in KINDS for _ in range(max(2, round(n * share)))]
        rng.shuffle(kinds)
        ranks = list(range(len(kinds)))
        rng.shuffle(ranks)
        out = []
        for kind, rank in zip(kinds, ranks):
            zone = rng.choices([z for z, _ in ZONES], [w for _, w in ZONES])[0]
            apps = rng.randint(*APPS) if kind == "task" else 1
            top = rank < TOP_SHARE * len(kinds)
            prompts = [self._prompt(kind, zone, top) for _ in range(apps)]
            out.append(Customer(kind, zone, 1 / (rank + 1) ** CUSTOMER_ZIPF, prompts,
                                [1 / (a + 1) for a in range(apps)]))
        return out

    def _prompt(self, kind: str, zone: float, top: bool) -> Prompt:
        """A prompt (instructions, then tools or schema) and its versions: deploys on local
        business hours of each day, Poisson."""
        rng, new = self.rng, self.new
        total = clipped_length(rng, *PROMPT[kind])
        head = round(total * rng.uniform(0.3, 0.7))
        prompt = Prompt([(-math.inf, 0.0, [new(head), new(total - head)])])
        rate = TOP_DEPLOYS if top else DEPLOYS_PER_DAY
        starts = [at_local(zone, rng.uniform(*DEPLOY_HOURS), day)
                  for day in range(4) for _ in range(poisson(rng, rate))]
        for start in sorted(s for s in starts if 0.0 < s < HORIZON):
            prompt.versions.append((start, rng.uniform(*ROLLOUT), self._edit(prompt)))
        return prompt

    def _edit(self, prompt: Prompt) -> list[Segment]:
        """A new version: the last one's first tokens kept up to a cut (Beta(2, 1) over its
        length, or 0 for a rewrite), the rest rewritten at 0.8..1.3 times its length."""
        rng, segs = self.rng, prompt.versions[-1][2]
        total = sum(n for _, n in segs)
        x = 0 if rng.random() < REWRITE else int(total * rng.betavariate(2, 1))
        return first_tokens(segs, x) + [self.new(max(16, round((total - x)
                                                               * rng.uniform(0.8, 1.3))))]

    def _table(self, name: str) -> tuple[list[int], list[list[float]], float, float]:
        """Stream ``name``'s customers, their cumulative weights per half-hour UTC slot
        (weight times the profile at their local hour), and the peak and mean level."""
        kinds, profile, _, _ = STREAMS[name]
        members = [c for c, cu in enumerate(self.customers) if cu.kind in kinds]
        cum = []
        for s in range(SLOTS):
            t = ((s / 2 - START_HOUR) % 24) * 3600.0
            cum.append(list(itertools.accumulate(
                self.customers[c].weight * profile[int(local_hour(t, self.customers[c].zone))]
                for c in members)))
        levels = [row[-1] for row in cum]
        return members, cum, max(levels), sum(levels) / SLOTS

    def _slot(self, t: float) -> int:
        """The half-hour UTC slot of ``t``."""
        return int((START_HOUR + t / 3600.0) % 24 * 2) % SLOTS

    def arrival(self, name: str) -> float:
        """The next arrival after now of stream ``name``: Poisson at its rate a day (scaled,
        at least its floor) on average, following its customers' summed level (thinning)."""
        _, cum, peak, mean = self.tables[name]
        _, _, per_day, floor = STREAMS[name]
        top = max(floor, per_day * self.scale) / DAY * peak / mean
        t = self.now
        while True:
            t += self.rng.expovariate(top)
            if self.rng.random() * peak < cum[self._slot(t)][-1]:
                return t

    def customer(self, name: str) -> int:
        """A customer of stream ``name`` at now, by weight times its local-hour profile."""
        members, cum, _, _ = self.tables[name]
        return self.rng.choices(members, cum_weights=cum[self._slot(self.now)])[0]

    def app(self, c: int) -> int:
        """One of customer ``c``'s apps (its prompts), by their weights."""
        return self.rng.choices(range(len(self.customers[c].apps)), self.customers[c].apps)[0]

    def prompt_now(self, c: int, app: int) -> list[Segment]:
        """The version of customer ``c``'s ``app`` prompt that a client sends now (a new
        rollout draw)."""
        return self.customers[c].prompts[app].at(self.now, self.rng.random())

    def _pick_by_weight(self, kind: str, k: int) -> list[int]:
        """``k`` different customers of ``kind``, drawn by weight."""
        pool = [c for c, cu in enumerate(self.customers) if cu.kind == kind]
        out: list[int] = []
        while len(out) < min(k, len(pool)):
            c = self.rng.choices(pool, [self.customers[p].weight for p in pool])[0]
            out += [c] if c not in out else []
        return out

    def _on_task(self, _: object) -> None:
        """A template call: one of the customer's prompts (the version its client sends) + a
        new input."""
        self.at(self.arrival("task"), "task", None)
        c = self.customer("task")
        app = self.app(c)
        segs = [*self.prompt_now(c, app), self.new(clipped_length(self.rng, *INPUT))]
        self.send_as("task", c, app, 0, segs)

    def _on_doc(self, _: object) -> None:
        """A one-off long document: the customer's prompt + the document + an instruction."""
        self.at(self.arrival("doc"), "doc", None)
        c, rng = self.customer("doc"), self.rng
        doc = self.new(clipped_length(rng, *DOCUMENT))
        segs = [*self.prompt_now(c, self.app(c)), doc, self.new(clipped_length(rng, *ASK))]
        self.send_as("doc", c, len(self.out), 0, segs)

    def _plan_batch(self, c: int) -> None:
        """Customer ``c``'s nightly job: a template, and a start at a whole local hour in
        BATCH_HOURS on each night in the horizon (the same hour every night)."""
        hour = self.rng.randint(*BATCH_HOURS)
        zone = self.customers[c].zone
        nights = [t for t in (at_local(zone, hour, d) for d in range(4)) if 0.0 <= t < HORIZON]
        self.batches.append((c, self.new(self.rng.randint(*BATCH_TEMPLATE)), nights))
        for t in nights:
            items = max(10, round(self.rng.randint(*BATCH_ITEMS) * self.scale))
            self.at(t, "batch", (len(self.batches) - 1, 0, items, self.rng.uniform(*BATCH_GAP)))

    def _on_batch(self, job: tuple[int, int, int, float]) -> None:
        """An item of a nightly job: its template + a new item; the next follows."""
        b, k, items, gap = job
        c, template, _ = self.batches[b]
        self.send_as("batch", c, b, k, [template, self.new(clipped_length(self.rng, *BATCH_ITEM))])
        if k + 1 < items:
            self.at(self.now + self.rng.expovariate(1 / gap), "batch", (b, k + 1, items, gap))

    def _plan_eval(self) -> None:
        """The eval suite of a template customer: tasks of an instruction + k exemplars over
        their questions, run at EVAL_AT and the same requests again a day later."""
        rng, new = self.rng, self.new
        c = rng.choice([c for c, cu in enumerate(self.customers) if cu.kind == "task"])
        items: list[list[Segment]] = []
        for _ in range(rng.randint(*EVAL_TASKS)):
            head = [new(rng.randint(*EVAL_INSTRUCTION))]
            head += [new(rng.randint(*EVAL_SHOT)) for _ in range(rng.randint(*EVAL_SHOTS))]
            n = max(3, round(rng.randint(*EVAL_ITEMS) * self.scale))
            items += [[*head, new(clipped_length(rng, *EVAL_QUESTION))] for _ in range(n)]
        start = rng.uniform(*EVAL_AT)
        self.evals = {"customer": c, "items": items, "starts": (start, start + DAY)}
        for run, t in enumerate(self.evals["starts"]):
            self.at(t, "eval", (run, 0))

    def _on_eval(self, rk: tuple[int, int]) -> None:
        """The eval harness's next question (the same items in the same order each run)."""
        run, k = rk
        self.send_as("eval", self.evals["customer"], run, k, self.evals["items"][k])
        if k + 1 < len(self.evals["items"]):
            self.at(self.now + self.rng.expovariate(1 / EVAL_GAP), "eval", (run, k + 1))

    def _plan_storm(self) -> None:
        """The retry storm: a busy template customer's client, on its first business day in
        the trace, fails STORM_FIRST requests over a window and retries each of them."""
        rng = self.rng
        c = self._pick_by_weight("task", 1)[0]
        hour = rng.uniform(*STORM_HOURS)
        zone = self.customers[c].zone
        start = next(t for t in (at_local(zone, hour, d) for d in range(3)) if t > 3600.0)
        first = max(3, round(rng.randint(*STORM_FIRST) * self.scale))
        self.storm = {"customer": c, "start": start, "window": rng.uniform(*STORM_WINDOW),
                      "tries": rng.randint(*STORM_TRIES), "requests": []}
        for _ in range(first):
            self.at(start + rng.random() * self.storm["window"], "storm", None)

    def _on_storm(self, _: object) -> None:
        """A request of the storm: the customer's prompt + input, retried until its last try
        with jittered exponential backoff, each try the same request."""
        c = self.storm["customer"]
        segs = [*self.prompt_now(c, self.app(c)), self.new(clipped_length(self.rng, *INPUT))]
        self.storm["requests"].append(segs)
        self._on_retry((len(self.storm["requests"]) - 1, 0))

    def _on_retry(self, rk: tuple[int, int]) -> None:
        """Try ``k`` of storm request ``r``; the next one is due after the backoff."""
        r, k = rk
        self.send_as("retry", self.storm["customer"], r, k, self.storm["requests"][r])
        if k + 1 < self.storm["tries"]:
            delay = min(BACKOFF_CAP, BACKOFF * 2 ** k) * self.rng.uniform(0.5, 1.5)
            self.at(self.now + delay, "retry", (r, k + 1))
