"""bench.heldout's ``course_grading`` shape, the people's side: students' tutoring chats over
the course's notes and the problem set (whole notes and the newest lecture summary, or
sections retrieved per turn), TAs' office-hours help queue (a burst of tickets at each
session's start, over the statement and the rubric), each course's FAQ bot (its FAQ changed
by announcements) and the writing center's one-off essay feedback over long uploads. Chats
arrive hour by hour, rising toward the course's deadline. See
bench/heldout_course_grading.py's docstring for the numbers."""

from __future__ import annotations

import math
import random

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_course_jobs import STAFF, Jobs
from bench.heldout_course_parts import DAY, END, FAQ_SECTION, HOUR

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"tutor": (1600, (4, 0.7, 1, 16), (45, 1.0, 5, 1500), (260, 0.6, 40, 1200),
                   (50.0, 0.9)),
         "office": (700, (2, 0.5, 1, 5), (60, 0.8, 10, 400), (200, 0.5, 60, 700), (40.0, 0.8)),
         "faq": (450, (1.6, 0.5, 1, 4), (25, 0.7, 5, 150), (120, 0.5, 40, 400), (30.0, 0.8)),
         "essay": (1200, (1.5, 0.6, 1, 4), (60, 0.8, 15, 400), (600, 0.4, 200, 1500),
                   (120.0, 0.9))}
TUTOR = 0.05  # tutoring sessions a day per enrolled student (before the deadline's surge)
FAQS = 0.05  # FAQ sessions a day per enrolled student (likewise)
SURGE = (3.0, 6 * HOUR, 0.35)  # x (1 + 3 e^(-lead / 6 h)) before the deadline, x 0.35 after
ESSAYS = 90  # writing-center sessions a day at scale 1.0
STUDENT_HOURS = (1.0, 0.7, 0.45, 0.25, 0.12, 0.08, 0.1, 0.2, 0.4, 0.6, 0.75, 0.8, 0.8, 0.85,
                 0.9, 0.9, 0.9, 0.9, 0.95, 1.1, 1.3, 1.45, 1.45, 1.25)  # by hour of day
RAG = 0.4  # courses whose tutor retrieves note sections per turn (the rest send the notes)
RETRIEVE = (3, 6, 0.7)  # sections a turn retrieves; chance each is from a covered lecture
GUIDE = 2500  # tokens of the writing center's guide
UPLOAD = (4500, 0.6, 1200, 25000)  # tokens of an essay upload
SESSIONS = ((0, 0.3), (1, 0.45), (2, 0.25))  # office-hours sessions a course holds
SESSION = ((10.0, 19.0), (1.5, 2.0), 0.12, 2.0, 18 * HOUR)  # start hours, hours long,
# tickets per enrolled student, x 2 within 18 h of the deadline
WORK = (500, 0.8, 100, 3000)  # tokens of the work a ticket pastes
ANNOUNCE = 0.35  # courses whose FAQ gets an announcement (one section rewritten)
MAX_CONTEXT = 32000  # tokens of a chat's context that end it


# a Chat's owner is its course (-1 for an essay); what it holds fixed comes after the head's
# fixed part (office: the pasted work; essay: the upload)


