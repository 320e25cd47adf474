"""bench.heldout's ``news_desk`` shape, the people's side: the news events (a flash wire story
updated every few minutes, the main staff story's rolling versions, the editors' burst of
questions and one-click actions over it, a live blog summarized again and again, the comment
and question surge), routine live blogs, reporters' multi-turn chats, the readers' question
bot over the archive and the day's stories, and one-off comment moderation. See
bench/heldout_news_desk.py's docstring for the numbers."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_newsd_jobs import Jobs
from bench.heldout_newsd_world import (DAY, DESK_SHARE, DESKS, HOUR, MINUTE, NEWSROOM, READERS,
                                       Event, paragraphs)

# kind -> (system prompt tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"chat": (1300, (3, 0.8, 1, 20), (50, 0.9, 5, 800), (250, 0.6, 30, 1500), (90.0, 1.0)),
         "breaking": (1200, (1, 0.6, 1, 4), (30, 0.7, 8, 200), (180, 0.5, 40, 600),
                      (40.0, 0.8)),
         "ask": (900, (1, 0.7, 1, 5), (25, 0.7, 5, 150), (200, 0.4, 60, 600), (45.0, 0.8))}
RATE = 40.0  # tokens a second a reply decodes at
MAX_CONTEXT = 24000  # tokens of a chat's context that end it
REPORTER_CHATS = 72  # a day at scale 1.0 (by NEWSROOM)
ATTACH = (0.45, (1800, 0.8, 300, 7000))  # chats with a document (notes, transcript, release)
RESUME = (0.15, (10 * MINUTE, 60 * MINUTE))  # chat turns that come back later
ASKS = 300  # readers' questions a day at scale 1.0 (by READERS)
ASK_CHUNKS = (3, 5)  # retrieved chunks a question's prompt holds
EVERGREEN = 0.5  # questions on a topic by popularity (else on a story in the news)
STORY_CHUNK = 5  # paragraphs of a story per retrieval chunk
COMMENTS = 800  # reader comments moderated a day at scale 1.0 (by READERS)
POLICY, MOD_CUE = 1000, 30  # tokens of the moderation policy, of its cue
COMMENT = (60, 0.9, 10, 600)
PULSE = {"comment": 6.0, "ask": 1.5, "chat": 0.3, "burst": 2.2}  # a minute at intensity 1
PRESET = 0.4  # burst requests that are one of the editors' tool's one-click actions:
PRESETS = (0.35, 0.25, 0.15, 0.1, 0.1, 0.05)  # summary, push alert, social, SEO, timeline, Q&A
BLOG_SYSTEM, BLOG_CUE = 800, 40
BLOG_HEADER = (500, 0.4, 200, 1000)
ENTRY = (110, 0.6, 20, 500)  # tokens of a live-blog entry
RECAP = (400, 0.3, 200, 700)  # tokens of the recap a compaction keeps
WINDOW = 16000  # entry tokens a summary holds; past it the oldest go into a recap
SUMMARY = (2, 10 * MINUTE, 2 * MINUTE)  # entries, or time, since the last; the least gap
# routine blogs: (first start hour, last, how long, median gap between entries)
ROUTINES = ((19.0, 20.5, 2.5 * HOUR, 4 * MINUTE), (9.5, 11.0, 4 * HOUR, 6 * MINUTE),
            (8.0, 9.0, 7 * HOUR, 12 * MINUTE))
GAPS = {"version": 6 * MINUTE, "flash": 5 * MINUTE, "entry": 1.5 * MINUTE}  # at intensity 1
DONE = 0.05  # intensity (of the peak) below which an event's versions, blog and pulses stop
SIDEBARS = ((5, 10), (10, 25), 8 * HOUR)  # a major event's staff, wire sidebars; over
MINORS = {"quiet": (4, 6), "breaking": (1, 3), "scheduled": (2, 3)}


@dataclass
class Blog:
    """A live blog: its event (-1: routine), header, when it closes (inf: by its event),
    median gap between entries, entries, the window's first entry, the recaps, and the
    summaries' request indices with the entry count each held."""

    event: int
    header: Segment
    end: float
    gap: float
    entries: list[Segment] = field(default_factory=list)
    lo: int = 0
    recaps: list[Segment] = field(default_factory=list)
    sent: list[tuple[int, int]] = field(default_factory=list)
    last: float = -math.inf


@dataclass
class NewsChat(Chat):
    """A Chat (owner: the desk for a reporter's chat, the event for an editor's, the topic
    for a reader's question; fixed: the attachment, nothing, the retrieved chunks), the
    preset it sent (-1: none) and the story an editor's chat is on (the event's main story,
    or its flash wire story before the main one is filed)."""

    preset: int = -1
    story: int = -1


