"""A trace read with the wrong block size or format still reads, so the replay says so: hash ids
covering fewer tokens than input_length (trace.py NOTE(short-ids)), Bailian keys missing under
``--trace-format bailian`` and Mooncake timestamps with a fraction of a millisecond (formats.py
NOTE(format-clues)), each once on stderr naming both flags (notices.py NOTE(format-hints)) and
counted in the report; and the timed summary prints ``n/a`` for a percentile nobody has."""

from __future__ import annotations

import json

from kvpool.cli import main
from kvpool.replay.trace import read_trace

INSTANT = ["--instant", "--capacity-blocks", "64", "--no-progress"]
BOTH = ("--trace-block-size sets the tokens each hash id stands for",
        "--trace-format the timestamp unit and the keys")


def _jsonl(path, recs) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _mooncake(path) -> None:
    """Three Mooncake records with ceil(input / 512) ids each, the first two sharing 2 ids."""
    _jsonl(path, [{"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": ids}
                  for t, n, ids in ((0, 1500, [1, 2, 3]), (7, 1100, [1, 2, 4]), (9, 30, [5]))])


def _run(capsys, path, *flags) -> tuple[str, dict]:
    """(stderr, report) of an instant replay of ``path``."""
    out = path.parent / "r.json"
    capsys.readouterr()
    assert main(["replay", str(path), *INSTANT, "--json", str(out), *flags]) == 0
    return capsys.readouterr().err, json.loads(out.read_text())["trace"]


def test_short_hash_ids_are_counted_and_said_once_with_both_flags(tmp_path, capsys):
    """Read with 16-token blocks, each record's ids cover 1/32 of its prompt: the replay padded
    them with fresh ids and reported a hit rate near 0 without a word."""
    p = tmp_path / "m.jsonl"
    _mooncake(p)
    assert (read_trace(p).padded, read_trace(p).first_padded) == (0, None)
    err, rep = _run(capsys, p)
    assert "hash_ids" not in err and rep["padded"] == 0
    tr = read_trace(p, block_size=16)
    assert (tr.padded, tr.first_padded, tr.trimmed) == (3, 1, 0)
    assert len(tr.requests[0].hash_ids) == 94  # still padded: a trace may truncate its ids
    err, rep = _run(capsys, p, "--trace-block-size", "16")
    assert err.count(f"{p}:1: 3 record(s) list fewer hash_ids than input_length") == 1, err
    assert all(f in err for f in BOTH) and "(now 16)" in err and "now mooncake" in err
    assert (rep["padded"], rep["trimmed"]) == (3, 0)


def test_formats_without_ids_are_not_counted_as_short(tmp_path, capsys):
    p = tmp_path / "az.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,374,44\n")
    err, rep = _run(capsys, p)
    assert rep["padded"] == 0 and "hash_ids" not in err


def test_forced_bailian_without_its_keys_is_said_once(tmp_path, capsys):
    p = tmp_path / "m.jsonl"
    _mooncake(p)
    err, rep = _run(capsys, p, "--trace-format", "bailian")
    assert err.count(f"{p}:1: 3 record(s) lack a Bailian key") == 1, err
    assert "--trace-format mooncake" in err
    assert rep["lacking_bailian_keys"] == 3 and rep["padded"] == 3  # 16-token blocks too
    b = tmp_path / "b.jsonl"  # a real Bailian record says nothing
    _jsonl(b, [{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 20,
                "output_length": 1, "type": "text", "turn": 1, "hash_ids": [1, 2]}])
    err, rep = _run(capsys, b)
    assert "Bailian key" not in err and rep["lacking_bailian_keys"] == 0


def test_fractional_millisecond_timestamps_point_at_bailian(tmp_path, capsys):
    """A Bailian trace cut to the Mooncake keys: detected as Mooncake, its excess ids said to
    need --trace-block-size only; following that left its seconds read as ms (a 2.25 s trace
    lasting 0.00225 s) without a word."""
    p = tmp_path / "bl4.jsonl"
    _jsonl(p, [{"timestamp": t, "input_length": 40, "output_length": 1, "hash_ids": ids}
               for t, ids in ((0.0, [1, 2, 3]), (1.5, [1, 2, 4]), (2.25, [5, 6, 7]))])
    err, rep = _run(capsys, p)
    assert err.count(f"{p}:1: 3 record(s) list more hash_ids") == 1, err
    assert all(f in err for f in BOTH)
    assert f"fraction of a millisecond (first {p}:2)" in err
    assert "pass --trace-format bailian" in err and rep["fractional_ms_timestamps"] == 2
    err, rep = _run(capsys, p, "--trace-block-size", "16")
    assert err.count("fraction of a millisecond") == 1 and "hash_ids" not in err, err
    err, rep = _run(capsys, p, "--trace-format", "bailian")
    assert "fraction of a millisecond" not in err and rep["duration_s"] == 2.25
    assert "lack a Bailian key" in err  # read as Bailian, which it was cut from: said once


def test_the_timed_summary_says_n_a_when_no_request_was_served(tmp_path, capsys):
    p = tmp_path / "big.jsonl"
    _jsonl(p, [{"timestamp": t, "input_length": 2000, "output_length": 1, "hash_ids": [t, 9]}
               for t in range(2)])
    assert main(["replay", str(p), "--num-blocks", "8", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "completed=0 ignored=2" in out
    assert "TTFT p50=n/a p99=n/a  queueing p50=n/a p99=n/a" in out and "None" not in out


def test_float_noise_in_millisecond_timestamps_is_no_clue(tmp_path, capsys):
    """A converter's seconds * 1000 leaves 1000.9999999999999: that pointed at Bailian before
    (whose advice, followed, replays the trace 1000x slower); a real half millisecond still does."""
    p = tmp_path / "m.jsonl"
    _jsonl(p, [{"timestamp": t, "input_length": 30, "output_length": 1, "hash_ids": [i]}
               for i, t in enumerate((0.0, 1000.9999999999999, 2000.0000000000002))])
    err, rep = _run(capsys, p)
    assert rep["fractional_ms_timestamps"] == 0 and "bailian" not in err, err
    _jsonl(p, [{"timestamp": t, "input_length": 30, "output_length": 1, "hash_ids": [i]}
               for i, t in enumerate((0.0, 1000.5))])
    assert _run(capsys, p)[1]["fractional_ms_timestamps"] == 1
