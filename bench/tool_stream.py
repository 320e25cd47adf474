"""bench/tool_stream.py: what streaming a tool call costs the server's event loop, per parser,
as medians of interleaved rounds (kvpool/server/tools/stream.py NOTE(closers), NOTE(resume)).

    python -m bench.tool_stream [--rounds 5] [--scale 1.0] [--baseline DIR ...] [--json FILE]

Each case is one model output fed to ParserStream in 4-character pieces, as a stream of
tokens arrives, and timed from the first piece to ``finish``:

    long.<parser>    one call whose argument is ~90 000 characters of code (a file a coding
                     agent writes), full of brackets
    many.<parser>    1000 small calls in one output (a small model looping; granite's
                     in one JSON array)
    unclosed.qwen3_coder   ``<function=f>`` repeated 500 times, never closed (d1abdc5's
                     parser took seconds on it; a longer one, minutes)

Every arm (this checkout, and each ``--baseline`` checkout, e.g. a commit unpacked with
``git archive``) runs in a fresh interpreter per round, in turn, so a slow spell on a shared
box hits every arm alike; a case whose parser an arm lacks is left out of that arm. Each run
also counts the calls the stream gave, which must be the calls written. Figures:
``<arm>.<case>.seconds`` median [min-max] over the rounds, and ``<arm>.<case>.calls``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import Stat, bench_parser, fmt_stat, machine, put, write_json

ROOT = str(Path(__file__).resolve().parent.parent)  # this checkout
PIECE = 4
_CHILD = """import json, sys, time
from pathlib import Path
import kvpool
from kvpool.server.tools.parsers import PARSERS, tool_parser
from kvpool.server.tools.stream import ParserStream
root = Path(sys.argv[1]).resolve()
if root not in Path(kvpool.__file__).resolve().parents:
    sys.exit(f"{root} is not a kvpool checkout: would measure {kvpool.__file__}")
out = {}
for case, (parser, text) in json.load(sys.stdin).items():
    if parser not in PARSERS:
        continue
    stream, calls = ParserStream(tool_parser(parser)), 0
    t0 = time.perf_counter()
    for i in range(0, len(text), %d):
        calls += sum("id" in d["tool_calls"][0] for d in stream.feed(text[i:i + %d])
                     if "tool_calls" in d)
    calls += sum("id" in d["tool_calls"][0] for d in stream.finish() if "tool_calls" in d)
    out[case] = {"seconds": time.perf_counter() - t0, "calls": calls}
print(json.dumps(out))
""" % (PIECE, PIECE)


def cases(scale: float = 1.0) -> dict[str, tuple[str, str, int]]:
    """case -> (parser, output, calls written)."""
    lines = max(1, round(3000 * scale))
    code = "".join("if (x%d) { y = {a: %d}; }\n" % (i, i) for i in range(lines))
    arg = json.dumps(code)
    n = max(1, round(1000 * scale))
    return {
        "long.hermes": ("hermes", '<tool_call>{"name": "w", "arguments": {"c": %s}}'
                        "</tool_call>" % arg, 1),
        "long.mistral": ("mistral", '[TOOL_CALLS][{"name": "w", "arguments": {"c": %s}}]' % arg,
                         1),
        "long.pythonic": ("pythonic", "[w(c=%s)]" % repr(code), 1),
        "long.qwen3_coder": ("qwen3_coder", "<tool_call>\n<function=w>\n<parameter=c>\n%s\n"
                             "</parameter>\n</function>\n</tool_call>" % code, 1),
        "many.hermes": ("hermes", "".join('<tool_call>{"name": "f", "arguments": {"x": %d}}'
                                          "</tool_call>\n" % i for i in range(n)), n),
        "many.qwen3_coder": ("qwen3_coder", "".join(
            "<tool_call>\n<function=f>\n<parameter=x>\n%d\n</parameter>\n</function>\n"
            "</tool_call>\n" % i for i in range(n)), n),
        "unclosed.qwen3_coder": ("qwen3_coder", "<tool_call>" + "<function=f>" * max(1, n // 2), 0),
        "long.granite": ("granite", '<|tool_call|>[{"name": "w", "arguments": {"c": %s}}]' % arg,
                         1),
        "many.granite": ("granite", "<|tool_call|>[" + ", ".join(
            '{"name": "f", "arguments": {"x": %d}}' % i for i in range(n)) + "]", n),
    }


def run_arm(root: str, scale: float) -> dict[str, dict]:
    """One round of every case on the checkout at ``root``, in a fresh interpreter."""
    payload = json.dumps({k: (p, t) for k, (p, t, _) in cases(scale).items()})
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", _CHILD, root], input=payload, cwd=root,
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("tool_stream", __doc__, timing=False)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="of the cases' sizes")
    ap.add_argument("--baseline", nargs="*", default=[], metavar="DIR",
                    help="other checkouts, measured in the same rounds as <name>.<case>")
    a = ap.parse_args(argv)
    arms = {"head": ROOT, **{Path(d).name: str(Path(d).resolve()) for d in a.baseline}}
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for r in range(a.rounds):
        print(f"round {r + 1} of {a.rounds}", flush=True)
        for arm, root in arms.items():
            runs[arm].append(run_arm(root, a.scale))
    out: dict = {"machine": machine(), "rounds": a.rounds, "scale": a.scale, "piece": PIECE}
    written = {k: n for k, (_, _, n) in cases(a.scale).items()}
    for arm, rounds in runs.items():
        for case in rounds[0]:
            s = Stat.of([run[case]["seconds"] for run in rounds])
            put(out, f"{arm}.{case}.seconds", s)
            out[f"{arm}.{case}.calls"] = rounds[0][case]["calls"]
            ok = "" if out[f"{arm}.{case}.calls"] == written[case] else "  CALLS WRONG"
            print(f"{arm:10s} {case:22s} {fmt_stat(s, '.3f')} s{ok}")
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
