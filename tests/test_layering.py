"""Imports point down only: config/errors <- core <- sched <- replay|runtime|remote <- server
(DESIGN.md).

Checked with ``ast`` on every module of the package, so a violation anywhere (also inside a
function body) fails the suite."""

import ast
from pathlib import Path

import kvpool

PKG = Path(kvpool.__file__).parent
RANK = {"config": 0, "errors": 0, "outfile": 0, "progress": 0, "signals": 0, "core": 1, "sched": 2,
        "metrics": 3, "runtime": 3, "remote": 3, "events": 3, "server": 4, "router": 4, "epp": 5, "cli": 5, "__main__": 5,
        "replay": 3}
# Same-rank siblings that must not know each other: remote sits beside runtime (the server wires
# the two together), so neither imports the other.
APART = {"remote": {"runtime", "metrics", "events"}, "runtime": {"remote", "events"},
         "events": {"runtime", "remote", "metrics"},
         "replay": {"runtime", "remote", "metrics", "events"}}
# Third-party modules a layer must not touch: the core is pure Python + numpy.
FORBIDDEN = {
    "core": {"asyncio", "aiohttp", "prometheus_client", "uvloop", "torch", "cupy"},
    "sched": {"asyncio", "aiohttp", "prometheus_client", "uvloop", "torch", "cupy"},
    "replay": {"asyncio", "aiohttp", "prometheus_client", "uvloop", "torch", "cupy"},
}


def layer_of(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py") if rel else ""


def imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_imports_point_down_only():
    problems = []
    for path in PKG.rglob("*.py"):
        layer = layer_of(path)
        if layer not in RANK:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for mod in imported_modules(tree):
            top, _, rest = mod.partition(".")
            if top == "kvpool" and rest:
                target = rest.split(".")[0]
                if target in RANK and RANK[target] > RANK[layer]:
                    problems.append(f"{path.relative_to(PKG)} imports {mod}")
                if target in APART.get(layer, ()):
                    problems.append(f"{path.relative_to(PKG)} imports {mod} (a sibling)")
            if top in FORBIDDEN.get(layer, ()):
                problems.append(f"{path.relative_to(PKG)} imports {mod} (layer {layer})")
    assert not problems, "\n".join(problems)


def test_metrics_reads_plain_stats_not_runtime_internals():
    # metrics may read stats dataclasses (core/sched); it must not reach into the server
    for path in (PKG / "metrics").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for mod in imported_modules(tree):
            assert not mod.startswith("kvpool.server"), f"{path} imports {mod}"


def test_bench_imports_nothing_from_tests():
    """bench/ is shipped with the package; tests/ is not. What both need (the Redis and Envoy
    starters) lives in bench/, which tests may import."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bad = []
    for p in sorted((root / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{p.name}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert not bad, bad


def test_product_imports_nothing_from_bench():
    """Research policies and experiments live in bench/; the package never imports them
    (``kvpool bench`` runs a bench module by name, at the user's request, not by import)."""
    bad = []
    for path in PKG.rglob("*.py"):
        for mod in imported_modules(ast.parse(path.read_text(), filename=str(path))):
            if mod == "bench" or mod.startswith("bench."):
                bad.append(f"{path.relative_to(PKG)} imports {mod}")
    assert not bad, "\n".join(bad)
