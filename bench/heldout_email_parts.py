"""bench.heldout's ``email_triage`` shape, its world: one company's employees as the replica
sees them (offices in time zones, teams, each user's preferences and signature profile, the
mailing lists they are on, their inboxes with what they have read), the mail itself (internal
and external threads growing reply by reply, list threads, newsletters, spam), attachments
whose versions change, and the meetings on the calendar. The event clock starts a day before
the trace (a warm-up that fills inboxes and threads, sending nothing) and the local-time
calendar. See bench/heldout_email_triage.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Tuesday 00:00 UTC; the trace ends at Thursday 00:00 UTC
NEVER = float("inf")
ZONES = (-8.0, -5.0, 0.0, 1.0, 5.5, 8.0)  # where the company's offices may be
# what a seed's company mostly does -> how its external mail, list posts and files compare
STYLES = {"sales": (1.8, 0.5, 1.3), "engineering": (0.5, 1.5, 0.8), "operations": (1.0, 1.0, 1.0)}
OFFICES = ((1, 0.4), (2, 0.35), (3, 0.25))  # how many offices a seed's company has
LOAD = (120, 155)  # light-user loads routed to this replica at scale 1.0 (uniform per seed)
HEAVY_LOAD = 2.5  # a heavy user's load, in light users (the router balances by load)
HEAVY = (0.08, 0.35)  # share of heavy users (uniform per seed)
TRIAGE_ON = (0.3, 0.7)  # share of light users with auto-triage on (heavy users: all)
FOLDERS = 0.6  # users whose rules file list mail into folders (not triaged)
TEAM = (5, 16)  # users a team
LISTS = (3, 18)  # mailing lists (uniform per seed)
LIST_SHARE = (0.05, 0.3)  # of the users on a list (uniform per list)
LIST_POSTS = (1.5, 0.7, 0.3, 6.0)  # new threads a list a day
PROFILE = (350, 0.5, 120, 1200)  # tokens of a user's preferences and signature profile
# thread kind -> message body tokens (median, sigma, lo, hi)
BODY = {"internal": (180, 0.8, 30, 2000), "external": (260, 0.8, 40, 2500),
        "list": (280, 0.8, 40, 3000), "meeting": (200, 0.6, 60, 1200),
        "news": (2000, 0.5, 800, 6000), "spam": (300, 0.7, 80, 1500)}
STARTS = {"internal": (0.8, 1.8), "external": (1.0, 2.5), "spam": (2.5, 2.5)}  # a day: light,
# heavy user (internal: threads the user starts; external and spam: threads that reach them)
RECIPIENTS = (1, 5)  # other users on an internal thread (a team mate first)
CC = 0.25  # external threads that also reach a team mate
NEWS = (5, 14)  # newsletters a day (uniform per seed), each to 10..50 % of the users
# thread kind -> (share without replies, replies otherwise (median, sigma, lo, hi))
REPLIES = {"internal": (0.3, (2.0, 0.8, 1, 12)), "external": (0.35, (1.5, 0.8, 1, 8)),
           "list": (0.4, (2.0, 1.0, 1, 25)), "meeting": (0.6, (1.0, 0.7, 1, 6))}
GAP = (40 * MINUTE, 1.2, 2 * MINUTE, 20 * HOUR)  # between a message and its reply
ATTACH = {"internal": 0.22, "external": 0.3, "list": 0.12, "meeting": 0.4}  # at a start
VERSION, NEW_FILE = 0.2, 0.05  # a reply carries a new version of a file, or a new file
FILES = {"pdf": ((5000, 0.8, 1200, 30000), 800), "sheet": ((3000, 0.8, 600, 15000), 600)}
# thread kind -> share of deliveries never read before the night's digest
SKIP = {"internal": 0.1, "external": 0.15, "list": 0.55, "meeting": 0.1, "news": 0.7}
READ = (1.5 * HOUR, 1.0, 2 * MINUTE, 30 * HOUR)  # from delivery to reading
ARRIVE, LUNCH, LEAVE = 9.0, 13.0, 18.5  # local hours: in, back from lunch (sd 15 min), out
MEETINGS = (1.2, 3.0)  # a light, heavy user organizes this / 5 (mean attendees) a day
ATTENDEES = (2, 8)  # the organizer and team mates (as many as the team has)
INVITED = (20 * HOUR, 1.0, 0.5 * HOUR, 5 * DAY)  # from the invite to the meeting
# how likely a thread starts in each local hour (internal mail; a 9 am and after-lunch peak)
OFFICE = (0, 0, 0, 0, 0, 0, 0.05, 0.2, 0.7, 1.4, 1.0, 0.9, 0.4, 1.2, 1.0, 0.9, 0.8, 0.6,
          0.3, 0.1, 0.08, 0.06, 0.03, 0.01)
OUTSIDE = (0.2, 0.15, 0.1, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8, 1.0, 1.0, 1.0, 0.8, 0.9, 1.0,
           1.0, 0.9, 0.8, 0.6, 0.5, 0.4, 0.35, 0.3, 0.25)  # external mail: other time zones


@dataclass
class User:
    """A user: office, team, heavy or not, auto-triage on or not, list mail filed away by a
    rule (so not triaged) or not, profile, local arrival and after-lunch hours for days
    -1..3 (index day + 1), lists and inbox ((delivered, message, read) per delivery, in
    delivery order; read NEVER: left unread)."""

    office: int
    team: int
    heavy: bool
    triage: bool
    folders: bool
    profile: Segment
    arrive: list[float]
    lunch: list[float]
    lists: list[int] = field(default_factory=list)
    inbox: list[tuple[float, int, float]] = field(default_factory=list)  # (at, message, read)


@dataclass
class Msg:
    """A message: when, its thread, its author (-1: someone outside the company), the body and
    the files it carried (a new file or a new version), as (file, sections) at sending."""

    time: float
    thread: int
    author: int
    body: Segment
    carried: list[tuple[int, list[Segment]]] = field(default_factory=list)


@dataclass
class Thread:
    """A thread: kind (internal, external, list, meeting, news, spam), its owner (who started
    it; for an external thread the user it reached first; -1: none), the users it reaches,
    its list (-1: none), messages (ids), files (ids) and the replies still to come."""

    kind: str
    owner: int
    members: list[int]
    lst: int = -1
    msgs: list[int] = field(default_factory=list)
    files: list[int] = field(default_factory=list)
    replies: int = 0


@dataclass
class Meeting:
    """A meeting: start, organizer, attendees, its invite thread."""

    start: float
    organizer: int
    attendees: list[int]
    thread: int


def local(t: float, tz: float) -> float:
    """Hours since local midnight of day 0 (so 33.0 is 09:00 on day 1)."""
    return t / HOUR + tz


def utc(day: int, hour: float, tz: float) -> float:
    """Seconds on the clock of ``hour`` local time on local ``day``."""
    return (day * 24 + hour - tz) * HOUR


def hour_of(rng: random.Random, weights: tuple) -> float:
    """A local hour (with its minutes) by ``weights`` for hours 0..23."""
    return rng.choices(range(24), weights)[0] + rng.random()


class World(ClockedState):
    """The company and its mail on the clock; hooks for the jobs and desk that build on it
    (``delivered``, ``screened``, ``sent``, ``compose``, ``scheduled``)."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        knobs = self.knobs = random.Random(rng.getrandbits(64))  # the seed's structure
        self.style = knobs.choice(sorted(STYLES))
        self.outside, self.posting, self.attaching = STYLES[self.style]
        self.tz = knobs.sample(ZONES, knobs.choices(*zip(*OFFICES))[0])
        self.heavy_share, light_on = knobs.uniform(*HEAVY), knobs.uniform(*TRIAGE_ON)
        load = knobs.uniform(*LOAD) / (1 + (HEAVY_LOAD - 1) * self.heavy_share)
        n = max(20, round(load * scale))
        shares = [knobs.uniform(*LIST_SHARE) for _ in range(knobs.randint(*LISTS))]
        self.news_rate = knobs.randint(*NEWS)
        self.users = [self._user(rng.randrange(len(self.tz)), light_on) for _ in range(n)]
        self.teams = self._teams()
        self.lists = [rng.sample(range(n), max(3, round(n * x))) for x in shares]
        for k, members in enumerate(self.lists):
            for u in members:
                self.users[u].lists.append(k)
        self.threads: list[Thread] = []
        self.msgs: list[Msg] = []
        self.files: list[tuple[str, Versioned]] = []
        self.meetings: list[Meeting] = []
        for day in (-1, 0, 1):
            self._plan_day(day)

    def _user(self, office: int, light_on: float) -> User:
        rng = self.rng
        heavy = rng.random() < self.heavy_share
        days = [[h + rng.gauss(0, 0.25) for _ in range(5)] for h in (ARRIVE, LUNCH)]
        return User(office, -1, heavy, heavy or rng.random() < light_on,
                    rng.random() < FOLDERS, self.new(clipped_length(rng, *PROFILE)), *days)

    def _teams(self) -> list[list[int]]:
        """Users in teams of TEAM sizes, each team in one office."""
        teams: list[list[int]] = []
        for office in range(len(self.tz)):
            left = [u for u, x in enumerate(self.users) if x.office == office]
            while left:
                teams.append(left[:self.rng.randint(*TEAM)])
                left = left[len(teams[-1]):]
                for u in teams[-1]:
                    self.users[u].team = len(teams) - 1
        return teams

    def user_tz(self, u: int) -> float:
        return self.tz[self.users[u].office]

    def _plan_day(self, day: int) -> None:
        """Local ``day``'s mail: each user's threads (internal started, external and spam
        received), each list's posts, the newsletters (HQ time) and the meetings."""
        rng = self.rng
        for u, user in enumerate(self.users):
            tz = self.user_tz(u)
            for kind, rates in STARTS.items():
                hours = OFFICE if kind == "internal" else OUTSIDE
                rate = rates[user.heavy] * (self.outside if kind == "external" else 1.0)
                for _ in range(poisson(rng, rate)):
                    self.at_day(day, hour_of(rng, hours), tz, "start", (kind, u))
            per_day = MEETINGS[user.heavy] / (sum(ATTENDEES) / 2)
            for _ in range(poisson(rng, per_day)):
                self.plan_meeting(day, u)
        for k in range(len(self.lists)):
            for _ in range(poisson(rng, clipped_length(rng, *LIST_POSTS) * self.posting)):
                self.at_day(day, hour_of(rng, OFFICE), self.tz[0], "post", k)
        for _ in range(self.news_rate):
            self.at_day(day, rng.uniform(5, 8), self.tz[0], "news", rng.uniform(0.1, 0.5))

    def at_day(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time if it falls before the end."""
        t = utc(day, hour, tz)
        if t < self.END:
            self.at(t, name, payload)

    def office_time(self, t: float, u: int) -> float:
        """``t`` if user ``u`` is at work then, else when they next come in."""
        user = self.users[u]
        h = local(t, self.user_tz(u))
        day = int(h // 24)
        hh = h - 24 * day
        if not -1 <= day <= 2 or user.arrive[day + 1] <= hh < LEAVE:
            return t
        day += hh >= LEAVE
        return utc(day, user.arrive[day + 1], self.user_tz(u))

    def new_file(self) -> int:
        kind = self.rng.choice(list(FILES))
        (length, part) = FILES[kind]
        total = clipped_length(self.rng, *length)
        k = max(1, round(total / part))
        secs = [self.new(total // k + (i < total % k)) for i in range(k)]
        self.files.append((kind, Versioned([(self.now, secs)])))
        return len(self.files) - 1

    def revise(self, f: int) -> list[Segment]:
        """A new version of file ``f`` (v2 of a contract, an updated sheet): the sections
        before the first edited one are kept, every section from it on is new."""
        text = self.files[f][1]
        old = text.current
        keep = self.rng.randrange(len(old))
        tail = [self.new(max(40, round(n * self.rng.uniform(0.8, 1.2)))) for _, n in old[keep:]]
        text.versions.append((self.now, old[:keep] + tail))
        return text.current

    def thread(self, kind: str, owner: int, members: list[int], lst: int = -1) -> int:
        self.threads.append(Thread(kind, owner, members, lst))
        th = self.threads[-1]
        if kind in REPLIES:
            none, dist = REPLIES[kind]
            th.replies = 0 if self.rng.random() < none else clipped_length(self.rng, *dist)
        return len(self.threads) - 1

    def message(self, t: int, author: int, files: list[int]) -> int:
        """A new message in thread ``t`` by ``author`` carrying ``files`` (their current
        versions): sent out, or received (screened) from outside, then delivered."""
        th = self.threads[t]
        body = self.new(clipped_length(self.rng, *BODY[th.kind]))
        carried = [(f, self.files[f][1].current) for f in files]
        self.msgs.append(Msg(self.now, t, author, body, carried))
        m = len(self.msgs) - 1
        th.msgs.append(m)
        if author >= 0:
            self.sent(m)
        else:
            self.screened(m)
        for u in th.members:
            if u != author:
                self.deliver(u, m)
        if th.replies > 0 and th.kind in REPLIES:
            th.replies -= 1
            self.plan_reply(t)
        return m

    def deliver(self, u: int, m: int) -> None:
        """Message ``m`` reaches user ``u``: into the inbox with when it will be read."""
        rng, kind = self.rng, self.threads[self.msgs[m].thread].kind
        read = NEVER
        if rng.random() >= SKIP[kind]:
            read = self.office_time(self.now + clipped_length(rng, *READ), u)
        self.users[u].inbox.append((self.now, m, read))
        self.delivered(u, m)

    def plan_reply(self, t: int) -> None:
        """The thread's next reply: its author (outside threads alternate between the outside
        party and the company) and when (a user replies while at work)."""
        rng, th = self.rng, self.threads[t]
        last = self.msgs[th.msgs[-1]].author
        when = self.now + clipped_length(rng, *GAP)
        if th.kind == "external" and last >= 0:
            author = -1 if rng.random() < 0.75 else rng.choice(th.members)
        elif last < 0:
            author = th.owner if rng.random() < 0.7 else rng.choice(th.members)
        else:
            author = rng.choice([u for u in th.members if u != last] or th.members)
        if author >= 0:
            when = self.office_time(when, author)
        self.at(when, "reply", (t, author))

    def _on_reply(self, arg: tuple[int, int]) -> None:
        t, author = arg
        if author < 0:
            self.send_reply(t, author)
        else:
            self.compose(t, author)

    def send_reply(self, t: int, author: int) -> int:
        """A reply in ``t``: now and then it carries a new version of one of the thread's
        files, or a new file."""
        rng, th = self.rng, self.threads[t]
        files = []
        if th.files and rng.random() < VERSION:
            files.append(rng.choice(th.files))
            self.revise(files[0])
        elif rng.random() < NEW_FILE:
            files.append(self.new_file())
            th.files.append(files[0])
        return self.message(t, author, files)

    def opening(self, kind: str, owner: int, members: list[int], lst: int = -1) -> int:
        """A new thread and its first message (by ``owner``; -1 from outside)."""
        t = self.thread(kind, members[0] if kind == "external" else owner, members, lst)
        if self.rng.random() < ATTACH.get(kind, 0.0) * self.attaching:
            self.threads[t].files = [self.new_file() for _ in range(self.rng.randint(1, 2))]
        return self.message(t, owner, self.threads[t].files)

    def _on_start(self, arg: tuple[str, int]) -> None:
        """User ``u`` starts an internal thread, or an external one or spam reaches them."""
        kind, u = arg
        rng, n = self.rng, len(self.users)
        mates = [v for v in self.teams[self.users[u].team] if v != u]
        if kind == "internal":
            others = rng.sample(range(n), rng.randint(*RECIPIENTS) - 1)
            first = [rng.choice(mates)] if mates else []
            members = [u, *{v: 0 for v in [*first, *others] if v != u}]
            self.opening(kind, u, members)
        elif kind == "external":
            cc = mates and rng.random() < CC
            self.opening(kind, -1, [u, rng.choice(mates)] if cc else [u])
        else:
            self.opening(kind, -1, [])

    def _on_post(self, k: int) -> None:
        """A new thread on list ``k`` from one of its members."""
        self.opening("list", self.rng.choice(self.lists[k]), self.lists[k], k)

    def _on_news(self, share: float) -> None:
        """A newsletter to ``share`` of the users."""
        n = len(self.users)
        self.opening("news", -1, sorted(self.rng.sample(range(n), max(1, round(n * share)))))

    def plan_meeting(self, day: int, u: int) -> None:
        """A meeting ``u`` organizes on local ``day`` with team mates (and now and then one
        other user), invited hours to days before."""
        rng = self.rng
        mates = [v for v in self.teams[self.users[u].team] if v != u]
        k = min(len(mates), rng.randint(*ATTENDEES) - 1)
        attendees = [u, *rng.sample(mates, k)]
        if rng.random() < 0.3:
            attendees += [v for v in [rng.randrange(len(self.users))] if v not in attendees]
        start = utc(day, rng.choice(range(18, 35)) / 2, self.user_tz(u))
        invited = start - clipped_length(rng, *INVITED)
        if start < self.END and len(attendees) > 1:
            self.at(invited, "invite", (start, attendees))

    def _on_invite(self, arg: tuple[float, list[int]]) -> None:
        start, attendees = arg
        m = self.opening("meeting", attendees[0], attendees)
        self.meetings.append(Meeting(start, attendees[0], attendees, self.msgs[m].thread))
        self.scheduled(len(self.meetings) - 1)

    def compose(self, t: int, author: int) -> None:
        """A user replies in ``t`` (the desk may draft it with the assistant first)."""
        self.send_reply(t, author)

    def delivered(self, u: int, m: int) -> None:
        """A hook: message ``m`` reached user ``u`` (auto-triage, opening a file)."""

    def screened(self, m: int) -> None:
        """A hook: message ``m`` came from outside (the inbound screen)."""

    def sent(self, m: int) -> None:
        """A hook: a user sent message ``m`` (the compliance scan)."""

    def scheduled(self, n: int) -> None:
        """A hook: meeting ``n`` was put on the calendar (its prep briefs)."""
