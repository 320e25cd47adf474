"""bench/loadgen.py: guidellm, a load generator built for OpenAI servers, driving kvpool serve.

    python -m bench.loadgen [--guidellm PATH] [--model DIR] [--tokenizer DIR]
                            [--requests N] [--concurrency C ...] [--prompt-tokens P]
                            [--output-tokens O] [--endpoint completions|chat]
                            [--repeats R] [--quick] [--json out/loadgen.json]

Starts ``python -m kvpool.server.serve`` on 127.0.0.1 (stress.http.servers.SpawnedServer: a free
port read from the ready line, stopped by its pid with SIGTERM), sends two warm-up requests, then
runs ``guidellm run`` ``--repeats`` times. Each run is one guidellm process with a
``concurrent`` profile over every ``--concurrency`` (one guidellm benchmark per concurrency, in
order), a ``max_requests`` constraint of ``--requests`` per concurrency and guidellm's
``synthetic_text`` data (Faker text cut to ``--prompt-tokens`` tokens; guidellm asks for exactly
``--output-tokens`` through ``max_tokens`` + ``ignore_eos``), streamed, usage from the stream.
Each run has its own data seed, so a repeat never hits the prefix cache with an earlier run's
prompts (``prefix_cache.hit_share`` from the server's /metrics shows it).

Keys per concurrency C (median over the runs, ``KEY.min`` / ``KEY.max`` beside it):
``cC.requests_per_s`` and ``cC.output_tokens_per_s`` (guidellm's mean rate over the benchmark:
successful requests or output tokens / benchmark duration), ``cC.ttft_ms.p50``,
``cC.ttft_ms.p99``, ``cC.itl_ms.p50``, ``cC.latency_s.p50`` (percentiles over that run's
successful requests); ``cC.requests.successful`` / ``cC.requests.errored`` are totals over the
runs. Never pass/fail. guidellm runs on the same CPUs as the server: on a small machine the
figures include its own cost (its TTFT includes its client-side overhead, as for any client).

**The tokenizer.** guidellm's synthetic data measures prompt lengths with a Hugging Face
tokenizer (``AutoTokenizer.from_pretrained``). Without ``--tokenizer`` guidellm would load one
named like the served model, i.e. from the hub; this bench passes the model directory (or
``--tokenizer DIR``). With no ``--model`` the built-in tiny model is saved to a temporary
directory first (``save_tiny_model``: its tokenizer.json loads as a PreTrainedTokenizerFast), and
the server serves that same directory, so both sides count tokens alike.

**Offline.** guidellm runs with ``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1``: synthetic data needs no dataset, the tokenizer is a local directory.
Checked in a network namespace with only loopback up (``unshare -rn``).

**Its own venv.** guidellm 0.8 pins ``multidict==6.9.1`` and ``click==8.4.2``; installed into
kvpool's environment it would downgrade the multidict aiohttp runs on. It also does not need
kvpool: it is a separate client. So it lives in a venv of its own; ``--system-site-packages``
lets it reuse the CPU torch (and transformers) already installed instead of pulling a CUDA
build; pip installs its own pins inside the venv, shadowing the system ones there only::

    python -m venv --system-site-packages /opt/guidellm && /opt/guidellm/bin/pip install guidellm

``--guidellm`` defaults to ``$KVPOOL_GUIDELLM``, else ``guidellm`` on PATH, else
``/opt/guidellm/bin/guidellm``. (aiperf pins pandas 2.3.3 / prometheus-client ~0.23 and pulls
kubernetes and dash; inference-perf needs Python >= 3.12.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import (DEFAULT_REPEATS, QUICK_REPEATS, Stat, Timing, machine, put,
                          timing_info, write_json)
from stress.http.servers import SpawnedServer

MODEL_NAME = "kvpool-loadgen"  # --served-model-name; guidellm sends it as `model`
DEFAULT_GUIDELLM = "/opt/guidellm/bin/guidellm"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# figure -> (guidellm metric, statistic of its "successful" distribution)
FIGURES = {"requests_per_s": ("requests_per_second", "mean"),
           "output_tokens_per_s": ("output_tokens_per_second", "mean"),
           "ttft_ms.p50": ("time_to_first_token_ms", "p50"),
           "ttft_ms.p99": ("time_to_first_token_ms", "p99"),
           "itl_ms.p50": ("inter_token_latency_ms", "p50"),
           "latency_s.p50": ("request_latency", "p50")}
SEED_STRIDE = 1000  # guidellm seeds benchmark k of a run with seed + k: keep runs apart


def find_guidellm(explicit: str | None) -> str | None:
    """The guidellm executable: --guidellm, $KVPOOL_GUIDELLM, PATH, /opt/guidellm; None."""
    for cand in (explicit, os.environ.get("KVPOOL_GUIDELLM"), shutil.which("guidellm"),
                 DEFAULT_GUIDELLM):
        if cand and os.access(cand, os.X_OK) and Path(cand).is_file():
            return cand
        if cand and cand == explicit:
            return None  # an explicit path that does not work is an error, not a fallback
    return None


def guidellm_command(exe: str, url: str, tokenizer: Path, out: Path, args: argparse.Namespace,
                     seed: int) -> list[str]:
    """guidellm 0.8's ``run``: every option is a JSON object with a ``kind``."""
    def opt(flag: str, **value: Any) -> list[str]:
        return [flag, json.dumps(value)]
    return [exe, "run",
            *opt("--backend", kind="openai_http", target=url, model=MODEL_NAME,
                 request_format=ENDPOINTS[args.endpoint], timeout=args.request_timeout),
            *opt("--profile", kind="concurrent", streams=list(args.concurrency)),
            *opt("--constraint", kind="max_requests", count=args.requests),
            *opt("--tokenizer", kind="huggingface_auto", model=str(tokenizer)),
            *opt("--data", kind="synthetic_text", prompt_tokens=args.prompt_tokens,
                 output_tokens=args.output_tokens),
            *opt("--seed", kind="static", value=seed),
            *opt("--output", kind="json", path=str(out)),
            "--disable-console-interactive"]


