"""vLLM's 0 values and ipc:// / inproc:// endpoints in ``--kv-events-config`` (kvpool/events/
config.py NOTE(zero-limits)): taken with vLLM's meaning, or refused at start with the fix.
A real publisher on ipc:// under a temporary directory, a real pyzmq SUB and DEALER on it."""

from __future__ import annotations

import json

import pytest

from kvpool.events.wire import AllBlocksCleared
from kvpool.server import serve
from tests.events.helpers import Sub, plain, publisher, wait_subscribed

END = (-1).to_bytes(8, "big", signed=True)


@pytest.mark.parametrize("key, value, named", [
    ("hwm", 0, "no limit"), ("max_queue_size", 0, "unbounded queue"),
    ("endpoint", "inproc://kv", "ipc:///PATH"), ("replay_endpoint", "inproc://r", "ipc:///PATH"),
])
def test_what_kvpool_keeps_bounded_or_cannot_serve_exits_2_with_the_fix(key, value, named,
                                                                          capsys):
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", key: value}
    assert serve.main(["--kv-events-config", json.dumps(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"--kv-events-config: {key}=" in err and named in err, err
    if value == 0:  # vLLM's meaning and a value to give instead
        assert "vLLM reads 0 as" in err and "e.g. 100000" in err, err


def test_an_ipc_endpoint_is_bound_and_followed_by_a_real_subscriber(tmp_path):
    pub = publisher(endpoint=f"ipc://{tmp_path}/pub", replay_endpoint=f"ipc://{tmp_path}/rep")
    sub = Sub(pub)
    try:
        assert pub.mode == "bind" and pub.endpoint == f"ipc://{tmp_path}/pub"
        assert (tmp_path / "pub").exists() and (tmp_path / "rep").exists()
        wait_subscribed(pub, sub)
        pub.submit(AllBlocksCleared())
        msg = sub.recv()
        assert msg is not None and msg[0] == b"kv"
        assert plain(msg[2])[1] == [{"type": "AllBlocksCleared"}]
        got = sub.replay([b"", (0).to_bytes(8, "big")])
        assert got[-1][2] == END and got[0][2] == (0).to_bytes(8, "big")  # from seq 0 on
    finally:
        sub.close()
        pub.close()


def test_buffer_steps_0_keeps_nothing_for_replay_as_vllm(tmp_path):
    pub = publisher(buffer_steps=0, endpoint=f"ipc://{tmp_path}/pub",
                    replay_endpoint=f"ipc://{tmp_path}/rep")
    sub = Sub(pub)
    try:
        wait_subscribed(pub, sub)  # one batch at least went out live (one when the first
        assert pub.next_seq >= 1  # poke already met the subscription: the CI's first run)
        assert sub.replay([b"", (0).to_bytes(8, "big")]) == [[b"", b"", END, b""]]
    finally:
        sub.close()
        pub.close()
