"""bench.heldout's ``ide_tree`` shape: an IDE code-completion service used by teams of
developers, tree-of-thought search agents, and a background of ordinary chat, on one server.
Written after ``ghostbig`` was frozen (at 0cee503), by someone who had not read the eviction
policies; the workload is modelled on how such traffic looks, not on any policy.

Content is laid out in tokens and cut into 16-token prefix-chained blocks with
``bench.heldout_fewshot.Blocks`` (only full blocks are hashed; a block's id stands for its
tokens and everything before them). Completions run on a code model, the agents and chats on
a chat model, so the two never share a block. Time is counted in ticks, about one request a
tick over the trace; every source schedules its own next request and the trace takes them in
time order, so a busy hour of typing does not slow the chats down.

What each part models:

- repositories: 8 teams of 4..12 developers, each owning 1..3 repositories of 20..80 files
  (60..3000 tokens, median 600; popularity Zipf(1) in a random order). A repository's
  language picks one of 3 completion preambles (24..240 tokens); half of the repositories
  have an instructions file (100..600 tokens) sent right after it.
- completion requests: preamble + instructions + up to 2 context files (the developer's most
  recently opened or viewed files of the repository other than the current one, most recent
  first, the first 320 tokens of each) + the current file up to the cursor. Teammates send
  the same files in orders of their own; a burst starts with 0..2 views of popular files
  (jumps to a definition), so hot files often lead the context.
- typing bursts: 1..40 completions (mean about 8) on one file, 1..10 ticks apart. Before
  each the developer types 2..30 tokens or accepts a 10..120-token suggestion; 15 % of the
  time (60 %, up to 80 tokens, once the file passes 3000 tokens) 1..40 tokens before the
  cursor are deleted first. So a request extends the previous one, or shares it up to the
  deletion. The cursor starts at the end of the file 20 % of the time, else anywhere in it.
  When the burst ends the file is saved: from its first changed token on it is new content
  for every later request that sends it, as a current or a context file. Two developers
  never edit one file at once. A burst goes on the developer's last file (60 %), another
  recent one (20 %) or a file by popularity; 5 % of bursts switch repository (mostly to
  another of the team's).
- pauses and working days: after a burst a developer pauses (lognormal, median 230 ticks).
  The trace spans 3 days; each team works 40 % of each day, shifted by its time zone, and
  skips a day with chance 0.15. A pause that would end after hours ends early in the team's
  next working hours (arrivals spread over a tenth of a day), so each repository has busy
  days and quiet nights.
- tree-of-thought searches: 3 run at once, a request every 4..36 ticks each. A root (one of
  3 agent prompts with tool schemas, 300..900 tokens, + a unique 60..800-token task), then
  2..4 levels: for each node a proposal request (node + template), then for each of its
  2..6 children a scoring request (node + a new 30..400-token thought + template); the best
  1..2 children of the level are kept, the rest pruned, never sent again. Last, the best
  leaf + an answer template, and the search is over for good; a new one starts.
- background chat: new conversations arrive 0.1 a tick (Poisson). A turn re-sends one of 3
  system prompts (100..800 tokens) + the history + a new message (4..2000 tokens, median
  40); the reply (8..1500, median 100) joins the history. 50 % of conversations have one
  turn, 35 % 2..5, 15 % 6..15; each has its own think time (lognormal, median 50 ticks); one
  past 8192 tokens ends.

9000 requests at scale 1.0 (over seeds 1..30: 40..56 % completions, 14..19 % search
requests, 30..41 % chat turns): 650k..840k blocks requested, 80k..89k distinct (10..13 %).
Days are fractions of the trace (``size`` ticks make 3 days), so a scaled-down trace still
has working hours, quiet periods, saves and finished searches.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from bench.heldout_fewshot import Blocks, TraceState, clipped_length

Trace = list[list[int]]
Segment = tuple[int, int]  # (content id, tokens): the first ``tokens`` tokens of one text
Meta = tuple  # (kind, actor, step, tokens, detail): see Run
SIZE = 9000  # requests at scale 1.0
CHAT_RATE = 0.1  # new conversations a tick (time is in ticks, about one request each)
TREE_GAP = 20  # mean ticks from a search's request to its next
KEYSTROKES = (1, 10)  # ticks from a completion to the next one in its burst
TEAMS, LANGUAGES, AGENTS, PRODUCTS, SEARCHES = 8, 3, 3, 3, 3
DAYS, WORKDAY, DAY_OFF = 3, 0.4, 0.15  # days in the trace, share of a day at work
CONTEXT_FILES, CONTEXT_HEAD = 2, 320  # context files sent, tokens of each
PAUSE = 230  # median ticks from a developer's burst to the next
MAX_FILE = 3000  # tokens past which typing mostly replaces text
MAX_CONTEXT = 8192  # tokens of a conversation's context that end it
CODE, CHAT = 1, 0  # model salts: the completion model, the chat and agent model


class Ide(NamedTuple):
    """What a completion request sends: ``keep`` tokens of the current file unchanged since
    the burst's previous request (since the saved file for its first), ``cursor`` tokens
    sent; the file's ``version`` when the burst started; each context file as (file,
    version); ``ends``: the token offsets where the preamble, the instructions (if any) and
    each context file end."""

    keep: int
    cursor: int
    repo: int
    file: int
    version: int
    contexts: tuple[tuple[int, int], ...]
    ends: tuple[int, ...]


@dataclass
class Repo:
    """A repository: its preamble, instructions file ([] if none), its files (saved
    content), each file's version (saves so far) and popularity weight."""

    preamble: Segment
    rules: list[Segment]
    files: list[list[Segment]]
    versions: list[int]
    weights: list[float]