def run_guidellm(cmd: list[str], cwd: Path, timeout: float) -> dict:
    """One guidellm process; its JSON report. Its console goes to a log shown on failure."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # its venv, not our tree
    env.update(OFFLINE_ENV)
    log = cwd / "guidellm.log"
    with log.open("w") as fh:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                            timeout=timeout).returncode
    out = Path(json.loads(cmd[cmd.index("--output") + 1])["path"])
    if rc != 0 or not out.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"guidellm exited {rc}:\n{tail}")
    return json.loads(out.read_text())


def parse_report(report: dict) -> dict[int, dict[str, float]]:
    """guidellm's JSON report -> {concurrency: {figure: value}}, one entry per benchmark."""
    per: dict[int, dict[str, float]] = {}
    for bench in report["benchmarks"]:
        streams = int(bench["config"]["strategy"]["streams"])
        metrics = bench["metrics"]
        fig: dict[str, float] = {}
        for key, (name, statistic) in FIGURES.items():
            dist = metrics[name]["successful"]
            value = dist["mean"] if statistic == "mean" else dist["percentiles"][statistic]
            fig[key] = float(value)
        totals = metrics["request_totals"]
        fig["requests.successful"] = float(totals["successful"])
        fig["requests.errored"] = float(totals["errored"]) + float(totals["incomplete"])
        per[streams] = fig
    return per


