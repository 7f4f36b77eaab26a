"""Tests of specsim.architecture: parameter counts vs published, KV bytes, MoE expert growth, FLOPs."""
from __future__ import annotations

import itertools
import json
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.architecture import BYTES_PER_WEIGHT, ModelSpec, bytes_per_weight, list_models, load_model
from specsim.catalog import data_path
from specsim.errors import SpecsimValueError

LOADABLE = [n for n in list_models() if n != "MiniMax-M3"]


def _doc(name: str) -> dict:
    return json.loads(data_path("models", f"{name}.json").read_text())


# ------------------------------------------------------------------ published / reference totals
# Published totals are labels rounded to the digits shown.  Tolerance 2 %, except two labels with
# one significant figure where 1.026T vs "1T" and 8.19B vs "8B" are rounding, not model error.
TOTAL_TOL = {"Kimi-K2.5": 0.03, "Qwen3-8B": 0.03}


@pytest.mark.parametrize("name", LOADABLE)
def test_total_params_vs_published(name):
    spec = load_model(name)
    pub = spec.published
    assert pub.get("source"), "published count needs a source"
    rel = spec.total_params / pub["total_params"] - 1
    assert abs(rel) <= TOTAL_TOL.get(name, 0.02), f"{name}: {spec.total_params:.4g} vs {pub['total_label']}"


def _half_unit(label: str) -> float:
    """Half a unit in the last written digit of a label like '37B', '3.8B', '~23B'."""
    m = re.fullmatch(r"~?(\d+)(?:\.(\d+))?([MBT])", label)
    assert m, label
    scale = {"M": 1e6, "B": 1e9, "T": 1e12}[m.group(3)]
    return 0.5 * scale * 10.0 ** -(len(m.group(2)) if m.group(2) else 0)


@pytest.mark.parametrize("name", [n for n in LOADABLE if "active_params" in _doc(n)["published"]])
def test_active_params_vs_published(name):
    """Published "active" counts here fit the convention that excludes the input-embedding lookup
    (DeepSeek-V3 37B vs 36.6B excl. / 37.6B incl.; conventions differ: Mixtral's 12.9B includes it),
    compared within max(2 %, half a unit of the label's last digit)."""
    spec = load_model(name)
    pub = spec.published
    tol = max(0.02 * pub["active_params"], _half_unit(pub["active_label"]))
    assert abs(spec.active_params_excl_embedding - pub["active_params"]) <= tol


@pytest.mark.parametrize("name", [n for n in LOADABLE if "total_params" in _doc(n).get("reference_derived", {})])
def test_totals_match_reference_derivation(name):
    """The shared reference computed totals with its own script, ignoring norms (which specsim
    counts: 0.026 % of SmolLM2-135M, less elsewhere): agree to 5e-4."""
    ref = _doc(name)["reference_derived"]
    spec = load_model(name)
    assert spec.total_params == pytest.approx(ref["total_params"], rel=5e-4)
    assert spec.total_params >= ref["total_params"]
    for key in ("active_params", "active_params_incl_embed", "active_params_incl_embed_and_lm_head"):
        if key in ref:
            assert spec.active_params == pytest.approx(ref[key], rel=5e-4)


def test_minimax_m3_not_derivable():
    with pytest.raises(SpecsimValueError) as ei:
        load_model("MiniMax-M3")
    assert ei.value.field == "model"
    assert "MiniMax-M3" in str(ei.value) and "hidden_size" in str(ei.value)


def test_every_model_file_has_provenance():
    for name in list_models():
        doc = _doc(name)
        assert doc["source"] and doc["copied_from"] and doc["published"]["source"]
        sp = doc["serving_precision"]
        assert sp["weights"] in BYTES_PER_WEIGHT and sp["source"]


# ------------------------------------------------------------------ KV cache
def test_kv_llama_hand_computed():
    spec = load_model("Llama-3.1-8B-Instruct")
    assert spec.kv_bytes_per_token("bf16") == 32 * 8 * 128 * 2 * 2 == 131072
    assert spec.kv_bytes_per_token("fp8") == 65536
    np.testing.assert_array_equal(spec.kv_bytes_per_seq([0, 1000, 4096]), [0, 131072000, 131072 * 4096])


def test_kv_mla_deepseek_hand_computed():
    spec = load_model("DeepSeek-V3")
    assert spec.attention_kind == "mla"
    assert spec.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70272


