"""bench.heldout's ``email_triage`` shape, the assistant's automatic work: auto-triage of each
message as it reaches a user who turned it on (the org's assistant prompt, the triage task,
the user's profile, the message), the inbound screen of every message from outside (spam and
newsletters included), the compliance scan of outgoing mail against the company's policy
document (which may get a new version on day 1), the nightly digest walking every user's
unread mail, and the meeting-prep briefs (the user's agenda for the day, the invite thread,
its files). See bench/heldout_email_triage.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_email_parts import MINUTE, World, local, utc
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned

ORG = (1600, 0.35, 900, 3200)  # tokens of the org's assistant prompt (persona, rules, tools)
TASK = {"triage": 320, "summary": 260, "draft": 480, "attach": 300, "ask": 420, "prep": 380,
        "digest": 400}  # tokens of each task's prompt, after the org's
CUE = {"triage": 30, "summary": 25, "prep": 35, "digest": 40, "screen": 30,
       "compliance": 35}  # the instruction at the end
SCREEN_SYSTEM, COMPLIANCE_SYSTEM = 700, 550  # the screen's and the scan's own prompts
POLICY = (6000, 0.35, 3000, 12000)  # tokens of the policy document (700-token sections)
POLICY_SECTION = 700
POLICY_UPDATE = (0.5, (8.0, 11.0))  # seeds whose policy changes on day 1, HQ local hours
SCAN_INTERNAL = 0.1  # internal messages without files scanned (a DLP sample)
PREP = (0.25, 0.9)  # light, heavy users with meeting-prep briefs on
PREP_LEAD = (5.0, 30.0)  # minutes before the meeting
AGENDA = (60, 90)  # tokens of a day's agenda: a header, each meeting
PREP_THREAD = 6  # latest messages of the invite thread a brief holds
THREAD_CAP = 12000  # tokens of a thread a prompt holds (the latest messages that fit)
FILE_CAP = 8000  # tokens of a file a draft or brief holds (its first sections)
SCAN_CAP = 4000  # tokens of a file the compliance scan holds (its first sections)
DIGEST_HOURS = (1.0, 2.0)  # HQ local hours the nightly digest starts
DIGEST_CAP = (30, 20000)  # unread messages, tokens a digest holds (the oldest first)
DIGEST_OUT = (300, 0.4, 100, 800)  # tokens a digest writes
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a stream


@dataclass
class Walk:
    """The nightly digest's walk: the night, the users (in id order), how far it is, the
    request index per user digested (users without unread mail are skipped)."""

    night: int
    users: list[int]
    pos: int = 0
    sent: dict[int, int] = field(default_factory=dict)


def capped(segs: list[Segment], cap: int, latest: bool = False) -> list[Segment]:
    """The first (or the latest) whole segments of ``segs`` within ``cap`` tokens (at least
    one)."""
    order = segs[::-1] if latest else segs
    out, total = [], 0
    for s in order:
        if out and total + s[1] > cap:
            break
        out.append(s)
        total += s[1]
    return out[::-1] if latest else out


class Jobs(World):
    """The world (``World``) and the assistant's automatic work."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.org = self.new(clipped_length(rng, *ORG))
        self.task = {k: self.new(n) for k, n in TASK.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.screen_system = self.new(SCREEN_SYSTEM)
        self.compliance_system = self.new(COMPLIANCE_SYSTEM)
        total = clipped_length(rng, *POLICY)
        k = max(1, round(total / POLICY_SECTION))
        self.policy = Versioned([(-1e18, [self.new(total // k + (i < total % k))
                                          for i in range(k)])])
        if self.knobs.random() < POLICY_UPDATE[0]:
            self.at_day(1, self.knobs.uniform(*POLICY_UPDATE[1]), self.tz[0], "policy", None)
        self.prep_on = [rng.random() < PREP[u.heavy] for u in self.users]
        self.agendas: dict[tuple[int, int], Versioned] = {}
        self.walks: list[Walk] = []
        for night in (0, 1, 2):
            t = utc(night, rng.uniform(*DIGEST_HOURS), self.tz[0])
            if 0 <= t < self.END:
                self.at(t, "digest", len(self.walks))
                self.walks.append(Walk(night, list(range(len(self.users)))))

    def live(self) -> bool:
        """Whether the clock is past the warm-up (requests are sent)."""
        return self.now >= 0

    def head(self, kind: str, u: int) -> list[Segment]:
        """The org's prompt, the task's, user ``u``'s profile."""
        return [self.org, self.task[kind], self.users[u].profile]

    def thread_text(self, t: int) -> list[Segment]:
        """Thread ``t``'s messages so far, oldest first (the latest within THREAD_CAP)."""
        return capped([self.msgs[m].body for m in self.threads[t].msgs], THREAD_CAP, True)

    def file_text(self, f: int, cap: int = FILE_CAP) -> list[Segment]:
        """File ``f`` as it stands now (its first sections within ``cap``)."""
        return capped(self.files[f][1].current, cap)

    def delivered(self, u: int, m: int) -> None:
        """Auto-triage: the message as it reaches a user who has it on (list mail only if
        no rule files it away)."""
        user = self.users[u]
        listed = self.threads[self.msgs[m].thread].kind == "list"
        if self.live() and user.triage and not (listed and user.folders):
            body = self.msgs[m].body
            self.emit("triage", u, m, [*self.head("triage", u), body, self.cue["triage"]])

    def screened(self, m: int) -> None:
        """The inbound screen (spam, phishing, newsletter) of a message from outside."""
        if self.live():
            msg = self.msgs[m]
            self.emit("screen", msg.thread, m, [self.screen_system, msg.body, self.cue["screen"]])

    def sent(self, m: int) -> None:
        """The compliance scan of an outgoing message: every one to outside or carrying a
        file, a sample of the rest: its prompt, the policy as it stands, the body, the
        files carried (as sent), the instruction."""
        msg = self.msgs[m]
        kind = self.threads[msg.thread].kind
        if not self.live() or not (kind == "external" or msg.carried
                                   or self.rng.random() < SCAN_INTERNAL):
            return
        files = [s for _, secs in msg.carried for s in capped(secs, SCAN_CAP)]
        segs = [self.compliance_system, *self.policy.at(self.now), msg.body, *files,
                self.cue["compliance"]]
        self.emit("compliance", msg.author, m, segs)

    def _on_policy(self, _: object) -> None:
        """Legal publishes a new policy version: from one section on, the text is new."""
        old = self.policy.current
        keep = self.rng.randrange(1, len(old)) if len(old) > 1 else 0
        self.policy.versions.append((self.now, old[:keep] + [self.new(n) for _, n in old[keep:]]))

    def unread(self, u: int) -> list[Segment]:
        """User ``u``'s mail unread now, oldest first, within DIGEST_CAP."""
        inbox = self.users[u].inbox
        bodies = [self.msgs[m].body for at, m, read in inbox if at <= self.now < read]
        return capped(bodies[:DIGEST_CAP[0]], DIGEST_CAP[1])

    def _on_digest(self, n: int) -> None:
        """The nightly digest's next user (in id order): the org's prompt, the digest task,
        the profile, the unread mail, the instruction; then the next after this one's reading
        and writing (0.8..1.25 x)."""
        w = self.walks[n]
        while w.pos < len(w.users):
            u = w.users[w.pos]
            w.pos += 1
            mail = self.unread(u)
            if mail:
                segs = [*self.head("digest", u), *mail, self.cue["digest"]]
                w.sent[u] = self.emit("digest", u, w.night, segs)
                work = sum(t for _, t in segs) / PREFILL
                work += clipped_length(self.rng, *DIGEST_OUT) / DECODE
                self.at(self.now + work * self.rng.uniform(0.8, 1.25), "digest", n)
                return

    def day_of(self, u: int, t: float) -> int:
        """User ``u``'s local day at ``t``."""
        return int(local(t, self.user_tz(u)) // 24)

    def agenda(self, u: int, day: int) -> list[Segment]:
        """User ``u``'s agenda for ``day`` as rendered now (first rendered on first use)."""
        if (u, day) not in self.agendas:
            self.agendas[(u, day)] = Versioned([(self.now, [self.render(u, day)])])
        return self.agendas[(u, day)].at(self.now)

    def render(self, u: int, day: int) -> Segment:
        count = sum(u in x.attendees and self.day_of(u, x.start) == day for x in self.meetings)
        return self.new(AGENDA[0] + AGENDA[1] * count)

    def scheduled(self, n: int) -> None:
        """A new meeting: attendees' rendered agendas for its day change, and each attendee
        with prep on gets a brief 5..30 minutes before it starts."""
        x = self.meetings[n]
        for u in x.attendees:
            key = (u, self.day_of(u, x.start))
            if key in self.agendas:
                self.agendas[key].versions.append((self.now, [self.render(u, key[1])]))
            when = x.start - self.rng.uniform(*PREP_LEAD) * MINUTE
            if self.prep_on[u] and 0 <= when < self.END and when > self.now:
                self.at(when, "prep", (n, u))

    def _on_prep(self, arg: tuple[int, int]) -> None:
        """A meeting-prep brief: the org's prompt, the prep task, the profile, the day's
        agenda, the invite, the thread's latest replies, its files, the instruction."""
        n, u = arg
        x = self.meetings[n]
        th = self.threads[x.thread]
        invite = self.msgs[th.msgs[0]].body
        later = [self.msgs[m].body for m in th.msgs[1:]][-PREP_THREAD:]
        files = [s for f in th.files for s in self.file_text(f)]
        segs = [*self.head("prep", u), *self.agenda(u, self.day_of(u, x.start)), invite,
                *later, *files, self.cue["prep"]]
        self.emit("prep", n, u, segs)
