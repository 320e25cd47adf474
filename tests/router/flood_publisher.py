"""A replica that floods its KV event stream, run as its own process by
tests/router/test_kv_feed_queue.py: prints its port, waits for one subscription, sends
``BATCHES`` batches of ``BATCH_BYTES`` until a send stalls, prints how many went, then waits to
be killed. Its own process because libzmq's context termination can hang for good on an XPUB
(XPUB_NODROP) that still holds unsent batches: the test stops it by pid instead."""

from __future__ import annotations

import sys
import time

import zmq

BATCHES = 300  # of BATCH_BYTES each: what a flooding replica offers (75 MiB)
BATCH_BYTES = 256 << 10
STALLED = 0.3  # seconds a send may wait before the subscriber counts as taking no more


def _sent(pub: zmq.Socket, msg: list[bytes]) -> bool:
    """``msg`` sent within STALLED seconds (False: the subscriber took no more)."""
    end = time.monotonic() + STALLED
    while True:
        try:
            pub.send_multipart(msg, zmq.NOBLOCK)
            return True
        except zmq.Again:
            if time.monotonic() > end:
                return False
            time.sleep(0.01)


def main(topic: bytes) -> None:
    pub = zmq.Context().socket(zmq.XPUB)  # NODROP: a send fails while the subscriber takes no more
    pub.setsockopt(zmq.XPUB_NODROP, 1)
    pub.setsockopt(zmq.SNDHWM, 1)
    print(pub.bind_to_random_port("tcp://127.0.0.1"), flush=True)
    if not (pub.poll(10_000) and pub.recv() == b"\x01" + topic):
        sys.exit("no subscription came")
    msg, sent = [topic, b"s" * 8, b"x" * BATCH_BYTES], 0
    while sent < BATCHES and _sent(pub, msg):
        sent += 1
    print(sent, flush=True)
    time.sleep(60)  # the test kills it by pid before


if __name__ == "__main__":
    main(sys.argv[1].encode())