@pytest.mark.parametrize("name,key,layers", [
    ("Qwen3-8B", "kv_cache_bytes_per_token_bf16", "all"),
    ("Llama-3.3-70B-Instruct", "kv_cache_bytes_per_token_bf16", "all"),
    ("SmolLM2-135M-Instruct", "kv_cache_bytes_per_token_bf16", "all"),
    ("vicuna-13b-v1.3", "kv_cache_bytes_per_token_bf16", "all"),
    ("MiniMax-M2.5", "kv_cache_bytes_per_token_bf16", "all"),
    ("Kimi-K2.5", "kv_cache_bytes_per_token_bf16", "all"),
    ("Qwen3.6-35B-A3B", "kv_cache_bytes_per_token_bf16", "all"),
    ("gemma-4-26B-A4B-it", "kv_cache_bytes_per_token_bf16_sliding_layers_total", "sliding"),
    ("gemma-4-26B-A4B-it", "kv_cache_bytes_per_token_bf16_full_layers_total_if_K_and_V_both_stored", "full"),
    ("gemma-4-31B-it", "kv_cache_bytes_per_token_bf16_sliding_layers_total", "sliding"),
    ("gemma-4-31B-it", "kv_cache_bytes_per_token_bf16_full_layers_total_if_K_and_V_both_stored", "full"),
])
def test_kv_per_token_vs_reference(name, key, layers):
    assert load_model(name).kv_bytes_per_token("bf16", layers=layers) == _doc(name)["reference_derived"][key]


def test_gemma_k_eq_v_store_once_halves_global_kv():
    cfg = _doc("gemma-4-26B-A4B-it")["config"]
    once = ModelSpec.from_hf_config(cfg, kv_k_eq_v_store_once=True)
    assert once.kv_bytes_per_token(layers="full") == _doc("gemma-4-26B-A4B-it")["reference_derived"][
        "kv_cache_bytes_per_token_bf16_full_layers_total_if_K_eq_V_stored_once"]


def test_sliding_window_caps_kv():
    spec = load_model("gemma-4-26B-A4B-it")
    w = spec.sliding_window
    assert w == 1024 and spec.layer_types.count("sliding") == 25
    full, slide = spec.kv_bytes_per_token(layers="full"), spec.kv_bytes_per_token(layers="sliding")
    L = np.array([10, 1024, 5000, 100_000])
    np.testing.assert_allclose(spec.kv_bytes_per_seq(L), full * L + slide * np.minimum(L, w))
    # beyond the window only the 5 global layers grow
    assert spec.kv_bytes_per_seq(50_001) - spec.kv_bytes_per_seq(50_000) == pytest.approx(full)


def test_linear_attention_constant_state():
    spec = load_model("Qwen3.6-35B-A3B")
    ref = _doc("Qwen3.6-35B-A3B")["reference_derived"]
    assert spec.layer_types.count("linear") == 30 and spec.layer_types.count("full") == 10
    assert spec.state_elems_per_seq == ref["recurrent_state_elements_per_sequence"]
    assert spec.kv_bytes_per_seq(0) == pytest.approx(2 * ref["recurrent_state_elements_per_sequence"])
    assert spec.kv_bytes_per_seq(1000) - spec.kv_bytes_per_seq(0) == pytest.approx(1000 * 10 * 2 * 2 * 256 * 2)


# ------------------------------------------------------------------ MoE expert growth
def _tiny_moe(E: int, k: int) -> ModelSpec:
    return ModelSpec.from_hf_config(dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=128, moe_intermediate_size=32,
                                         n_routed_experts=E, num_experts_per_tok=k, vocab_size=100))


@pytest.mark.parametrize("E,k,T", [(5, 2, 1), (5, 2, 3), (6, 3, 2), (4, 1, 4), (4, 4, 2)])
def test_expert_growth_exact_enumeration(E, k, T):
    """E(distinct experts) by enumerating every assignment of a k-subset to each of T tokens."""
    subsets = list(itertools.combinations(range(E), k))
    total = sum(len(set().union(*combo)) for combo in itertools.product(subsets, repeat=T))
    exact = Fraction(total, len(subsets) ** T)
    assert float(_tiny_moe(E, k).expected_distinct_experts(T)) == pytest.approx(float(exact), rel=1e-12)


