"""One format detector and dispatcher over the readers of :mod:`specsim.vllm` (layer 1).

:func:`read_counts` takes any file a vLLM user has (a Prometheus ``/metrics`` scrape, a server log
with ``SpecDecoding metrics:`` lines, a ``vllm bench serve --save-result`` JSON, an offline
``LLM.get_metrics()`` dump, and the formats added to :data:`KINDS` by the readers in this package)
and returns the counts record with the format it was read as.  It keeps three answers apart:

- the file is not a format specsim reads (empty, binary, or text of no known shape: ``DataError``
  naming the first line and the formats read);
- the file is of a known format but broken (truncated JSON, malformed Prometheus text, a cut log
  line: ``DataError`` from the format's reader, prefixed with the path and format);
- the file is fine but speculative decoding was off (``NotCollectedError``, never zero).
"""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm.bench import BenchResult, read_bench_result, read_bench_results
from specsim.vllm.bench_log import read_bench_logs
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts
from specsim.vllm.guidellm import read_guidellm_report
from specsim.vllm.logs import read_spec_decode_log
from specsim.vllm.per_request import read_response_spec_metrics
from specsim.vllm.prometheus import diff_scrapes, parse_offline_metrics, read_prometheus
from specsim.vllm.speculators import (
    read_speculators_acceptance,
    read_speculators_eval_log,
    speculators_eval_log_models,
)
from specsim.vllm.sweep import read_bench_sweep, read_sweep_summary_runs, sweep_failures

__all__ = ["KINDS", "detect_kind", "read_counts", "read_drafting", "run_temperature"]

#: format name -> what it is (the values of ``--kind``; "auto" detects)
KINDS: dict[str, str] = {
    "metrics": "Prometheus /metrics text (curl /metrics)",
    "log": "vLLM log with 'SpecDecoding metrics:' lines (vllm serve / LLM)",
    "bench": "vllm bench serve --save-result JSON (--append-result: the results pooled)",
    "offline": "LLM.get_metrics() dumped as JSON",
    "bench-log": "vllm bench serve console output with its Speculative Decoding block",
    "sweep": "vllm bench sweep output directory or its summary.csv (runs pooled)",
    "response": "one OpenAI response of vllm serve --per-request-spec-decode-metrics",
    "guidellm": "GuideLLM benchmark report JSON (benchmarks pooled)",
    "speculators-csv": "speculators evaluate acceptance CSV (subsets pooled)",
    "speculators-log": "speculators evaluate log with its Acceptance Report (subsets pooled)",
}

#: formats that hold acceptance but no counts: what to use instead
_NOT_COUNTS = {
    "inferencex": "an InferenceX golden acceptance-length file (AL per N, no per-position counts): read it "
                  "with specsim.vllm.read_golden_al and build Acceptance.from_mal(AL, N)",
}

_SNIFF_BYTES = 65536
_PROM_SAMPLE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{.*\})?\s+[-+]?(\d[\d.eE+-]*|\.\d+|[Ii]nf|NaN|nan)(\s+-?\d+)?$")
_LOG_LINE = re.compile(r"\b(INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL)\b|SpecDecoding metrics|Speculative metrics")
_BENCH_KEYS = {"num_prompts", "completed", "request_throughput", "output_throughput", "total_input_tokens",
               "duration", "mean_ttft_ms", "max_concurrency", "backend", "endpoint_type"}


def _allowed() -> str:
    return ", ".join(f"{k} ({v})" for k, v in KINDS.items())


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            s = line.strip()
            return s if len(s) <= 100 else s[:100] + "..."
    return ""


