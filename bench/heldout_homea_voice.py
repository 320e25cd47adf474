"""bench.heldout's ``home_assist`` shape, the homes' side: voice sessions through a satellite
(each turn re-renders the system prompt, tools, home context and clock, then the history and
the utterance; an intent tool call sends the turn again with the call and its result), the
good-night routine (several device actions in a row), the companion app's chat that helps edit
the home's automations (their YAML re-sent, a new version when saved), and automations that
ask the assistant to word a notification when a sensor fires, repeating in bursts, plus a
power blip in one zone that fires many homes' alerts at once. See
bench/heldout_home_assist.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_homea_world import ACTIVITY, END, HOUR, World, bounded
from bench.heldout_meeting_parts import pick

TURNS = {"command": ((1, 0.7), (2, 0.15), (3, 0.08), (4, 0.04), (6, 0.03)),
         "goodnight": ((1, 1.0),), "app_chat": ((2, 0.2), (4, 0.35), (7, 0.3), (12, 0.15)),
         "camera": ((1, 0.6), (2, 0.25), (3, 0.15)), "energy": ((1, 0.5), (2, 0.3), (3, 0.2))}
MESSAGE = {"command": (14, 0.5, 4, 60), "app_chat": (40, 0.8, 8, 400),
           "camera": (18, 0.5, 6, 60), "energy": (20, 0.5, 6, 80)}
REPLY = {"command": (30, 0.6, 6, 200), "goodnight": (25, 0.4, 8, 80),
         "app_chat": (220, 0.5, 40, 900), "camera": (180, 0.4, 60, 500),
         "energy": (200, 0.4, 60, 600)}
THINK = {"command": (8.0, 0.6, 2.0, 60.0), "app_chat": (45.0, 0.7, 8.0, 600.0),
         "camera": (20.0, 0.6, 4.0, 180.0), "energy": (25.0, 0.6, 4.0, 180.0)}  # seconds
SPEECH = 3.0  # reply tokens a second as spoken or read before the next turn
MAX_CONTEXT = 16000  # tokens of a session's prompt that end it
INTENT = (("action", 0.55), ("query", 0.35), ("chat", 0.1))  # what a command asks
TWO_ACTIONS = 0.15  # actions that need a second intent call
LIVE_FIRST = 0.4  # live stack: actions that read GetLiveContext first
LIVE_QUERY = 0.9  # live stack: queries answered through GetLiveContext
DATE_QUERY = 0.05  # no clock line: commands that call GetDateTime first
LIVE_TOKENS = 10  # tokens per device in a GetLiveContext result
CALL = (35, 0.3, 18, 90)  # tokens of a tool call
RESULT = {"action": (40, 0.5, 12, 160), "date": (20, 0.1, 15, 30)}  # of a tool's result
TOOL_GAP = (1.2, 0.4, 0.4, 5.0)  # seconds from one pass to the next (decode, tool, queue)
GOODNIGHT = ((22.0, 0.3), (22.5, 0.3), (23.0, 0.25), (23.5, 0.15))  # the routine's local time
GOODNIGHT_ACTIONS = (2, 4)
APP_RATE = 0.06  # app chats a day per voice session a day of the home
APP_HOURS = (0.4, 0.5, 0.5, 0.6, 0.6, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.2, 1.0, 0.8, 0.5)
YAML = (1500, 0.7, 300, 6000)  # tokens of a home's automations file
SAVE = 0.4  # app chats that end with the automations saved (a new version)
AUTOMATIONS = ((0, 0.45), (1, 0.25), (2, 0.15), (3, 0.1), (5, 0.05))  # LLM automations a home
INSTRUCTION = (90, 0.5, 40, 220)  # tokens of an automation's instruction
TRIGGERS = (3.0, 0.9, 0.3, 40.0)  # triggers a day per automation
PAYLOAD = (70, 0.5, 25, 200)  # tokens of the trigger's event data
REPEAT = (0.3, (1, 5), (10.0, 120.0))  # triggers that repeat, repeats, seconds apart
NOTIFY, APP_LINE, OUTAGE = 420, 14, 130  # tokens of the notify prompt, app line, outage text
OUTAGES = ((1, 0.6), (2, 0.4))  # power blips over the two days, each in one zone
OUTAGE_SPREAD = (90.0, 600.0)  # seconds: mean and most from the blip to a home's alert


@dataclass
class Session:
    """A conversation of a home: its kind, home, satellite (-1: the app), turns left, what it
    holds fixed after its head (app_chat: the automations YAML; camera: the log; energy: the
    table), a phrase (goodnight), its history, each turn's request indices (first pass, then
    one per tool loop) and tool calls, the prompt of the pass in flight and what was said."""

    kind: str
    home: int
    sat: int
    turns: int
    fixed: list[Segment] = field(default_factory=list)
    phrase: Segment | None = None
    history: list[Segment] = field(default_factory=list)
    passes: list[list[int]] = field(default_factory=list)
    tools: list[list[str]] = field(default_factory=list)
    pending: list[Segment] = field(default_factory=list)
    said: list[Segment] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)


class Voice(World):
    """The world (``World``) and the homes' sessions and automations."""

    def __init__(self, rng: random.Random, scale: float, seed: int) -> None:
        super().__init__(rng, scale, seed)
        self.sessions: list[Session] = []
        self.notify, self.app_line = self.new(NOTIFY), self.new(APP_LINE)
        self.outage_text = self.new(OUTAGE)
        self.yaml: dict[int, list[tuple[float, Segment]]] = {}
        self.automations: list[list[Segment]] = []
        self.bursts: list[list[int]] = []  # request indices of a trigger and its repeats
        self.outages: list[tuple[float, float, list[int]]] = []  # (time, zone, requests)
        for h, home in enumerate(self.homes):
            self.daily(h, home.sessions, ACTIVITY, 0, "voice")
            self.daily(h, APP_RATE * home.sessions, APP_HOURS, 8, "app")
            self._automations(h)
            if "goodnight" in home.features:
                at, phrase = pick(rng, GOODNIGHT), self.new(clipped_length(rng, 10, 0.3, 5, 20))
                for d in (-1, 0, 1, 2):
                    self.at_local(d, at + rng.uniform(0, 20) / HOUR, home.tz, "goodnight",
                                  (h, phrase))
        for o in range(pick(rng, OUTAGES)):
            self.at(rng.uniform(2 * HOUR, END - 2 * HOUR), "outage", (o, pick(rng, self.zones)))

    def _automations(self, h: int) -> None:
        """Home ``h``'s LLM automations, each triggered Poisson times a day (by activity)."""
        rng, mine = self.rng, []
        for k in range(pick(rng, AUTOMATIONS)):
            mine.append(self.new(clipped_length(rng, *INSTRUCTION)))
            self.daily(h, bounded(rng, *TRIGGERS), ACTIVITY, 0, "trigger", (h, k))
        self.automations.append(mine)

    def start(self, s: Session) -> None:
        self.sessions.append(s)
        self.at(self.now, "turn", len(self.sessions) - 1)

    def _on_voice(self, h: int) -> None:
        """A voice session through one of the home's satellites."""
        rng = self.rng
        sat = rng.randrange(len(self.homes[h].satellites))
        self.start(Session("command", h, sat, pick(rng, TURNS["command"])))

    def _on_goodnight(self, arg: tuple[int, Segment]) -> None:
        """The good-night routine sends its phrase through the bedroom (first) satellite."""
        h, phrase = arg
        self.start(Session("goodnight", h, 0, 1, phrase=phrase))

    def _on_app(self, h: int) -> None:
        """A chat in the companion app about the home's automations, their YAML as it is."""
        rng = self.rng
        versions = self.yaml.setdefault(h, [(-1e18, self.new(clipped_length(rng, *YAML)))])
        self.start(Session("app_chat", h, -1, pick(rng, TURNS["app_chat"]), [versions[-1][1]]))

    def prompt_head(self, s: Session) -> list[Segment]:
        """What a session's turn sends before the history: the system prompt and tools, the
        home context, the clock and the satellite's (or the app's) line, what it holds."""
        line = self.app_line if s.sat < 0 else self.homes[s.home].satellites[s.sat]
        tail = [self.clock(self.homes[s.home].tz)] if self.stack.clock else []
        return [*self.head(s.home), *self.context(s.home), *tail, line, *s.fixed]

    def plan_calls(self, s: Session) -> list[str]:
        """The tool calls a turn makes, in order ("action", "live", "date")."""
        rng, live = self.rng, self.stack.states == "live"
        if s.kind == "goodnight":
            return ["live"] * live + ["action"] * rng.randint(*GOODNIGHT_ACTIONS)
        if s.kind != "command":
            return []
        intent = pick(rng, INTENT)
        calls = []
        if intent == "action":
            calls = ["action"] * (1 + (rng.random() < TWO_ACTIONS))
            calls = ["live"] * (live and rng.random() < LIVE_FIRST) + calls
        elif intent == "query" and live and rng.random() < LIVE_QUERY:
            calls = ["live"]
        if not self.stack.clock and rng.random() < DATE_QUERY:
            calls = ["date", *calls]
        return calls

    def _on_turn(self, n: int) -> None:
        """A turn's first pass: the head, the history, the message (or the routine's phrase)."""
        s, rng = self.sessions[n], self.rng
        msg = s.phrase if s.phrase else self.new(clipped_length(rng, *MESSAGE[s.kind]))
        segs = [*self.prompt_head(s), *s.history, msg]
        s.passes.append([self.emit(s.kind, n, len(s.passes), segs)])
        s.pending, s.said, s.calls = segs, [msg], self.plan_calls(s)
        s.tools.append(list(s.calls))
        self.next_pass(n)

    def _on_loop(self, n: int) -> None:
        """A tool call runs (an action changes a device); the turn is sent again with the
        call and its result."""
        s, rng = self.sessions[n], self.rng
        call = s.calls.pop(0)
        if call == "action":
            self.touch(s.home)
        size = (self.homes[s.home].entities * LIVE_TOKENS if call == "live"
                else clipped_length(rng, *RESULT[call]))
        said = [self.new(clipped_length(rng, *CALL)), self.new(size)]
        s.pending, s.said = [*s.pending, *said], s.said + said
        s.passes[-1].append(self.emit("tool_loop", n, len(s.passes) - 1, s.pending))
        self.next_pass(n)

    def next_pass(self, n: int) -> None:
        """The next tool loop; else the reply joins the history (after the message and the
        turn's calls and results) and the next turn follows the reply and a pause."""
        s, rng = self.sessions[n], self.rng
        if s.calls:
            self.at(self.now + bounded(rng, *TOOL_GAP), "loop", n)
            return
        reply = self.new(clipped_length(rng, *REPLY[s.kind]))
        s.history = [*s.history, *s.said, reply]
        s.turns -= 1
        if s.turns > 0 and sum(t for _, t in s.pending) + reply[1] < MAX_CONTEXT:
            gap = reply[1] / SPEECH + bounded(rng, *THINK[s.kind])
            self.at(self.now + gap, "turn", n)
        elif s.kind == "app_chat" and rng.random() < SAVE:
            versions = self.yaml[s.home]
            size = max(YAML[2], versions[-1][1][1] + rng.randint(-100, 300))
            versions.append((self.now, self.new(size)))

    def _on_trigger(self, arg: tuple[int, int]) -> None:
        """A sensor fires automation ``k`` of home ``h``."""
        h, k = arg
        self.bursts.append([])
        self._on_repeat((h, k, len(self.bursts) - 1, None))

    def _on_repeat(self, arg: tuple[int, int, int, int | None]) -> None:
        """An automation asks for a notification: the notify prompt, the home's profile, the
        automation's instruction, the event; 30 % of triggers repeat 1..5 times."""
        h, k, b, left = arg
        rng = self.rng
        segs = [self.notify, self.homes[h].profile, self.automations[h][k],
                self.new(clipped_length(rng, *PAYLOAD))]
        self.bursts[b].append(self.emit("automation", h, k, segs))
        if left is None:
            left = rng.randint(*REPEAT[1]) if rng.random() < REPEAT[0] else 0
        if left:
            self.at(self.now + rng.uniform(*REPEAT[2]), "repeat", (h, k, b, left - 1))

    def _on_outage(self, arg: tuple[int, float]) -> None:
        """A power blip in zone ``tz``: inline, every home's sections there change (devices
        unavailable, then back); each home with alerts on words one within minutes."""
        tz = arg[1]
        self.outages.append((self.now, tz, []))
        o = len(self.outages) - 1
        for h, home in enumerate(self.homes):
            if home.tz != tz:
                continue
            for a in home.areas if self.stack.states == "inline" else ():
                self.renew(a)
            if "alerts" in home.features:
                delay = min(OUTAGE_SPREAD[1], self.rng.expovariate(1 / OUTAGE_SPREAD[0]))
                self.at(self.now + delay, "alert", (h, o))

    def _on_alert(self, arg: tuple[int, int]) -> None:
        """An outage alert: the notify prompt, the fleet's outage text, the profile, event."""
        h, o = arg
        segs = [self.notify, self.outage_text, self.homes[h].profile,
                self.new(clipped_length(self.rng, *PAYLOAD))]
        self.outages[o][2].append(self.emit("automation", h, -1 - o, segs))
