"""``kvpool stress`` and ``kvpool bench`` run from an installed distribution, with no path edits.

An installed kvpool holds exactly the top-level packages pyproject's ``packages.find`` names.
Building a wheel per test run is slow, so the subprocess below stands in for the install: it
runs from a temporary folder (not the checkout), with PYTHONPATH unset, and a meta-path finder
that serves only those packages from this tree (ahead of the machine's editable install, which
points at another checkout). If pyproject stopped shipping ``stress`` or ``bench``, or the CLI
went back to finding them through ``sys.path``, these fail.
"""

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent

# what an install of ROOT provides: the listed top-level packages, nothing else from the tree
BOOT = r"""
import importlib.abc, importlib.machinery, importlib.util, runpy, sys
root, tops, args = sys.argv[1], set(sys.argv[2].split(",")), sys.argv[3:]

class Installed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in tops:
            return None
        if "." in name:  # a submodule: only under its parent package's own folder
            return importlib.machinery.PathFinder.find_spec(name, path)
        return importlib.util.spec_from_file_location(
            name, f"{root}/{name}/__init__.py", submodule_search_locations=[f"{root}/{name}"])

sys.meta_path.insert(0, Installed())
assert not any(p and root.startswith(p) or p == root for p in sys.path if p), sys.path
sys.argv = ["kvpool", *args]
runpy.run_module("kvpool", run_name="__main__", alter_sys=True)
"""


def installed_tops() -> list[str]:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]
    pkgs = find_packages(where=str(ROOT), include=find["include"])
    return sorted({p.partition(".")[0] for p in pkgs})


def run_installed(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", BOOT, str(ROOT), ",".join(installed_tops()), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_distribution_ships_stress_and_bench():
    assert {"kvpool", "stress", "bench"} <= set(installed_tops())
    assert "tests" not in installed_tops()


@pytest.mark.parametrize("args, usage", [
    (("stress", "--help"), "usage: kvpool stress"),
    (("stress", "http", "--help"), "usage: kvpool stress http"),
    (("bench", "pool", "--help"), "usage: python -m bench.pool"),
])
def test_installed_cli_reaches_stress_and_bench(tmp_path, args, usage):
    r = run_installed(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(usage), r.stdout


def test_installed_cli_bench_passes_its_own_arguments(tmp_path):
    r = run_installed(tmp_path, "bench", "pool", "--no-such-flag")
    assert r.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in r.stderr


def sys_state_uses(source: str) -> list[tuple[int, str]]:
    """(line, text) of every ``sys.path`` / ``sys.argv`` reference or ``from sys import``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr in ("path", "argv")
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            out.extend((node.lineno, f"from sys import {a.name}") for a in node.names
                       if a.name in ("path", "argv"))
    return out


def test_sys_state_check_finds_both_forms():
    assert sorted(sys_state_uses("import sys\nsys.path.insert(0, 'x')\nsys.argv = []\n")) == [
        (2, "sys.path"), (3, "sys.argv")]
    assert sys_state_uses("from sys import argv\n") == [(1, "from sys import argv")]
    assert sys_state_uses("import os\nos.path.join('a')\n") == []


def test_kvpool_never_touches_sys_path_or_argv():
    found = [f"{p.relative_to(ROOT)}:{line}: {text}"
             for p in sorted((ROOT / "kvpool").rglob("*.py"))
             for line, text in sys_state_uses(p.read_text())]
    assert found == []
