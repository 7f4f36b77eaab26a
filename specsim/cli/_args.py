"""Command-line arguments shared by the ``specsim`` commands (layer 5, entry points)."""
from __future__ import annotations

import contextlib
import json
import functools
import math
import os
from pathlib import Path

from specsim.acceptance import TEMPERATURE_RULE, Acceptance, temperature_ok
from specsim.architecture import ModelSpec, load_model
from specsim.errors import SpecsimValueError
from specsim.predict import (
    BASELINE_LENGTH_TOLERANCE,
    MeasuredBaseline,
    constant_acceptance,
)
from specsim.vllm.detect import KINDS, read_counts, read_drafting, run_temperature

ACCEPTANCE_FLAGS = ("--acceptance ALPHA, --cumulative P1,P2,..., --conditional A1,A2,..., --mal MAL@N, "
                    "--acceptance-from FILE")


#: what ``--hardware`` takes, in ``predict`` / ``sweep`` / ``recommend`` --help
_HARDWARE_HELP = ("a name or alias in specsim/data/hardware.csv, case-insensitive (H100 = H100 SXM, B200 = B200 SXM, "
                  "mi300x = MI300X), or a JSON spec file of its columns (specsim.hardware.hardware_from_file)")


def add_acceptance_from_args(g) -> None:
    """Add ``--acceptance-from FILE`` and ``--before FILE`` to an argparse group."""
    g.add_argument("--acceptance-from", metavar="FILE",
                   help="measured acceptance from any file `specsim ingest` reads, its format detected from the "
                        "content: " + "; ".join(KINDS.values()))
    g.add_argument("--before", metavar="FILE",
                   help="with --acceptance-from a Prometheus scrape: the scrape taken before the run (differenced)")


def float_list(text: str, field: str) -> list[float]:
    """Comma-separated numbers into floats.

    Raises
    ------
    SpecsimValueError
        Empty string, an empty item (``0.8,,0.6`` or a trailing comma) or an item that is not a
        number; names ``field`` and the offending item.
    """
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise SpecsimValueError(field, "must be comma-separated numbers in [0, 1], position 1 first, e.g. 0.8,0.6,0.45",
                                text)
    out = []
    for i, x in enumerate(items):
        if not x:
            raise SpecsimValueError(f"{field}[{i}]", "is empty (a stray comma?): give comma-separated numbers "
                                    "in [0, 1], e.g. 0.8,0.6,0.45", text)
        try:
            out.append(float(x))
        except ValueError:
            raise SpecsimValueError(f"{field}[{i}]", "is not a number: give comma-separated numbers in [0, 1], "
                                    "e.g. 0.8,0.6,0.45", x) from None
    return out


def _is_catalog_name(target: str) -> bool:
    try:
        load_model(str(target))
        return True
    except SpecsimValueError:
        return False


def resolve_target(target: str):
    """``--target``: a catalog name stays a name; an existing path to a Hugging Face ``config.json``
    or to a model directory holding one becomes a :class:`~specsim.architecture.ModelSpec`."""
    p = Path(str(target)).expanduser()
    if p.is_file() or (p.is_dir() and (p / "config.json").is_file()):
        return ModelSpec.from_hf_config(p)
    looks_like_path = str(target).endswith(".json") or str(target).startswith((".", "/", "~"))
    if looks_like_path and not p.exists() and not _is_catalog_name(target):
        raise SpecsimValueError("--target", "no such file or directory (give a config.json, a model directory or "
                                "a catalog name)", str(target))
    if p.is_dir():
        try:
            load_model(str(target))  # a catalog name that happens to be a directory here too
            return target
        except SpecsimValueError:
            pass
        raise SpecsimValueError("--target", "is a directory without a config.json (give a model directory, a "
                                "config.json or a catalog name)", str(target))
    return target


def _file_key(path) -> tuple:
    try:
        st = os.stat(path)
        return (os.fspath(path), st.st_size, st.st_mtime_ns)
    except OSError:  # read_counts names the missing file
        return (os.fspath(path), None, None)