def prefix_counters(url: str) -> tuple[float, float]:
    """(prefix-cache queries, hits) in tokens, from the server's /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    vals = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("kvpool_prefix_cache_queries_total", "kvpool_prefix_cache_hits_total"):
            vals[name] = float(value)
    return vals["kvpool_prefix_cache_queries_total"], vals["kvpool_prefix_cache_hits_total"]


def warm_up(url: str, n: int = 2) -> None:
    """A few requests first, so torch's first-call costs are not charged to run 1."""
    body = json.dumps({"model": MODEL_NAME, "prompt": "warm up the engine", "max_tokens": 8,
                       "temperature": 0}).encode()
    for _ in range(n):
        req = urllib.request.Request(f"{url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()


def summarise(runs: list[dict[int, dict[str, float]]], hit_shares: list[float],
              concurrency: list[int]) -> dict:
    res: dict = {}
    for c in concurrency:
        rows = [run[c] for run in runs]
        for key in FIGURES:
            put(res, f"c{c}.{key}", Stat.of(r[key] for r in rows))
        for key in ("requests.successful", "requests.errored"):
            res[f"c{c}.{key}"] = sum(r[key] for r in rows)
    put(res, "prefix_cache.hit_share", Stat.of(hit_shares))
    return res


def print_table(res: dict, concurrency: list[int]) -> None:
    cols = [("req/s", "requests_per_s", ",.2f"), ("out tok/s", "output_tokens_per_s", ",.0f"),
            ("TTFT p50 ms", "ttft_ms.p50", ",.1f"), ("TTFT p99 ms", "ttft_ms.p99", ",.1f"),
            ("ITL p50 ms", "itl_ms.p50", ",.2f")]
    print(f"\n{'conc':>4s} " + " ".join(f"{name + ' median [min-max]':>30s}"
                                       for name, _, _ in cols) + "   ok/err")
    for c in concurrency:
        cells = []
        for _, key, fmt in cols:
            k = f"c{c}.{key}"
            cells.append(f"{res[k]:{fmt}} [{res[k + '.min']:{fmt}}-{res[k + '.max']:{fmt}}]")
        ok, err = res[f"c{c}.requests.successful"], res[f"c{c}.requests.errored"]
        print(f"{c:>4d} " + " ".join(f"{cell:>30s}" for cell in cells) + f"   {ok:.0f}/{err:.0f}")
    print(f"prefix-cache hit share of prompt tokens per run: {res['prefix_cache.hit_share']:.3f}"
          f" [{res['prefix_cache.hit_share.min']:.3f}-{res['prefix_cache.hit_share.max']:.3f}]")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--guidellm", default=None, metavar="PATH",
                    help="guidellm executable in its own venv (see the module docstring)")
    ap.add_argument("--model", default=None, metavar="DIR",
                    help="Hugging Face model directory (default: the built-in tiny model)")
    ap.add_argument("--tokenizer", default=None, metavar="DIR",
                    help="tokenizer directory for guidellm's synthetic data (default: --model)")
    ap.add_argument("--requests", type=int, default=None, help="requests per concurrency "
                    "per run (default 32; 8 with --quick)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4],
                    help="concurrent streams; one guidellm benchmark each (default 1 4)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=None,
                    help="tokens per response (default 32; 16 with --quick)")
    ap.add_argument("--endpoint", choices=sorted(ENDPOINTS), default="completions")
    ap.add_argument("--repeats", type=int, default=None,
                    help=f"guidellm runs, medians reported (default {DEFAULT_REPEATS}; "
                         f"{QUICK_REPEATS} with --quick)")
    ap.add_argument("--quick", action="store_true", help="a smoke run, not figures to quote")
    ap.add_argument("--num-device-blocks", type=int, default=1024)
    ap.add_argument("--num-threads", type=int, default=1, help="server torch threads")
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per guidellm run")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    if args.requests is None:
        args.requests = 8 if args.quick else 32
    if args.output_tokens is None:
        args.output_tokens = 16 if args.quick else 32
    if args.repeats is None:
        args.repeats = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    for name in ("requests", "prompt_tokens", "output_tokens", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if min(args.concurrency) < 1 or len(set(args.concurrency)) != len(args.concurrency):
        ap.error("--concurrency: distinct counts >= 1")
    return args


def _say_no_guidellm(path: str | None) -> None:
    where = (f"--guidellm {path} is not an executable file" if path
             else f"none via $KVPOOL_GUIDELLM, on PATH or at {DEFAULT_GUIDELLM}")
    print(f"bench.loadgen: no guidellm executable ({where}). Make its own venv:\n"
          "  python -m venv --system-site-packages /opt/guidellm && "
          "/opt/guidellm/bin/pip install guidellm", file=sys.stderr)


def _serve_args(model: Path, args: argparse.Namespace) -> list[str]:
    return [str(model), "--served-model-name", MODEL_NAME, "--num-device-blocks",
            str(args.num_device_blocks), "--num-host-blocks", "0",
            "--max-num-seqs", str(max(64, max(args.concurrency))),
            "--num-threads", str(args.num_threads), "--log-level", "warning"]


def _one_run(exe: str, url: str, tokenizer: Path, out: Path, args: argparse.Namespace,
             seed: int) -> tuple[dict, float]:
    """One guidellm process against the server: its figures per concurrency, and the share of
    the server's prefix-cache queries that hit during it."""
    q0, h0 = prefix_counters(url)
    cmd = guidellm_command(exe, url, tokenizer, out, args, seed=seed)
    per = parse_report(run_guidellm(cmd, out.parent, args.timeout))
    missing = set(args.concurrency) - set(per)
    if missing:
        raise RuntimeError(f"guidellm report lacks concurrency {sorted(missing)}")
    q1, h1 = prefix_counters(url)
    return per, (h1 - h0) / (q1 - q0) if q1 > q0 else 0.0


def _guidellm_runs(exe: str, model: Path, tokenizer: Path, tmp: Path,
                   args: argparse.Namespace) -> tuple[list[dict], list[float]]:
    """Start the server, warm it up, run guidellm --repeats times against it: each run's
    figures and prefix-cache hit share."""
    runs, hit_shares = [], []
    with SpawnedServer(_serve_args(model, args), startup_timeout=180) as server:
        warm_up(server.url)
        for r in range(args.repeats):
            per, hit_share = _one_run(exe, server.url, tokenizer, tmp / f"run{r}.json", args,
                                      seed=SEED_STRIDE * (r + 1))
            runs.append(per)
            hit_shares.append(hit_share)
            print(f"run {r + 1}/{args.repeats}: " + ", ".join(
                f"c{c} {per[c]['requests_per_s']:.2f} req/s" for c in args.concurrency),
                flush=True)
    print(f"server: {server.tail(1)}")  # "stopped; N device blocks free"
    return runs, hit_shares


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    exe = find_guidellm(args.guidellm)
    if exe is None:
        _say_no_guidellm(args.guidellm)
        return 2
    timing = Timing(args.repeats, 0.0, args.quick)
    with tempfile.TemporaryDirectory(prefix="kvpool-loadgen-") as tmp_name:
        tmp = Path(tmp_name)
        if args.model is None:
            from kvpool.runtime.model import save_tiny_model
            model = save_tiny_model(tmp / "tiny-model")
        else:
            model = Path(args.model)
        tokenizer = Path(args.tokenizer) if args.tokenizer else model
        runs, hit_shares = _guidellm_runs(exe, model, tokenizer, tmp, args)
    res = summarise(runs, hit_shares, args.concurrency)
    print_table(res, args.concurrency)
    load = os.getloadavg()
    print(f"load average at the end (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    config = {k: v for k, v in vars(args).items() if k != "json"}
    config["guidellm"] = exe
    write_json(args.json, {**res, "config": config, "timing": timing_info(timing),
                           "load_average": list(load), "machine": machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
