"""Which dtype to run in when the user did not say (``--dtype auto``, the default).

On a CPU, bf16 matmuls are only fast with native bf16 instructions (AVX512_BF16 or AMX); an
AVX2-only CPU emulates them and a 256-token prefill of a 0.5B model took 22.4 s in bf16 against
2.7 s in float32. With avx512_bf16 the decode step of the same model was ~1.7x faster in bf16
than in float32 (half the weight bytes; bench.step). So: bf16 where the CPU has it, float32
elsewhere. Like vLLM's ``auto``, the checkpoint's own dtype (config.json ``torch_dtype``) is
the starting point: a float32 checkpoint (the built-in tiny model) stays float32; a bf16 one runs
in bf16 where the CPU has native bf16, else in float32. CUDA keeps the checkpoint's dtype. The
reason goes into the startup log.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

__all__ = ["AUTO", "checkpoint_dtype", "choose_dtype", "cpu_bf16_native"]

AUTO = "auto"
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_native(cpuinfo: str | None = None) -> tuple[bool, str]:
    """(has native bf16 arithmetic, why): from /proc/cpuinfo flags (``cpuinfo`` overrides the
    file, for tests), else torch's detected capability."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    found = [f for f in _BF16_FLAGS if f in flags]
    if found:
        return True, f"the CPU has {'/'.join(found)}"
    if flags:
        return False, "the CPU lacks avx512_bf16/amx_bf16 (bf16 would be emulated, ~8x slower)"
    cap = torch.backends.cpu.get_cpu_capability()
    # without cpuinfo (not Linux) only AMX capability is taken as native bf16
    return cap.startswith("AVX512_AMX") or "AMX" in cap, f"torch CPU capability {cap}"


def checkpoint_dtype(model_dir: str | Path | None) -> str | None:
    """The dtype config.json declares (``torch_dtype``, or ``dtype`` in transformers 5), or
    None (no directory, no field, unreadable)."""
    if model_dir is None:
        return None
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = cfg.get("torch_dtype") or cfg.get("dtype") if isinstance(cfg, dict) else None
    return value if value in ("float32", "bfloat16", "float16") else None


def choose_dtype(requested: str, device: str, stored: str | None = None,
                 cpuinfo: str | None = None) -> tuple[str, str, bool]:
    """(dtype name, reason, slow) for ``requested`` ("auto" or a dtype name) on ``device``;
    ``stored`` is the checkpoint's dtype (None: float32). ``slow`` is True when an explicit
    bf16/fp16 will be emulated on this CPU (the caller warns)."""
    if requested != AUTO:
        slow, why = False, ""
        if not device.startswith("cuda") and requested in ("bfloat16", "float16"):
            native, why = cpu_bf16_native(cpuinfo)
            slow = requested == "float16" or not native
        return requested, "as requested (--dtype)" + (f"; {why}" if slow else ""), slow
    want = stored or "float32"
    if device.startswith("cuda") or want == "float32":
        return want, f"the checkpoint's dtype ({want})", False
    if want == "float16":
        return "float32", "the checkpoint is float16, which has no fast CPU path", False
    native, why = cpu_bf16_native(cpuinfo)
    if native:
        return "bfloat16", f"the checkpoint is bfloat16 and {why}", False
    return "float32", f"the checkpoint is bfloat16 but {why}: float32 is faster", False
