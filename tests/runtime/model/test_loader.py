"""Loader: sharded checkpoints, tied embeddings, clear errors for every missing/bad file."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import build_model
from kvpool.runtime.model import (ModelLoadError, PagedBatch, SeqChunk, WeightLoadError,
                                  allocate_kv_cache, load_model, load_tokenizer, resolve_dtype)

IDS = [5, 17, 42, 99, 3, 250, 7]


def logits_of(model):
    kv = allocate_kv_cache(4, model.config, 16, model.dtype, "cpu")
    return model(PagedBatch([SeqChunk(IDS, 0, [2])]), kv)


@pytest.fixture()
def llama_copy(hf_dir_factory, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(hf_dir_factory("llama"), d)
    return d


def test_sharded_checkpoint_equals_single_file(hf_reference, tmp_path):
    d, hf, _, _ = hf_reference("llama", 20, 8)
    sharded = tmp_path / "sharded"
    hf.save_pretrained(sharded, max_shard_size="40KB")
    shutil.copy(d / "tokenizer.json", sharded)
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("*.safetensors"))) > 1
    torch.testing.assert_close(logits_of(load_model(sharded)), logits_of(load_model(d)),
                               rtol=0, atol=0)
    # Our logits equal transformers' own on this checkpoint.
    with torch.no_grad():
        ref = hf(torch.tensor([IDS])).logits[0, -1]
    torch.testing.assert_close(logits_of(load_model(sharded))[0], ref, rtol=1e-4, atol=1e-4)


def test_index_naming_a_missing_shard(hf_reference, tmp_path):
    _, hf, _, _ = hf_reference("llama", 20, 8)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(ModelLoadError, match=shard.name):
        load_model(tmp_path)


def test_tied_embeddings_share_storage(hf_dir_factory):
    model = load_model(hf_dir_factory("qwen2"))
    assert model.config.tie_word_embeddings and model.lm_head is None


def test_missing_directory_and_hub_id():
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model("/nonexistent/dir/for/sure")
    with pytest.raises(ModelLoadError, match="never downloads"):
        load_model("meta-llama/Llama-3.2-1B")


def test_missing_config(llama_copy):
    (llama_copy / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(llama_copy)


def test_missing_weights_and_pickles(llama_copy):
    (llama_copy / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load_model(llama_copy)
    (llama_copy / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="pickle"):
        load_model(llama_copy)


def test_corrupt_safetensors(llama_copy):
    (llama_copy / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        load_model(llama_copy)


def _rewrite(directory, edit):
    f = directory / "model.safetensors"
    tensors = load_file(str(f))
    edit(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


def test_missing_tensor_is_named(llama_copy):
    _rewrite(llama_copy, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(WeightLoadError, match="model.layers.1.mlp.up_proj.weight"):
        load_model(llama_copy)


def test_unexpected_tensor_is_named(llama_copy):
    _rewrite(llama_copy, lambda t: t.update({"model.layers.0.self_attn.q_proj.bias":
                                             torch.zeros(64)}))
    with pytest.raises(WeightLoadError, match="q_proj.bias.*attention_bias"):
        load_model(llama_copy)


def test_misshaped_tensor_is_named(llama_copy):
    cfg = json.loads((llama_copy / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (llama_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightLoadError, match=r"mlp\.\w+_proj\.weight.*shape"):
        load_model(llama_copy)


def test_old_inv_freq_buffers_are_ignored(llama_copy):
    _rewrite(llama_copy, lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq":
                                             torch.zeros(8)}))
    load_model(llama_copy)


def test_dtypes():
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype("torch.float16") is torch.float16
    assert resolve_dtype(torch.float32) is torch.float32
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("int8")


def test_tokenizer_eos_sources(llama_copy):
    tok = load_tokenizer(llama_copy)
    assert tok.eos_token_ids == (1,) and tok.bos_token_id == 0  # from config.json
    (llama_copy / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 1]}))
    (llama_copy / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": {"content": "<unk>"}, "bos_token": "<s>"}))
    tok = load_tokenizer(llama_copy)
    # the tokenizer's eos is the primary, as vLLM's; every one of them stops (NOTE(eos-ids))
    assert tok.eos_token_ids == (tok.token_to_id("<unk>"), 7, 1)
    assert tok.eos_token_id == tok.token_to_id("<unk>")


def test_config_eos_ids_only_without_generation_config(llama_copy):
    """NOTE(gen-eos): config.json's EOS list counts only when generation_config.json is absent,
    as transformers' GenerationConfig (and so vLLM and ``generate``) reads them."""
    transformers = pytest.importorskip("transformers")
    config = json.loads((llama_copy / "config.json").read_text())
    (llama_copy / "config.json").write_text(json.dumps({**config, "eos_token_id": [1, 7]}))
    (llama_copy / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    assert transformers.GenerationConfig.from_pretrained(llama_copy).eos_token_id == 1
    assert load_tokenizer(llama_copy).eos_token_ids == (1,)
    (llama_copy / "generation_config.json").unlink()
    assert load_tokenizer(llama_copy).eos_token_ids == (1, 7)


def test_specials_from_special_tokens_map(llama_copy):
    """The older layout declares bos/eos in special_tokens_map.json only; transformers reads it,
    and its eos is the primary EOS, as tokenizer_config.json's is."""
    transformers = pytest.importorskip("transformers")
    (llama_copy / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": {"content": "<unk>", "lstrip": False}}))
    (llama_copy / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    expected = transformers.AutoTokenizer.from_pretrained(llama_copy).eos_token_id
    tok = load_tokenizer(llama_copy)
    assert tok.eos_token_id == expected == tok.token_to_id("<unk>")
    assert tok.eos_token_ids == (expected, 1)


def test_generation_config_from_the_model_not_the_tokenizer_dir(llama_copy, tmp_path):
    """``--tokenizer DIR2``: the tokenizer is DIR2's, the EOS ids of generation_config.json the
    model directory's (vLLM reads it from the model)."""
    (llama_copy / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7]}))
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    shutil.copy(llama_copy / "tokenizer.json", tok_dir)
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert load_tokenizer(tok_dir, model_dir=llama_copy).eos_token_ids == (1, 7)
    config = EngineConfig(model=str(llama_copy), tokenizer=str(tok_dir), device="cpu")
    _, tok, _ = build_model(config)
    assert tok.eos_token_ids == (1, 7)


def test_tokenizer_errors(llama_copy):
    (llama_copy / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        load_tokenizer(llama_copy)
    (llama_copy / "tokenizer.model").write_bytes(b"spm")
    with pytest.raises(ModelLoadError, match="tokenizer.model"):
        load_tokenizer(llama_copy)
    (llama_copy / "tokenizer.json").write_text("{broken")
    with pytest.raises(ModelLoadError, match="not a valid tokenizer.json"):
        load_tokenizer(llama_copy)
    (llama_copy / "tokenizer.json").unlink()
    (llama_copy / "generation_config.json").write_text("{broken")
    with pytest.raises(ModelLoadError):
        load_tokenizer(llama_copy)
