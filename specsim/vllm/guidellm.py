"""GuideLLM benchmark reports (``guidellm benchmark`` JSON, GuideLLM 0.8.x) against a vLLM server
into per-request and total speculative-decoding counts (layer 1, vLLM formats).

GuideLLM copies vLLM's per-request ``metrics`` object verbatim into each request's
``response_metrics`` (``guidellm/schemas/base/request_stats.py`` ``GenerativeRequestStats.response_metrics``,
"passed through as received"; filled in ``guidellm/backends/openai/request_handlers.py`` from
``response["metrics"]``), so a server run with ``--per-request-spec-decode-metrics`` gives
``benchmarks[i].requests.{successful,errored,incomplete}[j].response_metrics.speculative_decoding``
in the payload of ``specsim.vllm.per_request`` (field definitions there, vLLM 0.32.0).

GuideLLM may keep only a reservoir sample of the requests (``sample_requests``;
``guidellm/benchmark/schemas/accumulator.py``): the report's request lists are then shorter than
``metrics.request_totals`` and the summed counts cover the sample only; listed requests without
the payload are left out too.  :attr:`GuideLLMBenchmark.complete` says whether the counts cover every
request, :meth:`GuideLLMBenchmark.gaps` which are missing and why.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts, as_count
from specsim.vllm.per_request import (
    DraftLengthAcceptance,
    RequestSpecMetrics,
    acceptance_by_draft_length,
    parse_request_spec_metrics,
    sum_request_counts,
)

__all__ = ["GuideLLMBenchmark", "read_guidellm_report"]

_STATUSES = ("successful", "errored", "incomplete")


def _check_statuses(statuses) -> None:
    """Refuse a request status GuideLLM does not report (``SpecsimValueError`` naming ``statuses``)."""
    for s in statuses:
        if s not in _STATUSES:
            raise SpecsimValueError("statuses", "unknown request status", s, _STATUSES)


@dataclass(frozen=True)
class GuideLLMBenchmark:
    """One benchmark (one strategy) of a GuideLLM report.

    Attributes
    ----------
    index : int
        Position in ``benchmarks`` (0-based).
    strategy : str
        ``config.strategy.type_`` (``throughput``, ``concurrent``, ``synchronous``, ...).
    requests : dict str -> tuple of RequestSpecMetrics
        Status (``successful``, ``errored``, ``incomplete``) -> the requests of that status that
        carry speculative metrics, in report order.
    listed : dict str -> int
        Status -> requests listed in the report (with or without speculative metrics).
    totals : dict str -> int
        ``metrics.request_totals`` (requests GuideLLM ran, sampled or not); empty when absent.
    source : str
    output_tokens : dict str -> tuple of (int or None)
        Status -> the output tokens (``output_tokens``) of each request in ``requests``, in the
        same order; None where the report gives none.
    """

    index: int
    strategy: str
    requests: Mapping
    listed: Mapping
    totals: Mapping
    source: str = ""
    output_tokens: Mapping = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when every request GuideLLM counted is listed (no reservoir sampling) and each
        listed request carries speculative metrics."""
        return not self.gaps()

    def gaps(self, statuses: tuple = _STATUSES) -> list[str]:
        """Why the requests with speculative metrics of these statuses are not all the requests
        GuideLLM ran; empty when they are.

        Two causes, each named with its status and counts:

        - reservoir sampling: a status lists fewer requests than ``metrics.request_totals`` counts
          (GuideLLM ``sample_requests``, ``guidellm/benchmark/schemas/accumulator.py``); a status
          listing more than its total is named as such;
        - listed requests without ``response_metrics.speculative_decoding``: vLLM 0.32.0 sends
          it, streaming, on the final usage chunk only (``stream_options.include_usage``) and
          never for ``n > 1`` (``vllm/entrypoints/openai/chat_completion/serving.py``,
          ``build_spec_decoding_metrics`` in ``vllm/entrypoints/generate/base/serving.py``), so a
          request cut off before that chunk (errored, incomplete) has none; GuideLLM copies
          ``response["metrics"]`` as received (``guidellm/backends/openai/request_handlers.py``).

        Parameters
        ----------
        statuses : tuple of str
            Request statuses to check (default all three).

        Returns
        -------
        list of str
            One phrase per cause and status, e.g. ``"successful: the report lists 3 of 8
            requests (request_totals; GuideLLM request sampling)"``.

        Raises
        ------
        SpecsimValueError
            ``statuses``: a status GuideLLM does not report (allowed: successful, errored, incomplete).
        """
        _check_statuses(statuses)
        out = []
        for s in statuses:
            n_listed, n_spec = self.listed.get(s, 0), len(self.requests.get(s, ()))
            if s in self.totals and n_listed < self.totals[s]:
                out.append(f"{s}: the report lists {n_listed} of {self.totals[s]} requests "
                           f"(request_totals; GuideLLM request sampling)")
            elif s in self.totals and n_listed > self.totals[s]:
                out.append(f"{s}: the report lists {n_listed} requests but request_totals.{s} "
                           f"is {self.totals[s]}")
            if n_spec < n_listed:
                out.append(f"{s}: {n_listed - n_spec} of {n_listed} listed requests carry no "
                           f"response_metrics.speculative_decoding")
        return out

    @property
    def status(self) -> str:
        """``"collected"`` or ``"not collected"`` (no request carries speculative metrics)."""
        return "collected" if any(self.requests[s] for s in _STATUSES) else "not collected"

    def all_requests(self, statuses: tuple = _STATUSES) -> list[RequestSpecMetrics]:
        """The requests with speculative metrics of the given statuses, in report order."""
        _check_statuses(statuses)
        return [r for s in statuses for r in self.requests[s]]

    def spec_counts(self, statuses: tuple = _STATUSES) -> SpecDecodeCounts:
        """Summed counts of the requests (equal to the server's ``vllm:spec_decode_*`` deltas over
        these requests).

        Warns
        -----
        IngestWarning
            When some request of these statuses is missing from the counts (unlisted, reservoir
            sampling, or listed without speculative metrics): the message names which, by
            status, from :meth:`gaps`.

        Raises
        ------
        NotCollectedError
            No request of these statuses carries speculative metrics (server without
            ``--per-request-spec-decode-metrics`` or without speculative decoding).
        """
        reqs = self.all_requests(statuses)
        gaps = self.gaps(statuses)
        if reqs and gaps:
            warnings.warn(
                f"{self.source}: the counts cover the {len(reqs)} requests carrying speculative "
                f"metrics only: {'; '.join(gaps)}", IngestWarning, stacklevel=2)
        if not reqs:
            raise NotCollectedError(
                f"{self.source}: no request carries response_metrics.speculative_decoding (vllm "
                f"serve needs --per-request-spec-decode-metrics summary|detailed and speculative "
                f"decoding); acceptance is unknown, not zero")
        return sum_request_counts(reqs, source=self.source)

    def by_draft_length(self, statuses: tuple = _STATUSES) -> DraftLengthAcceptance:
        """Acceptance pooled by proposed draft length (needs the ``detailed`` level), see
        :func:`specsim.vllm.per_request.acceptance_by_draft_length`."""
        reqs = self.all_requests(statuses)
        if not reqs:
            self.spec_counts(statuses)  # raises NotCollectedError
        return acceptance_by_draft_length(reqs, source=self.source)