@dataclass
class Dev:
    """A developer: team, repository, recently opened files (most recent first), and the
    burst in progress: requests left, working copy up to the cursor (``head``) and after it
    (``tail``), first changed token (``edit``), the file's version at the start."""

    team: int
    repo: int
    recent: list[int] = field(default_factory=list)
    burst: int = -1
    left: int = 0
    head: list[Segment] = field(default_factory=list)
    tail: Segment = (0, 0)
    edit: int = 0
    version: int = 0


@dataclass
class Run:
    """A generated trace with what the tests need. ``meta`` per request: ("ide", developer,
    burst, tokens before the current file, Ide), ("tree", search, path of the node (child
    indices from the root), tokens of the node, "propose" / "score" / "answer") or ("chat",
    conversation, turn, 0, product). ``times``: the tick of each request. ``saves``: (request,
    repo, file, old content, new content, first changed token). ``windows``: per team its
    working hours in ticks."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    saves: list[tuple[int, int, int, list[Segment], list[Segment], int]]
    repos: list[Repo]
    devs: list[Dev]
    windows: list[list[tuple[float, float]]]
    blocks: Blocks


def ide_tree(seed: int, scale: float = 1.0) -> Trace:
    """Teams typing code completions in shared repositories (bursts, edits, working days),
    interleaved tree-of-thought searches, and background chat. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``)."""
    state = _State(random.Random(seed), int(SIZE * scale))
    for n in range(state.size):
        state.step(n)
    return Run(state.out, state.meta, state.times, state.saves, state.repos, state.devs,
               state.windows, state.blocks)



def _size(segments: list[Segment]) -> int:
    return sum(t for _, t in segments)  # tokens


def _cut(segments: list[Segment], tokens: int) -> list[Segment]:
    """The first ``tokens`` tokens of ``segments`` (the last piece shortened: same text)."""
    out = []
    for content, t in segments:
        if tokens <= 0:
            break
        out.append((content, min(t, tokens)))
        tokens -= t
    return out


def _windows(rng: random.Random, size: int) -> list[tuple[float, float]]:
    """A team's working hours as tick ranges: WORKDAY of each day (``size`` ticks make DAYS
    days), shifted by the team's time zone, each day skipped with chance DAY_OFF."""
    day, zone = size / DAYS, rng.random()
    out = []
    for d in range(-1, DAYS + 1):
        a, b = (d + zone) * day, (d + zone + WORKDAY) * day
        if rng.random() >= DAY_OFF and b > 0:
            out.append((max(0.0, a), b))
    return out


