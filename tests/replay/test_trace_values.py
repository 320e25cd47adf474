"""Hostile trace values and options (kvpool/replay/formats.py NOTE(bounded-values), trace.py
NOTE(time-order), timed.py NOTE(finite-clock)): each is a clean ``file:line`` error and exit 2,
never a hang, a traceback, unbounded memory or a silently misread value; records that go back
in time replay in arrival order and the replay says so."""

from __future__ import annotations

import io
import json
import re
import tracemalloc

import pytest

from kvpool.cli import main
from kvpool.replay.formats import ID_LIMIT, MAX_TOKENS, read_rows
from kvpool.replay.instant import InstantReplay
from kvpool.replay.timed import TimedOptions, TimedReplay
from kvpool.replay.trace import TraceRequest, load_trace, read_trace
from tests.trace_reference import reference_lru as lru_hits

TIMED = ["--num-blocks", "512", "--no-progress"]
OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'


def _mooncake(path, *fields: str) -> None:
    """One Mooncake record per ``fields``: the text of its four values, so that JSON's
    ``NaN`` / ``Infinity`` and odd types can be written as they appear in a file."""
    path.write_text("".join('{"timestamp": %s, "input_length": %s, "output_length": %s, '
                            '"hash_ids": %s}\n' % f for f in fields))


def _refused(capsys, path, line: int, why: str, *flags: str) -> None:
    """The reader and both replays refuse ``path`` naming ``file:line`` and ``why``."""
    with pytest.raises(ValueError, match=re.escape(f"{path.name}:{line}: not ") + "an? .*"
                       + re.escape(why)):
        load_trace(path)
    for mode in (TIMED, ["--instant", "--capacity-blocks", "8", "--no-progress"]):
        capsys.readouterr()
        assert main(["replay", str(path), *mode, *flags]) == 2
        err = capsys.readouterr().err
        assert f"kvpool replay: {path}:{line}: " in err and why in err, err


@pytest.mark.parametrize("ts,line", [("NaN", 1), ("Infinity", 2), ("-Infinity", 2)])
def test_a_non_finite_timestamp_is_an_error_not_a_hang(tmp_path, capsys, ts, line):
    """A NaN arrival never came due, so the timed replay spun at 100 % CPU; Infinity gave
    makespan inf and TTFT nan with exit 0."""
    p = tmp_path / "ts.jsonl"
    recs = [("0", "600", "5", "[1, 2]"), (ts, "600", "5", "[3]"), ("9", "100", "5", "[4]")]
    _mooncake(p, *(recs[1:] if line == 1 else recs))
    _refused(capsys, p, line, "timestamp must be a finite number")


def test_a_nan_burstgpt_timestamp_is_an_error(tmp_path, capsys):
    p = tmp_path / "burst.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "1,ChatGPT,30,4,34,API log\nnan,ChatGPT,30,4,34,API log\n")
    _refused(capsys, p, 3, "Timestamp must be a finite number", "--trace-format", "burstgpt")


def test_arrival_scale_must_be_finite(tmp_path, capsys):
    """--arrival-scale inf passed "> 0" and made every arrival 0 x inf = NaN (a hang); a
    finite scale that overflows an arrival is refused as well."""
    with pytest.raises(ValueError, match="--arrival-scale must be > 0 and finite"):
        TimedReplay(TimedOptions(arrival_scale=float("inf")))
    p = tmp_path / "t.jsonl"
    _mooncake(p, ("0", "600", "5", "[1, 2]"), ("5000", "600", "5", "[1, 3]"))
    for scale, why in (("inf", "--arrival-scale must be > 0 and finite"),
                       ("1e308", "is not a finite number")):
        capsys.readouterr()
        assert main(["replay", str(p), *TIMED, "--arrival-scale", scale]) == 2
        assert why in capsys.readouterr().err