def read_guidellm_report(path: str | os.PathLike, *, source: str | None = None) -> list[GuideLLMBenchmark]:
    """Read a GuideLLM JSON report (``guidellm benchmark --outputs json``).

    Parameters
    ----------
    path : path-like
    source : str, optional
        Label; each benchmark gets ``"<source>[i]"``.

    Returns
    -------
    list of GuideLLMBenchmark
        One per entry of ``benchmarks``.

    Raises
    ------
    DataError
        Not JSON, no ``benchmarks`` list, a request list that is not a list, or a
        ``speculative_decoding`` payload failing :func:`specsim.vllm.per_request.parse_request_spec_metrics`.
    """
    p = os.fspath(path)
    src = source or os.path.basename(p)
    try:
        with open(p, encoding="utf-8-sig") as fh:  # a leading byte-order mark dropped
            raw = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{src}: not valid JSON (truncated file?): {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("benchmarks"), list):
        raise DataError(f"{src}: no 'benchmarks' list (not a GuideLLM JSON report)")
    out = []
    for bi, b in enumerate(raw["benchmarks"]):
        bsrc = f"{src}[{bi}]"
        if not isinstance(b, dict):
            raise DataError(f"{bsrc}: benchmark entry is not an object")
        strat = ((b.get("config") or {}).get("strategy") or {}).get("type_", "")
        reqs = b.get("requests") or {}
        if not isinstance(reqs, dict):
            raise DataError(f"{bsrc}: 'requests' is not an object")
        per_status, listed, out_toks = {}, {}, {}
        for s in _STATUSES:
            lst = reqs.get(s) or []
            if not isinstance(lst, list):
                raise DataError(f"{bsrc}: requests.{s} is not a list")
            listed[s] = len(lst)
            got, toks = [], []
            for j, r in enumerate(lst):
                rm = r.get("response_metrics") if isinstance(r, dict) else None
                payload = rm.get("speculative_decoding") if isinstance(rm, dict) else None
                if payload is None:
                    continue
                rid = ((r.get("info") or {}).get("request_id")) or r.get("request_id")
                got.append(parse_request_spec_metrics(payload, source=f"{bsrc} {s}[{j}]",
                                                      request_id=rid))
                ot = r.get("output_tokens")
                toks.append(None if ot is None else as_count(ot, f"{bsrc} {s}[{j}]: output_tokens"))
            per_status[s] = tuple(got)
            out_toks[s] = tuple(toks)
        totals = {}
        rt = (b.get("metrics") or {}).get("request_totals")
        if isinstance(rt, dict):
            totals = {s: as_count(rt[s], f"{bsrc}: request_totals.{s}") for s in _STATUSES if s in rt}
        out.append(GuideLLMBenchmark(bi, str(strat), per_status, listed, totals, bsrc, out_toks))
    return out
