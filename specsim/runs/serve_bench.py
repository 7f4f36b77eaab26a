"""One ``vllm serve`` + ``vllm bench serve`` group (layer 4, runs): bench plans run against one server,
greedy outputs compared with the baseline's, each bench recorded as a run.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from specsim.errors import DataError, NotCollectedError, RunError, SpecsimValueError
from specsim.runs.process import (
    BenchClient,
    CpuAccount,
    Server,
    deferred_interrupts,
    free_port,
    run_command,
)
from specsim.runs.recorder import RunRecorder, RunResult, write_json
from specsim.vllm.bench import read_bench_result
from specsim.vllm.prometheus import diff_scrapes

# --------------------------------------------------------------------------------------------
# server + bench sessions
# --------------------------------------------------------------------------------------------

@dataclass
class BenchPlan:
    """One benchmark against a running server, recorded as run ``run_id``.

    ``bench_cmd`` may contain ``{base_url}``, ``{port}``, ``{result_dir}`` and ``{result_file}``
    (replaced before it runs).  ``baseline_run`` is a recorded run whose generated texts a greedy
    spec run must reproduce (checked and stored in ``checks.json``); ``invalid_reason`` marks the run
    invalid after it completes.
    """

    run_id: str
    bench_cmd: Sequence[str]
    provenance: dict = field(default_factory=dict)
    baseline_run: Path | None = None
    invalid_reason: str | None = None
    result_file: str = "bench.json"
    #: seconds the bench may run before it is stopped and recorded as failed (None: the session's)
    timeout_s: float | None = None


def _format_cmd(cmd: Sequence[str], **kw) -> list[str]:
    """Replace the literal placeholders ``{name}`` for each ``name`` in ``kw`` (other braces, e.g. in
    a JSON argument, are left alone)."""
    out = []
    for c in cmd:
        c = str(c)
        for k, v in kw.items():
            c = c.replace("{" + k + "}", str(v))
        out.append(c)
    return out


def _bench_outputs(bench_json: Path) -> list[dict]:
    """Per-request generated texts and lengths from a ``vllm bench serve --save-detailed`` result."""
    d = json.loads(bench_json.read_text())
    texts = d.get("generated_texts") or []
    ilens = d.get("input_lens") or [None] * len(texts)
    olens = d.get("output_lens") or [None] * len(texts)
    errs = d.get("errors") or [""] * len(texts)
    return [{"index": i, "input_len": ilens[i] if i < len(ilens) else None,
             "output_len": olens[i] if i < len(olens) else None, "text": t,
             "error": errs[i] if i < len(errs) else ""} for i, t in enumerate(texts)]


def compare_outputs(outputs: list[dict], baseline: list[dict], *, key: str = "text") -> dict:
    """Compare generated outputs request by request (same order, same prompts).

    Returns {"compared", "identical", "all_identical", "first_mismatch" (index or None),
    "basis"}.  Raises RunError if the two runs did not send the same prompts (input lengths differ)
    or have different numbers of requests.
    """
    if len(outputs) != len(baseline):
        raise RunError(f"output comparison: {len(outputs)} requests vs {len(baseline)} in the baseline")
    for a, b in zip(outputs, baseline):
        if a.get("input_len") is not None and b.get("input_len") is not None and a["input_len"] != b["input_len"]:
            raise RunError(f"output comparison: request {a.get('index')} has input_len {a['input_len']} "
                           f"vs {b['input_len']} in the baseline: not the same prompts")
    same = [a.get(key) == b.get(key) for a, b in zip(outputs, baseline)]
    mism = [i for i, s in enumerate(same) if not s]
    return {"compared": len(same), "identical": int(sum(same)), "all_identical": all(same) and bool(same),
            "first_mismatch": mism[0] if mism else None,
            "basis": "token ids" if key == "token_ids" else
                     "generated text (bench serve returns detokenised text, not token ids)"}


def _read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def summarise_run(run_dir: Path, result_file: str = "bench.json") -> dict:
    """Headline numbers of a bench run, parsed with :mod:`specsim.vllm`.

    Keys: the bench summary (throughput, duration, ...), ``spec`` (spec-decode counters of the
    /metrics delta before -> after: num_drafts, num_draft_tokens, num_accepted_tokens, mal,
    acceptance_rate, accepted_per_pos, per_position_rates), ``spec_bench`` (the same from the bench
    JSON), ``scrape_matches_bench`` and ``generation_tokens_delta``.  A parse error is returned
    as ``{"summary_error": text}`` (the raw files stay in the run directory).
    """

    out: dict[str, Any] = {}
    try:
        br = read_bench_result(run_dir / result_file)
        out.update({k: (v.item() if hasattr(v, "item") else v) for k, v in br.summary().to_dict().items()})
        delta = diff_scrapes((run_dir / "metrics_before.prom").read_text(),
                             (run_dir / "metrics_after.prom").read_text())
        out["generation_tokens_delta"] = delta.generation_tokens
        try:
            c = delta.spec_counts()
        except NotCollectedError:
            c = None
        if c is not None:
            out["spec"] = {**c.summary(), "accepted_per_pos": list(c.accepted_per_pos),
                           "per_position_rates": [float(x) for x in c.per_position_rates]}
        if br.spec is not None:
            out["spec_bench"] = {"num_drafts": br.spec.num_drafts, "num_draft_tokens": br.spec.num_draft_tokens,
                                 "num_accepted_tokens": br.spec.num_accepted_tokens,
                                 "accepted_per_pos": list(br.spec.accepted_per_pos)}
        if c is not None and br.spec is not None:
            out["scrape_matches_bench"] = (
                (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, tuple(c.accepted_per_pos))
                == (br.spec.num_drafts, br.spec.num_draft_tokens, br.spec.num_accepted_tokens,
                    tuple(br.spec.accepted_per_pos)))
    except (DataError, OSError, ValueError) as e:
        out["summary_error"] = f"{type(e).__name__}: {e}"
    return out


def _bench_one(server: Server, plan: BenchPlan, *, runs_dir: Path, env: dict[str, str] | None,
               server_log: Path, bench_timeout_s: float | None, base_prov: dict,
               client: BenchClient | None = None) -> RunResult:
    prov = {**base_prov, **plan.provenance}
    prov.setdefault("commands", {})
    prov["commands"] = {**prov["commands"], "server": server.cmd}
    prov["server_startup_seconds"] = server.startup_seconds
    with RunRecorder(plan.run_id, runs_dir, prov) as rec:
        try:
            (rec.path / "metrics_before.prom").write_text(server.scrape_metrics())
            cmd = _format_cmd(plan.bench_cmd, base_url=server.url, port=server.port, result_dir=rec.path,
                              result_file=plan.result_file)
            rec.provenance["commands"]["bench"] = cmd
            timeout = plan.timeout_s if plan.timeout_s is not None else bench_timeout_s
            if client is not None:  # started (vLLM imported) before the CPU accounting window
                rec.provenance["bench_client"] = {"kind": "persistent", "started_seconds": client.ensure(cmd)}
            else:  # one `vllm bench serve` process for this cell (the estimates tell the clients apart)
                rec.provenance["bench_client"] = {"kind": "process"}
            usage: dict = {}
            with CpuAccount(server.pid, client.pgid if client is not None else None) as acct:
                if client is not None:
                    rec.provenance["bench_seconds"] = client.run(cmd, log_path=rec.path / "bench.log",
                                                                 timeout_s=timeout)
                else:
                    rec.provenance["bench_seconds"] = run_command(cmd, log_path=rec.path / "bench.log", env=env,
                                                                  timeout_s=timeout, usage=usage)
            # the one-off bench process ran under a detached guardian, invisible to this process's
            # RUSAGE_CHILDREN: its CPU (the guardian's) is the bench's, not other processes'
            acct.attribute(usage.get("cpu_seconds"))
            rec.provenance["cpu_accounting"] = acct.result
            (rec.path / "metrics_after.prom").write_text(server.scrape_metrics())
            bj = rec.path / plan.result_file
            if not bj.exists():
                raise RunError(f"bench finished but wrote no {plan.result_file}; log {rec.path / 'bench.log'}")
            outs = _bench_outputs(bj)
            _write_jsonl(rec.path / "outputs.jsonl", outs)
            failed = [o for o in outs if o.get("error")]
            if failed:
                raise RunError(f"{len(failed)} of {len(outs)} requests failed: {failed[0]['error'][:500]}")
            if plan.baseline_run is not None:
                chk = compare_outputs(outs, _read_jsonl(Path(plan.baseline_run) / "outputs.jsonl"))
                chk["baseline_run_id"] = Path(plan.baseline_run).name
                rec.provenance.setdefault("checks", {})["greedy_identical_to_baseline"] = chk
                write_json(rec.path / "checks.json", {"greedy_identical_to_baseline": chk})
            rec.provenance["summary"] = summ = summarise_run(rec.path, plan.result_file)
            write_json(rec.path / "summary.json", summ)
            if plan.invalid_reason:
                rec.mark_invalid(plan.invalid_reason)
        finally:
            with contextlib.suppress(OSError):
                shutil.copyfile(server_log, rec.path / "server.log")
    return RunResult(plan.run_id, rec.final_path, rec.status or "ok", rec.error,
                     rec.provenance.get("summary", {}))


def _record_failed(plan: BenchPlan, *, runs_dir: Path, error: BaseException, server_log: Path | None,
                   base_prov: dict, server_cmd: Sequence[str]) -> RunResult:
    prov = {**base_prov, **plan.provenance}
    prov["commands"] = {**prov.get("commands", {}), "server": list(server_cmd)}
    try:
        with RunRecorder(plan.run_id, runs_dir, prov) as rec:
            if server_log is not None and server_log.exists():
                shutil.copyfile(server_log, rec.path / "server.log")
            raise error
    except RunError as e:
        if e is not error:
            raise
    return RunResult(plan.run_id, rec.final_path, "failed", rec.error)


def interrupt_text(e: BaseException | None) -> str:
    """``"interrupted (<signal>)"`` of a KeyboardInterrupt: the signal a :class:`StopSignal
    <specsim.runs.process.StopSignal>` names (``SIGINT``, ``SIGTERM``), else ``KeyboardInterrupt`` (one
    raised without a stop signal handler: Python's own Ctrl-C handler, ``ray.cancel``, a notebook)."""
    return f"interrupted ({getattr(e, 'signal', None) or 'KeyboardInterrupt'})"


def _record_interrupted(plan: BenchPlan, *, runs_dir: Path, reason: str, server_log: Path | None,
                        base_prov: dict, server_cmd: Sequence[str]) -> RunResult:
    """Record the plan in flight when an interrupt came before its bench began (the server starting,
    the warm-up) as failed with ``reason``, keeping the server log so far."""
    prov = {**base_prov, **plan.provenance}
    prov["commands"] = {**prov.get("commands", {}), "server": list(server_cmd)}
    with RunRecorder(plan.run_id, runs_dir, prov) as rec:
        if server_log is not None and server_log.exists():
            with contextlib.suppress(OSError):
                shutil.copyfile(server_log, rec.path / "server.log")
        rec.mark_failed(reason)
    return RunResult(plan.run_id, rec.final_path, "failed", rec.error)


def _server_end(srv: Server) -> dict:
    import signal as _signal

    from specsim.runs.provenance import utc_now

    rc = srv.returncode
    sig = None
    if rc is not None and rc < 0:
        with contextlib.suppress(ValueError):
            sig = _signal.Signals(-rc).name
    return {"startup_seconds": srv.startup_seconds, "stop_seconds": srv.stop_seconds, "returncode": rc,
            "stop_signal": sig, "stop_signals_sent": list(getattr(srv, "signals_sent", [])),
            "removed_files": list(getattr(srv, "removed_files", [])), "stopped_at": utc_now()}


def new_server(server_cmd: Sequence[str], *, runs_dir: str | os.PathLike, port: int | None = None,
               env: dict[str, str] | None = None, health_timeout_s: float = 600.0,
               stop_timeout_s: float = 30.0) -> Server:
    """A :class:`~specsim.runs.process.Server` for ``server_cmd`` (``{port}`` replaced by ``port``,
    default :func:`free_port`), not started, logging to ``server.log`` in a new ``.tmp-server-*``
    directory of ``runs_dir`` (removed by :func:`serve_and_bench` when it stops the server)."""
    port = port or free_port()
    logdir = Path(tempfile.mkdtemp(prefix=".tmp-server-", dir=runs_dir))
    return Server(_format_cmd(server_cmd, port=port), port=port, log_path=logdir / "server.log", env=env,
                  health_timeout_s=health_timeout_s, stop_timeout_s=stop_timeout_s)


def serve_and_bench(server_cmd: Sequence[str], plans: Sequence[BenchPlan], *, runs_dir: str | os.PathLike,
                    port: int | None = None, env: dict[str, str] | None = None, base_provenance: dict | None = None,
                    health_timeout_s: float = 600.0, bench_timeout_s: float | None = 3600.0,
                    stop_timeout_s: float = 30.0, warmup: dict | None = None, progress=None,
                    server_stats: dict | None = None, bench_client: "str | BenchClient" = "process",
                    server: "Server | None" = None, server_error: RunError | None = None) -> list[RunResult]:
    """Start one server, run each :class:`BenchPlan` against it (in order), always stop the server.

    Parameters
    ----------
    server_cmd : sequence of str
        Server command; ``{port}`` is replaced by the port.
    plans : sequence of BenchPlan
        Benchmarks, each recorded as its own run (metrics scraped before and after, a copy of the
        server log so far, the bench result and log, ``outputs.jsonl``, ``provenance.json``).
    runs_dir : path
        Where runs are recorded.
    port : int, optional
        Default: :func:`free_port`.
    warmup : dict, optional
        Body of one ``POST /v1/completions`` sent after the server is healthy and before the first
        metrics scrape (warms shapes and JIT paths so the first bench is not charged for them).
    progress : tqdm-like, optional
        ``.update(1)`` is called after each plan.
    bench_client : {"process", "persistent"} or BenchClient
        ``"process"``: each plan's command runs as its own process (what ``vllm bench sweep`` does);
        ``"persistent"``: one :class:`~specsim.runs.process.BenchClient` for the server runs every
        ``vllm bench serve`` plan through vLLM's own benchmark ``main`` (no ~9 s start per plan);
        a BenchClient: that one (shared across servers; the caller closes it).
    server_stats : dict, optional
        Filled with how the server ended: ``startup_seconds``, ``stop_seconds`` (first stop signal
        to the end of its process group), ``returncode`` (negative: the signal that ended it),
        ``stop_signal`` (the signal that ended it, or None for a normal exit), ``removed_files`` (vLLM's
        rendezvous files its log named, removed once it ended:
        :func:`specsim.runs.process.remove_rendezvous_files`) and ``stopped_at`` (UTC).

    server : Server, optional
        A server already started for ``server_cmd`` (:func:`new_server`, then
        :func:`specsim.runs.process.start_together`): used instead of starting one, and stopped at
        the end like one started here (its log directory is removed).  ``server_error``: why its
        start failed (every plan is then recorded as failed with it).

    Returns
    -------
    list of RunResult
        One per plan.  If the server does not start, every plan is recorded as failed with the
        error, the server log and ``server_start_failed_after_seconds`` (launch to the failure, seconds;
        the record's ``duration_seconds`` is its recording's), and the results are returned (no
        exception).  A bench cell that fails with any error is recorded as failed (its files,
        ``server.log`` and the traceback in its provenance) and the next cell runs.

    Raises
    ------
    KeyboardInterrupt
        Propagated after the server group is stopped and the current run is recorded as failed --
        also one interrupted before its bench began (the server starting, the warm-up), with the
        server log so far; further Ctrl-Cs while this is done are deferred
        (:class:`~specsim.runs.process.deferred_interrupts`).
    """
    if not isinstance(bench_client, BenchClient) and bench_client not in ("process", "persistent"):
        raise SpecsimValueError("bench_client", "unknown bench client", bench_client, ["process", "persistent"])
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    for p in plans:
        if (runs_dir / p.run_id).exists():
            raise RunError(f"run {p.run_id!r} is already recorded in {runs_dir}; recorded runs are never overwritten")
    base_prov = dict(base_provenance or {})
    srv = server if server is not None else new_server(server_cmd, runs_dir=runs_dir, port=port, env=env,
                                                       health_timeout_s=health_timeout_s,
                                                       stop_timeout_s=stop_timeout_s)
    logdir, server_log, cmd = srv.log_path.parent, srv.log_path, srv.cmd
    results: list[RunResult] = []
    ended: dict = {}  # how the server ended (server_stats)
    try:
        try:
            if server_error is not None:
                raise server_error
            if server is None:
                srv.start()
        except RunError as e:
            # the cells did not run: their records' duration_seconds is the recording's; how long the start
            # took before it failed is the server's
            failed_prov = {**base_prov, "server_start_failed_after_seconds": srv.start_failed_after_seconds}
            for p in plans:
                results.append(_record_failed(p, runs_dir=runs_dir, error=e, server_log=server_log,
                                              base_prov=failed_prov, server_cmd=cmd))
                if progress is not None:
                    progress.update(1)
            return results
        own = bench_client == "persistent"
        client = BenchClient(env=env) if own else (bench_client if isinstance(bench_client, BenchClient) else None)
        try:
            warm_err = None
            if warmup is not None:
                try:
                    srv.post_json("/v1/completions", warmup)
                except RunError as e:
                    warm_err = e
            for p in plans:
                if warm_err is not None:
                    results.append(_record_failed(p, runs_dir=runs_dir, error=RunError(f"warm-up request failed: {warm_err}"),
                                                  server_log=server_log, base_prov=base_prov, server_cmd=cmd))
                else:
                    try:
                        results.append(_bench_one(srv, p, runs_dir=runs_dir, env=env, server_log=server_log,
                                                  bench_timeout_s=bench_timeout_s, base_prov=base_prov,
                                                  client=client))
                    except Exception as e:  # noqa: BLE001 - recorded failed with its files and traceback; the
                        # server's other cells go on (an unexpected error used to end the job and lose the record)
                        path = runs_dir / p.run_id
                        if not path.exists():
                            raise
                        results.append(RunResult(p.run_id, path, "failed",
                                                 str(e) if isinstance(e, RunError) else f"{type(e).__name__}: {e}"))
                if progress is not None:
                    progress.update(1)
        finally:
            if own:
                client.close()
            srv.stop()
            ended.update(_server_end(srv))
        return results
    except KeyboardInterrupt as e:
        # the interrupt came while the server started, during the warm-up or between two benches: stop
        # the server, then record the plan in flight (a bench in flight recorded itself) with the
        # server's log -- none of it cut short by a further Ctrl-C
        with deferred_interrupts():
            srv.stop()
            if not ended:
                ended.update(_server_end(srv))
            k = len(results)
            if k < len(plans) and not (runs_dir / plans[k].run_id).exists():
                results.append(_record_interrupted(
                    plans[k], runs_dir=runs_dir, server_log=server_log, base_prov=base_prov, server_cmd=cmd,
                    reason=f"{interrupt_text(e)} while this run's server was starting or before its bench began"))
        raise
    finally:
        if server_stats is not None and ended:
            server_stats.update(ended)
        shutil.rmtree(logdir, ignore_errors=True)
