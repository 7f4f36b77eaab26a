"""vLLM 0.32 per-request speculative-decoding metrics (``--per-request-spec-decode-metrics
summary|detailed``) into per-request counts and acceptance pooled by the draft length actually
proposed (layer 1, vLLM formats).

The payload is the response's ``metrics.speculative_decoding`` object (OpenAI completions and chat
responses of ``vllm serve``; GuideLLM copies it per request, see ``specsim.vllm.guidellm``).
Field definitions, vLLM 0.32.0:

- ``vllm/entrypoints/generate/base/protocol.py`` ``SpeculativeDecodingMetrics``: ``mean_acceptance_length``
  (with the bonus token), ``draft_acceptance_rate`` (fraction), ``acceptance_histogram`` (dense,
  index j = verify steps that accepted exactly j draft tokens, length ``num_spec_tokens + 1``),
  ``num_spec_steps``, ``num_accepted_draft_tokens``, ``num_draft_tokens``, ``num_spec_tokens``
  (the configured N, the histogram's upper bound) and, at the ``detailed`` level only, the ordered
  ``per_step_accepted`` / ``per_step_drafted`` arrays;
- ``vllm/v1/metrics/stats.py`` ``RequestSpecDecodeMetrics.observe`` / ``to_dict`` (how they are filled);
- ``vllm/v1/core/sched/scheduler.py`` (``update_from_output``): ``observe`` is called for exactly
  the (request, step) pairs that ``make_spec_decoding_stats`` passes to the Prometheus counters'
  ``observe_draft`` (``vllm/v1/spec_decode/metrics.py``), with the same grammar-invalidated
  adjustment of the proposed count.

Hence, per request: ``num_drafts = sum(histogram)``, ``num_accepted_tokens = sum_j j h[j]``,
``accepted_per_pos[i] = sum_{j > i} h[j]``, and the sum over the requests of a window equals the
``vllm:spec_decode_*`` counter deltas of that window exactly.

The aggregate counters mix rounds of different proposed lengths (n-gram proposing fewer than N
tokens, dynamic ``num_speculative_tokens_per_batch_size`` schedules): position i's count is then
censored by the rounds that never proposed a token there.  With the ``detailed`` arrays each round
is known, so :func:`acceptance_by_draft_length` pools rounds by their own proposed length k and
gives the survival counts of position i over the rounds that proposed it (censored at each round's
own length), which the aggregate counters cannot.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm.counts import SpecDecodeCounts, as_count

__all__ = [
    "DraftLengthAcceptance",
    "RequestSpecMetrics",
    "acceptance_by_draft_length",
    "parse_request_spec_metrics",
    "read_response_spec_metrics",
    "sum_request_counts",
]

_REQUIRED = ("acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens",
             "num_draft_tokens", "num_spec_tokens", "mean_acceptance_length",
             "draft_acceptance_rate")


@dataclass(frozen=True)
class RequestSpecMetrics:
    """The speculative-decoding metrics of one request (one output sequence).

    Attributes
    ----------
    histogram : tuple of int, shape (N + 1,)
        ``histogram[j]`` = verify steps of this request that accepted exactly j draft tokens.
    num_draft_tokens : int
        Draft tokens proposed for this request (tokens).
    num_spec_tokens : int
        N, the configured ``num_speculative_tokens``.
    per_step_accepted, per_step_drafted : tuple of int
        Accepted / proposed draft tokens of each verify step, in order (``detailed`` level only;
        empty at ``summary``).
    source : str
    request_id : str or None
    """

    histogram: tuple
    num_draft_tokens: int
    num_spec_tokens: int
    per_step_accepted: tuple = ()
    per_step_drafted: tuple = ()
    source: str = ""
    request_id: str | None = None

    @property
    def detailed(self) -> bool:
        """True when the per-step arrays were collected (``detailed`` level)."""
        return bool(self.per_step_drafted)

    @property
    def num_drafts(self) -> int:
        """Verify steps with a draft (``num_spec_steps``)."""
        return sum(self.histogram)

    @property
    def num_accepted_tokens(self) -> int:
        """Accepted draft tokens, sum_j j histogram[j] (tokens, without the bonus token)."""
        return sum(j * h for j, h in enumerate(self.histogram))

    @property
    def counts(self) -> SpecDecodeCounts:
        """This request as the counts record: ``accepted_per_pos[i] = sum_{j > i} histogram[j]``."""
        h = self.histogram
        per = tuple(sum(h[i + 1:]) for i in range(self.num_spec_tokens))
        return SpecDecodeCounts(self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens,
                                per, source=self.source, num_speculative_tokens=self.num_spec_tokens)


def _int_list(v: Any, what: str) -> tuple:
    if not isinstance(v, list):
        raise DataError(f"{what}: expected a list of counts, got {v!r}")
    return tuple(as_count(x, f"{what}[{i}]") for i, x in enumerate(v))


def parse_request_spec_metrics(payload: Mapping, *, source: str = "request",
                               request_id: str | None = None) -> RequestSpecMetrics:
    """Check and read one ``metrics.speculative_decoding`` object.

    Parameters
    ----------
    payload : mapping
        The ``speculative_decoding`` object (fields in the module docstring).
    source : str
    request_id : str, optional

    Returns
    -------
    RequestSpecMetrics

    Raises
    ------
    DataError
        A field missing or not a count; a histogram not of length ``num_spec_tokens + 1``;
        ``num_spec_steps``, ``num_accepted_draft_tokens``, ``mean_acceptance_length`` or
        ``draft_acceptance_rate`` disagreeing with the histogram (``RequestSpecDecodeMetrics.to_dict``);
        per-step arrays of different lengths, not matching the histogram, summing to another
        ``num_draft_tokens``, accepting more than proposed or more than N.
    """
    if not isinstance(payload, Mapping):
        raise DataError(f"{source}: speculative_decoding must be an object, got {type(payload).__name__}")
    missing = [k for k in _REQUIRED if k not in payload]
    if missing:
        raise DataError(f"{source}: speculative_decoding lacks {missing}")
    n = as_count(payload["num_spec_tokens"], f"{source}: num_spec_tokens")
    if n < 1:
        raise DataError(f"{source}: num_spec_tokens = {n} (must be >= 1)")
    h = _int_list(payload["acceptance_histogram"], f"{source}: acceptance_histogram")
    if len(h) != n + 1:
        raise DataError(f"{source}: acceptance_histogram has {len(h)} entries, expected "
                        f"num_spec_tokens + 1 = {n + 1}")
    steps = as_count(payload["num_spec_steps"], f"{source}: num_spec_steps")
    acc = as_count(payload["num_accepted_draft_tokens"], f"{source}: num_accepted_draft_tokens")
    t = as_count(payload["num_draft_tokens"], f"{source}: num_draft_tokens")
    if steps != sum(h):
        raise DataError(f"{source}: num_spec_steps = {steps} != sum(acceptance_histogram) = {sum(h)}")
    acc_h = sum(j * x for j, x in enumerate(h))
    if acc != acc_h:
        raise DataError(f"{source}: num_accepted_draft_tokens = {acc} != sum_j j h[j] = {acc_h}")
    mal = float(payload["mean_acceptance_length"])
    want = 1.0 + acc / steps if steps else 1.0
    if not math.isfinite(mal) or abs(mal - want) > 1e-9 * max(1.0, want):
        raise DataError(f"{source}: mean_acceptance_length {mal} != 1 + {acc}/{steps} = {want}")
    rate = float(payload["draft_acceptance_rate"])
    want = acc / t if t else 0.0
    if not math.isfinite(rate) or abs(rate - want) > 1e-9:
        hint = " (looks like percent, expected a fraction)" if t and abs(rate - 100 * want) < 1e-7 else ""
        raise DataError(f"{source}: draft_acceptance_rate {rate} != {acc}/{t} = {want}{hint}")
    pa = payload.get("per_step_accepted")
    pd_ = payload.get("per_step_drafted")
    if (pa is None) != (pd_ is None):
        raise DataError(f"{source}: only one of per_step_accepted / per_step_drafted is present")
    pa = _int_list(pa, f"{source}: per_step_accepted") if pa is not None else ()
    pd_ = _int_list(pd_, f"{source}: per_step_drafted") if pd_ is not None else ()
    if pa or pd_:
        if len(pa) != len(pd_):
            raise DataError(f"{source}: per_step_accepted has {len(pa)} steps, per_step_drafted {len(pd_)}")
        if len(pa) != steps:
            raise DataError(f"{source}: {len(pa)} per-step entries but num_spec_steps = {steps}")
        for i, (a_i, d_i) in enumerate(zip(pa, pd_)):
            if a_i > d_i or d_i > n:
                raise DataError(f"{source}: step {i}: accepted {a_i}, drafted {d_i} (need accepted "
                                f"<= drafted <= num_spec_tokens = {n})")
        hist = [0] * (n + 1)
        for a_i in pa:
            hist[a_i] += 1
        if tuple(hist) != h:
            raise DataError(f"{source}: the histogram of per_step_accepted {hist} != "
                            f"acceptance_histogram {list(h)}")
        if sum(pd_) != t:
            raise DataError(f"{source}: sum(per_step_drafted) = {sum(pd_)} != num_draft_tokens = {t}")
    rec = RequestSpecMetrics(h, t, n, pa, pd_, source, request_id)
    if steps:
        _ = rec.counts  # the counts record's identities (drafts <= tokens <= N x drafts)
    return rec


def read_response_spec_metrics(data: str | os.PathLike | Mapping, *,
                               source: str | None = None) -> RequestSpecMetrics:
    """The per-request speculative metrics of one OpenAI response of ``vllm serve`` run with
    ``--per-request-spec-decode-metrics summary|detailed`` (``response["metrics"]["speculative_decoding"]``).

    Parameters
    ----------
    data : path-like or mapping
        The response JSON file or its loaded dict.
    source : str, optional

    Raises
    ------
    NotCollectedError
        No ``metrics.speculative_decoding`` (server started without the flag, no speculative
        decoding, or ``n > 1``: vLLM sets it to null then).
    DataError
        Not JSON, or the payload fails :func:`parse_request_spec_metrics`.
    """
    if isinstance(data, Mapping):
        raw, src = data, source or "response"
    else:
        path = os.fspath(data)
        src = source or os.path.basename(path)
        try:
            with open(path, encoding="utf-8-sig") as fh:  # a leading byte-order mark dropped
                raw = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{src}: not valid JSON (truncated file?): {exc}") from exc
        if not isinstance(raw, dict):
            raise DataError(f"{src}: expected a JSON object, got {type(raw).__name__}")
    metrics = raw.get("metrics")
    payload = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
    if payload is None:
        raise NotCollectedError(
            f"{src}: no metrics.speculative_decoding in the response (vllm serve needs "
            f"--per-request-spec-decode-metrics summary|detailed, speculative decoding on, n == 1); "
            f"acceptance is unknown, not zero")
    return parse_request_spec_metrics(payload, source=src, request_id=raw.get("id"))


def sum_request_counts(requests: Iterable[RequestSpecMetrics], *, source: str = "requests") -> SpecDecodeCounts:
    """Pooled counts of several requests (sums of counts; equal to the ``vllm:spec_decode_*``
    counter deltas over the same requests).

    Raises
    ------
    NotCollectedError
        No requests.
    DataError
        Requests with different ``num_spec_tokens``.
    """
    reqs = list(requests)
    if not reqs:
        raise NotCollectedError(f"{source}: no per-request speculative metrics")
    ns = {r.num_spec_tokens for r in reqs}
    if len(ns) != 1:
        raise DataError(f"{source}: requests with different num_spec_tokens {sorted(ns)}")
    n = ns.pop()
    h = np.sum([r.histogram for r in reqs], axis=0)
    per = tuple(int(h[i + 1:].sum()) for i in range(n))
    return SpecDecodeCounts(int(h.sum()), sum(r.num_draft_tokens for r in reqs),
                            int(sum(j * x for j, x in enumerate(h))), per, source=source,
                            num_speculative_tokens=n)


@dataclass(frozen=True)
class DraftLengthAcceptance:
    """Acceptance pooled by the draft length actually proposed in each round.

    Attributes
    ----------
    num_speculative_tokens : int
        N (the largest possible draft length).
    rounds : dict int -> int
        Draft length k -> verify rounds that proposed exactly k tokens.
    accepted : dict int -> tuple of int
        Draft length k -> shape (k,) survival counts: ``accepted[k][i]`` = rounds of length k that
        accepted >= i + 1 draft tokens.
    source : str
    """

    num_speculative_tokens: int
    rounds: Mapping
    accepted: Mapping
    source: str = ""

    def counts(self, k: int) -> SpecDecodeCounts:
        """The rounds of draft length k as a counts record with N = k (exact, uncensored)."""
        if k not in self.rounds:
            raise NotCollectedError(f"{self.source}: no round proposed exactly {k} draft tokens "
                                    f"(lengths seen: {sorted(self.rounds)})")
        if k == 0:
            raise SpecsimValueError("k", "must be >= 1 (rounds without a draft have no acceptance)", k)
        acc = self.accepted[k]
        return SpecDecodeCounts(self.rounds[k], k * self.rounds[k], sum(acc), acc,
                                source=f"{self.source} (draft length {k})")

    @property
    def at_risk(self) -> np.ndarray:
        """Shape (N,): rounds that proposed a token at position i+1 and accepted every earlier
        one (censored at each round's own length)."""
        out = np.zeros(self.num_speculative_tokens, dtype=np.int64)
        for k, r in self.rounds.items():
            acc = self.accepted[k]
            for i in range(k):
                out[i] += r if i == 0 else acc[i - 1]
        return out

    @property
    def survived(self) -> np.ndarray:
        """Shape (N,): rounds that accepted position i+1 (pooled over the lengths that proposed it)."""
        out = np.zeros(self.num_speculative_tokens, dtype=np.int64)
        for k, acc in self.accepted.items():
            out[:k] += np.asarray(acc, dtype=np.int64)
        return out

    @property
    def conditional_rates(self) -> np.ndarray:
        """Shape (N,): alpha_i = survived[i] / at_risk[i] (NaN where nothing was at risk)."""
        r, s = self.at_risk.astype(float), self.survived.astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(r > 0, s / np.where(r > 0, r, 1.0), np.nan)

    def to_frame(self) -> pd.DataFrame:
        """One row per (draft_length, position): ``draft_length, position`` (1-based), ``rounds``
        (of that length), ``accepted`` (survival count), ``cumulative_ar`` (accepted / rounds)."""
        rows = []
        for k in sorted(self.rounds):
            for i in range(k):
                rows.append({"draft_length": k, "position": i + 1, "rounds": self.rounds[k],
                             "accepted": self.accepted[k][i],
                             "cumulative_ar": self.accepted[k][i] / self.rounds[k]})
        return pd.DataFrame(rows, columns=["draft_length", "position", "rounds", "accepted",
                                           "cumulative_ar"])

    def pooled_frame(self) -> pd.DataFrame:
        """One row per position: ``position, at_risk, survived, conditional_ar`` (censored pooling)."""
        return pd.DataFrame({"position": np.arange(1, self.num_speculative_tokens + 1),
                             "at_risk": self.at_risk, "survived": self.survived,
                             "conditional_ar": self.conditional_rates})


def acceptance_by_draft_length(requests: Sequence[RequestSpecMetrics] | RequestSpecMetrics, *,
                               source: str | None = None) -> DraftLengthAcceptance:
    """Pool verify rounds by the number of draft tokens each actually proposed.

    Parameters
    ----------
    requests : RequestSpecMetrics or sequence of them
        At the ``detailed`` level (``per_step_drafted`` present).

    Returns
    -------
    DraftLengthAcceptance
        Rounds with 0 proposed tokens (all grammar-invalidated) are counted under length 0 with no
        positions.

    Raises
    ------
    NotCollectedError
        A request without the per-step arrays (``summary`` level): the histogram alone does not
        say which round proposed how many tokens; run vLLM with
        ``--per-request-spec-decode-metrics detailed``.
    DataError
        Requests with different ``num_spec_tokens``; no requests.
    """
    reqs = [requests] if isinstance(requests, RequestSpecMetrics) else list(requests)
    src = source or (reqs[0].source if len(reqs) == 1 else "requests")
    if not reqs:
        raise DataError(f"{src}: no requests")
    ns = {r.num_spec_tokens for r in reqs}
    if len(ns) != 1:
        raise DataError(f"{src}: requests with different num_spec_tokens {sorted(ns)}")
    n = ns.pop()
    rounds: dict[int, int] = {}
    acc: dict[int, list[int]] = {}
    for r in reqs:
        if r.num_drafts and not r.detailed:
            raise NotCollectedError(
                f"{r.source}: per-step arrays not collected (summary level); per-draft-length "
                f"acceptance needs vllm serve --per-request-spec-decode-metrics detailed")
        for a_i, d_i in zip(r.per_step_accepted, r.per_step_drafted):
            rounds[d_i] = rounds.get(d_i, 0) + 1
            lst = acc.setdefault(d_i, [0] * d_i)
            for i in range(a_i):
                lst[i] += 1
    return DraftLengthAcceptance(n, dict(sorted(rounds.items())),
                                 {k: tuple(v) for k, v in sorted(acc.items())}, src)
