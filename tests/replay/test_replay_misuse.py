"""``kvpool replay`` given files and flags it cannot use: one ``kvpool replay:`` line (with the
file and line, or the flag to change) and exit status 2, never a traceback, never a run that
is thrown away afterwards (kvpool/replay/lines.py NOTE(bounded-lines), formats.py
NOTE(reader-errors), trace.py NOTE(excess-ids), cli.py NOTE(mode-flags), kvpool/outfile.py
NOTE(check-before-run), timed.py NOTE(finite-clock))."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import zipfile

import pytest

from kvpool.cli import main
from kvpool.replay.lines import MAX_LINE
from kvpool.replay.trace import read_trace

OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
INSTANT = ["--instant", "--capacity-blocks", "8", "--no-progress"]
TIMED = ["--num-blocks", "512", "--no-progress"]
BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _fails(capsys, *argv: str) -> str:
    """Run ``kvpool replay ARGV``: exit 2 with one stderr line and no summary; that line."""
    capsys.readouterr()
    assert main(["replay", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("kvpool replay: ") and err.count("\n") == 1, err
    assert "policy=" not in out and "requests=" not in out, out  # nothing was replayed
    return err


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(OK + OK.replace('"timestamp": 0', '"timestamp": 9'))
    return p


def test_an_unreadable_trace_is_one_line(tmp_path, capsys):
    """A folder, or a file whose read fails (EIO): was a traceback from ``open`` / reading."""
    assert f"cannot read {tmp_path}: Is a directory" in _fails(capsys, str(tmp_path), *INSTANT)
    err = _fails(capsys, "/proc/self/mem", *INSTANT)  # a file, but reading it is EIO
    assert "cannot read /proc/self/mem: Input/output error" in err


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_unwritable_output_is_refused_before_the_replay(trace, tmp_path, capsys, flag):
    """The replay ran to the end, then lost its report to an IsADirectoryError traceback."""
    (tmp_path / "afile").write_text("")
    err = _fails(capsys, str(trace), *INSTANT, flag, str(tmp_path))
    assert f"{flag} {tmp_path}: cannot write there (is a directory)" in err
    err = _fails(capsys, str(trace), *INSTANT, flag, str(tmp_path / "afile" / "x"))
    assert "afile is a file, not a folder" in err


@pytest.mark.parametrize("name,text,line", [
    ("field.csv", BURST + "1," + "x" * 200_000 + ",30,4,34,API log\n", 2),  # csv's limit
    ("header.csv", "y" * 200_000 + "\n", 1),  # the same, while detecting the format
    ("deep.jsonl", OK + "[" * 100_000 + "\n", 2),  # RecursionError in json
], ids=["field", "header", "deep"])
def test_parser_errors_other_than_valueerror_name_file_and_line(tmp_path, capsys, name, text,
                                                                line):
    p = tmp_path / name
    p.write_text(text)
    assert f"kvpool replay: {p}:{line}: " in _fails(capsys, str(p), *INSTANT)


def test_a_line_past_the_bound_is_refused_without_reading_the_file_whole(tmp_path, capsys):
    """A newline-free file (a sparse one, NULs) was read whole as one line: GBs of memory."""
    p = tmp_path / "t.jsonl"
    p.write_text(OK + OK.replace("[1, 2]", "[" + "1, " * 40 + "2]") + OK)
    with pytest.raises(ValueError, match=f"{p}:2: line is over 100 bytes"):
        read_trace(p, max_line=100)
    assert len(read_trace(p, max_line=200).requests) == 3
    nul = tmp_path / "nul.jsonl"
    with open(nul, "wb") as f:  # sparse: no disk written
        f.truncate(MAX_LINE + 1)
    assert f"{nul}:1: line is over {MAX_LINE} bytes" in _fails(capsys, str(nul), *INSTANT)


@pytest.mark.parametrize("flag", ["--step-overhead-s", "--decode-s-per-seq",
                                  "--prefill-tokens-per-s", "--copy-gbps"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_every_cost_flag_refuses_non_finite_values(trace, capsys, flag, value):
    """``--step-overhead-s inf`` reported makespan inf and TTFT nan with exit 0."""
    err = _fails(capsys, str(trace), *TIMED, flag, value)
    assert f"kvpool replay: {flag} must be " in err and "finite" in err


def test_the_json_report_is_strict_json_when_the_clock_overflows(trace, tmp_path, capsys):
    """Finite flags can still overflow (1e308 s per step): ``null``, never NaN / Infinity."""
    out = tmp_path / "r.json"
    assert main(["replay", str(trace), *TIMED, "--step-overhead-s", "1e308",
                 "--json", str(out)]) == 0

    def refuse(c):
        raise AssertionError(f"{c} in the report")

    rep = json.loads(out.read_text(), parse_constant=refuse)
    assert rep["makespan_s"] is None and rep["ttft_s"]["p99"] is None


def test_extra_hash_ids_are_ignored_in_both_modes_and_said_once(tmp_path, capsys):
    """--instant replayed ids past the prompt, timed did not: 0.028 vs 0.49 on one trace."""
    p = tmp_path / "t.jsonl"
    recs = [(0, 1024, list(range(64))), (5, 1024, list(range(32)) + list(range(99, 131))),
            (9, 10, list(range(500, 1500)))]
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1,
                                     "hash_ids": ids}) + "\n" for t, n, ids in recs))
    tr = read_trace(p)
    assert [list(r.hash_ids) for r in tr.requests] == [[0, 1], [0, 1], [500]]
    assert (tr.trimmed, tr.first_trimmed) == (3, 1)
    reps = []
    for mode in (INSTANT, TIMED):
        out = tmp_path / "r.json"
        capsys.readouterr()
        assert main(["replay", str(p), *mode, "--json", str(out)]) == 0
        err = capsys.readouterr().err
        assert err.count(f"{p}:1: 3 record(s) list more hash_ids") == 1, err
        assert "--trace-block-size" in err
        reps.append(json.loads(out.read_text()))
        assert reps[-1]["trace"]["trace_blocks"] == 5 and reps[-1]["trace"]["trimmed"] == 3
    assert (reps[0]["blocks"], reps[0]["hits"]) == (5, 2)  # the prompts' 5 blocks, 2 shared


def _zip(text: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("t.jsonl", text)
    return buf.getvalue()


@pytest.mark.parametrize("suffix,pack,said", [
    ("gz", gzip.compress, "gzip-compressed (starts with 1f 8b): decompress it first (gunzip"),
    ("zip", _zip, "a zip archive (starts with 50 4b 03 04): decompress it first (unzip"),
    ("xz", lzma.compress, "xz-compressed (starts with fd 37 7a 58 5a 00): decompress it"),
    ("bz2", bz2.compress, "bzip2-compressed (starts with 42 5a 68): decompress it first"),
    ("zst", lambda b: b"\x28\xb5\x2f\xfd\x20" + b, "zstd-compressed (starts with 28 b5"),
])
def test_a_compressed_trace_is_told_to_be_decompressed(tmp_path, capsys, suffix, pack, said):
    """Only gzip had the hint: .zip / .xz / .bz2 / .zst were 'not UTF-8 text (byte 0x87...)',
    pointing at an encoding problem."""
    p = tmp_path / f"t.jsonl.{suffix}"
    p.write_bytes(pack(OK.encode()))
    err = _fails(capsys, str(p), *INSTANT)
    assert f"{p}: {said}" in err and "UTF-8" not in err


def test_non_utf8_traces_name_the_file_and_line(tmp_path, capsys):
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(OK.encode() + OK.replace("[1, 2]", "[1]} \xff").encode("latin-1"))
    assert f"{latin}:2: not UTF-8 text (byte 0xff" in _fails(capsys, str(latin), *INSTANT)


@pytest.mark.parametrize("flags,named", [
    (["--num-blocks", "0"], "--num-blocks must be >= 1"),
    (["--num-host-blocks", "-1"], "--num-host-blocks must be >= 0"),
    (["--block-size", "0"], "--block-size must be >= 1"),
    (["--kv-bytes-per-token", "0"], "--kv-bytes-per-token must be >= 1"),
    (["--capacity-blocks", "5"], "--num-blocks and --capacity-blocks both size"),
])
def test_bad_timed_flags_name_replays_own_flags(trace, capsys, flags, named):
    """They named serve's --kv-cache-memory / --swap-space, or kv_bytes_per_block."""
    err = _fails(capsys, str(trace), *TIMED, *flags)
    assert named in err and "--kv-cache-memory" not in err and "--swap-space" not in err


@pytest.mark.parametrize("text,why", [
    (BURST + "1,ChatGPT,30,0,30,API log\n2,ChatGPT,30,0,30,API log\n", "0 response tokens"),
    (OK.replace("600", "0") * 2, "0 prompt tokens"),
], ids=["burstgpt", "jsonl"])
def test_a_file_whose_records_were_all_dropped_says_so(tmp_path, capsys, text, why):
    p = tmp_path / "t.csv"
    p.write_text(text)
    err = _fails(capsys, str(p), *INSTANT)
    assert "all 2 record(s) were dropped" in err and why in err


def test_instant_names_the_timed_flags_it_ignores(trace, capsys):
    assert main(["replay", str(trace), *INSTANT, "--block-size", "99", "--arrival-scale", "2",
                 "--preemption-mode", "swap", "--seed", "3"]) == 0
    err = capsys.readouterr().err
    assert err.count("kvpool replay: --instant ignores") == 1
    assert "--block-size, --preemption-mode, --arrival-scale (timed" in err
    assert main(["replay", str(trace), *INSTANT]) == 0
    assert "ignores" not in capsys.readouterr().err


def test_help_lists_the_policies(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "eviction policy: adaptive, classlru, lru" in capsys.readouterr().out
