"""Read the speculative-decoding counters that vLLM reports, in every form it reports them.

Sources understood (facts checked against the vLLM wheels named; no vLLM code is imported):

* Prometheus ``/metrics`` text (vLLM v1, 0.8.5 .. 0.32.0): counters
  ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
  ``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_accepted_tokens_per_pos``
  (label ``position`` = 0 .. N-1), exposed with a ``_total`` suffix plus ``_created`` gauges, one
  series per engine (``vllm/v1/spec_decode/metrics.py``, class ``SpecDecodingProm``), and
  ``vllm:generation_tokens`` / ``vllm:prompt_tokens`` (``vllm/v1/metrics/loggers.py``).
  -> :func:`parse_prometheus_text`, :func:`read_prometheus`, :func:`diff_scrapes`.
* ``LLM.get_metrics()`` (``vllm/v1/metrics/reader.py``): ``Counter(name, labels, value)``,
  ``Vector(name, labels, values)``, ``Gauge``, ``Histogram``; names without ``_total``.
  -> :func:`parse_offline_metrics`.
* The periodic ``SpecDecoding metrics:`` log line (per logging interval, not cumulative), in the
  three v1 layouts and the v0 ``Speculative metrics:`` line (cumulative). -> :func:`parse_spec_decode_log`.
* ``vllm bench serve --save-result`` JSON (``vllm/benchmarks/serve.py``: before/after deltas of
  ``/metrics``). -> :func:`read_bench_result`.

Definitions (``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingStats.observe_draft`` and
``SpecDecodingLogging.log``, vLLM 0.32.0):

* a *draft* is one (request, step) pair that proposed >= 1 token (requests with 0 draft tokens are
  skipped by the scheduler, ``vllm/v1/core/sched/scheduler.py`` ``make_spec_decoding_stats``);
* ``accepted_per_pos[i]`` = number of drafts whose accepted prefix has >= i+1 tokens;
* MAL (mean acceptance length, counts the bonus token) = 1 + accepted / drafts;
* cumulative (unconditional) per-position acceptance rate p_k = accepted_per_pos[k-1] / drafts;
  conditional rate alpha_k = accepted_per_pos[k-1] / accepted_per_pos[k-2] (alpha_1 = p_1).
  For drafters that may propose fewer than N tokens (ngram), short drafts stay in the
  denominator, so p_k is a lower bound of the rate among drafts that reached position k.
"""
from __future__ import annotations

import json
import math
import operator
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from specsim.errors import DataError, NotCollectedError, SpecsimValueError

__all__ = [
    "IngestWarning",
    "SpecDecodeCounts",
    "MetricsSnapshot",
    "parse_prometheus_text",
    "read_prometheus",
    "parse_offline_metrics",
    "diff_scrapes",
    "LogRecord",
    "SpecDecodeLog",
    "parse_spec_decode_log",
    "read_spec_decode_log",
    "BenchResult",
    "read_bench_result",
    "SPEC_METRIC_NAMES",
]

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


