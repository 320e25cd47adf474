"""The step thread's half of the read path: a fetched prefix enters the device prefix cache.

A request that arrives with a :class:`~kvpool.runtime.remote.reader.FetchedPrefix` waits here,
in its own state, while the copy engine copies its host blocks to lent device blocks (the
engine step keeps running other requests). Once the copy is done the device blocks are
registered under their chain hashes (``manager.lender.adopt_prefix``: hashes are confirmed
only after the copy, the swap-in rule) and the request is added: the scheduler's own prefix
lookup then finds them like any cached prefix. On a failed copy, or a device pool too full to
lend, the blocks go back and the request is added anyway: it recomputes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kvpool.core import BlockSpaceManager
from kvpool.core.block import Device
from kvpool.runtime.ema import ema
from kvpool.runtime.kv.copy_engine import CopyEngine, CopyHandle
from kvpool.runtime.ops import AddRequest


@dataclass(slots=True)
class _Importing:
    op: AddRequest
    device_blocks: list[int]
    handle: CopyHandle


class RemoteImports:
    """Requests whose fetched prefix is being copied in. Step thread only."""

    def __init__(self, manager: BlockSpaceManager, copies: CopyEngine,
                 wake: Callable[[], None]) -> None:
        self.manager = manager
        self.copies = copies
        self._wake = wake  # the step loop's wake-up, called from the copy worker
        self.pending: list[_Importing] = []  # the step loop calls ready() only when not empty
        self.adopted_blocks = 0  # blocks that became findable in the device cache
        self.failed = 0  # imports that fell back to recompute
        # seconds from the bytes landing in host blocks (on the loop's side) to ready() of an
        # adopted import: the hand-over to the step thread, the copy in and the wake-up. EMA,
        # 0.0 until measured; read lock-free by the reader's cost model (one float store)
        self.latency_s = 0.0

    def __len__(self) -> int:
        return len(self.pending)

    def start(self, op: AddRequest) -> AddRequest | None:
        """Begin copying ``op``'s fetched prefix in; returns ``op`` when it can be added at once
        (nothing to copy, or no device blocks to lend: recompute)."""
        fp = op.remote
        mgr = self.manager
        dev = mgr.lender.lend(Device.DEVICE, len(fp.host_blocks)) if fp.host_blocks else None
        if dev is None:
            if fp.host_blocks:
                mgr.lender.give_back(Device.HOST, fp.host_blocks)
                self.failed += 1
            return op
        h = self.copies.submit("swap_in", zip(fp.host_blocks, dev), tag=op.request_id)
        h.add_done_callback(lambda _h: self._wake())
        self.pending.append(_Importing(op, dev, h))
        return None

    def ready(self) -> list[AddRequest]:
        """Requests whose copy finished (prefix adopted, or given up): add them now."""
        if not self.pending:
            return []
        done, keep = [], []
        for imp in self.pending:
            (done if imp.handle.done() else keep).append(imp)
        self.pending = keep
        mgr = self.manager
        out = []
        for imp in done:
            fp = imp.op.remote
            if imp.handle.exception() is None:
                bs, lo = mgr.block_size, fp.first  # the blocks' ids for the KV events
                toks = imp.op.prompt_ids[lo * bs:(lo + len(fp.hashes)) * bs]
                self.adopted_blocks += mgr.lender.adopt_prefix(imp.device_blocks, fp.hashes,
                                                               lo, toks, fp.parent,
                                                               imp.op.cache_salt)
                dt = time.perf_counter() - fp.landed_at
                self.latency_s = ema(self.latency_s, dt)
            else:
                self.failed += 1
                mgr.lender.give_back(Device.DEVICE, imp.device_blocks)
            mgr.lender.give_back(Device.HOST, fp.host_blocks)
            out.append(imp.op)
        return out

    def cancel_all(self) -> list[AddRequest]:
        """Shutdown: wait for the copies and release every block."""
        for imp in self.pending:
            imp.handle.wait_done(10)
        return self.ready()
