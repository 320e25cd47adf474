"""The router's /health while a huge request body arrives: ``python -m bench.router_body``.

A real ``kvpool router`` process (its replica URL refuses: the router answers itself) gets a
body of ``--mb`` megabytes of token ids, sent from a thread over a plain socket, while another
thread GETs /health back to back. Reported per round: the body's status line and the slowest
/health; over rounds: the median and range of those maxima and the p99 of every probe.

Before the body bound the router read the whole body and ran ``json.loads`` on its event loop
(2.7-2.8 s of /health stalls for 43 MB); now it answers 413 after ``--max-body-bytes``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request

from bench.remote_faults import RouterProcess
from stress.report import percentile

__all__ = ["main"]

NOWHERE = "http://127.0.0.1:9"


def probe(url: str, stop: threading.Event, took: list[float]) -> None:
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(url + "/health", timeout=30) as r:
                r.read()
        except urllib.error.HTTPError as exc:  # 503: no replica up, still an answer
            exc.read()
        took.append(time.monotonic() - t0)
        stop.wait(0.01)


def send(url: str, raw: bytes) -> str:
    """POST ``raw`` over a plain socket; the response's status line."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(raw))
        try:
            s.sendall(raw)
        except OSError:
            pass  # the router answered and closed before the whole body was sent
        return s.recv(65536).split(b"\r\n")[0].decode()


def one_round(url: str, raw: bytes) -> tuple[str, list[float]]:
    stop, took = threading.Event(), []
    th = threading.Thread(target=probe, args=(url, stop, took), daemon=True)
    th.start()
    time.sleep(0.1)
    status = send(url, raw)
    time.sleep(0.2)
    stop.set()
    th.join(30)
    return status, took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.router_body")
    p.add_argument("--mb", type=int, default=43, help="body size in MiB (default 43)")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    raw = b'{"prompt": [' + b"0," * (args.mb * 1024 * 1024 // 2) + b"0]}"
    router = RouterProcess([NOWHERE], ["--health-interval", "3600"])
    url = router.start()
    try:
        rounds = [one_round(url, raw) for _ in range(args.rounds)]
    finally:
        router.stop()
    maxima = [max(t) * 1000 for _, t in rounds]
    every = sorted(x * 1000 for _, t in rounds for x in t)
    print(json.dumps({
        "body_mib": args.mb, "statuses": sorted({s for s, _ in rounds}),
        "health_max_ms": {"median": round(statistics.median(maxima), 1),
                          "min": round(min(maxima), 1), "max": round(max(maxima), 1)},
        "health_p99_ms": round(percentile(every, 99), 1), "probes": len(every)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