class IngestWarning(UserWarning):
    """A vLLM output was read, but a value is only known to within rounding (log lines)."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _as_count(value: Any, what: str) -> int:
    """Convert a counter value (int, integral float such as Prometheus' ``330.0``) to int."""
    if isinstance(value, bool):
        raise DataError(f"{what}: expected a count, got a boolean {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        pass
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{what}: expected a count, got {value!r}") from None
    if not math.isfinite(f) or f < 0 or f != int(f):
        raise DataError(f"{what}: expected a non-negative integer count, got {value!r}")
    return int(f)


# --------------------------------------------------------------------------------------------
# SpecDecodeCounts
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecDecodeCounts:
    """Speculative-decoding counters of one run (or one logging interval, or one engine).

    Parameters
    ----------
    num_drafts : int
        Drafts = (request, step) pairs that proposed >= 1 token (vLLM ``num_drafts``).
    num_draft_tokens : int
        Draft tokens proposed (tokens).
    num_accepted_tokens : int
        Draft tokens accepted (tokens; the accepted prefix, without the bonus token).
    accepted_per_pos : tuple of int, shape (N,)
        ``accepted_per_pos[i]`` = drafts that accepted >= i+1 tokens. Empty when the source does
        not report it (vLLM v0 log lines); per-position quantities then raise NotCollectedError.
    source : str
        Where the numbers came from (file, format), carried into frames and ``Acceptance`` labels.
    num_speculative_tokens : int, optional
        N. Defaults to ``len(accepted_per_pos)``; must be given when ``accepted_per_pos`` is empty.
    num_drafts_range : tuple (int, int), optional
        Inclusive range of ``num_drafts`` values consistent with the source when ``num_drafts``
        was reconstructed from rounded log values (None = exact counter value).

    Raises
    ------
    DataError
        If the counters violate an identity that holds for every real vLLM output
        (``vllm/v1/spec_decode/metrics.py`` ``observe_draft``): sum(accepted_per_pos) ==
        num_accepted_tokens (equivalently MAL = 1 + sum of per-position rates); accepted_per_pos
        non-increasing with accepted_per_pos[0] <= num_drafts; num_drafts <= num_draft_tokens <=
        N * num_drafts; num_accepted_tokens <= num_draft_tokens. The message names the numbers.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple = ()
    source: str = ""
    num_speculative_tokens: int | None = None
    num_drafts_range: tuple | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        d = _as_count(self.num_drafts, "num_drafts")
        t = _as_count(self.num_draft_tokens, "num_draft_tokens")
        a = _as_count(self.num_accepted_tokens, "num_accepted_tokens")
        per = tuple(_as_count(v, f"accepted_per_pos[{i}]") for i, v in enumerate(self.accepted_per_pos))
        set_(self, "num_drafts", d)
        set_(self, "num_draft_tokens", t)
        set_(self, "num_accepted_tokens", a)
        set_(self, "accepted_per_pos", per)
        n = self.num_speculative_tokens
        if n is None:
            if not per:
                raise SpecsimValueError("num_speculative_tokens", "required when accepted_per_pos is empty")
            n = len(per)
        n = _as_count(n, "num_speculative_tokens")
        if n < 1:
            raise SpecsimValueError("num_speculative_tokens", "must be >= 1", n)
        if per and len(per) != n:
            raise DataError(
                f"{self.source}: accepted_per_pos has {len(per)} positions but "
                f"num_speculative_tokens is {n}")
        set_(self, "num_speculative_tokens", n)
        if self.num_drafts_range is not None:
            lo, hi = (int(x) for x in self.num_drafts_range)
            if not lo <= d <= hi:
                raise DataError(f"{self.source}: num_drafts {d} outside its range [{lo}, {hi}]")
            set_(self, "num_drafts_range", None if lo == hi else (lo, hi))
        self._check()

    def _check(self) -> None:
        d, t, a, per, n = (self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens,
                           self.accepted_per_pos, self.num_speculative_tokens)
        where = f"{self.source or 'counts'}"
        if per and sum(per) != a:
            raise DataError(
                f"{where}: sum(accepted_per_pos) = {sum(per)} != num_accepted_tokens = {a} "
                f"(accepted_per_pos = {list(per)}); MAL = 1 + accepted/drafts would disagree with "
                f"1 + sum of per-position rates")
        if per and any(per[i + 1] > per[i] for i in range(len(per) - 1)):
            raise DataError(f"{where}: accepted_per_pos must be non-increasing, got {list(per)}")
        if per and per[0] > d:
            raise DataError(
                f"{where}: accepted_per_pos[0] = {per[0]} > num_drafts = {d} "
                f"(position-1 acceptance rate would exceed 1)")
        if d > t:
            raise DataError(f"{where}: num_drafts = {d} > num_draft_tokens = {t} "
                            f"(every draft proposes >= 1 token)")
        if t > n * d:
            raise DataError(f"{where}: num_draft_tokens = {t} > N x num_drafts = {n} x {d} = {n * d}")
        if a > t:
            raise DataError(f"{where}: num_accepted_tokens = {a} > num_draft_tokens = {t}")

    # ---- derived quantities ---------------------------------------------------------------
    @property
    def has_per_position(self) -> bool:
        """True when per-position counts were collected."""
        return bool(self.accepted_per_pos)

    @property
    def exact(self) -> bool:
        """True when every count is an exact counter value (not reconstructed from rounding)."""
        return self.num_drafts_range is None

    def _need_drafts(self, what: str) -> None:
        if self.num_drafts == 0:
            raise DataError(f"{self.source or 'counts'}: {what} is undefined: no drafts were made "
                            f"(num_drafts = 0)")

    def _need_per_pos(self) -> None:
        if not self.accepted_per_pos:
            raise NotCollectedError(
                f"{self.source or 'counts'}: per-position acceptance counts were not collected "
                f"(only totals; e.g. vLLM v0 log lines)")

    @property
    def mal(self) -> float:
        """Mean acceptance length (tokens per verification step, counts the bonus token),
        1 + num_accepted_tokens / num_drafts (``vllm/v1/spec_decode/metrics.py``)."""
        self._need_drafts("MAL")
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def acceptance_rate(self) -> float:
        """Token-level draft acceptance rate, accepted / draft tokens (fraction, not percent;
        vLLM prints it x100 as "Avg Draft acceptance rate")."""
        if self.num_draft_tokens == 0:
            raise DataError(f"{self.source or 'counts'}: acceptance rate undefined: 0 draft tokens")
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def mean_draft_length(self) -> float:
        """Draft tokens per draft (tokens); < N for drafters that may propose fewer (ngram)."""
        self._need_drafts("mean draft length")
        return self.num_draft_tokens / self.num_drafts

    @property
    def per_position_rates(self) -> np.ndarray:
        """Cumulative (unconditional) acceptance rate per position, shape (N,):
        p_k = accepted_per_pos[k-1] / num_drafts, as vLLM reports it."""
        self._need_per_pos()
        self._need_drafts("per-position rate")
        return np.asarray(self.accepted_per_pos, dtype=float) / self.num_drafts

    @property
    def conditional_rates(self) -> np.ndarray:
        """Conditional acceptance rate per position, shape (N,): alpha_k = accepted_per_pos[k-1] /
        accepted_per_pos[k-2] (alpha_1 = p_1); NaN where the previous position had no acceptances
        (undefined, not zero)."""
        self._need_per_pos()
        self._need_drafts("conditional rate")
        prev = np.concatenate([[self.num_drafts], self.accepted_per_pos[:-1]]).astype(float)
        cur = np.asarray(self.accepted_per_pos, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(prev > 0, cur / np.where(prev > 0, prev, 1.0), np.nan)

    # ---- outputs --------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """Tidy table, one row per draft position.

        Returns
        -------
        pandas.DataFrame
            Columns ``position`` (1-based), ``num_drafts``, ``num_draft_tokens``,
            ``num_accepted_tokens`` (run totals, repeated), ``accepted_per_pos``,
            ``cumulative_ar`` (p_k), ``conditional_ar`` (alpha_k, NaN if undefined), ``mal``
            (run MAL), ``mal_through_position`` (1 + sum_{j<=k} p_j), ``exact``, ``source``.

        Raises
        ------
        NotCollectedError
            If per-position counts were not collected.
        DataError
            If there were no drafts.
        """
        p = self.per_position_rates
        n = self.num_speculative_tokens
        return pd.DataFrame({
            "position": np.arange(1, n + 1),
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": np.asarray(self.accepted_per_pos, dtype=np.int64),
            "cumulative_ar": p,
            "conditional_ar": self.conditional_rates,
            "mal": self.mal,
            "mal_through_position": 1.0 + np.cumsum(p),
            "exact": self.exact,
            "source": self.source,
        })

    def summary(self) -> dict:
        """Totals and derived scalars (works without per-position counts)."""
        out = {
            "source": self.source, "num_speculative_tokens": self.num_speculative_tokens,
            "num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens, "exact": self.exact,
            "num_drafts_range": self.num_drafts_range,
        }
        if self.num_drafts:
            out.update(mal=self.mal, mean_draft_length=self.mean_draft_length,
                       acceptance_rate=self.acceptance_rate)
        return out

    def to_acceptance(self, temperature: float | None = None, label: str | None = None):
        """Acceptance model of these counts, ``Acceptance.from_counts(num_drafts,
        accepted_per_pos, temperature=..., label=...)`` (``specsim.acceptance``).

        Parameters
        ----------
        temperature : float, optional
            Sampling temperature of the run (None = not recorded).
        label : str, optional
            Defaults to ``source``.

        Raises
        ------
        NotCollectedError
            If per-position counts were not collected.
        DataError
            If there were no drafts.
        """
        self._need_per_pos()
        self._need_drafts("an acceptance model")
        if not self.exact:
            warnings.warn(
                f"{self.source}: num_drafts = {self.num_drafts} was reconstructed from rounded log "
                f"values (consistent range {self.num_drafts_range})", IngestWarning, stacklevel=2)
        from specsim.acceptance import Acceptance  # lazy: written concurrently, core module

        return Acceptance.from_counts(self.num_drafts, list(self.accepted_per_pos),
                                      temperature=temperature, label=label or self.source)

    # ---- aggregation ----------------------------------------------------------------------
    def __add__(self, other: "SpecDecodeCounts") -> "SpecDecodeCounts":
        """Pool two sets of counts (engines, intervals) by summing counts, never averaging MALs.

        Raises
        ------
        DataError
            If the two have different num_speculative_tokens.
        """
        if not isinstance(other, SpecDecodeCounts):
            return NotImplemented
        if other.num_speculative_tokens != self.num_speculative_tokens:
            raise DataError(
                f"cannot pool counts with different num_speculative_tokens: "
                f"{self.num_speculative_tokens} ({self.source}) vs "
                f"{other.num_speculative_tokens} ({other.source})")
        if self.accepted_per_pos and other.accepted_per_pos:
            per = tuple(x + y for x, y in zip(self.accepted_per_pos, other.accepted_per_pos))
        else:
            per = ()
        lo1, hi1 = self.num_drafts_range or (self.num_drafts, self.num_drafts)
        lo2, hi2 = other.num_drafts_range or (other.num_drafts, other.num_drafts)
        srcs = [s for s in (self.source, other.source) if s]
        return SpecDecodeCounts(
            num_drafts=self.num_drafts + other.num_drafts,
            num_draft_tokens=self.num_draft_tokens + other.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens + other.num_accepted_tokens,
            accepted_per_pos=per,
            source=" + ".join(dict.fromkeys(srcs)),
            num_speculative_tokens=self.num_speculative_tokens,
            num_drafts_range=(lo1 + lo2, hi1 + hi2),
        )

    def __radd__(self, other):
        if other == 0:  # support sum(list_of_counts)
            return self
        return NotImplemented

    def _sub(self, before: "SpecDecodeCounts", where: str) -> "SpecDecodeCounts":
        if before.num_speculative_tokens != self.num_speculative_tokens:
            raise DataError(f"{where}: num_speculative_tokens changed between scrapes "
                            f"({before.num_speculative_tokens} -> {self.num_speculative_tokens}); "
                            f"different server?")
        pairs = [("num_drafts", before.num_drafts, self.num_drafts),
                 ("num_draft_tokens", before.num_draft_tokens, self.num_draft_tokens),
                 ("num_accepted_tokens", before.num_accepted_tokens, self.num_accepted_tokens)]
        pairs += [(f"accepted_per_pos[{i}]", b, a)
                  for i, (b, a) in enumerate(zip(before.accepted_per_pos, self.accepted_per_pos))]
        for name, b, a in pairs:
            if a < b:
                raise DataError(f"{where}: counter reset: {name} went from {b} to {a} "
                                f"(server restarted between the scrapes?)")
        per = tuple(a - b for _, b, a in pairs[3:])
        return SpecDecodeCounts(self.num_drafts - before.num_drafts,
                                self.num_draft_tokens - before.num_draft_tokens,
                                self.num_accepted_tokens - before.num_accepted_tokens,
                                per, source=where,
                                num_speculative_tokens=self.num_speculative_tokens)


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
    """

    spec_by_engine: Mapping[str, SpecDecodeCounts]
    generation_tokens: int | None
    prompt_tokens: int | None
    source: str = ""

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
                f"{self.source}: no vllm:spec_decode_* counters (speculative decoding not enabled "
                f"or metrics not collected); acceptance is unknown, not zero")
        total = sum(self.spec_by_engine.values())
        return SpecDecodeCounts(total.num_drafts, total.num_draft_tokens, total.num_accepted_tokens,
                                total.accepted_per_pos, source=self.source,
                                num_speculative_tokens=total.num_speculative_tokens)

    def to_frame(self) -> pd.DataFrame:
        """``spec_counts().to_frame()``."""
        return self.spec_counts().to_frame()

    def to_acceptance(self, temperature: float | None = None, label: str | None = None):
        """``spec_counts().to_acceptance(...)``."""
        return self.spec_counts().to_acceptance(temperature=temperature, label=label)


def _label_key(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels)) or "(no labels)"


