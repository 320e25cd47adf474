"""``kvpool router --port P`` with P in use (kvpool/server/listen_errors.py): one line on
stderr naming the address and the flag, exit 2 as for its other startup errors; it was a raw
OSError traceback. A real listening socket holds the port."""

from __future__ import annotations

import socket

from kvpool.router.cli import main


def test_a_port_in_use_is_one_line_naming_it(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(["--replica", "http://127.0.0.1:9", "--host", "127.0.0.1",
                     "--port", str(port)])
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "kvpool router" in line]
    assert err == [f"kvpool router: --port {port}: cannot listen on 127.0.0.1:{port} "
                   "(Address already in use); give --port a free port (0: any free)"]
