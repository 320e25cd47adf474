"""Big-prompt clients for the HTTP stress mode (issue 12 item 3): each one sends, in turn, a
~4 MB prompt string, a 2M-token-id prompt and a ~4 MB chat message, again and again, for the
whole load phase. Every one is far past any ``max_model_len``: the only right answer is 400 with
OpenAI error JSON whose code is ``context_length_exceeded``; anything else (another status or
code, a timeout, a reset) is a failure. What this load must not do to the others -- stall
/health or the streams -- is measured by :mod:`stress.http.health_probe` and the normal clients.

The three bodies are built once (each a few MB) and shared by every client; they are sized to
stay under the server's body limit, so they reach the parser rather than the 413 check.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import aiohttp

__all__ = ["BigPromptClients", "big_prompt_bodies"]

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
EXPECTED_CODE = "context_length_exceeded"


def big_prompt_bodies(max_body_bytes: int) -> list[tuple[str, str, bytes]]:
    """(name, path, body) for the three kinds, each at most ~95% of ``max_body_bytes`` (and
    at most 4 MB of prompt / 2M ids, the sizes the issue reports)."""
    room = int(max_body_bytes * 0.95) - 64  # the JSON around the prompt
    chars = min(4_000_000, room)
    ids = min(2_000_000, room // 2)  # "0," per id
    text = ("hello world, " * (chars // 13 + 1))[:chars]
    chat = ("hi " * (chars // 3 + 1))[:chars]
    return [
        ("prompt_4mb_string", COMPLETIONS,
         json.dumps({"prompt": text, "max_tokens": 1}).encode()),
        ("prompt_2m_token_ids", COMPLETIONS,
         b'{"max_tokens": 1, "prompt": [' + b"0," * (ids - 1) + b"0]}"),
        ("chat_4mb_message", CHAT,
         json.dumps({"messages": [{"role": "user", "content": chat}], "max_tokens": 1}).encode()),
    ]


class BigPromptClients:
    """``await run(stop, deadline)``: ``n`` clients sending the big bodies until either."""

    def __init__(self, url: str, n: int, max_body_bytes: int, *, api_key: str | None = None,
                 timeout: float = 60.0) -> None:
        self.url = url
        self.n = n
        self.bodies = big_prompt_bodies(max_body_bytes)
        self.api_key = api_key
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.sent = Counter()  # kind -> requests sent
        self.ok = 0
        self.bad: list[str] = []  # one detail per failure
        self.latencies: list[float] = []

    async def run(self, stop: asyncio.Event, deadline: float) -> None:
        if self.n < 1:
            return
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        # their own connections: a 4 MB upload must not wait for the normal clients' pool
        conn = aiohttp.TCPConnector(limit=self.n)
        async with aiohttp.ClientSession(connector=conn, headers=headers) as session:
            await asyncio.gather(*(self._client(session, i, stop, deadline)
                                   for i in range(self.n)))

    async def _client(self, session: aiohttp.ClientSession, i: int, stop: asyncio.Event,
                      deadline: float) -> None:
        k = i  # each client starts at a different kind: all three are in flight together
        while not stop.is_set() and time.monotonic() < deadline:
            name, path, body = self.bodies[k % len(self.bodies)]
            k += 1
            self.sent[name] += 1
            t0 = time.monotonic()
            detail = await self._one(session, path, body)
            self.latencies.append(time.monotonic() - t0)
            if detail is None:
                self.ok += 1
            else:
                self.bad.append(f"{name}: {detail}")
                await asyncio.sleep(0.05)  # a refused connection must not spin

    async def _one(self, session: aiohttp.ClientSession, path: str, body: bytes) -> str | None:
        """None when answered as it must be, else what went wrong."""
        try:
            async with session.post(self.url + path, data=body, timeout=self.timeout) as r:
                raw = await r.read()
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return f"{type(e).__name__}: {e}"[:160]
        try:
            err = json.loads(raw)["error"]
            code = err.get("code")
            message_ok = bool(err.get("message"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return f"status {status}, not error JSON: {raw[:120]!r}"
        if status != 400 or code != EXPECTED_CODE or not message_ok:
            return f"status {status} code {code!r}: {str(err.get('message'))[:100]}"
        return None

    def figures(self) -> dict[str, object]:
        from stress.report import percentile

        lat = sorted(self.latencies)
        p50 = percentile(lat, 50)
        return {
            "big_prompt_sent": dict(sorted(self.sent.items())),
            "big_prompt_refused_ok": self.ok,
            "big_prompt_failures": len(self.bad),
            "big_prompt_failure_details": sorted(set(self.bad))[:6],
            "big_prompt_latency_p50_s": None if p50 is None else round(p50, 4),
        }
