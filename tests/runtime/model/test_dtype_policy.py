"""--dtype auto: the checkpoint's dtype, float32 where the CPU would emulate bf16."""

import json

import pytest

from kvpool.runtime.model.dtype_policy import checkpoint_dtype, choose_dtype, cpu_bf16_native

AVX2 = "processor : 0\nflags : fpu sse2 avx avx2 fma\n"
BF16 = "processor : 0\nflags : fpu avx2 avx512f avx512_bf16\n"
AMX = "processor : 0\nflags : fpu avx2 amx_tile amx_bf16\n"


def test_native_bf16_from_cpu_flags():
    assert cpu_bf16_native(AVX2)[0] is False
    assert cpu_bf16_native(BF16) == (True, "the CPU has avx512_bf16")
    assert cpu_bf16_native(AMX)[0] is True


@pytest.mark.parametrize("cpuinfo,want", [(AVX2, "float32"), (BF16, "bfloat16"),
                                          (AMX, "bfloat16")])
def test_auto_runs_a_bf16_checkpoint_in_bf16_only_where_native(cpuinfo, want):
    name, why, slow = choose_dtype("auto", "cpu", "bfloat16", cpuinfo)
    assert (name, slow) == (want, False)
    assert "bfloat16" in why


def test_auto_keeps_float32_checkpoints_and_avoids_fp16_on_cpu():
    assert choose_dtype("auto", "cpu", None, BF16)[0] == "float32"  # tiny model: no field
    assert choose_dtype("auto", "cpu", "float32", BF16)[0] == "float32"
    assert choose_dtype("auto", "cpu", "float16", BF16)[0] == "float32"


def test_explicit_dtype_is_honoured_and_flagged_slow():
    name, why, slow = choose_dtype("bfloat16", "cpu", "float32", AVX2)
    assert (name, slow) == ("bfloat16", True)
    assert "avx512_bf16" in why
    assert choose_dtype("bfloat16", "cpu", None, BF16)[2] is False
    assert choose_dtype("float32", "cpu", "bfloat16", AVX2) == (
        "float32", "as requested (--dtype)", False)


def test_checkpoint_dtype_reads_both_spellings(tmp_path):
    assert checkpoint_dtype(None) is None
    assert checkpoint_dtype(tmp_path) is None  # no config.json
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert checkpoint_dtype(tmp_path) == "bfloat16"
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float16"}))
    assert checkpoint_dtype(tmp_path) == "float16"
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "int8"}))
    assert checkpoint_dtype(tmp_path) is None
