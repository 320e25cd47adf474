"""The calendar, the schools, courses and sections, the prompts, the conversations, the one-off
questions and the teacher tools of bench.heldout's ``tutoring`` shape;
bench/heldout_tutoring.py's docstring states what each part models and its parameters.
bench/heldout_tutoring_school.py adds the timetable, homework and grading on top of
``TutoringBase`` here, and bench/heldout_tutoring.py exam review."""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import EventState, Segment, clipped_length, segment_tokens
from bench.heldout_gateway_parts import first_tokens
from bench.heldout_vision_parts import Length, Profile, lognormal

DAY, HOUR = 86400.0, 3600.0
WEEK = 7 * DAY
START = 3 * DAY + 6 * HOUR  # the clock's 0: Thursday 06:00 in the clock's zone (UTC-5)
PRE_ROLL = -START  # events run from Monday 00:00; requests before 0 are left out
RATE = 50.0  # tokens a second a reply decodes at
ZONES = ((0.0, 0.4), (-1.0, 0.3), (-2.0, 0.1), (-3.0, 0.2))  # schools' hours from the clock
SCHOOLS = 6
# students by local hour on school days (in class 8..15) and at weekends; Mon..Sun factors
SCHOOLDAY: Profile = (0.35, 0.15, 0.06, 0.03, 0.02, 0.03, 0.1, 0.35, 0.25, 0.2, 0.2, 0.25,
                      0.3, 0.25, 0.25, 0.6, 0.9, 1.0, 1.0, 1.3, 1.7, 1.9, 1.5, 0.8)
WEEKEND: Profile = (0.4, 0.25, 0.1, 0.05, 0.03, 0.03, 0.05, 0.1, 0.2, 0.35, 0.5, 0.6, 0.6,
                    0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.2, 1.4, 1.5, 1.2, 0.7)
STUDENT_DAYS = (1.0, 1.0, 1.0, 0.95, 0.6, 0.45, 0.9)
# teachers: before school, planning periods, evenings; Sunday planning
TEACHER: Profile = (0.05, 0.02, 0.02, 0.02, 0.05, 0.4, 1.0, 0.9, 0.3, 0.3, 0.3, 0.4, 0.5, 0.4,
                    0.3, 0.7, 0.9, 0.8, 0.8, 1.2, 1.4, 1.2, 0.6, 0.2)
TEACHER_DAYS = (1.0, 1.0, 1.0, 1.0, 0.6, 0.5, 1.6)
SUBJECTS = ("math", "english", "science", "history", "language")  # courses cycle through them
WRITING = ("english", "history", "language")  # subjects that set essays
READS = {"math": 0.2, "science": 0.7, "english": 0.9, "history": 0.8, "language": 0.6}
# prompts (tokens, uniform lo..hi)
PLATFORM, COURSE_HEAD, UNIT = (1200, 2600), (300, 1200), (80, 300)
HEADS = {"quick": (300, 800), "review": (200, 600), "grader": (800, 1800),
         "plan": (1200, 2500), "quiz": (700, 1600), "rubric": (500, 1200),
         "message": (250, 700)}
TOOLS = (("plan", 0.35), ("quiz", 0.35), ("rubric", 0.15), ("message", 0.15))
DEPLOY_CUT = (0.2, 0.9)  # share of the platform prompt a deploy keeps
ACTIVITY: Length = (350, 0.7, 100, 1500)  # an assignment's or class activity's prompt
LIBRARY = 3  # shared activities and homework prompts a course has a week
DOCUMENT: Length = (5000, 0.6, 1200, 30000)  # a course's reading of the week
GUIDE = (100, 600)  # the reading guide's questions
PROFILE = (15, 60)  # a student's profile line (name, grade, accommodations, language)
MESSAGE: Length = (25, 0.9, 3, 400)  # a student's message in a tutoring conversation
MESSAGES: dict[str, Length] = {"quick": (40, 1.0, 5, 800), "teacher": (120, 0.8, 20, 1000)}
REPLY: Length = (140, 0.6, 30, 700)  # the tutor's reply
REPLIES: dict[str, Length] = {"quick": (250, 0.6, 40, 1200), "plan": (1500, 0.4, 500, 4000),
                              "quiz": (900, 0.5, 200, 3000), "rubric": (700, 0.5, 200, 2000),
                              "message": (250, 0.5, 60, 800)}
CAP = 32000  # tokens of context past which a conversation ends
THINK: dict[str, Length] = {  # seconds from a reply to the next message
    "class": (60.0, 0.7, 15.0, 400.0), "homework": (70.0, 0.8, 15.0, 600.0),
    "reading": (70.0, 0.8, 15.0, 600.0), "review": (50.0, 0.7, 10.0, 400.0),
    "quick": (60.0, 0.8, 15.0, 300.0), "teacher": (120.0, 1.0, 20.0, 1200.0)}
