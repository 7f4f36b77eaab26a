"""The speculative-decoding counts record every vLLM format is read into (layer 1, vLLM formats);
``Acceptance.from_counts(record)`` makes the model of it.

Details: ``docs/modules/specsim.vllm.counts.md``.
"""
from __future__ import annotations

import math
import operator
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsim.errors import DataError, NotCollectedError, SpecsimValueError


class IngestWarning(UserWarning):
    """A vLLM output was read, but a value is only known to within rounding (log lines)."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def as_count(value: Any, what: str) -> int:
    """Convert a counter value (int, integral float such as Prometheus' ``330.0``) to int.

    Raises
    ------
    DataError
        Not a number, not finite, not integral, or negative (``"negative counter"``, naming it:
        vLLM's counters only ever increase from 0, so a negative value is a corrupted file).
    """
    if isinstance(value, bool):
        raise DataError(f"{what}: expected a count, got a boolean {value!r}")
    try:
        i = operator.index(value)
    except TypeError:
        pass
    else:
        if i < 0:
            raise DataError(f"{what}: negative counter ({i}); counts are never negative")
        return i
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{what}: expected a count, got {value!r}") from None
    if math.isfinite(f) and f < 0:
        raise DataError(f"{what}: negative counter ({value!r}); counts are never negative")
    if not math.isfinite(f) or f != int(f):
        raise DataError(f"{what}: expected a non-negative integer count, got {value!r}")
    return int(f)


def decode_steps(num_drafts: int, num_accepted_tokens: int, generated_tokens: int, requests: int) -> float:
    """Decode request-steps of a run: ``max(num_drafts, generated_tokens - requests - num_accepted_tokens)``.

    Each decode step of a request emits one token plus the drafts it accepts, and each request's first
    token comes from its prefill; the final step of a request can accept drafts past ``max_tokens``
    that are then cut (counted as accepted, not generated), which can make the difference fall below
    ``num_drafts`` -- it is then clamped to it (every draft was a step).  Counts in tokens / steps.
    """
    return max(float(num_drafts), float(generated_tokens - requests - num_accepted_tokens))


# --------------------------------------------------------------------------------------------
# SpecDecodeCounts
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecDecodeCounts:
    """Speculative-decoding counters of one run (or one logging interval, or one engine).

    Parameters
    ----------
    num_drafts : int or None
        Drafts = (request, step) pairs that proposed >= 1 token (vLLM ``num_drafts``).  None when
        the source does not report it (the early vLLM V1 log line and ``/metrics`` of 2025-03/04
        had only accepted and draft tokens); MAL and every per-draft quantity then raise
        NotCollectedError (unknown, never zero), while ``acceptance_rate`` still works.
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
        N. Defaults to ``len(accepted_per_pos)``; must be given when ``accepted_per_pos`` is empty,
        unless ``not_collected`` names it (the source does not say N: early V1 lines, log lines
        whose per-position list was cut with ``...``); it is then None.
    num_drafts_range : tuple (int, int), optional
        Inclusive range of ``num_drafts`` values consistent with the source when ``num_drafts``
        was reconstructed from rounded log values (None = exact counter value).
    not_collected : tuple of str, optional
        Fields the source does not report, among ``"num_drafts"`` (added automatically when
        ``num_drafts`` is None) and ``"num_speculative_tokens"``.  Stored sorted.

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
    not_collected: tuple = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        nc = set(self.not_collected)
        unknown = nc - {"num_drafts", "num_speculative_tokens"}
        if unknown:
            raise SpecsimValueError("not_collected", "names fields the source does not report",
                                    sorted(unknown), allowed=("num_drafts", "num_speculative_tokens"))
        if self.num_drafts is None:
            nc.add("num_drafts")
        elif "num_drafts" in nc:
            raise SpecsimValueError("num_drafts", "must be None when not_collected names it", self.num_drafts)
        d = None if self.num_drafts is None else as_count(self.num_drafts, "num_drafts")
        t = as_count(self.num_draft_tokens, "num_draft_tokens")
        a = as_count(self.num_accepted_tokens, "num_accepted_tokens")
        per = tuple(as_count(v, f"accepted_per_pos[{i}]") for i, v in enumerate(self.accepted_per_pos))
        set_(self, "num_drafts", d)
        set_(self, "num_draft_tokens", t)
        set_(self, "num_accepted_tokens", a)
        set_(self, "accepted_per_pos", per)
        if d is None and per:
            raise DataError(f"{self.source or 'counts'}: per-position counts without a number of drafts")
        if d is None and self.num_drafts_range is not None:
            raise SpecsimValueError("num_drafts_range", "needs num_drafts (the estimate)")
        n = self.num_speculative_tokens
        if n is None and "num_speculative_tokens" not in nc:
            if not per:
                raise SpecsimValueError("num_speculative_tokens", "required when accepted_per_pos is empty")
            n = len(per)
        if n is not None and "num_speculative_tokens" in nc:
            raise SpecsimValueError("num_speculative_tokens", "must be None when not_collected names it", n)
        if n is not None:
            n = as_count(n, "num_speculative_tokens")
            if n < 1:
                raise SpecsimValueError("num_speculative_tokens", "must be >= 1", n)
        elif per:
            raise SpecsimValueError("num_speculative_tokens", "is len(accepted_per_pos) when those are given")
        set_(self, "not_collected", tuple(sorted(nc)))
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
        if d is not None and d > t:
            raise DataError(f"{where}: num_drafts = {d} > num_draft_tokens = {t} "
                            f"(every draft proposes >= 1 token)")
        if d is not None and n is not None and t > n * d:
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
        if self.num_drafts is None:
            raise NotCollectedError(f"{self.source or 'counts'}: {what} is unknown: the source does "
                                    f"not report the number of drafts (early vLLM V1 output)")
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

    def drafting(self, generated_tokens: int, requests: int) -> dict:
        """How often the run drafted, from its counters and its totals: the share of decode steps that
        carried a draft (< 1 for drafters whose lookup can miss: ngram, ngram_gpu, suffix; vLLM counts a draft
        only when one was proposed, so ``num_drafts`` alone hides the steps without one) and the
        tokens proposed per drafted step.

        Parameters
        ----------
        generated_tokens : int
            Output tokens of the run (``total_output_tokens`` of ``vllm bench serve``; the
            ``vllm:generation_tokens`` delta), tokens.
        requests : int
            Completed requests (each one's first token comes from its prefill, not a decode step).

        Returns
        -------
        dict
            ``decode_steps`` (request-steps ``S = max(num_drafts, generated - requests - accepted)``:
            each decode step emits one token plus the drafts it accepts; the final step of a request
            can accept drafts past ``max_tokens`` that are then cut, which can make the difference
            fall below ``num_drafts``, then clamped to it), ``drafted_fraction`` (``num_drafts / S``,
            in (0, 1]) and ``mean_proposal_tokens`` (``num_draft_tokens / num_drafts``, tokens) --
            the arguments of ``specsim.predict(drafted_fraction=, mean_proposal_tokens=)``.

        Raises
        ------
        NotCollectedError
            No drafts, or ``num_drafts`` not reported.
        SpecsimValueError
            ``generated_tokens`` or ``requests`` negative or not integers.
        """
        self._need_drafts("the drafted share of steps")
        for name, v in (("generated_tokens", generated_tokens), ("requests", requests)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise SpecsimValueError(name, "must be a non-negative integer count", v)
        d, t = self.num_drafts, self.num_draft_tokens
        steps = decode_steps(d, self.num_accepted_tokens, generated_tokens, requests)
        return {"decode_steps": steps, "drafted_fraction": d / steps, "mean_proposal_tokens": t / d}

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
        if self.not_collected:
            out["not_collected"] = list(self.not_collected)
        if self.num_drafts:
            out.update(mal=self.mal, mean_draft_length=self.mean_draft_length,
                       acceptance_rate=self.acceptance_rate)
        elif self.num_drafts is None and self.num_draft_tokens:
            out["acceptance_rate"] = self.acceptance_rate
        return out

    def check_acceptance_counts(self) -> None:
        """Check that these counts can make an acceptance model (``Acceptance.from_counts(self)`` calls
        this first): per-position counts collected and at least one draft; warns (``IngestWarning``)
        when ``num_drafts`` was reconstructed from rounded log values.

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
                f"values (consistent range {self.num_drafts_range})", IngestWarning, stacklevel=3)

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
        n1, n2 = self.num_speculative_tokens, other.num_speculative_tokens
        if n1 is not None and n2 is not None and n1 != n2:
            raise DataError(
                f"cannot pool counts with different num_speculative_tokens: "
                f"{self.num_speculative_tokens} ({self.source}) vs "
                f"{other.num_speculative_tokens} ({other.source})")
        if self.accepted_per_pos and other.accepted_per_pos:
            per = tuple(x + y for x, y in zip(self.accepted_per_pos, other.accepted_per_pos))
        else:
            per = ()
        srcs = [s for s in (self.source, other.source) if s]
        n = n1 if n1 is not None and n2 is not None else None
        if self.num_drafts is None or other.num_drafts is None:
            d, rng = None, None  # unknown in one part: unknown in the sum
        else:
            lo1, hi1 = self.num_drafts_range or (self.num_drafts, self.num_drafts)
            lo2, hi2 = other.num_drafts_range or (other.num_drafts, other.num_drafts)
            d, rng = self.num_drafts + other.num_drafts, (lo1 + lo2, hi1 + hi2)
        return SpecDecodeCounts(
            num_drafts=d,
            num_draft_tokens=self.num_draft_tokens + other.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens + other.num_accepted_tokens,
            accepted_per_pos=per if n is not None else (),
            source=" + ".join(dict.fromkeys(srcs)),
            num_speculative_tokens=n,
            num_drafts_range=rng,
            not_collected=() if n is not None else ("num_speculative_tokens",),
        )

    def __radd__(self, other):
        if other == 0:  # support sum(list_of_counts)
            return self
        return NotImplemented

    def minus(self, before: "SpecDecodeCounts", where: str) -> "SpecDecodeCounts":
        """These counts minus an earlier scrape of the same server (``where`` names both in errors);
        raises ``DataError`` on a counter reset or a changed ``num_speculative_tokens``."""
        if before.num_speculative_tokens != self.num_speculative_tokens:
            raise DataError(f"{where}: num_speculative_tokens changed between scrapes "
                            f"({before.num_speculative_tokens} -> {self.num_speculative_tokens}); "
                            f"different server?")
        if (before.num_drafts is None) != (self.num_drafts is None):
            raise DataError(f"{where}: num_drafts reported in only one of the two scrapes "
                            f"(different vLLM versions?)")
        pairs = [("num_drafts", before.num_drafts or 0, self.num_drafts or 0),
                 ("num_draft_tokens", before.num_draft_tokens, self.num_draft_tokens),
                 ("num_accepted_tokens", before.num_accepted_tokens, self.num_accepted_tokens)]
        pairs += [(f"accepted_per_pos[{i}]", b, a)
                  for i, (b, a) in enumerate(zip(before.accepted_per_pos, self.accepted_per_pos))]
        for name, b, a in pairs:
            if a < b:
                raise DataError(f"{where}: counter reset: {name} went from {b} to {a} "
                                f"(server restarted between the scrapes?)")
        per = tuple(a - b for _, b, a in pairs[3:])
        return SpecDecodeCounts(None if self.num_drafts is None else self.num_drafts - before.num_drafts,
                                self.num_draft_tokens - before.num_draft_tokens,
                                self.num_accepted_tokens - before.num_accepted_tokens,
                                per, source=where,
                                num_speculative_tokens=self.num_speculative_tokens,
                                not_collected=self.not_collected)