@functools.lru_cache(maxsize=8)
def _read_counts_cached(path_key: tuple, before_key: tuple | None):
    return read_counts(path_key[0], before=None if before_key is None else before_key[0])


def read_counts_once(path, before=None):
    """:func:`specsim.vllm.detect.read_counts` of ``--acceptance-from`` (and ``--before``), read once per
    command: the acceptance, the drafted share and ``recommend``'s check all use it, so the file is
    parsed, and its warnings given, once (keyed by path, size and mtime, so a rewritten file is read
    again)."""
    return _read_counts_cached(_file_key(path), None if before is None else _file_key(before))


@functools.lru_cache(maxsize=8)
def _measured_models_cached(path_key: tuple, kind: str) -> tuple[str, ...]:
    from specsim.vllm.detect import measured_models

    return measured_models(path_key[0], kind)


def clear_read_cache() -> None:
    """Forget what :func:`read_counts_once`, :func:`acceptance_model_warnings` and
    :func:`baseline_model_warnings` read (called at the
    start of each ``specsim`` command)."""
    _read_counts_cached.cache_clear()
    _measured_models_cached.cache_clear()


def acceptance_from_file(path: str, before: str | None = None, temperature: float | None = None) -> Acceptance:
    """``--acceptance-from FILE [--before FILE]``: the counts of any file ``specsim ingest`` reads into
    :meth:`Acceptance.from_counts` (labelled with the file and its format), at the temperature the
    file records for its run (``specsim.vllm.detect.run_temperature``) unless ``temperature``
    (``--profile-temperature``) is given; the two must agree when both are known."""
    kind, counts = read_counts_once(path, before)
    recorded = run_temperature(path, kind)
    if temperature is None:
        temperature = recorded
    elif recorded is not None and not math.isclose(recorded, temperature, abs_tol=1e-9):
        raise SpecsimValueError("--profile-temperature", f"conflicts with the temperature {recorded:g} that {path} "
                                "records for its run", temperature, [recorded])
    return Acceptance.from_counts(counts, temperature=temperature, label=f"{path} ({kind})")


def acceptance_from_args(args, required: bool = True):
    """Build the Acceptance given on the command line (one of --acceptance, --cumulative,
    --conditional, --mal, --acceptance-from).  With ``required=False`` none given returns None."""
    t = args.profile_temperature
    if t is not None and not temperature_ok(t):
        raise SpecsimValueError("--profile-temperature", TEMPERATURE_RULE, t)
    mal_arg = getattr(args, "mal", None)
    from_file = getattr(args, "acceptance_from", None)
    before = getattr(args, "before", None)
    given = [x for x in (args.acceptance, args.cumulative, args.conditional, mal_arg, from_file) if x is not None]
    if before is not None and from_file is None:
        raise SpecsimValueError("--before", "applies only with --acceptance-from FILE (a Prometheus scrape)", before)
    if not given and not required:
        if t is not None:
            raise SpecsimValueError("profile_temperature", "applies to an acceptance given on the command line", t)
        return None
    if len(given) != 1:
        raise SpecsimValueError("acceptance", f"give exactly one of {ACCEPTANCE_FLAGS}")
    if from_file is not None:
        return acceptance_from_file(from_file, before, t)
    if args.acceptance is not None:
        return constant_acceptance(args.acceptance, temperature=t)
    for flag, text in (("--cumulative", args.cumulative), ("--conditional", args.conditional)):
        if text is not None:
            try:
                return Acceptance.from_rates(float_list(text, flag), kind=flag[2:], temperature=t)
            except SpecsimValueError as e:  # named as the flag the user typed (from_rates' own is "rates[i]")
                if not e.field.startswith("rates"):
                    raise
                value = e.value.replace("rates[", f"{flag}[") if isinstance(e.value, str) else e.value
                raise SpecsimValueError(flag + e.field[len("rates"):], e.rule, value, e.allowed) from e
    mal, _, n = args.mal.partition("@")
    if not n:
        raise SpecsimValueError("--mal", "takes MAL@N, e.g. 3.2@4", args.mal)
    try:
        mal_f, n_i = float(mal), int(n)
    except ValueError:
        raise SpecsimValueError("--mal", "takes MAL@N with a number MAL and an integer N, e.g. 3.2@4", args.mal) from None
    try:
        return Acceptance.from_mal(mal_f, n_i, temperature=t)
    except SpecsimValueError as e:  # named as the flag the user typed (from_mal's own are "mal" and "n")
        raise SpecsimValueError(f"--mal ({'N' if e.field == 'n' else 'MAL'} of MAL@N)", e.rule, args.mal,
                                e.allowed) from e


