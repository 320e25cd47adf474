"""Where the docs probe found the product and its docs apart: ``kvpool epp --help``'s port,
``kvpool epp`` without the ``epp`` extra, ``make install``'s torch, and the remote error
kinds a fresh /metrics exports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kvpool.cli import main
from kvpool.epp.cli import DEFAULT_PORT
from kvpool.metrics.remote import RemoteMetrics
from kvpool.remote import Namespace, ValueCodec
from kvpool.remote.memory_tier import InMemoryTier
from kvpool.remote.tier import ERROR_KINDS

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def help_text(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def test_epp_help_names_the_pickers_own_default_port(capsys):
    assert DEFAULT_PORT == 9002
    assert "--port PORT port (0: any free; default 9002)" in help_text("epp", capsys)
    assert "--port PORT port (0: any free; default 8080)" in help_text("router", capsys)


# grpc made unimportable, as after the Quickstart's `pip install -e .` without [epp]
NO_GRPC = """
import importlib.abc, sys
class NoGrpc(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "grpc" or name.startswith("grpc."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoGrpc())
from kvpool.cli import main
sys.exit(main(sys.argv[1:]))
"""


def kvpool_without_grpc(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NO_GRPC, *argv], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_epp_without_the_extra_names_it_and_exits_2():
    run = kvpool_without_grpc("epp", "--replica", "http://127.0.0.1:9", "--port", "0")
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "kvpool epp needs grpc (not installed): pip install 'kvpool[epp]'" in run.stderr
    shown = kvpool_without_grpc("epp", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "default 9002" in " ".join(shown.stdout.split())


def install_recipe() -> str:
    """The Makefile's ``install`` recipe, continuation lines joined, spaces collapsed."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^install:[^\n]*\n((?:\t[^\n]*\n)+)", text, flags=re.M)
    assert recipe is not None, "no install target"
    return " ".join(recipe.group(1).replace("\\\n", " ").split())


def test_make_install_takes_the_cpu_torch_before_the_project():
    recipe = install_recipe()
    torch = recipe.find(f"pip install torch==2.13.0 --index-url {CPU_INDEX}")
    assert torch >= 0, recipe
    assert recipe.find("pip install -e") > torch, recipe
    readme = (ROOT / "README.md").read_text()  # the Quickstart's test command, less pytest
    assert f"{recipe} && python -m pytest" in readme


def test_a_fresh_remote_tier_exports_every_error_kind_at_0():
    tier = InMemoryTier(ValueCodec(Namespace(model_id="tiny", weights="w", dtype="float32",
                                             block_size=16, layers=2, kv_heads=2,
                                             head_dim=16)))
    text = generate_latest(RemoteMetrics(tier.stats).registry).decode()
    missing = [k for k in ERROR_KINDS
               if f'kvpool_remote_errors_total{{kind="{k}"}} 0.0' not in text.splitlines()]
    assert missing == []
