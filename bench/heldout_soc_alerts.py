"""bench.heldout's ``soc_copilot`` shape, the alert side: alerts arriving by each client's
local hour, the copilot's triage of each one (an agent loop whose threat-intel lookups append
their results and re-send the prompt), the hourly threat-intel digest in the shared head,
campaigns (hundreds of related alerts within minutes behind the rule and an incident context)
and storms (a noisy rule firing for an hour or two). See bench/heldout_soc_copilot.py's
docstring for the numbers."""

from __future__ import annotations

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick
from bench.heldout_soc_parts import (ALERTS, DAY, EVENTS, HOUR, MINUTE, Alert, Burst, Client,
                                     busy)

SYSTEM = {"triage": 1300, "investigate": 1100, "engineer": 900, "hunt": 800,
          "report": 700}  # tokens of each application's system prompt
TOOLS = ((0, 0.2), (1, 0.3), (2, 0.3), (3, 0.15), (4, 0.05))  # lookups a triage makes
CALL = (20, 60)  # tokens of a tool call
RESULT = (250, 0.6, 60, 1200)  # tokens of a lookup's result
CAMPAIGNS = 0.15  # campaigns a day at a client of mean size (x size^0.5)
STORMS = 0.2  # storms a day at a client of mean size (x size^0.5)
CAMPAIGN = (150, 0.5, 40, 600)  # alerts of a campaign (x size^0.3)
CAMPAIGN_MINUTES = (4.0, 30.0)
STORM = (120, 0.5, 40, 500)  # alerts of a storm
STORM_MINUTES = (20.0, 120.0)
CORRELATE = (5, 15)  # a campaign's alerts before the SOAR attaches the incident context
REFRESH = (40, 80)  # alerts between two versions of the incident context
CONTEXT = (450, 0.4, 200, 900)  # tokens of the incident context (IOCs, related alerts)
STORM_LOOKUP = 0.3  # storm alerts that make one lookup (the rest none)
# what a campaign fires: rules of these categories
ATTACKS = (("phishing", "identity", "endpoint"), ("malware", "endpoint", "network"),
           ("identity", "cloud"), ("exfiltration", "network", "cloud"))
QUIET = 0.25  # hours in which the feed brings nothing new (the digest stays as it was)
DIGEST = ((4, 10), (60, 180))  # items of the hourly digest, tokens of each (+ a 30-token header)


