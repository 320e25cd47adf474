"""An EngineCore the test steps itself, and what the uncomputed-KV tests share
(tests/runtime/test_uncomputed_kv_engine.py, tests/remote/test_uncomputed_kv_remote.py).

Block size 16 and prompt ``P`` of 29 tokens: its outputs o1, o2 sit at positions 29 and 30,
and o3, appended when the fourth step is scheduled, fills block 1 (positions 16..31) with its
KV written only by that step."""

from __future__ import annotations

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config

BS = 16
P = [(i * 37 + 11) % 250 + 3 for i in range(29)]  # 29 tokens: o3 fills block 1
H = [(i * 53 + 7) % 250 + 3 for i in range(30)]  # 30 tokens: needs block 2 at its o3
SUFFIX = [41, 42, 43, 44, 45]


TOL = 1e-3  # batch composition changes float32 sums in the last bits only (differential.py)


def config(**overrides):
    """The small pool, a 64-token context, a step budget for two prompts at once."""
    return engine_config("small", max_model_len=64, max_num_batched_tokens=256, **overrides)


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, logprobs=0)


def same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    """The same tokens with the same logprobs (a stale or missing KV entry moves them)."""
    return len(got) == len(want) and all(
        a == b and abs(x - y) <= TOL for (a, x), (b, y) in zip(got, want))


class FailArmed(FaultPlan):
    """The armed request's part of the next step raises (EngineCore._forward_entries)."""

    def __init__(self) -> None:
        self.armed: set[str] = set()

    def on_step(self, request_id: str) -> None:
        if request_id in self.armed:
            self.armed.discard(request_id)
            raise RuntimeError("injected: this request's forward failed")


class Run:
    """An EngineCore the test steps itself, collecting each request's tokens and final
    update."""

    def __init__(self, faults: FaultPlan | None = None, heard=None, *,
                 core: EngineCore | None = None, **overrides) -> None:
        """``heard``: the pools' observer, told the step number (``heard.step``); ``core``:
        an engine built elsewhere (else one of the small config with ``overrides``)."""
        self.heard = heard
        if core is None:
            cfg = config(**overrides)
            core = EngineCore(cfg, faults=faults, pool_observer=heard)
        self.core = core
        self.tokens: dict[str, list[int]] = {}
        self.logprobs: dict[str, list[tuple[int, float]]] = {}
        self.final: dict = {}

    def add(self, rid: str, prompt: list[int], n: int) -> None:
        self.core.add_request(rid, list(prompt), greedy(n))
        self.tokens[rid], self.logprobs[rid] = [], []

    def step(self) -> None:
        if self.heard is not None:
            self.heard.step += 1
        for o in self.core.step():
            for c in o.outputs:
                self.tokens[o.request_id] += c.token_ids
                self.logprobs[o.request_id] += [(t.token_id, t.logprob) for t in c.logprobs]
            if o.finished:
                self.final[o.request_id] = o

    def until(self, done, limit: int = 200) -> None:
        for _ in range(limit):
            if done():
                return
            self.step()
        raise AssertionError("the engine never got there")

    def drain(self, empty: bool = True) -> None:
        """Step until nothing is left; ``empty``: no block is held any more (a remote store
        still copying holds lent host blocks)."""
        self.until(lambda: not self.core.has_work())
        self.core.manager.check_invariants()
        if empty:
            self.empty()

    def empty(self) -> None:
        st = self.core.manager.stats()
        assert st.device.num_used == 0 and st.host.num_used == 0, "leaked blocks"

    def fail_a_as_b_joins(self, plan: "FailArmed") -> list[int]:
        """A (P, 8 tokens) decodes o1..o3, o3 filling block 1; B (P + o1..o3 + SUFFIX) is
        added and A's forward fails in the step that admits B, so block 1's last slot is
        never written. B's prompt."""
        self.add("a", P, 8)
        self.until(lambda: len(self.tokens["a"]) == 3)
        b = P + self.tokens["a"][:3] + SUFFIX
        self.add("b", b, 6)
        plan.armed.add("a")
        self.step()
        assert self.final["a"].error, "A's step did not fail"
        return b

    def close(self) -> None:
        self.core.close()


def fresh(requests: dict[str, tuple[list[int], int]]) -> dict[str, list[tuple[int, float]]]:
    """Each request alone on an engine without a prefix cache: the reference."""
    ref = Run(enable_prefix_caching=False)
    try:
        for rid, (prompt, n) in requests.items():
            ref.add(rid, prompt, n)
            ref.drain()
        return ref.logprobs
    finally:
        ref.close()


