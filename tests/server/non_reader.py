"""A client that sends one streaming completion and never reads the answer: the server's
write path then stalls on a full socket, which the slow-reader and send-buffer tests need."""

from __future__ import annotations

import json
import socket

# enough output (~4 x 400 SSE chunks of ~200 bytes) to fill the client's 4 KiB receive window,
# the server's 16 KiB kernel send buffer and aiohttp's 64 KiB write buffer. (Linux autotunes an
# unset send buffer up to tcp_wmem's 4 MiB: the same stall, only after more output.)
N, MAX_TOKENS = 4, 400


def open_non_reader(port: int) -> socket.socket:
    """Send one streaming completion and never read the answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"prompt": "hello", "max_tokens": MAX_TOKENS, "n": N, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    sock.settimeout(60)  # a bound on a hang, not a timing assertion
    data = b""
    try:
        while chunk := sock.recv(1 << 16):
            data += chunk
    except ConnectionResetError:
        pass  # the server aborted the connection: what a stuck stream gets
    return data
