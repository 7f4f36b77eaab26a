"""Per-position acceptance of speculative decoding as a survival curve (layer 2, model): estimation from
vLLM's counters, intervals, parametric extrapolation beyond the measured positions.

Details, derivations and sources: ``docs/modules/specsim.acceptance.md``.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from specsim.errors import NotCollectedError, SpecsimValueError

__all__ = ["Acceptance", "FitResult", "FAMILIES", "DEFAULT_FAMILY"]

FAMILIES: tuple[str, ...] = ("constant", "geometric_decay", "logistic")
DEFAULT_FAMILY = "geometric_decay"
RATE_KINDS: tuple[str, ...] = ("conditional", "cumulative")

_TABLE_MIN = 64  # positions precomputed for MAL / cumulative look-ups
_THETA_BOUND = 30.0  # bound on unconstrained fit parameters (expit(30) = 1 - 9.4e-14)
_CLIP = 1e-12  # alpha clipping inside the likelihood
_LOGIT_CLIP = 1e-6  # rate clipping before logit in the least-squares fallback
_SIGMA2_FLOOR = 1e-8  # floor of the residual variance in the least-squares log-likelihood


# ---------------------------------------------------------------------------------------------
# parametric families: natural parameters <-> unconstrained theta, alpha_k and d alpha_k / d theta
# ---------------------------------------------------------------------------------------------
class _Family(ABC):
    """A parametric family of per-position conditional acceptance alpha_k(params)."""

    name: str = ""
    param_names: tuple[str, ...] = ()

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    @abstractmethod
    def alpha(self, k: np.ndarray, params: np.ndarray) -> np.ndarray:
        """Conditional acceptance at positions ``k`` (1-based) for natural ``params``."""

    @abstractmethod
    def to_theta(self, params: np.ndarray) -> np.ndarray:
        """Natural parameters -> unconstrained theta."""

    @abstractmethod
    def from_theta(self, theta: np.ndarray) -> np.ndarray:
        """Unconstrained theta -> natural parameters."""

    @abstractmethod
    def dalpha(self, k: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Jacobian d alpha_k / d theta, shape (len(k), n_params)."""

    @abstractmethod
    def inits(self, k: np.ndarray, rates: np.ndarray, weights: np.ndarray) -> list[np.ndarray]:
        """Starting points (theta) for the likelihood optimiser."""


def _logit_clipped(p: np.ndarray | float, eps: float = _LOGIT_CLIP) -> np.ndarray:
    return special.logit(np.clip(p, eps, 1.0 - eps))


def _theta_clip(theta: np.ndarray) -> np.ndarray:
    return np.clip(theta, -_THETA_BOUND, _THETA_BOUND)


