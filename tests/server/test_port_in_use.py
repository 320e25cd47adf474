"""``kvpool serve`` on a port it cannot have (kvpool/server/listen_errors.py): one line on
stderr naming the address and the flag, exit 2 as for its other startup errors; it was a raw
OSError traceback from the event loop. A KV events endpoint on the HTTP port is refused
before the model loads (the events socket, bound first, took the port). Real sockets."""

from __future__ import annotations

import json
import socket

from kvpool.server import serve

SMALL = ["--host", "127.0.0.1", "--num-device-blocks", "16", "--max-model-len", "64"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_in_use_is_one_line_naming_it(busy_port, capsys):
    assert serve.main([*SMALL, "--port", str(busy_port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"kvpool serve: --port {busy_port}: cannot listen on "
                             f"127.0.0.1:{busy_port} (Address already in use)")
    assert "give --port a free port" in err[0]


def test_an_events_endpoint_on_the_http_port_is_refused_before_the_model(capsys):
    port = _free_port()
    cfg = json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}"})
    assert serve.main([*SMALL, "--port", str(port), "--kv-events-config", cfg]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0] == (f"kvpool serve: --kv-events-config: tcp://0.0.0.0:{port} takes the HTTP "
                      f"port {port}; give --port or that endpoint another port")
    with socket.socket() as s:  # the publisher let the port go
        s.bind(("0.0.0.0", port))
