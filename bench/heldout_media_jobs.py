"""bench.heldout's ``media_pipeline`` shape, the pipeline side: the overnight re-processing
job walking the back catalog stage by stage in units (chapters from the bare transcript, then
a summary and ad breaks re-sending that prompt and its chapters), validation failures sent
again after their walk, re-runs after a prompt fix, new episodes through the same stages and
into their subtitle languages section by section, corrected transcripts run again, and a
night's dubbing backfill into a new language. See bench/heldout_media_pipeline.py's docstring
for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import BLOCK, Segment, clipped_length
from bench.heldout_media_desk import Desk
from bench.heldout_media_parts import DAY, HOUR, LANGUAGES, MINUTE, chapter_tokens, tokens

CHAPTERS, SUMMARY, ADS = 1, 2, 3  # the stages, in order
CUE = {CHAPTERS: 60, SUMMARY: 85, ADS: 70}  # tokens of a stage's instruction
OUTPUT = {SUMMARY: (220, 0.3, 100, 500), ADS: (70, 0.4, 20, 200)}  # tokens a stage writes
AD_KINDS = ("podcast", "news")  # the ad-supported shows, the only ones with an ad-break stage
NIGHT_START = (20.0, 50.0)  # minutes after midnight the job starts
QUOTA = ((80_000, 120_000), (60_000, 90_000))  # transcript blocks a night takes (x scale)
UNIT = (28_000, 40_000)  # stage-1 blocks of a unit of consecutive episodes (x scale)
FAIL = 0.02  # a job's requests whose output fails validation, sent again after the walk
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for one stream
FIXES = ((SUMMARY, 0, (13.0, 16.0), 1.0), (ADS, 1, (11.0, 17.0), 0.6))  # a prompt fix:
# (stage, day, hours, chance); the fixed stage is re-run over every episode it has done
TRANSLATE_CUE = 40  # tokens of the translation instruction after a section
LANG_HEAD = (800, 0.3, 400, 1400)  # tokens of a language's subtitle system prompt
CORRECT = (0.15, (1.0, 5.0))  # new episodes whose transcript gets a correction, hours later
DUB = (60, 100)  # most popular back-catalog episodes dubbed into a new language (x scale)


@dataclass
class Walk:
    """One stage over a list of episodes, one request at a time at the job's pace: its kind
    ("archive" or "rerun"), the night and unit (-1 for a re-run), the first tries' request
    indices and the failed ones still to send again."""

    kind: str
    todo: list[int]
    stage: int
    night: int
    unit: int
    sent: list[int] = field(default_factory=list)
    pos: int = 0
    failed: list[int] = field(default_factory=list)


@dataclass
class Night:
    """A night of the re-processing job: its units (back-catalog episode ids in the job's
    order), the walks as (unit, stage) -> Walk, and the walks still going."""

    night: int
    units: list[list[int]]
    walks: dict[tuple[int, int], Walk] = field(default_factory=dict)
    going: int = 0


class Pipeline(Desk):
    """The whole replica: the archive (``World``), the desk's chats and searches (``Desk``)
    and the pipeline's jobs; ``run`` ends at the second midnight."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.cues = {s: [(-1e18, self.new(n))] for s, n in CUE.items()}  # (since, cue)
        self.langs = [self.new(clipped_length(rng, *LANG_HEAD)) for _ in range(LANGUAGES + 1)]
        self.translate_cue = self.new(TRANSLATE_CUE)
        self.stage1: dict[int, tuple[list[Segment], Segment]] = {}  # prompt, chapters
        self.done: list[int] = []  # episodes in the order their first stage-1 run finished
        self.nights: list[Night] = []
        self.retries: list[tuple[int, int]] = []  # (request index, the request it repeats)
        self.reruns: list[Walk] = []
        self.translations: list[tuple[int, int, int, int]] = []  # (request, episode, lang, sec)
        self.corrections: list[tuple[float, int, int]] = []  # (time, episode, section)
        self.dubbed: list[int] = []  # the dubbing backfill's episodes
        self.cursor = 0
        for night in (0, 1):
            self.at(night * DAY + rng.uniform(*NIGHT_START) * MINUTE, "night", night)
        for stage, day, hours, chance in FIXES:
            if rng.random() < chance:
                self.at(day * DAY + rng.uniform(*hours) * HOUR, "fix", stage)
        self.at(DAY + rng.uniform(*NIGHT_START) * MINUTE + rng.uniform(0, 30) * MINUTE, "dub",
                None)

    def cue(self, stage: int) -> Segment:
        return self.cues[stage][-1][1]

    def prompt(self, e: int, stage: int) -> list[Segment]:
        """Chapters: the transcript as it stands, then the cue (no system prompt). A later
        stage: the prompt of the last chapters run, its chapters, the stage's cue."""
        if stage == CHAPTERS:
            return [*self.archive.episodes[e].text.current, self.cue(CHAPTERS)]
        segs, chapters = self.stage1[e]
        return [*segs, chapters, self.cue(stage)]

    def finish(self, e: int, stage: int, segs: list[Segment]) -> int:
        """A run of ``stage`` on ``e`` that passed (``segs`` its prompt): chapters become the
        episode's; the version of the cue it sent is noted. The output's tokens."""
        ep = self.archive.episodes[e]
        if stage == CHAPTERS:
            if e not in self.stage1:
                self.done.append(e)
            chapters = self.new(chapter_tokens(self.rng, tokens(ep.text.current)))
            ep.chapters.append((self.now, chapters))
            self.stage1[e] = (segs, chapters)
        ep.last[stage] = [c for _, c in self.cues[stage]].index(segs[-1])
        return ep.chapters[-1][1][1] if stage == CHAPTERS else clipped_length(self.rng,
                                                                               *OUTPUT[stage])

    def has_stage(self, e: int, stage: int) -> bool:
        return stage != ADS or self.show_of(e).kind in AD_KINDS

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds until a job stream's next request: reading the prompt and writing the
        output, stretched by 1/scale so a job takes as long at any scale."""
        work = tokens(segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25) / self.scale

    def _on_night(self, night: int) -> None:
        """The job takes the next QUOTA x scale transcript blocks of the back catalog, cuts
        them into units of about UNIT x scale stage-1 blocks and starts unit 0's chapters."""
        rng, arc, scale = self.rng, self.archive, self.scale
        quota, todo, blocks = rng.uniform(*QUOTA[night]) * scale, [], 0
        while self.cursor < len(arc.backlog) and blocks < quota:
            todo.append(arc.backlog[self.cursor])
            blocks += tokens(self.prompt(todo[-1], CHAPTERS)) // BLOCK
            self.cursor += 1
        units, size, goal = [[]], 0, rng.uniform(*UNIT) * scale
        for e in todo:
            if size >= goal:
                units.append([])
                size, goal = 0, rng.uniform(*UNIT) * scale
            units[-1].append(e)
            size += tokens(self.prompt(e, CHAPTERS)) // BLOCK
        if len(units) > 1 and size < goal / 2:
            last = units.pop()
            units[-1] += last
        self.nights.append(Night(night, units))
        self.start(night, 0, CHAPTERS)

    def start(self, night: int, unit: int, stage: int) -> None:
        n = self.nights[night]
        todo = [e for e in n.units[unit] if self.has_stage(e, stage)]
        n.walks[(unit, stage)] = w = Walk("archive", todo, stage, night, unit)
        n.going += 1
        self.at(self.now, "walk", w)

    def _on_walk(self, w: Walk) -> None:
        """The walk's next episode, then its failed ones again (exactly); after a chapters
        walk, the unit's summary and ad-break walks and the next unit's chapters walk."""
        if w.pos < len(w.todo):
            e = w.todo[w.pos]
            w.pos += 1
            segs = self.prompt(e, w.stage)
            w.sent.append(i := self.emit(w.kind, e, w.stage, segs))
            if self.rng.random() < FAIL:
                w.failed.append(i)
                out = chapter_tokens(self.rng, tokens(segs)) if w.stage == CHAPTERS else 100
            else:
                out = self.finish(e, w.stage, segs)
        elif w.failed:
            j = w.failed.pop(0)
            _, e, _, segs = self.meta[j]
            self.retries.append((self.emit("retry", e, w.stage, segs), j))
            out = self.finish(e, w.stage, segs)
        else:
            self.walk_done(w)
            return
        self.at(self.now + self.pace(segs, out), "walk", w)

    def walk_done(self, w: Walk) -> None:
        if w.night < 0:
            return
        n = self.nights[w.night]
        n.going -= 1
        if w.stage != CHAPTERS:
            return
        self.start(w.night, w.unit, SUMMARY)
        self.start(w.night, w.unit, ADS)
        if w.unit + 1 < len(n.units):
            self.start(w.night, w.unit + 1, CHAPTERS)

    def _on_fix(self, stage: int) -> None:
        """The stage's prompt is fixed: a new cue from now on, and a re-run of the stage over
        every episode whose last run of it used an older cue, in the order they were done."""
        self.cues[stage].append((self.now, self.new(CUE[stage] + self.rng.randint(-10, 30))))
        new = len(self.cues[stage]) - 1
        todo = [e for e in self.done if self.archive.episodes[e].last.get(stage, new) < new]
        self.reruns.append(w := Walk("rerun", todo, stage, -1, -1))
        self.at(self.now, "walk", w)

    def _on_ingest(self, arg: tuple[str, int, int, list[int] | None]) -> None:
        """A new (or corrected) episode's next stage, a few seconds after the last one's
        output; after the last stage its sections (all, or the corrected one) go to each of
        the show's subtitle languages, and a correction may come hours later."""
        kind, e, stage, secs = arg
        rng, ep = self.rng, self.archive.episodes[e]
        if self.has_stage(e, stage):
            segs = self.prompt(e, stage)
            self.emit(kind, e, stage, segs)
            wait = tokens(segs) / PREFILL + self.finish(e, stage, segs) / DECODE
            if stage < ADS:
                self.at(self.now + wait + rng.uniform(1, 5), "ingest", (kind, e, stage + 1, secs))
                return
        todo = list(range(len(ep.text.current))) if secs is None else secs
        for lang in self.show_of(e).languages:
            self.at(self.now + rng.uniform(5, 60), "translate", (e, lang, todo))
        if kind == "ingest" and rng.random() < CORRECT[0]:
            self.at(self.now + rng.uniform(*CORRECT[1]) * HOUR, "correct", e)

    def subtitle(self, e: int, lang: int, k: int) -> list[Segment]:
        """A subtitle translation: the language's system prompt, the show's glossary, the
        section as it stands, the instruction."""
        section = self.archive.episodes[e].text.current[k]
        return [self.langs[lang], self.show_of(e).glossary, section, self.translate_cue]

    def _on_translate(self, arg: tuple[int, int, list[int]]) -> None:
        """The next section of an episode into one language; the next follows its output."""
        e, lang, todo = arg
        segs = self.subtitle(e, lang, todo[0])
        self.translations.append((self.emit("translate", e, lang, segs), e, lang, todo[0]))
        if len(todo) > 1:
            wait = tokens(segs) / PREFILL + segs[2][1] * self.rng.uniform(0.9, 1.3) / DECODE
            self.at(self.now + wait, "translate", (e, lang, todo[1:]))

    def _on_correct(self, e: int) -> None:
        """A person corrects one section of a new episode's transcript (names, a misheard
        passage): the pipeline runs the episode again and re-translates that section."""
        ep, rng = self.archive.episodes[e], self.rng
        secs = list(ep.text.current)
        k = rng.randrange(len(secs))
        secs[k] = self.new(max(8, round(secs[k][1] * rng.uniform(0.95, 1.05))))
        ep.text.versions.append((self.now, secs))
        self.corrections.append((self.now, e, k))
        self.at(self.now, "ingest", ("reingest", e, CHAPTERS, [k]))

    def _on_dub(self, _: object) -> None:
        """The dubbing backfill: the DUB x scale most popular back-catalog episodes, section by
        section into a new language (index LANGUAGES), at the job's pace."""
        arc = self.archive
        weight = {e: arc.cum[e] - (arc.cum[e - 1] if e else 0.0) for e in arc.backlog}
        n = max(2, round(self.rng.randint(*DUB) * self.scale))
        top = sorted(arc.backlog, key=weight.__getitem__, reverse=True)[:n]
        self.dubbed = top
        todo = [(e, k) for e in top for k in range(len(arc.episodes[e].text.current))]
        self.at(self.now, "dub_step", todo)

    def _on_dub_step(self, todo: list[tuple[int, int]]) -> None:
        e, k = todo[0]
        segs = self.subtitle(e, LANGUAGES, k)
        self.translations.append((self.emit("dub", e, LANGUAGES, segs), e, LANGUAGES, k))
        if len(todo) > 1:
            self.at(self.now + self.pace(segs, segs[2][1]), "dub_step", todo[1:])
