"""What the HTTP clients send: a seeded mix of requests.

Kinds, drawn per request (rates from the CLI)::

    hostile   a case from the hostile table (expects its 4xx)
    greedy    one of P fixed probes (temperature 0): its output must equal the reference run
              of the same probe, sent alone before the load; completions and chat, n = 1 or 2
    sampled   temperature 0.8 / top_p 0.95, seeded or not, n = 1 or 2, ignore_eos sometimes

Prompts mix lengths (short, medium, long) and share a few long "system" prefixes, so prefix
hits, copy-on-write (n = 2) and preemption all happen; every request carries one of the tenants'
``cache_salt`` (or none). Independently a request may stream, disconnect early or mid-stream, or
read its stream slowly.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from stress.http.hostile import COMPLETIONS, HostileCase, hostile_cases

__all__ = ["RequestSpec", "Workload", "WorkloadConfig"]

CHAT = "/v1/chat/completions"
WORDS = ("block", "cache", "paged", "token", "query", "value", "key", "swap", "tenant",
         "prefix", "kernel", "stream", "batch", "sched", "evict", "copy", "host", "device")


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    seed: int = 0
    tenants: int = 4  # cache_salt values in use; tenant 0 sends no salt
    hostile_rate: float = 0.05
    greedy_rate: float = 0.3
    stream_rate: float = 0.5
    disconnect_rate: float = 0.05
    slow_rate: float = 0.02
    num_probes: int = 12
    max_prompt_chars: int = 420  # keep prompt + max_tokens under the server's context
    max_body_bytes: int = 1 << 20  # the server's limit (the hostile 413 case exceeds it)


@dataclass(slots=True)
class RequestSpec:
    kind: str  # "greedy" | "sampled" | "hostile"
    path: str
    body: dict[str, Any] | None = None  # JSON body (None for hostile: raw)
    raw: bytes | None = None
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False
    disconnect: str | None = None  # None | "early" | "mid_stream"
    disconnect_after: float = 0.0  # seconds (early) / chunks (mid_stream)
    slow: bool = False  # read the stream slowly
    probe: int | None = None  # greedy probe index
    tenant: str | None = None
    hostile: HostileCase | None = None

    def data(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps(self.body).encode()


class Workload:
    """Seeded generator of RequestSpecs; ``probes`` are the greedy reference requests."""

    def __init__(self, config: WorkloadConfig) -> None:
        self.cfg = config
        rng = random.Random(config.seed)
        self.rng = rng
        self.tenants: list[str | None] = [None] + [f"tenant-{i}" for i in
                                                   range(1, max(1, config.tenants))]
        self.prefixes = [self._text(rng, rng.randint(120, 260)) for _ in range(3)]
        self.hostile = hostile_cases(config.max_body_bytes)
        self._hostile_weights = [c.weight for c in self.hostile]
        self.probes = [self._make_probe(i, rng) for i in range(config.num_probes)]

    # ---------------------------------------------------------------- text
    @staticmethod
    def _text(rng: random.Random, chars: int) -> str:
        out: list[str] = []
        n = 0
        while n < chars:
            w = rng.choice(WORDS)
            out.append(w)
            n += len(w) + 1
        return " ".join(out)[:chars]

    def _prompt(self, rng: random.Random) -> str:
        r = rng.random()
        size = (rng.randint(4, 40) if r < 0.4 else rng.randint(60, 180) if r < 0.8
                else rng.randint(200, self.cfg.max_prompt_chars))
        if rng.random() < 0.6:  # a shared prefix: prefix hits (per tenant)
            pre = rng.choice(self.prefixes)
            tail = self._text(rng, max(1, size - len(pre)))
            return (pre + " " + tail)[: self.cfg.max_prompt_chars]
        return self._text(rng, size)

    # ---------------------------------------------------------------- probes
    def _make_probe(self, i: int, rng: random.Random) -> dict[str, Any]:
        """A fixed greedy request (body without stream fields)."""
        prompt = self._prompt(rng)
        n = 2 if i % 4 == 3 else 1
        max_tokens = rng.randint(8, 32)
        if i % 3 == 2:
            return {"path": CHAT, "body": {
                "messages": [{"role": "system", "content": prompt[: len(prompt) // 2]},
                             {"role": "user", "content": prompt[len(prompt) // 2:] or "hi"}],
                "max_tokens": max_tokens, "temperature": 0, "n": n}}
        return {"path": COMPLETIONS, "body": {"prompt": prompt, "max_tokens": max_tokens,
                                              "temperature": 0, "n": n, "ignore_eos": True}}

    def probe_spec(self, i: int, *, stream: bool = False, tenant: str | None = None) -> RequestSpec:
        p = self.probes[i]
        body = dict(p["body"])
        if tenant is not None:
            body["cache_salt"] = tenant
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return RequestSpec("greedy", p["path"], body, stream=stream, probe=i, tenant=tenant)

    # ---------------------------------------------------------------- the mix
    def next(self, rng: random.Random, *, allow_hostile: bool = True,
             allow_disconnect: bool = True) -> RequestSpec:
        cfg = self.cfg
        if allow_hostile and rng.random() < cfg.hostile_rate:
            case = rng.choices(self.hostile, self._hostile_weights)[0]
            return RequestSpec("hostile", case.path, raw=case.body(), method=case.method,
                               headers=dict(case.headers), hostile=case)
        stream = rng.random() < cfg.stream_rate
        tenant = rng.choice(self.tenants)
        if rng.random() < cfg.greedy_rate:
            spec = self.probe_spec(rng.randrange(len(self.probes)), stream=stream, tenant=tenant)
        else:
            spec = self._sampled(rng, stream, tenant)
        if allow_disconnect and rng.random() < cfg.disconnect_rate:
            if stream and rng.random() < 0.6:
                spec.disconnect, spec.disconnect_after = "mid_stream", rng.randint(1, 4)
            else:
                spec.disconnect, spec.disconnect_after = "early", rng.uniform(0.0, 0.2)
        elif stream and rng.random() < cfg.slow_rate:
            spec.slow = True
        return spec

    def _sampled(self, rng: random.Random, stream: bool, tenant: str | None) -> RequestSpec:
        body: dict[str, Any] = {"max_tokens": rng.randint(4, 48), "temperature": 0.8,
                                "top_p": 0.95, "n": rng.choice((1, 1, 1, 2))}
        if rng.random() < 0.5:
            body["seed"] = rng.randrange(2**31)
        if rng.random() < 0.5:
            body["ignore_eos"] = True
        if tenant is not None:
            body["cache_salt"] = tenant
        if rng.random() < 0.25:
            path = CHAT
            body["messages"] = [{"role": "user", "content": self._prompt(rng)}]
        else:
            path = COMPLETIONS
            body["prompt"] = self._prompt(rng)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return RequestSpec("sampled", path, body, stream=stream, tenant=tenant)
