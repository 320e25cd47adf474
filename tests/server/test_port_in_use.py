"""``kvpool serve`` on a port it cannot have (kvpool/server/listen_errors.py): one line on
stderr naming the address and the flag, exit 2 as for its other startup errors; it was a raw
OSError traceback from the event loop. A KV events endpoint on the HTTP port is refused
before the model loads (the events socket, bound first, took the port). Real sockets."""

from __future__ import annotations

import json
import socket

from bench.redis_ports import reserve_port
from kvpool.server import serve

SMALL = ["--host", "127.0.0.1", "--num-device-blocks", "16", "--max-model-len", "64"]


def _serve(port: int, cfg: str, held: list[socket.socket]) -> int:
    """``kvpool serve`` on ``port``; the ports ``held`` (reserve_port: bound with SO_REUSEADDR,
    not listening, as the server's own sockets are) kept from other processes until it
    returns, then let go (bench/redis_ports.py NOTE(port-hold))."""
    try:
        return serve.main([*SMALL, "--port", str(port), "--kv-events-config", cfg])
    finally:
        for sock in held:
            sock.close()


def test_a_port_in_use_is_one_line_naming_it(busy_port, capsys):
    assert serve.main([*SMALL, "--port", str(busy_port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"kvpool serve: --port {busy_port}: cannot listen on "
                             f"127.0.0.1:{busy_port} (Address already in use)")
    assert "give --port a free port" in err[0]


def test_an_events_endpoint_on_the_http_port_is_refused_before_the_model(capsys):
    """The replay socket binds its endpoint (a loopback one here; tests bind no other)."""
    (port, held), (other, held_other) = reserve_port(), reserve_port()
    cfg = json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://127.0.0.1:{other}",
                      "replay_endpoint": f"tcp://127.0.0.1:{port}"})
    assert _serve(port, cfg, held + held_other) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0] == (f"kvpool serve: --kv-events-config: tcp://127.0.0.1:{port} takes the "
                      f"HTTP port {port}; give --port or that endpoint another port")
    with socket.socket() as s:  # the publisher let the port go
        s.bind(("127.0.0.1", port))


def test_a_publisher_dialing_its_own_http_port_is_refused(capsys):
    """A host in the endpoint means connect (the subscriber binds): pointed at this server's
    own port, the publisher greeted the HTTP listener with ZMTP, a 400 logged 5 times a
    second for as long as it ran."""
    port, held = reserve_port()
    cfg = json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://127.0.0.1:{port}"})
    assert _serve(port, cfg, held) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is this server's own HTTP port" in err[0], err
