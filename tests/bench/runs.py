"""Running a benchmark module the way the bench tests do (``python -m MODULE --quick --json
OUT``, from the repository root) and checking a result's KEY / KEY.min / KEY.max figures."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, out: Path, *extra: str) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", module, "--quick", "--json", str(out), *extra],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(out.read_text()), r.stdout


def check_keys(res: dict, keys: list[str], repeats: int) -> None:
    assert res["timing"]["repeats"] == repeats
    for key in keys:
        for k in (key, f"{key}.min", f"{key}.max"):
            assert isinstance(res.get(k), float), f"{k} missing or not a number"
        assert res[f"{key}.min"] <= res[key] <= res[f"{key}.max"], key
        assert res[key] > 0, key
