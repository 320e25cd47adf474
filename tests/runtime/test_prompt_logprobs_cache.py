"""A prompt-logprobs request and the prefix cache (NOTE(prompt-logprobs) in
kvpool/runtime/engine/prompt_logprobs.py, NOTE(skip-read) in kvpool/core/block_table.py): it
reads nothing (every prompt position gets its logprob even when the prompt is cached, also
after a recompute preemption), its lookup is not a prefix-cache query, and its blocks are
cached (and published) under the request's own salt, so the same prompt sent plainly next
hits them, as vLLM's ``skip_reading_prefix_cache`` does. The built-in tiny model, stepped."""

from __future__ import annotations

from kvpool.core import Device
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

BS = 16
PROMPT = [(i * 29 + 5) % 240 + 3 for i in range(64)]  # 4 full blocks; 3 may hit (cap n - 1)
TOL = 1e-4


def params(plp: bool) -> SamplingParams:
    return SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True,
                          prompt_logprobs=1 if plp else None)


class Stored:
    """The device pool's observer: the BlockStored calls (hashes, salt), in order."""

    def __init__(self) -> None:
        self.device: list[tuple[tuple[bytes, ...], str | None]] = []

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        if device is Device.DEVICE:
            self.device.append((tuple(hashes), salt))

    def removed(self, device, hashes) -> None:
        pass

    def cleared(self, device) -> None:
        pass


def drain(core: EngineCore, outs: dict, plps: dict) -> None:
    """Step until idle: each request's final output into ``outs``, its prompt logprobs (sent
    once, with the first output after the whole prompt has them) into ``plps``."""
    for _ in range(500):
        if not core.has_work():
            core.manager.check_invariants()
            return
        for o in core.step():
            if o.prompt_logprobs is not None:
                assert o.request_id not in plps, "prompt logprobs sent twice"
                plps[o.request_id] = o.prompt_logprobs
            if o.finished:
                outs[o.request_id] = o
    raise AssertionError("the engine never drained")


def send(core: EngineCore, rid: str, plp: bool, salt: str | None = None):
    """Run one request alone: its final output, prompt logprobs (None: none sent) and the
    manager's (query, hit) token deltas."""
    before = core.manager.stats()
    outs: dict = {}
    plps: dict = {}
    core.add_request(rid, list(PROMPT), params(plp), cache_salt=salt)
    drain(core, outs, plps)
    after = core.manager.stats()
    return outs[rid], plps.get(rid), (after.prefix_query_tokens - before.prefix_query_tokens,
                                      after.prefix_hit_tokens - before.prefix_hit_tokens)


def reference() -> list:
    """PROMPT's prompt logprobs on an engine without a prefix cache."""
    core = EngineCore(engine_config("small", enable_prefix_caching=False))
    try:
        _, plp, _ = send(core, "ref", True)
        return list(plp)
    finally:
        core.close()


def assert_full(got, want) -> None:
    assert got is not None and len(got) == len(PROMPT) and got[0] is None
    for p in range(1, len(PROMPT)):
        assert got[p].token_id == PROMPT[p] == want[p].token_id
        assert abs(got[p].logprob - want[p].logprob) < TOL, p


def test_its_blocks_are_cached_for_the_next_request_and_its_lookup_is_not_counted():
    core = EngineCore(engine_config("small"))
    try:
        out, _, (queried, hit) = send(core, "plp", True, "t")
        assert out.num_cached_tokens == 0 and (queried, hit) == (0, 0)  # no query (vLLM's)
        other, _, _ = send(core, "other-salt", False, "u")  # another tenant still shares nothing
        assert other.num_cached_tokens == 0
        plain, _, (queried, hit) = send(core, "plain", False, "t")
        assert plain.num_cached_tokens == 3 * BS  # the prompt-logprobs request's blocks
        assert (queried, hit) == (len(PROMPT), 3 * BS)
        assert core.manager.stats().device.num_cached == 2 * 4  # t's chain and u's, once each
    finally:
        core.close()


def test_it_reads_nothing_when_its_prompt_is_cached():
    want = reference()
    core = EngineCore(engine_config("small"))
    try:
        send(core, "plain", False)
        out, plp, (queried, hit) = send(core, "plp", True)
        assert out.num_cached_tokens == 0 and (queried, hit) == (0, 0)
        assert_full(plp, want)
        again, plp, _ = send(core, "plp-again", True)  # its own blocks, duplicates: unread too
        assert again.num_cached_tokens == 0
        assert_full(plp, want)
    finally:
        core.close()


def test_its_blocks_are_published_under_the_normal_hashes():
    heard = Stored()
    core = EngineCore(engine_config("small"), pool_observer=heard)
    try:
        send(core, "plp", True, "t")
        hashes = core.manager.hasher.hash_blocks(PROMPT, "t")
        stored = [h for hs, _ in heard.device for h in hs]
        assert stored == list(hashes)  # BlockStored for every full block, chain order
        assert heard.device[0][1] == "t"  # the chain's salt is the request's own
    finally:
        core.close()


def test_a_readmission_after_a_recompute_preemption_reads_nothing_either():
    """R (prompt logprobs, priority 5) is preempted after its first 16-token chunk by H
    (priority 0, the same prompt, plain; max_num_seqs=1), which caches 3 prompt blocks. R's
    re-admission must compute them again: their logprobs were never recorded."""
    want = reference()
    core = EngineCore(engine_config("small", scheduling_policy="priority", max_num_seqs=1,
                                    max_num_batched_tokens=BS))
    outs: dict = {}
    plps: dict = {}
    try:
        core.add_request("r", list(PROMPT), params(True), priority=5)
        assert not core.step()  # R's first chunk: positions 1..16 get their logprobs
        core.add_request("h", list(PROMPT), params(False), priority=0)
        drain(core, outs, plps)
        assert core.scheduler.stats().preemptions["recompute"] == 1
        assert outs["h"].num_cached_tokens == BS  # R's computed block, read by H
        assert not outs["r"].error and outs["r"].num_cached_tokens == 0
        assert "r" in plps, "R's prompt logprobs never completed: a chunk was read, not run"
        assert_full(plps["r"], want)
    finally:
        core.close()
