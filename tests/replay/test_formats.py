"""Trace formats (kvpool/replay/formats.py): Bailian, Azure and BurstGPT files written here
(never downloaded) are detected, read with their units and block sizes, and replayed instant
and timed; an unknown format or a malformed record is a clear error naming the file's line."""

from __future__ import annotations

import json

import pytest

from kvpool.cli import main
from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.replay.formats import parse_datetime
from kvpool.replay.trace import TokenSynth, load_trace, read_trace

TIMED = ["--num-blocks", "400", "--max-num-batched-tokens", "2048", "--max-model-len", "4096",
         "--no-progress"]


def _bailian(path, rows) -> None:
    """Bailian records: chat_id, parent_chat_id, timestamp (s), lengths, type, turn, ids."""
    recs = [{"chat_id": i, "parent_chat_id": -1 if i == 0 else 0, "timestamp": t,
             "input_length": n, "output_length": out, "type": "text", "turn": 1 + (i > 0),
             "hash_ids": ids} for i, (t, n, out, ids) in enumerate(rows)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _two_sharing_three(path) -> None:
    """Two 1600-token prompts (100 ids of 16 tokens) sharing their first 3 hash ids."""
    _bailian(path, [(0.5, 1600, 2, [1, 2, 3] + list(range(10, 107))),
                    (2.25, 1600, 3, [1, 2, 3] + list(range(200, 297)))])


def _replay(capsys, path, *flags) -> dict:
    out = path.parent / f"{path.stem}-{len(flags)}-{'instant' in str(flags)}.json"
    assert main(["replay", str(path), "--json", str(out), *flags]) == 0, capsys.readouterr()
    return json.loads(out.read_text())


def test_bailian_arrivals_are_seconds_and_prefixes_share_16_token_blocks(tmp_path, capsys):
    """Read as Mooncake (ms, 512-token ids) the file's arrivals were 1000x compressed and the
    two prompts shared 3 x 512 = 1536 tokens; they share 3 x 16 = 48."""
    p = tmp_path / "qwen_traceA_blksz_16.jsonl"
    _two_sharing_three(p)
    timed = _replay(capsys, p, *TIMED)
    assert timed["trace"]["duration_s"] == 1.75  # 2.25 s - 0.5 s
    assert timed["completed"] == 2
    assert timed["prefix_hit_rate"] == round(48 / 3200, 6)  # the second request: 48 tokens
    instant = _replay(capsys, p, "--instant", "--capacity-blocks", "300")
    assert (instant["hits"], instant["blocks"]) == (3, 200)  # 3 shared ids of 100 each


def test_bailian_is_detected_and_synthesised_in_16_token_blocks(tmp_path):
    p = tmp_path / "b.jsonl"
    _two_sharing_three(p)
    tr = read_trace(p)
    assert (tr.format, tr.block, tr.dropped) == ("bailian", 16, 0)
    a, b = tr.requests
    assert (a.arrival_s, b.arrival_s) == (0.5, 2.25)
    assert (a.input_length, a.output_length, len(a.hash_ids)) == (1600, 2, 100)
    synth = TokenSynth(seed=1, block=tr.block)
    pa, pb = synth.prompt(a), synth.prompt(b)
    assert len(pa) == len(pb) == 1600
    assert pa[:48] == pb[:48] and pa[48:64] != pb[48:64]
    hasher = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=16)).hasher
    ha, hb = hasher.hash_blocks(pa), hasher.hash_blocks(pb)
    assert ha[:3] == hb[:3] and ha[3] != hb[3]
    assert read_trace(p, block_size=32).block == 32  # --trace-block-size overrides
    assert read_trace(p, fmt="mooncake").requests[1].arrival_s == 0.00225  # forced: ms


def test_short_hash_id_lists_are_padded_with_unique_blocks(tmp_path):
    p = tmp_path / "b.jsonl"
    _bailian(p, [(0, 40, 1, [7]), (1, 40, 1, [7])])  # 40 tokens need 3 ids of 16
    a, b = load_trace(p)
    assert list(a.hash_ids[:1]) == list(b.hash_ids[:1]) == [7]
    assert len(a.hash_ids) == len(b.hash_ids) == 3 and not set(a.hash_ids[1:]) & set(b.hash_ids)


def test_azure_csv_datetimes_and_unique_prompts(tmp_path, capsys):
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,374,9\n"
                 "2023-11-16 18:16:00.5000000,1020,20\n")
    tr = read_trace(p)
    assert (tr.format, tr.prefix_info) == ("azure", False)
    r = tr.requests
    assert [x.input_length for x in r] == [374, 374, 1020] and r[1].output_length == 9
    assert r[1].arrival_s - r[0].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert r[2].arrival_s - r[0].arrival_s == pytest.approx(13.81941, abs=1e-6)
    assert not set(r[0].hash_ids) & set(r[1].hash_ids)  # equal lengths, nothing shared
    bom = tmp_path / "bom.csv"  # saved by a spreadsheet: a byte order mark first
    bom.write_text("\ufeff" + p.read_text(), encoding="utf-8")
    assert read_trace(bom).requests == r
    assert parse_datetime("2024-05-10 00:00:01.5+00:00") == parse_datetime(
        "2024-05-10 02:00:01.5+02:00") == parse_datetime("2024-05-10T00:00:01.500Z")
    timed = _replay(capsys, p, *TIMED)
    assert (timed["completed"], timed["prefix_hit_rate"]) == (3, 0.0)
    assert timed["trace"]["duration_s"] == pytest.approx(13.81941, abs=1e-6)
    instant = _replay(capsys, p, "--instant", "--capacity-blocks", "500")
    assert (instant["hits"], instant["blocks"]) == (0, 24 + 24 + 64)  # 16-token blocks


