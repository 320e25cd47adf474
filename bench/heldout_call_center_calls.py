"""bench.heldout's ``call_center`` shape, the live calls: arrivals by the hour in each client's
time zone, the IVR's routing request, the voice agent's turns (speculative requests on the
ASR's partial transcripts, then the final one, tool calls and results, barge-ins), a human's
take-over with agent-assist suggestions and knowledge articles, after-call work (summary,
disposition, CRM note) and callers who call back. See bench/heldout_call_center.py's docstring
for the numbers."""

from __future__ import annotations

from bench.heldout_call_center_parts import (CALLS, CRM, HOUR, MINUTE, NOTE, Call, Caller,
                                             Client, busy, next_hours, utterance)
from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_meeting_parts import pick

SYSTEM = {"route": 380, "voice": 1100, "assist": 800, "wrapup": 520, "qa": 650,
          "outbound": 900}  # tokens of each application's system prompt
INSTRUCTION = {"route": 60, "assist": 45, "summary": 70, "disposition": 90, "crm_note": 60,
               "amd": 40, "voicemail": 55}  # closing instructions (tokens)
PARTIALS = ((0, 0.45), (1, 0.3), (2, 0.17), (3, 0.08))  # speculative requests an utterance
TOOL = 0.25  # voice turns in which the agent calls a tool (a second request with the result)
BARGE = 0.12  # voice replies the caller interrupts (only what was spoken stays)
RETURNING = 0.1  # new calls from a caller the client has seen before (a new issue)
ARTICLE = 0.25  # assist suggestions with a knowledge-base article retrieved
OUTAGE_CALLS = 4.0  # x a client's calls during an outage
RESOLVED = {"voice": 0.75, "human": 0.8, "outbound": 1.0}
CALLBACK = 0.6  # unresolved calls whose caller calls back
# when a callback comes: (low, high) seconds after the call, weight
BACK = (((5 * MINUTE, 30 * MINUTE), 0.2), ((HOUR, 8 * HOUR), 0.4), ((24 * HOUR, 120 * HOUR),
                                                                       0.4))