def _build_snapshot(samples: Iterable[tuple[str, dict, int | None, Any]], source: str) -> MetricsSnapshot:
    """samples: (base_name, labels without position, position or None, value)."""
    spec: dict[str, dict[str, Any]] = {}
    gen: int | None = None
    prompt: int | None = None
    for name, labels, pos, value in samples:
        what = f"{source}: {name}{{{_label_key(labels)}}}"
        if name == _GENERATION_TOKENS:
            gen = (gen or 0) + _as_count(value, what)
            continue
        if name == _PROMPT_TOKENS:
            prompt = (prompt or 0) + _as_count(value, what)
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
            entry["accepted_per_pos"][pos] = _as_count(value, f"{what} position={pos}")
        else:
            if fld in entry:
                raise DataError(f"{what}: duplicate sample")
            entry[fld] = _as_count(value, what)
    by_engine: dict[str, SpecDecodeCounts] = {}
    for key, e in spec.items():
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
    return MetricsSnapshot(by_engine, gen, prompt, source)


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
        Unparseable text, non-integer or negative counts, incomplete spec-decode series, or
        counters that violate vLLM's identities (see :class:`SpecDecodeCounts`).
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:  # optional dependency, extra "vllm"
        raise ImportError("parse_prometheus_text needs prometheus-client "
                          "(pip install 'specsim[vllm]')") from exc
    if not isinstance(text, str):
        raise SpecsimValueError("text", "must be the /metrics text (str)", type(text).__name__)
    samples = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                name = s.name
                if name.endswith("_created"):
                    continue
                if name.endswith("_total"):
                    name = name[: -len("_total")]
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
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise DataError(f"{source}: malformed Prometheus text: {exc}") from exc
    return _build_snapshot(samples, source)


