"""The code's shape (the house standards): no class in kvpool/ with more than 25 methods (a
class that big is a second copy of its parts: reach them by name instead), and in kvpool/,
bench/, stress/ and tests/ no function longer than 40 lines and no file longer than 400. Read
from the sources with ast, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_METHODS = 25
MAX_FUNCTION_LINES = 40
MAX_FILE_LINES = 400
PRODUCT = ROOT / "kvpool"
FOLDERS = ("kvpool", "bench", "stress", "tests")


def _trees(folder: Path) -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(folder.rglob("*.py"))]


def _functions(node: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_no_product_class_has_more_than_25_methods():
    big = [f"{p.relative_to(ROOT)}: {c.name} has {len(_functions(c))} methods"
           for p, tree in _trees(PRODUCT) for c in ast.walk(tree)
           if isinstance(c, ast.ClassDef) and len(_functions(c)) > MAX_METHODS]
    assert not big, "\n".join(big)


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_function_is_longer_than_40_lines(folder):
    long = [f"{p.relative_to(ROOT)}:{f.lineno}: {f.name} has {f.end_lineno - f.lineno + 1} lines"
            for p, tree in _trees(ROOT / folder) for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            and f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "\n".join(long)


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_file_is_longer_than_400_lines(folder):
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert not long, "\n".join(long)
