"""KVStorage: the device pool and the host (swap) pool tensors, sized from a memory budget.

Invariants (checked by :meth:`KVStorage.check_invariants`):

- ``device_kv.shape == layout.shape(num_device_blocks)`` with ``num_device_blocks >= 1``;
- ``host_kv.shape == layout.shape(num_host_blocks)`` with ``num_host_blocks >= 0`` (a 0-block
  tensor when swapping is off, never ``None``, so consumers need no branch);
- both pools are zero-filled at construction (see ``attention.py`` NOTE(finite)) and share
  ``layout`` (dtype, layers, block size, heads), so ``host_kv[h].copy_(device_kv[d])`` is a swap.

Sizing (one block = :attr:`bytes_per_block` bytes across all layers, K and V)::

    device pool, CPU:   kv_cache_memory bytes            --kv-cache-memory 2GiB
    device pool, CUDA:  kv_cache_memory if given, else
                        total * gpu_memory_utilization - (total - free)
                        \\_ what this process may use _/  \\_ already in use (weights, ...) _/
    host pool:          swap_space GiB (0 = no swap)     --swap-space 4
    blocks = budget // bytes_per_block

On a CPU-only machine both pools are CPU memory and a swap is a real memory copy; the host pool
is only pinned when the device pool is on CUDA (``pin_memory`` raises on CPU-only torch).
"""

from __future__ import annotations

import math
import os
import re

import torch

from kvpool.config import CacheConfig
from kvpool.errors import ConfigError
from kvpool.runtime.model.config import ModelConfig
from kvpool.runtime.model.attention import KVCacheLayout

__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION", "DEFAULT_KV_CACHE_MEMORY", "DEFAULT_SWAP_SPACE_GIB",
    "GiB", "KVStorage", "MiB", "device_blocks_for_budget", "gpu_kv_budget", "parse_bytes",
    "parse_swap_space",
]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_KV_CACHE_MEMORY = 1 * GiB  # CPU device pool when --kv-cache-memory is unset
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
DEFAULT_SWAP_SPACE_GIB = 4.0  # vLLM's default, GiB of host memory for swapped-out blocks

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000 ** 2, "mb": 1000 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3,
    "t": 1000 ** 4, "tb": 1000 ** 4,
    "ki": KiB, "kib": KiB, "mi": MiB, "mib": MiB, "gi": GiB, "gib": GiB, "ti": 1 << 40,
    "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([0-9]+))?\s*([A-Za-z]*)\s*$")


