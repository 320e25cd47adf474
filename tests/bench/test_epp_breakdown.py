"""bench.epp_breakdown runs end to end: every arm (Envoy alone, Envoy with the fixed-answer
picker, Envoy with ``kvpool epp``, and both pickers of a --baseline checkout, here this one
again) answers each round's request with a 200 (``_one`` raises otherwise). Its fixed-answer
picker is a stand-in for kvpool.epp's Picker, so it rots when the service asks the picker for
something new: 3d53929 made the service read ``fallbacks`` and the Pick a ``pick_body``
returns, and the noop arm no longer started."""

from __future__ import annotations

import json

from bench import epp_breakdown
from stress.http.servers import ROOT

ARMS = {"envoy_hdr", "envoy_noop", "epp", "envoy_noop@base", "epp@base", "direct_p50_ms"}


def test_every_arm_answers(tmp_path):
    out = tmp_path / "epp.json"
    assert epp_breakdown.main(["--rounds", "2", "--repeats", "1", "--baseline", str(ROOT),
                               "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["rounds"] == 2 and len(res["runs"]) == 1
    assert ARMS <= set(res["added_p50_ms"])
