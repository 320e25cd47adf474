"""One HTTP request of the stress mix, executed and classified.

``RequestRunner.execute(spec)`` returns an :class:`Outcome`. Categories::

    ok             2xx and a complete body / stream ([DONE] seen, no error event)
    disconnected   the client left on purpose (early, or mid-stream); not a failure
    busy           503 queue_full / shutting_down with Retry-After (overload), or 429 (quota)
    hostile_ok     a hostile case answered as its table row says (4xx with error JSON)
    hostile_bad    a hostile case answered otherwise
    fault          500 / SSE error whose message names an injected fault (fault mode only)
    failed         anything else: unexpected status, a 5xx, a broken stream, a timeout

Streams are parsed as server-sent events: ``data: {json}`` lines, ``data: [DONE]`` last; text is
accumulated per choice index (completions ``text``, chat ``delta.content``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from stress.http.workload import RequestSpec

__all__ = ["Outcome", "RequestRunner"]

BUSY_CODES = ("queue_full", "shutting_down", "tenant_quota_exceeded")  # documented back-off
FAULT_MARKERS = ("injected", "KV copy failed", "engine step failed")


@dataclass(slots=True)
class Outcome:
    spec: RequestSpec
    category: str = "failed"
    status: int | None = None
    latency: float = 0.0  # seconds, send to last byte
    ttft: float | None = None  # streams: seconds to the first text
    texts: list[str] = field(default_factory=list)  # per choice
    finish: list[str | None] = field(default_factory=list)
    completion_tokens: int = 0
    cached_tokens: int = 0
    error_code: str | None = None
    detail: str = ""
    done_at: float = 0.0


class RequestRunner:
    """Executes specs against ``base_url`` with one shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *,
                 api_key: str | None = None, timeout: float = 120.0,
                 fault_mode: bool = False) -> None:
        self.session = session
        self.base = base_url
        self.api_key = api_key
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.fault_mode = fault_mode

    def _headers(self, spec: RequestSpec) -> dict[str, str]:
        h = {"Content-Type": "application/json", **spec.headers}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    async def execute(self, spec: RequestSpec) -> Outcome:
        out = Outcome(spec)
        t0 = time.monotonic()
        try:
            if spec.disconnect == "early":
                try:
                    await asyncio.wait_for(self._send(spec, out, t0), spec.disconnect_after)
                except asyncio.TimeoutError:
                    out.category = "disconnected"
            else:
                await self._send(spec, out, t0)
        except asyncio.TimeoutError:
            out.category, out.detail = "failed", "client timeout"
        except aiohttp.ClientError as e:
            out.category, out.detail = "failed", f"{type(e).__name__}: {e}"[:200]
        out.latency = time.monotonic() - t0
        out.done_at = time.monotonic()
        return out

    async def _send(self, spec: RequestSpec, out: Outcome, t0: float) -> None:
        url = self.base + spec.path
        async with self.session.request(spec.method, url, data=spec.data(),
                                        headers=self._headers(spec),
                                        timeout=self.timeout) as resp:
            out.status = resp.status
            if spec.hostile is not None:
                await self._hostile(spec, resp, out)
            elif resp.status != 200:
                await self._error(resp, out)
            elif spec.stream:
                await self._stream(spec, resp, out, t0)
            else:
                self._body(await resp.json(content_type=None), out)

    async def _hostile(self, spec: RequestSpec, resp: aiohttp.ClientResponse,
                       out: Outcome) -> None:
        case = spec.hostile
        assert case is not None
        raw = await resp.read()
        ok = resp.status in case.expect
        if ok and resp.status >= 400:
            try:
                err = json.loads(raw)["error"]
                ok = isinstance(err, dict) and bool(err.get("message"))
                out.error_code = err.get("code")
            except (ValueError, KeyError, TypeError):
                ok = False
        elif ok and spec.stream:
            ok = raw.rstrip().endswith(b"data: [DONE]")
        out.category = "hostile_ok" if ok else "hostile_bad"
        if not ok:
            out.detail = f"{case.name}: status {resp.status}, body {raw[:160]!r}"

    async def _error(self, resp: aiohttp.ClientResponse, out: Outcome) -> None:
        raw = await resp.read()
        try:
            err = json.loads(raw)["error"]
            out.error_code = err.get("code")
            message = str(err.get("message", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            message = raw[:160].decode("utf-8", "replace")
        out.detail = f"status {resp.status}: {message}"[:240]
        if resp.status in (429, 503) and out.error_code in BUSY_CODES:
            out.category = "busy"
        elif self.fault_mode and resp.status >= 500 and any(m in message
                                                            for m in FAULT_MARKERS):
            out.category = "fault"
        else:
            out.category = "failed"

    def _body(self, body: dict[str, Any], out: Outcome) -> None:
        choices = sorted(body.get("choices", []), key=lambda c: c["index"])
        for c in choices:
            text = c["message"]["content"] if "message" in c else c["text"]
            out.texts.append(text or "")
            out.finish.append(c.get("finish_reason"))
        _put_usage(body.get("usage") or {}, out)
        out.category = "ok"

    async def _stream(self, spec: RequestSpec, resp: aiohttp.ClientResponse, out: Outcome,
                      t0: float) -> None:
        texts: dict[int, list[str]] = {}
        finish: dict[int, str | None] = {}
        events = 0
        done = False
        async for line in resp.content:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                break
            obj = json.loads(payload)
            events += 1
            if "error" in obj:
                self._stream_error(obj["error"], out)
                return
            _take_event(obj, out, texts, finish, t0)
            if spec.disconnect == "mid_stream" and events >= spec.disconnect_after:
                resp.close()  # drop the connection: the server must abort and free
                out.category = "disconnected"
                return
            if spec.slow:
                await asyncio.sleep(0.05)
        if not done:
            out.category, out.detail = "failed", "stream ended without [DONE]"
            return
        for i in sorted(texts):
            out.texts.append("".join(texts[i]))
            out.finish.append(finish.get(i))
        out.category = "ok"

    def _stream_error(self, error: dict[str, Any], out: Outcome) -> None:
        """An error event mid-stream: an injected fault (fault mode only) or a failure."""
        message = str(error.get("message", ""))
        out.error_code = error.get("code")
        out.detail = f"stream error: {message}"[:240]
        faulty = self.fault_mode and any(m in message for m in FAULT_MARKERS)
        out.category = "fault" if faulty else "failed"


def _take_event(obj: dict[str, Any], out: Outcome, texts: dict[int, list[str]],
                finish: dict[int, str | None], t0: float) -> None:
    """One stream event: its text pieces and finish reasons per choice index (the first piece
    sets the TTFT), and its usage when it carries one."""
    for c in obj.get("choices", []):
        piece = c.get("text") if "text" in c else (c.get("delta") or {}).get("content")
        if piece:
            if out.ttft is None:
                out.ttft = time.monotonic() - t0
            texts.setdefault(c["index"], []).append(piece)
        else:
            texts.setdefault(c["index"], [])
        if c.get("finish_reason") is not None:
            finish[c["index"]] = c["finish_reason"]
    if obj.get("usage"):
        _put_usage(obj["usage"], out)


def _put_usage(usage: dict[str, Any], out: Outcome) -> None:
    out.completion_tokens = int(usage.get("completion_tokens", 0))
    out.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