def _wlinfit(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least-squares line y = c + s x; slope 0 with a single point."""
    if len(x) < 2 or np.ptp(x) == 0:
        return float(np.average(y, weights=w)), 0.0
    s, c = np.polyfit(x, y, 1, w=np.sqrt(w))
    return float(c), float(s)


class _Constant(_Family):
    name = "constant"
    param_names = ("alpha",)

    def alpha(self, k, params):
        return np.full(np.shape(k), float(params[0]))

    def to_theta(self, params):
        return _theta_clip(special.logit(np.asarray(params, float)))

    def from_theta(self, theta):
        return special.expit(np.asarray(theta, float))

    def dalpha(self, k, theta):
        a = special.expit(theta[0])
        return np.full((len(k), 1), a * (1.0 - a))

    def inits(self, k, rates, weights):
        return [np.array([np.clip(np.average(rates, weights=weights), 1e-3, 1 - 1e-3)])]


class _GeometricDecay(_Family):
    name = "geometric_decay"
    param_names = ("a", "r")

    def alpha(self, k, params):
        a, r = float(params[0]), float(params[1])
        return a * np.power(r, np.asarray(k, float) - 1.0)

    def to_theta(self, params):
        return _theta_clip(special.logit(np.asarray(params, float)))

    def from_theta(self, theta):
        return special.expit(np.asarray(theta, float))

    def dalpha(self, k, theta):
        a, r = special.expit(theta[0]), special.expit(theta[1])
        km1 = np.asarray(k, float) - 1.0
        al = a * np.power(r, km1)
        return np.column_stack([al * (1.0 - a), al * km1 * (1.0 - r)])

    def inits(self, k, rates, weights):
        c, s = _wlinfit(k - 1.0, np.log(np.clip(rates, 1e-3, 1.0)), weights)
        a0 = float(np.clip(np.exp(c), 1e-3, 1 - 1e-3))
        r0 = float(np.clip(np.exp(s), 1e-3, 1 - 1e-4))
        pooled = float(np.clip(np.average(rates, weights=weights), 1e-3, 1 - 1e-3))
        return [np.array([a0, r0]), np.array([pooled, 1 - 1e-3])]


class _Logistic(_Family):
    name = "logistic"
    param_names = ("b0", "b1")

    def alpha(self, k, params):
        return special.expit(float(params[0]) + float(params[1]) * (np.asarray(k, float) - 1.0))

    def to_theta(self, params):
        return _theta_clip(np.asarray(params, float))

    def from_theta(self, theta):
        return np.asarray(theta, float).copy()

    def dalpha(self, k, theta):
        km1 = np.asarray(k, float) - 1.0
        al = special.expit(theta[0] + theta[1] * km1)
        g = al * (1.0 - al)
        return np.column_stack([g, g * km1])

    def inits(self, k, rates, weights):
        c, s = _wlinfit(k - 1.0, _logit_clipped(rates, 1e-3), weights)
        return [np.array([c, s]), np.array([float(_logit_clipped(np.average(rates, weights=weights), 1e-3)), 0.0])]


_FAMILY_OBJ: dict[str, _Family] = {f.name: f for f in (_Constant(), _GeometricDecay(), _Logistic())}


def _family(name: Any, field_name: str = "family") -> _Family:
    if not isinstance(name, str) or name not in _FAMILY_OBJ:
        raise SpecsimValueError(field_name, "unknown parametric family", name, FAMILIES)
    return _FAMILY_OBJ[name]


@dataclass(frozen=True)
class FitResult:
    """Outcome of a parametric fit of per-position acceptance.

    Attributes
    ----------
    family : str
        ``"constant"``, ``"geometric_decay"`` or ``"logistic"``.
    params : dict[str, float]
        Natural parameters (``alpha``; ``a``, ``r``; ``b0``, ``b1``).
    log_likelihood : float
        Maximised log-likelihood.  ``method == "mle"``: the survival (per-round) likelihood
        sum_k e_k log alpha_k + (n_k - e_k) log(1 - alpha_k) (no binomial coefficients).
        ``method == "logit_least_squares"``: Gaussian profile likelihood of the logit residuals,
        -K/2 (log(2 pi sigma^2) + 1), sigma^2 = RSS/K floored at 1e-8.
    aic : float
        Akaike information criterion 2 p - 2 log_likelihood (p includes sigma for least squares);
        NaN when the least-squares fit has no residual degree of freedom (K <= number of params).
    n_params : int
        Number of acceptance parameters of the family.
    n_positions : int
        Number of measured positions the fit used.
    method : str
        ``"mle"`` (from counts) or ``"logit_least_squares"`` (rates only, positions weighted equally).
    converged : bool
        The optimiser's success flag.
    """

    family: str
    params: dict[str, float]
    log_likelihood: float
    aic: float
    n_params: int
    n_positions: int
    method: str
    converged: bool


# ---------------------------------------------------------------------------------------------
# measured data container (internal)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Data:
    conditional: np.ndarray  # (K,) alpha_k, positions 1..K
    at_risk: np.ndarray | None = None  # (K,) rounds that reached position k (may be pseudo-counts)
    events: np.ndarray | None = None  # (K,) rounds with A >= k
    ns: tuple[int, ...] = field(default=())  # N of the pooled runs (empty when unknown)

    @property
    def k(self) -> np.ndarray:
        return np.arange(1, len(self.conditional) + 1, dtype=float)

    @property
    def has_counts(self) -> bool:
        return self.at_risk is not None


def _fit_data(fam: _Family, data: _Data) -> tuple[np.ndarray, np.ndarray | None, FitResult]:
    """Fit one family to measured data.  Returns (natural params, theta covariance or None, result)."""
    k = data.k
    K = len(k)
    p = fam.n_params
    bounds = [(-_THETA_BOUND, _THETA_BOUND)] * p
    if data.has_counts:
        n = np.asarray(data.at_risk, float)
        e = np.asarray(data.events, float)
        total = float(n.sum())

        def negll(theta):
            al = np.clip(fam.alpha(k, fam.from_theta(theta)), _CLIP, 1 - _CLIP)
            ll = special.xlogy(e, al).sum() + special.xlogy(n - e, 1 - al).sum()
            score = (e / al - (n - e) / (1 - al)) @ fam.dalpha(k, theta)
            return -ll / total, -score / total

        best = None
        for start in fam.inits(k, data.conditional, n):
            res = optimize.minimize(negll, fam.to_theta(start), jac=True, method="L-BFGS-B", bounds=bounds)
            if np.all(np.isfinite(res.x)) and (best is None or res.fun < best.fun):
                best = res
        theta = best.x
        params = fam.from_theta(theta)
        al = np.clip(fam.alpha(k, params), _CLIP, 1 - _CLIP)
        ll = float(special.xlogy(e, al).sum() + special.xlogy(n - e, 1 - al).sum())
        J = fam.dalpha(k, theta)
        info = J.T @ ((n / (al * (1 - al)))[:, None] * J)  # expected Fisher information in theta
        cov = np.linalg.pinv(info, hermitian=True)
        aic = 2 * p - 2 * ll
        method = "mle"
        converged = bool(best.success)
    else:
        y = _logit_clipped(data.conditional)

        def resid(theta):
            return _logit_clipped(fam.alpha(k, fam.from_theta(theta))) - y

        best = None
        for start in fam.inits(k, data.conditional, np.ones(K)):
            res = optimize.least_squares(resid, fam.to_theta(start), bounds=(-_THETA_BOUND, _THETA_BOUND))
            if best is None or res.cost < best.cost:
                best = res
        theta = best.x
        params = fam.from_theta(theta)
        rss = float(np.sum(best.fun**2))
        sigma2 = max(rss / K, _SIGMA2_FLOOR)
        ll = float(-0.5 * K * (math.log(2 * math.pi * sigma2) + 1.0))
        aic = 2 * (p + 1) - 2 * ll if K > p else float("nan")
        cov = None
        method = "logit_least_squares"
        converged = bool(best.success)
    result = FitResult(
        family=fam.name,
        params={nm: float(v) for nm, v in zip(fam.param_names, params)},
        log_likelihood=ll,
        aic=float(aic),
        n_params=p,
        n_positions=K,
        method=method,
        converged=converged,
    )
    return params, cov, result


# ---------------------------------------------------------------------------------------------
# input validation helpers
# ---------------------------------------------------------------------------------------------
#: The highest sampling temperature vLLM accepts: ``SamplingParams`` refuses a temperature outside
#: [0, 2] ("temperature must be in [0, 2]", ``vllm/sampling_params.py``, vLLM 0.32).
VLLM_MAX_TEMPERATURE = 2.0
TEMPERATURE_RULE = f"must be a finite number in [0, {VLLM_MAX_TEMPERATURE:g}] (0 = greedy; vLLM's SamplingParams " \
                   f"refuses temperatures above {VLLM_MAX_TEMPERATURE:g})"


def temperature_ok(t: Any) -> bool:
    """Whether ``t`` is a sampling temperature vLLM accepts.

    Parameters
    ----------
    t : Any
        The value given (dimensionless; 0 = greedy).

    Returns
    -------
    bool
        True for a finite number (not a bool) in [0, :data:`VLLM_MAX_TEMPERATURE`]; the bound is
        vLLM 0.32's ``SamplingParams`` check (``vllm/sampling_params.py``).
    """
    return (not isinstance(t, bool) and isinstance(t, (int, float, np.integer, np.floating))
            and math.isfinite(float(t)) and 0.0 <= float(t) <= VLLM_MAX_TEMPERATURE)


def _check_temperature(t: Any) -> float | None:
    if t is None:
        return None
    if not temperature_ok(t):
        raise SpecsimValueError("temperature", TEMPERATURE_RULE + ", or None", t)
    return float(t)


def _check_label(label: Any) -> str | None:
    if label is not None and not isinstance(label, str):
        raise SpecsimValueError("label", "must be a string or None", label)
    return label


def _check_level(level: Any) -> float:
    try:
        lv = float(level)
    except (TypeError, ValueError):
        raise SpecsimValueError("level", "must be a number in (0, 1)", level) from None
    if not (0.0 < lv < 1.0):
        raise SpecsimValueError("level", "must lie in (0, 1)", level)
    return lv


def _positions(n: Any, field_name: str = "n", scalar: bool = False) -> np.ndarray:
    """Validate num_speculative_tokens value(s): integers >= 1.  Returns an int64 array."""
    if isinstance(n, (bool, np.bool_)):
        raise SpecsimValueError(field_name, "must be an integer >= 1 (num_speculative_tokens)", n)
    arr = np.asarray(n)
    if scalar and arr.ndim != 0:
        raise SpecsimValueError(field_name, "must be a single integer >= 1 (num_speculative_tokens)", n)
    if arr.dtype.kind in "iu":
        out = arr.astype(np.int64, copy=False)
    elif arr.dtype.kind == "f":
        if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr))):
            raise SpecsimValueError(field_name, "must be an integer (num_speculative_tokens)", n)
        out = arr.astype(np.int64)
    else:
        raise SpecsimValueError(field_name, "must be an integer >= 1 (num_speculative_tokens)", n)
    if out.size and out.min() < 1:
        raise SpecsimValueError(field_name, "must be >= 1 (num_speculative_tokens)", n)
    return out


def _count_vector(values: Any, field_name: str) -> np.ndarray:
    if isinstance(values, (str, bytes)):
        raise SpecsimValueError(field_name, "must be a sequence of counts", values)
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise SpecsimValueError(field_name, "must be a sequence of numbers", values) from None
    if arr.ndim != 1 or arr.size == 0:
        raise SpecsimValueError(field_name, "must be a non-empty 1-D sequence (one count per position)", values)
    for i, v in enumerate(arr):
        _check_count(v, f"{field_name}[{i}]")
    return arr


def _check_count(v: float, field_name: str) -> None:
    """A vLLM counter value: a finite, whole, non-negative number of rounds."""
    if math.isnan(v):
        raise SpecsimValueError(field_name, "must not be NaN", v)
    if not math.isfinite(v) or v != math.floor(v):
        raise SpecsimValueError(field_name, "must be a whole number of rounds", v)
    if v < 0:
        raise SpecsimValueError(field_name, "must not be negative", v)


def _num_drafts(value: Any, field_name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SpecsimValueError(field_name, "must be a whole number of rounds", value)
    v = float(value)
    _check_count(v, field_name)
    if v == 0:
        raise SpecsimValueError(field_name, "no drafts: acceptance not collected", value)
    return v


def _rate_vector(rates: Any, field_name: str = "rates") -> np.ndarray:
    if isinstance(rates, str):
        parts = [s for s in rates.replace(",", ";").split(";") if s.strip()]
        try:
            arr = np.array([float(s) for s in parts])
        except ValueError:
            raise SpecsimValueError(field_name, "must be numbers separated by ';'", rates) from None
    else:
        try:
            arr = np.asarray(rates, dtype=float)
        except (TypeError, ValueError):
            raise SpecsimValueError(field_name, "must be a sequence of numbers", rates) from None
    if arr.ndim != 1 or arr.size == 0:
        raise SpecsimValueError(field_name, "must be a non-empty 1-D sequence (one rate per position)", rates)
    for i, v in enumerate(arr):
        if math.isnan(v):
            raise SpecsimValueError(f"{field_name}[{i}]", "must not be NaN", v)
        if not (0.0 <= v <= 1.0):
            raise SpecsimValueError(f"{field_name}[{i}]", "must lie in [0, 1]", v)
    return arr


def _reachable(cumulative: np.ndarray) -> int:
    """Number of leading positions k whose predecessor survival p_{k-1} > 0 (p_0 = 1)."""
    prev = np.concatenate([[1.0], cumulative[:-1]])
    zero = np.flatnonzero(prev <= 0)
    return int(zero[0]) if zero.size else len(cumulative)


# ---------------------------------------------------------------------------------------------
# Acceptance
# ---------------------------------------------------------------------------------------------
class Acceptance:
    """Per-position acceptance of a (target, drafter, dataset, temperature) combination.

    Immutable.  Build it with one of the class methods (``from_counts``, ``from_runs``,
    ``from_rates``, ``constant``, ``from_mal``) or ``fit``; never call the constructor directly.
    Positions are 1-based: position k is the k-th drafted token of a round.

    Two kinds exist: *nonparametric* (measured per-position rates, extrapolated beyond the last
    measured position by a parametric fit) and *parametric* (a family with parameters, e.g. from
    ``fit``, ``constant``, ``from_mal``).  See the module docstring for the estimators and sources.

    Attributes
    ----------
    n_measured : int
        Positions measured (1..n_measured; 0 for parametric objects).  A position counts as measured
        when at least one round reached it; positions never reached (cumulative rate already 0)
        are not measured.
    temperature : float or None
        Sampling temperature the profile was measured at (None = unknown).
    label : str or None
        Free-text provenance (e.g. ``"gemma-4-26B dflash GSM8K, vllm-amd-specdec-post"``).
    assumptions : tuple[str, ...]
        Every modelling assumption this profile carries, in words.
    """

    __slots__ = ("_data", "_family", "_params", "_theta", "_cov", "_n_support", "_temperature",
                 "_label", "_assumptions", "_fit_result", "_extrap_family", "_cache")

    def __init__(self, *_: Any, **__: Any):
        raise TypeError("use Acceptance.from_counts / from_runs / from_rates / constant / from_mal")

    # ---- internal construction --------------------------------------------------------------
    @classmethod
    def _make(cls, *, data: _Data | None = None, family: str | None = None, params=None, cov=None,
              n_support: int = 0, temperature=None, label=None, assumptions: Iterable[str] = (),
              fit_result: FitResult | None = None, extrap_family: str = DEFAULT_FAMILY) -> "Acceptance":
        obj = object.__new__(cls)
        sa = object.__setattr__
        if data is not None:
            for arr in (data.conditional, data.at_risk, data.events):
                if arr is not None:
                    arr.flags.writeable = False
        sa(obj, "_data", data)
        sa(obj, "_family", family)
        if family is not None:
            fam = _FAMILY_OBJ[family]
            params = np.asarray(params, float)
            params.flags.writeable = False
            sa(obj, "_params", params)
            sa(obj, "_theta", fam.to_theta(params))
        else:
            sa(obj, "_params", None)
            sa(obj, "_theta", None)
        sa(obj, "_cov", None if cov is None else np.asarray(cov, float))
        sa(obj, "_n_support", int(n_support))
        sa(obj, "_temperature", temperature)
        sa(obj, "_label", label)
        sa(obj, "_assumptions", tuple(assumptions))
        sa(obj, "_fit_result", fit_result)
        sa(obj, "_extrap_family", extrap_family)
        sa(obj, "_cache", {})
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Acceptance is immutable; use with_temperature / fit / with_extrapolation")

    def __reduce__(self):
        # pickling / copy go through the JSON description (the instance is immutable)
        return (Acceptance.from_dict, (self.to_dict(),))

    def _replace(self, **changes: Any) -> "Acceptance":
        kw = dict(data=self._data, family=self._family, params=self._params, cov=self._cov,
                  n_support=self._n_support, temperature=self._temperature, label=self._label,
                  assumptions=self._assumptions, fit_result=self._fit_result,
                  extrap_family=self._extrap_family)
        kw.update(changes)
        return Acceptance._make(**kw)

    # ---- constructors -----------------------------------------------------------------------
    @classmethod
    def from_counts(cls, num_drafts, accepted_per_pos: Sequence[int] | None = None, *,
                    temperature: float | None = None, label: str | None = None) -> "Acceptance":
        """Acceptance of one run from vLLM's spec-decode counters.

        Parameters
        ----------
        num_drafts : int or counts record
            ``vllm:spec_decode_num_drafts`` — verification rounds with at least one draft token.
            Or a counts record as every reader in :mod:`specsim.vllm` returns
            (``specsim.vllm.counts.SpecDecodeCounts``: ``num_drafts``, ``accepted_per_pos``,
            ``source``); its own checks run first (``check_acceptance_counts``: per-position counts
            collected, drafts > 0) and ``label`` defaults to its ``source``.  Then omit
            ``accepted_per_pos``.
        accepted_per_pos : sequence of int, shape (N,)
            ``vllm:spec_decode_num_accepted_tokens_per_pos`` — element i = rounds with >= i+1
            accepted tokens (so element i / num_drafts is the CUMULATIVE rate of position i+1).
            N = num_speculative_tokens of the run.
        temperature : float, optional
            Sampling temperature of the run (None = unknown).
        label : str, optional
            Provenance text.

        Returns
        -------
        Acceptance
            Nonparametric; alpha_k = accepted[k-1] / accepted[k-2] (Kaplan-Meier, no censoring
            below N), with Clopper-Pearson / Greenwood intervals.

        Raises
        ------
        SpecsimValueError
            ``num_drafts`` 0 ("no drafts: acceptance not collected"), negative, NaN or not whole;
            ``accepted_per_pos[i]`` negative, NaN, not whole, above num_drafts, or above
            ``accepted_per_pos[i-1]``.
        """
        if accepted_per_pos is None and hasattr(num_drafts, "accepted_per_pos"):
            record = num_drafts
            check = getattr(record, "check_acceptance_counts", None)
            if callable(check):
                check()
            num_drafts, accepted_per_pos = record.num_drafts, list(record.accepted_per_pos)
            label = label or getattr(record, "source", None)
        elif accepted_per_pos is None:
            raise SpecsimValueError("accepted_per_pos", "is required with a number of drafts "
                                    "(or pass one counts record from specsim.vllm)")
        return cls._from_runs_impl([(num_drafts, accepted_per_pos)], temperature, label, single=True)

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[int, Sequence[int]]], *, temperature: float | None = None,
                  label: str | None = None) -> "Acceptance":
        """Pool several runs (possibly at different N) as one discrete-time survival problem.

        At position k the at-risk count is the sum, over runs with N_r >= k, of the rounds that
        reached k (``num_drafts`` for k = 1, ``accepted_per_pos[k-2]`` otherwise); the events are
        the rounds that accepted k (``accepted_per_pos[k-1]``).  Rounds of a run with N_r < k are
        right-censored and contribute nothing at k.  alpha_k = events / at-risk (Kaplan & Meier
        1958 product-limit estimator of the hazard complement).

        Parameters
        ----------
        runs : iterable of (num_drafts, accepted_per_pos)
            One pair per run, as in ``from_counts``.
        temperature, label
            As in ``from_counts``.

        Returns
        -------
        Acceptance
            Nonparametric.  When the runs have different N, ``assumptions`` records that
            per-position acceptance is assumed not to depend on N.

        Raises
        ------
        SpecsimValueError
            ``runs`` empty or not pairs; per-run errors as in ``from_counts`` with fields
            ``runs[r].num_drafts`` / ``runs[r].accepted_per_pos[i]``.
        """
        return cls._from_runs_impl(runs, temperature, label, single=False)

    @classmethod
    def _from_runs_impl(cls, runs, temperature, label, single: bool) -> "Acceptance":
        temperature = _check_temperature(temperature)
        label = _check_label(label)
        if isinstance(runs, (str, bytes)) or not isinstance(runs, Iterable):
            raise SpecsimValueError("runs", "must be an iterable of (num_drafts, accepted_per_pos) pairs", runs)
        runs = list(runs)
        if not runs:
            raise SpecsimValueError("runs", "must contain at least one run")
        parsed = []
        for r, run in enumerate(runs):
            pre = "" if single else f"runs[{r}]."
            if isinstance(run, Mapping):
                run = (run.get("num_drafts"), run.get("accepted_per_pos"))
            try:
                nd_raw, acc_raw = run
            except (TypeError, ValueError):
                raise SpecsimValueError(f"runs[{r}]", "must be a (num_drafts, accepted_per_pos) pair", run) from None
            nd = _num_drafts(nd_raw, f"{pre}num_drafts")
            acc = _count_vector(acc_raw, f"{pre}accepted_per_pos")
            if acc[0] > nd:
                raise SpecsimValueError(f"{pre}accepted_per_pos[0]", "accepted must not exceed num_drafts",
                                        f"{acc[0]:g} > {nd:g}")
            for i in range(1, len(acc)):
                if acc[i] > acc[i - 1]:
                    raise SpecsimValueError(
                        f"{pre}accepted_per_pos[{i}]",
                        "position k+1 must not exceed position k (rounds accepting k+1 also accept k)",
                        f"{acc[i]:g} > accepted_per_pos[{i - 1}] = {acc[i - 1]:g}")
            parsed.append((nd, acc))
        nmax = max(len(a) for _, a in parsed)
        at_risk = np.zeros(nmax)
        events = np.zeros(nmax)
        for nd, acc in parsed:
            m = len(acc)
            at_risk[:m] += np.concatenate([[nd], acc[:-1]])
            events[:m] += acc
        K = int(np.count_nonzero(at_risk > 0))  # at-risk is non-increasing in k
        at_risk, events = at_risk[:K], events[:K]
        ns = tuple(sorted({len(a) for _, a in parsed}))
        assumptions = []
        if len(ns) > 1:
            assumptions.append(
                f"runs at num_speculative_tokens {list(ns)} pooled as discrete-time survival (Kaplan-Meier): "
                "assumes per-position conditional acceptance does not depend on N")
        if K < nmax:
            assumptions.append(f"positions {K + 1}..{nmax} never reached (cumulative rate 0): not measured")
        data = _Data(conditional=events / at_risk, at_risk=at_risk, events=events, ns=ns)
        return cls._make(data=data, temperature=temperature, label=label, assumptions=assumptions)

    @classmethod
    def from_rates(cls, rates: Sequence[float] | str, kind: str = "cumulative", *,
                   temperature: float | None = None, num_drafts: int | None = None,
                   label: str | None = None) -> "Acceptance":
        """Acceptance from per-position rates.

        Parameters
        ----------
        rates : sequence of float, shape (N,), or str
            Per-position acceptance rates in [0, 1], position 1 first (a string of numbers
            separated by ';' is accepted, as in the published tables).
        kind : {"cumulative", "conditional"}, default "cumulative"
            ``"cumulative"`` (the default, vLLM's convention): p_k = P(A >= k), as vLLM reports
            per-position rates (``accepted_per_pos / num_drafts``, the ``SpecDecoding metrics``
            log line's "Per-position acceptance rate", ``vllm bench``'s
            ``spec_decode_per_position_acceptance_rates``) and as the published per-position AR
            tables give them.  ``"conditional"``: alpha_k = P(A >= k | A >= k-1); say so
            explicitly.  Example: vLLM's rates ``[0.8, 0.6, 0.45, 0.3]`` are cumulative, MAL(4) =
            1 + 0.8 + 0.6 + 0.45 + 0.3 = 3.15; read as conditional they would give
            1 + 0.8 + 0.48 + 0.216 + 0.0648 = 2.5608.
        temperature, label
            As in ``from_counts``.
        num_drafts : int, optional
            Rounds behind the rates.  When given, counts are reconstructed as num_drafts x rates
            (pseudo-counts, a single run at N = len(rates), no censoring), which enables intervals
            and maximum-likelihood fits; recorded in ``assumptions``.

        Returns
        -------
        Acceptance
            Nonparametric.  Without ``num_drafts`` it has no intervals and fits use least squares on
            logit rates.

        Raises
        ------
        SpecsimValueError
            ``rates[i]`` NaN or outside [0, 1]; cumulative rates increasing with position;
            ``kind`` unknown; ``num_drafts`` invalid.
        """
        temperature = _check_temperature(temperature)
        label = _check_label(label)
        if not isinstance(kind, str) or kind not in RATE_KINDS:
            raise SpecsimValueError("kind", "unknown kind of rate", kind, RATE_KINDS)
        arr = _rate_vector(rates)
        if kind == "cumulative":
            for i in range(1, len(arr)):
                if arr[i] > arr[i - 1]:
                    raise SpecsimValueError(
                        f"rates[{i}]", "cumulative rates must not increase with position (per-position "
                        "CONDITIONAL rates, P(position i accepted | i-1 accepted), may: pass kind='conditional', "
                        "CLI --conditional)",
                        f"{arr[i]:g} > rates[{i - 1}] = {arr[i - 1]:g}")
            cum = arr
        else:
            cum = np.cumprod(arr)
        K = _reachable(cum)
        assumptions = []
        if K < len(arr):
            assumptions.append(f"positions {K + 1}..{len(arr)} unreachable (cumulative rate 0): not measured")
        prev = np.concatenate([[1.0], cum[: K - 1]])
        cond = arr[:K].copy() if kind == "conditional" else cum[:K] / prev
        at_risk = events = None
        if num_drafts is not None:
            nd = _num_drafts(num_drafts, "num_drafts")
            at_risk, events = nd * prev, nd * cum[:K]
            assumptions.append(
                f"counts reconstructed as num_drafts ({nd:g}) x rates: a single run at N = {len(arr)}, no censoring")
        data = _Data(conditional=cond, at_risk=at_risk, events=events,
                     ns=(len(arr),) if num_drafts is not None else ())
        return cls._make(data=data, temperature=temperature, label=label, assumptions=assumptions)

    @classmethod
    def constant(cls, alpha: float, *, temperature: float | None = None, label: str | None = None) -> "Acceptance":
        """Constant conditional acceptance alpha at every position (i.i.d. positions).

        MAL(N) = (1 - alpha^(N+1)) / (1 - alpha) (Leviathan et al. 2023, eq. 1).

        Raises
        ------
        SpecsimValueError
            ``alpha`` NaN or outside [0, 1].
        """
        temperature = _check_temperature(temperature)
        label = _check_label(label)
        if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.integer, np.floating)):
            raise SpecsimValueError("alpha", "must be a number in [0, 1]", alpha)
        a = float(alpha)
        if math.isnan(a):
            raise SpecsimValueError("alpha", "must not be NaN", alpha)
        if not (0.0 <= a <= 1.0):
            raise SpecsimValueError("alpha", "must lie in [0, 1]", alpha)
        return cls._make(family="constant", params=[a], n_support=0, temperature=temperature, label=label,
                         assumptions=(f"constant conditional acceptance alpha={a:.6g} at every position (i.i.d.)",))

    @classmethod
    def from_mal(cls, mal: float, n: int, *, temperature: float | None = None,
                 label: str | None = None) -> "Acceptance":
        """Constant acceptance implied by a measured MAL at num_speculative_tokens = n.

        Solves (1 - alpha^(n+1)) / (1 - alpha) = mal (Leviathan et al. 2023, eq. 1; written as
        sum_{k=0..n} alpha^k so that alpha = 1 is regular) with ``scipy.optimize.brentq``.

        Parameters
        ----------
        mal : float
            Mean acceptance length in tokens per round (counts the bonus token), 1 <= mal <= n + 1.
        n : int
            num_speculative_tokens at which ``mal`` was measured, >= 1.

        Returns
        -------
        Acceptance
            Parametric ``constant``; ``assumptions`` records the implied alpha and the i.i.d.
            assumption; positions 1..n are "fitted", later ones "extrapolated".

        Raises
        ------
        SpecsimValueError
            ``n`` not an integer >= 1; ``mal`` NaN or outside [1, n + 1].
        """
        temperature = _check_temperature(temperature)
        label = _check_label(label)
        nn = int(_positions(n, "n", scalar=True))
        try:
            m = float(mal)
        except (TypeError, ValueError):
            raise SpecsimValueError("mal", "must be a number", mal) from None
        if math.isnan(m):
            raise SpecsimValueError("mal", "must not be NaN", mal)
        if not (1.0 <= m <= nn + 1):
            raise SpecsimValueError("mal", f"must lie in [1, n + 1] = [1, {nn + 1}] (MAL counts the bonus token)", mal)
        if m == 1.0:
            a = 0.0
        elif m == nn + 1:
            a = 1.0
        else:
            powers = np.arange(nn + 1)
            a = optimize.brentq(lambda x: float(np.sum(x**powers)) - m, 0.0, 1.0, xtol=1e-14, rtol=1e-14)
        note = (f"constant conditional acceptance alpha={a:.6g} implied by MAL={m:g} at N={nn} "
                "(Leviathan et al. 2023 i.i.d. acceptance assumption)")
        return cls._make(family="constant", params=[a], n_support=nn, temperature=temperature, label=label,
                         assumptions=(note,))

    # ---- simple properties ------------------------------------------------------------------
    @property
    def is_parametric(self) -> bool:
        """True for a parametric family (``fit``, ``constant``, ``from_mal``)."""
        return self._family is not None

    @property
    def kind(self) -> str:
        """``"nonparametric"`` or ``"parametric"``."""
        return "parametric" if self.is_parametric else "nonparametric"

    @property
    def family(self) -> str | None:
        """Parametric family name, None for nonparametric objects."""
        return self._family

    @property
    def params(self) -> dict[str, float]:
        """Natural parameters of a parametric object ({} for nonparametric)."""
        if self._family is None:
            return {}
        return {nm: float(v) for nm, v in zip(_FAMILY_OBJ[self._family].param_names, self._params)}

    @property
    def fit_result(self) -> FitResult | None:
        """The ``FitResult`` of a fitted object (None otherwise)."""
        return self._fit_result

    @property
    def n_measured(self) -> int:
        """Measured positions (0 for parametric objects)."""
        return 0 if self.is_parametric else len(self._data.conditional)

    @property
    def n_support(self) -> int:
        """Positions backed by data: measured (nonparametric) or fitted-on (parametric)."""
        return self.n_measured if not self.is_parametric else self._n_support

    @property
    def has_counts(self) -> bool:
        """True when counts (real or reconstructed) back the profile, so intervals exist."""
        return self._data is not None and self._data.has_counts

    @property
    def at_risk(self) -> np.ndarray | None:
        """Rounds that reached each measured position, shape (K,), or None without counts."""
        d = self._data
        return None if d is None or d.at_risk is None else d.at_risk.copy()

    @property
    def accepted(self) -> np.ndarray | None:
        """Rounds accepting each measured position (events), shape (K,), or None without counts."""
        d = self._data
        return None if d is None or d.events is None else d.events.copy()

    @property
    def temperature(self) -> float | None:
        """Sampling temperature of the measurement (None = unknown)."""
        return self._temperature

    @property
    def label(self) -> str | None:
        """Provenance text."""
        return self._label

    @property
    def assumptions(self) -> tuple[str, ...]:
        """Modelling assumptions carried by this profile."""
        return self._assumptions

    @property
    def extrapolation_family(self) -> str:
        """Family used beyond the measured positions (nonparametric objects)."""
        return self._extrap_family

    # ---- derived copies ---------------------------------------------------------------------
    def with_temperature(self, t: float | None, assumption: str) -> "Acceptance":
        """Copy carrying temperature ``t`` and the stated assumption (e.g. why a profile measured
        at another temperature is reused).

        Raises
        ------
        SpecsimValueError
            ``t`` negative / non-finite; ``assumption`` not a non-empty string.
        """
        t = _check_temperature(t)
        if not isinstance(assumption, str) or not assumption.strip():
            raise SpecsimValueError("assumption", "must be a non-empty string saying why the temperature applies",
                                    assumption)
        return self._replace(temperature=t, assumptions=self._assumptions + (assumption.strip(),))

    def with_extrapolation(self, family: str) -> "Acceptance":
        """Copy of a nonparametric profile that extrapolates with ``family`` (or ``"best"`` by AIC)."""
        if family != "best":
            _family(family)
        if self.is_parametric:
            raise SpecsimValueError("family", "extrapolation applies to nonparametric profiles only", family)
        return self._replace(extrap_family=family)

    # ---- fitting ----------------------------------------------------------------------------
    def _fit_cached(self, family: str) -> tuple[np.ndarray, np.ndarray | None, FitResult]:
        key = ("fit", family)
        if key not in self._cache:
            self._cache[key] = _fit_data(_FAMILY_OBJ[family], self._data)
        return self._cache[key]

    def compare_fits(self) -> pd.DataFrame:
        """Fit every family and tabulate them for model choice.

        Returns
        -------
        pandas.DataFrame
            Columns ``family, n_params, log_likelihood, aic, method, converged, params,
            identifiable`` (one row per family; non-identifiable families, with fewer measured
            positions than needed, have NaN statistics).

        Raises
        ------
        NotCollectedError
            No per-position data (``constant`` / ``from_mal`` objects).
        """
        self._require_data()
        K = len(self._data.conditional)
        rows = []
        for name in FAMILIES:
            fam = _FAMILY_OBJ[name]
            if K >= fam.n_params:
                _, _, res = self._fit_cached(name)
                rows.append(dict(family=name, n_params=res.n_params, log_likelihood=res.log_likelihood,
                                 aic=res.aic, method=res.method, converged=res.converged, params=res.params,
                                 identifiable=True))
            else:
                rows.append(dict(family=name, n_params=fam.n_params, log_likelihood=float("nan"),
                                 aic=float("nan"), method="mle" if self._data.has_counts else "logit_least_squares",
                                 converged=False, params={}, identifiable=False))
        return pd.DataFrame(rows)

    def _require_data(self) -> None:
        if self._data is None:
            raise NotCollectedError("this Acceptance has no per-position data (constant / from_mal): nothing to fit")

    def fit(self, family: str = DEFAULT_FAMILY) -> "Acceptance":
        """Fit a parametric family to the measured positions.

        Parameters
        ----------
        family : {"geometric_decay", "constant", "logistic", "best"}
            ``"best"`` picks the identifiable family with the smallest AIC (ties: fewer params).

        Returns
        -------
        Acceptance
            Parametric, with ``fit_result`` (log-likelihood, AIC), the same temperature, label and
            assumptions plus one naming the fit.  Maximum likelihood of the survival likelihood
            when counts exist (then intervals exist by the delta method), else least squares on
            logit of the conditional rates with positions weighted equally.

        Raises
        ------
        SpecsimValueError
            Unknown family; fewer measured positions than the family has parameters.
        NotCollectedError
            No per-position data (``constant`` / ``from_mal`` objects).
        """
        if family != "best":
            fam = _family(family)
        self._require_data()
        K = len(self._data.conditional)
        if family == "best":
            table = self.compare_fits()
            ok = table[np.isfinite(table["aic"].to_numpy(float))]
            if ok.empty:
                raise SpecsimValueError("family", f"'best' needs a family with a finite AIC; {K} measured "
                                        "position(s) without counts identify none", family)
            ok = ok.sort_values(["aic", "n_params"], kind="stable")
            fam = _family(str(ok.iloc[0]["family"]))
        need = fam.n_params
        if K < need:
            raise SpecsimValueError("family", f"'{fam.name}' needs at least {need} measured positions, have {K}",
                                    fam.name)
        params, cov, res = self._fit_cached(fam.name)
        how = ("maximum likelihood (survival likelihood from counts)" if res.method == "mle"
               else "least squares on logit of conditional rates, positions weighted equally (no counts)")
        note = f"per-position acceptance modelled as {fam.name} {res.params} fitted by {how} on positions 1..{K}"
        label = f"{self._label} [{fam.name} fit]" if self._label else f"{fam.name} fit"
        base = tuple(a for a in self._assumptions if not a.startswith("per-position acceptance modelled as"))
        return Acceptance._make(data=self._data, family=fam.name, params=params, cov=cov, n_support=K,
                                temperature=self._temperature, label=label, assumptions=base + (note,),
                                fit_result=res, extrap_family=fam.name)

    def _extrapolator(self) -> "Acceptance":
        """Parametric fit used beyond the measured positions (cached)."""
        if "extrap" not in self._cache:
            fam_name = self._extrap_family
            K = len(self._data.conditional)
            if fam_name == "best":
                try:
                    ext = self.fit("best")
                except SpecsimValueError:
                    ext = self.fit("constant")
            elif K < _FAMILY_OBJ[fam_name].n_params:
                ext = self.fit("constant")
            else:
                ext = self.fit(fam_name)
            self._cache["extrap"] = ext
        return self._cache["extrap"]

    # ---- point estimates ----------------------------------------------------------------------
    def _alpha_param(self, k: np.ndarray) -> np.ndarray:
        return np.clip(_FAMILY_OBJ[self._family].alpha(k, self._params), 0.0, 1.0)

    def _tables(self, nmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(conditional, cumulative, mal) tables; mal[N] = MAL(N), index 0 = 1 (no drafts)."""
        tab = self._cache.get("table")
        if tab is None or len(tab[0]) < nmax:
            K = 0 if self.is_parametric else len(self._data.conditional)
            # measured positions need no fit; beyond them grow to >= 64 positions (doubling)
            size = K if (K and nmax <= K) else max(_TABLE_MIN, nmax, K, 2 * len(tab[0]) if tab is not None else 0)
            k = np.arange(1, size + 1, dtype=float)
            if self.is_parametric:
                cond = self._alpha_param(k)
                cum = np.cumprod(cond)
            else:
                cond = np.empty(size)
                cond[:K] = self._data.conditional
                cum = np.empty(size)
                cum[:K] = np.cumprod(self._data.conditional)
                if size > K:
                    ext = self._extrapolator()
                    cond[K:] = ext._alpha_param(k[K:])
                    cum[K:] = cum[K - 1] * np.cumprod(cond[K:])
            mal = 1.0 + np.concatenate([[0.0], np.cumsum(cum)])
            for a in (cond, cum, mal):
                a.flags.writeable = False
            tab = (cond, cum, mal)
            self._cache["table"] = tab
        return tab

    def conditional(self, n: int) -> np.ndarray:
        """Conditional acceptance rates alpha_1..alpha_n, shape (n,), in [0, 1].

        Positions beyond the measured ones come from the extrapolation fit (see ``is_extrapolated``).

        Raises
        ------
        SpecsimValueError
            ``n`` not an integer >= 1.
        """
        nn = int(_positions(n, "n", scalar=True))
        return self._tables(nn)[0][:nn].copy()

    def cumulative(self, n: int) -> np.ndarray:
        """Cumulative acceptance rates p_1..p_n = P(A >= k), shape (n,), non-increasing.

        Raises
        ------
        SpecsimValueError
            ``n`` not an integer >= 1.
        """
        nn = int(_positions(n, "n", scalar=True))
        return self._tables(nn)[1][:nn].copy()

    def mal(self, n: int | np.ndarray) -> float | np.ndarray:
        """Mean acceptance length MAL(N) = 1 + sum_{k<=N} p_k, tokens per verification round.

        Parameters
        ----------
        n : int or integer array of any shape
            num_speculative_tokens, >= 1.

        Returns
        -------
        float or ndarray (same shape as ``n``)
            Table look-up (precomputed cumulative sums, >= 64 positions), so it is cheap on grids.

        Raises
        ------
        SpecsimValueError
            ``n`` not integer or < 1.
        """
        arr = _positions(n)
        if arr.size == 0:
            return np.empty(arr.shape)
        tab = self._tables(int(arr.max()))[2]
        out = tab[arr]
        return float(out) if arr.ndim == 0 else out

    def acceptance_rate(self, n: int | np.ndarray) -> float | np.ndarray:
        """vLLM's draft acceptance rate accepted / (num_drafts * N) = (MAL(N) - 1) / N, the mean of
        the cumulative per-position rates (same shape rules as ``mal``)."""
        arr = _positions(n)
        return (self.mal(n) - 1.0) / (arr if arr.ndim else int(arr))

    def is_extrapolated(self, n: int) -> np.ndarray:
        """Bool array (n,): True at positions not backed by data (beyond ``n_support``)."""
        nn = int(_positions(n, "n", scalar=True))
        return np.arange(1, nn + 1) > self.n_support

    def status(self, n: int) -> np.ndarray:
        """Per-position status, shape (n,): ``"measured"`` (nonparametric, data), ``"fitted"``
        (parametric, inside the fitted positions) or ``"extrapolated"``."""
        ext = self.is_extrapolated(n)
        inside = "fitted" if self.is_parametric else "measured"
        return np.where(ext, "extrapolated", inside)

    # ---- intervals --------------------------------------------------------------------------
    def _interval_source(self) -> str:
        if self.is_parametric:
            if self._cov is None:
                raise NotCollectedError(
                    "no interval: this parametric profile was not fitted on counts (constant / from_mal / rates "
                    "without num_drafts)")
            return "param"
        if not self._data.has_counts:
            raise NotCollectedError("no interval: built from rates without num_drafts (pass num_drafts or counts)")
        return "km"

    def _log_cum_cov(self, nmax: int) -> tuple[np.ndarray, np.ndarray]:
        """(p (n,), covariance of log p (n, n)); inf entries where p = 0."""
        src = self._interval_source()
        p = self._tables(nmax)[1][:nmax]
        if src == "param":
            fam = _FAMILY_OBJ[self._family]
            k = np.arange(1, nmax + 1, dtype=float)
            al = np.clip(self._alpha_param(k), _CLIP, 1.0)
            G = np.cumsum(fam.dalpha(k, self._theta) / al[:, None], axis=0)
            return p, G @ self._cov @ G.T
        d = self._data
        K = len(d.conditional)
        n, e = d.at_risk, d.events
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(e > 0, (n - e) / (n * e), np.inf)
        V = np.cumsum(terms)
        idx = np.minimum(np.arange(nmax), K - 1)
        Vfull = V[idx]
        C = Vfull[np.minimum.outer(np.arange(nmax), np.arange(nmax))]
        if nmax > K:
            ext = self._extrapolator()
            fam = _FAMILY_OBJ[ext._family]
            k = np.arange(K + 1, nmax + 1, dtype=float)
            al = np.clip(ext._alpha_param(k), _CLIP, 1.0)
            G = np.cumsum(fam.dalpha(k, ext._theta) / al[:, None], axis=0)
            if ext._cov is None:  # pragma: no cover - counts always give a covariance
                C[K:, K:] = np.nan
            else:
                C[K:, K:] = C[K:, K:] + G @ ext._cov @ G.T
        return p, C

    def cumulative_interval(self, n: int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise interval of the cumulative rates p_1..p_n.

        Measured positions: Greenwood's variance of log p_k, interval p_k exp(+-z sd), clipped to
        [0, 1].  Where no rejection has been seen yet (Greenwood variance 0, p_k = 1) the lower
        bound is the Clopper-Pearson bound for n_k of n_k rounds, ((1 - level)/2)^(1/n_k).  Where
        p_k = 0 the bounds are [0, hi_{k-1} x Clopper-Pearson upper bound of alpha_k].
        Extrapolated positions add the fit's parameter covariance (delta method).  Parametric
        objects fitted on counts: delta method on log p_k.

        Returns
        -------
        (lo, hi) : ndarray (n,), ndarray (n,)

        Raises
        ------
        NotCollectedError
            No counts behind the profile (rates without ``num_drafts``, ``constant``, ``from_mal``).
        SpecsimValueError
            ``n`` not an integer >= 1; ``level`` outside (0, 1).
        """
        nn = int(_positions(n, "n", scalar=True))
        lv = _check_level(level)
        p, C = self._log_cum_cov(nn)
        z = stats.norm.ppf(0.5 + lv / 2)
        with np.errstate(invalid="ignore", over="ignore"):
            sd = np.sqrt(np.diag(C))
            lo = p * np.exp(-z * sd)
            hi = np.minimum(1.0, p * np.exp(z * sd))
        if not self.is_parametric:
            d = self._data
            K = len(d.conditional)
            m = min(nn, K)
            tail = (1.0 - lv) / 2.0
            flat = (sd[:m] == 0) & (p[:m] > 0)
            lo[:m] = np.where(flat, np.minimum(lo[:m], tail ** (1.0 / d.at_risk[:m])), lo[:m])
            zero = np.flatnonzero(p <= 0)
            if zero.size:
                f = int(zero[0])
                prev_hi = hi[f - 1] if f > 0 else 1.0
                cond = self._tables(nn)[0][:nn]
                if f < K:
                    cp = stats.beta.ppf(1 - tail, d.events[f] + 1, d.at_risk[f] - d.events[f])
                else:  # pragma: no cover - p hits 0 only at a measured position
                    cp = cond[f]
                hi[f:] = prev_hi * cp * np.concatenate([[1.0], np.cumprod(cond[f + 1:])])
                lo[f:] = 0.0
        lo = np.clip(np.nan_to_num(lo, nan=0.0), 0.0, 1.0)
        hi = np.clip(np.nan_to_num(hi, nan=1.0), 0.0, 1.0)
        return lo, hi

    def conditional_interval(self, n: int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise interval of alpha_1..alpha_n: Clopper-Pearson (``scipy.stats.beta``) at measured
        positions; delta method on logit alpha from the fit's covariance elsewhere.

        Returns
        -------
        (lo, hi) : ndarray (n,), ndarray (n,)

        Raises
        ------
        NotCollectedError
            No counts behind the profile.
        SpecsimValueError
            ``n`` not an integer >= 1; ``level`` outside (0, 1).
        """
        nn = int(_positions(n, "n", scalar=True))
        lv = _check_level(level)
        self._interval_source()
        tail = (1.0 - lv) / 2.0
        z = stats.norm.ppf(0.5 + lv / 2)
        lo = np.empty(nn)
        hi = np.empty(nn)

        def delta(obj: "Acceptance", k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            fam = _FAMILY_OBJ[obj._family]
            al = np.clip(obj._alpha_param(k), _CLIP, 1 - _CLIP)
            J = fam.dalpha(k, obj._theta)
            var = np.einsum("ij,jk,ik->i", J, obj._cov, J) / (al * (1 - al)) ** 2
            sd = np.sqrt(np.maximum(var, 0.0))
            lg = special.logit(al)
            return special.expit(lg - z * sd), special.expit(lg + z * sd)

        if self.is_parametric:
            return delta(self, np.arange(1, nn + 1, dtype=float))
        d = self._data
        K = len(d.conditional)
        m = min(nn, K)
        e, n_ = d.events[:m], d.at_risk[:m]
        with np.errstate(invalid="ignore"):
            lo[:m] = np.where(e > 0, stats.beta.ppf(tail, e, n_ - e + 1), 0.0)
            hi[:m] = np.where(e < n_, stats.beta.ppf(1 - tail, e + 1, n_ - e), 1.0)
        if nn > K:
            lo[K:], hi[K:] = delta(self._extrapolator(), np.arange(K + 1, nn + 1, dtype=float))
        return lo, hi

    def mal_interval(self, n: int | np.ndarray, level: float = 0.95) -> tuple[Any, Any]:
        """Interval of MAL(N) by propagation (delta method), see the module docstring.

        Var(MAL - 1) = sum_{i,j<=N} p_i p_j Cov(log p_i, log p_j) with Greenwood's
        Cov = Var(log p_min(i,j)) (plus the fit's parameter covariance at extrapolated positions);
        the interval is log-normal on MAL - 1 and clipped to [1, N + 1].  When that variance is 0
        (no rejection observed, or MAL = 1) the bounds are 1 + the sums of the pointwise cumulative
        bounds (conservative).

        Parameters
        ----------
        n : int or integer array
            num_speculative_tokens, >= 1.
        level : float
            Coverage in (0, 1).

        Returns
        -------
        (lo, hi) : floats for int ``n``, arrays shaped like ``n`` otherwise (tokens per round).

        Raises
        ------
        NotCollectedError
            No counts behind the profile.
        SpecsimValueError
            ``n`` not integer or < 1; ``level`` outside (0, 1).
        """
        arr = _positions(n)
        lv = _check_level(level)
        if arr.size == 0:
            return np.empty(arr.shape), np.empty(arr.shape)
        nmax = int(arr.max())
        p, C = self._log_cum_cov(nmax)
        pp = np.outer(p, p)
        with np.errstate(invalid="ignore"):
            M = np.where(pp > 0, pp * C, 0.0)
        var_all = np.diagonal(M.cumsum(0).cumsum(1)).copy()  # var of sum_{k<=N} p_k for N = 1..nmax
        var = np.maximum(var_all[arr - 1], 0.0)
        m1 = self._tables(nmax)[2][arr] - 1.0
        z = stats.norm.ppf(0.5 + lv / 2)
        clo, chi = self.cumulative_interval(nmax, lv)
        slo = np.cumsum(clo)[arr - 1]
        shi = np.cumsum(chi)[arr - 1]
        ok = (m1 > 0) & (var > 0) & np.isfinite(var)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(ok, np.sqrt(var) / np.where(m1 > 0, m1, 1.0), 0.0)
        lo = np.where(ok, 1.0 + m1 * np.exp(-z * s), 1.0 + np.minimum(slo, m1))
        hi = np.where(ok, 1.0 + np.minimum(arr, m1 * np.exp(z * s)), 1.0 + np.maximum(shi, m1))
        if arr.ndim == 0:
            return float(lo), float(hi)
        return lo, hi

    # ---- tables / serialisation ---------------------------------------------------------------
    def to_frame(self, n: int, level: float = 0.95) -> pd.DataFrame:
        """Per-position table for positions 1..n.

        Returns
        -------
        pandas.DataFrame
            Columns ``position, conditional, cumulative, cumulative_lo, cumulative_hi, status``
            (``measured`` / ``fitted`` / ``extrapolated``) plus ``conditional_lo, conditional_hi,
            at_risk, accepted``.  Interval columns are NaN when no counts back the profile;
            ``at_risk`` / ``accepted`` are NaN beyond the measured positions.
        """
        nn = int(_positions(n, "n", scalar=True))
        cond, cum, _ = self._tables(nn)
        try:
            clo, chi = self.cumulative_interval(nn, level)
            alo, ahi = self.conditional_interval(nn, level)
        except NotCollectedError:
            clo = chi = alo = ahi = np.full(nn, np.nan)
        at_risk = np.full(nn, np.nan)
        acc = np.full(nn, np.nan)
        if not self.is_parametric and self._data.has_counts:
            m = min(nn, self.n_measured)
            at_risk[:m] = self._data.at_risk[:m]
            acc[:m] = self._data.events[:m]
        return pd.DataFrame({
            "position": np.arange(1, nn + 1),
            "conditional": cond[:nn],
            "cumulative": cum[:nn],
            "cumulative_lo": clo,
            "cumulative_hi": chi,
            "status": self.status(nn),
            "conditional_lo": alo,
            "conditional_hi": ahi,
            "at_risk": at_risk,
            "accepted": acc,
        })

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description (round-trips through ``from_dict``)."""
        d = self._data
        return {
            "kind": self.kind,
            "label": self._label,
            "temperature": self._temperature,
            "assumptions": list(self._assumptions),
            "n_measured": self.n_measured,
            "n_support": self.n_support,
            "conditional_measured": None if d is None else [float(x) for x in d.conditional],
            "at_risk": None if d is None or d.at_risk is None else [float(x) for x in d.at_risk],
            "accepted": None if d is None or d.events is None else [float(x) for x in d.events],
            "runs_n": None if d is None else list(d.ns),
            "family": self._family,
            "params": self.params or None,
            "param_cov_theta": None if self._cov is None else self._cov.tolist(),
            "fit": None if self._fit_result is None else {
                **{k: v for k, v in self._fit_result.__dict__.items() if k != "params"},
                "params": dict(self._fit_result.params)},
            "extrapolation_family": self._extrap_family,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Acceptance":
        """Rebuild an ``Acceptance`` from ``to_dict`` output.

        Raises
        ------
        SpecsimValueError
            ``kind`` or ``family`` unknown, or required fields missing.
        """
        kind = d.get("kind")
        if kind not in ("nonparametric", "parametric"):
            raise SpecsimValueError("kind", "unknown Acceptance kind", kind, ("nonparametric", "parametric"))
        data = None
        if d.get("conditional_measured") is not None:
            cond = _rate_vector(d["conditional_measured"], "conditional_measured")
            ar = None if d.get("at_risk") is None else np.asarray(d["at_risk"], float)
            ev = None if d.get("accepted") is None else np.asarray(d["accepted"], float)
            data = _Data(conditional=cond, at_risk=ar, events=ev, ns=tuple(d.get("runs_n") or ()))
        elif kind == "nonparametric":
            raise SpecsimValueError("conditional_measured", "required for a nonparametric Acceptance")
        family = None
        params = None
        if kind == "parametric":
            family = _family(d.get("family")).name
            params = [float(d["params"][nm]) for nm in _FAMILY_OBJ[family].param_names]
        fit = d.get("fit")
        fit_result = None if fit is None else FitResult(**fit)
        extrap = d.get("extrapolation_family") or DEFAULT_FAMILY
        return cls._make(data=data, family=family, params=params, cov=d.get("param_cov_theta"),
                         n_support=int(d.get("n_support", 0)), temperature=_check_temperature(d.get("temperature")),
                         label=_check_label(d.get("label")), assumptions=tuple(d.get("assumptions") or ()),
                         fit_result=fit_result, extrap_family=extrap)

    def __repr__(self) -> str:
        ns = [n for n in (1, 3, 7, 15)]
        mals = "/".join(f"{self.mal(n):.3g}" for n in ns)
        parts = []
        if self._label:
            parts.append(f"label={self._label!r}")
        if self.is_parametric:
            ps = ", ".join(f"{k}={v:.4g}" for k, v in self.params.items())
            parts.append(f"{self._family}({ps})")
            parts.append(f"fitted positions 1..{self._n_support}" if self._n_support else "no data")
        else:
            d = self._data
            src = f"counts, {d.at_risk[0]:.0f} rounds" if d.has_counts else "rates"
            parts.append(f"measured positions 1..{self.n_measured} ({src})")
            parts.append(f"extrapolation={self._extrap_family}")
        parts.append(f"MAL(1/3/7/15)={mals}")
        parts.append(f"temperature={self._temperature}")
        if self._assumptions:
            parts.append(f"{len(self._assumptions)} assumption(s)")
        return "Acceptance(" + ", ".join(parts) + ")"