# one-off questions and teacher sessions: a Monday's (scaled, at least the floor)
QUICK_PER_DAY, QUICK_FLOOR, QUICK_MORE = 400, 20.0, 0.15  # QUICK_MORE: with 1..2 follow-ups
WORKSHEET, WORKSHEET_TEXT = 0.2, (400, 0.7, 150, 1500)  # a photographed worksheet's text
TEACHER_PER_DAY, TEACHER_FLOOR, QUIZ_READING = 35, 3.0, 0.4
TEACHER_TURNS: Length = (2, 0.6, 1, 6)
STUDENT_PEAK = max(max(SCHOOLDAY) * max(STUDENT_DAYS[:5]), max(WEEKEND) * max(STUDENT_DAYS[5:]))
STUDENT_MEAN = sum(SCHOOLDAY) / 24
TEACHER_PEAK, TEACHER_MEAN = max(TEACHER) * max(TEACHER_DAYS), sum(TEACHER) / 24
Period = tuple[float, float]  # clock seconds


def local(t: float, offset: float) -> float:
    """Local seconds since Monday 00:00 of the trace's first week at ``t`` in a zone
    ``offset`` hours from the clock's."""
    return START + t + offset * HOUR


def weekday(t: float, offset: float = 0.0) -> int:
    """The local weekday at ``t`` (0 is Monday)."""
    return int(local(t, offset) // DAY) % 7


def hour(t: float, offset: float = 0.0) -> float:
    """The local hour (0..24) at ``t``."""
    return local(t, offset) % DAY / HOUR


def week(t: float) -> int:
    """The week at ``t`` in the clock's zone (0 until Monday 00:00, then 1)."""
    return int(local(t, 0.0) // WEEK)


def clock(day: int, at: float, offset: float) -> float:
    """The clock time of local ``at`` hours on local day ``day`` (0 is the first Thursday)."""
    return (3 + day) * DAY + at * HOUR - START - offset * HOUR


def student_rate(t: float, offset: float) -> float:
    """Students' relative activity at ``t`` in a zone (school-day or weekend profile)."""
    day = weekday(t, offset)
    profile = SCHOOLDAY if day < 5 else WEEKEND
    return profile[int(hour(t, offset))] * STUDENT_DAYS[day]


def teacher_rate(t: float, offset: float) -> float:
    """Teachers' relative activity at ``t`` in a zone."""
    return TEACHER[int(hour(t, offset))] * TEACHER_DAYS[weekday(t, offset)]


@dataclass
class Course:
    """A course (subject and grade): its prompt's head, and per week its unit line, shared
    activities and homework prompts, and reading (None if it has none that week)."""

    subject: str
    grade: int
    head: Segment
    units: dict[int, Segment] = field(default_factory=dict)
    library: dict[int, list[Segment]] = field(default_factory=dict)
    homework: dict[int, list[tuple[Segment, Segment]]] = field(default_factory=dict)
    readings: dict[int, tuple[Segment, Segment] | None] = field(default_factory=dict)


@dataclass
class Section:
    """A class section: its school's zone (hours from the clock), bell (local hour school
    starts), course, period (0..6) and roster size."""

    offset: float
    bell: float
    course: int
    period: int
    roster: int


@dataclass
class Conv:
    """A conversation: its kind, course (-1 for quick questions), zone, section, tool (teacher
    tools), what follows its system part, the end of its class period or its deadline, turns
    left in this sitting, a student's text to paste with the next message (an essay draft, a
    worksheet), whether it is about an essay, its history, the request index of each turn and
    the turn each sitting started at."""

    kind: str
    course: int
    offset: float
    section: int
    material: list[Segment]
    until: float
    turns: int
    tool: str = ""
    paste: Segment | None = None
    essay: bool = False
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    sittings: list[int] = field(default_factory=list)


class TutoringBase(EventState):
    """The clock (from Monday 00:00), prompts, schools, courses, sections, the conversation
    machinery, one-off questions and teacher sessions; bench/heldout_tutoring_school.py and
    bench/heldout_tutoring.py add the conversations that school life drives."""

    def __init__(self, rng: random.Random, size: int, scale: float, sections: int,
                 courses: int) -> None:
        super().__init__(rng, size, scale)
        self.now, self.pre = PRE_ROLL, 0  # requests sent before the trace's start
        self.heads = {k: self.new(rng.randint(*v)) for k, v in HEADS.items()}
        first = self.new(rng.randint(*PLATFORM))
        self.deploy = clock(rng.choice((1, 2)), rng.uniform(2.0, 4.0), 0.0)
        kept = first_tokens([first], round(first[1] * rng.uniform(*DEPLOY_CUT)))
        tail = round((first[1] - kept[0][1]) * rng.uniform(0.8, 1.25))
        self.platform = [[first], [*kept, self.new(tail)]]
        self.zones = [0.0] + [rng.choices([z for z, _ in ZONES], [w for _, w in ZONES])[0]
                              for _ in range(SCHOOLS - 1)]
        self.bells = [rng.randrange(88, 105) * 5 / 60 for _ in range(SCHOOLS)]  # 7:20..8:40
        grades = {s: rng.sample(range(6, 13), 7) for s in SUBJECTS}
        self.courses = [Course(SUBJECTS[c % 5], grades[SUBJECTS[c % 5]][c // 5 % 7],
                               self.new(rng.randint(*COURSE_HEAD))) for c in range(courses)]
        self.sections = [self._section(courses) for _ in range(sections)]
        self.roster_cdf = list(itertools.accumulate(s.roster for s in self.sections))
        self.convs: list[Conv] = []
        self.next_quick()
        self.next_teacher()

    def _section(self, courses: int) -> Section:
        """A section: a school, a course (Zipf(0.8) by course rank), a period, 20..35
        students."""
        rng = self.rng
        school = rng.randrange(SCHOOLS)
        course = rng.choices(range(courses), [1 / (c + 1) ** 0.8 for c in range(courses)])[0]
        return Section(self.zones[school], self.bells[school], course, rng.randrange(7),
                       rng.randint(20, 35))

    def period(self, s: int, day: int) -> Period:
        """Section ``s``'s class period on local day ``day``: 50 minutes, 5 between periods, a
        35-minute lunch after the fourth."""
        sec = self.sections[s]
        at = sec.bell + sec.period * 55 / 60 + (35 / 60 if sec.period >= 4 else 0.0)
        start = clock(day, at, sec.offset)
        return start, start + 50 * 60

    def platform_now(self) -> list[Segment]:
        """The platform's tutor prompt as sent now (a deploy changes it once)."""
        return self.platform[self.now >= self.deploy]

    def unit(self, c: int) -> Segment:
        """Course ``c``'s unit line this week (new each Monday 00:00 on the clock)."""
        units = self.courses[c].units
        w = week(self.now)
        if w not in units:
            units[w] = self.new(self.rng.randint(*UNIT))
        return units[w]

    def reading(self, c: int, w: int) -> tuple[Segment, Segment] | None:
        """Course ``c``'s reading of week ``w`` (the document, its guide) or None."""
        course, rng = self.courses[c], self.rng
        if w not in course.readings:
            doc = rng.random() < READS[course.subject]
            course.readings[w] = (self.new(clipped_length(rng, *DOCUMENT)),
                                  self.new(rng.randint(*GUIDE))) if doc else None
        return course.readings[w]

    def library(self, c: int) -> list[Segment]:
        """Course ``c``'s shared class activities this week."""
        lib = self.courses[c].library
        w = week(self.now)
        if w not in lib:
            lib[w] = [self.new(clipped_length(self.rng, *ACTIVITY)) for _ in range(LIBRARY)]
        return lib[w]

    def system(self, conv: Conv) -> list[Segment]:
        """What a conversation's requests start with: the platform prompt, then the course
        and its unit line (students); the platform and quick-help prompts (quick questions);
        the tool's prompt, the course and its unit line (teachers)."""
        if conv.kind == "quick":
            return [*self.platform_now(), self.heads["quick"]]
        course = [self.courses[conv.course].head, self.unit(conv.course)]
        if conv.kind == "teacher":
            return [self.heads[conv.tool], *course]
        return [*self.platform_now(), *course]

    def open(self, conv: Conv) -> None:
        """Start a conversation now (a student's starts with the student's profile line)."""
        if conv.kind != "teacher":
            conv.history.append(self.new(self.rng.randint(*PROFILE)))
        self.convs.append(conv)
        self.sitting(len(self.convs) - 1, conv.turns)

    def sitting(self, i: int, turns: int) -> None:
        """A sitting of conversation ``i`` (its first, or a student back) starts now."""
        conv = self.convs[i]
        conv.turns = turns
        conv.sittings.append(len(conv.sent))
        self._on_turn(i)

    def _on_turn(self, i: int) -> None:
        """A turn: system part + material + history + a new message (after any pasted text);
        the reply joins the history; the next turn follows a think time, unless the sitting's
        turns are done, the period or deadline has passed, or the context is past CAP."""
        rng, conv = self.rng, self.convs[i]
        message = [self.new(clipped_length(rng, *MESSAGES.get(conv.kind, MESSAGE)))]
        if conv.paste:
            message, conv.paste = [conv.paste, *message], None
        conv.sent.append(len(self.out))
        segs = [*self.system(conv), *conv.material, *conv.history, *message]
        self.send(conv.kind, i, len(conv.sent) - 1, segs)
        reply = self.new(clipped_length(rng, *REPLIES.get(conv.tool or conv.kind, REPLY)))
        conv.history += [*message, reply]
        conv.turns -= 1
        after = self.now + reply[1] / RATE + self.think(conv)
        if conv.turns and after < conv.until and segment_tokens(segs) + 2 * reply[1] < CAP:
            self.at(after, "turn", i)
        else:
            self.ended(i)

    def think(self, conv: Conv) -> float:
        """Seconds from a reply to the next message, by the conversation's kind."""
        return lognormal(self.rng, *THINK[conv.kind])

    def ended(self, i: int) -> None:
        """A sitting of conversation ``i`` is over (bench/heldout_tutoring_school.py plans
        students' returns)."""

    def send(self, kind: str, key: int, step: int, segs: list[Segment]) -> None:
        """EventState.send, counting the requests sent before the trace's start."""
        super().send(kind, key, step, segs)
        self.pre += self.now < 0

    def run(self) -> None:
        """Handle events in time order until the trace holds ``size`` requests from 0 on."""
        while len(self.out) - self.pre < self.size:
            self.now, _, name, payload = heapq.heappop(self.events)
            getattr(self, "_on_" + name)(payload)

    def next_quick(self) -> None:
        """Plan the next one-off question."""
        t, s = self.arrive(QUICK_PER_DAY, QUICK_FLOOR, student_rate, STUDENT_PEAK,
                           STUDENT_MEAN)
        self.at(t, "quick", s)

    def next_teacher(self) -> None:
        """Plan the next teacher session."""
        t, s = self.arrive(TEACHER_PER_DAY, TEACHER_FLOOR, teacher_rate, TEACHER_PEAK,
                           TEACHER_MEAN)
        self.at(t, "teacher", s)

    def _on_quick(self, s: int) -> None:
        """A one-off question from a student of section ``s`` (WORKSHEET: after a photographed
        worksheet's text), QUICK_MORE of them with a follow-up or two."""
        self.next_quick()
        rng = self.rng
        paste = None
        if rng.random() < WORKSHEET:
            paste = self.new(clipped_length(rng, *WORKSHEET_TEXT))
        turns = 1 + (rng.randint(1, 2) if rng.random() < QUICK_MORE else 0)
        self.open(Conv("quick", -1, self.sections[s].offset, s, [], float("inf"), turns,
                       paste=paste))

    def _on_teacher(self, s: int) -> None:
        """Section ``s``'s teacher uses a tool (a quiz on the week's reading QUIZ_READING of
        the time the course has one)."""
        self.next_teacher()
        rng, sec = self.rng, self.sections[s]
        tool = rng.choices([t for t, _ in TOOLS], [w for _, w in TOOLS])[0]
        reading = self.reading(sec.course, week(self.now))
        doc = tool == "quiz" and reading and rng.random() < QUIZ_READING
        self.open(Conv("teacher", sec.course, sec.offset, s, [reading[0]] if doc else [],
                       float("inf"), clipped_length(rng, *TEACHER_TURNS), tool=tool))

    def arrive(self, per_day: float, floor: float, rate, peak: float, mean: float) -> tuple:
        """The next arrival of a stream of ``per_day`` on a Monday (scaled, at least
        ``floor``) over the sections' zones by ``rate(t, offset)`` (thinning; ``peak`` its
        maximum, ``mean`` its Monday mean): (time, section), a section by its roster."""
        top = max(floor, per_day * self.scale) / DAY * peak / mean
        t, weights = self.now, self.roster_cdf
        while True:
            t += self.rng.expovariate(top)
            s = bisect.bisect_left(weights, self.rng.random() * weights[-1])
            if self.rng.random() * peak < rate(t, self.sections[s].offset):
                return t, s

    def student_time(self, lo: float, hi: float, lag: Length, offset: float,
                     forward: bool = False) -> float | None:
        """A student's time ``lag`` (lognormal, hours) before ``hi`` (after ``lo`` when
        ``forward``), within lo..hi, drawn again until students' activity at that local hour
        accepts it; None after 200 tries (the window has no waking hours)."""
        rng, peak = self.rng, max(SCHOOLDAY) * max(STUDENT_DAYS)
        for _ in range(200):
            gap = lognormal(rng, *lag) * HOUR
            t = lo + gap if forward else hi - gap
            if lo < t < hi and rng.random() * peak < student_rate(t, offset):
                return t
        return None
