"""bench.heldout's ``companion_chat`` shape, the users' side: sessions that start by each user's
local evening, continue their last chat (or another, or open a new one with a character by
popularity, now and then a group chat), turns that re-send the whole prompt (the platform's
system prompt, the card, the lorebook entries the recent messages triggered, persona, memory,
the history as the frontend trims it to the context, the message, the post-history
instruction), swipes that re-send a prompt exactly, rewinds, group turns where several
characters answer one after the other, the memory summarizer, a platform prompt deploy and
creators' card edits. See bench/heldout_companion_chat.py's docstring for the numbers."""

from __future__ import annotations

import random

from bench.heldout_companion_world import (DAY, END, HOUR, LOCAL, MEMORY_CAP, MESSAGE, REPLY,
                                           RESERVE, Layout, World, tokens)
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson

SESSIONS = 1.1  # sessions a user starts a day, times their appetite (Gamma(2), mean 1)
RESUME = (("last", 0.65), ("other", 0.15), ("new", 0.2))  # what a session opens
SWIPE = (0.2, ((1, 0.55), (2, 0.25), (3, 0.1), (4, 0.05), (6, 0.05)))  # odds, how many
READ = (12.0, 0.6)  # seconds a user reads a reply before swiping: median, sigma
TYPE = (35.0, 0.7)  # seconds a user reads and types before the next message
RATE = 35.0  # tokens a second a reply streams at
REWIND = (0.04, (1, 2))  # odds a user deletes their last exchanges first, how many
TRIGGER = (0.3, 4)  # odds the triggered lorebook entries change at a turn, most active at once
SPEAKERS = ((1, 0.5), (2, 0.3), (3, 0.2))  # characters answering a group chat's message
SPEAKER_GAP = (1.0, 3.0)  # seconds between one character's reply and the next's request
SUMMARIZER = (500, 40)  # the memory summarizer's system prompt and cue
RECENT = (8, 16)  # messages the periodic summarizer reads
GROWTH = (10, 120)  # tokens a memory rewrite adds (up to MEMORY_CAP)
DEPLOY = (10.0, 16.0)  # UTC hours on day 1 the platform prompt's new version goes live
CARD_EDITS = (2, 5)  # creators' edits of a card's definition over the two days