def _model_key(name: str) -> str:
    """A model name / path / Hugging Face id reduced for comparison: its last path component,
    lower-case, letters and digits only (``/work/models/smollm2-135m-instruct`` ==
    ``SmolLM2-135M-Instruct``; ``Qwen/Qwen3-8B`` == ``Qwen3-8B``)."""
    last = str(name).rstrip("/").split("/")[-1]
    if last.lower() == "config.json":
        last = str(name).rstrip("/").split("/")[-2] if "/" in str(name).rstrip("/") else last
    return "".join(ch for ch in last.lower() if ch.isalnum())


def acceptance_model_warnings(args, target) -> tuple[str, ...]:
    """The warning of an ``--acceptance-from`` file whose run served another model than the target
    predicted (acceptance is a property of the target-drafter pair and the data: it does not
    transfer to another target); empty when no file is given, the file records no model
    (:func:`specsim.vllm.detect.measured_models`) or it names the target (by name or Hugging Face
    id, compared by :func:`_model_key`).  ``target``: the resolved target (``ModelSpec``) or its name."""
    path = getattr(args, "acceptance_from", None)
    if path is None:
        return ()
    kind, _ = read_counts_once(path, getattr(args, "before", None))
    return _other_model_warning(
        _measured_models_cached(_file_key(path), kind), target,  # models read once per command, not per target
        lambda other, name: f"{path} is a run of {other}, not of the target {name}: acceptance belongs to a target, "
                            "drafter and dataset and does not transfer to another target, yet the prediction uses "
                            "that run's acceptance as given; measure this target with its drafter")


def _other_model_warning(models, target, text) -> tuple[str, ...]:
    """``(text(other models joined, target name),)`` when ``models`` name another model than
    ``target`` (:func:`_other_models`), else empty."""
    other, name = _other_models(models, target)
    return (text(", ".join(other), name),) if other else ()


def _other_models(models, target) -> tuple[list[str], str]:
    """The recorded ``models`` that are not ``target`` (by name or Hugging Face id, compared by
    :func:`_model_key`), and the target's name."""
    from specsim.architecture import model_hf_id

    name = getattr(target, "name", target)
    if not models:
        return [], name
    try:
        hf = model_hf_id(name)
    except Exception:  # noqa: BLE001 - a name outside the catalog has no recorded id
        hf = None
    known = {_model_key(x) for x in (name, hf) if x}
    return [m for m in models if _model_key(m) not in known], name


def baseline_model_warnings(args, target) -> tuple[str, ...]:
    """The warning of a ``--baseline-from`` run (a ``vllm bench serve`` JSON) whose ``model_id`` is
    another model than the target predicted: the baseline sets the time of every target forward, so
    another model's run scales the whole prediction wrongly.  Empty when no file is given, it records
    no ``model_id`` or it names the target (by name or Hugging Face id, compared by
    :func:`_model_key`).

    Parameters
    ----------
    args : argparse.Namespace
        The command's arguments (``baseline_from``).
    target : ModelSpec or str
        The resolved target, or its name.

    Returns
    -------
    tuple of str
    """
    path = getattr(args, "baseline_from", None)
    if path is None:
        return ()
    return _other_model_warning(
        _measured_models_cached(_file_key(path), "bench"), target,  # models read once per command, not per target
        lambda other, name: f"--baseline-from {path} is a run of {other} (its model_id), not of the target {name}: "
                            "the baseline sets the time of every target forward, so another model's run scales the "
                            "whole prediction wrongly; give the target's own non-speculative vllm bench serve run")


