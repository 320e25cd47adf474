"""bench/heldout.py: eviction policies on trace shapes that the tuner was never fitted to.

    python -m bench.heldout [--json FILE] [--seeds 1 2] [--capacities 1000 4000 16000]
                            [--scale 1.0] [--shapes drift loop ...]

``bench.policies`` is where the eviction targets are measured; its shapes are the ones the
adaptive policy was chosen and tuned on. These were written after that tuning, as a check
on the claim that it does not go below LRU on shapes it has not seen (``mooncake`` was
written after a second candidate policy was frozen; that candidate lost and is not in the
product):

    drift     Zipf(0.8) popularity over 3000 prefixes whose ranking is reshuffled every
              1500 requests, plus a unique 0..8-block tail
    loop      round-robin over 400 documents (8..40 blocks), skipping one now and then: the
              classic LRU pathology (a loop longer than the pool)
    tenants   8 tenants (Zipf weights), each a 16..64-block system prompt + one of 50 few-shot
              sets (Pareto-popular) + a unique 1..20-block query
    agent     100 agent sessions re-sending a growing context 2..40 times, with 30 % one-shot
              requests in between
    mooncake  shared system prompts + popular long documents (RAG), multi-turn chats with
              per-chat think times from seconds to hours, and one-shot scans, mixed
    rag_bursty  bursts over a changing hot set of long documents with short unique queries,
              plus background chats (written after the research policy ``ghostwin`` was
              frozen)
    code_edit   a code assistant: shared repository contexts and files, sessions that resend
              their working files and history, edits that make a file's later blocks new
              content, one-off multi-file searches (written after ``doorarc`` was frozen;
              drift to code_edit: bench/heldout_early.py)
    batch_eval  an evaluation harness: concurrent jobs walking tasks' items behind long
              shared k-shot headers, self-consistency repeats, re-runs of earlier tasks, and
              one-off chats (written after ``follow`` was frozen)
    tool_agent  agent loops over shared tool schemas (steps, retries, forks), batch bursts of
              one template, one-off requests (written after ``wintune`` was frozen)
    doc_window  QA sessions sliding a window over long documents, over tenant bursts
              (written after ``arctune`` was frozen)
    doc_fanout  a document pipeline (each document read by 3..8 tasks while in flight, some
              re-run later) beside multi-turn chats and one-off uploads (written after
              ``admitlru`` was frozen); these three: bench/heldout_agents.py
    rerank_rag  retrieval-augmented questions whose chunks come in re-ranked orders, so a
              popular chunk is new content behind another first chunk, beside conversations
              and one-off uploads (written after ``admitrun`` was frozen;
              bench/heldout_rag.py)
    prompt_rollout  a multi-product chat service whose long system prompts get new versions
              rolled out in stages (old and new live together, then the old one is retired),
              tool sets after the prompt, multi-turn conversations with varied think times,
              and one-off long summaries (written after ``admitbig`` was frozen;
              bench/heldout_rollout.py)
    fewshot_lora  k-shot eval tasks, best-of-n bursts and chat under LoRA adapters whose
              popularity shifts (written after the policies were frozen; heldout_fewshot.py)
    ide_tree  team code completion (typing bursts, saved edits, working days), tree-of-thought
              searches and chat (after ``ghostbig`` was frozen; bench/heldout_ide.py)
    support_desk  multi-tenant support tickets over drifting knowledge chunks, handoffs,
              reopens, nightly summaries (after ``ghostpair``; bench/heldout_support.py)
    compaction_chat  consumer chat whose clients compact long conversations into summaries,
              users back after minutes to days, a nightly glossary-prefixed translation job,
              JSON extraction over Zipf templates with retries (written after ``adaptive``
              was frozen (at 5cf3f89); bench/heldout_compaction_chat.py)
    rl_rollout  one replica of an RL post-training fleet: GRPO groups of math, code and
              multi-turn tool prompts coming back once an epoch, weights (part of every
              block's key) updated every step, a periodic eval suite behind few-shot headers,
              debug chats (written after ``adaptive`` was frozen (at fee0aae);
              bench/heldout_rl_rollout.py)
    rl_rollout_kept  the same on an engine that keeps its cache across weight updates, so
              prompts come back an epoch later and eval runs repeat (the helper who wrote
              rl_rollout named the one-line change; added after rl_rollout's first run, in
              which every policy tied LRU)
    vision_mix  a vision-language model shared by an image chat assistant (viral images
              recur across users), a catalog service (skewed, drifting, nightly re-index),
              sliding video windows and multi-page OCR (written after ``adaptive`` was frozen
              (at 50c6f47); bench/heldout_vision.py)
    npc_world  a game's NPC service: dialogue behind shared lore and a world state that is
              regenerated (every later block new), a live event moving players to a new zone,
              raid bursts to one boss, chat moderation (a shared head only), a nightly quest
              walk (written after ``adaptive`` was frozen (at 395a810); bench/heldout_npc.py)
    api_gateway  one replica of a hosted LLM API: 400 customers' template calls, chat apps and
              coding agents behind their own prompts (a deploy makes later blocks new), nightly
              batches, an eval re-run a day later, a retry storm, one-off documents (written
              after ``adaptive`` was frozen (at 395a810); bench/heldout_gateway.py)
    deep_research  one replica behind an answer engine with deep research: search answers
              over Zipf-popular and news pages (follow-ups re-send the thread), research
              sessions fanning out to sub-agents that re-send a growing tool history, then
              synthesis, citation checks and revisions hours later, monitors re-running saved
              queries over changing pages (a change makes later blocks new), PDF uploads
              (written after ``adaptive`` was frozen (at 395a810); bench/heldout_research.py)
    tutoring  a tutoring platform for schools in four time zones: class-period bursts on a
              teacher's activity, homework resumed before deadlines, weekly readings, exam
              review, grading jobs, teacher tools, one-off questions (written after
              ``adaptive`` was frozen (at 395a810); bench/heldout_tutoring.py)
    marketplace  one replica behind an online marketplace: product questions over pages in seven
              storefronts whose price and stock lines change (every later block new), flash
              sales, viral items, assistant sessions with a growing cart back minutes or days
              later, support chats, seller listing batches, a nightly review walk in catalog
              order, bulk pastes (written after ``adaptive`` was frozen (at 395a810);
              bench/heldout_marketplace.py)
    bi_copilot  an enterprise BI / text-to-SQL copilot: analysts' sessions behind their team's
              warehouse schema (a migration makes every later block new), SQL-error retries,
              result questions, sessions resumed the next morning, scheduled dashboard
              narrations, a nightly report job, table docs after migrations, a metrics chat
              bot, one-off pastes (written after ``adaptive`` was frozen at 395a810, by
              someone who had not read the policies; bench/heldout_bi_copilot.py)
    meeting_assist  a meeting assistant: live transcripts behind its system prompt and an org
              glossary, re-sent by rolling summaries and participants' questions, sliding
              caption and highlight windows, post-meeting notes, action items and emails,
              weekly series and standups that start from the last summary, cross-meeting
              search over a team's summaries, time-zone waves, all-hands question bursts, a
              nightly digest walk in meeting order (written after ``adaptive`` was frozen at
              395a810 and after this week's deferred-miniature cost work, which changed no
              choice, by someone who had not read the policies;
              bench/heldout_meeting_assist.py)
    legal_review  one replica behind a legal review and drafting product: lawyers' question
              sessions over a matter's documents for days, drafting behind firm playbooks (an
              edit makes every later section new), redlines of a contract's last two versions
              in negotiation rounds, citation checks re-sending a brief, data-room clause
              extraction walks in order, discovery review and QC samples, Zipf-sized firms in
              seven time zones, deadline bursts (written after ``adaptive`` was frozen at
              NOTE(cold), blind: by someone who had not read the policies, and no policy or
              hit rate was run on it; bench/heldout_legal_review.py)
    localization  one replica behind a translation platform for software companies: CI pushes
              of new UI strings into 5..40 locales, published page edits (only changed sections
              re-run), content drops and release string freezes walked document- or
              language-major behind style guides and termbase excerpts, QA checks re-sending
              source and translation, linguists' post-editing chats, nightly corpus audits in
              one locale (written after ``adaptive`` was frozen, blind: by someone who had not
              read the policies, and no policy or hit rate was run on it;
              bench/heldout_localization.py)
    call_center  one replica behind a contact-center AI platform: IVR routing, voice-agent
              calls behind a client's persona and queue SOP (speculative requests on the ASR's
              partial transcripts, tool results, barge-ins), human take-overs with assist,
              after-call summaries, callbacks minutes to days later, nightly QA walks behind a
              rubric, outbound campaigns with redials, SOP edits (every later section new) and
              outages (a banner, then the old head again) (written after ``adaptive`` was
              frozen, blind: by someone who had not read the policies, and no policy or hit
              rate was run on it; bench/heldout_call_center.py)
    soc_copilot  one replica behind an MSSP's security-operations copilot: alert triage behind an
              hourly threat-intel digest (every later block new when it changes) and the
              client's profile, runbook and rule, lookups whose results are appended, campaign
              bursts and alert storms, analysts' investigations over shifts with hand-offs
              re-sending the case notes, rule rewrites, nightly hunts walking the asset
              inventory and rule catalog in order, weekly reports (written after ``adaptive``
              was frozen at 1ffdf37, blind: by someone who had not read the policies, and no
              policy or hit rate was run on it; bench/heldout_soc_copilot.py)
    catalog_backfill  one replica behind a retailer's LLM service: a nightly backfill pass
              sending every product record once in catalog order as a bare prompt (no shared
              first block, more blocks than the largest pool), failed batches retried, records
              edited meanwhile re-sent by a change-feed sweep; shoppers' chats behind a system
              prompt and policy pages that look items up, merchandisers rewriting descriptions
              behind a style guide, a pairwise recommendation job, price and stock edits, and
              the next night's pass over the edited catalog (written after ``adaptive`` was
              frozen at 3c0364c, blind: by someone who had not read the policies, and no
              policy or hit rate was run on it; bench/heldout_catalog_backfill.py)
    ediscovery_review  one replica behind a law firm's e-discovery platform during a litigation
              matter: it opens with a custodian collection processed one document at a time
              as a bare prompt (no shared first block, no block repeated), exceptions re-run
              exactly, email threading, an AI first-level review behind the review protocol,
              QC re-sending a call with its coding, re-review after a protocol change,
              search-term hit reports over stored samples, attorneys' chats over the protocol
              and case memo, a second collection continuing threads, deposition prep over
              packets, a production checked, redacted and re-checked (written after
              ``adaptive`` was frozen at ec4e19e, blind: by someone who had not read the
              policies, and no policy or hit rate was run on it;
              bench/heldout_ediscovery_review.py)
    media_pipeline  one replica behind a media company's LLM pipeline over its audio and video
              archive: it opens with an overnight re-processing job walking the back catalog's
              transcripts one episode at a time as bare prompts (no shared first block, no
              block repeated for 28K..40K blocks x scale), then summary and ad-break stages
              re-sending each chapters prompt with its chapters, failures sent again exactly, a
              prompt fix re-running a stage over everything done; new episodes ingested and
              subtitled section by section (a corrected section run again), editors' chats
              behind the style guide and a show's bible (an edit makes later blocks new), clip
              searches over popular and new episodes, a dubbing backfill and the next night's
              walk (written after ``adaptive`` was frozen at ec4e19e, blind: by someone who had
              not read the policies, and no policy or hit rate was run on it;
              bench/heldout_media_pipeline.py)
    clinical_scribe  one replica behind a hospital network's clinical documentation assistant
              over two weekdays: ambient-scribe drafts behind specialty templates and growing
              chart summaries (a signed note makes later chart blocks new), revisions, chart
              Q&A and lookups, inbox batches with regenerated replies, prior-authorization
              letters, nursing hand-offs at 07:00 / 19:00 local with exact re-opens, discharge
              summaries, on-call nights, the nightly coding walk (written after ``adaptive``
              was frozen at 89b5b97, blind: by someone who had not read the policies, and no
              policy or hit rate was run on it; bench/heldout_clinical_scribe.py)
    fin_research  one replica behind a buy-side research assistant over two days of an
              earnings season: releases, call transcripts and filings ingested in stages that
              re-send the document, exact retries, live notes over a growing call transcript,
              the nightly screen over the coverage universe on one template, news bursts,
              morning notes, compliance review, peer comparisons in varied orders, model
              updates after guidance changes, a portfolio risk bot (written after
              ``adaptive`` was frozen at 89b5b97, blind, as clinical_scribe;
              bench/heldout_finres.py)
    travel_agent  one replica behind an online travel company's booking assistant over two
              days: planning sessions behind tool schemas with long search results appended
              (a date change drops them), booking flows over fare rules, corporate sessions
              behind a company's travel policy, a hub's storm sending waves of rebooking and
              re-offer requests, service chats re-sending the booking, price alerts re-running
              saved searches, nightly itinerary emails, destination Q&A, a tool-schema deploy
              (written blind at 0e3f7c3, by someone who had not read the policies, and no
              policy or hit rate was run on it; bench/heldout_travel_agent.py)
    insurance_claims  one replica behind a P&C insurer's claims platform over two weekdays with
              a storm: intake chats behind the line's script, triage behind a rubric,
              adjusters over the claim file as it stands, coverage questions over shared base
              forms then endorsements, status questions re-sending the claim summary, estimate
              reviews, acknowledgement batches and template letters, nightly subrogation,
              fraud, audit and reserve walks (written blind at 0e3f7c3, as travel_agent;
              bench/heldout_claims.py)
    recruiting  one replica behind a staffing platform's recruiting assistant over two days:
              screening batches scoring each applicant behind the requisition's description
              and rubric, re-screens after a rubric edit, a job fair's burst, the nightly
              matching walk, outreach drafts, interview-feedback summaries re-run as notes
              land, recruiters' shortlists in varied orders, scheduling chats, an FAQ bot per
              employer, offers (written blind at 12a029e, by someone who had not read the
              policies, and no policy or hit rate was run on it; bench/heldout_recruiting.py)
    logistics_dispatch  one replica behind a carrier's operations assistant over two days:
              dispatchers over live boards re-rendered every few minutes, an exception agent
              re-sending each case as it grows, a storm's flood of exceptions behind an
              advisory, "where is my order" chats, translated driver threads, damage claims,
              customs checks against tariff texts, rate confirmations, the nightly route walk
              (written blind at 12a029e, as recruiting; bench/heldout_logistics_dispatch.py)
    permits_office  one replica behind a city's building-and-permits assistant over two
              weekdays: applicants' chats over the code's sections, plan-review walks sheet by
              sheet and re-reviews after resubmission, inspectors over the permit file as it
              stands, zoning lookups, a fee or code change's burst, letters, nightly summaries,
              public-records scans, translation (written blind at 9af47aa, by someone who had
              not read the policies, and no policy or hit rate was run on it;
              bench/heldout_permits_office.py)
    course_grading  one replica behind a university's teaching-assistant platform over the
              day before a deadline and the deadline day: autograding walks behind each
              assignment's statement and rubric, rubric edits and rescoring, regrades,
              similarity pairs, tutor chats, office-hours bursts, FAQ bots, nightly feedback
              emails, lecture summaries, one-off essays (written blind at 9af47aa, as
              permits_office; bench/heldout_course_grading.py)
    telecom_noc  one replica behind a mobile operator's network-operations assistant over two
              days: alarm triage behind the vendor's dictionary and the site's record, fiber-cut
              and power-outage storms, correlation cases re-sent as they grow, a status page
              re-issued during incidents, runbook chats, change reviews and re-reviews, config
              diffs over versioned references, nightly KPI walks, log dumps read once (written
              blind at 807be5d, as permits_office; bench/heldout_telecom_noc.py)
    bank_kyc  one replica behind a bank's compliance assistant over two weekdays: onboarding
              reviews behind the KYC policy and the jurisdiction's rules, nightly periodic
              reviews, alert agents re-sending growing case files, a sanctions list re-issued
              during the day, SAR drafts, adverse media read once, a guidance note's burst,
              audit walks, a FAQ bot (written blind at 807be5d, as telecom_noc;
              bench/heldout_bank_kyc.py)
    pv_intake  a drug company's safety service: case intake and coding, follow-ups, duplicate
              checks, literature walks, signal chats (written blind at a5a8d48)
    ci_triage  CI failure triage: one-off log tails, flaky-test histories, release bursts,
              bisect and report walks, a broken-main storm (written blind at a5a8d48)
    lit_screen  systematic-review screening: dual screening, adjudication, living-review
              updates, amendments, extraction, chats (written blind at 17845c7)
    home_assist  a smart-home voice assistant fleet: prompt rollouts, device states, tool
              loops, routines, sensor bursts, reports (written blind at 17845c7)
    news_desk  a newsroom assistant: wire stories in versions, headlines, translations,
              fact-checks, newsletters, live blogs, breaking bursts (written blind at b937759)
    patent_search  an IP firm's assistant: claim sets, prior-art reads, claim charts, office
              actions, amendments, family walks (written blind at b937759)
    manufacturing_qc  a factory quality assistant: versioned work instructions, shift-change
              bursts, SPC alarms, lots, NCRs, 8D chats, audit and recall walks (blind, e7f72c4)
    sales_crm  a B2B sales CRM assistant: growing account briefs, email threads, calls, meeting
              prep, pipeline walks, launches, quarter-end (written blind at e7f72c4)
    property_mgmt  a property manager's assistant: resident chats, incident bursts, tickets,
              leases and their abstracts, listings, reminder and report walks (blind, d7675f4)
    airline_ops  an airline's assistants: rebooking chats, disruption bursts, ops boards, crew
              legality, nightly briefs, loyalty terms in versions (written blind at d7675f4)
    tax_prep  a tax firm's assistant in filing season: preparer sessions over extracted
              records, intake, reviews, a nightly re-check behind a changing memo (b2b0f8e)
    city_311  a city's 311 service: multilingual resident chats, ticket routing, duplicate
              checks, case summaries, storm bursts, a nightly status batch (blind, b2b0f8e)
    email_triage  an enterprise inbox assistant: triage behind each user's profile, thread
              summaries, drafts over attachments in versions, a nightly digest (87af25f)
    lab_notebook  a biotech lab's notebook assistant: SOP-backed chats, run logs behind
              instrument guides, a nightly QC walk, an inventory table in versions (87af25f)
    swe_agent  coding agents over an org's working day: best-of-k trajectories re-sending their
              growing context behind the repo map at a commit, compactions, CI bursts, chats
              that send a run back to work (written blind at 5cfc54c)
    companion_chat  a character-chat platform: role-play chats re-sent whole behind Zipf cards,
              context drops and memory folds, swipes, group chats, evening peaks (blind, 5cfc54c)
    moderation  a social platform's moderation service: every post, comment and caption
              classified behind guidelines, surface rules, examples and language guidance;
              guideline versions behind a canary, trending threads with copypasta and
              quote-posts, spam waves, senior escalations, appeals with the user's history
              (written blind at be52c07)
    sports_live  a sports media app's assistant over a weekend: live-match chats behind a long
              head and each minute's match state, bursts at big moments, fantasy advice over
              stat tables, preview batches, recaps, push copy (written blind at 7e802a6)
    ad_creative  an advertising platform's creative generator over a work week: bulk jobs
              writing a campaign's variants cell by cell behind a long head (ad policies,
              agency style, brand guidelines, brief, product feed synced nightly), a holiday
              wave behind a shared seasonal template, nightly A/B refreshes with the winners
              pasted in, editing sessions re-sent whole with the draft, policy reviews and a
              re-check sweep after a policy change (written blind at b184687)

Same instant-replay semantics as ``bench.policies`` (``simulate``, ``bench.baselines.replay``).
It prints, per cell, LRU, every product policy, the research candidates
(``bench.policies.CANDIDATES``), Belady's OPT (as bench.policies computes it) and the best
classic baseline, then the cells where each policy is below LRU and below the best classic
minus SLACK. Never pass/fail.
"""

