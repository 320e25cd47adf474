"""What the KV event tests share: a real SUB / DEALER on 127.0.0.1, vLLM's own event classes
loaded from a vLLM source tree when one is present, and a decoder written from the wire spec
alone (msgpack to plain values, no kvpool class involved)."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import time
import types
from pathlib import Path

import msgspec
import pytest
import zmq

from kvpool.events.config import KVEventsConfig
from kvpool.events.publisher import EventPublisher

VLLM_EVENTS = Path(os.environ.get("KVPOOL_VLLM_SRC", "/tmp/vllm_src")) / \
    "vllm/distributed/kv_events.py"
# a served replica's KV events: ZMQ on ephemeral loopback ports, topic r1 (its --kv-events-config)
SERVED_EVENTS = ('{"enable_kv_cache_events": true, "publisher": "zmq", '
                 '"endpoint": "tcp://127.0.0.1:0", "replay_endpoint": "tcp://127.0.0.1:0", '
                 '"topic": "r1"}')
DEADLINE = 10.0  # seconds a message may take on a shared 2-core box (liveness, not timing)


def publisher(**kw) -> EventPublisher:
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:0",
           "replay_endpoint": "tcp://127.0.0.1:0", "topic": "kv", **kw}
    return EventPublisher(KVEventsConfig(**cfg))


class Sub:
    """A SUB socket on a publisher, and a DEALER on its replay socket."""

    def __init__(self, pub: EventPublisher, topic: bytes = b"kv") -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(pub.endpoint)
        self.dealer = self.ctx.socket(zmq.DEALER)
        if pub.replay_endpoint:
            self.dealer.connect(pub.replay_endpoint)

    def recv(self, timeout: float = DEADLINE) -> list[bytes] | None:
        if self.sub.poll(int(timeout * 1000)):
            return self.sub.recv_multipart()
        return None

    def until(self, pred, timeout: float = DEADLINE) -> list[list[bytes]]:
        """Messages until ``pred(events so far)`` holds (bounded)."""
        got: list[list[bytes]] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            msg = self.recv(end - time.monotonic())
            if msg is None:
                break
            got.append(msg)
            if pred([e for m in got for e in plain(m[2])[1]]):
                return got
        raise AssertionError(f"condition not met in {timeout} s; got {len(got)} messages")

    def replay(self, frames: list[bytes], timeout: float = DEADLINE) -> list[list[bytes]]:
        """Send a replay request, collect the answers up to the end marker."""
        self.dealer.send_multipart(frames)
        out = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.dealer.poll(int(1000 * max(0.0, end - time.monotonic()))):
                break
            msg = self.dealer.recv_multipart()
            out.append(msg)
            if msg[2] == (-1).to_bytes(8, "big", signed=True):
                return out
        raise AssertionError(f"no end marker in {timeout} s ({len(out)} answers)")

    def close(self) -> None:
        self.sub.close(linger=0)
        self.dealer.close(linger=0)
        self.ctx.term()


def close_all(socks: list[zmq.Socket], ctx: zmq.Context, *owned) -> None:
    """A test's own sockets closed at once (linger 0), their context ended, then ``owned``
    (subscribers, publishers) closed in order."""
    for s in socks:
        s.close(linger=0)
    ctx.term()
    for o in owned:
        o.close()


def wait_subscribed(pub: EventPublisher, sub: Sub) -> None:
    """PUB drops messages until the SUB's subscription arrived: poke until one comes."""
    from kvpool.events.wire import AllBlocksCleared
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        pub.submit(AllBlocksCleared())
        if sub.recv(0.2) is not None:
            while sub.recv(0.2) is not None:
                pass  # drain the pokes
            return
    raise AssertionError("the subscription never reached the publisher")


def plain(payload: bytes):
    """The wire spec by hand: [ts, [ {"type": ..., ...}, ...], rank] as plain values."""
    batch = msgspec.msgpack.decode(payload)
    assert isinstance(batch, list) and len(batch) in (2, 3), batch
    ts, events = batch[0], batch[1]
    assert isinstance(ts, float) and isinstance(events, list)
    for e in events:
        assert isinstance(e, dict) and e["type"] in ("BlockStored", "BlockRemoved",
                                                     "AllBlocksCleared"), e
    return batch


