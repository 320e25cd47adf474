"""bench.heldout's ``manufacturing_qc`` shape, the floor: operators' quick questions over a
station's work instruction (as it stands: a revised one is new from the instruction on),
shift handover summaries for every line in a burst after each shift change (the ending
shift's log, then the incoming supervisor's follow-ups), SPC and sensor alarm explanations
in short clusters on one line, a summary of every lot as it completes (the product's
inspection plan, the batch record, the results), and a nonconformance report for a failed
lot, reviewed by the MRB over the following hours. The chats' machinery is here too. See
bench/heldout_manufacturing_qc.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_mfg_parts import (DAY, END, HOUR, MINUTE, SHIFT_HOURS, SHIFTS, Lot, World,
                                     utc)

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"operator": (700, (1, 0.6, 1, 4), (25, 0.8, 6, 150), (110, 0.5, 30, 400), (40.0, 0.7)),
         "handover": (800, (1, 0.7, 1, 4), (30, 0.7, 8, 200), (450, 0.3, 200, 900),
                      (90.0, 0.8)),
         "ncr": (800, (1, 0.6, 1, 3), (60, 0.8, 10, 400), (400, 0.3, 200, 800), (2400.0, 0.6)),
         "eightd": (1400, (4, 0.5, 2, 10), (70, 1.1, 8, 3000), (450, 0.5, 120, 1400),
                    (150.0, 0.9)),
         "fmea": (1000, (5, 0.5, 2, 14), (50, 0.9, 8, 600), (380, 0.5, 100, 1200), (120.0, 0.8)),
         "sop": (800, (2, 0.6, 1, 6), (30, 0.8, 6, 300), (220, 0.5, 60, 800), (60.0, 0.8)),
         "supplier": (800, (1, 0.0, 1, 1), (400, 0.6, 120, 1800), (260, 0.4, 120, 700),
                      (30.0, 0.5))}
CUES = {"handover": 40, "ncr": 45}  # the fixed first message of these chats
COMPACTS = ("eightd", "fmea", "supplier")  # chats whose history is summarised past MAX_CONTEXT
MAX_CONTEXT = 32000  # tokens of a chat's context: compacted (COMPACTS) or ended (the rest)
SUMMARY = (1000, 0.3, 500, 1800)  # tokens of the summary that replaces a compacted history
RATE = 35.0  # tokens a second a reply decodes at
OPERATOR = 12.0  # operator chats a line a day (x the line's weight), by SHIFT_HOURS
SPC = 2.5  # alarm clusters a line a day (x the line's weight), by SHIFT_HOURS
ALARMS = (2.5, 0.8, 1, 15)  # alarms in a cluster
ALARM_GAP = (20.0, 600.0)  # seconds between a cluster's alarms, uniform
SAME_CHARACTERISTIC = 0.75  # a cluster's later alarms on its first characteristic
SPC_SYSTEM = 600
CHART = (600, 0.4, 200, 1500)  # tokens of the chart window (the last subgroups) an alarm sends
ALARM = (50, 0.4, 20, 150)  # tokens of the alarm text
SHIFT_LOG = (2200, 0.45, 800, 5000)  # tokens of a shift's log (output, downtime, alarms, holds)
HANDOVER_DELAY = (2.0, 35.0, 10.0)  # minutes after the shift change: low, high, mode
LOT_SYSTEM, LOT_CUE = 700, 40
RECORD = (1500, 0.4, 600, 3500)  # tokens of a lot's batch record (traveler)
RESULTS = (700, 0.5, 250, 2000)  # tokens of its inspection results
FAIL = 0.07  # lots that fail inspection (an NCR)
NCR_DELAY = (5.0, 45.0)  # minutes from the failed lot to its NCR, uniform
DEFECT = (220, 0.5, 80, 700)  # tokens of the defect description
ESCALATE = (0.25, (1.0, 6.0))  # NCRs that open an 8D investigation, hours after


@dataclass
class MfgChat(Chat):
    """A Chat (owner: the line for operator and handover, the lot for ncr, the product for
    eightd and fmea, the plant for sop, the supplier for supplier; fixed after the head's
    documents: the shift log, the NCR record) with its plant, document (station, product,
    procedure), fixed first message, whether a turn is due, when it started for (a shift
    change, a lot), the PFMEA sections an 8D holds and the turns whose history was compacted
    first."""

    plant: int = 0
    doc: int = 0
    cue: Segment | None = None
    active: bool = False
    origin: float = 0.0
    picks: list[int] = field(default_factory=list)
    compacted: list[int] = field(default_factory=list)


class Floor(World):
    """The world (``World``), the chats' machinery and the floor's requests."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.system.update(lot=self.new(LOT_SYSTEM), spc=self.new(SPC_SYSTEM))
        self.cue = {k: self.new(n) for k, n in CUES.items()}
        self.cue["lot"] = self.new(LOT_CUE)
        self.chats: list[MfgChat] = []
        self.clusters: list[tuple[int, int, list[int]]] = []  # (line, characteristic, sent)
        self.earliest = [0.0] * len(self.lines)  # lots exist from here on (made up before 0)
        for n, line in enumerate(self.lines):
            self.daily(line.plant, OPERATOR * line.weight, SHIFT_HOURS, 0, "operator", n)
            self.daily(line.plant, SPC * line.weight, SHIFT_HOURS, 0, "spc", n)
            self._plan_lots(n)
        for plant in self.plants:
            self._plan_handovers(plant.tz, plant.lines)

    def _plan_lots(self, n: int) -> None:
        gap = DAY / self.lines[n].lots_a_day
        t = self.rng.uniform(0, gap)
        while t < END:
            self.at(t, "lot", n)
            t += gap * self.rng.uniform(0.75, 1.25)

    def _plan_handovers(self, tz: float, lines: list[int]) -> None:
        """Every shift change of the plant: each line's handover minutes after."""
        for d in (-1, 0, 1, 2):
            for h in SHIFTS:
                change = utc(d, h, tz)
                for n in lines:
                    t = change + self.rng.triangular(*HANDOVER_DELAY) * MINUTE
                    if 0 <= t < END:
                        self.at(t, "handover", (n, change))

    def start(self, chat: MfgChat) -> int:
        """A chat's first turn, now; its index."""
        self.chats.append(chat)
        chat.active = True
        self.at(self.now, "turn", len(self.chats) - 1)
        return len(self.chats) - 1

    def head(self, chat: MfgChat) -> list[Segment]:
        """What a chat's turn sends before its history (``head_<kind>``)."""
        return getattr(self, "head_" + chat.kind)(chat)

    def head_operator(self, chat: MfgChat) -> list[Segment]:
        line = self.lines[chat.owner]
        return [self.system["operator"], self.plants[chat.plant].handbook,
                *line.stations[chat.doc].at(self.now)]

    def head_handover(self, chat: MfgChat) -> list[Segment]:
        return [self.system["handover"], self.lines[chat.owner].profile, *chat.fixed]

    def head_ncr(self, chat: MfgChat) -> list[Segment]:
        return [self.system["ncr"], *self.products[chat.doc].spec.at(self.now), *chat.fixed]

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message (the chat's cue first, if it has one);
        the reply joins the history. Past MAX_CONTEXT the history is summarised (COMPACTS)
        or the chat ends; out of turns, the chat waits for a session (``idle``)."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause = CHATS[chat.kind]
        first = not chat.sent and chat.cue is not None
        msg = chat.cue if first else self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        if sum(t for _, t in segs) + out[1] > MAX_CONTEXT:
            if chat.kind in COMPACTS:
                chat.history = [self.new(clipped_length(rng, *SUMMARY))]
                chat.compacted.append(len(chat.sent))
            else:
                chat.turns = 0
        if chat.turns > 0:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)
        else:
            chat.active = False
            self.idle(n)

    def _on_session(self, arg: tuple[int, int]) -> None:
        """``turns`` more turns of chat ``n`` (a new session, an email): now, unless a turn is
        already due."""
        n, turns = arg
        chat = self.chats[n]
        chat.turns += turns
        if not chat.active:
            chat.active = True
            self.at(self.now, "turn", n)

    def idle(self, n: int) -> None:
        """A hook for the office (an 8D session's end may revise the PFMEA)."""

    def _on_operator(self, n: int) -> None:
        """An operator of line ``n`` asks about a station (by how often it is asked about)."""
        line = self.lines[n]
        s = self.rng.choices(range(len(line.stations)), line.station_weight)[0]
        turns = clipped_length(self.rng, *CHATS["operator"][1])
        self.start(MfgChat("operator", n, turns, [], plant=line.plant, doc=s))

    def _on_handover(self, arg: tuple[int, float]) -> None:
        """The ending shift's handover summary of a line: its log, the cue, then the incoming
        supervisor's follow-up questions."""
        n, change = arg
        log = self.new(clipped_length(self.rng, *SHIFT_LOG))
        turns = clipped_length(self.rng, *CHATS["handover"][1])
        self.start(MfgChat("handover", n, turns, [log], plant=self.lines[n].plant,
                           cue=self.cue["handover"], origin=change))

    def _on_spc(self, n: int) -> None:
        """A process upset on line ``n``: a cluster of alarms minutes apart."""
        rng = self.rng
        c = rng.randrange(len(self.lines[n].reactions))
        self.clusters.append((n, c, []))
        t = self.now
        for i in range(clipped_length(rng, *ALARMS)):
            self.at(t, "alarm", (len(self.clusters) - 1, i))
            t += rng.uniform(*ALARM_GAP)

    def _on_alarm(self, arg: tuple[int, int]) -> None:
        """An alarm explained: the characteristic's reaction plan, the chart window, the alarm
        (the cluster's first characteristic, else another of the line)."""
        k, i = arg
        n, c, sent = self.clusters[k]
        reactions = self.lines[n].reactions
        if i and self.rng.random() >= SAME_CHARACTERISTIC:
            c = self.rng.randrange(len(reactions))
        segs = [self.system["spc"], reactions[c], self.new(clipped_length(self.rng, *CHART)),
                self.new(clipped_length(self.rng, *ALARM))]
        sent.append(self.emit("spc", k, i, segs))

    def make_lot(self, n: int, t: float, failed: bool) -> int:
        """A lot of line ``n`` completed at ``t`` (its product, record and results); its id."""
        rng = self.rng
        self.lots.append(Lot(n, self.product_of(n), t, self.new(clipped_length(rng, *RECORD)),
                             self.new(clipped_length(rng, *RESULTS)), failed))
        return len(self.lots) - 1

    def _on_lot(self, n: int) -> None:
        """A lot completes: its summary (the product's inspection plan as it stands, the batch
        record, the results); a failed one gets an NCR minutes later."""
        k = self.make_lot(n, self.now, self.rng.random() < FAIL)
        self.lines[n].lots.append(k)
        lot = self.lots[k]
        segs = [self.system["lot"], *self.products[lot.product].spec.at(self.now), lot.record,
                lot.results, self.cue["lot"]]
        self.emit("lot", k, 0, segs)
        if lot.failed:
            self.at(self.now + self.rng.uniform(*NCR_DELAY) * MINUTE, "ncr", k)

    def _on_ncr(self, k: int) -> None:
        """An NCR for failed lot ``k``: drafted, then revised at the MRB's reviews; some are
        escalated to an 8D investigation hours later."""
        lot, rng = self.lots[k], self.rng
        fixed = [lot.results, self.new(clipped_length(rng, *DEFECT))]
        turns = clipped_length(rng, *CHATS["ncr"][1])
        n = self.start(MfgChat("ncr", k, turns, fixed, plant=self.lines[lot.line].plant,
                               doc=lot.product, cue=self.cue["ncr"], origin=lot.time))
        if rng.random() < ESCALATE[0]:
            self.at(self.now + rng.uniform(*ESCALATE[1]) * HOUR, "escalate", n)

    def _on_escalate(self, n: int) -> None:
        """A hook for the office (an 8D investigation of NCR chat ``n``)."""

    def lots_since(self, n: int, since: float) -> list[int]:
        """Line ``n``'s lots completed from ``since`` to now; those before the clock's start
        are made up (passed inspection) the first time they are asked for."""
        line, rng = self.lines[n], self.rng
        gap = DAY / line.lots_a_day
        while self.earliest[n] > since:
            self.earliest[n] -= gap * rng.uniform(0.75, 1.25)
            line.lots.insert(0, self.make_lot(n, self.earliest[n], False))
        return [k for k in line.lots if since <= self.lots[k].time <= self.now]