class Desk(Jobs):
    """The whole replica: the pipeline (``Jobs``), the events and the people's chats."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        new = self.new
        self.chat_system = {k: new(v[0]) for k, v in CHATS.items() if k != "chat"}
        self.desk_system = [new(clipped_length(rng, CHATS["chat"][0], 0.3, 700, 2500))
                            for _ in DESKS]
        self.presets = [new(clipped_length(rng, 30, 0.3, 15, 60)) for _ in PRESETS]
        self.policy, self.mod_cue = new(POLICY), new(MOD_CUE)
        self.blog_system, self.blog_cue = new(BLOG_SYSTEM), new(BLOG_CUE)
        self.chats: list[NewsChat] = []
        self.blogs: list[Blog] = []
        self.comments: dict[int, int] = {}
        self._ranked: dict[int, tuple] = {}
        self.arrivals(REPORTER_CHATS, NEWSROOM, "chat", None)
        self.arrivals(ASKS, READERS, "ask", None)
        self.arrivals(COMMENTS, READERS, "comment", None)
        for d in (0, 1):
            k = 3 if scenario == "quiet" else 2
            for first, last, span, gap in rng.sample(ROUTINES, k):
                self.at((d * 24 + rng.uniform(first, last)) * HOUR, "blog", (-1, span, gap))
        self.plan_events()

    def plan_events(self) -> None:
        """The scenario's events: small breaks (4..6 on a quiet day), plus a major breaking
        event at 08..18 on either day, or a planned big night at 19..20 on the first."""
        rng = self.rng
        for _ in range(rng.randint(*MINORS[self.scenario])):
            start = (rng.choice((0, 1)) * 24 + rng.choices(range(24), NEWSROOM)[0]) * HOUR
            self.event(Event(False, start + rng.uniform(0, HOUR), rng.uniform(0.12, 0.25),
                             rng.uniform(0.5, 1.2) * HOUR, 0.0, 0.0, self.topic_of(None)))
        topic = self.topic_of(rng.choice((0, 2, 3)))
        if self.scenario == "breaking":
            day = rng.choice((0, 1)) * DAY
            self.event(Event(True, day + rng.uniform(8, 18) * HOUR, 1.0,
                             rng.uniform(2.5, 4) * HOUR, 0.0, rng.uniform(10, 25) * MINUTE,
                             topic))
        elif self.scenario == "scheduled":
            self.event(Event(True, rng.uniform(19, 20) * HOUR, rng.uniform(0.5, 0.65),
                             1.5 * HOUR, rng.uniform(3, 5) * HOUR, -2 * HOUR, topic))

    def event(self, ev: Event) -> None:
        """Event ``ev`` on the clock; a planned one's main story is written 6 hours before."""
        self.news.append(ev)
        e = len(self.news) - 1
        self.at(ev.start, "event", e)
        if ev.major:
            self.at(ev.start + ev.opens, "blog", (e, math.inf, GAPS["entry"]))
        if ev.plateau:
            self.at(ev.start - 6 * HOUR, "main", e)

    def relative(self, e: int) -> float:
        """Event ``e``'s intensity now, as a share of its peak."""
        return self.news[e].intensity(self.now) / self.news[e].peak

    def _on_event(self, e: int) -> None:
        """Event ``e`` breaks: the flash wire story, the main story (unless written before),
        the editors' burst, the pulses; for a major one the memo note, the style note (if
        unplanned) and the sidebars."""
        rng, ev = self.rng, self.news[e]
        if ev.major:
            self.memo_note()
        ev.wire = self.story("wire", ev.topic, 6.0 if ev.major else 1.5,
                             paragraphs(rng, self.new, 1), e)
        self.triage(ev.wire)
        self.at(self.now + GAPS["flash"], "chain", (e, "flash"))
        if not ev.plateau:
            self.at(self.now + rng.uniform(10, 25) * MINUTE, "main", e)
        for what in PULSE:
            self.at(self.now + rng.uniform(1, 5) * MINUTE, "pulse", (e, what))
        if ev.major and not ev.plateau:
            self.at(self.now + rng.uniform(1, 2) * HOUR, "style", e)
        if ev.major:
            staff, wire, span = SIDEBARS
            for source, count in (("staff", staff), ("wire", wire)):
                for _ in range(rng.randint(*count)):
                    self.at(self.now + rng.uniform(0.3 * HOUR, span), "sidebar", (e, source))

    def _on_style(self, e: int) -> None:
        self.style_note(e)

    def _on_main(self, e: int) -> None:
        """The event's main story: filed and published at once (a break), or written ahead
        and published at the start (a planned night); its versions roll from then."""
        rng, ev = self.rng, self.news[e]
        paras = paragraphs(rng, self.new, rng.randint(3, 5) if not ev.plateau else
                           clipped_length(rng, 12, 0.3, 6, 25))
        ev.story = self.story("staff", ev.topic, 20.0 if ev.major else 4.0, paras, e)
        if ev.plateau:
            for k in (1, 2):
                self.at(self.now + k * rng.uniform(1, 2.5) * HOUR, "edit", ev.story)
            self.at(ev.start, "publish", ev.story)
            self.at(ev.start + GAPS["version"], "chain", (e, "version"))
            return
        self._on_publish(ev.story)
        self.at(self.now + GAPS["version"], "chain", (e, "version"))

    def _on_chain(self, arg: tuple[int, str]) -> None:
        """The next version of the event's main story or flash wire story, sooner the harder
        the event hits; none once it has died down."""
        e, what = arg
        r = self.relative(e)
        if r < DONE:
            return
        ev = self.news[e]
        self._on_update(ev.story if what == "version" else ev.wire)
        gap = GAPS[what] / r * self.rng.uniform(0.5, 1.5)
        self.at(self.now + min(gap, 2 * HOUR), "chain", arg)

    def _on_sidebar(self, arg: tuple[int, str]) -> None:
        """A sidebar of a major event: a staff story filed (high weight) or a wire story."""
        e, source = arg
        if source == "wire":
            self.stories[self._on_wire(self.news[e].topic)].event = e
            return
        n = self.story("staff", self.news[e].topic, self.rng.uniform(3.0, 8.0),
                       paragraphs(self.rng, self.new, clipped_length(self.rng, 10, 0.4, 4, 30)),
                       e)
        self.file(n, self.rng.randint(0, 1), self.rng.random() < 0.3)

    def _on_pulse(self, arg: tuple[int, str]) -> None:
        """An event's extra traffic: a comment on one of its stories, a reader's question on
        its topic, a reporter's chat on its desk, an editor's request on the main story."""
        e, what = arg
        ev = self.news[e]
        if self.relative(e) < DONE:
            return
        if what == "comment":
            ids = [n for n in self.hot()[0] if self.stories[n].event == e]
            if ids:
                main = ev.story in ids and self.rng.random() < 0.5
                self._on_comment(ev.story if main else self.rng.choice(ids))
        elif what == "ask":
            self._on_ask(ev.topic)
        elif what == "chat":
            self._on_chat(self.topic_desk[ev.topic])
        else:
            self.burst(e)
        rate = PULSE[what] * self.scale * ev.intensity(self.now) / MINUTE
        self.at(self.now + self.rng.expovariate(rate), "pulse", arg)

    def burst(self, e: int) -> None:
        """An editor's request on the event's main story (the flash wire story before it is
        filed): a one-click action (one turn) or a question, maybe followed up."""
        rng, ev = self.rng, self.news[e]
        chat = NewsChat("breaking", e, clipped_length(rng, *CHATS["breaking"][1]), [],
                        story=ev.story if ev.story >= 0 else ev.wire)
        if rng.random() < PRESET:
            chat.preset, chat.turns = rng.choices(range(len(PRESETS)), PRESETS)[0], 1
        self.start(chat)

    def head(self, chat: NewsChat) -> list[Segment]:
        """What a chat's turn sends before the history: the reporter's desk prompt, the style
        guide as it stands and the attachment; the editors' prompt, the guide and the main
        story as it stands; the readers' bot's prompt and the retrieved chunks."""
        guide = self.guide.at(self.now)
        if chat.kind == "chat":
            return [self.desk_system[chat.owner], *guide, *chat.fixed]
        if chat.kind == "breaking":
            story = self.stories[chat.story]
            return [self.chat_system["breaking"], *guide, *story.text.current]
        return [self.chat_system["ask"], *chat.fixed]

    def start(self, chat: NewsChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message (a preset's cue); the reply joins the
        history; the next turn after the reply and a pause (a reporter's some time later)."""
        chat, rng = self.chats[n], self.rng
        _, _, message, reply, pause = CHATS[chat.kind]
        if chat.preset >= 0:
            msg = self.presets[chat.preset]
        else:
            msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.head(chat), msg, reply, (chat.kind, n, len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            if chat.kind == "chat" and rng.random() < RESUME[0]:
                gap += rng.uniform(*RESUME[1])
            self.at(self.now + gap, "turn", n)

    def _on_chat(self, desk: int | None) -> None:
        """A reporter opens the desk assistant, with a document attached some of the time."""
        rng = self.rng
        if desk is None:
            desk = rng.choices(range(len(DESKS)), DESK_SHARE)[0]
        fixed = []
        if rng.random() < ATTACH[0]:
            total = clipped_length(rng, *ATTACH[1])
            fixed = [self.new(total // 2), self.new(total - total // 2)]
        self.start(NewsChat("chat", desk, clipped_length(rng, *CHATS["chat"][1]), fixed))

    def chunks(self, topic: int) -> list[Segment]:
        """A question's retrieved chunks on ``topic``, in rank order: archive chunks (the
        first ones likelier) and chunks of the topic's stories in the news (by news value)."""
        rng = self.rng
        archive, cum = self.ranked(topic)
        pool: list[tuple[Segment, ...]] = []
        weights: list[float] = []
        ids, scores = self.hot()
        for n, sc in zip(ids, scores):
            if self.stories[n].topic == topic:
                paras = self.stories[n].text.at(self.now)
                for k in range(0, len(paras), STORY_CHUNK):
                    pool.append(tuple(paras[k:k + STORY_CHUNK]))
                    weights.append(sc * 2.0 / (1 + k // STORY_CHUNK))
        if not pool and not cum:
            return []
        news = sum(weights) / (sum(weights) + (cum[-1] if cum else 0.0))
        picks = [rng.choices(pool, weights)[0] if rng.random() < news else
                 (rng.choices(archive, cum_weights=cum)[0],) for _ in range(3 * ASK_CHUNKS[1])]
        return [s for c in list(dict.fromkeys(picks))[:rng.randint(*ASK_CHUNKS)] for s in c]

    def ranked(self, topic: int) -> tuple[list[Segment], list[float]]:
        """``topic``'s archive chunks and their cumulative retrieval weights (1 / rank)."""
        if topic not in self._ranked:
            chunks = self.archive[topic]
            self._ranked[topic] = (chunks, list(itertools.accumulate(
                1.0 / (r + 1) for r in range(len(chunks)))))
        return self._ranked[topic]

    def _on_ask(self, topic: int | None) -> None:
        """A reader asks the question bot: on a topic by popularity or a story in the news."""
        rng = self.rng
        if topic is None:
            n = self.hot_story()
            topic = self.topic_of(None) if n is None or rng.random() < EVERGREEN else \
                self.stories[n].topic
        turns = clipped_length(rng, *CHATS["ask"][1])
        self.start(NewsChat("ask", topic, turns, self.chunks(topic)))

    def _on_comment(self, n: int | None) -> None:
        """A reader's comment, moderated once: the policy, the story's headline and summary,
        the comment, the cue."""
        n = self.hot_story() if n is None else n
        if n is None:
            return
        segs = [self.policy, self.dek(n), self.new(clipped_length(self.rng, *COMMENT)),
                self.mod_cue]
        self.comments[n] = self.comments.get(n, 0) + 1
        self.emit("moderate", n, self.comments[n] - 1, segs)

    def _on_blog(self, arg: tuple[int, float, float]) -> None:
        """A live blog opens: an event's (it closes as the event dies down) or a routine one
        (a game, a hearing, the markets) that closes after its span."""
        e, span, gap = arg
        header = self.new(clipped_length(self.rng, *BLOG_HEADER))
        self.blogs.append(Blog(e, header, self.now + span, gap))
        if e >= 0:
            self.news[e].blog = len(self.blogs) - 1
        self.at(self.now, "entry", len(self.blogs) - 1)

    def _on_entry(self, b: int) -> None:
        """A live-blog entry; a summary if enough entries or time have gone by since the
        last; the next entry, sooner the harder its event hits."""
        blog, rng = self.blogs[b], self.rng
        blog.entries.append(self.new(clipped_length(rng, *ENTRY)))
        since = len(blog.entries) - (blog.sent[-1][1] if blog.sent else 0)
        quiet = self.now - blog.last
        if quiet >= SUMMARY[2] and (since >= SUMMARY[0] or quiet >= SUMMARY[1]):
            self.summarize(b)
        gap = blog.gap
        if blog.event >= 0:
            r = self.relative(blog.event)
            if self.now > self.news[blog.event].start and r < DONE:
                return
            gap /= max(r, 0.25)
        gap *= rng.lognormvariate(0.0, 0.5)
        if self.now + gap < blog.end:
            self.at(self.now + gap, "entry", b)

    def summarize(self, b: int) -> None:
        """The blog's key-points summary: system prompt, header, the recap, the entries since
        the window's start, the cue. Past WINDOW tokens the oldest half of the window is
        folded into a new recap first."""
        blog = self.blogs[b]
        window = sum(n for _, n in blog.entries[blog.lo:])
        if window > WINDOW:
            while window > WINDOW // 2:
                window -= blog.entries[blog.lo][1]
                blog.lo += 1
            blog.recaps.append(self.new(clipped_length(self.rng, *RECAP)))
        segs = [self.blog_system, blog.header, *blog.recaps[-1:], *blog.entries[blog.lo:],
                self.blog_cue]
        blog.sent.append((self.emit("liveblog", b, len(blog.entries), segs), len(blog.entries)))
        blog.last = self.now
