"""A real ``kvpool serve`` subprocess on 127.0.0.1:0 for the server tests (the async context
manager yields the process, its URL and the lines it printed up to READY), and the command
line that starts it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from kvpool.server import serve

ROOT = Path(__file__).resolve().parents[2]


def serve_command() -> list[str]:
    """``python -m kvpool serve`` once kvpool.cli registers it; the module itself until then."""
    from kvpool import cli

    if "serve" in getattr(cli, "COMMANDS", {}):
        return [sys.executable, "-m", "kvpool", "serve"]
    return [sys.executable, "-m", "kvpool.server.serve"]


@contextlib.asynccontextmanager
async def subprocess_server(*flags: str, blocks: int = 32, context: int = 512):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        *serve_command(), "--port", "0", "--num-device-blocks", str(blocks),
        "--num-host-blocks", "0", "--max-model-len", str(context),
        "--max-tokens-limit", str(context), "--num-threads", "1",
        "--no-enable-prefix-caching", "--log-level", "warning", *flags,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    lines: list[str] = []
    try:
        while True:
            raw = await asyncio.wait_for(proc.stdout.readline(), timeout=90)
            assert raw, "server exited before listening:\n" + "".join(lines)
            lines.append(raw.decode())
            if raw.decode().startswith(serve.READY_PREFIX):
                break
        hostport = lines[-1].removeprefix(serve.READY_PREFIX).split()[0]
        yield proc, f"http://{hostport}", lines
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def read_rest(proc, lines: list[str]) -> str:
    out = await asyncio.wait_for(proc.stdout.read(), timeout=30)
    return "".join(lines) + out.decode()
