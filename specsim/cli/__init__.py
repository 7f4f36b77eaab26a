"""The ``specsim`` command (layer 5, entry points): ``predict | sweep | recommend | reproduce | ingest | run-matrix``.

Built on argparse (standard library).  ``specsim <command> --help`` documents every option.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shlex
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pandas as pd

from specsim._checks import distinct_values
from specsim.cli._args import (
    _HARDWARE_HELP,
    acceptance_from_args,
    acceptance_model_warnings,
    add_acceptance_from_args,
    add_baseline_args,
    add_drafting_args,
    baseline_from_args,
    baseline_model_warnings,
    check_baseline_point,
    clear_read_cache,
    drafting_from_args,
    latency_table_model_warnings,
    resolve_target,
)
from specsim.cli.recommend import add_recommend_parser, add_stack_args, recommend_cli
from specsim.errors import NotCollectedError, SpecsimError, SpecsimValueError
from specsim.main_job import run_main_job
from specsim.predict import predict, sweep
from specsim.runs.runner import run_matrix
from specsim.vllm.detect import KINDS, detect_kind, read_counts

__all__ = ["main", "build_parser"]


def _add_scenario_args(p: argparse.ArgumentParser, n_required: bool = False, grid: bool = False) -> None:
    """The scenario options of ``predict`` and (``grid``: ``--hardware`` a comma-separated axis) ``sweep``."""
    p.add_argument("--target", required=True, help="target model: a name in specsim/data/models (e.g. Qwen3-8B), "
                                                   "or a path to a Hugging Face config.json or a model directory")
    p.add_argument("--method", help="vLLM speculative method string, e.g. eagle3, dflash, mtp, ngram")
    p.add_argument("--draft", help="draft checkpoint name (default: the seed drafter for target/method)")
    p.add_argument("--speculative-config", help="vLLM --speculative-config JSON, exactly as passed to vllm serve")
    p.add_argument("--hardware", default="MI300X",
                   help=("accelerators, comma-separated to sweep several (e.g. MI300X,H100: one set of rows each, "
                         "a hardware named twice refused); each " if grid else "accelerator: ")
                   + _HARDWARE_HELP + "; default MI300X")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--precision", help="target weight precision: bf16, fp16, fp8, mxfp4, int4, fp32 (default: model's serving precision)")
    p.add_argument("--isl", type=int, default=None, help="input sequence length, tokens (default 1024, or the "
                                                           "--baseline-from run's mean)")
    p.add_argument("--osl", type=int, default=None, help="output sequence length, tokens, >= 2 (the prefill samples "
                                                           "the first; default 1024, or the --baseline-from run's mean)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature to predict at, 0-2 as vLLM accepts")
    p.add_argument("--temperature-assumption", help="explicit assumption that the profile transfers to --temperature")
    g = p.add_argument_group("acceptance (exactly one)")
    g.add_argument("--acceptance", type=float, help="constant conditional acceptance rate per position")
    g.add_argument("--cumulative", help="per-position CUMULATIVE acceptance, comma-separated (vLLM's per-position rates)")
    g.add_argument("--conditional", help="per-position CONDITIONAL acceptance, comma-separated")
    g.add_argument("--mal", help="MAL@N: mean acceptance length measured at N (implies constant acceptance)")
    add_acceptance_from_args(g)
    g.add_argument("--profile-temperature", type=float, default=None, help="temperature the acceptance was measured at")
    add_baseline_args(p)


def _point(args, concurrency, default_concurrency):
    """The measured baseline of the command line and the (concurrency, ISL, OSL) to predict at:
    given values, else the ``--baseline-from`` run's, else the defaults (1024 / 1024)."""
    b = baseline_from_args(args)
    c, isl, osl = check_baseline_point(b, concurrency=concurrency, isl=args.isl, osl=args.osl,
                                       path=getattr(args, "baseline_from", None))
    return b, (default_concurrency if c is None else c), (1024 if isl is None else isl), (1024 if osl is None else osl)


def _synthetic_config(args) -> bool:
    """True when ``--speculative-config`` asks for synthetic acceptance (then it IS the acceptance input)."""
    cfg = getattr(args, "speculative_config", None)
    if not cfg:
        return False
    try:
        return isinstance(d := json.loads(cfg), dict) and d.get("rejection_sample_method") == "synthetic"
    except ValueError:
        return False  # predict's own parse reports the bad JSON


def _cmd_predict(args) -> int:
    if args.num_speculative_tokens is None and not args.speculative_config:  # named as the flag, before any note
        raise SpecsimValueError("-n/--num-speculative-tokens", "is required: the proposal length N (>= 1), unless "
                                "--speculative-config gives it")
    acc = acceptance_from_args(args, required=not _synthetic_config(args))
    b, conc, isl, osl = _point(args, args.concurrency, 1)
    with warnings.catch_warnings():  # predict's UserWarning is also in pred.warnings, printed below once
        warnings.filterwarnings("ignore", message="acceptance extrapolated", category=UserWarning)
        pred = predict(
            resolve_target(args.target), args.method, args.num_speculative_tokens, hardware=args.hardware,
            tp=args.tp, precision=args.precision, concurrency=conc, isl=isl, osl=osl, acceptance=acc,
            draft=args.draft, speculative_config=args.speculative_config, temperature=args.temperature,
            temperature_assumption=args.temperature_assumption, baseline=b, vllm_version=args.vllm_version,
            platform=args.platform, latency=_latency_table(args.latency_table, args.tp),
            expert_parallel=args.expert_parallel, **drafting_from_args(args, _predicted_n(args)),
        )
    extra = (acceptance_model_warnings(args, pred.target) + baseline_model_warnings(args, pred.target)
             + latency_table_model_warnings(args.latency_table, pred.target))
    if extra:  # shown with the prediction's own warnings (and in --json)
        pred = dataclasses.replace(pred, warnings=pred.warnings + extra)
    print(pred.to_json(indent=2) if args.json else pred.summary())
    return 0