def test_expert_growth_monte_carlo_qwen36():
    spec = load_model("Qwen3.6-35B-A3B")
    E, k = spec.num_experts, spec.experts_per_token
    rng = np.random.default_rng(0)
    T, trials = 16, 1000
    picks = np.argpartition(rng.random((trials, T, E)), k, axis=-1)[..., :k]  # uniform k-subsets
    hit = np.zeros((trials, E), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    distinct = hit.sum(axis=1)
    se = distinct.std(ddof=1) / math.sqrt(trials)
    assert abs(distinct.mean() - spec.expected_distinct_experts(T)) < 5 * se


def test_step_weight_bytes_endpoints():
    spec = load_model("DeepSeek-V3")
    b = bytes_per_weight("bf16")
    # one token reads exactly the per-token active weights (lm_head included, embedding gather excluded)
    assert spec.step_weight_bytes(1, "bf16") == pytest.approx(spec.active_params_excl_embedding * b, rel=1e-12)
    # many tokens read every expert: total minus the (untied) input embedding
    assert spec.step_weight_bytes(1e6, "bf16") == pytest.approx(
        (spec.total_params - spec.embedding_params) * b, rel=1e-9)
    # distinct-expert growth at B=1, q=8 (paper-free closed form)
    E, k = 256, 8
    grow = spec.num_moe_layers * E * (1 - (1 - k / E) ** 8) * spec.expert_params * b
    fixed = (spec.non_expert_layer_params + spec.lm_head_params) * b
    assert spec.step_weight_bytes(8, "bf16") == pytest.approx(fixed + grow, rel=1e-12)
    dense = load_model("Qwen3-8B")
    np.testing.assert_allclose(dense.step_weight_bytes([1, 64, 4096], "bf16"),
                               (dense.total_params - dense.embedding_params) * 2.0)


# ------------------------------------------------------------------ precision bytes
@pytest.mark.parametrize("name", LOADABLE)
def test_bytes_ordering(name):
    spec = load_model(name)
    wb = {p: spec.weight_bytes(p) for p in BYTES_PER_WEIGHT}
    assert wb["fp32"] > wb["bf16"] == wb["fp16"] > wb["fp8"] > wb["int4"] > wb["mxfp4"]
    assert wb["mxfp4"] / wb["bf16"] == pytest.approx(0.53125 / 2)
    assert wb["int4"] / wb["bf16"] == pytest.approx(0.5625 / 2)


def test_mixed_serving_precision_kimi():
    spec = load_model("Kimi-K2.5")
    assert (spec.weight_dtype, spec.expert_weight_dtype, spec.lm_head_dtype) == ("bf16", "int4", "bf16")
    expected = (spec.non_expert_layer_params * 2 + spec.routed_expert_params * 0.5625
                + (spec.embedding_params + spec.lm_head_params) * 2)
    assert spec.weight_bytes() == pytest.approx(expected)
    assert spec.weight_bytes("bf16", expert_precision="mxfp4") == pytest.approx(
        expected - spec.routed_expert_params * (0.5625 - 0.53125))


def test_bad_precision_and_inputs():
    spec = load_model("Qwen3-8B")
    with pytest.raises(SpecsimValueError) as ei:
        spec.weight_bytes("int8")
    assert ei.value.field == "precision"
    with pytest.raises(SpecsimValueError):
        spec.kv_bytes_per_token("mxfp4")
    with pytest.raises(SpecsimValueError) as ei:
        spec.step_weight_bytes(0)
    assert ei.value.field == "tokens"
    with pytest.raises(SpecsimValueError):
        spec.kv_bytes_per_seq(-1)
    with pytest.raises(SpecsimValueError):
        spec.step_flops(1, 0, 10)


# ------------------------------------------------------------------ FLOPs
def test_flops_llama_hand_computed():
    spec = load_model("Llama-3.1-8B-Instruct")
    h, I, V, L, nq, nkv, hd = 4096, 14336, 128256, 32, 32, 8, 128
    layer = h * nq * hd + 2 * h * nkv * hd + nq * hd * h + 3 * h * I + 2 * h  # + 2 RMSNorms
    matmul = L * layer + h  # + final norm
    ctx = 1000
    expected = 2 * matmul + L * 4 * nq * hd * (ctx + 1) + 2 * V * h
    assert spec.flops_per_token(ctx) == pytest.approx(expected, rel=1e-12)
    # verification of q tokens: causal pairs sum_{i=1..q} (ctx + i); lm_head on every position
    q, B = 5, 3
    pairs = q * ctx + q * (q + 1) / 2
    assert spec.step_flops(B, q, ctx) == pytest.approx(B * (2 * matmul * q + L * 4 * nq * hd * pairs + 2 * V * h * q))
    assert spec.step_flops(B, q, ctx, sampled=1) == pytest.approx(
        B * (2 * matmul * q + L * 4 * nq * hd * pairs + 2 * V * h))


def test_flops_mla_and_window():
    ds = load_model("DeepSeek-V3")
    assert ds.attn_flops_per_pair_full == 61 * (2 * 128 * (512 + 64) + 2 * 128 * 512)
    g = load_model("gemma-4-26B-A4B-it")
    # past the window only the 5 global layers (16 heads x 512) add attention FLOPs
    d = g.flops_per_token(20_000) - g.flops_per_token(10_000)
    assert d == pytest.approx(10_000 * 5 * 4 * 16 * 512)
    # below the window every layer grows
    d = g.flops_per_token(600) - g.flops_per_token(100)
    assert d == pytest.approx(500 * (5 * 4 * 16 * 512 + 25 * 4 * 16 * 256))


def test_broadcasting_shapes():
    spec = load_model("gemma-4-26B-A4B-it")
    B = np.array([1, 2, 4, 8])[:, None, None]
    q = np.array([1, 4, 8])[None, :, None]
    L = np.array([0, 512, 4096, 32768, 131072])[None, None, :]
    f = spec.step_flops(B, q, L)
    assert f.shape == (4, 3, 5)
    assert spec.step_weight_bytes(B * q).shape == (4, 3, 1)
    assert spec.kv_bytes_per_seq(L).shape == (1, 1, 5)
    # elementwise equal to scalar calls
    assert f[2, 1, 3] == pytest.approx(spec.step_flops(4, 4, 32768))


# ------------------------------------------------------------------ hypothesis invariants
moe_cfg = st.fixed_dictionaries(dict(
    hidden_size=st.sampled_from([64, 128, 256]),
    num_hidden_layers=st.integers(1, 6),
    num_attention_heads=st.sampled_from([4, 8]),
    num_key_value_heads=st.sampled_from([1, 2, 4]),
    intermediate_size=st.integers(16, 512),
    vocab_size=st.integers(10, 5000),
    tie_word_embeddings=st.booleans(),
    n_routed_experts=st.integers(0, 64),
    num_experts_per_tok=st.integers(1, 8),
    moe_intermediate_size=st.integers(8, 128),
    first_k_dense_replace=st.integers(0, 2),
    n_shared_experts=st.integers(0, 2),
    sliding_window=st.sampled_from([None, 16, 128]),
)).filter(lambda c: c["n_routed_experts"] == 0 or c["num_experts_per_tok"] <= c["n_routed_experts"])


@settings(max_examples=60, deadline=None)
@given(cfg=moe_cfg, t=st.lists(st.floats(1, 1e5), min_size=2, max_size=6),
       prec=st.sampled_from(sorted(BYTES_PER_WEIGHT)))
def test_step_weight_bytes_monotone_and_bounded(cfg, t, prec):
    spec = ModelSpec.from_hf_config(cfg)
    t = np.sort(np.asarray(t))
    b = spec.step_weight_bytes(t, prec)
    assert np.all(np.diff(b) >= -1e-9 * b[:-1])
    assert np.all(b <= spec.weight_bytes(prec) + spec.lm_head_params * bytes_per_weight(prec) + 1e-6)
    assert np.all(b <= spec.weight_bytes(prec) * (1 + 1e-12))
    assert spec.total_params >= spec.active_params > 0


@settings(max_examples=60, deadline=None)
@given(cfg=moe_cfg, L=st.lists(st.floats(0, 1e6), min_size=2, max_size=6),
       B=st.integers(1, 64), q=st.integers(1, 16))
def test_kv_and_flops_monotone(cfg, L, B, q):
    spec = ModelSpec.from_hf_config(cfg)
    L = np.sort(np.asarray(L))
    kv = spec.kv_bytes_per_seq(L)
    assert np.all(np.diff(kv) >= 0)
    if spec.sliding_window:
        assert np.all(kv <= spec.kv_bytes_per_token(layers="full") * L
                      + spec.kv_bytes_per_token(layers="sliding") * spec.sliding_window + 1e-6)
    f = spec.step_flops(B, q, L)
    assert np.all(np.diff(f) >= 0)
    assert np.all(spec.step_flops(B + 1, q, L) > f)
    assert np.all(spec.step_flops(B, q + 1, L) > f)


# ------------------------------------------------------------------ parsing
def test_minimal_llama_dict_and_from_dims():
    d = dict(hidden_size=4096, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8,
             intermediate_size=14336, vocab_size=32000)
    a = ModelSpec.from_hf_config(d, name="eagle-head")
    b = ModelSpec.from_dims(name="eagle-head", **d)
    assert a.total_params == b.total_params
    assert a.attention_params == 4096 * 128 * (32 + 8 + 8 + 32)
    assert a.dense_mlp_params == 3 * 4096 * 14336
    assert a.head_dim == 128 and a.num_moe_layers == 0 and a.weight_dtype == "bf16"


def test_nested_text_config_and_paths(tmp_path):
    flat = _doc("Qwen3-8B")["config"]
    nested = {"model_type": "wrapper_vl", "architectures": ["X"], "tie_word_embeddings": False,
              "vision_config": {"hidden_size": 1}, "text_config": flat}
    assert ModelSpec.from_hf_config(nested).total_params == ModelSpec.from_hf_config(flat).total_params
    p = tmp_path / "m"
    p.mkdir()
    (p / "config.json").write_text(json.dumps(flat))
    assert ModelSpec.from_hf_config(p).total_params == load_model("Qwen3-8B").total_params
    assert ModelSpec.from_hf_config(p / "config.json", name="x").name == "x"


def test_scaled_one_layer():
    spec = load_model("Llama-3.1-8B-Instruct")
    one = spec.scaled(num_hidden_layers=1, name="one")
    assert one.num_layers == 1 and one.name == "one"
    per_layer = (spec.total_params - spec.embedding_params - spec.lm_head_params - spec.hidden_size) / 32
    assert one.total_params - one.embedding_params - one.lm_head_params - one.hidden_size == per_layer
    g = load_model("gemma-4-26B-A4B-it").scaled(num_hidden_layers=6)
    assert g.layer_types == ("sliding",) * 5 + ("full",)


def test_layer_placement():
    ds, kimi, mm, g = (load_model(n) for n in ("DeepSeek-V3", "Kimi-K2.5", "MiniMax-M2.5", "gemma-4-26B-A4B-it"))
    assert (ds.num_moe_layers, kimi.num_moe_layers, mm.num_moe_layers, g.num_moe_layers) == (58, 60, 62, 30)
    assert ds.dense_mlp_params == 3 * 3 * 7168 * 18432 + 58 * 3 * 7168 * 2048
    assert g.dense_mlp_params == 30 * 3 * 2816 * 2112 and g.num_shared_experts == 1
    assert ds.num_mtp_layers == 1 and mm.num_mtp_layers == 3 and kimi.num_mtp_layers == 0


@pytest.mark.parametrize("cfg,field", [
    ({"model_type": "t5", "d_model": 512, "num_layers": 6}, "model_type"),
    ({"is_encoder_decoder": True, "hidden_size": 8}, "is_encoder_decoder"),
    ({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 8}, "hidden_size"),
    ({"hidden_size": "NOT FOUND", "num_hidden_layers": 2}, "hidden_size"),
    ({"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}, "intermediate_size"),
    ({"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 8,
      "layer_types": ["full_attention"]}, "layer_types"),
    ({"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 8,
      "layer_types": ["mamba"]}, "layer_types[0]"),
    ({"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 8,
      "num_local_experts": 4}, "num_experts_per_tok"),
])
def test_bad_configs_name_the_field(cfg, field):
    with pytest.raises(SpecsimValueError) as ei:
        ModelSpec.from_hf_config(cfg)
    assert ei.value.field == field


def test_load_model_names():
    assert load_model("Qwen/Qwen3-8B").name == "Qwen3-8B"
    assert load_model("qwen3-8b").total_params == load_model("Qwen3-8B").total_params
    assert load_model("meta-llama/Llama-3.1-8B-Instruct").name == "Llama-3.1-8B-Instruct"
    with pytest.raises(SpecsimValueError) as ei:
        load_model("gpt-5")
    assert "Qwen3-8B" in ei.value.allowed