def read_prometheus(path: str | os.PathLike) -> MetricsSnapshot:
    """Read a saved ``/metrics`` scrape from a file; see :func:`parse_prometheus_text`."""
    with open(path, encoding="utf-8") as fh:
        return parse_prometheus_text(fh.read(), source=os.path.basename(os.fspath(path)))


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
        Malformed entries or inconsistent counters.
    """
    if isinstance(metrics, (str, os.PathLike)):
        path = os.fspath(metrics)
        try:
            with open(path, encoding="utf-8") as fh:
                metrics = json.load(fh)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from exc
        source = os.path.basename(path) if source == "LLM.get_metrics" else source
    if isinstance(metrics, Mapping):
        for key in ("metrics", "all_metrics"):
            if key in metrics and isinstance(metrics[key], list):
                metrics = metrics[key]
                break
        else:
            raise DataError(f"{source}: expected a list of metrics, got a dict with keys {sorted(metrics)}")
    samples = []
    for i, m in enumerate(metrics):
        name = _get(m, "name")
        if not isinstance(name, str):
            raise DataError(f"{source}: entry {i} has no metric name: {m!r}")
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
        samples.append((name, labels, int(pos) if pos is not None else None, _get(m, "value")))
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
        Counter reset (any counter decreased: server restarted), spec-decode counters in only
        one of the two scrapes, an engine that disappeared, or N changed.
    """
    if isinstance(before, str):
        before = parse_prometheus_text(before, source="before")
    if isinstance(after, str):
        after = parse_prometheus_text(after, source="after")
    where = f"{after.source} - {before.source}"
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
            b = SpecDecodeCounts(0, 0, 0, (0,) * a.num_speculative_tokens)
        spec[key] = a._sub(b, f"{where} {{{key}}}")

    def _d(name: str, b: int | None, a: int | None) -> int | None:
        if a is None or b is None:
            return None
        if a < b:
            raise DataError(f"{where}: counter reset: {name} went from {b} to {a}")
        return a - b

    return MetricsSnapshot(spec, _d(_GENERATION_TOKENS, before.generation_tokens, after.generation_tokens),
                           _d(_PROMPT_TOKENS, before.prompt_tokens, after.prompt_tokens), where)


# --------------------------------------------------------------------------------------------
# log lines
# --------------------------------------------------------------------------------------------
_NUM = r"(?:\d+\.\d+|nan|inf)"
_RATES = r"(?P<rates>(?:\d\.\d{3}|nan)(?:, (?:\d\.\d{3}|nan))*)"
# vLLM >= 0.10 (checked 0.10.2, 0.32.0): vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log
_RE_V1 = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>" + _NUM + r"), "
    r"Accepted throughput: (?P<acc_tput>" + _NUM + r") tokens/s, "
    r"Drafted throughput: (?P<draft_tput>" + _NUM + r") tokens/s, "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: " + _RATES + r", "
    r"Avg Draft acceptance rate: (?P<ar>\d+\.\d|nan)%\s*$")
