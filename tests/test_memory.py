"""Memory budget (specsim.memory) against hand-computed numbers.

Hand counts below come from the configs in specsim/data/models and specsim/data/drafters (the numbers are
written out, not recomputed by specsim); norm weights (< 1e-4 of the total) are left out of the
hand counts, hence rel=1e-4 on weight bytes.
"""
from __future__ import annotations

import pytest

from specsim.errors import SpecsimValueError
from specsim.memory import GIB, memory_budget

MI300X_HBM = 206158430208  # 192 GiB, specsim/data/hardware.csv
MI355X_HBM = 309237645312  # 288 GiB

# Llama-3.1-8B-Instruct: h 4096, 32 layers, 32 q / 8 kv heads x 128, I 14336, V 128256, untied
LLAMA_PARAMS = 2 * 128256 * 4096 + 32 * (4096 * 4096 * 2 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336)
LLAMA_KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 heads x 128, bf16 = 131072 B
# MiniMax-M2.5: h 3072, 62 layers, 48 q / 8 kv x 128, 256 experts of 3*3072*1536, router 3072x256, V 200064
MINIMAX_PARAMS = 2 * 200064 * 3072 + 62 * (2 * 3072 * 6144 + 2 * 3072 * 1024 + 256 * 3 * 3072 * 1536 + 3072 * 256)
MINIMAX_KV_PER_TOKEN = 2 * 62 * 8 * 128 * 2  # 253952 B
# z-lab gemma-4-26B-A4B-it DFlash (specsim/data/drafters): 5 layers h 2816, 16 q / 8 kv x 256, I 8448,
# fc 39649280, lm_head shared with the target
DFLASH_PARAMS = 5 * (2816 * 16 * 256 * 2 + 2 * 2816 * 8 * 256 + 3 * 2816 * 8448) + 39649280
DFLASH_KV_PER_TOKEN = 5 * 2 * 8 * 256 * 2  # 40960 B


def _act(tokens, hidden, seqs, vocab, spec):
    return tokens * hidden * 2 * 16 + min(seqs, tokens) * (2 if spec else 1) * vocab * 4


def test_dense_llama_by_hand():
    b = memory_budget("Llama-3.1-8B-Instruct", None, hardware="MI300X", tp=1, concurrency=64, max_model_len=8192)
    assert b.target_weight_bytes == pytest.approx(2 * LLAMA_PARAMS, rel=1e-4)
    assert b.kv_cache_bytes == pytest.approx(64 * 8192 * LLAMA_KV_PER_TOKEN, rel=1e-12)
    assert b.kv_cache_bytes == 64 * GIB  # 64 x 8192 x 128 KiB
    # vLLM 0.32 defaults on a >= 160 GiB GPU: 16384 batched tokens, 1024 sequences
    assert b.activation_bytes == pytest.approx(_act(16384, 4096, 1024, 128256, spec=False), rel=1e-12)
    assert b.non_torch_bytes == 2 * GIB
    assert b.draft_weight_bytes == 0 and b.draft_kv_cache_bytes == 0
    usable = 0.92 * MI300X_HBM
    assert b.usable_bytes == pytest.approx(usable, rel=1e-12)
    expected_headroom = usable - (2 * LLAMA_PARAMS + 64 * GIB + _act(16384, 4096, 1024, 128256, False) + 2 * GIB)
    assert b.headroom_bytes == pytest.approx(expected_headroom, rel=1e-4)
    assert b.headroom_gib == pytest.approx(expected_headroom / GIB, rel=1e-4)
    assert b.fits and b.reason == ""
    assert b.reserve_bytes == pytest.approx(0.08 * MI300X_HBM)


def test_dense_tp_split_weights_and_kv():
    one = memory_budget("Llama-3.1-8B-Instruct", hardware="MI300X", tp=1, concurrency=32, max_model_len=4096)
    two = memory_budget("Llama-3.1-8B-Instruct", hardware="MI300X", tp=2, concurrency=32, max_model_len=4096)
    assert two.target_weight_bytes == pytest.approx(one.target_weight_bytes / 2)
    assert two.kv_cache_bytes == pytest.approx(one.kv_cache_bytes / 2)  # 8 KV heads over 2 ranks
    sixteen = memory_budget("Llama-3.1-8B-Instruct", hardware="MI300X", tp=16, concurrency=32, max_model_len=4096)
    # 8 KV heads cannot be split 16 ways: each rank keeps one head -> 1/8 of the cache, not 1/16
    assert sixteen.kv_cache_bytes == pytest.approx(32 * 4096 * LLAMA_KV_PER_TOKEN / 8)


