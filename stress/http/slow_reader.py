"""Non-reading stream clients for the HTTP stress mode (issue 12 item 4).

Each of ``n`` clients, again and again until the load ends: open a raw socket with a small
receive buffer (set before connect, so the advertised window stays small), send one streaming
completion big enough to fill the client window, the server's kernel send buffer and aiohttp's
write buffer, and never read. The server's SSE write then blocks; after ``--stream-write-timeout``
it must abort the connection, and the request's --max-queue slot must already be back (freed
when the engine finished, whatever the client reads: ``kvpool_requests_in_flight`` returns to 0).

After holding the stream ``hold`` seconds (the server's write timeout plus a margin) the client
reads what is left and classifies the stream::

    closed_by_server   the connection ended (EOF or reset) without ``data: [DONE]``
    completed          ``data: [DONE]`` arrived: the buffers absorbed the stream, or the server
                       had not given up yet (reading unblocked it) -- not a failure, but no
                       evidence of the timeout either
    error              connect/send failed, or the read stalled past ``read_timeout``

A stream closed by the server is the expected case; ``completed`` streams say the request was too
small to stall (or the hold too short). The queue-slot check is the run's drain verdict.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from urllib.parse import urlsplit

__all__ = ["SlowReaders", "stream_shape"]

RECV_BUFFER = 4096  # bytes: the client's receive window
DONE = b"data: [DONE]"
PROMPT_ROOM = 16  # tokens held back for the prompt ("hello" and its special tokens)


def stream_shape(max_num_seqs: int, blocks: int, max_model_len: int,
                 block_size: int = 16) -> tuple[int, int]:
    """NOTE(fit): the (n, max_tokens) of a slow reader's request that a server started with
    these limits runs: 4 sequences of 400 tokens, fewer where --max-num-seqs or ``blocks``
    (its pool, or a tenant's quota) cannot hold them. The fixed 4 x 400 drew the server's
    correct 400 (n_too_large_for_batch / _for_pool) on a small server the harness had started
    itself, and that counted as the run's failure."""
    n = max(1, min(4, max_num_seqs))
    per_seq = blocks // n * block_size - PROMPT_ROOM
    return n, max(1, min(400, per_seq, max_model_len - PROMPT_ROOM))


class SlowReaders:
    """``await run(stop, deadline)``; ``figures()`` afterwards."""

    def __init__(self, url: str, n: int, *, hold: float, n_choices: int = 4,
                 max_tokens: int = 400, api_key: str | None = None,
                 read_timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        self.addr = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.n = n
        self.hold = hold
        self.read_timeout = read_timeout
        body = json.dumps({"prompt": "hello", "max_tokens": max_tokens, "n": n_choices,
                           "stream": True, "ignore_eos": True, "temperature": 0}).encode()
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        # Connection: close -- the end of the stream is the end of the connection
        self.request = (f"POST /v1/completions HTTP/1.1\r\nHost: {self.addr[0]}\r\n"
                        f"Content-Type: application/json\r\nConnection: close\r\n{auth}"
                        f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.outcomes = Counter()  # closed_by_server | completed | error
        self.errors: list[str] = []

    async def run(self, stop: asyncio.Event, deadline: float) -> None:
        await asyncio.gather(*(self._client(stop, deadline) for _ in range(self.n)))

    async def _client(self, stop: asyncio.Event, deadline: float) -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            kind = await self._one_stream(stop)
            self.outcomes[kind] += 1
            if kind == "error":
                await asyncio.sleep(0.1)

    async def _one_stream(self, stop: asyncio.Event) -> str:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, self.addr), 10)
                await asyncio.wait_for(loop.sock_sendall(sock, self.request), 10)
            except (OSError, asyncio.TimeoutError) as e:
                return self._error(f"send: {type(e).__name__}: {e}")
            # never read while the server writes: the hold outlasts its write timeout. A stop
            # (the load ended) does not cut the hold short: the stream must meet the timeout.
            await asyncio.sleep(self.hold)
            return await self._drain(loop, sock)
        finally:
            sock.close()

    async def _drain(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> str:
        data = bytearray()
        try:
            while True:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), self.read_timeout)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass  # the server aborted the connection: what a stuck stream gets
        except (OSError, asyncio.TimeoutError) as e:
            return self._error(f"read: {type(e).__name__}: {e}")
        if not data.startswith(b"HTTP/1.1 200"):
            return self._error(f"answer {bytes(data[:80])!r}")
        return "completed" if DONE in data else "closed_by_server"

    def _error(self, detail: str) -> str:
        if len(self.errors) < 5:
            self.errors.append(detail[:160])
        return "error"

    def figures(self) -> dict[str, object]:
        return {
            "slow_reader_streams": sum(self.outcomes.values()),
            "slow_reader_closed_by_server": self.outcomes["closed_by_server"],
            "slow_reader_completed": self.outcomes["completed"],
            "slow_reader_errors": self.outcomes["error"],
            "slow_reader_error_details": self.errors,
        }
