"""The gRPC Health Checking Protocol the Inference Extension's endpoint picker protocol requires
("Health Checking": services liveness, readiness, envoy.service.ext_proc.v3.ExternalProcessor)
on ``kvpool epp --grpc-health-port`` (kvpool/epp/health.py; docs/epp.md, "gRPC health").
Before, the picker had no such port: a ``grpc`` probe or an Envoy gRPC health check had
nothing to ask. A real ``kvpool epp`` process (stopped by pid), grpcio's client, and the
messages written here by hand on the wire (``service`` is field 1, a string; ``status``
field 1, a varint; SERVING is 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys

import grpc
import pytest

from kvpool.epp.cli import add_arguments, health_port, main
from stress.http.servers import ROOT

CHECK = "/grpc.health.v1.Health/Check"
REPLICA = ["--replica", "http://127.0.0.1:9"]  # nothing there: health is the picker's own


def request(service: str) -> bytes:
    raw = service.encode()
    return b"\x0a" + bytes([len(raw)]) + raw if raw else b""


def spawn() -> tuple[subprocess.Popen, int]:
    """``kvpool epp`` with every port free-chosen; (process, gRPC health port) from its ready
    line."""
    proc = subprocess.Popen([sys.executable, "-m", "kvpool", "epp", "--port", "0",
                             "--metrics-port", "-1", "--grpc-health-port", "0", *REPLICA],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()  # bounded by the test's timeout
    found = re.search(r"gRPC health on grpc://127\.0\.0\.1:(\d+)", line)
    if found is None:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(20)
        raise AssertionError(f"no gRPC health port in the ready line: {line!r}")
    return proc, int(found.group(1))


async def test_the_protocols_services_are_serving_and_others_not_found():
    proc, port = await asyncio.to_thread(spawn)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = channel.unary_unary(CHECK)
            for service in ("", "liveness", "readiness", "inference-extension",
                            "envoy.service.ext_proc.v3.ExternalProcessor"):
                assert await check(request(service), timeout=10) == b"\x08\x01", service
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await check(request("no-such-service"), timeout=10)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await channel.unary_stream("/grpc.health.v1.Health/Watch")(
                    request("")).read()
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        os.kill(proc.pid, signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 20) == 0


def test_the_flag_and_its_checks():
    parse = add_arguments(argparse.ArgumentParser()).parse_args
    assert health_port(parse(REPLICA)).url == "grpc://127.0.0.1:9003"
    assert health_port(parse([*REPLICA, "--host", "::1"])).url == "grpc://[::1]:9003"
    assert health_port(parse([*REPLICA, "--grpc-health-port", "-1"])) is None
    assert main([*REPLICA, "--grpc-health-port", "-2"]) == 2
    assert main([*REPLICA, "--grpc-health-port", "65536"]) == 2
    assert re.fullmatch(r"grpc://\S+:\d+", health_port(parse(REPLICA)).url)


def test_a_taken_health_port_stops_the_picker_with_status_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = subprocess.run([
            sys.executable, "-m", "kvpool", "epp", "--port", "0", "--metrics-port", "-1",
            "--grpc-health-port", str(taken.getsockname()[1]), *REPLICA], cwd=ROOT,
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 1, out.stderr
    assert "kvpool epp: gRPC health port" in out.stderr and "Traceback" not in out.stderr