@pytest.mark.parametrize("field", ["input_length", "output_length"])
def test_a_huge_token_count_is_an_error_before_any_block_is_built(tmp_path, capsys, field):
    """1e12 prompt tokens made the reader build a tuple of one id per 512 tokens (OOM-killed
    at 16 GB); the bound is 2**24 tokens, far past any model's context."""
    p = tmp_path / "huge.jsonl"
    n = {"input_length": "600", "output_length": "5"}
    _mooncake(p, ("0", *{**n, field: "1000000000000"}.values(), "[0]"))
    _refused(capsys, p, 1, f"{field} 1000000000000 is more than the replayer's bound")
    _mooncake(p, ("0", str(MAX_TOKENS), "5", "[0]"))  # at the bound: read
    assert len(load_trace(p)[0].hash_ids) == MAX_TOKENS // 512


def test_a_huge_azure_context_is_an_error(tmp_path, capsys):
    p = tmp_path / "azure.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.1,1000000000000,5\n")
    _refused(capsys, p, 2, "ContextTokens '1000000000000' is more than the replayer's bound")


def test_a_prompt_past_max_model_len_is_ignored_without_synthesising_it():
    """The timed replay ignores a prompt past max_model_len without hashing it: it made
    its token ids first (10M tokens took 580 MB to be ignored), now only the length."""
    n = 1 << 22
    r = TraceRequest(0, 0.0, n, 1, range(1 << 41, (1 << 41) + n // 512))
    replay = TimedReplay(TimedOptions(num_blocks=64, max_model_len=4096))
    tracemalloc.start()
    try:
        rep = replay.run([r])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (rep["ignored"], rep["completed"]) == (1, 0)
    assert peak < 24 * n  # a list of n ids and its copy: 16 bytes a token, not 36 or more


@pytest.mark.parametrize("ids,why", [
    (f"[{2 ** 70}, 1]", "hash_ids must be >= 0 and < 2**40"),
    (f"[1, {ID_LIMIT}]", "hash_ids must be >= 0 and < 2**40"),
    (f"[{(1 << 41) + 1}]", "hash_ids must be >= 0 and < 2**40"),  # a fresh id's twin
    ('"12"', "hash_ids must be a list of integers, got '12'"),
    ('{"a": 1}', "hash_ids must be a list of integers"),
    ("[1.5, 2.7]", "hash_ids must be integers, got 1.5"),
    ("[1, true]", "hash_ids must be integers, got True"),
    ('[1, "2"]', "hash_ids must be integers, got '2'"),
    ("[1, Infinity]", "hash_ids must be integers, got inf"),
])
def test_bad_hash_ids_are_errors(tmp_path, capsys, ids, why):
    """Before: 2**70 was a traceback (OverflowError), "12" read as [1, 2], 1.5 as 1, and an id
    from 2**40 up taken for one of the replayer's own fresh or tail ids."""
    p = tmp_path / "ids.jsonl"
    _mooncake(p, ("0", "600", "5", f"[1, {ID_LIMIT - 1}]"), ("1", "600", "5", ids))
    _refused(capsys, p, 2, why)


@pytest.mark.parametrize("field,value,why", [
    ("input_length", "Infinity", "input_length must be a finite number, got inf"),
    ("input_length", "true", "input_length must be a number, got True"),
    ("output_length", "false", "output_length must be a number, got False"),
    ("input_length", "[600]", "input_length must be a number, got [600]"),
    ("timestamp", "true", "timestamp must be a number, got True"),
])
def test_bad_numbers_are_errors(tmp_path, capsys, field, value, why):
    """Infinity was a traceback (OverflowError); ``true`` was read as 1 token."""
    p = tmp_path / "n.jsonl"
    vals = {"timestamp": "0", "input_length": "600", "output_length": "5", "hash_ids": "[1]"}
    vals[field] = value
    _mooncake(p, tuple(vals.values()))
    _refused(capsys, p, 1, why)


def test_integral_floats_are_still_read():
    """What the reader took before and means what it says stays accepted."""
    f = io.StringIO('{"timestamp": 1.5, "input_length": 600.0, "output_length": "5", '
                    '"hash_ids": [1.0, 2]}\n')
    (row,) = read_rows(f, "mooncake")
    assert (row.arrival_s, row.input_length, row.output_length, row.hash_ids) == (
        0.0015, 600, 5, (1, 2))
    assert all(type(h) is int for h in row.hash_ids)


@pytest.mark.parametrize("flags,why", [
    (["--capacity-blocks", "0"], "--capacity-blocks must be >= 1"),
    (["--capacity-blocks", "-5"], "--capacity-blocks must be >= 1"),
    (["--capacity-blocks", "10", "--policy", "nosuch"], "eviction policy 'nosuch' is unknown"),
    ([], "--instant needs --capacity-blocks"),
])
def test_bad_instant_options_are_clean_errors(tmp_path, capsys, flags, why):
    """The instant path had no ValueError / ConfigError handling: a traceback, exit 1."""
    p = tmp_path / "t.jsonl"
    p.write_text(OK)
    assert main(["replay", str(p), "--instant", "--no-progress", *flags]) == 2
    assert f"kvpool replay: {why}" in capsys.readouterr().err


def _shards(path) -> list[list[int]]:
    """Two shards of the same span concatenated: the second's records go back in time.
    Returns the hash ids in arrival order."""
    a = [(0, [1, 2]), (4000, [1, 2, 3]), (8000, [5])]
    b = [(1000, [1, 9]), (5000, [5, 6]), (8000, [1, 2, 3, 4])]
    _mooncake(path, *((str(t), str(512 * len(ids)), "3", str(ids)) for t, ids in a + b))
    return [ids for _, ids in sorted(a + b, key=lambda r: r[0])]  # stable: ties in file order


def test_records_that_go_back_in_time_replay_in_arrival_order(tmp_path, capsys):
    """Replayed in file order, a record that went back was queued from a time long past: a
    10 s queue inside a 0.05 s makespan, and a negative trace duration."""
    p = tmp_path / "cat.jsonl"
    ids = _shards(p)
    tr = read_trace(p)
    assert (tr.reordered, tr.first_back) == (2, 4)  # lines 4 (1 s) and 5 (5 s) go back
    assert [list(r.hash_ids) for r in tr.requests] == ids
    assert [r.arrival_s for r in tr.requests] == [0, 1, 4, 5, 8, 8]
    assert [r.index for r in tr.requests] == list(range(6))
    out = tmp_path / "t.json"
    assert main(["replay", str(p), *TIMED, "--json", str(out)]) == 0
    assert f"{p}:4: 2 record(s) arrive before a record above them" in capsys.readouterr().err
    rep = json.loads(out.read_text())
    assert rep["trace"]["duration_s"] == 8.0 and rep["trace"]["reordered"] == 2
    assert rep["completed"] == 6 and rep["queueing_s"]["max"] < 1.0
    assert rep["e2e_s"]["max"] < rep["makespan_s"]
    inst = InstantReplay(4).run(tr.requests)
    assert (inst["hits"], inst["blocks"]) == lru_hits(ids, 4)


def test_the_timed_replay_refuses_requests_out_of_arrival_order():
    """Handed to TimedReplay.run directly, requests that go back are an error, not made-up
    queueing (read_trace sorts them)."""
    reqs = [TraceRequest(0, 10.0, 600, 2, (1, 2)), TraceRequest(1, 0.0, 600, 2, (3, 4))]
    with pytest.raises(ValueError, match="request 1 arrives before request 0"):
        TimedReplay(TimedOptions(num_blocks=512)).run(reqs)
    nan = [TraceRequest(0, 0.0, 600, 2, (1, 2)), TraceRequest(1, float("nan"), 600, 2, (3,))]
    with pytest.raises(ValueError, match="request 1: arrival offset nan s"):
        TimedReplay(TimedOptions(num_blocks=512)).run(nan)