class Alerts(EventState):
    """The alert side of the SOC; bench.heldout_soc_jobs.Soc builds the world (``clients``,
    ``system``, ``instructions``, ``digest``) and the rest of the work on it."""

    clients: list[Client]
    system: dict[str, Segment]
    instructions: dict[str, Segment]
    digest: Versioned
    alerts: list[Alert]
    bursts: list[Burst]

    def emit(self, kind: str, ci: int, owner: int, segs: list[Segment]) -> int:
        """Append a request (one model, so one key space); its meta is (kind, client, owner,
        segments), the owner an alert, case, session, hunt or report index. Its index."""
        self.out.append(self.blocks.ids(0, segs))
        self.meta.append((kind, ci, owner, segs))
        self.times.append(self.now)
        return len(self.out) - 1

    def triage_head(self, ci: int, rule: int) -> list[Segment]:
        """The triage prompt's head: system prompt, the threat-intel digest of the hour, the
        client's environment profile, the runbook of the rule's category, the rule."""
        c, t = self.clients[ci], self.now
        r = c.rules[rule]
        return [self.system["triage"], *self.digest.at(t), *c.profile.at(t),
                *c.runbooks[r.category].at(t), *r.text.at(t)]

    def _on_digest(self, _: object) -> None:
        """On the hour the feed digest is rewritten (new content from its header on) unless
        the hour brought nothing new."""
        self.at((self.now // HOUR + 1) * HOUR, "digest", None)
        if self.rng.random() >= QUIET:
            self.digest.versions.append((self.now, self.digest_text()))

    def digest_text(self) -> list[Segment]:
        """A new digest: a header (its hour) and DIGEST items, all new content."""
        rng = self.rng
        return [self.new(30), *(self.new(rng.randint(*DIGEST[1]))
                                for _ in range(rng.randint(*DIGEST[0])))]

    def _on_arrive(self, ci: int) -> None:
        """An alert may come in (thinning at the client's peak rate); the next one is due."""
        c, rng = self.clients[ci], self.rng
        self.at(self.now + rng.expovariate(ALERTS * c.weight / HOUR), "arrive", ci)
        if rng.random() < busy(self.now, c.tz):
            self.raise_alert(ci, c.rule(rng), -1)

    def raise_alert(self, ci: int, rule: int, b: int) -> None:
        """The SOAR sends an alert to triage: the head, the burst's incident context if there
        is one yet, the events; then the lookups the agent asks for, one request each."""
        rng = self.rng
        head = self.triage_head(ci, rule)
        events = self.new(clipped_length(rng, *EVENTS))
        tools, origin, context = pick(rng, TOOLS), "normal", []
        if b >= 0:
            burst = self.bursts[b]
            origin, context = burst.kind, self.incident_context(b)
            tools = min(tools, 2) if origin == "campaign" else int(rng.random() < STORM_LOOKUP)
        a = Alert(ci, rule, origin, b, self.now, len(head), events, head + context + [events],
                  tools)
        self.alerts.append(a)
        k = len(self.alerts) - 1
        if b >= 0:
            self.bursts[b].alerts.append(k)
        a.sent.append(self.emit("triage", ci, k, a.segs))
        if tools:
            self.at(self.now + rng.uniform(1, 6), "enrich", k)
        else:
            self.verdict(k)

    def incident_context(self, b: int) -> list[Segment]:
        """A campaign's incident context as of its next alert: none before the SOAR has
        correlated CORRELATE alerts, then a version rewritten every REFRESH alerts."""
        burst, rng = self.bursts[b], self.rng
        if burst.kind != "campaign":
            return []
        seen = len(burst.alerts)
        if seen >= burst.refresh:
            burst.context.append((seen, self.new(clipped_length(rng, *CONTEXT))))
            burst.refresh = seen + rng.randint(*REFRESH)
        return [burst.context[-1][1]] if burst.context else []

    def _on_enrich(self, k: int) -> None:
        """A threat-intel lookup's call and result join the prompt, which is sent again (a
        campaign's alerts look up its shared IOCs)."""
        a, rng = self.alerts[k], self.rng
        if a.burst >= 0 and self.bursts[a.burst].iocs:
            call, result = rng.choice(self.bursts[a.burst].iocs)
        else:
            call = self.new(rng.randint(*CALL))
            result = self.new(clipped_length(rng, *RESULT))
        a.segs = [*a.segs, call, result]
        a.sent.append(self.emit("enrich", a.client, k, a.segs))
        a.tools -= 1
        if a.tools:
            self.at(self.now + rng.uniform(1, 6), "enrich", k)
        else:
            self.verdict(k)

    def verdict(self, k: int) -> None:
        """The triage is done (bench.heldout_soc_cases.Cases opens a case on escalation)."""

    def incident_time(self, c: Client, rate: float) -> float:
        """The next time of a Poisson process of ``rate`` a day (x size^0.5), thinned by the
        client's alert curve (attacks and noisy changes follow people's hours)."""
        t = self.now
        while True:
            t += self.rng.expovariate(rate * c.weight ** 0.5 / DAY)
            if self.rng.random() < busy(t, c.tz):
                return t

    def _on_campaign(self, ci: int) -> None:
        """A campaign: 1..3 rules of the attack's categories fire CAMPAIGN alerts within
        minutes, sharing 2..6 IOC lookups; an incident case is opened when it has passed."""
        c, rng = self.clients[ci], self.rng
        self.at(self.incident_time(c, CAMPAIGNS), "campaign", ci)
        pool = c.in_categories(rng.choice(ATTACKS)) or list(range(len(c.rules)))
        rules = rng.sample(pool, min(len(pool), rng.randint(1, 3)))
        n = clipped_length(rng, CAMPAIGN[0] * c.weight ** 0.3, *CAMPAIGN[1:])
        span = rng.uniform(*CAMPAIGN_MINUTES) * MINUTE
        iocs = [(self.new(rng.randint(*CALL)), self.new(clipped_length(rng, *RESULT)))
                for _ in range(rng.randint(2, 6))]
        self.burst(Burst(ci, "campaign", rules, self.now, self.now + span,
                         refresh=rng.randint(*CORRELATE), iocs=iocs), n)

    def _on_storm(self, ci: int) -> None:
        """A storm: one of the client's five noisiest rules fires STORM alerts over an hour
        or two (a change somewhere); a detection engineer rewrites it the next day shift."""
        c, rng = self.clients[ci], self.rng
        self.at(self.incident_time(c, STORMS), "storm", ci)
        rule = rng.choice(c.noisy(5))
        span = rng.uniform(*STORM_MINUTES) * MINUTE
        self.burst(Burst(ci, "storm", [rule], self.now, self.now + span),
                   clipped_length(rng, *STORM))

    def burst(self, b: Burst, n: int) -> None:
        """Schedule burst ``b``'s ``n`` alerts at random times in its span, and its end."""
        self.bursts.append(b)
        k = len(self.bursts) - 1
        for t in sorted(self.rng.uniform(b.start, b.end) for _ in range(n)):
            self.at(t, "burst_alert", (k, self.rng.choice(b.rules)))
        self.at(b.end + self.rng.uniform(2, 10) * MINUTE, "burst_end", k)

    def _on_burst_alert(self, arg: tuple[int, int]) -> None:
        b, rule = arg
        self.raise_alert(self.bursts[b].client, rule, b)

    def _on_burst_end(self, b: int) -> None:
        """A burst has passed (bench.heldout_soc_cases.Cases follows it up)."""