class Desk(Jobs):
    """The whole replica: the world and the jobs (``Jobs``) and the people's chats."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chat_system = {k: self.new(v[0]) for k, v in CHATS.items()}
        self.guide = self.new(GUIDE)
        self.rag = [rng.random() < RAG for _ in self.courses]
        self.chats: list[Chat] = []
        self.sessions: list[tuple[int, float, float]] = []  # (course, start, hours)
        self.announcements: list[tuple[int, float]] = []  # (course, time)
        for c, course in enumerate(self.courses):
            self.plan_sessions(c)
            if rng.random() < ANNOUNCE:
                self.at(rng.randrange(2) * DAY + rng.uniform(*STAFF) * HOUR, "announce", c)
        self.at(0.0, "tick", 0)

    def surge(self, c: int, t: float) -> float:
        """How much a course's students chat at ``t`` against its deadline."""
        lead = self.courses[c].deadline - t
        return 1 + SURGE[0] * math.exp(-lead / SURGE[1]) if lead > 0 else SURGE[2]

    def _on_tick(self, h: int) -> None:
        """The hour's chats: per course tutoring and FAQ sessions, and essay uploads."""
        rng, w = self.rng, STUDENT_HOURS[h % 24] / 24
        for c, course in enumerate(self.courses):
            k = course.size * w * self.surge(c, self.now + HOUR / 2)
            for kind, rate in (("tutor", TUTOR), ("faq", FAQS)):
                for _ in range(poisson(rng, k * rate)):
                    self.at(self.now + rng.uniform(0, HOUR), "chat", (kind, c))
        for _ in range(poisson(rng, ESSAYS * self.scale * w)):
            self.at(self.now + rng.uniform(0, HOUR), "chat", ("essay", -1))
        self.at(self.now + HOUR, "tick", h + 1)

    def plan_sessions(self, c: int) -> None:
        """A course's office-hours sessions before its deadline: tickets by enrollment (x 2
        close to the deadline), most in the session's first minutes."""
        rng, course = self.rng, self.courses[c]
        for _ in range(pick(rng, SESSIONS)):
            start = rng.randrange(2) * DAY + rng.uniform(*SESSION[0]) * HOUR
            length = rng.uniform(*SESSION[1]) * HOUR
            if start >= course.deadline:
                continue
            self.sessions.append((c, start, length))
            near = course.deadline - start < SESSION[4]
            mean = course.size * SESSION[2] * (SESSION[3] if near else 1.0)
            for _ in range(max(1, poisson(rng, mean))):
                self.at(start + rng.triangular(0, length, 0.1 * length), "chat", ("office", c))

    def _on_announce(self, c: int) -> None:
        """An announcement rewrites one section of the course's FAQ."""
        course = self.courses[c]
        faq = list(course.faq.current)
        k = self.rng.randrange(len(faq))
        faq[k] = self.new(max(16, round(FAQ_SECTION * self.rng.uniform(0.6, 1.6))))
        course.faq.versions.append((self.now, faq))
        self.announcements.append((c, self.now))

    def _on_chat(self, arg: tuple[str, int]) -> None:
        """A new chat of ``kind``: office pastes the student's work, essay uploads a draft."""
        kind, c = arg
        rng = self.rng
        fixed = {"office": [WORK], "essay": [UPLOAD]}.get(kind, [])
        fixed = [self.new(clipped_length(rng, *f)) for f in fixed]
        self.chats.append(Chat(kind, c, clipped_length(rng, *CHATS[kind][1]), fixed))
        self._on_turn(len(self.chats) - 1)

    def retrieve(self, c: int) -> list[Segment]:
        """Sections the tutor retrieves for a turn: mostly from the covered lectures."""
        rng, course = self.rng, self.courses[c]
        covered = [x for k in course.covers for x in course.notes[k]]
        every = [x for n in course.notes for x in n]
        out: list[Segment] = []
        for _ in range(rng.randint(*RETRIEVE[:2])):
            x = rng.choice(covered if rng.random() < RETRIEVE[2] else every)
            if x not in out:
                out.append(x)
        return out

    def head(self, chat: Chat) -> list[Segment]:
        """What a chat's turn sends before the history."""
        sys = self.chat_system[chat.kind]
        if chat.kind == "essay":
            return [sys, self.guide, *chat.fixed]
        course = self.courses[chat.owner]
        if chat.kind == "faq":
            return [sys, course.syllabus, *course.faq.at(self.now)]
        if chat.kind == "office":
            return [sys, course.statement, *course.rubric.at(self.now), *chat.fixed]
        if self.rag[chat.owner]:
            return [sys, course.syllabus, course.statement, *self.retrieve(chat.owner)]
        notes = [x for k in course.covers for x in course.notes[k]]
        return [sys, course.syllabus, course.statement, *notes, *course.summaries[-1:]]

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause = CHATS[chat.kind]
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat), msg, reply,
                              (chat.kind, chat.owner, (n, len(chat.sent))))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / 35.0 + rng.lognormvariate(0.0, pause[1]) * pause[0]
            if self.now + gap < END:
                self.at(self.now + gap, "turn", n)