def _sniff(path: Path) -> str:
    """The file's leading text, after refusing what no reader can read (missing, empty, binary)."""
    if not path.exists():
        raise SpecsimValueError("path", "no such file", str(path))
    if path.is_dir():
        raise SpecsimValueError("path", "is a directory, not a file", str(path))
    with open(path, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if not head.strip():
        raise DataError(f"{path}: empty file (no bytes{' but whitespace' if head else ''}): not a vLLM "
                        f"output; formats read: {_allowed()}")
    if head[:2] == b"\x1f\x8b":
        raise DataError(f"{path}: gzip-compressed (it starts with the gzip magic bytes 1f 8b), not a vLLM text "
                        f"output: decompress it first (gunzip {path.name}) and give the file it holds")
    if b"\x00" in head:
        raise DataError(f"{path}: binary data (NUL bytes), not a vLLM text output; formats read: {_allowed()}")
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    if text.count("\ufffd") > max(8, len(text) // 20):
        raise DataError(f"{path}: binary data (not UTF-8 text), not a vLLM output; formats read: {_allowed()}")
    return text


def _first_json(text: str) -> Any:
    """The first JSON document of a text holding several (None if it does not parse)."""
    try:
        return json.JSONDecoder().raw_decode(text.lstrip())[0]
    except ValueError:
        return None


def _is_bench(doc: Any) -> bool:
    return isinstance(doc, dict) and (any(str(k).startswith("spec_decode_") for k in doc)
                                      or len(_BENCH_KEYS & set(map(str, doc))) >= 2)


def _json_kind(doc: Any) -> str | None:
    if isinstance(doc, list):
        if doc and all(isinstance(m, dict) and "name" in m for m in doc):
            return "offline"
        if doc and all(_is_bench(m) for m in doc):
            return "bench"  # vllm bench sweep summary.json: a list of results
        return None
    if isinstance(doc, dict):
        if isinstance(doc.get("metrics"), list):
            return "offline"
        if isinstance(doc.get("benchmarks"), list) and ("metadata" in doc or "config" in doc):
            return "guidellm"
        if "choices" in doc and isinstance(doc.get("metrics", {}), dict):
            return "response"
        if _is_bench(doc):
            return "bench"
    return None


def detect_kind(path: str | os.PathLike) -> str:
    """The format of a file (a key of :data:`KINDS`), from its content (the suffix only breaks ties).

    Raises
    ------
    SpecsimValueError
        ``path`` missing or a directory.
    DataError
        Empty or binary file; a JSON file that does not parse (reported as truncated / invalid
        JSON, not as a log); JSON or text of no known shape (the message quotes the first line
        and lists the formats read).
    """
    path = Path(path)
    text = _sniff(path)
    stripped = text.lstrip()
    is_json = path.suffix.lower() == ".json"
    if stripped[:1] == "{" or (stripped[:1] == "[" and (is_json or not _LOG_LINE.search(text))) or is_json:
        with open(path, "rb") as fh:
            full = fh.read().decode("utf-8", errors="replace").lstrip("\ufeff")
        try:
            doc = json.loads(full)
        except ValueError as exc:
            if stripped[:1] not in "{[":
                raise DataError(f"{path}: a .json file that is not JSON (first line {_first_line(text)!r}); "
                                f"formats read: {_allowed()}") from exc
            if getattr(exc, "msg", "") == "Extra data":
                first = _first_json(full)
                if _is_bench(first):
                    return "bench"  # vllm bench serve --append-result: one result per line
                if first is not None:
                    raise DataError(f"{path}: several JSON documents, not one, and the first is no vllm bench "
                                    f"result; formats read: {_allowed()}") from exc
            raise DataError(f"{path}: not valid JSON (truncated or edited file?): {exc}") from exc
        kind = _json_kind(doc)
        if kind is None:
            what = (f"top-level keys {sorted(map(str, doc))[:12]}" if isinstance(doc, dict)
                    else f"a JSON {type(doc).__name__}")
            raise DataError(f"{path}: JSON, but not a format specsim reads ({what}); formats read: {_allowed()}")
        return kind
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith(("# HELP ", "# TYPE ")) for ln in lines[:50]) or (lines and _PROM_SAMPLE.match(lines[0])):
        return "metrics"
    if lines and lines[0].startswith("subset,") and "num_drafts" in lines[0]:
        return "speculators-csv"
    if lines and "spec_decode_" in lines[0] and "," in lines[0] and "endpoint_type" in lines[0]:
        return "sweep"  # vllm bench sweep summary.csv
    if path.suffix.lower() in (".yaml", ".yml") and _is_golden_al(text):
        raise DataError(f"{path}: {_NOT_COUNTS['inferencex']}")
    full = _full_text(path, text)
    if "Speculative Decoding Acceptance Report" in full:
        return "speculators-log"
    if "Serving Benchmark Result" in full:
        return "bench-log"
    if any(_LOG_LINE.search(ln) for ln in lines):
        return "log"
    raise DataError(f"{path}: not a format specsim reads (first line {_first_line(text)!r}); "
                    f"formats read: {_allowed()}")


def _full_text(path: Path, head: str) -> str:
    if len(head) < _SNIFF_BYTES - 8:
        return head
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", errors="replace")


def _pool(counts: list[SpecDecodeCounts | None], path: Path, what: str,
          why_skipped: list[str] | None = None) -> SpecDecodeCounts:
    """Several results of one file pooled (sum of counts; acceptance per position does not depend on
    the load).  Results without spec-decode counts are skipped (``why_skipped``: which and why, named
    in the source); none at all is not collected."""
    got = [c for c in counts if c is not None]
    if not got:
        raise NotCollectedError(f"{path}: none of its {len(counts)} {what} has speculative-decoding counts "
                                "(speculative decoding off); acceptance is unknown, not zero")
    ns = sorted({c.num_speculative_tokens for c in got})
    if len(ns) > 1:
        raise DataError(f"{path}: its {what}s ran at different num_speculative_tokens {ns}: pool only one N "
                        "(read them with the format's reader in specsim.vllm and pick)")
    out = got[0] if len(got) == 1 else sum(got[1:], got[0])
    if len(got) < len(counts):
        named = f": {'; '.join(why_skipped)}" if why_skipped else ""
        out = replace(out, source=f"{out.source} ({len(counts) - len(got)} of {len(counts)} {what}s without "
                                  f"usable spec-decode counts skipped{named})")
    return out


def _bench_counts(results: list[BenchResult], path: Path, what: str = "result") -> SpecDecodeCounts:
    models = sorted({str(r.raw.get("model_id")) for r in results if r.spec is not None and r.raw.get("model_id")})
    if len(models) > 1:  # --append-result runs of one model pool; different models' acceptance does not
        warnings.warn(f"{path}: its {what}s are of {len(models)} models ({', '.join(models)}) and are pooled: their "
                      "acceptance is mixed; read the results of one model (specsim.vllm.read_bench_results)",
                      IngestWarning, stacklevel=2)
    return _pool([r.spec for r in results], path, what)


def _sweep_run_counts(path: Path) -> list:
    """``(run, counts or None, why not pooled or None)`` of each run of a ``vllm bench sweep`` directory
    or ``summary.csv``: per-position counts of a run under a dynamic schedule are censored, such runs
    get None and the reader's reason (:meth:`SweepRun.acceptance_counts`) and are not pooled."""
    runs = read_bench_sweep(path) if path.is_dir() else read_sweep_summary_runs(path)
    out = []
    for run in runs:
        try:
            out.append((run, run.acceptance_counts(), None))
        except NotCollectedError as exc:
            out.append((run, None, str(exc)))  # names the run file
    return out


def _sweep_counts(path: Path) -> SpecDecodeCounts:
    rows = _sweep_run_counts(path)
    failed = sweep_failures(path)
    if failed:  # vLLM's --continue-on-error: a failed run has no run=K.json and is not in summary.csv
        warnings.warn(f"{path}: {len(failed)} run(s) or server(s) of this sweep failed and are not in the counts: "
                      f"{'; '.join(failed)}", IngestWarning, stacklevel=3)
    return _pool([c for _, c, _ in rows], path, "sweep run", [w for _, _, w in rows if w])


_NAMESPACE_MODEL = re.compile(r"Namespace\(.*?[(,\s]model='([^']+)'")


def measured_models(path: str | os.PathLike, kind: str) -> tuple[str, ...]:
    """The model(s) a run's output says it served, as recorded, in order of first appearance.

    - ``"bench"``: ``model_id`` of every result (an ``--append-result`` file, a sweep ``summary.json``);
    - ``"bench-log"``: the ``model=`` of the console output's ``Namespace(...)`` line(s);
    - ``"sweep"``: ``model_id`` of the runs whose counts are pooled (:func:`read_counts`);
    - ``"metrics"``, ``"offline"``: the ``model_name`` labels of the spec-decode counters;
    - ``"guidellm"``: each benchmark's ``config.backend.model``;
    - ``"response"``: the response's ``model``;
    - ``"speculators-log"``: the model GuideLLM's console output in the log says it sent requests
      to (:func:`specsim.vllm.speculators.speculators_eval_log_models`).

    Parameters
    ----------
    path : str or path-like
        The file (or sweep directory).
    kind : str
        Its format, as :func:`read_counts` returns it.

    Returns
    -------
    tuple of str
        Empty for the other formats (server logs, speculators' ``acceptance.csv``: they do not
        record one) and for an unreadable file.
    """
    from specsim.vllm.prometheus import _MODEL_NAME

    p = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IngestWarning)
            if kind == "bench":
                names = [r.raw.get("model_id") for r in _bench_file_results(p)]
            elif kind == "bench-log":
                names = _NAMESPACE_MODEL.findall(_full_text(p, _sniff(p)))
            elif kind == "sweep":
                names = [run.result.raw.get("model_id") for run, c, _ in _sweep_run_counts(p) if c is not None]
            elif kind in ("metrics", "offline"):
                snap = read_prometheus(p) if kind == "metrics" else parse_offline_metrics(p)
                names = [m.group(1) for k in snap.spec_by_engine for m in [_MODEL_NAME.search(k)] if m]
            elif kind in ("guidellm", "response"):
                with open(p, encoding="utf-8-sig") as fh:
                    doc = json.load(fh)
                if kind == "response":
                    names = [doc.get("model")]
                else:
                    names = [(((b or {}).get("config") or {}).get("backend") or {}).get("model")
                             for b in doc.get("benchmarks") or [] if isinstance(b, dict)]
            elif kind == "speculators-log":
                names = list(speculators_eval_log_models(p))
            else:
                return ()
    except (DataError, NotCollectedError, SpecsimValueError, OSError, ValueError, KeyError, TypeError,
            AttributeError):
        return ()
    return tuple(dict.fromkeys(str(n) for n in names if isinstance(n, str) and n.strip()))


