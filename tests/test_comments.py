"""Comments are about the code and cite the repo's own docs/: nothing in kvpool/ points at a
file outside a clone (../shared, DESIGN.md, BENCH.md, the seed articles) or at issue numbers,
and every docs/ page a comment cites exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "the seeds'" (possessive) named the seed articles; "seed nodes" of a cluster are fine
OUTSIDE = re.compile(r"\.\./shared|DESIGN\.md|BENCH\.md|\bseeds'|seed articles|\bissue #?\d+",
                     re.IGNORECASE)
CITED = re.compile(r"docs/([\w.-]+\.md)")


def _sources() -> list[Path]:
    return sorted((ROOT / "kvpool").rglob("*.py"))


def test_no_reference_outside_the_repo():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
           for p in _sources()
           for i, line in enumerate(p.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not bad, "\n".join(bad)


def test_cited_docs_exist():
    cited = {m for p in _sources() for m in CITED.findall(p.read_text())}
    assert cited, "no comment cites docs/ (the pattern is stale?)"
    missing = sorted(c for c in cited if not (ROOT / "docs" / c).is_file())
    assert not missing, missing