def test_moe_minimax_by_hand():
    b = memory_budget("MiniMax-M2.5", hardware="MI355X", tp=4, precision="bf16", concurrency=64, max_model_len=4096)
    assert b.target_weight_bytes == pytest.approx(2 * MINIMAX_PARAMS / 4, rel=1e-4)
    assert b.kv_cache_bytes == pytest.approx(64 * 4096 * MINIMAX_KV_PER_TOKEN / 4, rel=1e-12)
    assert b.activation_bytes == pytest.approx(_act(16384, 3072, 1024, 200064, False), rel=1e-12)
    usable = 0.92 * MI355X_HBM
    need = 2 * MINIMAX_PARAMS / 4 + 64 * 4096 * MINIMAX_KV_PER_TOKEN / 4 + _act(16384, 3072, 1024, 200064, False) + 2 * GIB
    assert b.headroom_bytes == pytest.approx(usable - need, rel=1e-4)
    assert b.fits


def test_moe_that_does_not_fit_names_the_reason():
    # 457 GB of bf16 weights over 2 MI300X = 213 GiB per GPU > 176.6 GiB usable
    b = memory_budget("MiniMax-M2.5", hardware="MI300X", tp=2, precision="bf16", concurrency=8, max_model_len=2048)
    assert not b.fits
    assert b.max_concurrency_fit == 0
    assert "weights and runtime alone" in b.reason and "target weights" in b.reason
    assert b.headroom_gib < 0


def test_max_concurrency_fit_is_the_boundary():
    b = memory_budget("Llama-3.1-8B-Instruct", hardware="MI300X", tp=1, concurrency=4096, max_model_len=8192)
    assert not b.fits
    c = b.max_concurrency_fit
    assert c > 0 and f"fits up to concurrency {c}" in b.reason
    ok = memory_budget("Llama-3.1-8B-Instruct", hardware="MI300X", tp=1, concurrency=c, max_model_len=8192)
    over = memory_budget("Llama-3.1-8B-Instruct", hardware="MI300X", tp=1, concurrency=c + 1, max_model_len=8192)
    assert ok.fits and not over.fits


def test_dflash_draft_terms_by_hand():
    b = memory_budget("gemma-4-26B-A4B-it", "dflash", hardware="MI300X", tp=2, concurrency=16, max_model_len=2048)
    assert b.draft_weight_bytes == pytest.approx(2 * DFLASH_PARAMS / 2, rel=1e-12)  # draft TP = target TP
    assert b.draft_kv_cache_bytes == pytest.approx(16 * 2048 * DFLASH_KV_PER_TOKEN / 2, rel=1e-12)
    one = memory_budget("gemma-4-26B-A4B-it", "dflash", hardware="MI300X", tp=2, draft_tp=1, concurrency=16,
                        max_model_len=2048)
    assert one.draft_weight_bytes == pytest.approx(2 * DFLASH_PARAMS, rel=1e-12)
    # speculation doubles the profiling sampler's logits (one dummy draft token per request)
    base = memory_budget("gemma-4-26B-A4B-it", None, hardware="MI300X", tp=2, concurrency=16, max_model_len=2048)
    assert b.activation_bytes - base.activation_bytes == pytest.approx(1024 * 262144 * 4)


def test_gemma_assistant_shares_target_kv_and_native_mtp_shares_weights():
    g = memory_budget("gemma-4-26B-A4B-it", "mtp", hardware="MI300X", tp=2, concurrency=64, max_model_len=4096)
    assert g.draft_kv_cache_bytes == 0.0
    assert g.draft_weight_bytes > 0  # its own 4-layer checkpoint
    assert any("target's KV cache" in a for a in g.assumptions)
    q = memory_budget("Qwen3.6-35B-A3B", "mtp", hardware="MI300X", tp=2, concurrency=64, max_model_len=4096)
    assert any("shares the target's weights" in a for a in q.assumptions)
    e = memory_budget("gemma-4-26B-A4B-it", "eagle3", hardware="MI300X", tp=2, concurrency=64, max_model_len=4096)
    assert e.draft_kv_cache_bytes > 0


def test_mla_cache_is_replicated_over_tp():
    from specsim.architecture import load_model

    kimi = load_model("Kimi-K2.5")
    assert kimi.attention_kind == "mla"
    b = memory_budget(kimi, hardware="MI355X", tp=4, concurrency=8, max_model_len=2048)
    assert b.kv_cache_bytes == pytest.approx(8 * float(kimi.kv_bytes_per_seq(2048, "bf16")))


@pytest.mark.parametrize("kw, field", [
    ({"tp": 0}, "tp"),
    ({"concurrency": 1.5}, "concurrency"),
    ({"max_model_len": 0}, "max_model_len"),
    ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
    ({"tp": 4, "draft_tp": 2}, "draft_tp"),
    ({"non_torch_bytes": -1.0}, "non_torch_bytes"),
])
def test_bad_inputs_name_the_field(kw, field):
    args = {"hardware": "MI300X", "method": "dflash"} | kw
    with pytest.raises(SpecsimValueError) as e:
        memory_budget("gemma-4-26B-A4B-it", **args)
    assert e.value.field == field
