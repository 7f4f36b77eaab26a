"""Refusals a new user met while trying ``recommend`` / ``predict`` on their own question: each names
the argument the user typed (library keyword or CLI flag), not an internal parameter."""
from __future__ import annotations

import pytest

import specsim
from specsim.cli import main
from specsim.errors import SpecsimValueError

LLAMA = dict(hardware="MI300X", tp=8, acceptance=0.7)


@pytest.mark.parametrize("call", [
    lambda: specsim.predict("Llama-3.3-70B-Instruct", "draft_model", 3, concurrency=1, **LLAMA),
    lambda: specsim.sweep("Llama-3.3-70B-Instruct", "draft_model", num_speculative_tokens=[1, 2], concurrency=1, **LLAMA),
    lambda: specsim.best_n("Llama-3.3-70B-Instruct", "draft_model", n_values=[1, 2], concurrency=1, **LLAMA),
    lambda: specsim.recommend("Llama-3.3-70B-Instruct", "draft_model", concurrency=[1], **LLAMA),
], ids=["predict", "sweep", "best_n", "recommend"])
def test_draft_model_without_a_draft_names_draft(call):
    # it said "draft_model: method 'draft_model' needs a draft model": the method's name, not the keyword
    with pytest.raises(SpecsimValueError) as e:
        call()
    assert e.value.field == "draft"
    assert "draft=" in str(e.value) and "--draft" in str(e.value)


@pytest.mark.parametrize("command", ["predict", "recommend"])
def test_cli_draft_model_without_draft_names_the_flag(command, capsys):
    argv = [command, "--target", "Llama-3.3-70B-Instruct", "--method", "draft_model", "--tp", "8",
            "--acceptance", "0.7", "--concurrency", "1"] + (["-n", "3"] if command == "predict" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: draft:") and "--draft" in err, err


def test_recommend_max_n_refusal_names_the_flag(capsys):
    # it named the library keyword max_num_speculative_tokens, which the command line does not have
    assert main(["recommend", "--target", "Qwen3-8B", "--method", "eagle3", "--concurrency", "1", "--max-n", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error: --max-n: must be an integer >= 1 (got 0)"), err


def test_best_n_n_values_none_is_refused_by_name():
    # it raised Python's "TypeError: 'NoneType' object is not iterable"
    with pytest.raises(SpecsimValueError) as e:
        specsim.best_n("Qwen3-8B", "eagle3", n_values=None, acceptance=0.7, concurrency=1)
    assert e.value.field == "n_values"


def test_a_published_acceptance_profile_is_taken_as_its_profile():
    """``specsim.published.published_profile(...)`` returns an AcceptanceProfile; predict / sweep refused it as
    ``rates: must be a sequence of numbers`` (from_rates' parameter, with the profile's whole repr)."""
    from specsim.published import published_profile

    prof = published_profile("gemma-4-26B-A4B-it", "dflash")
    kw = dict(hardware="MI300X", tp=2, concurrency=32)
    got = specsim.predict("gemma-4-26B-A4B-it", "dflash", 7, acceptance=prof, **kw)
    want = specsim.predict("gemma-4-26B-A4B-it", "dflash", 7, acceptance=prof.acceptance, **kw)
    assert got.throughput_ratio == want.throughput_ratio and got.mal == want.mal
    df = specsim.sweep("gemma-4-26B-A4B-it", "dflash", num_speculative_tokens=[7], acceptance=prof, **kw)
    assert df["throughput_ratio"].iloc[0] == want.throughput_ratio


@pytest.mark.parametrize("bad,shown", [(["a", "b"], "['a', 'b']"), (object(), "'object'"), ([[0.5]], "[[0.5]]")])
def test_acceptance_that_is_no_profile_is_refused_naming_acceptance(bad, shown):
    with pytest.raises(SpecsimValueError) as e:
        specsim.predict("gemma-4-26B-A4B-it", "dflash", 7, hardware="MI300X", tp=2, concurrency=32, acceptance=bad)
    assert e.value.field == "acceptance" and f"(got {shown})" in str(e.value), str(e.value)


def test_recommend_without_a_method_for_a_target_with_no_published_acceptance_names_the_target():
    # it said "method: no published acceptance for this target ... (got 'Llama-3.3-70B-Instruct')": the target
    # shown as the method's value
    with pytest.raises(SpecsimValueError) as e:
        specsim.recommend("Llama-3.3-70B-Instruct", hardware="MI300X", tp=8, concurrency=[1])
    assert e.value.field == "method" and e.value.value is None
    assert "Llama-3.3-70B-Instruct" in e.value.rule and "--method" in e.value.rule
