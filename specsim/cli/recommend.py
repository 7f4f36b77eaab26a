"""``specsim recommend``: options and the command (layer 5, entry points)."""
from __future__ import annotations

import dataclasses
import re
import sys

from specsim.cli._args import (
    _HARDWARE_HELP,
    acceptance_from_args,
    acceptance_model_warnings,
    add_acceptance_from_args,
    add_baseline_args,
    add_stack_args,
    baseline_from_args,
    baseline_model_warnings,
    check_baseline_point,
    latency_table_model_warnings,
    file_drafting,
    resolve_target,
)
from specsim.errors import SpecsimValueError
from specsim.recommend import DEFAULT_CONCURRENCY, is_placeholder_checkpoint, recommend

__all__ = ["add_recommend_parser", "add_stack_args", "recommend_cli"]


def add_recommend_parser(p) -> None:
    """Add the ``specsim recommend`` options to an argparse (sub)parser."""
    p.add_argument("--target", required=True, help="target model (specsim/data/models name or HF id, e.g. "
                                                   "gemma-4-26B-A4B-it, or a path to a config.json / model directory)")
    p.add_argument("--method", help="vLLM method(s), comma-separated (dflash, eagle3, mtp, dspark, ngram); "
                                    "default: every method with published acceptance for the target")
    p.add_argument("--draft", help="draft checkpoint (default: the seed drafter for target/method)")
    p.add_argument("--hardware", default="MI300X", help="accelerator: " + _HARDWARE_HELP + "; default MI300X")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--precision", help="target weight precision (default: the model's serving precision)")
    p.add_argument("--isl", type=int, default=None, help="input tokens per request (default 1024, or the "
                   "--baseline-from run's mean)")
    p.add_argument("--osl", type=int, default=None, help="output tokens per request, >= 2 (the prefill samples "
                   "the first; default 1024, or the --baseline-from run's mean)")
    p.add_argument("--concurrency", default=",".join(map(str, DEFAULT_CONCURRENCY)),
                   help="comma-separated concurrencies to report (bands cover 1..max)")
    p.add_argument("--max-concurrency", type=int, help="upper end of the concurrency range (default: max of --concurrency)")
    p.add_argument("--max-n", type=int, help="largest num_speculative_tokens considered (default: measured positions)")
    p.add_argument("--max-model-len", type=int, help="tokens per sequence for the KV-cache check (default isl+osl)")
    p.add_argument("--gpu-memory-utilization", type=float, help="vLLM gpu_memory_utilization (default 0.92)")
    p.add_argument("--dataset", default="mix", help="published acceptance: GSM8K, MATH500, HumanEval, MBPP or mix")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature to recommend for")
    p.add_argument("--temperature-assumption", help="explicit assumption that the profile transfers to --temperature")
    p.add_argument("--step-time-rel-error", type=float, help="relative 1-sigma step-time error (default: calibration)")
    p.add_argument("--level", type=float, default=0.95, help="interval level")
    p.add_argument("--flat-tolerance", type=float, default=0.02, help="runner-up tolerance (fraction)")
    g = p.add_argument_group("acceptance (at most one; default: published appendix profile)")
    g.add_argument("--acceptance", type=float, help="constant conditional acceptance rate per position")
    g.add_argument("--cumulative", help="per-position CUMULATIVE acceptance, comma-separated")
    g.add_argument("--conditional", help="per-position CONDITIONAL acceptance, comma-separated")
    add_acceptance_from_args(g)
    g.add_argument("--profile-temperature", type=float, default=None, help="temperature the acceptance was measured at")
    p.add_argument("--drafted-fraction", type=float, default=None,
                   help="share of decode steps that carry a draft, for lookup methods (ngram, ngram_gpu, suffix), "
                        "in (0, 1]; default: measured by an --acceptance-from file that records it, else 1")
    p.add_argument("--ngram-lookup", metavar="MIN,MAX",
                   help="prompt_lookup_min,prompt_lookup_max the ngram acceptance was measured with: written into the "
                        "recommended ngram configs (without it vLLM 0.32 uses 5,5)")
    add_stack_args(p)
    add_baseline_args(p)
    p.add_argument("--baseline-concurrency", type=int, metavar="C",
                   help="concurrency the --baseline-tpot-ms / --baseline-tok-per-s measurement was taken at "
                        "(--baseline-from: the run's max_concurrency)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the whole recommendation as JSON")
    out.add_argument("--config-only", action="store_true",
                     help="print only the --speculative-config JSON of the best method, the one with the highest mean "
                          "recommended ratio over the --concurrency values (the first listed; for $(...))")


def _drafted_fraction(args, methods) -> float | None:
    """The ``drafted_fraction`` of ``specsim recommend``: ``--drafted-fraction`` when given, else -- a lookup
    method recommended (:data:`specsim.drafters.LOOKUP_METHODS`) -- what an ``--acceptance-from`` file that records
    the run's output tokens and finished requests measured (:func:`specsim.vllm.detect.read_drafting`), said on
    stderr; None (every step drafts) otherwise.  A file whose run drafted on fewer steps is warned about when no
    lookup method is recommended (those draft on every step), and so is a file that cannot tell the share when
    one is.

    Parameters
    ----------
    args : argparse.Namespace
        ``drafted_fraction``, ``acceptance_from``, ``before``.
    methods : list of str or None
        The methods asked (None: the published ones, which draft every step).

    Returns
    -------
    float or None
    """
    from specsim.drafters import LOOKUP_METHODS

    lookup = [m for m in (methods or ()) if m in LOOKUP_METHODS]
    if args.drafted_fraction is not None or args.acceptance_from is None:
        return args.drafted_fraction
    d, _ = file_drafting(args.acceptance_from, args.before, lookup[0] if lookup else None,
                         "the methods recommended draft", share_given=False)
    if d is None:
        return None
    f = min(1.0, d["drafted_fraction"])
    print(f"specsim: {d['source']}: {d['drafted_fraction']:.1%} of its {d['decode_steps']:.0f} decode request-steps "
          f"carried a draft: {', '.join(lookup)} recommended with drafted_fraction={f:.3f} (each drafted step taken "
          "to propose N tokens)", file=sys.stderr)
    return f


def recommend_cli(args, *, latency=None) -> int:
    """Run ``specsim recommend`` from parsed arguments (see :func:`add_recommend_parser`).

    Prints the summary (default), the full JSON (``--json``) or only the best method's
    ``--speculative-config`` JSON (``--config-only``).  Returns the exit status (1 when every
    method was excluded or speculation never pays, with ``--config-only``).  The recommendation's
    warnings (a ``--vllm-version`` / ``--platform`` other than the calibration's stack) are in
    the summary and the JSON; with ``--config-only`` they go to stderr.

    Parameters
    ----------
    args : argparse.Namespace
    latency : LatencyModel, optional
        The ``--latency-table`` as a :class:`specsim.latency.MeasuredLatency` (read by the
        ``specsim`` command, ``specsim.cli._latency_table``), or None.

    Raises
    ------
    SpecsimValueError
        ``--concurrency`` not comma-separated integers (an empty element included);
        ``--max-concurrency`` below a value of an explicitly given ``--concurrency``;
        ``--baseline-concurrency`` missing, conflicting or without a baseline; and everything
        :func:`specsim.recommend.recommend` refuses.
    """
    parts = str(args.concurrency).split(",")
    try:
        cs = [int(x) for x in parts]
    except ValueError:
        raise SpecsimValueError("--concurrency", "must be comma-separated integers >= 1, no empty element",
                                args.concurrency) from None
    given = str(args.concurrency) != ",".join(map(str, DEFAULT_CONCURRENCY))
    if args.max_concurrency is not None and given and any(c > args.max_concurrency for c in cs):
        above = sorted({c for c in cs if c > args.max_concurrency})
        raise SpecsimValueError("--max-concurrency", f"is below the --concurrency values {above}: raise "
                                "--max-concurrency or drop them from --concurrency (the default --concurrency "
                                "list is cut at --max-concurrency; a list given is not)", args.max_concurrency,
                                [f">= {above[-1]}"])
    b = baseline_from_args(args)
    b_conc = args.baseline_concurrency
    isl, osl = args.isl, args.osl
    if b is not None:  # ISL / OSL left out: the baseline run's (as predict and sweep fill them)
        _, isl, osl = check_baseline_point(b, concurrency=None, isl=args.isl, osl=args.osl, path=args.baseline_from)
        if b.concurrency is not None:
            if b_conc is not None and b_conc != b.concurrency:
                raise SpecsimValueError("--baseline-concurrency", f"conflicts with the max_concurrency "
                                        f"{b.concurrency} of the baseline run {args.baseline_from}", b_conc,
                                        [b.concurrency])
            b_conc = b.concurrency
        if b_conc is None:
            raise SpecsimValueError("--baseline-concurrency", "is required with --baseline-tpot-ms / "
                                    "--baseline-tok-per-s: the concurrency the baseline was measured at")
    elif b_conc is not None:
        raise SpecsimValueError("--baseline-concurrency", "applies only with a measured baseline (" +
                                ", ".join(("--baseline-tpot-ms", "--baseline-tok-per-s", "--baseline-from")) + ")",
                                b_conc)
    isl, osl = (1024 if isl is None else isl), (1024 if osl is None else osl)
    methods = None if not args.method else [m.strip() for m in args.method.split(",") if m.strip()]
    if methods is not None and len(methods) == 1:
        methods = methods[0]
    drafted = _drafted_fraction(args, [methods] if isinstance(methods, str) else methods)
    lookup = None
    if args.ngram_lookup is not None:
        parts = [x.strip() for x in args.ngram_lookup.split(",")]
        if len(parts) != 2 or not all(re.fullmatch("[0-9]+", x) and int(x) >= 1 for x in parts):
            raise SpecsimValueError("--ngram-lookup", "must be MIN,MAX: prompt_lookup_min and prompt_lookup_max, two "
                                    "integers >= 1", args.ngram_lookup)
        lookup = (int(parts[0]), int(parts[1]))
    rec = recommend(
        resolve_target(args.target), methods, hardware=args.hardware, tp=args.tp, precision=args.precision, isl=isl,
        osl=osl, concurrency=cs, max_concurrency=args.max_concurrency, max_num_speculative_tokens=args.max_n,
        acceptance=acceptance_from_args(args, required=False), dataset=args.dataset, draft=args.draft, temperature=args.temperature,
        temperature_assumption=args.temperature_assumption, step_time_rel_error=args.step_time_rel_error,
        level=args.level, flat_tolerance=args.flat_tolerance, max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization, baseline=b, baseline_concurrency=b_conc,
        vllm_version=getattr(args, "vllm_version", None), platform=getattr(args, "platform", None), latency=latency,
        expert_parallel=bool(getattr(args, "expert_parallel", False)), ngram_lookup=lookup,
        drafted_fraction=1.0 if drafted is None else drafted,
    )
    extra = (acceptance_model_warnings(args, rec.target) + baseline_model_warnings(args, rec.target)
             + latency_table_model_warnings(getattr(args, "latency_table", None), rec.target))
    if extra:  # shown with the recommendation's own warnings (and in --json)
        rec = dataclasses.replace(rec, warnings=tuple(rec.warnings) + extra)
    if args.config_only:
        for w in rec.warnings:  # stdout is the config alone
            print(f"specsim: WARNING: {w}", file=sys.stderr)
        best = rec.best
        if best is None or best.speculative_config is None:
            why = "; ".join(f"{m}: {r}" for m, r in rec.excluded) or "speculation does not pay in the range asked"
            print(f"specsim: no speculative config recommended ({why})", file=sys.stderr)
            return 1
        model = (best.speculative_config or {}).get("model")
        if is_placeholder_checkpoint(model):
            print(f"specsim: no published {best.method} draft checkpoint for {args.target} (the costs use a draft "
                  f"derived from the target), so the config's model field would be the placeholder {model!r}; "
                  "run without --config-only to see the config and put your checkpoint's id in it",
                  file=sys.stderr)
            return 1
        print(best.speculative_config_json)
        return 0
    print(rec.to_json(indent=2) if args.json else rec.summary())
    return 0
