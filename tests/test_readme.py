"""The README's Quickstart holds exactly two commands, and .ci/run runs the test one verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line for b in blocks for line in b.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_quickstart_has_the_serve_and_test_commands():
    cmds = quickstart_commands()
    assert len(cmds) == 2, cmds
    serve, test = cmds
    assert "kvpool serve" in serve and "torch==2.13.0" in serve
    assert "pytest" in test and "torch==2.13.0" in test


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = quickstart_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in [line.strip() for line in ci]


def commands_section() -> str:
    return (ROOT / "README.md").read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]


def test_readme_commands_use_files_inside_the_repo():
    """A fresh clone has no ../shared: every file a README command or make target names is in
    the repository (the Mooncake trace with its licence under data/traces/)."""
    text = commands_section() + (ROOT / "Makefile").read_text()
    assert "../shared" not in text
    named = set(re.findall(r"(?<![\w/.])((?:data|bench|stress|kvpool)/[\w./-]+\.\w+)", text))
    assert "data/traces/mooncake_conversation_trace.jsonl" in named
    assert [p for p in sorted(named) if not (ROOT / p).is_file()] == []
    assert "Apache License" in (ROOT / "data" / "traces" / "LICENSE-APACHE").read_text()


def test_readme_names_every_vllm_series_the_server_writes():
    """NOTE(vllm-names): each vllm:* series /metrics writes is named in the README."""
    from kvpool.metrics import METRIC_NAMES
    from kvpool.metrics.request_metrics import REQUEST_METRIC_NAMES

    text = (ROOT / "README.md").read_text()
    names = [n for n in METRIC_NAMES + REQUEST_METRIC_NAMES if n.startswith("vllm:")]
    assert names
    assert [n for n in names if f"`{n}`" not in text] == []
