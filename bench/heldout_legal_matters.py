"""bench.heldout's ``legal_review`` shape, a matter's documents: a deal's negotiated agreements
and data room (records, existing contracts, families of form agreements on one template), a
litigation's filings, briefs and review protocol, a contract negotiation's drafts; versions
from before the trace. See bench/heldout_legal_review.py's docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import DAY, Doc, Matter, Versioned, revise, sections
from bench.heldout_meeting_parts import pick

# kind -> (median tokens, lognormal sigma, lo, hi)
SIZES = {"main": (6000, 0.4, 2500, 25000), "ancillary": (2500, 0.6, 600, 10000),
         "contract": (3500, 0.6, 1000, 14000), "record": (1200, 0.9, 150, 16000),
         "form": (2000, 0.5, 600, 10000), "filing": (2500, 0.8, 500, 16000),
         "brief": (5000, 0.4, 2000, 14000), "email": (400, 0.9, 60, 5000),
         "attachment": (1200, 1.0, 150, 16000), "upload": (2000, 0.9, 250, 24000)}
ROOM = (100, 0.7, 30, 300)  # data room documents (median, sigma, lo, hi)
LAWYERS = {"deal": (5, 0.4, 2, 12), "litigation": (5, 0.4, 2, 12), "contract": (2, 0.4, 1, 5)}


def make_doc(rng: random.Random, new: Callable, kind: str, head: Segment | None = None,
             past: int = 0) -> Doc:
    """A document of ``kind`` (a SIZES key; "main" and "ancillary" are contracts) with
    ``past`` revisions from the two weeks before the trace."""
    median, sigma, lo, hi = SIZES[kind]
    text = Versioned([(-1e18, sections(new, clipped_length(rng, median, sigma, lo, hi)))])
    times = sorted(-rng.uniform(0.1, 14) * DAY for _ in range(past))
    for t in times:
        text.versions.append((t, revise(rng, new, text.current, rng.randint(1, 8))))
    name = "contract" if kind in ("main", "ancillary") else kind
    return Doc(name, text, head)


def _add(docs: list[Doc], m: Matter, doc: Doc, pop: float) -> int:
    """Add ``doc`` to the trace's documents and to ``m``'s workspace with popularity ``pop``."""
    docs.append(doc)
    m.docs.append(len(docs) - 1)
    m.pop.append(pop)
    return len(docs) - 1


def deadline(rng: random.Random, t: float, lo: float, hi: float) -> float:
    """A deadline lo..hi days after ``t``, at 17:00..23:59 of the day (UTC: firms move it)."""
    day = (t / DAY + rng.uniform(lo, hi)) // 1
    return (day + rng.uniform(17, 24) / 24) * DAY


def deal(rng: random.Random, new: Callable, docs: list[Doc], m: Matter, t: float) -> None:
    """A deal: the main agreement and 2..5 ancillaries in negotiation (popular), a data room
    of ROOM documents (Zipf popularity by a random rank): 45 % records, 40 % forms in 2..5
    families, 15 % the target's existing contracts; signing 3..25 days on."""
    past = 0 if t > 0 else rng.randint(0, 2)
    m.negotiated.append(_add(docs, m, make_doc(rng, new, "main", past=past), 6.0))
    for _ in range(rng.randint(2, 5)):
        m.negotiated.append(_add(docs, m, make_doc(rng, new, "ancillary", past=past), 1.5))
    families = [new(rng.randint(12, 40)) for _ in range(rng.randint(2, 5))]
    size = clipped_length(rng, *ROOM)
    ranks = rng.sample(range(1, size + 1), size)
    for r in ranks:
        kind = pick(rng, (("record", 0.45), ("form", 0.4), ("contract", 0.15)))
        head = rng.choice(families) if kind == "form" else None
        m.room.append(_add(docs, m, make_doc(rng, new, kind, head), 1.5 * r ** -0.9))
    m.deadlines.append(deadline(rng, t, 3, 25))


def litigation(rng: random.Random, new: Callable, docs: list[Doc], m: Matter,
               t: float) -> None:
    """A litigation: 5..30 filings (Zipf popularity), 1..2 briefs due 2..15 days on, and a
    review protocol (800..5000 tokens) in 50 % (discovery under way)."""
    n = rng.randint(5, 30)
    for r in rng.sample(range(1, n + 1), n):
        _add(docs, m, make_doc(rng, new, "filing"), 2.0 * r ** -1.0)
    for _ in range(rng.randint(1, 2)):
        m.briefs.append(_add(docs, m, make_doc(rng, new, "brief"), 3.0))
        m.deadlines.append(deadline(rng, t, 2, 15))  # brief k's is deadlines[k]
    if rng.random() < 0.4:
        total = clipped_length(rng, 1500, 0.5, 800, 5000)
        m.protocol = Versioned([(-1e18, sections(new, total))])


def contract(rng: random.Random, new: Callable, docs: list[Doc], m: Matter, t: float) -> None:
    """A contract negotiation: 1..4 contracts (the first the most asked about), 0..6 related
    uploads (term sheet, prior agreement), a target signing date 5..30 days on in 60 %."""
    for k in range(rng.randint(1, 4)):
        past = 0 if t > 0 else rng.randint(0, 3)
        m.negotiated.append(_add(docs, m, make_doc(rng, new, "contract", past=past),
                                 4.0 if k == 0 else 1.5))
    for _ in range(rng.randint(0, 6)):
        _add(docs, m, make_doc(rng, new, "upload"), rng.uniform(0.3, 1.0))
    if rng.random() < 0.6:
        m.deadlines.append(deadline(rng, t, 5, 30))


def matter(rng: random.Random, new: Callable, docs: list[Doc], firm: int, kind: str,
           t: float) -> Matter:
    """A new ``kind`` matter of ``firm`` opened at ``t`` (before the trace: t <= 0)."""
    m = Matter(firm, kind, new(clipped_length(rng, 400, 0.5, 150, 1200)),
               clipped_length(rng, *LAWYERS[kind]))
    {"deal": deal, "litigation": litigation, "contract": contract}[kind](rng, new, docs, m, t)
    return m


def production(rng: random.Random, new: Callable, docs: list[Doc],
               seen: list[int]) -> list[int]:
    """A discovery production (50..800 documents, median 120) in Bates order: emails, each
    followed by its 0..3 attachments, 30 % of them business records on one of the
    production's 1..3 templates (invoices, order forms: a shared 16..120-token head); 8 % are
    another custodian's copy of a document produced before in this matter."""
    out: list[int] = []
    fresh: list[int] = []
    templates = [new(rng.randint(16, 120)) for _ in range(rng.randint(1, 3))]
    target = clipped_length(rng, 120, 0.7, 50, 800)
    while len(out) < target:
        if seen and rng.random() < 0.08:
            out.append(rng.choice(seen))
            continue
        family = [make_doc(rng, new, "email")]
        for _ in range(pick(rng, ((0, 0.6), (1, 0.25), (2, 0.1), (3, 0.05)))):
            form = rng.random() < 0.3
            family.append(make_doc(rng, new, "form" if form else "attachment",
                                   rng.choice(templates) if form else None))
        for d in family:
            docs.append(d)
            out.append(len(docs) - 1)
            fresh.append(len(docs) - 1)
    seen.extend(fresh)
    return out
