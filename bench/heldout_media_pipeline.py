"""bench.heldout's ``media_pipeline`` shape: one inference replica behind a media company's LLM
pipeline over its audio and video archive, whose trace opens with a re-processing walk that
shares no prefix. Written after ``adaptive`` was frozen (at ec4e19e), blind: by someone who
had not read the eviction policies, bench/baselines.py, bench/policies.py,
bench/policy_traces.py, docs/eviction.md, docs/benchmarks.md or any results, and no policy,
LRU, OPT, replay or hit rate was run or computed on it; the workload is modelled on how a
media company's metadata jobs and editorial tools build their prompts, not on any policy.

Where the numbers come from: the structure (a metadata job re-run over the back catalog with
a new model, chaptering from the raw transcript and later stages re-sending it with the
earlier output, as pipelines that chain LLM calls do; new episodes ingested the same way and
subtitled section by section; editors asking an assistant that holds the show bible; a
social team searching transcripts for clips) follows how media companies describe such
systems in public. The rates, sizes and shares are this writer's estimates, not
measurements.

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts at midnight; the
trace ends at the second midnight.

Archive (bench/heldout_media_parts.py): 30 shows of four kinds (podcasts 35 %, TV series
20 %, daily news 15 %, clip channels 30 %), audiences Zipf(1.0) by a random rank, each with
a bible (1200..12000 tokens, median 4000, in 600-token sections), a glossary (120..1500) and
2..6 of 8 subtitle languages. The back catalog: 1800 episodes x scale x 0.85..1.15 among the
shows (Zipf(0.8) sizes x 1.0 podcast, 0.6 series, 2.0 news, 3.0 clips), walked show by show
in the backlog's order, oldest first. A transcript: podcast 2500..22000 tokens (median 9000),
series 2000..11000 (6000), news 1200..8000 (3500), clips 120..2500 (600), in sections of
600..2000 tokens. Popularity: the show's audience x Pareto(1.3) (capped at 50), x 10 for a
new episode.

Requests:

- archive: at 00:20..00:50 each night the re-processing job takes the next 90K..130K (night
  1: 60K..90K) transcript blocks of the back catalog (x scale) and cuts them into units of
  28K..40K stage-1 blocks (x scale). A unit's chapters walk sends each episode's transcript
  then a 60-token cue (no system prompt, so no two share a first block); when it ends, the
  unit's summary walk (the chapters prompt, its chapters, an 85-token cue) and ad-break walk
  (the same with a 70-token cue; podcasts and news only) start, and so does the next unit's
  chapters walk. One stream per walk, each request after the last one's reading (6000
  tokens/s) and writing (35 tokens/s) x 0.8..1.25 / scale. So the trace opens with unit 0's
  chapters walk alone: every block new for 28K..40K blocks x scale.
- retry: 2 % of a job's requests fail validation and are sent again exactly after their
  walk's last episode.
- rerun: at 13:00..16:00 on day 0 the summary prompt is fixed (a new cue) and the summary is
  re-run over every episode done so far, in the order their chapters were first done, at the
  job's pace; on day 1 (60 % of seeds) the ad-break prompt at 11:00..17:00 likewise.
- ingest: new episodes (a day per show x scale: podcast 0.3 at 05..09, series 0.15 at
  06..08, news 1.5 at 05..19, clips 4 at 08..21) go through the same stages back to back
  (each a few seconds after the last output), then each section into each of the show's
  languages (translate: a 400..1400-token language prompt, the glossary, the section, a
  40-token cue; a stream per language). 15 % get a corrected section 1..5 hours later and
  go through the stages again (reingest: new from that section on) and re-translate it.
- dub: at 00:20..01:20 on day 1 the dubbing backfill sends the 60..100 (x scale) most
  popular back-catalog episodes section by section into a ninth language at the job's pace.
- editor: 40 sessions a day (x scale) at 09..19: system prompt (1300), style guide
  (1800..4500), the show's bible as it stands, half the time one of its 5 latest episodes'
  transcript, the history, the message (8..800); 1..16 turns (median 4), replies 40..1200,
  pauses of a lognormal median 90 s (10 % 10..60 minutes away). Writers rewrite a bible
  section 3 times a day (Poisson, 10..18): every later block of that show's prompts new.
- clip: 160 search sessions a day (x scale) at 07..22 on an episode with chapters (half the
  time one of a show's 3 latest published in the last 36 hours, else by popularity): system
  prompt (700), the transcript, its current chapters (the pipeline's once it has run), a
  question (8..120); 1..10 questions (median 3) 20..150 s apart.

At scale 1.0, seeds 1..4: 4.4K..6.6K requests over two days, 1.27M..1.58M blocks requested,
0.31M..0.35M distinct (21..25 %), generated in about 1.5 s each on a shared 2-core box. The
opening (unit 0's chapters walk, before the first repeated block): 28.7K..39.7K blocks (46..706
episodes, clip channels make it long) in 10..25 minutes. The job takes 460..1270 back-catalog
episodes over the two nights. Blocks by kind: archive 30..37 %, editor 20..22 %, clip 11..22 %,
rerun 8..21 %, translate 6..10 %, dub 1..5 %, ingest 1..3 %, retry about 1 %, reingest under
1 %. At scale 0.2 (the tests): 0.28M..0.30M blocks, opening 6.3K..8.3K blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_media_desk import Search, Session
from bench.heldout_media_jobs import Night, Pipeline, Walk
from bench.heldout_media_parts import Archive

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("archive", "retry", "rerun", "ingest", "reingest", "translate", "dub", "editor",
         "clip")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    archive, retry, rerun, ingest and reingest have the episode and the stage; translate and
    dub the episode and the language; editor the session (``sessions``) and the turn; clip
    the search (``searches``) and the question. ``times``: seconds from midnight. The
    generator (``state``) holds the archive, the cues' versions, the nights' units and walks,
    the re-runs, retries, translations, corrections and bible edits."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Pipeline

    @property
    def archive(self) -> Archive:
        return self.state.archive

    @property
    def nights(self) -> list[Night]:
        return self.state.nights

    @property
    def reruns(self) -> list[Walk]:
        return self.state.reruns

    @property
    def sessions(self) -> list[Session]:
        return self.state.sessions

    @property
    def searches(self) -> list[Search]:
        return self.state.searches


def media_pipeline(seed: int, scale: float = 1.0) -> Trace:
    """A media company's replica: an overnight re-processing walk over the archive's
    transcripts (bare prompts, no shared prefix), later stages re-sending them with the
    chapters, re-runs after a prompt fix, new episodes ingested and subtitled, editors' chats
    over show bibles, clip searches, and the next night's walk. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    p = Pipeline(random.Random(seed), scale)
    p.run()
    return Run(p.out, p.meta, p.times, p)
