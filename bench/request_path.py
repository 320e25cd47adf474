"""bench/request_path.py: which product files one streaming completion runs through.

    python -m bench.request_path [--json FILE]

Starts the real app over the real AsyncEngine (built-in tiny model) on 127.0.0.1, sends one
warm-up request, then traces every thread (``sys.setprofile`` / ``threading.setprofile``)
while a second streamed completion runs from its HTTP request to ``[DONE]``, and lists the
kvpool/ files whose functions ran, grouped by package. Start-up and the warm-up are not
counted: the figure is what a request's path touches. A count, not a timing.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from bench.common import bench_parser, write_json
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.engine.config import EngineConfig
from kvpool.server.app import build_app

PRODUCT = Path(__file__).resolve().parents[1] / "kvpool"
BODY = {"model": "kvpool-tiny", "prompt": "hello paged world", "max_tokens": 8,
        "temperature": 0, "stream": True}


class FileTracer:
    """Collects the kvpool/ files whose Python functions are called, on every thread."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.recording = False

    def __call__(self, frame, event, arg):  # noqa: ANN001 (sys.setprofile's signature)
        if self.recording and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(str(PRODUCT)):
                self.files.add(str(Path(name).relative_to(PRODUCT.parent)))

    def install(self) -> None:
        """Before the engine's and the server's threads start (Python 3.11 has no way to
        reach a running thread): they all carry the hook, which records only while asked."""
        threading.setprofile(self)
        sys.setprofile(self)

    def remove(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


async def _stream(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v1/completions", json=BODY) as r:
        r.raise_for_status()
        return len(await r.read())


async def traced_files() -> list[str]:
    """The product files one streamed completion ran through, sorted."""
    tracer = FileTracer()
    tracer.install()
    engine = AsyncEngine(EngineConfig(num_device_blocks=64, block_size=8))
    server = TestServer(build_app(engine), host="127.0.0.1", port=0)
    await server.start_server()
    url = f"http://127.0.0.1:{server.port}"
    try:
        await _stream(url)  # warm-up: lazy imports and first-use set-up stay out of the count
        await asyncio.sleep(0.2)
        tracer.recording = True
        await _stream(url)
        await asyncio.sleep(0.2)  # the step thread's tail of the request
        tracer.recording = False
    finally:
        await server.close()
        tracer.remove()
    return sorted(tracer.files)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("request_path", __doc__, timing=False)
    args = ap.parse_args(argv)
    files = asyncio.run(traced_files())
    by_pkg = Counter(f.split("/")[1] if f.count("/") > 1 else "(top)" for f in files)
    for f in files:
        print(f)
    print(f"{len(files)} product files: "
          + ", ".join(f"{k} {v}" for k, v in sorted(by_pkg.items())))
    write_json(args.json, {"files": files, "count": len(files), "by_package": dict(by_pkg)})


if __name__ == "__main__":
    main()