def parse_bytes(value: int | float | str, flag: str = "--kv-cache-memory") -> int:
    """A byte count from an int (bytes) or a string such as ``"2GiB"``, ``"512MiB"``, ``"1.5G"``.

    Binary units (KiB/MiB/GiB/TiB, or Ki/Mi/Gi) are powers of 1024, decimal ones (KB/MB/GB, K/M/G)
    powers of 1000, as in Kubernetes quantities; a bare number is bytes. Raises
    :class:`ConfigError` naming ``flag`` for anything else or a negative value.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{flag}={value!r} is invalid: give bytes or a size like 2GiB")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(3).lower() if m else ""
        if not m or unit not in _UNITS:
            raise ConfigError(f"{flag}={value!r} is not a size: use bytes or a number with a unit, "
                              "e.g. 2GiB, 512MiB, 1.5G")
        number = float(m.group(1)) * (10 ** int(m.group(2)) if m.group(2) else 1) * _UNITS[unit]
    else:
        raise ConfigError(f"{flag}={value!r} is invalid: give bytes or a size like 2GiB")
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{flag}={value!r} is invalid: the size must be finite and >= 0")
    return int(number)


def parse_swap_space(value: int | float | str) -> int:
    """``--swap-space`` in bytes: a number is GiB (vLLM's spelling, 0 = no swap); a string with a
    unit (``"512MiB"``) is parsed by :func:`parse_bytes`; a bare numeric string is GiB too."""
    if isinstance(value, str) and _SIZE_RE.match(value) and not _SIZE_RE.match(value).group(3):
        value = float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"--swap-space={value!r} is invalid: use GiB >= 0 (0 = no swap)")
        return int(value * GiB)
    return parse_bytes(value, "--swap-space")


def gpu_kv_budget(total_bytes: int, free_bytes: int, utilization: float) -> int:
    """Bytes the KV pool may take on a GPU: ``total * utilization - (total - free)``.

    ``total - free`` is what is already in use (weights, activations, other processes) when the
    pool is sized, so it is called after the model is loaded. May be <= 0 (nothing left).
    """
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) \
            or not math.isfinite(utilization) or not 0.0 < utilization <= 1.0:
        raise ConfigError(f"--gpu-memory-utilization={utilization!r} is invalid: use a fraction "
                          "in (0, 1], e.g. 0.9")
    used = max(0, int(total_bytes) - int(free_bytes))
    return int(int(total_bytes) * float(utilization)) - used


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _fmt(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def device_blocks_for_budget(layout: KVCacheLayout, device: torch.device | str,
                             kv_cache_memory: int | str | None,
                             gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                             mem_info: tuple[int, int] | None = None) -> int:
    """Device pool blocks for a budget (pure: ``mem_info`` is ``torch.cuda.mem_get_info()``'s
    ``(free, total)``, read by the caller on CUDA).

    ``kv_cache_memory`` wins when given (any device); else CUDA uses :func:`gpu_kv_budget` and
    CPU :data:`DEFAULT_KV_CACHE_MEMORY`. Raises :class:`ConfigError` naming the flag to raise
    when not even one block fits.
    """
    device = torch.device(device)
    if kv_cache_memory is not None:
        flag = "--kv-cache-memory"
        nbytes = parse_bytes(kv_cache_memory, flag)
        detail = f"{flag}={kv_cache_memory!r} is {_fmt(nbytes)}"
    elif device.type == "cuda":
        if mem_info is None:
            raise ValueError("mem_info=(free, total) is required to size a CUDA pool")
        free, total = mem_info
        flag = "--gpu-memory-utilization"
        nbytes = gpu_kv_budget(total, free, gpu_memory_utilization)
        detail = (f"{flag}={gpu_memory_utilization} of {_fmt(total)} minus {_fmt(total - free)} "
                  f"in use leaves {_fmt(max(nbytes, 0))}")
    else:
        flag = "--kv-cache-memory"
        nbytes = DEFAULT_KV_CACHE_MEMORY
        detail = f"the default {flag} of {_fmt(nbytes)}"
    n = layout.num_blocks_for_bytes(max(nbytes, 0))
    if n < 1:
        raise ConfigError(
            f"KV cache budget too small for one block: {detail}, but one block of "
            f"{layout.block_size} tokens takes {_fmt(layout.bytes_per_block)} "
            f"({layout.bytes_per_block} bytes); raise {flag}")
    return n


class KVStorage:
    """The two KV pool tensors of one model (see the module docstring for invariants and sizing).

    ``num_device_blocks`` / ``num_host_blocks`` override the budgets (tests, benchmarks, a core
    configured by block counts); otherwise the budgets decide. :meth:`cache_config` hands the
    counts to the block manager, so the core and the tensors always agree.
    """

    def __init__(self, model_config: ModelConfig, block_size: int,
                 dtype: torch.dtype = torch.float32, *, device: torch.device | str = "cpu",
                 kv_cache_memory: int | str | None = None,
                 gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                 swap_space: float | str = DEFAULT_SWAP_SPACE_GIB,
                 num_device_blocks: int | None = None,
                 num_host_blocks: int | None = None) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) \
                or not 1 <= block_size <= 4096:
            raise ConfigError(f"block_size={block_size!r} is invalid: use an int in 1..4096 "
                              "(16 is typical)")
        try:
            self.layout = KVCacheLayout.for_model(model_config, block_size, dtype)
        except ValueError as exc:
            raise ConfigError(f"cannot lay out the KV cache: {exc}") from exc
        self.device = torch.device(device)
        self.bytes_per_block: int = self.layout.bytes_per_block  # one block, all layers, K and V
        if num_device_blocks is not None:
            if isinstance(num_device_blocks, bool) or not isinstance(num_device_blocks, int) \
                    or num_device_blocks < 1:
                raise ConfigError(f"num_device_blocks={num_device_blocks!r} is invalid: use an "
                                  "int >= 1")
            self.num_device_blocks: int = num_device_blocks
        else:
            mem_info = (torch.cuda.mem_get_info(self.device) if self.device.type == "cuda"
                        and kv_cache_memory is None else None)
            self.num_device_blocks = device_blocks_for_budget(
                self.layout, self.device, kv_cache_memory, gpu_memory_utilization, mem_info)
        self.num_host_blocks: int = self._size_host(num_host_blocks, swap_space)
        self._check_host_ram()
        self.device_kv: torch.Tensor = self.layout.allocate(self.num_device_blocks, self.device)
        self.host_kv: torch.Tensor = self._allocate_host()

    # ------------------------------------------------------------------ sizing
    def _size_host(self, blocks: int | None, swap_space: float | str) -> int:
        if blocks is not None:
            if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 0:
                raise ConfigError(f"num_host_blocks={blocks!r} is invalid: use an int >= 0 "
                                  "(0 = no swap)")
            return blocks
        nbytes = parse_swap_space(swap_space)
        n = self.layout.num_blocks_for_bytes(nbytes)
        if nbytes > 0 and n == 0:
            raise ConfigError(
                f"--swap-space={swap_space!r} ({_fmt(nbytes)}) is too small for one block of "
                f"{_fmt(self.bytes_per_block)}; raise --swap-space or set it to 0 to disable swap")
        return n

    def _check_host_ram(self) -> None:
        """Refuse budgets larger than this machine's RAM before zero-filling them (a clear
        error instead of the OOM killer)."""
        ram = _physical_memory()
        host_bytes = self.num_host_blocks * self.bytes_per_block
        device_bytes = self.num_device_blocks * self.bytes_per_block
        need = host_bytes + (device_bytes if self.device.type == "cpu" else 0)
        if ram is not None and need > ram:
            flags = "--swap-space" if self.device.type != "cpu" else \
                "--kv-cache-memory and/or --swap-space"
            raise ConfigError(f"the KV pools need {_fmt(need)} of host memory but this machine "
                              f"has {_fmt(ram)}; lower {flags}")

    def _allocate_host(self) -> torch.Tensor:
        # NOTE(pinning): pinned host memory makes CUDA copies async; on a CPU-only build
        # pin_memory raises, and a CPU->CPU swap gains nothing from it.
        pin = self.device.type == "cuda"
        with torch.inference_mode(False):
            return torch.zeros(self.layout.shape(self.num_host_blocks), dtype=self.layout.dtype,
                               device="cpu", pin_memory=pin)

    # ------------------------------------------------------------------ views
    @property
    def block_size(self) -> int:
        return self.layout.block_size

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    @property
    def device_bytes(self) -> int:
        return self.num_device_blocks * self.bytes_per_block

    @property
    def host_bytes(self) -> int:
        return self.num_host_blocks * self.bytes_per_block

    def capacity_line(self, max_model_len: int) -> str:
        """The startup summary vLLM prints: block counts, KV bytes, how many max-length
        requests fit at once."""
        gib = 1 << 30
        per_req = -(-max_model_len // self.block_size)
        return (f"# device blocks: {self.num_device_blocks}, # host blocks: "
                f"{self.num_host_blocks}, KV cache {self.device_bytes / gib:.2f} GiB "
                f"(+{self.host_bytes / gib:.2f} GiB host swap), {self.bytes_per_block} bytes/block"
                f" of {self.block_size} tokens, max concurrency for {max_model_len} tokens: "
                f"{self.num_device_blocks / per_req:.2f}x")

    def pool(self, name: str) -> torch.Tensor:
        """``"device"`` -> :attr:`device_kv`, ``"host"`` -> :attr:`host_kv`."""
        if name == "device":
            return self.device_kv
        if name == "host":
            return self.host_kv
        raise ValueError(f"unknown pool {name!r}: use 'device' or 'host'")

    def cache_config(self, **overrides) -> CacheConfig:
        """A :class:`CacheConfig` with this storage's block size and block counts; other fields
        (watermark, enable_prefix_caching, hash_algo, model_id, ...) come from ``overrides``."""
        for key in ("num_device_blocks", "num_host_blocks", "block_size"):
            if key in overrides:
                raise ConfigError(f"cache_config() sets {key} from the storage; do not pass it")
        return CacheConfig(num_device_blocks=self.num_device_blocks, block_size=self.block_size,
                           num_host_blocks=self.num_host_blocks, **overrides)

    def check_invariants(self) -> None:
        assert self.num_device_blocks >= 1 and self.num_host_blocks >= 0
        assert tuple(self.device_kv.shape) == self.layout.shape(self.num_device_blocks)
        assert tuple(self.host_kv.shape) == self.layout.shape(self.num_host_blocks)
        assert self.device_kv.dtype == self.host_kv.dtype == self.layout.dtype
        assert self.device_kv.is_contiguous() and self.host_kv.is_contiguous()
        assert self.host_kv.device.type == "cpu"

    def __repr__(self) -> str:
        return (f"KVStorage(device={self.device}, block_size={self.block_size}, "
                f"dtype={self.dtype}, bytes_per_block={self.bytes_per_block}, "
                f"device_blocks={self.num_device_blocks} ({_fmt(self.device_bytes)}), "
                f"host_blocks={self.num_host_blocks} ({_fmt(self.host_bytes)}))")