def latency_table_model_warnings(path: str | None, target) -> tuple[str, ...]:
    """The warning of a ``--latency-table`` recorded by ``specsim run-matrix`` (a ``verify_cost.csv``
    beside its ``provenance.json``) whose run measured another model than the target; empty
    otherwise (tables without provenance included)."""
    if not path:
        return ()
    prov = Path(path).resolve().parent / "provenance.json"
    try:
        doc = json.loads(prov.read_text())
    except (OSError, ValueError):
        return ()
    measured = (doc.get("target") or {}).get("model") if isinstance(doc.get("target"), dict) else None
    measured = measured or ((doc.get("model") or {}).get("path") if isinstance(doc.get("model"), dict) else None)
    if not measured:
        return ()
    name = getattr(target, "name", target)
    if _model_key(measured) == _model_key(name):
        return ()
    host = doc.get("host") or {}
    on = f" on {host.get('cpu_model')} ({host.get('logical_cpus')} CPUs)" if host.get("cpu_model") else ""
    return (f"--latency-table {path} was measured on {measured}{on} ({prov.name}), not on the target {name}: its "
            "forward times are another model's",)


#: below this drafted share of decode steps (measured by an --acceptance-from file) a prediction that assumes
#: every step drafts is warned about (0.95: fewer steps drafting lowers the ratio by more than a few per cent)
PARTIAL_DRAFTING_WARN = 0.95


def add_drafting_args(p) -> None:
    """Add ``--drafted-fraction`` and ``--mean-proposal-tokens`` (``specsim predict`` / ``sweep``)."""
    g = p.add_argument_group("partial drafting (n-gram / suffix lookups that miss)")
    g.add_argument("--drafted-fraction", type=float, default=None,
                   help="share of decode steps that carry a draft, in (0, 1] (default 1, or what the "
                        "--acceptance-from file measured, when it records the run's output tokens and requests: "
                        "vLLM counts only steps that drafted)")
    g.add_argument("--mean-proposal-tokens", type=float, default=None,
                   help="tokens proposed per drafted step, 1..N (default N, or the --acceptance-from file's at "
                        "its N)")


