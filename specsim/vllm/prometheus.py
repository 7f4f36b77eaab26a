"""Prometheus ``/metrics`` text and ``LLM.get_metrics()`` into counts (layer 1, vLLM formats).

Counters ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and
``..._num_accepted_tokens_per_pos`` (label ``position``), one series per engine
(``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm``); parsed with prometheus_client's parser.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from specsim.errors import (
    DataError,
    MissingExtraError,
    NotCollectedError,
    SpecsimValueError,
)
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts, as_count

#: Base names (without ``_total``) of the v1 spec-decode counters (vllm/v1/spec_decode/metrics.py).
SPEC_METRIC_NAMES = {
    "num_drafts": "vllm:spec_decode_num_drafts",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
    "accepted_per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
}
_GENERATION_TOKENS = "vllm:generation_tokens"
_PROMPT_TOKENS = "vllm:prompt_tokens"
_NAME_TO_FIELD = {v: k for k, v in SPEC_METRIC_NAMES.items()}
#: finished requests, one series per finished_reason (vllm/v1/metrics/loggers.py ``counter_request_success``)
_REQUEST_SUCCESS = "vllm:request_success"
_READ_NAMES = tuple(SPEC_METRIC_NAMES.values()) + (_GENERATION_TOKENS, _PROMPT_TOKENS, _REQUEST_SUCCESS)
_RE_PROM_HEAD = re.compile(
    r"^(?:# (?:HELP|TYPE|EOF)\b|[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+"
    r"(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|NaN|Inf))(?:[ \t]+-?\d+)?[ \t]*$)")


def _first_line(text: str) -> str:
    head = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return repr(head[:80])


def _json_hint(text: str) -> str:
    head = text.lstrip()[:1]
    return "; it looks like JSON (a bench result or LLM.get_metrics() dump?)" if head in ("{", "[") else ""


# --------------------------------------------------------------------------------------------
# Prometheus text and LLM.get_metrics()
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricsSnapshot:
    """Spec-decode and token counters from one Prometheus scrape / ``LLM.get_metrics()`` call
    (cumulative since the engine started), or the difference of two (:func:`diff_scrapes`).

    Attributes
    ----------
    spec_by_engine : dict[str, SpecDecodeCounts]
        Per label set (engine, model_name, instance, ...; ``position`` removed). Empty when the
        server ran without speculative decoding: ``status == "not collected"``.
    generation_tokens, prompt_tokens : int or None
        ``vllm:generation_tokens`` / ``vllm:prompt_tokens`` summed over label sets (tokens);
        None when absent.
    source : str
    requests : int or None
        ``vllm:request_success`` summed over its label sets (finished requests, every
        ``finished_reason``); None when absent.
    process_start_s : float or None
        ``process_start_time_seconds`` (Unix seconds; prometheus_client's process collector in
        the API server): which server process the counters belong to.  None when absent (and in a
        difference of two scrapes).
    """

    spec_by_engine: Mapping[str, SpecDecodeCounts]
    generation_tokens: int | None
    prompt_tokens: int | None
    source: str = ""
    requests: int | None = None
    process_start_s: float | None = None

    @property
    def status(self) -> str:
        """``"collected"`` or ``"not collected"`` (spec-decode counters absent, never zero)."""
        return "collected" if self.spec_by_engine else "not collected"

    def spec_counts(self) -> SpecDecodeCounts:
        """Counts summed over engines / instances / model names.

        Raises
        ------
        NotCollectedError
            If the scrape has no spec-decode counters (server without --speculative-config).
        """
        if not self.spec_by_engine:
            raise NotCollectedError(
                f"{self.source}: no vllm:spec_decode_* counters: this run had speculative decoding "
                f"off (or the metrics were not collected); acceptance is unknown, not zero")
        models = sorted({m.group(1) for k in self.spec_by_engine for m in [_MODEL_NAME.search(k)] if m})
        if len(models) > 1:  # engines of one model pool; different models' acceptance does not
            warnings.warn(f"{self.source}: spec-decode counters of {len(models)} served models ({', '.join(models)}) "
                          "summed: their acceptance is mixed; scrape a server of one model, or read "
                          "spec_by_engine for one", IngestWarning, stacklevel=2)
        total = sum(self.spec_by_engine.values())
        return SpecDecodeCounts(total.num_drafts, total.num_draft_tokens, total.num_accepted_tokens,
                                total.accepted_per_pos, source=self.source,
                                num_speculative_tokens=total.num_speculative_tokens,
                                not_collected=tuple(x for x in total.not_collected if x != "num_drafts"))

    def to_frame(self) -> pd.DataFrame:
        """``spec_counts().to_frame()``."""
        return self.spec_counts().to_frame()


#: the model_name label in a label-set key (:func:`_label_key`: ``k=v`` pairs joined by commas)
_MODEL_NAME = re.compile(r"(?:^|,)model_name=([^,]*)")


#: prometheus_client's process collector: the scraped process's start, Unix seconds
_PROCESS_START = "process_start_time_seconds"
#: two scrapes whose process start times differ by more are of different server processes (the
#: collector reports the start to 0.01 s; one process reads the same value in every scrape)
_SAME_PROCESS_S = 1.0


def _label_key(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels)) or "(no labels)"


def _build_snapshot(samples: Iterable[tuple[str, dict, int | None, Any]], source: str) -> MetricsSnapshot:
    """samples: (base_name, labels without position, position or None, value)."""
    spec: dict[str, dict[str, Any]] = {}
    gen: int | None = None
    prompt: int | None = None
    requests: int | None = None
    starts = set()
    for name, labels, pos, value in samples:
        what = f"{source}: {name}{{{_label_key(labels)}}}"
        if name == _PROCESS_START:
            starts.add(float(value))
            continue
        if name == _GENERATION_TOKENS:
            gen = (gen or 0) + as_count(value, what)
            continue
        if name == _REQUEST_SUCCESS:
            requests = (requests or 0) + as_count(value, what)
            continue
        if name == _PROMPT_TOKENS:
            prompt = (prompt or 0) + as_count(value, what)
            continue
        fld = _NAME_TO_FIELD.get(name)
        if fld is None:
            continue
        entry = spec.setdefault(_label_key(labels), {"accepted_per_pos": {}})
        if fld == "accepted_per_pos":
            if pos is None:
                raise DataError(f"{what}: per-position counter without a 'position' label")
            if pos in entry["accepted_per_pos"]:
                raise DataError(f"{what}: duplicate sample for position {pos}")
            entry["accepted_per_pos"][pos] = as_count(value, f"{what} position={pos}")
        else:
            if fld in entry:
                raise DataError(f"{what}: duplicate sample")
            entry[fld] = as_count(value, what)
    by_engine: dict[str, SpecDecodeCounts] = {}
    for key, e in spec.items():
        if ("num_drafts" not in e and not e["accepted_per_pos"] and "num_draft_tokens" in e
                and "num_accepted_tokens" in e):
            # early V1 (2025-03/04) exposed only draft and accepted tokens: a valid scrape whose
            # drafts and N are unknown (a cut scrape loses num_drafts, printed first, last)
            by_engine[key] = SpecDecodeCounts(
                None, e["num_draft_tokens"], e["num_accepted_tokens"], (), source=f"{source} {{{key}}}",
                not_collected=("num_speculative_tokens",))
            continue
        missing = [SPEC_METRIC_NAMES[f] for f in SPEC_METRIC_NAMES if f != "accepted_per_pos" and f not in e]
        if not e["accepted_per_pos"]:
            missing.append(SPEC_METRIC_NAMES["accepted_per_pos"])
        if missing:
            raise DataError(f"{source}: incomplete spec-decode counters for {{{key}}}: missing "
                            f"{', '.join(missing)} (truncated scrape?)")
        pos = e["accepted_per_pos"]
        if sorted(pos) != list(range(len(pos))):
            raise DataError(f"{source}: {SPEC_METRIC_NAMES['accepted_per_pos']}{{{key}}} positions "
                            f"{sorted(pos)} are not 0..N-1 (truncated scrape?)")
        by_engine[key] = SpecDecodeCounts(
            e["num_drafts"], e["num_draft_tokens"], e["num_accepted_tokens"],
            tuple(pos[i] for i in range(len(pos))), source=f"{source} {{{key}}}")
    # one process per scrape; several values (a scrape of several processes) name none of them
    return MetricsSnapshot(by_engine, gen, prompt, source, requests, starts.pop() if len(starts) == 1 else None)


def parse_prometheus_text(text: str, *, source: str = "prometheus") -> MetricsSnapshot:
    """Parse vLLM's Prometheus ``/metrics`` text.

    Counters are matched on their ``_total`` samples (``_created`` gauges ignored) and kept per
    label set (engine, model_name, instance ...), see :meth:`MetricsSnapshot.spec_counts` for
    the sum. Parsing uses ``prometheus_client.parser.text_string_to_metric_families``.

    Parameters
    ----------
    text : str
        Exposition-format text.
    source : str
        Label carried into the results.

    Returns
    -------
    MetricsSnapshot
        Cumulative since the server started; diff two with :func:`diff_scrapes`.

    Raises
    ------
    DataError
        Three kinds, told apart in the message: empty text ("empty"); text that is not a
        Prometheus exposition or has no ``vllm:`` metric ("not Prometheus text (first line ...)",
        "not a vLLM /metrics scrape"); a truncated or invalid scrape (a counter sample on the last
        line without a line end, unparseable lines, non-integer or negative counts ("negative
        counter"), incomplete spec-decode series, counters that violate vLLM's identities, see
        :class:`SpecDecodeCounts`).  A scrape without spec-decode counters is valid:
        ``status == "not collected"``.
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:  # optional dependency, extra "vllm"
        raise MissingExtraError("reading Prometheus text", "prometheus-client", "vllm") from exc
    if not isinstance(text, str):
        raise SpecsimValueError("text", "must be the /metrics text (str)", type(text).__name__)
    if not text.strip():
        raise DataError(f"{source}: empty: no Prometheus text")
    lines = text.splitlines()
    head = next(ln.strip() for ln in lines if ln.strip())
    if not _RE_PROM_HEAD.match(head) and not re.match(r"vllm:|[a-zA-Z_:][a-zA-Z0-9_:]*\{", head):
        raise DataError(f"{source}: not Prometheus text: the first line is neither '# HELP'/'# TYPE' "
                        f"nor a 'name value' sample (first line {_first_line(text)}){_json_hint(text)}")
    if not text.endswith("\n"):
        last = lines[-1].strip()
        if last.startswith(_READ_NAMES):
            raise DataError(f"{source}: truncated: the last line has no line end (scrape cut "
                            f"mid-line?): {last[:200]!r}")
    if "\x00" in text:
        raise DataError(f"{source}: not Prometheus text: NUL bytes (binary data)")
    samples = []
    seen_vllm = False
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                name = s.name
                if name.endswith("_created"):
                    continue
                if name.endswith("_total"):
                    name = name[: -len("_total")]
                seen_vllm = seen_vllm or name.startswith("vllm:")
                labels = dict(s.labels)
                pos = labels.pop("position", None)
                if pos is not None:
                    try:
                        pos = int(pos)
                    except ValueError:
                        raise DataError(f"{source}: {s.name}: position label {pos!r} is not an integer") from None
                samples.append((name, labels, pos, s.value))
    except DataError:
        raise
    except Exception as exc:  # any failure of the third-party parser = bad text
        raise DataError(f"{source}: malformed Prometheus text (truncated or invalid): "
                        f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    if not seen_vllm:
        raise DataError(f"{source}: not a vLLM /metrics scrape: valid Prometheus text without any "
                        f"vllm:* metric (first line {_first_line(text)})")
    return _build_snapshot(samples, source)


def read_prometheus(path: str | os.PathLike) -> MetricsSnapshot:
    """Read a saved ``/metrics`` scrape from a file; see :func:`parse_prometheus_text`."""
    source = os.path.basename(os.fspath(path))
    return parse_prometheus_text(_read_text(path, source, "Prometheus text"), source=source)


def _read_text(path: str | os.PathLike, source: str, what: str) -> str:
    """A file's text; DataError for an empty file or bytes that are not UTF-8 text."""
    with open(path, "rb") as fh:
        data = fh.read()
    if not data.strip():
        raise DataError(f"{source}: empty file" + (" (only whitespace)" if data else ""))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{source}: not {what}: the file is not UTF-8 text "
                        f"(first bytes {data[:16]!r})") from None


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def parse_offline_metrics(metrics: Any, *, source: str = "LLM.get_metrics") -> MetricsSnapshot:
    """Read the result of ``LLM.get_metrics()`` (offline runs).

    Parameters
    ----------
    metrics : iterable, or str / PathLike of a JSON file
        ``vllm.v1.metrics.reader`` objects (duck-typed: ``.name``, ``.labels`` and ``.value``
        (Counter, Gauge) or ``.values`` (Vector); Histograms, which have ``.buckets``, are
        skipped), or their dict dump ``{"name", "labels", "type", "value" | "values"}``, or a JSON
        file holding such a list (or a dict with the list under ``"metrics"`` / ``"all_metrics"``).
    source : str

    Returns
    -------
    MetricsSnapshot
        Cumulative since the ``LLM`` was created.

    Raises
    ------
    DataError
        Told apart in the message: an empty file ("empty file"); a file that is not a metrics
        dump ("not JSON (first line ...)", "not an LLM.get_metrics() dump": another JSON shape);
        a truncated or invalid one ("invalid JSON (truncated file?)", malformed entries, negative
        counters, inconsistent counters).  A dump without spec-decode counters (also ``[]``) is
        valid: ``status == "not collected"``.
    """
    if isinstance(metrics, (str, os.PathLike)):
        path = os.fspath(metrics)
        source = os.path.basename(path) if source == "LLM.get_metrics" else source
        text = _read_text(path, source, "an LLM.get_metrics() JSON dump")
        try:
            metrics = json.loads(text)
        except json.JSONDecodeError as exc:
            body = text.strip()
            if body[:1] not in ("{", "[") or exc.pos <= text.index(body[0]) + 1:
                raise DataError(f"{source}: not JSON, so not an LLM.get_metrics() dump "
                                f"(first line {_first_line(text)})") from exc
            if exc.msg.startswith("Extra data"):
                raise DataError(f"{source}: several JSON documents in one file (an --append-result "
                                f"bench file?), not an LLM.get_metrics() dump: {exc}") from exc
            if exc.pos >= len(text.rstrip()) - 1:
                raise DataError(f"{source}: truncated JSON (the document ends early): {exc}") from exc
            raise DataError(f"{source}: invalid JSON: {exc}") from exc
        except RecursionError as exc:
            raise DataError(f"{source}: JSON nested too deeply to be a metrics dump") from exc
    if isinstance(metrics, Mapping):
        for key in ("metrics", "all_metrics"):
            if key in metrics and isinstance(metrics[key], list):
                metrics = metrics[key]
                break
        else:
            keys = sorted(map(str, metrics))
            hint = (" (a vllm bench result? use read_bench_result)"
                    if any(k.startswith(("spec_decode_", "completed", "duration")) for k in keys) else "")
            raise DataError(f"{source}: not an LLM.get_metrics() dump: expected a list of metrics, "
                            f"got a JSON object with keys {keys[:12]}{hint}")
    if isinstance(metrics, (str, bytes, int, float, bool)) or metrics is None or not hasattr(metrics, "__iter__"):
        raise DataError(f"{source}: not an LLM.get_metrics() dump: expected a list of metrics, "
                        f"got {type(metrics).__name__}")
    samples = []
    for i, m in enumerate(metrics):
        name = _get(m, "name")
        if not isinstance(name, str):
            raise DataError(f"{source}: entry {i} has no metric name (not an LLM.get_metrics() "
                            f"dump?): {str(m)[:200]}")
        labels = _get(m, "labels", {}) or {}
        if not isinstance(labels, Mapping):
            raise DataError(f"{source}: {name}: labels must be a mapping, got {labels!r}")
        labels = {str(k): str(v) for k, v in labels.items()}
        kind = str(_get(m, "type", type(m).__name__ if not isinstance(m, Mapping) else "")).lower()
        if name.endswith("_total"):
            name = name[: -len("_total")]
        if kind == "histogram" or _get(m, "buckets") is not None:
            continue
        values = _get(m, "values")
        if values is not None:
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise DataError(f"{source}: {name}: 'values' must be a list, got {values!r}")
            labels.pop("position", None)
            for pos, v in enumerate(values):
                samples.append((name, labels, pos, v))
            continue
        has_value = ("value" in m) if isinstance(m, Mapping) else hasattr(m, "value")
        if not has_value:
            raise DataError(f"{source}: {name}: entry has neither 'value' nor 'values'")
        pos = labels.pop("position", None)
        if pos is not None:
            try:
                pos = int(pos)
            except ValueError:
                raise DataError(f"{source}: {name}: position label {pos!r} is not an integer") from None
        samples.append((name, labels, pos, _get(m, "value")))
    return _build_snapshot(samples, source)


def diff_scrapes(before: MetricsSnapshot | str, after: MetricsSnapshot | str) -> MetricsSnapshot:
    """Counters accumulated between two scrapes (``after - before``), per engine.

    Parameters
    ----------
    before, after : MetricsSnapshot or str
        Snapshots, or raw ``/metrics`` text.

    Returns
    -------
    MetricsSnapshot
        ``status == "not collected"`` if neither scrape has spec-decode counters.

    Raises
    ------
    DataError
        Scrapes of two server processes (``process_start_time_seconds`` differs by more than a
        second), counter reset (any counter decreased: server restarted), spec-decode counters in
        only one of the two scrapes, an engine that disappeared, or N changed.
    """
    if isinstance(before, str):
        before = parse_prometheus_text(before, source="before")
    if isinstance(after, str):
        after = parse_prometheus_text(after, source="after")
    where = f"{after.source} - {before.source}"
    t0, t1 = before.process_start_s, after.process_start_s
    if t0 is not None and t1 is not None and abs(t1 - t0) > _SAME_PROCESS_S:
        first, then = sorted((("before", t0), ("after", t1)), key=lambda x: x[1])
        raise DataError(f"{where}: the two scrapes are of different server processes (process_start_time_seconds "
                        f"{t0:.0f} before, {t1:.0f} after: the {then[0]} scrape's server started "
                        f"{then[1] - first[1]:.0f} s after the {first[0]} scrape's): their difference counts another "
                        "server's traffic; give the scrape taken before this run on the same server")
    if bool(before.spec_by_engine) != bool(after.spec_by_engine):
        raise DataError(f"{where}: spec-decode counters present in only one scrape "
                        f"(before: {before.status}, after: {after.status}); not the same server?")
    gone = set(before.spec_by_engine) - set(after.spec_by_engine)
    if gone:
        raise DataError(f"{where}: engine label sets {sorted(gone)} disappeared between scrapes")
    spec = {}
    for key, a in after.spec_by_engine.items():
        b = before.spec_by_engine.get(key)
        if b is None:  # engine appeared after the first scrape: it started from zero
            b = SpecDecodeCounts(None if a.num_drafts is None else 0, 0, 0,
                                 (0,) * len(a.accepted_per_pos), num_speculative_tokens=a.num_speculative_tokens,
                                 not_collected=tuple(x for x in a.not_collected if x != "num_drafts"))
        spec[key] = a.minus(b, f"{where} {{{key}}}")

    def _d(name: str, b: int | None, a: int | None) -> int | None:
        if a is None or b is None:
            return None
        if a < b:
            raise DataError(f"{where}: counter reset: {name} went from {b} to {a}")
        return a - b

    return MetricsSnapshot(spec, _d(_GENERATION_TOKENS, before.generation_tokens, after.generation_tokens),
                           _d(_PROMPT_TOKENS, before.prompt_tokens, after.prompt_tokens), where,
                           _d(_REQUEST_SUCCESS, before.requests, after.requests))