def _latency_table(path: str | None, tp: int):
    """``--latency-table FILE.csv`` (columns batch, q, context, seconds: one target forward each, e.g.
    a run's ``verify_cost.csv`` probe) as a :class:`specsim.latency.MeasuredLatency`, or None."""
    if not path:
        return None
    from specsim.latency import read_latency_table

    return read_latency_table(path, tp=tp, field="--latency-table")


def _int_list(s: str, field: str = "list") -> list[int]:
    """Comma-separated integers (``"1,3,5"``) as a list.

    Raises
    ------
    SpecsimValueError
        ``field`` when ``s`` is empty, ``field[i]`` when element i is empty (``"3,,4"``, a trailing
        comma) or not an integer, ``field`` when a value is listed twice (a grid axis: duplicate rows).
    """
    if not str(s).strip():
        raise SpecsimValueError(field, "must be comma-separated integers, e.g. 1,3,5,7", s)
    out = []
    for i, x in enumerate(str(s).split(",")):
        try:
            out.append(int(x))
        except ValueError:
            why = "is empty" if not x.strip() else "is not an integer"
            raise SpecsimValueError(f"{field}[{i}]", f"{why}: must be comma-separated integers, e.g. 1,3,5,7",
                                    s) from None
    distinct_values(field, out)
    return out


