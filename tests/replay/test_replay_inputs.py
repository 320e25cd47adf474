"""``kvpool replay``'s inputs and outputs as an outside probe used them: CR-only line ends
(lines.py NOTE(line-ends)), a pipe as the trace (NOTE(peek)), the report named over the trace,
``--json -`` (cli.py NOTE(json-stdout)), integer flags past their bounds (NOTE(flag-bounds)),
output checks that leave no folder behind and write through a dangling symlink
(kvpool/outfile.py NOTE(check-before-run))."""

from __future__ import annotations

import json
import os

import pytest

from kvpool.cli import main
from kvpool.replay.lines import TraceLines
from kvpool.replay.trace import read_trace

REC = '{"timestamp": %d, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46.6805900,374,44",
         "2023-11-16 18:15:50.9951690,396,109")
INSTANT = ["--instant", "--capacity-blocks", "8", "--no-progress"]


def _fails(capsys, *argv: str) -> str:
    """Run ``kvpool replay ARGV``: exit 2 with one stderr line and nothing on stdout."""
    capsys.readouterr()
    assert main(["replay", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("kvpool replay: ") and err.count("\n") == 1 and not out, (out, err)
    return err


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(REC % t for t in (0, 9)) + "\n")
    return p


@pytest.mark.parametrize("lines", [AZURE, (REC % 0, REC % 9)])
def test_cr_only_line_ends_replay_as_before(tmp_path, capsys, lines):
    """Excel's "CSV (Macintosh)": b1aa0eb read the whole file as one line and refused it."""
    p = tmp_path / "mac.txt"
    p.write_bytes("\r".join(lines).encode() + b"\r")
    assert main(["replay", str(p), *INSTANT]) == 0
    assert "requests=2" in capsys.readouterr().out
    assert len(read_trace(p).requests) == 2


def test_a_crlf_cut_by_a_read_is_one_line_end_and_the_bound_holds(tmp_path):
    """A \\r last in one read and its \\n first in the next end one line, not two."""
    p = tmp_path / "cut.txt"
    first = b"a" * ((1 << 16) - 1) + b"\r\n"  # the \r is byte 65535, the read's last
    p.write_bytes(first + b"b\rc\n\rd")
    with TraceLines.open(p) as lines:
        assert list(lines) == [first.decode(), "b\r", "c\n", "\r", "d"]
    p.write_bytes(b"x" * 40 + b"\r" + b"y" * 200 + b"\r")  # CR-only, one line past 100 bytes
    with TraceLines.open(p, max_line=100) as lines:
        assert next(lines) == "x" * 40 + "\r"
        with pytest.raises(ValueError, match=r"cut.txt:2: line is over 100 bytes"):
            next(lines)


def test_a_pipe_is_a_trace_detected_without_seeking(trace, capsys):
    """``<(gunzip -c t.jsonl.gz)``: was "File or stream is not seekable." naming no file."""
    r, w = os.pipe()
    try:
        os.write(w, b"\n" + trace.read_bytes())  # a blank line before the first record
        os.close(w)
        assert main(["replay", f"/dev/fd/{r}", *INSTANT]) == 0
    finally:
        os.close(r)
    assert "requests=2" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_output_naming_the_trace_is_refused(trace, capsys, flag):
    """The report was written over the trace it came from."""
    before = trace.read_bytes()
    err = _fails(capsys, str(trace), *INSTANT, flag, str(trace))
    assert f"{flag} {trace}: cannot write there (it is the input {trace}" in err
    assert trace.read_bytes() == before


@pytest.mark.parametrize("argv,named", [
    (["--instant", "--capacity-blocks", str(10**12)], "--capacity-blocks must be <= 2147483648"),
    (["--num-blocks", str(10**12)], "--num-blocks must be <= 2147483648"),
    (["--kv-bytes-per-token", "9" * 400], "--kv-bytes-per-token must be <= 1073741824"),
    (["--capacity-blocks", str(2**31)], "is 68719476736 pool blocks of --block-size 16"),
])
def test_integer_flags_past_their_bounds_are_one_line(trace, capsys, argv, named):
    """A MemoryError / OverflowError traceback, exit 1, before NOTE(flag-bounds)."""
    assert named in _fails(capsys, str(trace), "--no-progress", *argv)


def test_json_dash_is_stdout_with_the_summary_on_stderr(trace, tmp_path, capsys, monkeypatch):
    """``--json -`` wrote a file named "-"; stdout now holds the report alone."""
    monkeypatch.chdir(tmp_path)
    assert main(["replay", str(trace), *INSTANT, "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["requests"] == 2
    assert "requests=2" in err and not (tmp_path / "-").exists()


def test_a_failed_run_leaves_no_folder_and_a_dangling_link_is_written(tmp_path, capsys):
    """The check made the folders before the trace was read; a link to a file yet to be
    written was refused as "is a file, not a folder"."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    _fails(capsys, str(bad), *INSTANT, "--json", str(tmp_path / "new1" / "new2" / "r.json"))
    assert not (tmp_path / "new1").exists()
    (tmp_path / "link.json").symlink_to(tmp_path / "target.json")
    good = tmp_path / "t.jsonl"
    good.write_text(REC % 0 + "\n")
    assert main(["replay", str(good), *INSTANT, "--json", str(tmp_path / "link.json")]) == 0
    assert json.loads((tmp_path / "target.json").read_text())["requests"] == 1
