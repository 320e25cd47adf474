"""bench.tool_stream at a small scale: every case runs on this checkout and on a baseline
checkout (here the same tree) in fresh interpreters, and each stream gives back exactly the
calls its output holds."""

from __future__ import annotations

import json

from bench import tool_stream


def test_every_case_streams_its_calls_on_every_arm(tmp_path):
    out = tool_stream.main(["--rounds", "1", "--scale", "0.02", "--baseline", tool_stream.ROOT,
                            "--json", str(tmp_path / "r.json")])
    written = {case: n for case, (_, _, n) in tool_stream.cases(0.02).items()}
    base = tool_stream.Path(tool_stream.ROOT).name
    for arm in ("head", base):
        for case, n in written.items():
            assert out[f"{arm}.{case}.calls"] == n, (arm, case)
            assert 0 < out[f"{arm}.{case}.seconds.min"] <= out[f"{arm}.{case}.seconds.max"]
    assert json.loads((tmp_path / "r.json").read_text())["rounds"] == 1