def _cmd_sweep(args) -> int:
    acc = acceptance_from_args(args, required=not _synthetic_config(args))
    cs = None if args.concurrency is None else _int_list(args.concurrency, "--concurrency")
    b, cs, isl, osl = _point(args, cs, _int_list(_SWEEP_CONCURRENCY, "--concurrency"))
    if b is not None and isinstance(cs, list) and len(set(cs)) > 1:
        flag = b.source if b.source.startswith("--") else "--baseline-from"
        raise SpecsimValueError(flag, "a measured baseline anchors the concurrency it was measured at: give "
                                "--concurrency with that one value (the library's sweep(baseline_concurrency=) "
                                "extrapolates to others)", cs)
    with warnings.catch_warnings():  # sweep's UserWarnings are also in df.attrs["warnings"], printed below once
        warnings.filterwarnings("ignore", message="acceptance extrapolated", category=UserWarning)
        df = sweep(
            resolve_target(args.target), args.method, num_speculative_tokens=_sweep_n(args),
            hardware=args.hardware.split(","), tp=args.tp, precision=args.precision,
            concurrency=cs if isinstance(cs, list) else [cs], isl=isl, osl=osl,
            acceptance=acc, draft=args.draft, temperature=args.temperature,
            temperature_assumption=args.temperature_assumption, speculative_config=args.speculative_config, baseline=b,
            vllm_version=args.vllm_version, platform=args.platform, latency=_latency_table(args.latency_table, args.tp),
            expert_parallel=args.expert_parallel, **drafting_from_args(args, _sweep_n(args) or _predicted_n(args)),
        )
    _warn_temperature(args.temperature, getattr(acc, "temperature", None))
    df.attrs["warnings"] = tuple(df.attrs.get("warnings", ())) + tuple(
        w for t in dict.fromkeys(df["target"])
        for w in acceptance_model_warnings(args, t) + baseline_model_warnings(args, t)
        + latency_table_model_warnings(args.latency_table, t))
    if "num_speculative_tokens_source" in df and (df["num_speculative_tokens_source"] == "schedule").any():
        conf = sorted({int(x) for x in df["configured_num_speculative_tokens"]})
        print(f"specsim: N per row is the --speculative-config schedule's k at that concurrency "
              f"(num_speculative_tokens_per_batch_size; configured num_speculative_tokens "
              f"{', '.join(map(str, conf))}{'' if args.n is None else ', which -n ' + str(args.n) + ' names'})",
              file=sys.stderr)
    for w in df.attrs.get("warnings", ()):  # the whole sweep's warnings (stack mismatch, N beyond the measured
        # acceptance positions): stdout is the table
        print(f"specsim: WARNING: {w}", file=sys.stderr)
    if args.out:
        try:
            df.to_csv(args.out, index=False)
        except OSError as exc:
            raise SpecsimValueError("--out", f"cannot write the CSV there ({exc.strerror or exc})", args.out) from None
        # with --json, stdout is the JSON (as reproduce --out DIR --json prints its summary): the note goes to stderr
        print(f"wrote {len(df)} rows to {args.out}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(df.to_json(orient="records", indent=2, double_precision=15))
    elif not args.out:
        cols = ["hardware", "num_speculative_tokens", "concurrency", "mal", "break_even_mal", "throughput_ratio", "tpot_s",
                "output_tok_per_s"]
        # the rows whose acceptance is extrapolated, marked where they are read (not only in the warning above)
        flags = [c for c in ("acceptance_extrapolated",) if df[c].any()] + \
                [c for c in ("kv_cache_fits",) if not df[c].all()]
        print(df[cols + flags].to_string(index=False))
    if b is not None:
        k, h = float(df["target_time_scale"].iloc[0]), float(df["host_time_scale"].iloc[0])
        what = f"target forwards x {k:.4g}" + ("" if h == 1.0 else f", host-side seconds x {h:.4g}")
        print(f"specsim: anchored on the measured baseline ({b.source}): {what}", file=sys.stderr)
    return 0


#: proposal lengths ``specsim sweep`` evaluates when neither ``-n`` nor ``--speculative-config`` gives N
_SWEEP_N = "1,2,3,4,5,7,11,15"
#: concurrencies ``specsim sweep`` evaluates without ``--concurrency`` (and without a ``--baseline-from`` run)
_SWEEP_CONCURRENCY = "1,4,16,64"


def _predicted_n(args) -> list[int] | None:
    """The N a prediction uses: ``-n``, else a ``--speculative-config``'s ``num_speculative_tokens``
    (None when neither says, or the config has a per-batch-size schedule)."""
    n = getattr(args, "num_speculative_tokens", None)
    if n is not None:
        return [n]
    if args.speculative_config:
        from specsim.vllm.config import parse_speculative_config

        cfg = parse_speculative_config(args.speculative_config)
        if not cfg.is_dynamic and cfg.num_speculative_tokens is not None:
            return [cfg.num_speculative_tokens]
    return None


def _sweep_n(args) -> list[int] | None:
    """``-n`` as integers; without it, N comes from ``--speculative-config`` (or its schedule), else
    the default grid."""
    if args.n is not None:
        return _int_list(args.n, "--n")
    return None if args.speculative_config else _int_list(_SWEEP_N, "--n")


def _warn_temperature(t: float | None, profile_t: float | None) -> None:
    """The temperature warning of ``Prediction.warnings`` for a sweep (on stderr: stdout is the table)."""
    if t is not None and t > 0 and (profile_t is None or abs(profile_t - t) > 1e-9):
        what = "of unknown temperature" if profile_t is None else f"measured at temperature {profile_t:g}"
        print(f"specsim: WARNING: predicting at temperature {t:g} from acceptance {what}: acceptance usually "
              "falls as temperature rises, so these numbers may be optimistic", file=sys.stderr)


def _cmd_reproduce(args) -> int:
    res = run_main_job(figures_dir=args.figures, out_dir=args.out, quick=args.quick)
    summary = res.summary
    if args.json:
        print(json.dumps({"summary": summary, "written": [str(w) for w in res.written]}, indent=2, default=float))
        return 0
    # the headline and its goals; the whole summary (~1700 lines of JSON) is summary.json (--json prints it)
    print(f"{summary['split']} (headline): {summary['held_out_rows']} held-out rows, median |ratio error| "
          f"{summary['held_out_median_abs_rel_error']:.1%}, max {summary['held_out_max_abs_rel_error']:.1%}; best N "
          f"exact {summary['held_out_best_n_exact']}, within one step {summary['held_out_best_n_within_one_step']}")
    for k, goal in summary.get("goals", {}).items():
        got = summary["measured"].get(k)
        print(f"  goal {k}: {goal} -> measured {got:.4g} ({'met' if summary['goal_met'].get(k) else 'NOT met'})"
              if isinstance(got, float) else f"  goal {k}: {goal} -> measured {got}")
    print(pd.DataFrame(summary["seed_table"]).to_string(index=False))
    print(f"the whole summary: {res.paths['out'] / 'summary.json'} (--json prints it)")
    n_png = sum(1 for w in res.written if w.suffix == ".png")
    print(f"wrote {n_png} figures to {res.paths['figures']}/ and {len(res.written) - n_png} tables and "
          f"calibrations (tables in {res.paths['out']}/)")
    return 0


def _cmd_recommend(args) -> int:
    return recommend_cli(args, latency=_latency_table(args.latency_table, args.tp))


def _finite_or_none(values) -> list:
    return [None if math.isnan(v) else float(v) for v in values]  # NaN (undefined conditional rate) -> null


def ingest_record(path: str, kind: str, counts) -> dict:
    """The ``ingest --json`` object of one file: totals, per-position counts and both kinds of rates."""
    out = {"path": str(path), "kind": kind, **counts.summary()}
    out["accepted_per_pos"] = [int(x) for x in counts.accepted_per_pos]
    if counts.has_per_position and counts.num_drafts:
        out["cumulative_rates"] = _finite_or_none(counts.per_position_rates)
        out["conditional_rates"] = _finite_or_none(counts.conditional_rates)
    else:
        out["cumulative_rates"] = out["conditional_rates"] = None
    return out


def _cmd_ingest(args) -> int:
    """Read vLLM spec-decode outputs and print the tidy per-position table (or JSON).

    Every file is read, whatever the others gave: a file that cannot be read (missing, a directory,
    not a format specsim reads, broken, not of the ``--kind`` given) is reported on stderr as
    ``specsim: error: ...`` (status 2; with ``--json`` also a ``"status": "error"`` object on stdout); a
    valid file without speculative-decoding counts as ``specsim: FILE: speculative-decoding metrics not
    collected: ...`` (with ``--json``: a ``"status": "not collected"`` object on stdout; status 1).  With
    ``--json`` stdout has one object per file given, in order.  Returns the worst status of the files.
    """
    status = 0
    for raw in args.paths:
        try:
            status = max(status, _ingest_one(raw, args))
        except BrokenPipeError:
            raise
        except (SpecsimError, OSError) as e:
            msg = str(e)
            field = getattr(e, "field", None)
            if isinstance(e, SpecsimValueError) and field in ("kind", "before") and msg.startswith(f"{field}:"):
                msg = "--" + msg  # the flag typed: ingest's --kind (never auto here) and --before
            print(f"specsim: error: {msg}", file=sys.stderr)
            if args.json:  # one JSON object per file given, so a consumer's lines stay aligned with the files
                print(json.dumps({"path": raw, "status": "error", "error": msg}))
            status = 2
    return status


def _ingest_one(raw: str, args) -> int:
    """Read and print one file of ``specsim ingest``: 0 read, 1 not collected (reported here); a file that
    cannot be read raises (reported by :func:`_cmd_ingest`)."""
    path = Path(raw)
    if not path.exists():
        raise SpecsimValueError("paths", "no such file", raw)
    if path.is_dir() and args.kind not in ("auto", "sweep"):
        raise SpecsimValueError("paths", "is a directory (only a vllm bench sweep output directory is read)", raw)
    try:
        kind, counts = read_counts(path, args.kind, before=args.before)
    except NotCollectedError as e:
        if args.json:
            found = args.kind
            if found == "auto":
                found = "sweep" if path.is_dir() else detect_kind(path)
            print(json.dumps({"path": str(path), "kind": found, "status": "not collected", "reason": str(e)}))
        else:
            reason = str(e).removeprefix(f"{path}: ").removeprefix(f"{path.name}: ")
            print(f"specsim: {path}: speculative-decoding metrics not collected: {reason}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(ingest_record(str(path), kind, counts), default=float))
    else:
        summ = counts.summary()
        mal = f"MAL {summ['mal']:.3f}, " if summ.get("mal") is not None else "MAL unknown, "
        drafts = counts.num_drafts if counts.num_drafts is not None else "not reported"
        ar = (f", acceptance rate {summ['acceptance_rate']:.3f}"
              if "mal" not in summ and summ.get("acceptance_rate") is not None else "")
        print(f"== {path} ({kind}): {mal}drafts {drafts}, draft tokens {counts.num_draft_tokens}, "
              f"accepted {counts.num_accepted_tokens}{ar}")
        if counts.has_per_position and counts.num_drafts:
            print(counts.to_frame().to_string(index=False))
        elif counts.has_per_position:
            print("  (no drafts in this file: per-position acceptance is unknown, not zero)")
        else:
            print("  (per-position counts not in this file: not collected by its format, or cut with '...')")
    return 0


def _cmd_run_matrix(args) -> int:
    from collections import Counter

    from specsim.catalog import project_data_path
    from specsim.runs.process import stop_signals_as_interrupt
    from specsim.runs.runner import (
        MatrixInterrupted,
        check_runs_dir,
        dry_run,
        greedy_check_failures,
        matrix_changes,
        new_stamp,
        selectable_names,
        stamp_recorded,
    )
    from specsim.runs.sweep_files import load_matrix

    m = load_matrix(args.matrix, models_dir=Path(args.models_dir) if args.models_dir else None)
    only = None
    if args.only is not None:  # --only "" / --only , select nothing: refused, not "the whole matrix"
        items = [o.strip() for o in args.only.split(",")]
        only = [o for o in items if o]
        if not only:
            raise SpecsimValueError("--only", f"selects nothing (no name in {args.only!r}); name at least one "
                                    f"serve record, run label (<serve>-<bench>), health check or probe of matrix "
                                    f"{m.name}, or leave --only out to run all of it; nothing was started",
                                    args.only, selectable_names(m))
        if len(only) < len(items):  # "ngram-n3," or "a,,b": refused as the other list flags refuse "1,,4"
            raise SpecsimValueError(f"--only[{items.index('')}]", "is empty (a stray comma?): give comma-separated "
                                    f"serve records, run labels, health checks or probes of matrix {m.name}; "
                                    "nothing was started", args.only, selectable_names(m))
    if args.resume and not args.stamp:
        raise SpecsimValueError("--resume", "needs --stamp STAMP of the invocation to resume", None)
    if args.slurm_param and args.executor != "slurm":  # it would be ignored
        raise SpecsimValueError("--slurm-param", f"applies to --executor slurm only (not {args.executor})",
                                args.slurm_param, ["--executor slurm"])
    if args.ray_address and args.executor != "ray":  # it would be ignored
        raise SpecsimValueError("--ray-address", f"applies to --executor ray only (not {args.executor})",
                                args.ray_address, ["--executor ray"])
    slurm: dict = {}
    for kv in args.slurm_param:  # checked for a dry run too
        k, eq, v = kv.partition("=")
        if not eq or not k.strip():
            raise SpecsimValueError("--slurm-param", "must be KEY=VALUE (e.g. slurm_partition=gpu)", kv)
        try:  # 30 -> int, 4.5 -> float, true -> bool, ["a"] -> list; anything else stays a string
            slurm[k] = json.loads(v)
        except ValueError:
            slurm[k] = v
    slurm_kw: dict | None = None
    if args.executor == "slurm":  # cluster=local / debug: submitit's local cluster, on purpose
        from specsim.runs.executors import check_slurm_parameters

        cluster = slurm.pop("cluster", None)
        slurm_kw = {"slurm_parameters": slurm, **({"cluster": str(cluster)} if cluster is not None else {})}
        check_slurm_parameters(slurm_kw.get("cluster"), slurm)  # before a dry run or any start
    runs_dir = Path(args.runs_dir) if args.runs_dir else None
    check_runs_dir(runs_dir, "--runs-dir")
    if args.executor == "ray" and args.ray_address:  # before a dry run or any start, as the run checks it
        from specsim.runs.executors import check_ray_address

        check_ray_address(args.ray_address)
    if args.dry_run:  # the same selection and checks as the run: --only, --stamp / --resume, --platform
        text, data = dry_run(m, only=only, stamp=args.stamp, resume=args.resume, runs_dir=runs_dir,
                             executor=args.executor, platform=args.platform, slurm=slurm_kw)
        from specsim.runs.provenance import redact_text

        # the servers' commands as they would run, with a token given to them as <redacted> (pasted into issues)
        print(redact_text(json.dumps(data, indent=2, default=str) if args.json else text, m.secrets))
        return 0
    rd = runs_dir if runs_dir is not None else project_data_path("runs")  # an installed copy: DataError, asks for it
    if args.resume and args.stamp:  # a mistyped stamp would silently start a whole new invocation
        if not stamp_recorded(rd, m.name, args.stamp):
            print(f"specsim: nothing of {m.name} is recorded under --stamp {args.stamp} in {rd}: --resume starts "
                  "it as a new invocation", file=sys.stderr)
        elif changed := matrix_changes(rd, m, args.stamp):
            print(f"specsim: WARNING: {m.name} changed since the runs of --stamp {args.stamp} were recorded "
                  f"({', '.join(changed)} differ): the runs resumed now follow the new definition, the kept ones "
                  "the old (the manifest records both)", file=sys.stderr)
    # the stamp is fixed here so that the last lines can name it (run_matrix's own default)
    stamp = args.stamp or new_stamp()
    received: list[str] = []  # the stop signals the block received (read after it: its own record is gone)

    def stopped(at: str, signame: str, recorded: int) -> dict:  # --json of an interrupted invocation
        return {"matrix": m.name, "stamp": at, "runs_dir": str(rd), "interrupted": signame, "recorded": recorded}

    try:
        # Ctrl-C and timeout / scancel stop it alike, recorded as "interrupted (SIGINT)" / "(SIGTERM)";
        # a repeated one does not cut the stop and its records short
        with stop_signals_as_interrupt(("SIGTERM", "SIGINT")) as received:
            results = run_matrix(m, runs_dir=runs_dir, stamp=stamp,
                                 resume=args.resume, executor=args.executor, ray_address=args.ray_address,
                                 platform=args.platform, only=only, slurm=slurm_kw)
    except MatrixInterrupted as e:
        print(f"specsim: interrupted ({e.signal}): {e.recorded} runs recorded, the interrupted cell recorded as "
              f"failed; resume with --stamp {e.stamp} --resume", file=sys.stderr)
        if args.json:  # a script gets the stamp to resume with here too
            print(json.dumps(stopped(e.stamp, e.signal, e.recorded), indent=2))
        return 143 if e.signal == "SIGTERM" else 130
    except KeyboardInterrupt as e:  # before any run started (a Ray cluster's ray.wait drops the StopSignal's name)
        # stop_signal_received() would be None here: the with block has ended
        signame = getattr(e, "signal", None) or (received[0] if received else None) or "SIGINT"
        print(f"specsim: interrupted ({signame}) before any run started; nothing recorded", file=sys.stderr)
        if args.json:
            print(json.dumps(stopped(stamp, signame, 0), indent=2))
        return 143 if signame == "SIGTERM" else 130
    # a greedy-identity check that failed leaves its run ok (a verdict, in its checks.json): said here too
    greedy_failed = greedy_check_failures(results)
    failed = [r for r in results if r.status == "failed"]
    validate_cmd = shlex.join(["specsim", "validate", "--matrix", args.matrix, "--stamp", stamp, *(
        () if args.runs_dir is None else ("--runs-dir", args.runs_dir))]) if m.probes else None  # on its own probe
    counts = dict(sorted(Counter(r.status for r in results).items()))
    n_kept = sum(r.kept for r in results)
    if args.json:  # what the last lines say, for a script: the stamp to resume or validate, why runs failed
        print(json.dumps({"matrix": m.name, "stamp": stamp, "runs_dir": str(rd), "status_counts": counts,
                          "kept": n_kept,
                          "failed": [{"reason": why, "run_ids": ids} for why, ids in _failure_reasons(failed)],
                          "greedy_check_failed": [{"run_id": rid, "why": why} for rid, why in greedy_failed],
                          "validate_command": validate_cmd, "runs": [dataclasses.asdict(r) for r in results]},
                         indent=2, default=str))
    else:
        print(f"{len(results)} runs: " + ", ".join(f"{v} {k}" for k, v in counts.items())
              + (f"; greedy check FAILED in {len(greedy_failed)} ({', '.join(rid for rid, _ in greedy_failed)})"
                 if greedy_failed else "")
              + (("; all kept from earlier (--resume): nothing ran" if n_kept == len(results) else
                  f"; {n_kept} kept from earlier (--resume), {len(results) - n_kept} run now") if n_kept else "")
              + f"\nrecorded under {rd} as {m.name}-{stamp}-*: "
              + (f"`{validate_cmd}` judges them, " if validate_cmd else "")
              + f"`--stamp {stamp} --resume` re-runs what failed")
    # the matrix went on past them (each is recorded with its error); the exit status still says so, as a
    # test runner's does, so that a script or CI job does not take a matrix with failed cells for a clean one
    if greedy_failed:  # speculative decoding changed greedy outputs: not a clean matrix either
        print(f"specsim: the greedy-identity check failed in {len(greedy_failed)} of {len(results)} runs ("
              + "; ".join(f"{rid}: {why}" for rid, why in greedy_failed) + "): their outputs differ from the "
              "baseline's (checks.json in each run; the runs are recorded ok, and --resume keeps them)",
              file=sys.stderr)
    if failed:
        print(f"specsim: {len(failed)} of {len(results)} runs failed ({', '.join(r.run_id for r in failed)}; the "
              f"error is in each run's provenance.json and runs.csv); re-run them with --stamp {stamp} --resume"
              + "".join(f"\n  {', '.join(ids)}: {why}" for why, ids in _failure_reasons(failed)), file=sys.stderr)
        return 1
    return 1 if greedy_failed else 0


def _failure_reasons(failed) -> list[tuple[str, list[str]]]:
    """``[(reason, run ids)]`` of failed runs, in order of first appearance: each error's first line up to
    the log it names (``"; log <path>"``: the path and the log's tail stay in the record), without a leading
    ``RunError:``, at most 300 characters; runs failed alike share a reason (the cells of servers that vLLM
    refused alike, whose "(after X s)" then gives the range of their start times)."""
    out: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}  # a failed start's "(after X s)": the runs of servers refused alike share a line
    for r in failed:
        why = (r.error or "no error recorded").splitlines()[0].split("; log ")[0].strip()
        why = why.removeprefix("RunError: ")  # the recorder's name of specsim's own error says nothing here
        m = re.search(r" \(after ([0-9.]+) s\)", why)
        if m:
            why = why[:m.start()] + " (after {} s)" + why[m.end():]
            after.setdefault(why, []).append(m.group(1))
        out.setdefault(why, []).append(r.run_id)
    lines = []
    for why, ids in out.items():
        if why in after:
            secs = sorted(set(after[why]), key=float)
            why = why.replace("{}", secs[0] if len(secs) == 1 else f"{secs[0]}-{secs[-1]}", 1)
        lines.append((why if len(why) <= 300 else why[:297] + "...", ids))
    return lines


def _cmd_validate(args) -> int:
    """Judge recorded runs of one matrix (or one invocation of it) against predict()."""
    from specsim.studies.validation import (
        FAST_MATRIX,
        HEADLINE_MATRIX,
        validate,
        validate_invocations,
    )

    runs_dir = Path(args.runs_dir) if args.runs_dir else None
    if args.matrix is not None and Path(args.matrix).exists():
        # a matrix directory or its specsim.json, as run-matrix takes (and its last line passes on): the runs
        # are recorded under the name its sidecar gives
        from specsim.runs.sweep_files import matrix_name

        args.matrix = matrix_name(args.matrix)  # as run-matrix reads it
    if args.stamp is not None:  # one invocation, on its own probe (--stamp '' refused there, not pooled)
        res, inv = validate(runs_dir, matrix=args.matrix, stamp=args.stamp), None
    else:  # every invocation on its own probe, pooled (as data/validation/loops.csv)
        inv = validate_invocations(runs_dir, matrix=args.matrix)
        res = inv.whole
    s = res.summary
    if inv is None:
        ho, bn = s["held_out"], s["best_n_agreement"]
        judged = {"held_out_runs": ho["n"], "ratio_median_abs_error": ho["median_abs_error"],
                  "ratio_max_abs_error": ho["max_abs_error"], "best_n_agree": f"{bn['agree']} of {bn['groups']}",
                  "pooling": "one invocation on its own probe"}
    else:
        h = inv.held_out_summary()
        judged = {"held_out_runs": h["held_out"], "ratio_median_abs_error": h["median_abs_error"],
                  "ratio_max_abs_error": h["max_abs_error"], "best_n_agree": f"{h['best_n_agree']} of "
                  f"{h['best_n_groups']}", "pooling": h["pooling"]}
    ones = {st: r for st, r in (inv.per_stamp.items() if inv is not None and inv.pooled else ())}
    n_invocations = 1 if inv is None else len(inv.per_stamp)
    if len(ones) == 1:  # nothing pooled: said as with --stamp
        judged["pooling"] = "one invocation on its own probe"
    # one entry per probe fit, a list always (one fit: --stamp, a single invocation, or the matrix
    # judged as one), so a reader of the JSON need not check whether it got a string or a list
    if ones:
        fitted = [(st, r.summary) for st, r in ones.items()]
    else:  # --stamp, or the matrix judged as one (on its latest probe: no one invocation's judgement)
        fitted = [(args.stamp if inv is None else None, s)]
    lat_on = [f["latency_fitted_on"] for _, f in fitted]
    lat_rmse = [f["latency_rmse_rel"] for _, f in fitted]
    out = {"matrix": args.matrix, "stamp": args.stamp, **judged, "invocations_judged": n_invocations,
           "latency_fitted_on": lat_on, "latency_rmse_rel": lat_rmse,
           "health_checks": [{k: h.get(k) for k in ("run_id", "passed", "observed_pos1", "expected_pos1")}
                             for h in s["health_checks"]],
           "greedy_identical_runs": f"{s['token_identity']['all_identical_runs']} of {s['token_identity']['runs_checked']}",
           "excluded_runs": len(s["runs"]["excluded"]), "excluded": s["runs"]["excluded"]}
    # one entry per probe fit, as the latency fields (stamp None: the matrix judged as one)
    out["invocations"] = [{"stamp": st, "held_out_runs": f["held_out"]["n"],
                           "ratio_median_abs_error": f["held_out"]["median_abs_error"],
                           "best_n_agree": f"{f['best_n_agreement']['agree']} of {f['best_n_agreement']['groups']}",
                           "latency_rmse_rel": f["latency_rmse_rel"]} for st, f in fitted]
    if args.matrix != HEADLINE_MATRIX:
        # the full loop's recorded validation: from --runs-dir, else (none usable there) the checkout's data/runs
        from specsim.catalog import project_data_path

        out["headline"] = None
        tried: list[str] = []
        for rd in dict.fromkeys([runs_dir, None]):
            where = rd if rd is not None else "data/runs"  # named so while project_data_path may refuse
            try:
                where = rd if rd is not None else project_data_path("runs")  # outside a checkout: refused
                h = validate(rd, matrix=HEADLINE_MATRIX).summary
            except SpecsimError as exc:
                tried.append(f"{where}: {str(exc).split(';')[0]}")
                continue
            out["headline"] = {"matrix": HEADLINE_MATRIX, "held_out_runs": h["held_out"]["n"],
                               "ratio_median_abs_error": h["held_out"]["median_abs_error"],
                               "best_n_agree": f"{h['best_n_agreement']['agree']} of {h['best_n_agreement']['groups']}",
                               "runs_dir": str(where), "not_from_runs_dir": tried[0] if tried else None}
            break
        if out["headline"] is None:
            out["headline_missing"] = "; ".join(tried)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    def pct(x, digits: int = 1) -> str:  # None: no held-out run to take a median of
        return "n/a" if x is None else f"{100 * x:.{digits}f} %"

    def runs(n: int) -> str:
        return f"{n} held-out run{'' if n == 1 else 's'}"

    what = args.matrix + (f" {args.stamp}" if args.stamp else "")
    print(f"{what}: {runs(out['held_out_runs'])} ({out['pooling']}), predict() speedup ratio median "
          f"|error| {pct(out['ratio_median_abs_error'])} (max {pct(out['ratio_max_abs_error'], 0)}), best N "
          f"agrees in {out['best_n_agree']} groups; greedy outputs identical in {out['greedy_identical_runs']} spec runs")
    if not out["held_out_runs"]:
        print("  no held-out run: no usable spec run has an ok baseline of the same cell to pair with")
    if len(ones) > 1:
        for inv_row in out["invocations"]:
            print(f"  invocation {inv_row['stamp']}: {runs(inv_row['held_out_runs'])}, median "
                  f"{pct(inv_row['ratio_median_abs_error'])}, best N {inv_row['best_n_agree']}, latency "
                  f"rmse {pct(inv_row['latency_rmse_rel'])} on its own probe")
    else:
        print(f"  latency calibrated on {out['latency_fitted_on'][0]}, rmse {pct(out['latency_rmse_rel'][0])}")
    for h in out["health_checks"]:
        print(f"  health check {h['run_id']}: {'passed' if h['passed'] else 'FAILED'} (position-1 acceptance "
              f"{h['observed_pos1']:.3f}, expected {h['expected_pos1']:.3f})")
    if out["excluded"]:  # grouped by what they were ("skipped", "invalid", "failed": each reason's first word)
        from collections import Counter

        kinds = Counter(str(e["reason"]).split(":")[0] for e in out["excluded"])
        print(f"  {len(out['excluded'])} runs excluded from the judgement: "
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + " (each run and its reason: --json)")
    if out.get("headline"):
        hl = out["headline"]
        if args.matrix == FAST_MATRIX:
            remark = ("one invocation of the fast loop is a smoke test of the model, not a re-measurement of the "
                      "headline (README, 'Results')" if n_invocations == 1 else
                      f"the fast loop's {n_invocations} invocations are compared with it in "
                      "data/validation/loops.json (README, 'Results')" if runs_dir is None else
                      f"the fast loop's {n_invocations} invocations above, for comparison (data/validation/loops.json "
                      "compares the recorded ones: README, 'Results')")
        else:
            remark = "the full loop's recorded validation, for comparison"
        where = hl["runs_dir"] + (f"; none usable in --runs-dir ({hl['not_from_runs_dir']})"
                                  if hl["not_from_runs_dir"] else "")
        print(f"  headline ({hl['matrix']}, recorded in {where}): {runs(hl['held_out_runs'])}, median "
              f"{pct(hl['ratio_median_abs_error'])}, best N {hl['best_n_agree']} -- {remark}")
    elif "headline_missing" in out:
        print(f"  headline ({HEADLINE_MATRIX}): not shown -- {out['headline_missing']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``specsim`` command."""
    ap = argparse.ArgumentParser(prog="specsim", description="Analytical cost model of speculative decoding in vLLM")
    ap.add_argument("--version", action="version", version=f"specsim {_version()}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("predict", help="predict one operating point")
    _add_scenario_args(p)
    p.add_argument("-n", "--num-speculative-tokens", type=int, help="proposal length N")
    p.add_argument("--concurrency", type=int, default=None,
                   help="concurrent requests (decode batch; default 1, or the --baseline-from run's max_concurrency)")
    add_stack_args(p)
    add_drafting_args(p)
    p.add_argument("--json", action="store_true", help="print the Prediction as JSON")
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("sweep", help="evaluate a grid of N x concurrency x hardware")
    _add_scenario_args(p, grid=True)
    p.add_argument("-n", "--n", "--num-speculative-tokens", dest="n", default=None,
                   help="comma-separated proposal lengths N (default 1,2,3,4,5,7,11,15, or N from --speculative-config)")
    p.add_argument("--concurrency", default=None, help=f"comma-separated concurrencies (default {_SWEEP_CONCURRENCY}, "
                                                        "or the --baseline-from run's max_concurrency)")
    add_stack_args(p)
    add_drafting_args(p)
    p.add_argument("--out", metavar="FILE", help="write the tidy CSV (every column) to FILE and print "
                                                 "'wrote N rows to FILE' instead of the table; with --json that note "
                                                 "goes to stderr and stdout has the JSON")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list of records on stdout (every "
                                                       "column; with --out the CSV is written as well)")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("reproduce", help="main job: reproduce the published tables, regenerate figures/")
    p.add_argument("--figures", help="figures directory (default: OUT/figures with --out, else the checkout's "
                                     "figures/)")
    p.add_argument("--out", help="write everything under OUT: tables, calibrations (OUT/calibration), figures "
                                 "(OUT/figures) and, in a checkout, the validation (OUT/validation); default: the "
                                 "checkout's data/reproduction, specsim/data/calibration, data/validation and "
                                 "figures/; required for an installed copy")
    p.add_argument("--quick", action="store_true",
                   help="skip the secondary splits (fit on GSM8K, fit on the two smallest N; the headline "
                        "leave-one-target-out stays); needs --out, and writes everything (calibrations, figures, "
                        "validation) under it")
    p.add_argument("--json", action="store_true", help="print the summary and the files written as JSON")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("recommend", help="recommended vLLM speculative config per concurrency band")
    add_recommend_parser(p)
    p.set_defaults(func=_cmd_recommend)

    p = sub.add_parser("ingest", help="read vLLM spec-decode outputs (metrics text, log, bench JSON)",
                       epilog="every file is read, each one that fails reported on stderr with its reason; exit "
                              "status, the worst of the files: 0 every file read with its speculative-decoding "
                              "counts; 1 some file valid but without them (speculative decoding off: reported as "
                              "not collected, never as zero; with --json a \"status\": \"not collected\" object); 2 "
                              "some file missing, unreadable, not a format specsim reads, broken, or not of the "
                              "--kind given (specsim: error: ...; with --json a \"status\": \"error\" object): "
                              "with --json stdout has one object per file, in order")
    p.add_argument("paths", nargs="+", help="files to read")
    p.add_argument("--kind", choices=["auto", *KINDS], default="auto",
                   help="format (default auto: detected from the content): " + "; ".join(f"{k}: {v}" for k, v in KINDS.items()))
    p.add_argument("--before", help="Prometheus scrape taken before the run (differenced); only with a Prometheus scrape")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per file: totals, per-position counts, cumulative and conditional rates")
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser("validate", help="judge recorded real vLLM runs (one matrix, or one invocation of it) "
                                        "against predict()")
    p.add_argument("--matrix", default="cpu-validation",
                   help="matrix whose recorded runs to judge: its name, or its directory / specsim.json as "
                        "run-matrix takes (default cpu-validation, the headline; make validate-cpu records "
                        "cpu-validation-fast)")
    p.add_argument("--stamp", help="only this invocation (run-matrix --stamp), on its own probe; without it every "
                                   "invocation of the matrix is judged on its own probe and the invocations pooled")
    p.add_argument("--runs-dir", help="recorded runs (default data/runs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("run-matrix", help="drive real vLLM runs (vllm bench sweep parameter files) and record "
                                          "them under data/runs/",
                       epilog="exit status: 0 every run recorded ok, invalid or skipped (a verdict); 1 some run "
                              "failed (recorded with its error; the matrix went on: re-run them with --stamp STAMP "
                              "--resume) or a greedy-identity check failed (the run is recorded ok, its outputs "
                              "differ from the baseline's: checks.json); 2 a refused matrix or option (nothing started); 130 / 143 interrupted "
                              "(SIGINT / SIGTERM)")
    p.add_argument("--matrix", default="cpu-validation",
                   help="a shipped matrix name (data/matrices/NAME: cpu-validation -- the default, the full ~21 min "
                        "matrix --, cpu-validation-fast, smoke, verify-cost), or a "
                        "matrix directory / its specsim.json naming vllm bench sweep serve / bench parameter files")
    p.add_argument("--runs-dir",
                   help="where to record, and the recorded runs --dry-run estimates from (default data/runs)")
    p.add_argument("--models-dir", help="where models/... paths of the matrix point (default: the checkout's models/; "
                        "installed without a checkout: the matrix directory's)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the cells, the servers they need and the estimated device-hours (from the "
                        "recorded run times under --runs-dir); start nothing")
    p.add_argument("--executor", choices=["local", "ray", "slurm"], default="local",
                   help="local: here, benches one server at a time (a matrix's concurrent_server_starts may "
                        "start two servers together; no bench runs while one starts); ray: each serve config as a "
                        "Ray task (pip install 'specsim[ray]'); slurm: each as a Slurm job through submitit (pip "
                        "install 'specsim[slurm]')")
    p.add_argument("--slurm-param", action="append", default=[], metavar="KEY=VALUE",
                   help="a submitit / Slurm parameter for --executor slurm (e.g. slurm_partition=gpu, timeout_min=120, "
                        "cluster=local; VALUE read as JSON where it parses); repeatable")
    p.add_argument("--ray-address", help="with --executor ray: address of a running Ray cluster (default: start "
                                         "a local one)")
    p.add_argument("--platform", choices=["auto", "cpu", "cuda", "rocm"], default=None,
                   help="vLLM platform (default: the matrix's, normally auto-detected); selects the CPU / ROCm "
                        "/ CUDA settings recorded in provenance")
    p.add_argument("--stamp", help="run-id stamp (default: now, UTC); with --resume, the invocation to resume")
    p.add_argument("--resume", action="store_true",
                   help="with --stamp: skip the cells already recorded, re-run failed ones as <id>-retry<k>")
    p.add_argument("--only", help="comma-separated serve records, run labels, health checks or probes to run")
    p.add_argument("--json", action="store_true", help="print the recorded runs' results as JSON")
    p.set_defaults(func=_cmd_run_matrix)
    return ap


#: optional third-party modules -> the extra that installs them (pyproject ``[project.optional-dependencies]``)
_EXTRAS = {"prometheus_client": "vllm", "tqdm": "vllm", "nbclient": "notebooks", "nbformat": "notebooks"}


def _version() -> str:
    try:
        return metadata.version("specsim")
    except metadata.PackageNotFoundError:  # a source tree on sys.path without an install
        return "unknown (not installed)"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings of the library as one ``specsim: warning:`` line on stderr (no source lines)."""
    print(f"specsim: warning: {message}", file=sys.stderr)


# library keywords whose flag has another name: keyword -> argparse dest (recommend's --max-n)
_FIELD_DESTS = {"max_num_speculative_tokens": "max_n"}


def _error_text(e: SpecsimError, args: argparse.Namespace, argv: list[str]) -> str:
    """The message of ``e`` as it is printed (:func:`_as_typed`), with the matrix's secrets
    (:func:`specsim.runs.sweep_files.matrix_secrets`) and the values written after secret options (``--hf-token
    VALUE``: :func:`specsim.runs.provenance.redact_text`) as ``<redacted>``.  Of a :class:`SpecsimValueError`
    the rule is prose, where the word after an option's name is no value (``--hf-token takes a single value``):
    the message gets the matrix's secrets replaced alone (so do the rule, the allowed values -- record names
    made of a record's values, for one -- and the hint built of them), its field and value also the values after
    secret options (specsim's refusals are written to put no secret option's value into a rule: the tests of the
    refusals of a secret's value, tests/test_run_sweep_files.py, check those)."""
    from specsim.runs.provenance import redact, redact_text
    from specsim.runs.sweep_files import matrix_secrets

    secrets = matrix_secrets(getattr(args, "matrix", None))
    if not isinstance(e, SpecsimValueError):
        return redact_text(_as_typed(e, args, build_parser(), argv), secrets)
    value = redact_text(e.value, secrets) if isinstance(e.value, str) else redact(e.value, secrets)
    shown = SpecsimValueError(redact_text(e.field, secrets), e.rule, value, e.allowed)
    return redact(_as_typed(shown, args, build_parser(), argv), secrets)


def _as_typed(e: SpecsimError, args: argparse.Namespace, parser: argparse.ArgumentParser,
              argv: list[str]) -> str:
    """The error's message with a library field (``osl``, ``method``, ``num_speculative_tokens``)
    named as the flag the user typed (``--osl``, ...), when the command has that flag, the flag is
    in ``argv`` and the refused value is the one given there (a field of a file, or a flag left at
    its default, keeps the library's name).  A keyword whose flag is named otherwise is found through
    ``_FIELD_DESTS`` (``max_num_speculative_tokens`` is recommend's ``--max-n``)."""
    msg = str(e)
    field = getattr(e, "field", None)
    if not isinstance(e, SpecsimValueError) or not isinstance(field, str) or not msg.startswith(field + ":"):
        return msg
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub = subs[0].choices.get(getattr(args, "command", None)) if subs else None
    if sub is None:
        return msg
    actions = {a.dest: a for a in sub._actions if a.option_strings}
    dest = field if field in actions else _FIELD_DESTS.get(field)  # a flag named apart from its keyword
    given = getattr(args, dest, None) if dest else None
    if dest not in actions or given is None or e.value is None:
        return msg
    typed_flags = {t.split("=", 1)[0] for t in argv if t.startswith("-")}
    if not typed_flags & set(actions[dest].option_strings):
        return msg  # the default, not typed
    refused = e.value if isinstance(e.value, (list, tuple)) else [e.value]
    typed = {str(given)} | {x.strip() for x in str(given).split(",")}
    if not refused or not all(str(v) in typed for v in refused):  # nothing refused named: not the typed value
        return msg
    return "/".join(actions[dest].option_strings) + msg[len(field):]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specsim`` console script (and ``python -m specsim``).

    Returns the exit status: 0 success, 1 a command's own negative answer (e.g. metrics not
    collected), 2 bad input, a missing optional extra or an OS error -- with a one-line message on
    stderr, never a traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    clear_read_cache()  # read once per command, not across commands of one process (tests, notebooks)
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as e:
        extra = _EXTRAS.get((e.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"specsim: error: `specsim {args.command}` needs the optional package {e.name}: "
              f"pip install 'specsim[{extra}]'", file=sys.stderr)
        return 2
    except SpecsimError as e:
        print(f"specsim: error: {_error_text(e, args, argv)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` & co.: stop quietly, like other CLI tools
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush error at interpreter exit
        except OSError:
            pass
        return 0
    except OSError as e:  # unwritable --out, missing file: no traceback
        print(f"specsim: error: {e}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
