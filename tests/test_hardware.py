"""Tests of specsim.hardware: specsim/data/hardware.csv values, aliases, precision → peak mapping."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from specsim.errors import SpecsimValueError
from specsim.hardware import (
    PRECISIONS,
    list_hardware,
    load_hardware,
    measure_copy_bandwidth,
)

GIB = 2**30

# Datasheet dense values typed in independently of the CSV (sources: ROCm mi300.md peak table,
# NVIDIA H100 datasheet dense = half the 'with sparsity' figure, AMD MI355X page MXFP4 10.1 PF).
DATASHEET = {
    "MI300X": dict(hbm_gib=192, bw=5.3e12, bf16=1307.4e12, fp8=2614.9e12, fp4=None, link=448e9),
    "MI355X": dict(hbm_gib=288, bw=8.0e12, bf16=2516.6e12, fp8=5033.2e12, fp4=10.1e15, link=535.5e9),
    "H100 SXM": dict(hbm_gib=80, bw=3.35e12, bf16=989e12, fp8=1979e12, fp4=None, link=450e9),
    "H200 SXM": dict(hbm_gib=141, bw=4.8e12, bf16=989e12, fp8=1979e12, fp4=None, link=450e9),
    "B200 SXM": dict(hbm_gib=180, bw=8.0e12, bf16=2250e12, fp8=4500e12, fp4=9000e12, link=900e9),
    "A100 80GB SXM": dict(hbm_gib=80, bw=2.0e12, bf16=312e12, fp8=None, fp4=None, link=300e9),
}


def test_table_has_required_rows_columns_and_sources():
    df = list_hardware()
    for name in ["MI300X", "MI325X", "MI355X", "MI350X", "H100 SXM", "H200 SXM", "B200 SXM", "A100 80GB SXM",
                 "cpu-2core-avx2"]:
        assert name in set(df["name"]), name
    for col in ["hbm_bytes", "mem_bandwidth_bytes_per_s", "peak_bf16_flops_per_s", "peak_fp16_flops_per_s",
                "peak_fp8_flops_per_s", "peak_fp4_flops_per_s", "link_bandwidth_bytes_per_s", "vendor",
                "architecture", "kind", "source"]:
        assert col in df.columns, col
    assert df["source"].str.len().min() > 20
    assert set(df["kind"]) == {"gpu", "cpu"}
    # SI units: bandwidths in bytes/s, FLOP/s, capacities in bytes
    gpus = df[df["kind"] == "gpu"]
    assert gpus["mem_bandwidth_bytes_per_s"].between(1e12, 2e13).all()
    assert gpus["peak_bf16_flops_per_s"].between(1e14, 1e16).all()
    assert gpus["hbm_bytes"].between(64 * GIB, 512 * GIB).all()


@pytest.mark.parametrize("name", list(DATASHEET))
def test_values_match_datasheet_dense(name):
    hw = load_hardware(name)
    ref = DATASHEET[name]
    assert hw.hbm_bytes == ref["hbm_gib"] * GIB
    assert hw.mem_bandwidth_bytes_per_s == pytest.approx(ref["bw"], rel=1e-9)
    assert hw.peak_flops_per_s["bf16"] == pytest.approx(ref["bf16"], rel=1e-9)
    assert hw.peak_flops_per_s["fp16"] == pytest.approx(ref["bf16"], rel=1e-9)
    for key in ("fp8", "fp4"):
        if ref[key] is None:
            assert key not in hw.peak_flops_per_s
        else:
            assert hw.peak_flops_per_s[key] == pytest.approx(ref[key], rel=1e-9)
    assert hw.link_bandwidth_bytes_per_s == pytest.approx(ref["link"], rel=1e-9)
    assert hw.kind == "gpu" and hw.source


def test_mi350x_is_mi355x_scaled_by_clock():
    a, b = load_hardware("MI350X"), load_hardware("MI355X")
    for key in ("bf16", "fp8"):
        assert a.peak_flops_per_s[key] == pytest.approx(b.peak_flops_per_s[key] * 2200 / 2400, rel=1e-4)
    # CDNA4 runs MXFP4 at 4x the bf16 rate: the MI350X row is derived as exactly 4 x bf16, while
    # the MI355X row keeps AMD's published 10.1 PF, rounded from 4 x 2516.6 = 10066.4 TFLOP/s.
    assert a.peak_flops_per_s["fp4"] == pytest.approx(4 * a.peak_flops_per_s["bf16"], rel=1e-4)
    assert b.peak_flops_per_s["fp4"] == pytest.approx(4 * b.peak_flops_per_s["bf16"], rel=5e-3)


@pytest.mark.parametrize("alias,name", [
    ("MI300X", "MI300X"), ("mi300x", "MI300X"), ("MI-300X", "MI300X"), ("mi355x", "MI355X"),
    ("H100", "H100 SXM"), ("H100 SXM", "H100 SXM"), ("h100_sxm", "H100 SXM"), ("h200", "H200 SXM"),
    ("B200", "B200 SXM"), ("a100", "A100 80GB SXM"), ("A100-80GB", "A100 80GB SXM"),
    ("cpu-2core-avx2", "cpu-2core-avx2"), ("CPU", "cpu-2core-avx2"),
])
def test_aliases(alias, name):
    assert load_hardware(alias).name == name


def test_unknown_name_lists_allowed():
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware("TPUv5")
    err = ei.value
    assert err.field == "hardware"
    assert "MI300X" in err.allowed and "H100 SXM" in err.allowed and "cpu-2core-avx2" in err.allowed
    assert "TPUv5" in str(err)


def test_hardware_instance_passes_through():
    hw = load_hardware("mi300x")
    assert load_hardware(hw) is hw


def test_peak_flops_mapping():
    mi300, mi355, h100, a100 = (load_hardware(n) for n in ("MI300X", "MI355X", "H100", "A100"))
    # bf16/fp16/int4 -> bf16 peak
    for p in ("bf16", "fp16", "int4"):
        assert mi300.peak_flops(p) == 1307.4e12
    assert mi300.peak_flops("fp8") == 2614.9e12
    # mxfp4: fp4 peak where present, else bf16 (vLLM's W4A16 kernels: Marlin, OAI Triton, AITER a16w4)
    assert mi355.peak_flops("mxfp4") == 10.1e15
    assert mi300.peak_flops("mxfp4") == 1307.4e12
    assert h100.peak_flops("mxfp4") == 989e12
    assert a100.peak_flops("mxfp4") == 312e12
    # fp32 on a GPU without an fp32 entry: bf16 / 2
    assert h100.peak_flops("fp32") == pytest.approx(989e12 / 2)
    # fp8 on a GPU without FP8 units: weight-only FP8 (vLLM's FP8 Marlin kernel), bf16 math
    assert a100.peak_flops("fp8") == 312e12
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware("cpu-2core-avx2").peak_flops("fp8")
    assert ei.value.field == "precision" and "fp8" not in ei.value.allowed and "fp32" in ei.value.allowed
    with pytest.raises(SpecsimValueError):
        h100.peak_flops("int8")


def test_every_precision_resolves_on_fp4_gpu():
    b200 = load_hardware("B200")
    for p in PRECISIONS:
        assert b200.peak_flops(p) > 0


def test_cpu_row():
    cpu = load_hardware("cpu-2core-avx2")
    df = list_hardware().set_index("name")
    row = df.loc["cpu-2core-avx2"]
    assert cpu.kind == "cpu"
    assert cpu.link_bandwidth_bytes_per_s is None
    # DERIVED peak: cores * clock * 16 fp32 FLOP/cycle-pipe (2 FMA x 8 lanes) * 2
    assert cpu.peak_flops("fp32") == pytest.approx(row["compute_units"] * row["clock_hz"] * 16 * 2, rel=1e-12)
    assert 1e9 < cpu.mem_bandwidth_bytes_per_s < 1e12
    assert "measured here, numpy copy" in cpu.source and "DERIVED" in cpu.source
    with pytest.raises(SpecsimValueError):
        cpu.peak_flops("bf16")  # CPU rows give fp32 only
    assert cpu.ridge_point_flops_per_byte["fp32"] == pytest.approx(
        cpu.peak_flops("fp32") / cpu.mem_bandwidth_bytes_per_s)


def test_measure_copy_bandwidth_small():
    bw = measure_copy_bandwidth(nbytes=8 * 2**20, repeats=2)
    assert 1e8 < bw < 1e13 and math.isfinite(bw)
    with pytest.raises(SpecsimValueError):
        measure_copy_bandwidth(nbytes=1000)
    with pytest.raises(SpecsimValueError):
        measure_copy_bandwidth(repeats=0)


def test_hardware_is_frozen_and_hashable():
    hw = load_hardware("H200")
    with pytest.raises(Exception):
        hw.name = "x"  # type: ignore[misc]
    assert hash(hw) == hash(load_hardware("h200"))
    assert isinstance(list_hardware(), pd.DataFrame)
    assert np.isnan(list_hardware().set_index("name").loc["MI300X", "peak_fp4_flops_per_s"])


# --------------------------------------------------------------------------------------------
# a part the catalog does not ship: a JSON spec file of hardware.csv's columns


_SPEC = {"name": "Example GPU 96G", "vendor": "ExampleCo", "hbm_bytes": 96 * 2**30,
         "mem_bandwidth_bytes_per_s": 1.8e12, "peak_bf16_flops_per_s": 5.0e14, "peak_fp8_flops_per_s": 1.0e15,
         "link_bandwidth_bytes_per_s": 5.0e10, "source": "example datasheet (test)"}


def _spec_file(tmp_path, **over):
    d = {k: v for k, v in {**_SPEC, **over}.items() if v is not None}
    p = tmp_path / "gpu.json"
    p.write_text(json.dumps(d))
    return p


def test_hardware_from_a_spec_file(tmp_path):
    from specsim.hardware import hardware_from_file
    from specsim.predict import predict

    p = _spec_file(tmp_path)
    hw = load_hardware(str(p))
    assert hw == hardware_from_file(p) and load_hardware(p) == hw  # str path, Path, direct
    assert (hw.name, hw.vendor, hw.kind, hw.hbm_bytes) == ("Example GPU 96G", "ExampleCo", "gpu", 96 * 2**30)
    assert hw.peak_flops_per_s == {"bf16": 5.0e14, "fp8": 1.0e15} and hw.link_bandwidth_bytes_per_s == 5.0e10
    assert hw.peak_flops("fp8") == 1.0e15 and str(p) in hw.source
    # the roofline uses the file's numbers: a memory-bound decode step scales with 1 / bandwidth
    kw = dict(acceptance=0.7, concurrency=1, isl=512, osl=128)
    a = predict("Qwen3-8B", "eagle3", 3, hardware=str(p), **kw)
    b = predict("Qwen3-8B", "eagle3", 3, hardware=str(_spec_file(tmp_path, mem_bandwidth_bytes_per_s=3.6e12)), **kw)
    assert a.latency_calibrated is False and any("no stack calibration ships for Example GPU 96G" in w
                                                 for w in a.warnings)
    assert b.t_base_s < a.t_base_s  # twice the bandwidth: a faster step
    assert predict("Qwen3-8B", "eagle3", 3, hardware=str(p), tp=2, **kw).tp == 2


@pytest.mark.parametrize("over, field, words", [
    ({"peak_fp9_flops_per_s": 1.0}, "hardware", "unknown keys"),
    # a row of hardware.csv copied whole (a new-user trial): says why its aliases column is not a spec file's
    ({"aliases": "MyGPU"}, "hardware", "unknown keys ['aliases']: aliases are the catalog's other names for a part"),
    ({"source": None}, "hardware", "missing"),
    ({"peak_bf16_flops_per_s": None, "peak_fp8_flops_per_s": None}, "hardware", "at least one dense peak"),
    ({"name": "mi300x"}, "hardware", "shipped accelerator 'MI300X'"),
    ({"hbm_bytes": -1}, "hbm_bytes", "> 0"),
    ({"hbm_bytes": 1.5}, "hbm_bytes", "whole number"),
    ({"mem_bandwidth_bytes_per_s": "fast"}, "mem_bandwidth_bytes_per_s", "> 0"),
    ({"mem_bandwidth_bytes_per_s": -3e12}, "mem_bandwidth_bytes_per_s", "> 0"),  # not "another unit"
    ({"link_bandwidth_bytes_per_s": 0}, "link_bandwidth_bytes_per_s", "> 0"),
    ({"kind": "tpu"}, "kind", "'gpu' or 'cpu'"),
])
def test_bad_hardware_spec_files_name_the_field(tmp_path, over, field, words):
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware(str(_spec_file(tmp_path, **over)))
    assert ei.value.field == field and words in str(ei.value)


@pytest.mark.parametrize("over, field", [
    ({"mem_bandwidth_bytes_per_s": 2.0}, "mem_bandwidth_bytes_per_s"),       # 2 TB/s given as "2.0"
    ({"mem_bandwidth_bytes_per_s": 5300.0}, "mem_bandwidth_bytes_per_s"),    # in GB/s
    ({"peak_bf16_flops_per_s": 989.0}, "peak_bf16_flops_per_s"),             # in TFLOP/s
    ({"link_bandwidth_bytes_per_s": 450.0}, "link_bandwidth_bytes_per_s"),   # in GB/s
    ({"hbm_bytes": 192}, "hbm_bytes"),                                       # in GiB
    ({"mem_bandwidth_bytes_per_s": 5.3e18}, "mem_bandwidth_bytes_per_s"),    # a slip upward
])
def test_a_spec_file_value_in_another_unit_is_refused(tmp_path, over, field):
    """A new-user trial: mem_bandwidth_bytes_per_s 2.0 (meant 2 TB/s) predicted a TPOT of
    5447943348937 ms and 0.0 tok/s with exit status 0."""
    from specsim.hardware import PLAUSIBLE_RANGES

    with pytest.raises(SpecsimValueError) as ei:
        load_hardware(str(_spec_file(tmp_path, **over)))
    assert ei.value.field == field and "another unit" in str(ei.value), str(ei.value)
    # every shipped part lies inside the ranges (the shipped span widened 10x or more each side)
    df = list_hardware()
    for col, rng in (("mem_bandwidth_bytes_per_s", "mem_bandwidth_bytes_per_s"), ("hbm_bytes", "hbm_bytes"),
                     ("link_bandwidth_bytes_per_s", "link_bandwidth_bytes_per_s"),
                     *[(c, "peak_flops_per_s") for c in df.columns if c.startswith("peak_")]):
        lo, hi = PLAUSIBLE_RANGES[rng]
        vals = df[col].dropna().astype(float)
        assert ((vals >= lo) & (vals <= hi)).all(), (col, vals.tolist())


def test_unreadable_hardware_spec_files_are_refused(tmp_path):
    for text in ("{not json", "[1, 2]"):
        p = tmp_path / "bad.json"
        p.write_text(text)
        with pytest.raises(SpecsimValueError) as ei:
            load_hardware(str(p))
        assert ei.value.field == "hardware"
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware(str(tmp_path / "missing.json"))
    assert ei.value.field == "hardware" and "cannot read" in str(ei.value)


def test_cli_takes_a_hardware_spec_file(tmp_path, capsys):
    from specsim.cli import main

    p = _spec_file(tmp_path)
    rc = main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--hardware", str(p),
               "--acceptance", "0.7", "--json"])
    out = capsys.readouterr().out
    assert rc == 0 and json.loads(out)["hardware"] == "Example GPU 96G"
    rc = main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--hardware",
               str(_spec_file(tmp_path, name="H100")), "--acceptance", "0.7"])
    assert rc == 2 and "shipped accelerator 'H100 SXM'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["MI300X.", "H100/SXM", "h-200 sxm", "B300 SXM"])
def test_spec_file_names_that_the_calibration_lookup_would_match_are_refused(tmp_path, name):
    # the calibration lookup compares letters and digits only: "MI300X." would pick up MI300X.json
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware(str(_spec_file(tmp_path, name=name)))
    assert ei.value.field == "hardware" and "is the shipped accelerator" in str(ei.value)


@pytest.mark.parametrize("over, field", [
    ({"hbm_bytes": 1e20}, "hbm_bytes"), ({"hbm_bytes": 10**400}, "hbm_bytes"),
    ({"mem_bandwidth_bytes_per_s": 10**400}, "mem_bandwidth_bytes_per_s"),
    ({"architecture": 5}, "architecture"), ({"name": "   "}, "name"), ({"compute_units": "lots"}, "compute_units"),
    ({"vendor": ["x"]}, "vendor"),
])
def test_odd_values_in_spec_files_name_the_key(tmp_path, over, field):
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware(str(_spec_file(tmp_path, **over)))
    assert ei.value.field == field


def test_spec_file_details(tmp_path):
    p = _spec_file(tmp_path, architecture=None)
    assert load_hardware(str(p)).architecture == ""
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(_SPEC).encode())  # a UTF-8 byte-order mark
    assert load_hardware(str(bom)).name == _SPEC["name"]
    upper = tmp_path / "GPU.JSON"
    upper.write_text(json.dumps(_SPEC))
    assert load_hardware(str(upper)).name == _SPEC["name"]
    with pytest.raises(SpecsimValueError) as ei:  # a path without the .json suffix gets a hint
        load_hardware(str(tmp_path))
    assert ".json" in str(ei.value)


def test_spec_file_with_a_measured_latency_table(tmp_path):
    # the measured table's prefill / draft fallback looks the part up by name again
    from specsim.architecture import load_model
    from specsim.latency import MeasuredLatency, Roofline
    from specsim.predict import predict

    hw = load_hardware(str(_spec_file(tmp_path)))
    tgt = load_model("Qwen3-8B")
    B, Q, C = np.meshgrid([1, 4, 16], [1, 4], [512, 1024], indexing="ij")
    t = Roofline(hw).forward_time(tgt, batch=B.ravel(), q=Q.ravel(), context=C.ravel())
    tab = pd.DataFrame({"batch": B.ravel(), "q": Q.ravel(), "context": C.ravel(), "seconds": t})
    p = predict("Qwen3-8B", "eagle3", 3, hardware=str(tmp_path / "gpu.json"), acceptance=0.7, concurrency=4,
                isl=512, osl=128, latency=MeasuredLatency(tab, model_name=tgt.name))
    assert p.hardware == "Example GPU 96G" and p.throughput_ratio > 0
    assert "measured" in p.term_sources["target_step"] or "latency= given" in p.term_sources["target_step"]


@pytest.mark.parametrize("doc, got", [({}, "(got [])"), ({"name": "X"}, "(got ['name'])")])
def test_a_spec_file_missing_keys_shows_the_keys_given(tmp_path, doc, got):
    """A new-user trial: ``--hardware`` of ``{}`` said "missing required keys ['name', ..., 'source'] (got
    ['name', ..., 'source'])": the "got" part repeated the missing keys, not the keys the file gave."""
    p = tmp_path / "gpu.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecsimValueError) as ei:
        load_hardware(str(p))
    msg = str(ei.value)
    missing = [k for k in ("name", "vendor", "hbm_bytes", "mem_bandwidth_bytes_per_s", "source") if k not in doc]
    assert ei.value.field == "hardware" and ei.value.value == sorted(doc)
    assert f"missing required keys {missing} (required: name, vendor, hbm_bytes, mem_bandwidth_bytes_per_s, " \
           f"source) {got}; allowed: name, kind, vendor, architecture," in msg, msg


def test_the_cli_names_a_spec_files_missing_keys_alike_whatever_it_gave(tmp_path, capsys):
    """The review: --hardware {} was named "--hardware:" (an empty list of refused values counted as typed,
    all([]) being true) and {"name": "X"} "hardware:"; the refused values are the file's keys, not what was
    typed, so both read "hardware:"."""
    from specsim.cli import main

    heads = []
    for doc in ({}, {"name": "X"}):
        p = tmp_path / f"gpu{len(doc)}.json"
        p.write_text(json.dumps(doc))
        assert main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--acceptance", "0.7",
                     "--hardware", str(p)]) == 2
        err = capsys.readouterr().err
        heads.append(err.split("missing required keys")[0])
    assert heads == [f"specsim: error: hardware: {tmp_path / 'gpu0.json'}: ",
                     f"specsim: error: hardware: {tmp_path / 'gpu1.json'}: "], heads