class TokenIndex:
    """llm-d's indexer, its idea only: a block's key = H(parent's key, the block's tokens, its
    bare extra-key strings), the parent's key found from ``parent_block_hash`` through the
    engine-hash map; a request's block 0 extra is its cache_salt (llm-d-router's scorer)."""

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.by_engine: dict[bytes, bytes] = {}
        self.keys: set[bytes] = set()

    @staticmethod
    def key(parent: bytes, tokens: list[int], extra: list[str] | None) -> bytes:
        return hashlib.sha256(parent + msgspec.msgpack.encode([tokens, extra])).digest()

    def keys_of(self, e: dict) -> list[bytes]:
        """The keys of a BlockStored's blocks (it must carry their tokens)."""
        bs, parent, out = self.bs, self.by_engine.get(e["parent_block_hash"], b"root"), []
        extras = e.get("extra_keys") or [None] * len(e["block_hashes"])
        assert len(e["token_ids"]) == bs * len(e["block_hashes"]), e
        for i in range(len(e["block_hashes"])):
            extra = [k for k in (extras[i] or ()) if isinstance(k, str)] or None
            parent = self.key(parent, e["token_ids"][i * bs:(i + 1) * bs], extra)
            out.append(parent)
        return out

    def add(self, e: dict) -> list[bytes]:
        keys = self.keys_of(e)
        self.keys.update(keys)
        self.by_engine.update(zip(e["block_hashes"], keys))
        return keys

    def hits(self, prompt: list[int], salt: str | None) -> int:
        parent, n, bs = b"root", 0, self.bs
        for i in range(len(prompt) // bs):
            parent = self.key(parent, prompt[i * bs:(i + 1) * bs], [salt] if salt and not i
                              else None)
            if parent not in self.keys:
                break
            n += 1
        return n


def replayed(info: dict, topic: bytes) -> list[bytes]:
    """Every batch payload a replica's replay socket gives from sequence 0, ``info`` being its
    GET /v1/kvpool/kv_events answer (the endpoints)."""
    sub = Sub(types.SimpleNamespace(endpoint=info["endpoint"],
                                    replay_endpoint=info["replay_endpoint"]), topic=topic)
    try:
        frames = sub.replay([b"", (0).to_bytes(8, "big")])
    finally:
        sub.close()
    return [f[3] for f in frames if len(f) == 4 and f[3]]


def stored_events(payloads: list[bytes]) -> list[dict]:
    """Every BlockStored in ``payloads`` (batches), in order, as plain maps."""
    return [e for p in payloads for e in plain(p)[1] if e["type"] == "BlockStored"]


def _stub(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


@pytest.fixture
def vllm_events(monkeypatch):
    """vLLM's own kv_events module (its imports of the rest of vLLM stubbed out)."""
    if not VLLM_EVENTS.is_file():
        pytest.skip(f"no vLLM sources at {VLLM_EVENTS} (set KVPOOL_VLLM_SRC to a vLLM "
                    "checkout to decode with vLLM's own classes)")
    stubs = {
        "vllm": _stub("vllm"), "vllm.config": _stub("vllm.config"),
        "vllm.config.kv_events": _stub("vllm.config.kv_events", KVEventsConfig=object),
        "vllm.logger": _stub("vllm.logger", init_logger=logging.getLogger),
        "vllm.utils": _stub("vllm.utils"),
        "vllm.utils.network_utils": _stub("vllm.utils.network_utils", get_ip=None,
                                          get_tcp_uri=None, is_valid_ipv6_address=None,
                                          split_zmq_path=None),
        "vllm.v1": _stub("vllm.v1"), "vllm.v1.core": _stub("vllm.v1.core"),
        "vllm.v1.core.kv_cache_utils": _stub("vllm.v1.core.kv_cache_utils",
                                             ExternalBlockHash=bytes | int),
    }
    for name, mod in stubs.items():
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("vllm_kv_events_under_test", VLLM_EVENTS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def publish_each(pub: EventPublisher, events) -> None:
    """Each of ``events`` published as a batch of its own: the next is submitted once the
    publisher has sent the last (within DEADLINE)."""
    end = time.monotonic() + DEADLINE
    for event in events:
        want = pub.next_seq + 1
        pub.submit(event)
        while pub.next_seq < want:
            assert time.monotonic() < end, f"only {pub.next_seq} batches published"
            time.sleep(0.0005)


def stored(n: int, tokens: int):
    """``n`` BlockStored events of ``tokens`` token ids each (ids above 2**16: 5 bytes each in
    msgpack), one hash each."""
    from kvpool.events.wire import BlockStored
    return (BlockStored([i.to_bytes(32, "big")], None, list(range(2**17, 2**17 + tokens)), 16,
                        None, "GPU", None) for i in range(n))
