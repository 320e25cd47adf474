"""Events dropped by a full queue are followed by AllBlocksCleared (publisher.py
NOTE(lost-events)), on real ZMQ sockets (127.0.0.1).

vLLM 0.33's ZmqEventPublisher never loses an event it was given (``publish`` waits on its
queue), so its subscribers take a stream without sequence gaps as complete. A stream that
silently lost a BlockRemoved leaves them believing a block is cached that is not."""

from __future__ import annotations

import time

from kvpool.core.block import Device
from kvpool.events.recorder import KVEventRecorder
from tests.events.helpers import DEADLINE, Sub, plain, publisher

N = 50


def _state(sub: Sub) -> set[bytes]:
    """What a subscriber following vLLM's semantics holds after the whole stream (a replay
    from seq 0): stores add, removes drop, AllBlocksCleared empties."""
    held: set[bytes] = set()
    for msg in sub.replay([b"", (0).to_bytes(8, "big")])[:-1]:
        for ev in plain(msg[3])[1]:
            if ev["type"] == "AllBlocksCleared":
                held.clear()
            elif ev["type"] == "BlockStored":
                held.update(ev["block_hashes"])
            else:
                held.difference_update(ev["block_hashes"])
    return held


def _settle(pub, submitted: int) -> None:
    """Wait (bounded) until the publisher thread sent or dropped all that was submitted."""
    end = time.monotonic() + DEADLINE
    while pub.published + pub.dropped < submitted + pub.loss_marks:
        assert time.monotonic() < end, "the publisher thread never caught up"
        time.sleep(0.005)


def test_a_stream_that_lost_events_never_claims_a_block_that_is_gone():
    pub = publisher(max_queue_size=1)
    sub = Sub(pub)
    try:
        rec = KVEventRecorder(pub, 4)
        submitted = 1  # the AllBlocksCleared every publisher starts with
        for i in range(N):  # stored then at once removed: nothing is cached at the end
            _settle(pub, submitted)  # an empty queue: the store goes in, the remove most
            h = i.to_bytes(32, "big")  # likely finds it still there and is dropped
            rec.stored(Device.DEVICE, [h], None)
            rec.removed(Device.DEVICE, [h])
            submitted += 2
        assert pub.dropped > 0  # the queue of 1 could not keep up
        _settle(pub, submitted)
        held = _state(sub)
        assert held == set(), f"{len(held)} removed blocks still claimed after the stream"
        assert pub.loss_marks > 0
    finally:
        sub.close()
        pub.close()


def test_an_event_that_cannot_be_built_is_dropped_not_raised(caplog):
    """NOTE(never-raise) in recorder.py: the pools call the recorder on the step thread, so a
    salt function that raises must not stop the step: the event is dropped as a full queue
    drops one (counted, voided by an AllBlocksCleared after it), said once in the log."""
    def broken(salt: str) -> str:
        raise ValueError(f"cannot read {salt!r}")
    pub = publisher()
    sub = Sub(pub)
    try:
        rec = KVEventRecorder(pub, 4, public_salt=broken)
        for i in range(3):
            rec.stored(Device.DEVICE, [i.to_bytes(32, "big")], None, salt="s")  # no raise
        rec.stored(Device.DEVICE, [b"\x09" * 32], None)  # no salt: published
        assert pub.dropped == 3
        _settle(pub, 2)
        assert _state(sub) == {b"\x09" * 32}
        assert len([r for r in caplog.records if "could not be built" in r.message]) == 1
    finally:
        sub.close()
        pub.close()
