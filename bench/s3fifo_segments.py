"""bench/s3fifo_segments.py: bench/s3fifo_diag.py's hits per segment kind (docs/benchmarks.md
"`call_center`: what S3-FIFO keeps").

A ``call_center`` request is the full ``BLOCK``-token blocks of its segments (``meta[i][3]``,
(content id, tokens) pairs) in order. A block belongs to the segment holding its last token
(the one that completes it), so a segment ending at token ``e`` of the prompt ends at block
``e // BLOCK``. A segment's kind comes from where the run's world holds its content id
(``segment_kinds``); ids it no longer holds (an unstable speculative tail, an article an edit
replaced) are "other". A request's hits are the leading run of its blocks, so a policy's hits
per kind are its per-request hits cut at the runs' ends (``kind_hits``).
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.heldout_fewshot import BLOCK

SEG_KINDS = ("system", "menu", "persona", "sop", "banner", "crm", "notes", "script", "lead",
             "rubric", "transcript", "article", "criterion", "instruction", "other")
Runs = list[tuple[int, str]]  # (end block, kind) per run of same-kind blocks


def segment_kinds(run) -> dict[int, str]:
    """Content id -> kind for every segment ``run`` (a ``heldout_call_center.Run``) holds:
    the system prompts and closing instructions, each client's persona, menu, SOPs and outage
    banners, CRM records and notes, outbound script and leads, rubric, QA criteria, articles,
    and every call's transcript (every version of what is versioned)."""
    out: dict[int, str] = {}

    def put(kind: str, segs) -> None:
        for seg in segs:
            out.setdefault(seg[0], kind)

    put("system", run.system.values())
    put("instruction", run.instructions.values())
    for c in run.clients:
        for kind, doc in (("persona", c.persona), ("rubric", c.rubric), ("script", c.script)):
            for _, secs in doc.versions if doc else ():
                put(kind, secs)
        put("menu", [c.menu])
        for q in c.queues:
            for _, secs in q.sop.versions:
                put("sop", secs)
            put("banner", [o[2] for o in q.outages])
        for who in c.callers:
            put("crm", who.records)
            put("notes", who.notes)
        put("lead", c.leads)
        put("criterion", c.criteria)
        put("article", c.articles)
    for call in run.calls:
        put("transcript", call.transcript)
    return out


def block_runs(segments: Sequence[tuple[int, int]], kinds: dict[int, str]) -> Runs:
    """A request's blocks as runs of one kind: (end block, kind), ends increasing, the last
    the request's full blocks; a segment that completes no block adds nothing."""
    out: Runs = []
    at = 0
    for content, tokens in segments:
        at += tokens
        end, kind = at // BLOCK, kinds.get(content, "other")
        if out and out[-1][0] == end:
            continue
        if out and out[-1][1] == kind:
            out[-1] = (end, kind)
        else:
            out.append((end, kind))
    return out


def cut(runs: Runs, hits: int) -> dict[str, int]:
    """The first ``hits`` blocks of a request per kind."""
    out: dict[str, int] = {}
    start = 0
    for end, kind in runs:
        if start >= hits:
            break
        out[kind] = out.get(kind, 0) + min(end, hits) - start
        start = end
    return out


def kind_hits(runs: Sequence[Runs], per_req: dict[str, list[int]],
              groups: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    """Per segment kind (followed by the request's ``groups`` label, if given): requests
    holding a block of it, its blocks and each policy's hits on them."""
    rows: dict[str, dict[str, int]] = {}
    for i, rr in enumerate(runs):
        post = f" {groups[i]}" if groups else ""
        whole = cut(rr, rr[-1][0] if rr else 0)
        cuts = {p: cut(rr, h[i]) for p, h in per_req.items()}
        for kind, n in whole.items():
            r = rows.setdefault(kind + post, {"requests": 0, "blocks": 0,
                                             **{p: 0 for p in per_req}})
            r["requests"] += 1
            r["blocks"] += n
            for p, c in cuts.items():
                r[p] += c.get(kind, 0)
    return rows