def _read_metrics(path: Path, before: Path | None) -> SpecDecodeCounts:
    snap = read_prometheus(path)
    if before is not None:
        snap = diff_scrapes(read_prometheus(before), snap)
    elif snap.spec_by_engine:
        import datetime as _dt

        started = ("" if snap.process_start_s is None else " (its server process started " + _dt.datetime.fromtimestamp(
            snap.process_start_s, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") + ")")
        warnings.warn(f"{path}: one /metrics scrape counts every request since the server started{started}: if it "
                      "served other runs first, their drafts are pooled in; pass the scrape taken before this run "
                      "(--before, before=) to count this run alone", IngestWarning, stacklevel=3)
    return snap.spec_counts()


def _scheduled_sweep_root(p: Path) -> Path | None:
    """The ``vllm bench sweep`` directory above ``p`` whose ``serve_params.json`` sets a dynamic
    ``num_speculative_tokens_per_batch_size`` schedule (up to four levels up), else None."""
    for d in list(p.parents)[:4]:
        sp = d / "serve_params.json"
        if sp.is_file() and "num_speculative_tokens_per_batch_size" in sp.read_text(errors="replace"):
            return d
    return None


def _is_golden_al(text: str) -> bool:
    """An InferenceX golden acceptance-length YAML: ``{model: {mode: {N: AL, ...}}}`` (with ``_metadata``)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    if not isinstance(doc, dict):
        return False
    curves = [m for k, v in doc.items() if k != "_metadata" and isinstance(v, dict) for m in v.values()]
    return bool(curves) and all(isinstance(c, dict) and c and all(isinstance(n, int) for n in c) for c in curves)


def _read_bench(p: Path) -> SpecDecodeCounts:
    root = _scheduled_sweep_root(p)
    if root is not None:  # aggregate counters of a scheduled run mix draft lengths: the sweep reader checks
        raise DataError(f"{p} belongs to a vllm bench sweep whose serve parameters use a dynamic "
                        f"num_speculative_tokens_per_batch_size schedule; read the sweep directory {root} "
                        "(its runs are checked for mixed draft lengths) or per-request metrics instead")
    results = _bench_file_results(p)
    if any(isinstance(r.raw.get("spec"), dict) and "scrape_matches_bench" in r.raw for r in results):
        raise DataError(f"{p} is specsim's summary of a recorded run (summary.json), not a vllm bench serve result: "
                        f"give the run's bench.json, or its metrics_after.prom with --before metrics_before.prom "
                        "(the counts this summary was made from)")
    return _bench_counts(results, p)


def _bench_file_results(p: Path) -> list[BenchResult]:
    """The results of a bench JSON: a ``vllm bench sweep`` ``summary.json`` list, or a ``--save-result``
    / ``--append-result`` file (:func:`read_bench_results`)."""
    with open(p, "rb") as fh:
        head = fh.read(256).lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()  # a byte-order mark dropped
    if head.startswith(b"["):  # vllm bench sweep summary.json: a list of results
        with open(p, encoding="utf-8-sig", errors="replace") as fh:
            doc = json.load(fh)
        return [read_bench_result(d, source=f"{p.name}[{i}]") for i, d in enumerate(doc)]
    return read_bench_results(p)


def _bench_log_counts(p: Path) -> SpecDecodeCounts:
    """Counts of a ``vllm bench serve`` console log; several blocks (e.g. a ``vllm bench sweep`` log) are
    pooled with a warning: the console output does not say whether the server used a dynamic schedule,
    under which pooled per-position counts mix draft lengths."""
    results = read_bench_logs(p)
    if len(results) > 1:
        warnings.warn(f"{p}: pooled {len(results)} Serving Benchmark Result blocks; if the server used a dynamic "
                      "num_speculative_tokens_per_batch_size schedule their per-position counts mix draft lengths "
                      "(read the sweep directory or per-request metrics instead)", IngestWarning, stacklevel=2)
    return _bench_counts(results, p, "Serving Benchmark Result block")


def _spec_or_none(b) -> SpecDecodeCounts | None:
    try:
        return b.spec_counts()
    except NotCollectedError:
        return None


_READERS: dict[str, Callable[[Path], SpecDecodeCounts]] = {
    "log": lambda p: read_spec_decode_log(p).total(),
    "bench": _read_bench,
    "offline": lambda p: parse_offline_metrics(p).spec_counts(),
    "bench-log": lambda p: _bench_log_counts(p),
    "sweep": _sweep_counts,
    "response": lambda p: read_response_spec_metrics(p).counts,
    "guidellm": lambda p: _pool([_spec_or_none(b) for b in read_guidellm_report(p)], p, "GuideLLM benchmark"),
    "speculators-csv": lambda p: _pool(list(read_speculators_acceptance(p).values()), p, "subset"),
    "speculators-log": lambda p: _pool(list(read_speculators_eval_log(p).values()), p, "subset"),
}


def read_counts(path: str | os.PathLike, kind: str = "auto",
                before: str | os.PathLike | None = None) -> tuple[str, SpecDecodeCounts]:
    """Read the speculative-decoding counts of any vLLM output specsim knows.

    Parameters
    ----------
    path : str or path-like
        The file.
    kind : str
        ``"auto"`` (detect from the content, :func:`detect_kind`) or a key of :data:`KINDS`.
    before : str or path-like, optional
        A Prometheus scrape taken before the run; the counts are then after - before.  Only for a
        Prometheus scrape (an error for any other format, never ignored).

    Returns
    -------
    kind : str
        The format read.
    counts : SpecDecodeCounts

    Raises
    ------
    SpecsimValueError
        ``kind`` unknown; ``kind`` given (not ``"auto"``) for a file its reader cannot read and that
        auto-detection reads as another format, or as none (field ``kind``: the message names the
        format the file looks like); ``path`` or ``before`` missing; ``before`` given for a file that
        is not a Prometheus scrape, or ``before`` itself not a Prometheus scrape.
    DataError
        Not a format specsim reads (empty, binary, unknown shape), or a known format that is
        truncated or inconsistent (the message starts with the path and the format).
    NotCollectedError
        A valid file without speculative-decoding metrics (speculative decoding off); with a ``kind``
        given, only when auto-detection reads the file as that format too.
    """
    if not isinstance(kind, str) or (kind != "auto" and kind not in KINDS):
        raise SpecsimValueError("kind", "unknown format", kind, ["auto", *KINDS])
    path = Path(path)
    if path.is_dir() and kind in ("auto", "sweep"):
        return "sweep", _sweep_counts(path)
    given = None if kind == "auto" else kind
    if kind == "auto":
        kind = detect_kind(path)
    else:
        _sniff(path)
    before_path = None
    if before is not None:
        before_path = Path(before)
        if kind != "metrics":
            raise SpecsimValueError("before", f"applies only to a Prometheus /metrics scrape, but {path} is "
                                    f"read as {kind!r} ({KINDS[kind]})", str(before), ["a Prometheus scrape"])
        if not before_path.is_file():  # named as before, not as the file being read (detect_kind says "path")
            raise SpecsimValueError("before", "is a directory, not a scrape" if before_path.is_dir() else
                                    "no such file", str(before))
        bkind = detect_kind(before_path)
        if bkind != "metrics":
            raise SpecsimValueError("before", f"must be a Prometheus /metrics scrape, but it reads as {bkind!r} "
                                    f"({KINDS[bkind]})", str(before))
    try:
        try:
            counts = _read_metrics(path, before_path) if kind == "metrics" else _READERS[kind](path)
        except DataError as exc:
            msg = str(exc)
            raise DataError(msg if msg.startswith(str(path)) else f"{path}: {kind}: {msg}") from exc
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{path}: {kind}: {exc}") from exc
    except (DataError, NotCollectedError) as exc:
        mismatch = None if given is None else _kind_mismatch(path, given, exc)
        if mismatch is not None:
            raise mismatch from exc
        raise
    return kind, counts


def _kind_mismatch(path: Path, kind: str, exc: Exception) -> SpecsimValueError | None:
    """The refusal of a ``kind`` given for a file its reader failed on, when auto-detection reads the
    file as another format or as none (None when it reads it as ``kind``: the reader's own error
    stands).  The reader's "not collected" is not repeated: a reader of another format finds no
    spec-decode counts in any file, which says nothing of whether speculative decoding was on."""
    try:
        found = detect_kind(path)
    except (DataError, SpecsimValueError) as dexc:
        why = str(dexc).removeprefix(f"{path}: ").split("; formats read: ")[0]
        said = str(exc).removeprefix(f"{path}: ").removeprefix(f"{kind}: ").removeprefix(f"{path.name}: ")
        reason = f": {said};" if isinstance(exc, DataError) else ","
        return SpecsimValueError("kind", f"{path} does not read as {kind!r} ({KINDS[kind]}){reason} nor does "
                                 f"auto-detection read it as another format ({why})", kind)
    if found == kind:
        return None
    return SpecsimValueError("kind", f"{path} does not read as {kind!r} ({KINDS[kind]}): it looks like {found!r} "
                             f"({KINDS[found]}), as auto-detection reads it", kind, [found, "auto"])


def _count_or_none(v: Any) -> int | None:
    """A whole, non-negative count (int, integral float, or its text), else None."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if math.isfinite(f) and f >= 0 and f == int(f) else None


def _run_totals(p: Path, kind: str, before: str | os.PathLike | None) -> tuple[int, int, str] | None:
    """``(output tokens, finished requests, where)`` of the run(s) whose counts :func:`read_counts`
    pooled for ``p``, or None when the format does not record both (or a result lacks them)."""
    if kind in ("metrics", "offline"):
        if kind == "metrics":
            snap = read_prometheus(p)
            if before is not None:
                snap = diff_scrapes(read_prometheus(before), snap)
        else:
            snap = parse_offline_metrics(p)
        if snap.generation_tokens is None or snap.requests is None:
            return None
        names = ("generated tokens", "finished requests") if kind == "metrics" else \
            ("vllm:generation_tokens", "vllm:request_success")
        return (snap.generation_tokens, snap.requests,
                f"{p}{'' if before is None else f' - {before}'} ({snap.generation_tokens} {names[0]}, "
                f"{snap.requests} {names[1]})")
    if kind == "response":
        with open(p, encoding="utf-8-sig") as fh:
            raw = json.load(fh)
        gen = _count_or_none(((raw.get("usage") or {}) if isinstance(raw, dict) else {}).get("completion_tokens"))
        # one request: vLLM sets metrics.speculative_decoding only for n == 1
        return None if gen is None else (gen, 1, f"{p} (usage.completion_tokens {gen}, 1 request)")
    if kind == "guidellm":
        gen = req = 0
        used = 0
        for b in read_guidellm_report(p):  # the requests whose counts read_counts pooled
            for s, reqs in b.requests.items():
                toks = b.output_tokens.get(s, ())
                if len(toks) != len(reqs) or any(t is None for t in toks):
                    return None
                gen += sum(toks)
                req += len(reqs)
            used += b.status == "collected"
        return gen, req, f"{p} ({used} benchmark(s), {req} requests: {gen} output tokens)"
    if kind == "sweep":
        results = [run.result for run, c, _ in _sweep_run_counts(p) if c is not None]  # the runs pooled
        what = "sweep run(s)"
    elif kind in ("bench", "bench-log"):
        # a bench-log's "Successful requests" / "Total generated tokens" are printed whole
        results = read_bench_logs(p) if kind == "bench-log" else _bench_file_results(p)
        results = [r for r in results if r.spec is not None]  # the results whose counts were pooled
        what = "result(s)"
    else:
        return None
    gens = [_count_or_none(r.raw.get("total_output_tokens")) for r in results]
    reqs = [_count_or_none(r.raw.get("completed")) for r in results]
    if not results or None in gens or None in reqs:
        return None
    return sum(gens), sum(reqs), f"{p} ({len(results)} {what}: {sum(gens)} output tokens, {sum(reqs)} requests)"


def read_drafting(path: str | os.PathLike, kind: str, counts: SpecDecodeCounts,
                  before: str | os.PathLike | None = None) -> dict | None:
    """How often the run of ``path`` drafted (:meth:`SpecDecodeCounts.drafting`), from the run's
    output tokens and finished requests, pooled over the same runs / requests as :func:`read_counts`
    pooled the counts.  The formats that record both totals:

    - ``"bench"``: a ``vllm bench serve`` result JSON's ``total_output_tokens`` and ``completed``
      (``--append-result`` results and a sweep ``summary.json`` list summed); ``"bench-log"``: the
      console output's "Total generated tokens" and "Successful requests";
    - ``"sweep"``: each pooled run's ``total_output_tokens`` and ``completed`` (runs skipped for a
      censoring schedule are left out of both);
    - ``"metrics"`` (differenced with ``before``) and ``"offline"`` (``LLM.get_metrics()``):
      ``vllm:generation_tokens`` and ``vllm:request_success``;
    - ``"guidellm"``: each request's ``output_tokens`` over the requests carrying speculative metrics;
    - ``"response"``: ``usage.completion_tokens`` of its one request.

    Server logs and speculators output record neither.

    Parameters
    ----------
    path : str or path-like
        The file ``counts`` was read from.
    kind : str
        Its format, as :func:`read_counts` returned it.
    counts : SpecDecodeCounts
        Its counts (:func:`read_counts`).
    before : str or path-like, optional
        The scrape taken before the run, as given to :func:`read_counts`.

    Returns
    -------
    dict or None
        ``decode_steps``, ``drafted_fraction``, ``mean_proposal_tokens`` and ``source``; None for a
        format without both totals, where a pooled result lacks them, or where the run drafted
        nothing.
    """
    if not counts.num_drafts:
        return None
    with warnings.catch_warnings():  # read_counts already warned of what it pooled
        warnings.simplefilter("ignore", IngestWarning)
        totals = _run_totals(Path(path), kind, before)
    if totals is None:
        return None
    gen, req, source = totals
    return {**counts.drafting(gen, req), "source": source}


_NAMESPACE_T = re.compile(r"Namespace\(.*?\btemperature=([-+0-9.eE]+|None)\b")


def _number_or_none(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def run_temperature(path: str | os.PathLike, kind: str) -> float | None:
    """The sampling temperature a file records for its run, when it records one (else None).

    Recorded by: the ``vllm bench serve`` console output (its ``Namespace(... temperature=...)``
    line), a bench JSON saved with a ``temperature`` key (``--metadata temperature=...``), and a
    GuideLLM report (the request body's ``temperature``, when all its benchmarks agree).  The other
    formats (Prometheus, server logs, offline metrics) do not know the requests' temperature.
    """
    path = Path(path)
    try:
        if kind == "bench-log":
            temps = {m.group(1) for m in _NAMESPACE_T.finditer(_full_text(path, _sniff(path)))}
            vals = {float(t) for t in temps if t != "None"}
            return vals.pop() if len(vals) == 1 and "None" not in temps else None
        if kind in ("bench", "guidellm") and path.is_file():
            with open(path, "rb") as fh:
                text = fh.read().decode("utf-8", errors="replace").lstrip("\ufeff")
            if kind == "bench":
                t = _number_or_none((_first_json(text) or {}).get("temperature"))
                return t
            doc = json.loads(text)
            vals = set()
            for b in doc.get("benchmarks") or []:
                body = (((b or {}).get("config") or {}).get("backend") or {}).get("extras") or {}
                vals.add(_number_or_none((body.get("body") or {}).get("temperature")))
            return vals.pop() if len(vals) == 1 else None
    except (ValueError, AttributeError, OSError, DataError):
        return None
    return None