def file_drafting(path, before, lookup_method: str | None, others: str, *, share_given: bool):
    """What an ``--acceptance-from`` file measured of how often its run drafted
    (:func:`specsim.vllm.detect.read_drafting`), for a lookup method; the one place of the warnings of
    ``specsim predict``, ``sweep`` and ``recommend`` about it.

    Parameters
    ----------
    path, before : str
        ``--acceptance-from`` and ``--before``.
    lookup_method : str or None
        The lookup method (:data:`specsim.drafters.LOOKUP_METHODS`) predicted, or None for methods that draft on
        every step.
    others : str
        Those methods as the warning names them, with their verb (``"eagle3 drafts"``).
    share_given : bool
        ``--drafted-fraction`` was given (no warning: the caller does not read the file's share).

    Returns
    -------
    (dict or None, counts)
        ``read_drafting``'s dict where a lookup method is predicted and the file records the totals, else None
        (warned about, unless ``share_given``: a lookup run that cannot tell its share, or a file whose run
        drafted on fewer steps than a method drafting on every step would); the file's counts record.
        The dict (:meth:`specsim.vllm.counts.SpecDecodeCounts.drafting`): ``drafted_fraction``, the share of
        decode request-steps that carried a draft; ``mean_proposal_tokens``, tokens per drafted step;
        ``decode_steps``, request-steps; ``source``, what the totals were read from.

    Raises
    ------
    SpecsimValueError, DataError, NotCollectedError
        As :func:`specsim.vllm.detect.read_counts` for ``path`` / ``before`` (read once per command:
        :func:`read_counts_once`).
    """
    import sys

    from specsim.drafters import LOOKUP_METHODS

    kind, counts = read_counts_once(path, before)
    d = read_drafting(path, kind, counts, before=before)
    if d is None:
        if lookup_method is not None and not share_given:
            print(f"specsim: WARNING: {path} ({kind}) does not record the run's output tokens and finished requests, "
                  f"so the share of decode steps that drafted is unknown and every step is taken to draft: a "
                  f"{lookup_method} run's lookups that found nothing are in no counter, so the ratio is too high by "
                  "as much as they were frequent; give --drafted-fraction, or --acceptance-from an output that "
                  "records them (vllm bench serve JSON or console output, vllm bench sweep results, /metrics "
                  "scrapes with --before, LLM.get_metrics() dump, GuideLLM report, per-request response)",
                  file=sys.stderr)
        return None, counts
    if lookup_method is None:
        if d["drafted_fraction"] < PARTIAL_DRAFTING_WARN and not share_given:
            print(f"specsim: WARNING: {d['source']}: only {d['drafted_fraction']:.1%} of its decode steps carried a "
                  f"draft, as a lookup method's run does ({', '.join(LOOKUP_METHODS)}); {others} on every step, so "
                  "its acceptance may not transfer either", file=sys.stderr)
        return None, counts
    return d, counts


def drafting_from_args(args, n_values) -> dict:
    """``drafted_fraction`` / ``mean_proposal_tokens`` keyword arguments of ``predict`` / ``sweep``:
    ``--drafted-fraction`` / ``--mean-proposal-tokens`` when given, else, for a lookup method
    (:data:`specsim.drafters.LOOKUP_METHODS`: ngram, ngram_gpu, suffix), what an ``--acceptance-from`` file that
    records the run's output tokens and finished requests measured (every format but server logs and
    speculators output; :func:`specsim.vllm.detect.read_drafting`: vLLM counts a draft only on steps
    that proposed one, so an n-gram run's lookup misses are not in its acceptance counts); its
    ``mean_proposal_tokens`` only when every N predicted is the file's N.  What was taken from the file
    is said on stderr; for another method (which drafts on every step) a file whose run drafted on
    fewer steps is warned about.  ``n_values``: the N predicted (None: unknown, e.g. from a
    ``--speculative-config``)."""
    import json
    import sys

    from specsim.drafters import LOOKUP_METHODS

    out: dict = {}
    if args.drafted_fraction is not None:
        out["drafted_fraction"] = args.drafted_fraction
    if args.mean_proposal_tokens is not None:
        out["mean_proposal_tokens"] = args.mean_proposal_tokens
    path = getattr(args, "acceptance_from", None)
    if path is None or len(out) == 2:
        return out
    method = args.method
    if method is None and args.speculative_config:
        with contextlib.suppress(ValueError, AttributeError):
            method = json.loads(args.speculative_config).get("method")
    d, counts = file_drafting(path, getattr(args, "before", None), method if method in LOOKUP_METHODS else None,
                              f"{method or 'the method predicted'} drafts", share_given="drafted_fraction" in out)
    if d is None:
        return out
    took = []
    if "drafted_fraction" not in out:
        out["drafted_fraction"] = min(1.0, d["drafted_fraction"])
        took.append(f"drafted_fraction={out['drafted_fraction']:.3f}")
    n_file = counts.num_speculative_tokens
    same_n = n_values is not None and n_file is not None and set(n_values) == {n_file}
    if "mean_proposal_tokens" not in out and same_n:
        out["mean_proposal_tokens"] = d["mean_proposal_tokens"]
        took.append(f"mean_proposal_tokens={d['mean_proposal_tokens']:.3f}")
    given = [f"--{k.replace('_', '-')} {v:g} given" for k, v in out.items() if not any(t.startswith(k) for t in took)]
    print(f"specsim: {d['source']}: {d['drafted_fraction']:.1%} of its {d['decode_steps']:.0f} decode request-steps "
          f"carried a draft, {d['mean_proposal_tokens']:.2f} tokens proposed per drafted step (at N = {n_file}); "
          + "predicted with " + ", ".join(took + given)
          + ("" if same_n or "mean_proposal_tokens" in out else f" (mean_proposal_tokens only at the file's N = "
             f"{n_file}: other N propose up to N)"), file=sys.stderr)
    return out