from __future__ import annotations

from bench.baselines import BASELINES
from bench.common import bench_parser, machine, write_json
from bench.heldout_early import Trace
from bench.heldout_shapes import SHAPES
from bench.policies import CANDIDATES, hits, opt_hit_rate
from kvpool.core.eviction import POLICIES, make_policy
from kvpool.replay.loop import simulate

SLACK = 0.002  # the target: at or above the best classic baseline minus this, every cell



def cell(reqs: Trace, cap: int, candidates: list[str] | None = None) -> dict[str, float]:
    """Hit rate of every product policy, research candidate (or those named) and classic
    baseline on ``reqs`` at ``cap`` blocks."""
    blocks = sum(map(len, reqs))
    rates = {p: simulate(reqs, make_policy(p, cap), cap)[0] / blocks for p in POLICIES}
    cands = {c: CANDIDATES[c] for c in (CANDIDATES if candidates is None else candidates)}
    for name, cls in {**cands, **BASELINES}.items():
        rates[name] = hits(reqs, cls(cap), cap)[0] / blocks
    rates["opt"] = opt_hit_rate(reqs, cap)
    return rates


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("heldout", __doc__, timing=False)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--scale", type=float, default=1.0, help="requests per trace, x")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--candidates", nargs="*", default=list(CANDIDATES),
                    choices=list(CANDIDATES))
    args = ap.parse_args(argv)
    res: dict = {"machine": machine(), "cells": {}}
    below: dict[str, list[str]] = {p: [] for p in [*POLICIES, *args.candidates] if p != "lru"}
    short: dict[str, list[str]] = {p: [] for p in below}  # below the best classic - SLACK
    print(f"{'trace@seed@capacity':24s} {'lru':>7s} " + " ".join(f"{p:>9s}" for p in below)
          + f" {'opt':>7s}   best classic")
    for name in args.shapes:
        gen = SHAPES[name]
        for seed in args.seeds:
            reqs = gen(seed, args.scale)
            for cap in args.capacities:
                rates = cell(reqs, cap, args.candidates)
                key = f"{name}@{seed}@{cap}"
                res["cells"][key] = {k: round(v, 5) for k, v in rates.items()}
                best = max(BASELINES, key=rates.__getitem__)
                for p in below:
                    if rates[p] < rates["lru"]:
                        below[p].append(key)
                    if rates[p] < rates[best] - SLACK:
                        short[p].append(key)
                print(f"{key:24s} {rates['lru']:7.4f} "
                      + " ".join(f"{rates[p]:9.4f}" for p in below)
                      + f" {rates['opt']:7.4f}   {best} {rates[best]:.4f}")
    for p, cells in below.items():
        print(f"{p} below lru: {', '.join(cells) if cells else 'nowhere'}; below the best "
              f"classic - {SLACK}: {', '.join(short[p]) if short[p] else 'nowhere'}")
    res["below_lru"], res["below_best_classic"] = below, short
    write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()