class _State(TraceState):
    """The generator's state while it walks the trace: a heap of events in time, each a
    developer's next completion, a search's next request or a conversation's next turn (or
    the arrival of a new one); one request per step, the earliest event first."""

    def __init__(self, rng: random.Random, size: int) -> None:
        super().__init__(rng, size)
        self.saves, self.times = [], []
        self.events: list[tuple[float, int, str, int]] = []  # heap: (tick, order, kind, key)
        self.order = itertools.count()
        preambles = [self.new(clipped_length(rng, 80, 0.6, 24, 240)) for _ in range(LANGUAGES)]
        owned = [rng.randint(1, 3) for _ in range(TEAMS)]
        self.repos = [self._repo(preambles) for _ in range(sum(owned))]
        starts = list(itertools.accumulate([0, *owned]))
        self.owned = [list(range(starts[t], starts[t + 1])) for t in range(TEAMS)]
        self.windows = [_windows(rng, size) for _ in range(TEAMS)]
        self.devs = [Dev(t, rng.choice(self.owned[t])) for t in range(TEAMS)
                     for _ in range(rng.randint(4, 12))]
        for d in range(len(self.devs)):  # the trace starts in the middle of things
            self._pause(d, rng.uniform(0, 2 * PAUSE))
        self.editing: set[tuple[int, int]] = set()  # (repo, file) in a burst
        self.bursts = itertools.count()
        self.agents = [[self.new(rng.randint(300, 900))] + [self.new(rng.randint(20, 60))
                       for _ in range(3)] for _ in range(AGENTS)]  # prompt + 3 templates
        self.ids = itertools.count()  # searches, by start
        self.searches = [self._search() for _ in range(SEARCHES)]
        for i in range(SEARCHES):
            self._at(rng.uniform(0, TREE_GAP), "tree", i)
        self.prompts = [self.new(rng.randint(100, 800)) for _ in range(PRODUCTS)]
        self.convs: dict[int, list] = {}
        self._at(rng.expovariate(CHAT_RATE), "chat", -1)

    def _repo(self, preambles: list[Segment]) -> Repo:
        """A repository (see the module docstring)."""
        rng = self.rng
        files = [[self.new(clipped_length(rng, 600, 0.8, 60, MAX_FILE))]
                 for _ in range(rng.randint(20, 80))]
        ranks = rng.sample(range(len(files)), len(files))
        rules = [self.new(rng.randint(100, 600))] if rng.random() < 0.5 else []
        return Repo(rng.choice(preambles), rules, files, [0] * len(files),
                    [1 / (r + 1) for r in ranks])

    def step(self, n: int) -> None:
        """Request ``n``: the earliest event's."""
        t, _, kind, key = heapq.heappop(self.events)
        self.times.append(t)
        {"ide": self._ide, "tree": self._tree, "chat": self._chat}[kind](n, t, key)

    def _at(self, t: float, kind: str, key: int) -> None:
        heapq.heappush(self.events, (t, next(self.order), kind, key))

    def _send(self, model: int, segments: list[Segment], meta: Meta) -> None:
        self.out.append(self.blocks.ids(model, segments))
        self.meta.append(meta)

    def _pause(self, d: int, t: float) -> None:
        """Developer ``d`` types again at ``t``, or at the next start of the team's working
        hours (a little after it) if ``t`` is after hours; never if no day is left."""
        for a, b in self.windows[self.devs[d].team]:
            if t < b:
                if t < a:
                    t = a + self.rng.uniform(0, 0.1 * self.size / DAYS)
                self._at(t, "ide", d)
                return

    def _ide(self, n: int, t: float, d: int) -> None:
        """Developer ``d``'s next completion (the first of a burst after a pause). Within a
        burst completions come KEYSTROKES ticks apart (debounced typing); a burst that ends
        is saved and a pause follows."""
        dev = self.devs[d]
        if not dev.left:
            self._begin(d)
        self._complete(d, dev)
        dev.left -= 1
        if dev.left:
            self._at(t + self.rng.uniform(*KEYSTROKES), "ide", d)
        else:
            self._save(n, dev)
            self._pause(d, t + self.rng.lognormvariate(math.log(PAUSE), 1.2))

    def _begin(self, d: int) -> None:
        """Developer ``d`` starts a burst: maybe another repository, then a file (not one a
        teammate is editing) and a cursor in it."""
        rng, dev = self.rng, self.devs[d]
        if rng.random() < 0.05:
            mine = [r for r in self.owned[dev.team] if r != dev.repo]
            dev.repo = rng.choice(mine) if mine and rng.random() < 0.8 else \
                rng.randrange(len(self.repos))
            dev.recent = []
        repo = self.repos[dev.repo]
        f = self._file(dev, repo)
        self.editing.add((dev.repo, f))
        viewed = rng.choices(range(len(repo.files)), repo.weights, k=rng.randint(0, 2))
        dev.recent = list(dict.fromkeys([f, *viewed[::-1], *dev.recent]))[:8]
        text = repo.files[f]
        size = _size(text)
        cursor = size if rng.random() < 0.2 else rng.randint(0, size)
        dev.head, dev.tail, dev.edit = _cut(text, cursor), self.new(size - cursor), cursor
        dev.version, dev.burst = repo.versions[f], next(self.bursts)
        dev.left = min(40, 1 + int(rng.expovariate(1 / 7)))

    def _file(self, dev: Dev, repo: Repo) -> int:
        """The file of ``dev``'s next burst: the last one (60 %), another recently opened one
        (20 %), else one by popularity; one a teammate is editing is swapped for a free one
        (a new, empty file if none is free)."""
        rng, u = self.rng, self.rng.random()
        if dev.recent and u < 0.6:
            f = dev.recent[0]
        elif len(dev.recent) > 1 and u < 0.8:
            f = rng.choice(dev.recent[1:])
        else:
            f = rng.choices(range(len(repo.files)), repo.weights)[0]
        if (dev.repo, f) in self.editing:
            free = [g for g in range(len(repo.files)) if (dev.repo, g) not in self.editing]
            if not free:
                repo.files.append([])
                repo.versions.append(0)
                repo.weights.append(min(repo.weights))
                free = [len(repo.files) - 1]
            f = rng.choice(free)
        return f

    def _complete(self, d: int, dev: Dev) -> None:
        """The developer types (deleting first now and then), then a completion request:
        preamble + instructions + context files + the current file up to the cursor."""
        rng, repo = self.rng, self.repos[dev.repo]
        cursor = _size(dev.head)
        long = cursor + dev.tail[1] > MAX_FILE
        if cursor and rng.random() < (0.6 if long else 0.15):
            cursor -= rng.randint(1, min(cursor, 80 if long else 40))
            dev.head = _cut(dev.head, cursor)
            dev.edit = min(dev.edit, cursor)
        typed = rng.randint(10, 120) if rng.random() < 0.1 else rng.randint(2, 30)
        dev.head = dev.head + [self.new(typed)]
        head = [repo.preamble, *repo.rules]
        ends = list(itertools.accumulate(t for _, t in head))
        contexts = tuple((g, repo.versions[g]) for g in dev.recent[1:1 + CONTEXT_FILES])
        for g, _ in contexts:
            head += _cut(repo.files[g], CONTEXT_HEAD)
            ends.append(_size(head))
        ide = Ide(cursor, cursor + typed, dev.repo, dev.recent[0], dev.version, contexts,
                  tuple(ends))
        self._send(CODE, head + dev.head, ("ide", d, dev.burst, ends[-1], ide))

    def _save(self, n: int, dev: Dev) -> None:
        """The burst's file is saved: everyone sends the new content from now on."""
        repo, f = self.repos[dev.repo], dev.recent[0]
        new = dev.head + [dev.tail]
        self.saves.append((n, dev.repo, f, repo.files[f], new, dev.edit))
        repo.files[f], repo.versions[f] = new, repo.versions[f] + 1
        self.editing.discard((dev.repo, f))

    def _tree(self, n: int, t: float, i: int) -> None:
        """The next request of running search ``i``; a finished one is replaced at once."""
        while True:
            try:
                s, segments, path, tokens, role = next(self.searches[i])
                break
            except StopIteration:
                self.searches[i] = self._search()
        self._send(CHAT, segments, ("tree", s, path, tokens, role))
        self._at(t + self.rng.uniform(0.2, 1.8) * TREE_GAP, "tree", i)

    def _search(self) -> Iterator[tuple[int, list[Segment], tuple, int, str]]:
        """A tree-of-thought search's requests, in order, as (search, segments, node path,
        node tokens, role); see the module docstring."""
        rng, s = self.rng, next(self.ids)
        prompt, propose, score, answer = self.agents[rng.randrange(AGENTS)]
        frontier = [((), [prompt, self.new(clipped_length(rng, 250, 0.8, 60, 800))])]
        for _ in range(rng.randint(2, 4)):
            children = []
            for path, node in frontier:
                yield s, node + [propose], path, _size(node), "propose"
                for c in range(rng.randint(2, 6)):
                    child = node + [self.new(clipped_length(rng, 120, 0.6, 30, 400))]
                    children.append((path + (c,), child))
                    yield s, child + [score], path + (c,), _size(child), "score"
            frontier = rng.sample(children, min(len(children), rng.randint(1, 2)))
        path, node = rng.choice(frontier)
        yield s, node + [answer], path, _size(node), "answer"

    def _chat(self, n: int, t: float, c: int) -> None:
        """The next turn of conversation ``c``, or if ``c`` is -1 the first of a new one
        (arrivals are Poisson); see the module docstring."""
        rng = self.rng
        if c < 0:
            self._at(t + rng.expovariate(CHAT_RATE), "chat", -1)
            c, u = n, rng.random()  # a conversation is named by its first request
            turns = 1 if u < 0.5 else rng.randint(2, 5) if u < 0.85 else rng.randint(6, 15)
            self.convs[c] = [rng.randrange(PRODUCTS), [], 0, turns,
                             rng.lognormvariate(math.log(50), 1.2)]
        conv = self.convs[c]
        product, history, turn, turns, think = conv
        message = self.new(clipped_length(rng, 40, 1.0, 4, 2000))
        prompt = [self.prompts[product], *history, message]
        self._send(CHAT, prompt, ("chat", c, turn, 0, product))
        history += [message, self.new(clipped_length(rng, 100, 0.7, 8, 1500))]
        conv[2] += 1
        if conv[2] < turns and _size([self.prompts[product], *history]) < MAX_CONTEXT:
            self._at(t + 1 + rng.expovariate(1 / think), "chat", c)
        else:
            del self.convs[c]