def add_stack_args(p) -> None:
    """Add the deployment-stack options of ``specsim predict``, ``sweep`` and ``recommend`` to an
    argparse (sub)parser: ``--vllm-version``, ``--platform``, ``--expert-parallel`` and
    ``--latency-table`` (read by ``specsim.cli._latency_table``)."""
    p.add_argument("--vllm-version", help="the vLLM release you will run, e.g. 0.32.0 (warns when the calibration's "
                                          "stack differs: MAJOR.MINOR compared; sweep warns on stderr)")
    p.add_argument("--platform", help="the platform you will run, e.g. 'ROCm 7.2' or 'CUDA 12.8' (warns when the "
                                      "calibration's stack differs: the platform name, and MAJOR.MINOR when both "
                                      "give a version; sweep warns on stderr)")
    p.add_argument("--expert-parallel", action="store_true",
                   help="vLLM --enable-expert-parallel: MoE all-to-all dispatch / combine instead of the all-reduce "
                        "(MoE targets only; a no-op at --tp 1, warned)")
    p.add_argument("--latency-table", help="CSV of measured target forward times (columns batch, q, context, seconds; "
                                           "e.g. a run's verify_cost.csv): replaces the roofline for the target's "
                                           "decode / verification steps; prefills and draft passes from the stack "
                                           "calibration (stated); every point asked must lie inside the table (its "
                                           "context range must hold ISL + OSL/2)")


BASELINE_FLAGS = ("--baseline-tpot-ms", "--baseline-tok-per-s", "--baseline-from")


def add_baseline_args(p) -> None:
    """Add the measured-baseline options (``--baseline-tpot-ms``, ``--baseline-tok-per-s``,
    ``--baseline-from FILE``, ``--baseline-metric``) to an argparse (sub)parser."""
    g = p.add_argument_group("measured baseline (at most one; anchors the target's step time)")
    g.add_argument("--baseline-tpot-ms", type=float, metavar="MS",
                   help="measured TPOT of the NON-speculative baseline at --concurrency and --isl/--osl, milliseconds")
    g.add_argument("--baseline-tok-per-s", type=float, metavar="TOK_S",
                   help="measured output tok/s of the NON-speculative baseline at --concurrency and --isl/--osl")
    g.add_argument("--baseline-from", metavar="FILE",
                   help="a `vllm bench serve --save-result` JSON of the NON-speculative baseline (its max_concurrency "
                        "and mean ISL/OSL must match --concurrency/--isl/--osl, and fill them when not given)")
    g.add_argument("--baseline-metric", choices=["tok_per_s", "tpot"], default=None,
                   help="with --baseline-from: anchor on output_throughput (tok_per_s, default) or mean_tpot_ms (tpot)")


