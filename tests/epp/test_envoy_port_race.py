"""bench/envoy_proc.py NOTE(port-race): a listener port taken between free_port() and Envoy's
bind (another worker's process on a 2-core CI box) restarts Envoy on fresh ports instead of
failing the test that wanted it. A real Envoy, a real socket holding the port."""

from __future__ import annotations

import socket
import urllib.request

from bench.envoy_proc import Envoy, free_port


def test_envoy_starts_on_fresh_ports_when_its_port_was_taken(tmp_path):
    envoy = Envoy(free_port(), tmp_path)
    taken = envoy.port
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        holder.bind(("127.0.0.1", taken))
        holder.listen(1)
        envoy.start()
        try:
            assert envoy.port != taken
            assert envoy.url == f"http://127.0.0.1:{envoy.port}"
            with urllib.request.urlopen(f"http://127.0.0.1:{envoy.admin}/ready",
                                        timeout=5) as r:
                assert r.status == 200
        finally:
            envoy.stop()
    assert envoy.proc.poll() is not None