class Calls(EventState):
    """The live side of the center; bench.heldout_call_center_jobs.Center builds the world
    (``clients``, ``system``, ``instructions``) and the scheduled jobs on it."""

    clients: list[Client]
    system: dict[str, Segment]
    instructions: dict[str, Segment]
    calls: list[Call]

    def emit(self, kind: str, k: int, segs: list[Segment]) -> None:
        """Append a request about call ``k`` (one model, so one key space); its meta is
        (kind, client, call, segments)."""
        self.out.append(self.blocks.ids(0, segs))
        self.meta.append((kind, self.calls[k].client, k, segs))
        self.times.append(self.now)

    def say(self, kind: str, k: int, segs: list[Segment]) -> None:
        """Send a request of call ``k`` (noted in its ``sent``)."""
        self.emit(kind, k, segs)
        self.calls[k].sent.append(len(self.out) - 1)

    def head(self, call: Call, role: str) -> list[Segment]:
        """The prompt before the transcript: the role's system prompt, the persona, the
        queue's SOP and outage banner, the caller's record and last two notes (outbound: the
        campaign script and the lead)."""
        c = self.clients[call.client]
        if call.mode == "outbound":
            return [self.system["outbound"], *c.script.at(self.now), c.leads[call.caller]]
        q, who = c.queues[call.queue], c.callers[call.caller]
        banner = [q.banner] if q.banner else []
        return [self.system[role], *c.persona.at(self.now), *q.sop.at(self.now), *banner,
                who.crm, *who.notes[-2:]]

    def _on_arrive(self, ci: int) -> None:
        """A call may come in (thinning at the client's top rate); the next one is due."""
        c, rng = self.clients[ci], self.rng
        top = CALLS * c.weight * OUTAGE_CALLS
        self.at(self.now + rng.expovariate(top / HOUR), "arrive", ci)
        outage = OUTAGE_CALLS if any(q.banner for q in c.queues) else 1.0
        if rng.random() < busy(self.now, c.tz, c.always) * outage / OUTAGE_CALLS:
            self.start_call(ci, c.queue(rng), self.caller(c), None)

    def caller(self, c: Client) -> int:
        """A returning caller now and then, else a new record."""
        if c.callers and self.rng.random() < RETURNING:
            return self.rng.randrange(len(c.callers))
        c.callers.append(Caller([self.new(clipped_length(self.rng, *CRM))]))
        return len(c.callers) - 1

    def start_call(self, ci: int, q: int, who: int, back: int | None) -> None:
        """An inbound call: the IVR routes the caller's opening words, then the voice agent
        or a human (with assist) takes it; some voice calls go to a human part way."""
        c, rng = self.clients[ci], self.rng
        voice = rng.random() < c.voice
        turns = clipped_length(rng, 6, 0.6, 1, 30) if voice else clipped_length(rng, 10, 0.6,
                                                                                 2, 40)
        call = Call(ci, q, who, "voice" if voice else "human", turns, start=self.now,
                    callback_of=back)
        self.calls.append(call)
        k = len(self.calls) - 1
        opening = self.new(clipped_length(rng, 18, 0.7, 3, 120))
        self.say("route", k, [self.system["route"], c.menu, opening,
                              self.instructions["route"]])
        call.transcript.append(opening)
        if voice and turns > 1 and rng.random() < c.queues[q].transfer:
            call.transferred, call.handoff = True, rng.randint(1, turns - 1)
        self.at(self.now + rng.uniform(3, 15), "turn", k)

    def _on_turn(self, k: int) -> None:
        """One exchange of call ``k``; then the next one, or the after-call work."""
        call, rng = self.calls[k], self.rng
        if call.mode == "human":
            self.human_turn(k)
        else:
            self.voice_turn(k, "outbound" if call.mode == "outbound" else "voice")
        call.turns -= 1
        if call.mode == "voice" and call.handoff == call.turns:
            call.mode, call.turns = "human", clipped_length(rng, 6, 0.6, 1, 30)
        if call.turns > 0:
            gap = rng.uniform(4, 25) if call.mode != "human" else rng.uniform(10, 60)
            self.at(self.now + gap, "turn", k)
            return
        call.end = self.now
        call.resolved = rng.random() < RESOLVED[call.mode]
        self.at(self.now + (rng.uniform(1, 5) if call.mode != "human" else
                            rng.uniform(30, 150)), "wrapup", k)

    def voice_turn(self, k: int, kind: str) -> None:
        """The caller speaks: a speculative request on 0..3 partial transcripts (the words
        committed so far and an unstable tail), the final one; a tool call and its result now
        and then; the agent's reply (cut short on a barge-in) joins the transcript."""
        call, rng, new = self.calls[k], self.rng, self.new
        head = self.head(call, kind)
        words = utterance(rng, new, 22)
        cuts = min(pick(rng, PARTIALS), len(words) - 1)
        for j in sorted(rng.sample(range(1, len(words)), cuts)):
            self.say(kind, k, head + call.transcript + words[:j] + [new(rng.randint(2, 8))])
        call.transcript += words
        self.say(kind, k, head + call.transcript)
        if rng.random() < TOOL:
            result = clipped_length(rng, 220, 0.6, 40, 1200)
            call.transcript += [new(rng.randint(20, 60)), new(result)]
            self.say(kind, k, head + call.transcript)
        reply = clipped_length(rng, 45, 0.6, 6, 250)
        if rng.random() < BARGE:
            reply = max(2, round(reply * rng.uniform(0.1, 0.7)))
        call.transcript.append(new(reply))

    def human_turn(self, k: int) -> None:
        """The caller's final utterance triggers a suggestion for the human agent (with a
        retrieved article a quarter of the time); the agent's answer joins the transcript."""
        call, rng = self.calls[k], self.rng
        c = self.clients[call.client]
        call.transcript.append(self.new(clipped_length(rng, 28, 0.7, 3, 250)))
        tail = [c.articles[c.article(rng)]] if rng.random() < ARTICLE else []
        self.say("assist", k, self.head(call, "assist") + call.transcript + tail
                 + [self.instructions["assist"]])
        call.transcript.append(self.new(clipped_length(rng, 35, 0.7, 3, 300)))

    def _on_wrapup(self, k: int) -> None:
        """After-call work: summary, disposition and CRM note back to back over the whole
        transcript (outbound: the disposition only); the note joins the caller's record,
        which an agent sometimes rewrites; an unresolved caller may call back."""
        call, rng = self.calls[k], self.rng
        c = self.clients[call.client]
        who = c.leads[call.caller] if call.mode == "outbound" else c.callers[call.caller].crm
        head = [self.system["wrapup"], *c.persona.at(self.now), who, *call.transcript]
        steps = ("disposition",) if call.mode == "outbound" else ("summary", "disposition",
                                                                  "crm_note")
        for step in steps:
            self.say("wrapup", k, head + [self.instructions[step]])
        if call.mode == "outbound":
            return
        rec = c.callers[call.caller]
        rec.notes.append(self.new(clipped_length(rng, *NOTE)))
        if rng.random() < 0.15:
            rec.records.append(self.new(clipped_length(rng, *CRM)))
        if not call.resolved and rng.random() < CALLBACK:
            lo, hi = pick(rng, BACK)
            t = self.now + rng.uniform(lo, hi)
            self.at(t if c.always else next_hours(rng, t, c.tz), "callback", k)

    def _on_callback(self, k: int) -> None:
        """The caller of call ``k`` calls the same queue again."""
        call = self.calls[k]
        self.start_call(call.client, call.queue, call.caller, k)
