"""InferenceX golden acceptance-length files (SemiAnalysisAI/InferenceX
``golden_al_distribution/*.yaml``) into an AL-vs-N table (layer 1, vLLM formats).

These are not counts: each file gives, per model and mode (e.g. ``thinking_on`` /
``thinking_off``), the mean acceptance length AL (tokens per verification step, bonus token
included, as vLLM's ``spec_decode_acceptance_length``) measured in a separate run for each
``num_speculative_tokens`` N — a MAL curve.  Layout::

    _metadata:
      draft-model: <draft checkpoint>
    <model>:
      <mode>:
        1: 1.78
        2: 2.38
        ...

For one configuration, AL(N) = 1 + sum_{k<=N} p_k with non-increasing cumulative per-position
rates p_k (``vllm/v1/spec_decode/metrics.py``), so AL would rise with N by non-increasing steps.
Separate runs per N need not obey that; :meth:`GoldenAL.irregularities` lists every place the
file does not (AL falling with N, or an AL step larger than the previous step) instead of hiding
it.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import pandas as pd
import yaml

from specsim.errors import DataError

__all__ = ["GoldenAL", "read_golden_al"]


@dataclass(frozen=True)
class GoldenAL:
    """An InferenceX golden acceptance-length table.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per (model, mode, N): columns ``model``, ``mode``, ``num_speculative_tokens``,
        ``acceptance_length`` (tokens/step, bonus included), ``increment`` (AL(N) - AL(N-1),
        with AL(0) = 1 — the implied p_N if all N came from one configuration).
    draft_model : str or None
        ``_metadata.draft-model``.
    metadata : dict
        The whole ``_metadata`` mapping.
    source : str
    """

    table: pd.DataFrame
    draft_model: str | None
    metadata: dict
    source: str = ""

    def curve(self, model: str, mode: str) -> pd.Series:
        """AL indexed by N for one model and mode.

        Raises
        ------
        DataError
            Unknown model / mode (the message lists those present).
        """
        sel = self.table[(self.table["model"] == model) & (self.table["mode"] == mode)]
        if sel.empty:
            have = sorted(set(zip(self.table["model"], self.table["mode"])))
            raise DataError(f"{self.source}: no curve for ({model!r}, {mode!r}); present: {have}")
        return pd.Series(sel["acceptance_length"].to_numpy(), index=sel["num_speculative_tokens"].to_numpy(),
                         name=f"{model}/{mode}")

    def irregularities(self) -> pd.DataFrame:
        """Rows where the curve is not what one configuration's counters would give.

        Returns
        -------
        pandas.DataFrame
            Columns ``model, mode, num_speculative_tokens, acceptance_length, increment,
            previous_increment, kind`` with ``kind`` = ``"AL decreases"`` (increment < 0) or
            ``"step grows"`` (increment > previous increment); empty when none.
        """
        rows = []
        for (model, mode), g in self.table.groupby(["model", "mode"], sort=False):
            inc = g["increment"].to_numpy()
            for j in range(len(g)):
                r = g.iloc[j]
                prev = inc[j - 1] if j else math.nan
                kind = None
                if inc[j] < -1e-9:
                    kind = "AL decreases"
                elif j and inc[j] > prev + 1e-9:
                    kind = "step grows"
                if kind:
                    rows.append({"model": model, "mode": mode,
                                 "num_speculative_tokens": int(r["num_speculative_tokens"]),
                                 "acceptance_length": float(r["acceptance_length"]),
                                 "increment": float(inc[j]), "previous_increment": float(prev),
                                 "kind": kind})
        return pd.DataFrame(rows, columns=["model", "mode", "num_speculative_tokens",
                                           "acceptance_length", "increment", "previous_increment",
                                           "kind"])

    @property
    def monotone(self) -> bool:
        """True when no curve has an irregularity (AL rising by non-increasing steps)."""
        return self.irregularities().empty


def read_golden_al(path: str | os.PathLike, *, source: str | None = None) -> GoldenAL:
    """Read an InferenceX ``golden_al_distribution`` YAML file.

    Parameters
    ----------
    path : path-like
    source : str, optional

    Returns
    -------
    GoldenAL

    Raises
    ------
    DataError
        Not YAML / not a mapping; no model entries; a mode that is not a mapping of N -> AL; N not
        an integer >= 1; AL not a finite number in [1, N + 1] (AL counts the bonus token and at
        most N accepted draft tokens).
    """
    p = os.fspath(path)
    src = source or os.path.basename(p)
    try:
        with open(p, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DataError(f"{src}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise DataError(f"{src}: expected a YAML mapping, got {type(raw).__name__}")
    meta = raw.get("_metadata") or {}
    if not isinstance(meta, dict):
        raise DataError(f"{src}: _metadata is not a mapping")
    rows = []
    for model, modes in raw.items():
        if model == "_metadata":
            continue
        if not isinstance(modes, dict) or not modes:
            raise DataError(f"{src}: {model}: expected a mapping of mode -> {{N: AL}}")
        for mode, curve in modes.items():
            where = f"{src}: {model}.{mode}"
            if not isinstance(curve, dict) or not curve:
                raise DataError(f"{where}: expected a mapping N -> acceptance length")
            prev_al = 1.0
            for n in sorted(curve, key=lambda k: (not isinstance(k, int), k if isinstance(k, int) else 0)):
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise DataError(f"{where}: key {n!r} is not a num_speculative_tokens >= 1")
                al = curve[n]
                if isinstance(al, bool) or not isinstance(al, (int, float)) or not math.isfinite(al):
                    raise DataError(f"{where}[{n}]: acceptance length {al!r} is not a finite number")
                if not 1.0 <= al <= n + 1:
                    raise DataError(f"{where}[{n}]: acceptance length {al} outside [1, N + 1] = "
                                    f"[1, {n + 1}] (AL counts the bonus token)")
                rows.append({"model": str(model), "mode": str(mode), "num_speculative_tokens": n,
                             "acceptance_length": float(al), "increment": round(float(al) - prev_al, 10)})
                prev_al = float(al)
            ns = sorted(curve)
            if ns != list(range(1, len(ns) + 1)):
                # increments are AL(N) - AL(previous N present); say so rather than guess
                raise DataError(f"{where}: N values {ns} are not 1..{len(ns)}; increments would "
                                f"span several N")
    if not rows:
        raise DataError(f"{src}: no model curves (only _metadata?)")
    table = pd.DataFrame(rows, columns=["model", "mode", "num_speculative_tokens",
                                        "acceptance_length", "increment"])
    dm = meta.get("draft-model")
    return GoldenAL(table, None if dm is None else str(dm), dict(meta), src)