class Desk(World):
    """The whole replica: the world, the sessions, chats, swipes, the summarizer and the
    platform's changes."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        self.summarizer = [self.new(n) for n in SUMMARIZER]
        self.heads: list[int] = []  # per request: its head's segments (0: memory, swipe)
        self.skipped = 0  # sessions that found the user still in one
        self.deploy: tuple[float, int] | None = None
        self.card_edits: list[tuple[float, int, int]] = []  # (when, card, section)
        self.folds: list[tuple[int, int]] = []  # (memory request, chat request after it)
        for u, user in enumerate(self.users):
            appetite = rng.gammavariate(2.0, 0.5)
            for h in range(int(END // HOUR)):
                mean = SESSIONS * appetite * LOCAL[(h + user.zone) % 24] / sum(LOCAL)
                for _ in range(poisson(rng, mean)):
                    self.at((h + rng.random()) * HOUR, "session", u)
        self.at(DAY + rng.uniform(*DEPLOY) * HOUR, "deploy", None)
        for _ in range(rng.randint(*CARD_EDITS)):
            self.at(rng.uniform(0, END), "card_edit", None)

    def send_chat(self, kind: str, n: int, step: int, segs: list[Segment], head: int) -> int:
        """Emit a chat's request (kind "chat" or "group") with ``head`` head segments."""
        i = self.emit(kind, n, step, segs)
        self.heads.append(head)
        self.chats[n].sent.append(i)
        return i

    def _on_session(self, u: int) -> None:
        """User ``u`` comes online (unless still in a session): their last chat, another of
        theirs or a new one, for a number of turns by the layout."""
        user, rng = self.users[u], self.rng
        if user.online is not None:
            self.skipped += 1
            return
        how = pick(rng, RESUME) if user.chats else "new"
        if how == "new":
            n = self.open_chat(u, [])
        else:
            n = user.chats[-1] if how == "last" else rng.choice(user.chats)
            user.chats.remove(n)
            user.chats.append(n)
        chat = self.chats[n]
        chat.turns = clipped_length(rng, *self.layout.turns)
        chat.sessions.append(len(chat.sent))
        user.online = n
        self._on_turn(n)

    def _on_turn(self, n: int) -> None:
        """The user's next message: a rewind and the lorebook's triggered entries first; in a
        group chat 1..3 characters then answer in turn."""
        chat, rng = self.chats[n], self.rng
        msg = self.new(clipped_length(rng, *MESSAGE))
        if chat.kind == "group":
            chat.history.append(msg)
            speakers = rng.sample(chat.cast, min(len(chat.cast), pick(rng, SPEAKERS)))
            self._on_speak((n, speakers))
            return
        if chat.sent and len(chat.history) - chat.start >= 5 and rng.random() < REWIND[0]:
            del chat.history[-2 * rng.randint(*REWIND[1]):]
            chat.rewinds.append(len(chat.sent))
        self.switch_lore(n)
        segs, head = self.fit(n, [msg, self.post])
        chat.lores.append(tuple(sorted(chat.lore)))
        i = self.send_chat("chat", n, len(chat.sent), segs, head)
        chat.history.append(msg)
        self.after_turn(n, self.reply(n, i))

    def _on_speak(self, arg: tuple[int, list[int]]) -> None:
        """The next character of a group chat answers: the head, the history, its nudge."""
        n, speakers = arg
        segs, head = self.fit(n, [self.nudge(speakers[0])])
        i = self.send_chat("group", n, speakers[0], segs, head)
        done = self.reply(n, i)
        if speakers[1:]:
            self.at(done + self.rng.uniform(*SPEAKER_GAP), "speak", (n, speakers[1:]))
        else:
            self.after_turn(n, done)

    def switch_lore(self, n: int) -> None:
        """Now and then the recent messages trigger another lorebook entry: one added (up to
        the most active at once) or one replaced."""
        chat, rng = self.chats[n], self.rng
        book = self.cards[chat.cast[0]].lore
        if not book or rng.random() >= TRIGGER[0]:
            return
        idle = [e for e in range(len(book)) if e not in chat.lore]
        if chat.lore and (len(chat.lore) >= TRIGGER[1] or rng.random() < 0.5):
            chat.lore.remove(rng.choice(chat.lore))
        if idle:
            chat.lore.append(rng.choice(idle))

    def reply(self, n: int, i: int) -> float:
        """Request ``i``'s reply: the user may swipe it (the same prompt re-sent after each
        reply streamed and was read); the kept one joins the history. When it has streamed."""
        chat, rng = self.chats[n], self.rng
        t, out = self.now, clipped_length(rng, *REPLY)
        swipes = pick(rng, SWIPE[1]) if rng.random() < SWIPE[0] else 0
        if swipes:
            chat.swipes.append((i, []))
        for _ in range(swipes):
            t += out / RATE + rng.lognormvariate(0.0, READ[1]) * READ[0]
            self.at(t, "swipe", (n, len(chat.swipes) - 1))
            out = clipped_length(rng, *REPLY)
        chat.history.append(self.new(out))
        return t + out / RATE

    def _on_swipe(self, arg: tuple[int, int]) -> None:
        n, k = arg
        orig, copies = self.chats[n].swipes[k]
        # NOTE(swipe-exact): a swipe re-sends the prompt its request sent, even where a
        # deploy or a card edit landed in the seconds between; rare, and a regenerate is
        # the same prompt in every frontend the writer knows
        copies.append(self.emit("swipe", n, orig, self.meta[orig][3]))
        self.heads.append(0)

    def after_turn(self, n: int, done: float) -> None:
        """After the reply ``done``: the summarizer may run on the user's memory; the next
        message after the user read it and typed, or the session ends."""
        chat, rng = self.chats[n], self.rng
        user = self.users[chat.owner]
        user.since += 1
        if user.memory and user.since >= user.every:
            user.since = 0
            self.at(done + 2.0, "memory", n)
        chat.turns -= 1
        if chat.turns > 0:
            self.at(done + rng.lognormvariate(0.0, TYPE[1]) * TYPE[0], "turn", n)
        else:
            user.online = None

    def fit(self, n: int, tail: list[Segment]) -> tuple[list[Segment], int]:
        """Chat ``n``'s prompt ending in ``tail``, and its head's length: the frontend first
        drops the oldest history messages until the prompt leaves RESERVE tokens of the
        context ("slide": just enough; "half": down to half the history's room, the dropped
        ones folded into the user's memory where there is one)."""
        chat = self.chats[n]
        head = self.head(chat)
        room = self.layout.context - RESERVE - tokens(tail)
        # NOTE(fold-first): the frontend waits for the summarizer before it sends the turn,
        # so the fold is a request of its own at the same instant and the turn already
        # sends the new memory (every block from the memory on is new in it)
        if tokens(head) + tokens(chat.history[chat.start:]) > room:
            first = chat.start
            if self.layout.drop == "half":
                self.drop_to(chat, (room - tokens(head)) // 2)
                if self.users[chat.owner].memory and chat.start > first:
                    self.fold(chat.owner, chat.history[first:chat.start])
                    head = self.head(chat)
            self.drop_to(chat, room - tokens(head))
            if chat.start > first:
                chat.trims.append((len(self.out), chat.start))
        return [*head, *chat.history[chat.start:], *tail], len(head)

    @staticmethod
    def drop_to(chat, limit: int) -> None:
        """Drop ``chat``'s oldest history messages until the rest is at most ``limit`` tokens
        (a group chat keeps the user's last message)."""
        keep = len(chat.history) - (chat.kind == "group")
        left = tokens(chat.history[chat.start:])
        while chat.start < keep and left > limit:
            left -= chat.history[chat.start][1]
            chat.start += 1

    def fold(self, u: int, dropped: list[Segment]) -> None:
        """The summarizer folds ``dropped`` into user ``u``'s memory: it reads them behind the
        memory as it stands; the new memory applies from now."""
        segs = [self.summarizer[0], *self.persona_memory(u), *dropped, self.summarizer[1]]
        i = self.emit("memory", u, 1, segs)
        self.heads.append(0)
        self.folds.append((i, len(self.out)))
        self.rewrite_memory(u)

    def _on_memory(self, n: int) -> None:
        """The background summarizer rewrites the user's memory from the chat's latest
        messages, read behind the memory as it stands."""
        chat = self.chats[n]
        recent = chat.history[max(chat.start, len(chat.history) - self.rng.randint(*RECENT)):]
        segs = [self.summarizer[0], *self.persona_memory(chat.owner), *recent,
                self.summarizer[1]]
        self.emit("memory", chat.owner, 0, segs)
        self.heads.append(0)
        self.rewrite_memory(chat.owner)

    def rewrite_memory(self, u: int) -> None:
        """User ``u``'s memory gets a new version from now, a little longer (up to a cap)."""
        memory = self.users[u].memory
        grown = memory.current[0][1] + self.rng.randint(*GROWTH)
        memory.versions.append((self.now, [self.new(min(MEMORY_CAP, grown))]))

    def _on_deploy(self, _) -> None:
        """The platform deploys a new version of its system prompt: one section rewritten."""
        self.deploy = (self.now, self.revise(self.platform))

    def _on_card_edit(self, _) -> None:
        """A creator edits their card (by popularity): one section of its definition."""
        k = self.a_card()
        self.card_edits.append((self.now, k, self.revise(self.cards[k].definition)))