def baseline_from_args(args) -> MeasuredBaseline | None:
    """The measured baseline given on the command line, or None.

    ``--baseline-tpot-ms`` / ``--baseline-tok-per-s`` are taken at the concurrency and ISL/OSL asked;
    ``--baseline-from FILE`` is read by :meth:`MeasuredBaseline.from_bench` (refused when the run had
    speculative decoding, no fixed concurrency, ...).

    Raises
    ------
    SpecsimValueError
        More than one baseline option, a non-positive value, ``--baseline-metric`` without
        ``--baseline-from``, or a file :meth:`MeasuredBaseline.from_bench` refuses.
    """
    tpot, tok, path = (getattr(args, "baseline_tpot_ms", None), getattr(args, "baseline_tok_per_s", None),
                       getattr(args, "baseline_from", None))
    metric = getattr(args, "baseline_metric", None)
    given = [f for f, v in zip(BASELINE_FLAGS, (tpot, tok, path)) if v is not None]
    if len(given) > 1:
        raise SpecsimValueError(given[0], f"give at most one of {', '.join(BASELINE_FLAGS)} (given: "
                                f"{', '.join(given)})", None, list(BASELINE_FLAGS))
    if metric is not None and path is None:
        raise SpecsimValueError("--baseline-metric", "applies only with --baseline-from FILE", metric)
    if tpot is not None:
        if not (math.isfinite(tpot) and tpot > 0):
            raise SpecsimValueError("--baseline-tpot-ms", "must be a finite number of milliseconds > 0", tpot)
        return MeasuredBaseline(tpot_s=tpot / 1e3, source="--baseline-tpot-ms")
    if tok is not None:
        if not (math.isfinite(tok) and tok > 0):
            raise SpecsimValueError("--baseline-tok-per-s", "must be a finite number of tokens/s > 0", tok)
        return MeasuredBaseline(output_tok_per_s=tok, source="--baseline-tok-per-s")
    if path is not None:
        if Path(path).is_dir():
            raise SpecsimValueError("--baseline-from", "is a directory: give the baseline run's vllm bench serve "
                                    "JSON (a recorded run's bench.json)", path)
        if not Path(path).is_file():
            raise SpecsimValueError("--baseline-from", "no such file", path)
        from specsim.vllm.bench import read_bench_results

        n = len(read_bench_results(path))
        if n > 1:  # the library's message points at index=, which the command line has no flag for
            raise SpecsimValueError("--baseline-from", f"holds {n} results, one per line (vllm bench serve "
                                    "--append-result): the baseline is one run; save the line of the run you "
                                    f"mean alone, e.g. `sed -n Np {path} > baseline.json` for the one on line N",
                                    path)
        return MeasuredBaseline.from_bench(path, field_prefix="--baseline-from",
                                           metric={"tpot": "tpot_s", "tok_per_s": "output_tok_per_s"}.get(metric))
    return None


def check_baseline_point(b: MeasuredBaseline | None, *, concurrency, isl, osl, path: str | None) -> tuple:
    """Fill ``--concurrency`` / ``--isl`` / ``--osl`` left unset (None) from a baseline file and check
    the ones given against it (on the command line a baseline applies only where it was measured).

    Returns ``(concurrency, isl, osl)`` (the file's values where unset, else those given).

    Raises
    ------
    SpecsimValueError
        ``--concurrency`` differs from the file's ``max_concurrency``, or ``--isl`` / ``--osl``
        from its mean input / output tokens per request (beyond the tolerance of ``specsim.predict``).
    """
    if b is None:
        return concurrency, isl, osl
    out = []
    for flag, asked, measured, what in (("--concurrency", concurrency, b.concurrency, "max_concurrency"),
                                        ("--isl", isl, b.isl, "mean input tokens per request"),
                                        ("--osl", osl, b.osl, "mean output tokens per request")):
        if asked is None:
            out.append(measured)
            continue
        if measured is not None:
            vals = list(asked) if isinstance(asked, (list, tuple)) else [asked]
            ok = all(v == measured if flag == "--concurrency" else
                     abs(v - measured) <= max(1.0, BASELINE_LENGTH_TOLERANCE * v) for v in vals)
            if not ok:
                raise SpecsimValueError(flag, f"differs from the baseline run {path} ({what} {measured}): the "
                                        f"measured baseline anchors only the point it was measured at; give {flag} "
                                        f"{measured} (or leave it out), or measure the baseline at {asked}", asked,
                                        [measured])
        out.append(asked)
    return tuple(out)
