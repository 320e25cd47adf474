"""bench.serve --model on a Qwen2-shaped checkpoint (a tiny geometry of bench/qwen_shape.py),
the chat workload's shape, and the helper's output loading identically on both sides."""

import json

import pytest
import torch

from bench import serve_workload
from bench.qwen_shape import write_qwen2_shaped
from kvpool.runtime.model import PagedBatch, allocate_kv_cache, load_model
from tests.bench.runs import check_keys, run_bench

TINY_QWEN = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, vocab_size=600)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return write_qwen2_shaped(tmp_path_factory.mktemp("qwen"), **TINY_QWEN)


def test_qwen_shaped_dir_is_bf16_qwen2_and_matches_transformers(qwen_dir):
    import transformers
    cfg = json.loads((qwen_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["tie_word_embeddings"] is True
    assert (cfg.get("torch_dtype") or cfg.get("dtype")) == "bfloat16"
    ours = load_model(qwen_dir, torch.float32)
    assert ours.config.qkv_bias and ours.lm_head is None
    hf = transformers.AutoModelForCausalLM.from_pretrained(qwen_dir, dtype=torch.float32).eval()
    ids = [5, 17, 300, 42, 9, 250, 7]
    kv = allocate_kv_cache(1, ours.config, 16)
    got = ours(PagedBatch.from_lists([ids], [0], [[0]]), kv)[0]
    with torch.inference_mode():
        want = hf(torch.tensor([ids])).logits[0, -1].float()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_chat_workload_shares_prefixes_and_respects_bounds():
    reqs = serve_workload.chat(40, seed=3, max_prompt=256, max_out=32)
    assert reqs == serve_workload.chat(40, seed=3, max_prompt=256, max_out=32)  # seeded
    assert all(1 <= len(p) <= 256 and 16 <= m <= 32 for p, m in reqs)
    assert all(3 <= t < 500 for p, _ in reqs for t in p)
    # system prompts and continued turns: a large share of prompt blocks repeat
    assert serve_workload.prefix_share(reqs) > 0.3
    assert serve_workload.prefix_share(serve_workload.uniform(40, max_prompt=256)) == 0.0


def test_bench_serve_model_quick_with_ttft(tmp_path, qwen_dir):
    res, out = run_bench("bench.serve", tmp_path / "serve.json", "--model", str(qwen_dir),
                         "--ttft", "2", "--scrape-seqs", "0")
    check_keys(res, ["engine.output_tokens_per_s", "hf.output_tokens_per_s", "ratio",
                     "ttft.c2.ttft_p50_s", "ttft.c2.ttft_p99_s",
                     "ttft.c2.output_tokens_per_s"], repeats=2)
    assert res["workload"] == "chat" and res["model"] == str(qwen_dir)
    assert res["dtype"] in ("float32", "bfloat16")  # auto on this CPU, reason recorded
    assert res["ttft.c2.ttft_p50_s"] <= res["ttft.c2.ttft_p99_s"]
    assert "prefix share" in out