def test_burstgpt_seconds_and_failures_dropped(tmp_path, capsys):
    p = tmp_path / "BurstGPT_1.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "45,ChatGPT,1087,0,1087,Conversation log\n"
                 "118,GPT-4,472,276,748,API log\n")
    tr = read_trace(p)
    assert (tr.format, tr.dropped, tr.block) == ("burstgpt", 1, 16)
    assert [(r.arrival_s, r.input_length, r.output_length) for r in tr.requests] == [
        (5.0, 472, 18), (118.0, 472, 276)]
    timed = _replay(capsys, p, *TIMED, "--trace-format", "burstgpt")
    assert (timed["completed"], timed["prefix_hit_rate"]) == (2, 0.0)
    assert timed["trace"]["dropped"] == 1 and timed["trace"]["duration_s"] == 113.0
    instant = _replay(capsys, p, "--instant", "--capacity-blocks", "100")
    assert (instant["hits"], instant["blocks"]) == (0, 60)


@pytest.mark.parametrize("text", ["a,b,c\n1,2,3\n", '{"ts": 1, "prompt": 3}\n', "hello\n"])
def test_an_unknown_format_is_an_error_naming_the_formats(tmp_path, capsys, text):
    p = tmp_path / "x.trace"
    p.write_text(text)
    assert main(["replay", str(p), "--instant", "--capacity-blocks", "4"]) == 2
    err = capsys.readouterr().err
    assert "unknown trace format" in err
    assert all(f in err for f in ("mooncake", "bailian", "azure", "burstgpt", "--trace-format"))


@pytest.mark.parametrize("name,text,line", [
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\n"
              "yesterday,3,4\n", 3),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
              "1,ChatGPT,3,4,7,API log\n2,ChatGPT,-3,4,1,API log\n", 3),
    ("c.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
              "1,ChatGPT,3\n", 2),
    ("d.jsonl", '{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 3, '
                '"output_length": 1, "turn": 1, "hash_ids": [0]}\n\n{"chat_id": 1}\n', 3),
])
def test_a_malformed_record_names_its_line(tmp_path, capsys, name, text, line):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValueError, match=f"{name}:{line}: not an? "):
        load_trace(p)
    assert main(["replay", str(p), "--instant", "--capacity-blocks", "4"]) == 2
    assert f"{name}:{line}:" in capsys.readouterr().err


def test_a_forced_format_that_does_not_fit_is_an_error(tmp_path, capsys):
    p = tmp_path / "b.jsonl"
    _two_sharing_three(p)
    assert main(["replay", str(p), "--instant", "--capacity-blocks", "4",
                 "--trace-format", "azure"]) == 2
    assert "b.jsonl:1: not an azure trace record: header lacks" in capsys.readouterr().err


def test_records_with_empty_prompts_are_dropped_not_fatal(tmp_path, capsys):
    """The scheduler refuses an empty prompt: the timed replay stopped with a traceback on a
    0-token record (Azure, BurstGPT, Mooncake alike); such records are dropped and counted."""
    p = tmp_path / "z.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,0,5\n"
                 "2023-11-16 18:15:47.1,30,5\n")
    timed = _replay(capsys, p, *TIMED)
    assert (timed["requests"], timed["completed"], timed["trace"]["dropped"]) == (1, 1, 1)
    m = tmp_path / "z.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}\n'
                 '{"timestamp": 9, "input_length": 3, "output_length": 1, "hash_ids": [4]}\n')
    assert [r.arrival_s for r in load_trace(m)] == [0.009]


AZ = "TIMESTAMP,ContextTokens,GeneratedTokens"


@pytest.mark.parametrize("text", [
    f"\n  \n{AZ}\n2023-11-16 18:15:46.6805900,374,44\n",  # blank lines before the header
    "TIMESTAMP, ContextTokens ,GeneratedTokens \n2023-11-16 18:15:46.6805900,374,44\n",
    f"{AZ}\n2023-11-16 18:15:46.6805900,374,44\n \n\t\n",  # whitespace-only lines, as JSONL
    '"TIMESTAMP", "ContextTokens", "GeneratedTokens"\n"2023-11-16 18:15:46.68", "374", "44"\n',
], ids=["leading-blank", "spaced-names", "whitespace-line", "quoted-after-spaces"])
def test_the_csv_reader_reads_the_header_detection_accepted(tmp_path, text):
    """Detection skipped blank lines and stripped names; the reader then said the header it
    had just accepted lacked TIMESTAMP (and a line holding one space had too few fields).
    Quoted names after ", " were read by detection with their quotes (unknown format) where
    the reader skips the spaces and reads them unquoted."""
    p = tmp_path / "az.csv"
    p.write_text(text)
    (r,) = read_trace(p).requests
    assert (r.input_length, r.output_length) == (374, 44)


def test_a_csv_value_error_names_its_column_and_line(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\n"
                 "5,ChatGPT,472,18,490,Conversation log\n6,ChatGPT,,18,490,Conversation log\n")
    with pytest.raises(ValueError, match="b.csv:4: not a burstgpt trace record: Request "
                                         "tokens must be a number, got ''"):
        read_trace(p)
