"""What the CopyEngine refuses before any copy runs: pools it cannot copy between (at
construction) and pairs that are not ``(src, dst)`` block ids of its pools, each destination
once (at submit)."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Iterable

import torch

from kvpool.errors import InvalidBlockError
from kvpool.runtime.kv.copy_backends import COPY_KINDS, check_destinations

__all__ = ["block_ids", "check_pools", "checked_pairs", "pair_list"]


def check_pools(device_kv: torch.Tensor, host_kv: torch.Tensor | None) -> None:
    """The host pool's blocks match the device pool's, and a copy can move bytes between them.
    NOTE(pool-device): a pool on the meta device has no storage: a swap-out into it
    "succeeded" and kept nothing, so the sequence's KV was lost. Two pools on different kinds
    of accelerator (neither on the CPU) are refused too: torch copies between those only
    through the host."""
    for name, kv in (("device", device_kv), ("host", host_kv)):
        if kv is not None:
            _check_writable(name, kv)
    if host_kv is None:
        return
    if tuple(host_kv.shape[1:]) != tuple(device_kv.shape[1:]):
        raise ValueError(f"host pool block shape {tuple(host_kv.shape[1:])} differs from the "
                         f"device pool's {tuple(device_kv.shape[1:])}")
    if host_kv.dtype != device_kv.dtype:
        raise ValueError(f"host pool dtype {host_kv.dtype} != device pool {device_kv.dtype}")
    kinds = {device_kv.device.type, host_kv.device.type}
    if len(kinds) > 1 and "cpu" not in kinds:
        raise ValueError(f"cannot copy between a {device_kv.device} device pool and a "
                         f"{host_kv.device} host pool: put the host pool on the CPU")


def _check_writable(name: str, kv: torch.Tensor) -> None:
    """NOTE(inference-pool): the copy worker writes the pools in place outside
    torch.inference_mode(), where torch refuses in-place writes to a tensor created inside it
    or to one that requires grad. Accepted, such a pool failed its small batches at copy time
    while large ones (the memmove path) went through. The runtime allocates its pools outside
    inference mode (attention.py NOTE(inference-mode)); a pool built otherwise is refused here."""
    if kv.device.type == "meta":
        raise ValueError(f"the {name} pool is on the meta device, which holds no bytes: "
                         "put it on a real device (the host pool on the CPU)")
    if kv.is_inference():
        raise ValueError(f"the {name} pool was created under torch.inference_mode(), and the "
                         "copy worker cannot write it in place outside that mode: allocate it "
                         "under torch.inference_mode(False) (as KVCacheLayout.allocate does)")
    if kv.requires_grad:
        raise ValueError(f"the {name} pool requires grad, so autograd refuses in-place copies "
                         "into it: a KV pool holds no gradients; pass kv.detach() or allocate "
                         "it with requires_grad=False")


def checked_pairs(kind: str, pairs: Iterable[Any], pools: Mapping[str, torch.Tensor]
                  ) -> tuple[tuple[tuple[int, int], ...], int]:
    """``pairs`` of ``kind`` as int pairs inside ``pools`` (by name), each destination once,
    and how many of them move bytes. Raises ``TypeError`` (a mapping, an id not an int),
    :class:`InvalidBlockError` (out of a pool) or ``ValueError`` (not a pair, a destination
    twice) and nothing is queued."""
    src_pool, dst_pool = COPY_KINDS[kind]
    pairs = pair_list(kind, pairs)  # NOTE(pairs-mapping)
    srcs = block_ids(kind, [p[0] for p in pairs])
    dsts = block_ids(kind, [p[1] for p in pairs])
    for pool, ids in ((src_pool, srcs), (dst_pool, dsts)):
        n = pools[pool].shape[0] if pool in pools else 0
        if ids and (min(ids) < 0 or max(ids) >= n):
            bad = [b for b in ids if not 0 <= b < n]
            raise InvalidBlockError(f"{kind}: block ids {bad[:5]} lie outside the {pool} pool "
                                    f"of {n} blocks")
    pairs_t = tuple(zip(srcs, dsts))
    check_destinations(pairs_t)
    # NOTE(no-op-pairs): (b, b) in one pool moves no byte (the backend skips it): the batch
    # still runs as submitted, but its blocks and bytes, and so stats() and the bandwidth,
    # count only the pairs that move (they counted every pair)
    same = sum(map(operator.eq, srcs, dsts)) if src_pool == dst_pool else 0
    return pairs_t, len(pairs_t) - same


def pair_list(kind: str, pairs: Iterable[Any]) -> list[Any]:
    """``pairs`` as a list of 2-item pairs (their ids checked by :func:`block_ids`).
    NOTE(pairs-mapping): vLLM v0 passed ``{src: dst}`` dicts (blocks_to_swap_in); iterated,
    a dict gives its keys, and ``len(int)`` raised a bare TypeError."""
    if isinstance(pairs, Mapping):
        raise TypeError(f"{kind}: pairs must be (src, dst) block id pairs, not a mapping: "
                        "pass list(mapping.items())")
    pairs = list(pairs)
    try:
        if all(len(p) == 2 for p in pairs):  # NOTE(speed): the common case, one pass
            return pairs
    except TypeError:  # an item with no len(): an id where a pair belongs
        pass
    bad = next(p for p in pairs if not hasattr(p, "__len__") or len(p) != 2)
    raise ValueError(f"{kind}: pairs must be (src, dst) block id pairs, got {bad!r}")


def block_ids(kind: str, ids: list[Any]) -> list[int]:
    """``ids`` as ints; ``TypeError`` for an id that is not an integer (a bool is not one).
    NOTE(int-ids): ids went through ``int()``, so 1.7 and True copied block 1 and "2" block
    2 in silence: a wrong block's KV. Integer types (numpy, 0-d tensors) still pass."""
    if set(map(type, ids)) <= {int}:  # the engine's own ids: one C-level pass
        return ids
    out = []
    for b in ids:
        try:
            if isinstance(b, bool) or isinstance(b, torch.Tensor) and b.dtype == torch.bool:
                raise TypeError("a bool")
            out.append(operator.index(b))
        except TypeError:
            raise TypeError(f"{kind}: block ids must be ints, got {b!r}") from None
    return out