# vLLM 0.8.5 (MAL = accepted/drafts, no bonus) and 0.9.x (checked 0.9.2; MAL = 1 + accepted/drafts)
_RE_V1_OLD = re.compile(
    r"SpecDecoding metrics: Draft acceptance rate: (?P<ar>\d+\.\d|nan)%, "
    r"Mean acceptance length: (?P<mal>" + _NUM + r"), "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: " + _RATES + r"\s*$")
# vLLM v0 (checked 0.8.5 vllm/engine/metrics.py; counts cumulative since start,
# vllm/model_executor/layers/spec_decode_base_sampler.py)
_RE_V0 = re.compile(
    r"Speculative metrics: Draft acceptance rate: (?P<ar>\d\.\d{3}|nan), "
    r"System efficiency: (?P<eff>\d\.\d{3}|nan), Number of speculative tokens: (?P<k>\d+), "
    r"Number of accepted tokens: (?P<accepted>\d+), Number of draft tokens: (?P<drafted>\d+), "
    r"Number of emitted tokens: (?P<emitted>\d+)\.\s*$")
_RE_ENGINE = re.compile(r"Engine (\d+): ")
_RE_AGG = re.compile(r"(\d+) Engines Aggregated: ")
_RE_PID = re.compile(r"\(([^()]*pid=\d+)\)")
_RE_TIME = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")
_MARKERS = ("SpecDecoding metrics:", "Speculative metrics:")

FORMAT_V1 = "v1"                     # vLLM >= 0.10: MAL first, throughputs, Avg AR last
FORMAT_V1_09 = "v1-0.9"              # AR first, MAL includes the bonus token
FORMAT_V1_085 = "v1-0.8"             # AR first, MAL = accepted/drafts (no bonus token)
FORMAT_V0 = "v0"                     # "Speculative metrics:", cumulative


@dataclass(frozen=True)
class LogRecord:
    """One parsed spec-decode log line.

    Attributes
    ----------
    line_no : int
        1-based line number in the input.
    engine : str or None
        ``"000"``.. from the preceding ``Engine NNN:`` line of the same process, ``"aggregated"``
        after an ``N Engines Aggregated:`` line, None if neither precedes it.
    process : str or None
        The ``(... pid=N)`` prefix, if present.
    timestamp : str or None
        ``MM-DD hh:mm:ss`` from the log prefix.
    format : str
        ``"v1"``, ``"v1-0.9"``, ``"v1-0.8"`` or ``"v0"``.
    counts : SpecDecodeCounts
        Interval counts for v1 formats; cumulative counts for v0.
    logged : dict
        The values as printed (MAL, rates, throughputs in tokens/s, ...).
    """

    line_no: int
    engine: str | None
    process: str | None
    timestamp: str | None
    format: str
    counts: SpecDecodeCounts
    logged: dict = field(default_factory=dict)


def _count_bounds(r: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest / largest integer a_i with ``"%.3f" % (a_i / D) == "%.3f" % r_i`` (broadcast).

    Interior bounds follow from |a/D - r| <= 0.0005; where a bound lands exactly on a rounding
    half-way point (a/D = r +- 0.0005) the printed digit depends on the binary value of a/D, so
    those few candidates are checked with the same formatting vLLM's logger uses.
    """
    eps = 1e-9
    h = 0.0005
    D = np.broadcast_to(D, np.broadcast_shapes(D.shape, r.shape))
    rr = np.broadcast_to(r, D.shape)
    a_lo = np.clip(np.ceil((rr - h) * D - eps), 0, None)
    a_hi = np.minimum(np.floor((rr + h) * D + eps), D)
    for bound, step in ((a_lo, 1), (a_hi, -1)):
        edge = np.abs(bound - (rr - step * h) * D) < 1e-6
        for idx in zip(*np.nonzero(edge)):
            if f"{bound[idx] / D[idx]:.3f}" != f"{rr[idx]:.3f}":
                bound[idx] += step
    return a_lo, a_hi


def _reconstruct_drafts(*, accepted: int, drafted: int, n: int, mal_minus_1: float, mal_half: float,
                        rates: list[float], full_drafts: bool, where: str) -> tuple[int, int, int, tuple]:
    """Integer drafts D and accepted_per_pos consistent with rounded log values.

    The v1 log line prints accepted and drafted tokens exactly but not the number of drafts; it
    prints MAL (%.2f) and per-position rates a_i/D (%.3f). Every D with ceil(T/N) <= D <= T
    (1..N tokens per draft) whose MAL and all rates round to the printed values, with integer
    a_i summing to `accepted`, is feasible. Returns (estimate, lo, hi, accepted_per_pos).
    """
    eps = 1e-9
    lo = max(1, -(-drafted // n))
    hi = drafted
    if full_drafts:
        if drafted % n:
            raise DataError(f"{where}: assume_full_drafts but Drafted = {drafted} is not a multiple "
                            f"of N = {n}")
        lo = hi = drafted // n
    if accepted > 0:  # 1 + a/D within +-mal_half of the printed MAL
        top = mal_minus_1 + mal_half + eps
        bot = mal_minus_1 - mal_half - eps
        lo = max(lo, math.ceil(accepted / top - eps)) if top > 0 else hi + 1
        if bot > 0:
            hi = min(hi, math.floor(accepted / bot + eps))
    if lo > hi:
        raise DataError(f"{where}: no number of drafts is consistent with MAL "
                        f"{1 + mal_minus_1:.2f}, Accepted {accepted}, Drafted {drafted}, N {n}")
    if hi - lo > 5_000_000:
        raise DataError(f"{where}: number of drafts too weakly determined ({lo}..{hi})")
    D = np.arange(lo, hi + 1, dtype=np.int64)[:, None]
    r = np.asarray(rates, dtype=float)[None, :]
    a_lo, a_hi = _count_bounds(r, D)
    ok = np.all(a_lo <= a_hi, axis=1) & (a_lo.sum(1) <= accepted) & (a_hi.sum(1) >= accepted)
    feas = D[ok, 0]
    if feas.size == 0:
        raise DataError(f"{where}: no number of drafts in [{lo}, {hi}] reproduces the printed "
                        f"per-position rates {rates} with Accepted = {accepted}")
    if accepted > 0:
        target = accepted / mal_minus_1 if mal_minus_1 > 0 else float(feas[-1])
    else:
        target = drafted / n  # accepted = 0 says nothing about D: assume full-length drafts
    est = int(feas[np.argmin(np.abs(feas - target))])
    # accepted_per_pos for the estimate: round, then fix the sum within the rounding bounds
    lo_i, hi_i = (b[0].astype(np.int64) for b in _count_bounds(r, np.array([[est]], dtype=np.int64)))
    a = np.clip(np.rint(r[0] * est).astype(np.int64), lo_i, hi_i)
    resid = r[0] * est - a
    while a.sum() != accepted:
        if a.sum() < accepted:
            cand = np.where(a < hi_i, resid, -np.inf)
            j = int(np.argmax(cand))
            a[j] += 1
        else:
            cand = np.where(a > lo_i, -resid, -np.inf)
            j = int(np.argmax(cand))
            a[j] -= 1
        resid = r[0] * est - a
    a = np.sort(a)[::-1]  # bounds are non-increasing in i, so sorting stays within them
    return est, int(feas.min()), int(feas.max()), tuple(int(x) for x in a)


def _parse_rates(s: str) -> list[float]:
    return [float(x) for x in s.split(", ")]


def _parse_v1_line(m: re.Match, fmt: str, where: str, full_drafts: bool) -> tuple[str, SpecDecodeCounts, dict]:
    accepted, drafted = int(m["accepted"]), int(m["drafted"])
    rates = _parse_rates(m["rates"])
    n = len(rates)
    mal = float(m["mal"])
    ar = float(m["ar"])
    logged = {"mal": mal, "per_position_rates": tuple(rates), "avg_draft_acceptance_rate_pct": ar}
    if m.groupdict().get("acc_tput") is not None:
        logged.update(accepted_throughput_tokens_per_s=float(m["acc_tput"]),
                      drafted_throughput_tokens_per_s=float(m["draft_tput"]))
    if drafted == 0:
        if accepted:
            raise DataError(f"{where}: Accepted {accepted} tokens but Drafted 0")
        counts = SpecDecodeCounts(0, 0, 0, (0,) * n, source=where)
        return fmt, counts, logged
    if any(math.isnan(x) for x in rates) or math.isnan(mal):
        raise DataError(f"{where}: NaN rates with Drafted = {drafted} > 0")
    if not math.isnan(ar) and abs(ar - 100.0 * accepted / drafted) > 0.05 + 1e-6:
        raise DataError(f"{where}: printed draft acceptance rate {ar}% != 100 x Accepted/Drafted = "
                        f"{100.0 * accepted / drafted:.3f}%")
    if any(rates[i + 1] > rates[i] for i in range(n - 1)):
        raise DataError(f"{where}: per-position acceptance rates increase: {rates}")
    if fmt == FORMAT_V1:
        mal_minus_1 = mal - 1.0
    else:  # same layout in 0.8.5 (no bonus) and 0.9.x (bonus): tell them apart by sum of rates
        tol = 0.005 + n * 0.0005 + 1e-9
        s = sum(rates)
        no_bonus, bonus = abs(mal - s) <= tol, abs(mal - 1.0 - s) <= tol
        if bonus == no_bonus:
            raise DataError(f"{where}: MAL {mal} matches neither sum of per-position rates {s:.3f} "
                            f"(vLLM 0.8.x) nor 1 + that sum (vLLM 0.9.x)")
        fmt = FORMAT_V1_09 if bonus else FORMAT_V1_085
        mal_minus_1 = mal - 1.0 if bonus else mal
    est, lo, hi, per = _reconstruct_drafts(accepted=accepted, drafted=drafted, n=n,
                                           mal_minus_1=mal_minus_1, mal_half=0.005, rates=rates,
                                           full_drafts=full_drafts, where=where)
    counts = SpecDecodeCounts(est, drafted, accepted, per, source=where, num_drafts_range=(lo, hi))
    return fmt, counts, logged


def _parse_v0_line(m: re.Match, where: str) -> tuple[str, SpecDecodeCounts, dict]:
    k, accepted_any, drafted, emitted = (int(m[x]) for x in ("k", "accepted", "drafted", "emitted"))
    logged = {"draft_acceptance_rate": float(m["ar"]), "system_efficiency": float(m["eff"]),
              "num_accepted_tokens_any_position": accepted_any, "num_emitted_tokens": emitted}
    if k < 1:
        raise DataError(f"{where}: Number of speculative tokens must be >= 1, got {k}")
    if drafted % k:
        raise DataError(f"{where}: v0 draft tokens {drafted} not a multiple of k = {k} "
                        f"(v0 always drafts k tokens per sequence)")
    drafts = drafted // k
    prefix_accepted = emitted - drafts  # v0: emitted = accepted prefix + 1 per sequence
    if not 0 <= prefix_accepted <= accepted_any:
        raise DataError(f"{where}: emitted tokens {emitted} inconsistent with {drafts} drafts and "
                        f"{accepted_any} accepted tokens (need drafts <= emitted <= drafts + accepted)")
    if drafted and not math.isnan(float(m["ar"])) and abs(float(m["ar"]) - accepted_any / drafted) > 0.0005 + 1e-9:
        raise DataError(f"{where}: draft acceptance rate {m['ar']} != accepted/draft tokens "
                        f"{accepted_any / drafted:.4f}")
    if drafts and not math.isnan(float(m["eff"])) and abs(float(m["eff"]) - emitted / (drafts * (k + 1))) > 0.0005 + 1e-9:
        raise DataError(f"{where}: system efficiency {m['eff']} != emitted/(drafts (k+1)) "
                        f"{emitted / (drafts * (k + 1)):.4f}")
    counts = SpecDecodeCounts(drafts, drafted, prefix_accepted, (), source=where, num_speculative_tokens=k)
    return FORMAT_V0, counts, logged


@dataclass(frozen=True)
class SpecDecodeLog:
    """Spec-decode log lines of one log, see :func:`parse_spec_decode_log`.

    Attributes
    ----------
    records : tuple of LogRecord
    source : str
    """

    records: tuple
    source: str = ""

    def to_frame(self) -> pd.DataFrame:
        """One row per log line: ``line_no, process, engine, timestamp, format, num_drafts,
        num_drafts_lo, num_drafts_hi, num_draft_tokens, num_accepted_tokens, accepted_per_pos,
        logged_mal, mal`` (MAL recomputed from the counts; NaN for intervals without drafts)."""
        rows = []
        for r in self.records:
            c = r.counts
            lo, hi = c.num_drafts_range or (c.num_drafts, c.num_drafts)
            rows.append({"line_no": r.line_no, "process": r.process, "engine": r.engine,
                         "timestamp": r.timestamp, "format": r.format, "num_drafts": c.num_drafts,
                         "num_drafts_lo": lo, "num_drafts_hi": hi,
                         "num_draft_tokens": c.num_draft_tokens,
                         "num_accepted_tokens": c.num_accepted_tokens,
                         "accepted_per_pos": c.accepted_per_pos, "logged_mal": r.logged.get("mal"),
                         "mal": c.mal if c.num_drafts else float("nan")})
        return pd.DataFrame(rows)

    def _streams(self) -> dict:
        out: dict = {}
        for r in self.records:
            out.setdefault((r.process, r.engine), []).append(r)
        return out

    def by_engine(self) -> dict[str | None, SpecDecodeCounts]:
        """Counts per engine (summed over v1 intervals; last cumulative line for v0)."""
        out: dict = {}
        for (proc, eng), recs in self._streams().items():
            c = self._stream_total(recs)
            out[eng] = out[eng] + c if eng in out else c
        return out

    def _stream_total(self, recs: list) -> SpecDecodeCounts:
        if recs[0].format == FORMAT_V0:
            for a, b in zip(recs, recs[1:]):
                ca, cb = a.counts, b.counts
                if (cb.num_drafts < ca.num_drafts or cb.num_draft_tokens < ca.num_draft_tokens
                        or cb.num_accepted_tokens < ca.num_accepted_tokens):
                    raise DataError(f"{self.source}: v0 cumulative counters decreased from line "
                                    f"{a.line_no} to line {b.line_no} (engine restarted?)")
            return recs[-1].counts
        return sum(r.counts for r in recs)

    def total(self) -> SpecDecodeCounts:
        """All lines pooled by counts (accepted, drafted and drafts summed over intervals and
        engines; never an average of MALs).

        Raises
        ------
        NotCollectedError
            If the log has no spec-decode lines.
        DataError
            If N differs between lines or v0 and v1 lines are mixed.
        """
        if not self.records:
            raise NotCollectedError(f"{self.source}: no 'SpecDecoding metrics' lines in the log "
                                    f"(speculative decoding off, or log level above INFO)")
        fmts = {r.format == FORMAT_V0 for r in self.records}
        if len(fmts) > 1:
            raise DataError(f"{self.source}: log mixes v0 (cumulative) and v1 (interval) lines")
        tot = sum(self.by_engine().values())
        return SpecDecodeCounts(tot.num_drafts, tot.num_draft_tokens, tot.num_accepted_tokens,
                                tot.accepted_per_pos, source=self.source,
                                num_speculative_tokens=tot.num_speculative_tokens,
                                num_drafts_range=tot.num_drafts_range)


def parse_spec_decode_log(text: str | Iterable[str], *, source: str = "log",
                          assume_full_drafts: bool = False, strict: bool = True) -> SpecDecodeLog:
    """Parse vLLM spec-decode log lines (any surrounding log text is ignored).

    Layouts (field order and semantics read from the vLLM wheels named):

    * ``"v1"`` (0.10.2 .. 0.32.0): ``SpecDecoding metrics: Mean acceptance length: %.2f,
      Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens,
      Drafted: %d tokens, Per-position acceptance rate: %.3f, ..., Avg Draft acceptance rate: %.1f%%``
    * ``"v1-0.9"`` (0.9.2) and ``"v1-0.8"`` (0.8.5): ``SpecDecoding metrics: Draft acceptance rate:
      %.1f%%, Mean acceptance length: %.2f, Accepted: %d tokens, Drafted: %d tokens,
      Per-position acceptance rate: ...``; 0.8.5 printed MAL = accepted/drafts (no bonus token),
      0.9 printed 1 + accepted/drafts; told apart by comparing MAL with the sum of the rates.
    * ``"v0"``: ``Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f,
      Number of speculative tokens: k, Number of accepted tokens: a, Number of draft tokens: t,
      Number of emitted tokens: e.`` -- cumulative since start; v0 always drafts k tokens, so
      drafts = t / k, and prefix-accepted tokens = e - drafts (v0's "accepted" counts accepted
      tokens at any position); no per-position counts.

    v1 lines hold interval counts and do not print the number of drafts D. It is reconstructed
    as the integer D (with ceil(Drafted/N) <= D <= Drafted) for which 1 + Accepted/D rounds to
    the printed MAL and integer a_i / D round to every printed per-position rate with
    sum(a_i) = Accepted (naive D = Accepted/(MAL-1) is off by up to ~0.5 % x D/(MAL-1) from the
    %.2f rounding). If several D fit, the one nearest Accepted/(MAL-1) is used (Drafted/N when
    Accepted = 0), the range is kept in ``counts.num_drafts_range`` and an IngestWarning is issued.
    N = 1 (or ``assume_full_drafts``, for drafters that always propose N tokens: draft_model,
    EAGLE, MTP) makes D exact.

    Engines: each engine's ``SpecDecoding`` line follows its ``Engine NNN:`` throughput line
    (``vllm/v1/metrics/loggers.py``, ``LoggingStatLogger.log``); lines are attributed to the
    last such line of the same process.

    Parameters
    ----------
    text : str or iterable of str
        Log text or lines.
    source : str
    assume_full_drafts : bool
        Every draft has exactly N tokens (D = Drafted / N).
    strict : bool
        True: a line with the marker that matches no layout (truncated, edited) raises
        DataError. False: it is skipped with an IngestWarning.

    Returns
    -------
    SpecDecodeLog

    Raises
    ------
    DataError
        Malformed/truncated lines (strict), numbers inconsistent with each other.
    """
    lines = text.splitlines() if isinstance(text, str) else list(text)
    records = []
    engine_of: dict = {}
    ambiguous = []
    for i, line in enumerate(lines, start=1):
        pid_m = _RE_PID.search(line)
        proc = pid_m.group(1) if pid_m else None
        em = _RE_ENGINE.search(line)
        if em and not any(mk in line for mk in _MARKERS):
            engine_of[proc] = em.group(1)
            continue
        am = _RE_AGG.search(line)
        if am:
            engine_of[proc] = "aggregated"
            continue
        if not any(mk in line for mk in _MARKERS):
            continue
        where = f"{source}:{i}"
        try:
            m = _RE_V1.search(line)
            if m:
                fmt, counts, logged = _parse_v1_line(m, FORMAT_V1, where, assume_full_drafts)
            elif (m := _RE_V1_OLD.search(line)):
                fmt, counts, logged = _parse_v1_line(m, FORMAT_V1_09, where, assume_full_drafts)
            elif (m := _RE_V0.search(line)):
                fmt, counts, logged = _parse_v0_line(m, where)
            else:
                raise DataError(f"{where}: spec-decode log line matches no known vLLM layout "
                                f"(truncated or edited?): {line.strip()[:300]!r}")
        except DataError as exc:
            if strict:
                raise
            warnings.warn(f"skipped: {exc}", IngestWarning, stacklevel=2)
            continue
        if not counts.exact:
            ambiguous.append((i, counts.num_drafts, counts.num_drafts_range))
        tm = _RE_TIME.search(line)
        records.append(LogRecord(i, engine_of.get(proc), proc, tm.group(1) if tm else None, fmt,
                                 counts, logged))
    if ambiguous:
        warnings.warn(
            f"{source}: number of drafts only known to within rounding on {len(ambiguous)} line(s) "
            f"(line, estimate, range): {ambiguous[:5]}{' ...' if len(ambiguous) > 5 else ''}",
            IngestWarning, stacklevel=2)
    return SpecDecodeLog(tuple(records), source)


def read_spec_decode_log(path: str | os.PathLike, **kwargs) -> SpecDecodeLog:
    """Read a vLLM log file; see :func:`parse_spec_decode_log` (same keyword arguments)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        kwargs.setdefault("source", os.path.basename(os.fspath(path)))
        return parse_spec_decode_log(fh.read(), **kwargs)


# --------------------------------------------------------------------------------------------
# vllm bench serve --save-result JSON
# --------------------------------------------------------------------------------------------
_SPEC_BENCH_KEYS = ("spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                    "spec_decode_num_drafts", "spec_decode_draft_tokens",
                    "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates")
_BENCH_SUMMARY_KEYS = (
    ("num_prompts", "num_prompts"), ("completed", "completed"), ("failed", "failed"),
    ("max_concurrency", "max_concurrency"), ("request_rate", "request_rate"),
    ("duration", "duration_s"), ("total_input_tokens", "total_input_tokens"),
    ("total_output_tokens", "total_output_tokens"),
    ("request_throughput", "request_throughput_req_per_s"),
    ("output_throughput", "output_throughput_tokens_per_s"),
    ("total_token_throughput", "total_token_throughput_tokens_per_s"),
    ("max_output_tokens_per_s", "max_output_tokens_per_s"),
    ("max_concurrent_requests", "max_concurrent_requests"))
_LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True)
class BenchResult:
    """A ``vllm bench serve --save-result`` result.

    Attributes
    ----------
    raw : dict
        The JSON as read.
    spec : SpecDecodeCounts or None
        Spec-decode deltas of the benchmark window (``vllm/benchmarks/serve.py``, computed from
        /metrics before and after); None when the server had no speculative decoding.
    source : str
    """

    raw: Mapping
    spec: SpecDecodeCounts | None
    source: str = ""

    @property
    def status(self) -> str:
        """``"collected"`` or ``"not collected"`` (spec-decode fields absent)."""
        return "collected" if self.spec is not None else "not collected"

    def spec_counts(self) -> SpecDecodeCounts:
        """Raises NotCollectedError when the result has no ``spec_decode_*`` fields."""
        if self.spec is None:
            raise NotCollectedError(f"{self.source}: no spec_decode_* fields (server without "
                                    f"speculative decoding); acceptance is unknown, not zero")
        return self.spec

    def summary(self) -> pd.Series:
        """Run info and throughput: ``num_prompts, completed, failed, max_concurrency,
        request_rate, duration_s, total_input_tokens, total_output_tokens,
        request_throughput_req_per_s, output_throughput_tokens_per_s,
        total_token_throughput_tokens_per_s, ...`` (keys present in the JSON only)."""
        return pd.Series({new: self.raw[old] for old, new in _BENCH_SUMMARY_KEYS if old in self.raw},
                         name=self.source, dtype=object)

    def latency_frame(self) -> pd.DataFrame:
        """TTFT / TPOT / ITL / E2EL statistics in milliseconds: index ``metric``, columns
        ``mean, median, std`` and the ``pNN`` percentiles present (``--metric-percentiles``).
        ITL is per streamed chunk: with speculative decoding one chunk can hold several tokens."""
        rows = {}
        for metric in _LATENCY_METRICS:
            pat = re.compile(rf"^(mean|median|std|p\d+(?:\.\d+)?)_{metric}_ms$")
            vals = {m.group(1): float(v) for k, v in self.raw.items() if (m := pat.match(k))}
            if vals:
                rows[metric] = vals
        df = pd.DataFrame.from_dict(rows, orient="index")
        df.index.name = "metric"
        return df


def read_bench_result(data: str | os.PathLike | Mapping, *, source: str | None = None) -> BenchResult:
    """Read a ``vllm bench serve --save-result`` JSON file (or its loaded dict).

    The spec-decode fields (``vllm/benchmarks/serve.py`` 0.32.0) are
    ``spec_decode_num_drafts``, ``spec_decode_draft_tokens``, ``spec_decode_accepted_tokens``,
    ``spec_decode_acceptance_length`` (= 1 + accepted/drafts), ``spec_decode_acceptance_rate``
    (percent, = 100 accepted/draft tokens) and ``spec_decode_per_position_acceptance_rates``
    (= accepted_per_pos / drafts, full float precision, so accepted_per_pos is recovered exactly).

    Raises
    ------
    DataError
        Not JSON / not an object, incomplete spec fields, or fields that disagree with each other.
    """
    if isinstance(data, Mapping):
        raw, src = dict(data), source or "bench"
    else:
        path = os.fspath(data)
        src = source or os.path.basename(path)
        try:
            with open(path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except json.JSONDecodeError as exc:
            raise DataError(f"{src}: not valid JSON (truncated file?): {exc}") from exc
        if not isinstance(raw, dict):
            raise DataError(f"{src}: expected a JSON object, got {type(raw).__name__}")
    present = [k for k in _SPEC_BENCH_KEYS if k in raw]
    if not present:
        return BenchResult(raw, None, src)
    if len(present) != len(_SPEC_BENCH_KEYS):
        missing = [k for k in _SPEC_BENCH_KEYS if k not in raw]
        raise DataError(f"{src}: incomplete spec-decode fields, missing {missing}")
    d = _as_count(raw["spec_decode_num_drafts"], f"{src}: spec_decode_num_drafts")
    t = _as_count(raw["spec_decode_draft_tokens"], f"{src}: spec_decode_draft_tokens")
    a = _as_count(raw["spec_decode_accepted_tokens"], f"{src}: spec_decode_accepted_tokens")
    rates = raw["spec_decode_per_position_acceptance_rates"]
    if not isinstance(rates, list) or not rates:
        raise DataError(f"{src}: spec_decode_per_position_acceptance_rates must be a non-empty "
                        f"list, got {rates!r}")
    if d == 0:
        raise DataError(f"{src}: spec-decode fields present with 0 drafts")
    per = []
    for i, r in enumerate(rates):
        x = float(r) * d
        if not math.isfinite(x) or abs(x - round(x)) > 1e-6 * max(1.0, d):
            raise DataError(f"{src}: per-position rate [{i}] = {r} x {d} drafts = {x} is not a count")
        per.append(int(round(x)))
    mal = float(raw["spec_decode_acceptance_length"])
    if abs(mal - (1 + a / d)) > 1e-9 * max(1.0, mal):
        raise DataError(f"{src}: spec_decode_acceptance_length {mal} != 1 + accepted/drafts "
                        f"= 1 + {a}/{d} = {1 + a / d}")
    ar = float(raw["spec_decode_acceptance_rate"])
    if t and abs(ar - 100.0 * a / t) > 1e-9 * max(1.0, ar):
        hint = " (looks like a fraction, expected percent)" if abs(ar - a / t) < 1e-9 else ""
        raise DataError(f"{src}: spec_decode_acceptance_rate {ar} != 100 x accepted/draft tokens "
                        f"= {100.0 * a / t}{hint}")
    spec = SpecDecodeCounts(d, t, a, tuple(per), source=src)
    return BenchResult(raw, spec, src)
