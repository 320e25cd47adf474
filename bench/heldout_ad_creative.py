"""bench.heldout's ``ad_creative`` shape: one inference replica behind an advertising platform's
creative generator over a work week. Written blind at b184687: by someone who had not read the
policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay or any reuse
statistic); the workload is modelled on how such a product builds its prompts, not on any
policy. Every rate, size and share below is this writer's estimate of the domain, not a
measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock is the platform's local time, Monday 00:00 to Saturday 00:00;
marketers work by office hours (bench.heldout_lab_world.WORK: peaks 09..11 and 14..16), the
feed sync and the A/B refresh run at night.

Seeds differ in the platform: seed s has layout (s - 1) % 4 of ``LAYOUTS``
(bench/heldout_ad_creative_world.py): "search" (a search-ads platform: short text ads as
headlines, descriptions, sitelinks, callouts; 120 advertisers, 1..3 small feed entries a
campaign, 3 locales), "social" (image captions, stories, carousels and 180..1000-token video
scripts; 80 advertisers, 5 locales, the editor's draft before the chat), "retail" (a retail
media network: 40..200 feed entries an advertiser of 100..450 tokens, 8..24 of them in every
prompt, 15 % of entries rewritten each night, 70 % of the advertisers in the seasonal event, on
Wednesday) and "agency" (an agency tool: every advertiser under one of 6 agencies, whose style
comes right after the system prompt; search, social, display and video formats).

The world: the system prompt (1200 tokens), each region's ad policy (600..3500; one region's
rewritten once, Tuesday..Thursday 10..17 h) and each of 10 categories' (225..6000, regulated
ones long), agencies' style prompts (300..2000; 20..40 % of the advertisers, all on "agency"),
locale guides (150..900), a spec per channel format (400..1300), the seasonal brief template
(1800). Advertisers (the layout's count x scale, NOTE(ad-scale)): a region and category, an
activity weight (lognormal(0, 1)), brand guidelines and tone (500..4500), a product feed.
Campaigns: a brief (250..2000), the feed entries they are about, 1..all of the layout's
formats, 1..3 locales; a cell per (format, locale) holds its live variants. Each advertiser
runs 1..2 campaigns from last week, their cells live (35..40 % of cells under an A/B test).
Every generation prompt is the head (NOTE(ad-head): system, policies, agency style, brand,
brief, the feed entries as they stand), then the cell's format spec and locale guide.

Requests (bench/heldout_ad_creative_desk.py):

- bulk: 10..14 jobs a day (x scale) by office hours, an advertiser by weight, 45 % for a new
  campaign: the job walks the campaign's cells, format by format, each with its format's
  variants (1..6): head, task, the variants it wrote in that cell so far, an angle cue (one
  of 8, 15..90 tokens) (NOTE(ad-variants)); each after the last is decoded (60 tokens/s).
  A cell's variants replace its live ones when it is done.
- seasonal: on Thursday (Wednesday on "retail") 09..10 h a holiday sale launches: 30..70 %
  of the advertisers (at least 3) each get a seasonal campaign (1..2 formats, no brief)
  whose job starts an exponential delay (mean 20 min) later: the same walk behind the
  seasonal template.
- abtest: at 03:00..03:30 each night a refresh walks the tested cells live for 12 h or more
  whose test concluded that night (30 %): the night's ranking picks up to 3 winners (best
  first) and 1..2 losers; per loser: head, task, the winners, the loser, a cue (NOTE(ad-ab));
  the new variant takes the loser's place.
- edit: 30..45 sessions a day (x scale): a marketer opens a live variant of one of their
  campaigns; each turn is head, the editing prompt (600), the task, the draft as it stands
  and the whole chat (draft first on "social" and "agency", else the chat first:
  NOTE(ad-edit-draft)), a message (5..300); 1..12 turns (median 4) while the prompt stays
  under 24000 tokens, replies 30..600 tokens, a pause (median 60 s). The last draft
  replaces the variant it opened.
- review: 5..30 s after a cell's variants change (job, refresh, edit): the reviewer's prompt
  (900), the advertiser's region and category policies as they stand, the cell's variants, a
  cue; 10..30 min after a region's policy is rewritten a sweep re-checks each of the
  region's campaigns with live variants, all its cells in one request, one after another.
- The nightly feed sync (02:00) rewrites 3..15 % of each advertiser's entries: later prompts
  about them are new from that entry on.

The layout's advertisers and the marketers scale; the nightly walks, the reviews and the
seasonal wave follow the campaigns. At scale 1.0, seeds 1..4 (search, social, retail, agency):
2.9K..3.9K requests, 1.74M..2.15M blocks requested, generated in 1.1..2.8 s each on a shared
2-core box; 54..71 bulk and 30..42 seasonal jobs, 120..220 editing sessions. Blocks by kind:
bulk 27..35 %, edit 24..35 %, abtest 10..20 %, review 10..18 %, seasonal 9..16 %. At scale 0.1
(the tests): 290..500 requests, 0.15M..0.30M blocks, 0.1..0.2 s each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_ad_creative_desk import Desk
from bench.heldout_ad_creative_world import LAYOUTS
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("bulk", "seasonal", "abtest", "edit", "review")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): for bulk and seasonal the owner is the job (``state.jobs``) and the step its
    request; for abtest the night's refresh (``state.refreshes``) and its request; for edit
    the session (``state.chats``) and its turn; for review the cell (``state.cells``) and its
    review. ``times``: seconds from Monday 00:00, the platform's local time. ``state``: the
    generator (layout, advertisers, campaigns, cells, jobs, refreshes, sessions, reviews)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def ad_creative(seed: int, scale: float = 1.0) -> Trace:
    """An advertising platform's creative generator over a work week: bulk jobs writing a
    campaign's variants behind a long head (policies, brand, brief, feed entries), a seasonal
    wave behind a shared template, nightly A/B refreshes with the winners pasted in, editing
    sessions re-sent whole with the draft, policy reviews and re-checks. See the module
    docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s has LAYOUTS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, LAYOUTS[(seed - 1) % len(LAYOUTS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
