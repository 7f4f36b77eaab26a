"""The deployment-stack options after a new-user review: ``--platform`` compares the platform's
version too, a measured latency table that does not cover the context / concurrencies / q asked is
refused with its range and what to pass, the ``expert_parallel`` at tp=1 warning is carried by
predict, sweep and recommend alike, and ``specsim predict`` takes the same stack flags as sweep and
recommend (``specsim.cli._args.add_stack_args``)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from specsim.errors import SpecsimValueError

MOE = dict(hardware="MI300X", acceptance=0.7)
MOE_ARGS = ["--target", "Qwen3.6-35B-A3B", "--method", "mtp", "--hardware", "MI300X", "--acceptance", "0.7"]
DENSE_ARGS = ["--target", "Qwen3-8B", "--method", "eagle3", "--hardware", "MI300X", "--acceptance", "0.7"]


def _rec(hw: str = "MI300X"):
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware

    return default_latency(load_hardware(hw)).calibration


def _probe_table(batches=(1, 4, 16), qs=(1, 2, 4, 8, 16), contexts=(512,)) -> pd.DataFrame:
    """A table like the verification-cost probe's: one context (ISL + OSL/2 = 512), batches 1-16,
    q 1-16; seconds sampled from the shipped MI300X roofline of Qwen3-8B."""
    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware

    rl = default_latency(load_hardware("MI300X"))
    m = load_model("Qwen3-8B")
    rows = [(b, q, c, float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
            for b in batches for q in qs for c in contexts]
    return pd.DataFrame(rows, columns=["batch", "q", "context", "seconds"])


# ---- 1. --platform: name and MAJOR.MINOR ------------------------------------------------------------

def test_platform_version_is_compared_when_both_sides_give_one():
    from specsim.calibration import stack_mismatch

    rec = _rec("MI300X")
    assert rec.stack["platform"] == "ROCm 7.2"
    w = stack_mismatch(rec, platform="ROCm 6.4")
    assert w is not None and "software stack" in w
    assert "platform ROCm 6.4 (calibration: ROCm 7.2; same platform rocm, another release: 6.4 vs 7.2)" in w
    assert "ROCm 8.2" in stack_mismatch(rec, platform="ROCm 8.2")  # the major counts too
    assert "7.10 vs 7.2" in stack_mismatch(rec, platform="ROCm 7.10")  # numbers, not strings
    assert "6.4 vs 7.2" in stack_mismatch(rec, platform="rocm v6.4")
    # the same release (any patch), or no version on one side: no warning
    for same in ("ROCm 7.2", "rocm 7.2.1", "ROCM", "ROCm (MI300X nodes)"):
        assert stack_mismatch(rec, platform=same) is None, same
    # another platform: said so, by name
    w = stack_mismatch(rec, platform="CUDA 12.8")
    assert "platform CUDA 12.8 (calibration: ROCm 7.2; another platform: cuda vs rocm)" in w
    # a calibration recorded without a version: only the name is compared
    h = _rec("H100")
    assert h.stack["platform"] == "CUDA"
    assert stack_mismatch(h, platform="CUDA 12.8") is None
    assert "another platform: rocm vs cuda" in stack_mismatch(h, platform="ROCm 7.2")
    # both declared: both in the one warning
    w = stack_mismatch(rec, vllm_version="0.33.0", platform="ROCm 6.4")
    assert "vLLM 0.33.0" in w and "6.4 vs 7.2" in w


def test_platform_refusals_name_what_is_allowed():
    from specsim.calibration import stack_mismatch

    with pytest.raises(SpecsimValueError, match=r"platform: must name a vLLM platform \(first word\).*rocm"):
        stack_mismatch(_rec(), platform="Gaudi 3")
    for bad in ("ROCm 7", "CUDA 12.x", "rocm 7.x.1"):
        with pytest.raises(SpecsimValueError, match=r"platform: must be a vLLM platform, optionally followed by its "
                                                    r"version MAJOR\.MINOR.*'ROCm 7\.2'") as e:
            stack_mismatch(None, platform=bad)
        assert e.value.field == "platform" and e.value.value == bad


def test_platform_release_mismatch_reaches_predict_sweep_recommend_and_the_cli(capsys):
    from specsim.cli import main
    from specsim.predict import predict, sweep
    from specsim.recommend import recommend

    kw = dict(hardware="MI300X", acceptance=0.7)
    w = [x for x in predict("Qwen3-8B", "eagle3", 3, platform="ROCm 6.4", **kw).warnings if "software stack" in x]
    assert len(w) == 1 and "6.4 vs 7.2" in w[0]
    assert not any("software stack" in x for x in predict("Qwen3-8B", "eagle3", 3, platform="ROCm 7.2.0",
                                                          **kw).warnings)
    df = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[1, 4], platform="ROCm 6.4", **kw)
    assert df.attrs["warnings"] == tuple(w)
    rec = recommend("Qwen3-8B", "eagle3", concurrency=[1, 4], max_num_speculative_tokens=3, platform="ROCm 6.4", **kw)
    assert rec.warnings == tuple(w)
    assert main(["predict", *DENSE_ARGS, "-n", "3", "--platform", "ROCm 6.4"]) == 0
    assert "6.4 vs 7.2" in capsys.readouterr().out
    rc = main(["predict", *DENSE_ARGS, "-n", "3", "--platform", "ROCm 7"])
    err = capsys.readouterr().err
    assert rc == 2 and "platform: must be a vLLM platform" in err and "Traceback" not in err


# ---- 2. a measured table that does not cover what is asked ------------------------------------------

CONTEXT_MSG = (r"context: the measured latency table covers context 512 tokens, but ISL 1024 \+ OSL 1024/2 = 1536 "
               r"tokens is asked \(specsim times every decode / verification step at a request's mean context, "
               r"ISL \+ OSL/2\): pass --isl / --osl \(isl= / osl=\) with ISL \+ OSL/2 = 512 tokens \(e\.g\. "
               r"--isl 256 --osl 512: 256 \+ 512/2 = 512\), or record a latency table covering context 1536")


def test_predict_outside_the_tables_context_says_the_range_the_context_and_the_fix():
    from specsim.latency import MeasuredLatency
    from specsim.predict import predict

    lat = MeasuredLatency(_probe_table())
    with pytest.raises(SpecsimValueError, match=CONTEXT_MSG) as e:
        predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=lat)  # ISL/OSL 1024/1024
    assert e.value.field == "context" and e.value.value == 1536
    # the suggested ISL / OSL is inside the table: it predicts
    p = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=lat, isl=256, osl=512)
    assert p.throughput_ratio > 0
    # OSL kept when it can be
    with pytest.raises(SpecsimValueError, match=r"ISL 1024 \+ OSL 128/2 = 1088 tokens.*e\.g\. --isl 448 --osl 128"):
        predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=lat, osl=128)
    # a table over a range, and one accepting an extrapolation factor: both ranges said
    wide = MeasuredLatency(_probe_table(contexts=(256, 1024, 4096)))
    with pytest.raises(SpecsimValueError, match=r"covers contexts 256-4096 tokens, but ISL 8192 \+ OSL 1024/2 = 8704"
                                                r".*inside 256-4096 tokens"):
        predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=wide, isl=8192)
    f2 = MeasuredLatency(_probe_table(contexts=(256, 1024)), max_extrapolation=1.25)
    with pytest.raises(SpecsimValueError, match=r"contexts 256-1024 tokens \(accepted 204\.8-1280 with its "
                                                r"max_extrapolation\).*inside 204\.8-1280 tokens"):
        predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=f2)
    # outside="clamp" answers at the edge: nothing refused
    clamp = MeasuredLatency(_probe_table(), outside="clamp")
    assert predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=clamp).throughput_ratio > 0


def test_sweep_and_recommend_outside_the_tables_context_say_the_same():
    from specsim.latency import MeasuredLatency
    from specsim.predict import sweep
    from specsim.recommend import recommend

    lat = MeasuredLatency(_probe_table())
    with pytest.raises(SpecsimValueError, match=CONTEXT_MSG):
        sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], concurrency=[4], hardware="MI300X", acceptance=0.7,
              latency=lat)
    # a grid: the first ISL / OSL pair outside is named
    with pytest.raises(SpecsimValueError, match=r"covers context 512 tokens, but ISL 1024 \+ OSL 512/2 = 1280 tokens"
                                                r".*e\.g\. --isl 256 --osl 512"):
        sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], concurrency=[4], isl=[256, 1024], osl=512,
              hardware="MI300X", acceptance=0.7, latency=lat)
    assert len(sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], concurrency=[4], isl=256, osl=512,
                     hardware="MI300X", acceptance=0.7, latency=lat)) == 1
    with pytest.raises(SpecsimValueError, match=CONTEXT_MSG):
        recommend("Qwen3-8B", "eagle3", concurrency=[1, 4], hardware="MI300X", acceptance=0.7, latency=lat)


def test_cli_predict_outside_the_tables_context(tmp_path, capsys):
    from specsim.cli import main

    f = tmp_path / "verify_cost.csv"
    _probe_table().to_csv(f, index=False)
    rc = main(["predict", *DENSE_ARGS, "-n", "3", "--latency-table", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"context: the measured latency table ({f}) covers context 512 tokens, but ISL 1024 + OSL 1024/2" in err
    assert "--isl 256 --osl 512" in err and "record a latency table covering context 1536" in err
    assert main(["predict", *DENSE_ARGS, "-n", "3", "--latency-table", str(f), "--isl", "256", "--osl", "512",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["isl"] == 256


BATCH_MSG = (r"batch: the measured latency table covers batches of 1-16 sequences per step, but recommend evaluates "
             r"every concurrency \(= batch\) 1\.\.256: its bands span 1 to the largest concurrency asked \(the default "
             r"--concurrency 1,2,4,8,16,32,64,128,256\): pass --concurrency \(concurrency=\) values inside 1-16, e\.g\. "
             r"--concurrency 1,2,4,8,16, or record a latency table covering batches 1-256")


def test_recommend_default_concurrencies_outside_the_table_say_its_batches_and_what_to_pass():
    from specsim.latency import MeasuredLatency
    from specsim.recommend import recommend

    lat = MeasuredLatency(_probe_table())
    kw = dict(hardware="MI300X", acceptance=0.7, isl=256, osl=512, latency=lat)
    with pytest.raises(SpecsimValueError, match=BATCH_MSG) as e:
        recommend("Qwen3-8B", "eagle3", **kw)
    assert e.value.field == "batch" and e.value.value == 17
    # the suggested concurrencies recommend
    rec = recommend("Qwen3-8B", "eagle3", concurrency=[1, 2, 4, 8, 16], **kw)
    assert rec.max_concurrency == 16 and rec.method("eagle3").points
    # concurrencies or a max given: said which
    with pytest.raises(SpecsimValueError, match=r"1\.\.32: .*the largest --concurrency / concurrency= value, 32\)"):
        recommend("Qwen3-8B", "eagle3", concurrency=[1, 32], **kw)
    with pytest.raises(SpecsimValueError, match=r"1\.\.40: .*--max-concurrency / max_concurrency= 40\).*"
                                                r"--concurrency 1,2,4,8,16 with --max-concurrency 16 or less"):
        recommend("Qwen3-8B", "eagle3", concurrency=[1, 4], max_concurrency=40, **kw)
    # a table up to 24: the suggestion ends at its top
    lat24 = MeasuredLatency(_probe_table(batches=(1, 4, 24)))
    with pytest.raises(SpecsimValueError, match=r"values inside 1-24, e\.g\. --concurrency 1,2,4,8,16,24,"):
        recommend("Qwen3-8B", "eagle3", **{**kw, "latency": lat24})
    # a table without batch 1: no concurrency range helps, said so
    lat4 = MeasuredLatency(_probe_table(batches=(4, 16)))
    with pytest.raises(SpecsimValueError, match=r"covers batches of 4-16 .*the table must cover batch 1"):
        recommend("Qwen3-8B", "eagle3", concurrency=[4, 16], **{**kw, "latency": lat4})


def test_recommend_n_beyond_the_tables_q_says_which_max_n():
    from specsim.latency import MeasuredLatency
    from specsim.recommend import recommend

    lat = MeasuredLatency(_probe_table(qs=(1, 2, 4, 8)))
    kw = dict(hardware="MI300X", acceptance=0.7, isl=256, osl=512, latency=lat, concurrency=[1, 4])
    with pytest.raises(SpecsimValueError, match=r"q: the measured latency table covers q of 1-8 query tokens per "
                                                r"sequence, but recommend considers N 1\.\.10 .*pass --max-n "
                                                r"\(max_num_speculative_tokens=\) 7 or less") as e:
        recommend("Qwen3-8B", "eagle3", max_num_speculative_tokens=10, **kw)
    assert e.value.field == "q" and e.value.value == 9
    assert recommend("Qwen3-8B", "eagle3", max_num_speculative_tokens=7, **kw).method("eagle3").points


def test_cli_recommend_default_concurrency_outside_the_table(tmp_path, capsys):
    from specsim.cli import main

    f = tmp_path / "verify_cost.csv"
    _probe_table().to_csv(f, index=False)
    rc = main(["recommend", *DENSE_ARGS, "--isl", "256", "--osl", "512", "--latency-table", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"batch: the measured latency table ({f}) covers batches of 1-16 sequences per step" in err
    assert "e.g. --concurrency 1,2,4,8,16" in err
    assert main(["recommend", *DENSE_ARGS, "--isl", "256", "--osl", "512", "--latency-table", str(f),
                 "--concurrency", "1,2,4,8,16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_concurrency"] == 16


def test_measured_latency_axis_range_and_refused():
    from specsim.latency import MeasuredLatency

    lat = MeasuredLatency(_probe_table(contexts=(256, 1024)), max_extrapolation=2.0)
    assert lat.axis_range("batch") == pytest.approx((1, 16))
    assert lat.axis_range("batch", accepted=True) == pytest.approx((0.5, 32))
    assert lat.axis_range("context") == (256, 1024) and lat.axis_range("context", accepted=True) == (128, 2048)
    assert lat.refused("batch", [1, 32, 33]).tolist() == [False, False, True]
    assert lat.refused("context", [127, 128, 2048, 2049]).tolist() == [True, False, False, True]
    with pytest.raises(SpecsimValueError, match="axis: unknown axis.*context"):
        lat.axis_range("seconds")
    assert not MeasuredLatency(_probe_table(), outside="clamp").refused("batch", [1000]).any()
    # breakdown's own refusal: units and the values asked (not exp(log(x)))
    from specsim.architecture import load_model

    strict = MeasuredLatency(_probe_table())
    with pytest.raises(SpecsimValueError, match=r"batch: outside the measured table range \[1, 16\] sequences per "
                                                r"step .*\(got \[17\.0, 18\.0, 19\.0\]\)"):
        strict.forward_time(load_model("Qwen3-8B"), tp=1, batch=[[17], [18], [19], [18]], q=1, context=512)


# ---- 3. expert_parallel at tp=1: one warning, in predict, sweep and recommend -----------------------------

def test_expert_parallel_tp1_warning_in_predict_sweep_and_recommend():
    from specsim.predict import EXPERT_PARALLEL_TP1_WARNING, predict, sweep
    from specsim.recommend import recommend

    w = EXPERT_PARALLEL_TP1_WARNING
    assert w.startswith("expert_parallel with tp=1") and "changes nothing" in w
    p = predict("Qwen3.6-35B-A3B", "mtp", 3, tp=1, expert_parallel=True, **MOE)
    assert p.warnings.count(w) == 1
    assert w not in predict("Qwen3.6-35B-A3B", "mtp", 3, tp=2, expert_parallel=True, **MOE).warnings
    assert w not in predict("Qwen3.6-35B-A3B", "mtp", 3, tp=1, **MOE).warnings
    # sweep: once for the sweep, not per row; only when a swept TP is 1
    df = sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[1, 3], concurrency=[1, 16], tp=1,
               expert_parallel=True, **MOE)
    assert df.attrs["warnings"] == (w,)
    both = sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[3], concurrency=[1], tp=[1, 2],
                 acceptance={"lo": 0.6, "hi": 0.8}, hardware="MI300X", expert_parallel=True)
    assert both.attrs["warnings"] == (w,)
    assert sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[3], concurrency=[1], tp=2, expert_parallel=True,
                 **MOE).attrs["warnings"] == ()
    assert sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[3], concurrency=[1], tp=1,
                 **MOE).attrs["warnings"] == ()
    # with a stack mismatch too: both, each once
    two = sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[3], concurrency=[1], tp=1, expert_parallel=True,
                vllm_version="0.33.0", **MOE)
    assert len(two.attrs["warnings"]) == 2 and w in two.attrs["warnings"]
    # recommend: once, however many methods
    rec = recommend("Qwen3.6-35B-A3B", ["mtp", "ngram"], tp=1, concurrency=[1, 4], max_num_speculative_tokens=3,
                    expert_parallel=True, **MOE)
    # (beside it: the ngram config's lookup-window warning, which is about the config, not the stack)
    others = [x for x in rec.warnings if not x.startswith("ngram: the recommended speculative config gives no")]
    assert others == [w] and len(rec.warnings) == 2 and f"WARNING: {w}" in rec.summary()
    assert rec.to_dict()["warnings"] == list(rec.warnings)
    assert recommend("Qwen3.6-35B-A3B", "mtp", tp=2, concurrency=[1, 4], max_num_speculative_tokens=3,
                     expert_parallel=True, **MOE).warnings == ()


def test_cli_expert_parallel_tp1_warning_in_the_three_commands(capsys):
    from specsim.cli import main
    from specsim.predict import EXPERT_PARALLEL_TP1_WARNING as W

    assert main(["predict", *MOE_ARGS, "-n", "3", "--expert-parallel"]) == 0
    assert capsys.readouterr().out.count(W) == 1
    assert main(["sweep", *MOE_ARGS, "-n", "1,3", "--concurrency", "1,4", "--expert-parallel"]) == 0
    cap = capsys.readouterr()
    assert cap.err.count(f"specsim: WARNING: {W}") == 1 and W not in cap.out
    assert main(["recommend", *MOE_ARGS, "--concurrency", "1,4", "--max-n", "3", "--expert-parallel"]) == 0
    assert capsys.readouterr().out.count(f"WARNING: {W}") == 1
    assert main(["sweep", *MOE_ARGS, "--tp", "2", "-n", "1", "--concurrency", "1", "--expert-parallel"]) == 0
    assert W not in capsys.readouterr().err


# ---- 4. specsim predict takes add_stack_args --------------------------------------------------------------

def _options(parser) -> dict:
    return {s: a for a in parser._actions for s in a.option_strings}


def test_predict_sweep_recommend_share_the_stack_flags():
    from specsim.cli import build_parser

    ap = build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction").choices
    flags = ("--vllm-version", "--platform", "--expert-parallel", "--latency-table")
    opts = {cmd: _options(sub[cmd]) for cmd in ("predict", "sweep", "recommend")}
    for f in flags:
        got = {cmd: (o[f].dest, o[f].help, type(o[f]).__name__, o[f].default) for cmd, o in opts.items()}
        assert got["predict"] == got["sweep"] == got["recommend"], f
    ns = ap.parse_args(["predict", *DENSE_ARGS, "-n", "3", "--vllm-version", "0.33.0", "--platform", "ROCm 6.4",
                        "--latency-table", "t.csv"])
    assert (ns.vllm_version, ns.platform, ns.expert_parallel, ns.latency_table) == ("0.33.0", "ROCm 6.4", False,
                                                                                   "t.csv")
