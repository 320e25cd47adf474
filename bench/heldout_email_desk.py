"""bench.heldout's ``email_triage`` shape, the users' side: thread summaries (the thread as it
stands, with no profile, so everyone on a list thread asks the same prompt), reply drafts
re-read with the thread and its files then redrafted turn by turn before the reply is sent,
questions about a file that arrived (minutes to a day later, at the file's version then),
"ask my inbox" chats over the latest mail, and the bursts when people come in at 9 and back
from lunch (a catch-up of the threads that moved overnight). See
bench/heldout_email_triage.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_email_jobs import Jobs
from bench.heldout_email_parts import DAY, HOUR, MINUTE, OFFICE, hour_of, utc
from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson

# kind -> (turns, message tokens, reply tokens, pause (median s, sigma)), each (median,
# sigma, lo, hi) for clipped_length
CHATS = {"draft": ((1, 0.6, 1, 4), (25, 0.8, 6, 150), (180, 0.5, 50, 700), (40.0, 0.8)),
         "attach": ((2, 0.6, 1, 5), (30, 0.8, 8, 150), (200, 0.5, 60, 700), (45.0, 0.8)),
         "ask": ((2, 0.6, 1, 6), (25, 0.8, 5, 200), (180, 0.5, 40, 800), (35.0, 0.8))}
DRAFT = (0.2, 0.55)  # replies a light, heavy user drafts with the assistant
SEND_AFTER = (0.5, 5.0)  # minutes from the last draft to sending the reply
OPEN = (0.1, 0.3)  # files a light, heavy user asks about after they arrive
OPEN_DELAY = (3 * HOUR, 1.5, 2 * MINUTE, 40 * HOUR)  # from arriving to the first question
ATTACH_CAP = 16000  # tokens of a file a question holds (its first sections)
SUMMARIES = (1.0, 4.0)  # summaries a day (office hours) per light, heavy user
ASKS = (0.3, 1.5)  # "ask my inbox" chats a day per light, heavy user
CATCH_UP = (((0, 0.5), (1, 0.5)), ((1, 0.4), (2, 0.35), (3, 0.25)))  # summaries on coming in
BURST_ASK = ((0.15, 0.5), (0.05, 0.3))  # an ask chat on coming in, back from lunch
LUNCH_SUMMARY = (0.3, 1.0)  # a summary on coming back from lunch
RETRIEVED = (4, 10)  # latest messages (not newsletters) an ask chat is given
RATE = 35.0  # tokens a second a reply decodes at
MAX_CONTEXT = 24000  # tokens of a chat's context that end it


@dataclass
class MailChat(Chat):
    """A Chat (owner: the user; fixed after the head: draft, the thread and its files as they
    stood; attach, the file's sections; ask, the latest messages) and the thread or file it
    is about (-1: none)."""

    thread: int = -1
    file: int = -1


class Desk(Jobs):
    """The whole replica: the world, the automatic jobs (``Jobs``) and the users' requests."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.chats: list[MailChat] = []
        self.summaries: list[tuple[int, int, int]] = []  # (user, thread, request)
        for u, user in enumerate(self.users):
            tz = self.user_tz(u)
            for d in (0, 1):
                self.at_live(utc(d, user.arrive[d + 1], tz), "arrive", u)
                self.at_live(utc(d, user.lunch[d + 1], tz), "back", u)
                for name, rates in (("summary", SUMMARIES), ("ask", ASKS)):
                    for _ in range(poisson(rng, rates[user.heavy])):
                        self.at_live(utc(d, hour_of(rng, OFFICE), tz), name, u)

    def at_live(self, t: float, name: str, payload: object) -> None:
        """Schedule ``name`` at ``t`` if it falls in the trace."""
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def chat_head(self, chat: MailChat) -> list[Segment]:
        """What a chat's turn sends before the history: the org's prompt, the task's, the
        profile (not for a file's questions, which start with the file), the fixed part."""
        if chat.kind == "attach":
            return [self.org, self.task["attach"], *chat.fixed]
        return [*self.head(chat.kind, chat.owner), *chat.fixed]

    def start(self, chat: MailChat) -> None:
        self.chats.append(chat)
        self.at(self.now, "turn", len(self.chats) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: the head, the history, the message; the reply joins the history. A draft
        whose last turn is done is sent minutes later."""
        chat, rng = self.chats[n], self.rng
        _, message, reply, pause = CHATS[chat.kind]
        msg = self.new(clipped_length(rng, *message))
        segs, out = self.turn(chat, self.chat_head(chat), msg, reply, (chat.kind, n,
                                                                        len(chat.sent)))
        if chat.turns > 0 and sum(t for _, t in segs) + out[1] < MAX_CONTEXT:
            gap = out[1] / RATE + rng.lognormvariate(0.0, pause[1]) * pause[0]
            self.at(self.now + gap, "turn", n)
        elif chat.kind == "draft":
            gap = out[1] / RATE + rng.uniform(*SEND_AFTER) * MINUTE
            self.at(self.now + gap, "send", n)

    def _on_send(self, n: int) -> None:
        chat = self.chats[n]
        self.send_reply(chat.thread, chat.owner)

    def compose(self, t: int, author: int) -> None:
        """A reply: drafted with the assistant (the thread and its files as they stand, then
        redrafts), or written by hand and sent at once."""
        rng = self.rng
        if not self.live() or rng.random() >= DRAFT[self.users[author].heavy]:
            self.send_reply(t, author)
            return
        files = [s for f in self.threads[t].files for s in self.file_text(f)]
        turns = clipped_length(rng, *CHATS["draft"][0])
        self.start(MailChat("draft", author, turns, [*self.thread_text(t), *files], thread=t))

    def delivered(self, u: int, m: int) -> None:
        """Auto-triage (``Jobs``); a file the message carried may get questions later."""
        super().delivered(u, m)
        rng = self.rng
        for f, _ in self.msgs[m].carried:
            if self.live() and rng.random() < OPEN[self.users[u].heavy]:
                when = self.office_time(self.now + clipped_length(rng, *OPEN_DELAY), u)
                self.at_live(when, "open", (u, f))

    def _on_open(self, arg: tuple[int, int]) -> None:
        """Questions about a file, at its version now."""
        u, f = arg
        turns = clipped_length(self.rng, *CHATS["attach"][0])
        self.start(MailChat("attach", u, turns, self.file_text(f, ATTACH_CAP), file=f))

    def _on_ask(self, u: int) -> None:
        """"Ask my inbox": a chat over the user's latest delivered messages."""
        mail = [m for _, m, _ in self.users[u].inbox[-40:]
                if self.threads[self.msgs[m].thread].kind != "news"]
        if not mail:
            return
        latest = [self.msgs[m].body for m in mail[-self.rng.randint(*RETRIEVED):]]
        turns = clipped_length(self.rng, *CHATS["ask"][0])
        self.start(MailChat("ask", u, turns, latest))

    def moved(self, u: int, since: float) -> list[int]:
        """Threads of two messages or more that reached ``u`` since ``since``, the latest
        first (newsletters aside)."""
        out: dict[int, None] = {}
        for at, m, _ in reversed(self.users[u].inbox):
            if at < since:
                break
            t = self.msgs[m].thread
            if self.threads[t].kind != "news" and len(self.threads[t].msgs) > 1:
                out.setdefault(t)
        return list(out)

    def _on_summary(self, u: int) -> None:
        """A summary of a thread that moved in the last day (by its length)."""
        threads = self.moved(u, self.now - DAY)
        if threads:
            weights = [len(self.threads[t].msgs) for t in threads]
            self.summarize((u, self.rng.choices(threads, weights)[0]))

    def _on_summarize(self, arg: tuple[int, int]) -> None:
        self.summarize(arg)

    def summarize(self, arg: tuple[int, int]) -> None:
        """A thread summary: the org's prompt, the summary task, the thread as it stands, the
        instruction (no profile: the same prompt for everyone on the thread)."""
        u, t = arg
        segs = [self.org, self.task["summary"], *self.thread_text(t), self.cue["summary"]]
        self.summaries.append((u, t, self.emit("summary", u, t, segs)))

    def _on_arrive(self, u: int) -> None:
        """Coming in: summaries of the threads that moved overnight, now and then a chat."""
        rng, heavy = self.rng, self.users[u].heavy
        k = pick(rng, CATCH_UP[heavy])
        when = self.now
        for t in self.moved(u, self.now - 15 * HOUR)[:k]:
            when += rng.uniform(20, 120)
            self.at(when, "summarize", (u, t))
        if rng.random() < BURST_ASK[0][heavy]:
            self.at(when + rng.uniform(30, 300), "ask", u)

    def _on_back(self, u: int) -> None:
        """Back from lunch: a summary now and then, and a chat."""
        rng, heavy = self.rng, self.users[u].heavy
        if rng.random() < LUNCH_SUMMARY[heavy]:
            self.at(self.now + rng.uniform(10, 120), "summary", u)
        if rng.random() < BURST_ASK[1][heavy]:
            self.at(self.now + rng.uniform(30, 300), "ask", u)
