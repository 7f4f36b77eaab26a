"""The README's main command, ``specsim reproduce`` (layer 5): studies, tables, shipped calibrations and
every figure; the only module that imports both studies and plots.

Details: ``docs/modules/specsim.main_job.md``.
"""
from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from specsim._progress import progress
from specsim.catalog import (
    data_path,
    is_source_checkout,
    project_data_path,
    project_dir,
)
from specsim.errors import DataError, SpecsimValueError
from specsim.plots.reproduction import reproduction_figures
from specsim.plots.tuning import make_tuning_figures
from specsim.plots.validation import make_validation_figures
from specsim.studies.concurrency import concurrency_study, write_concurrency_outputs
from specsim.studies.curves import sweep_curves
from specsim.studies.reproduce import (
    reproduction_study,
    study_steps,
    write_reproduction_outputs,
)
from specsim.studies.tuning import tuning_study
from specsim.studies.validation import (
    HEADLINE_MATRIX,
    compare_loops,
    validate,
    write_loop_comparison,
    write_outputs,
)

__all__ = ["run_main_job", "default_paths", "quick_paths", "MainJobResult"]

log = logging.getLogger(__name__)


def default_paths(out_dir: str | os.PathLike | None = None, figures_dir: str | os.PathLike | None = None) -> dict:
    """Where the main job writes: ``{"out", "figures", "calibration", "validation", "runs"}`` (Paths or None).

    In a source checkout without ``out_dir``: ``data/reproduction``, ``figures/``, the package's
    ``specsim/data/calibration``, ``data/validation`` and the recorded runs ``data/runs``.  With ``out_dir``
    everything it writes goes under it (``out_dir/calibration``, ``out_dir/figures`` unless ``figures_dir``
    is given, ``out_dir/validation`` from the checkout's recorded runs): a run told where to write never
    replaces the shipped calibration, which every later prediction reads (until 2026-12-07 a checkout's
    ``--out`` moved only the tables).  Elsewhere ``out_dir`` is required; calibrations go to
    ``out_dir/calibration``, figures to ``out_dir/figures``, and the validation (which needs the recorded
    runs of a checkout) is skipped.

    Raises
    ------
    SpecsimValueError
        No ``out_dir`` outside a source checkout.
    """
    if is_source_checkout():
        root = project_dir()
        if out_dir is not None:
            out = Path(out_dir)
            return {"out": out, "figures": Path(figures_dir) if figures_dir is not None else out / "figures",
                    "calibration": out / "calibration", "validation": out / "validation",
                    "runs": project_data_path("runs")}
        return {"out": project_data_path("reproduction"),
                "figures": Path(figures_dir) if figures_dir is not None else root / "figures",
                "calibration": data_path("calibration"), "validation": project_data_path("validation"),
                "runs": project_data_path("runs")}
    if out_dir is None:
        raise SpecsimValueError("--out", "is required outside a source checkout of specsim (an installed copy "
                                "never writes into its own package data)")
    out = Path(out_dir)
    return {"out": out, "figures": Path(figures_dir) if figures_dir is not None else out / "figures",
            "calibration": out / "calibration", "validation": None, "runs": None}


def quick_paths(out_dir: str | os.PathLike | None, figures_dir: str | os.PathLike | None = None) -> dict:
    """Where ``reproduce --quick`` writes: everything under ``out_dir`` (``out_dir/calibration``,
    ``out_dir/figures``, ``out_dir/validation``), reading a checkout's recorded runs.

    A quick run skips the secondary splits, so its ``summary.json`` lacks them: written over
    ``data/reproduction`` it would lose what the full run recorded.

    Raises
    ------
    SpecsimValueError
        No ``out_dir``.
    """
    if out_dir is None:
        raise SpecsimValueError("--out", "is required with --quick (a quick run skips the secondary splits; "
                                "written over data/reproduction it would drop them from summary.json)")
    return default_paths(out_dir, figures_dir)  # with out_dir, everything goes under it


@dataclass(frozen=True)
class MainJobResult:
    """What :func:`run_main_job` did.

    Attributes
    ----------
    summary : dict
        The reproduction summary (``data/reproduction/summary.json``).
    written : tuple of Path
        Every file written (tables, calibrations, figures).
    paths : dict
        :func:`default_paths` used.
    """

    summary: dict
    written: tuple
    paths: dict


def run_main_job(figures_dir: str | os.PathLike | None = None, out_dir: str | os.PathLike | None = None,
                 quick: bool = False, show_progress: bool = True) -> MainJobResult:
    """Reproduce the published tables, fit and write the shipped calibration, regenerate every figure.

    Order matters in a source checkout without ``out_dir``: the tuning study reads the shipped calibration,
    which this run has just written (with ``out_dir``, and in an installed copy, the tuning study reads the
    shipped calibration; this run's goes to ``out_dir/calibration``).

    Parameters
    ----------
    figures_dir, out_dir : path, optional
        See :func:`default_paths`.
    quick : bool
        Skip the secondary splits (fit on GSM8K, fit on the two smallest N; the headline
        leave-one-target-out stays).  Everything then goes under ``out_dir`` (:func:`quick_paths`), so a
        quick run never replaces the full outputs.
    show_progress : bool
        A progress bar on stderr (tqdm, where installed).

    Returns
    -------
    MainJobResult
    """
    if quick:
        paths = quick_paths(out_dir, figures_dir)
    else:
        paths = default_paths(out_dir, figures_dir)
    figures = paths["figures"]
    figures.mkdir(parents=True, exist_ok=True)
    validating = paths["runs"] is not None
    with progress(study_steps(quick) + 2 + validating, "specsim reproduce", enabled=show_progress) as bar:
        bar.set_postfix_str("fitting the published sweeps")
        study = reproduction_study(quick=quick, progress=bar)
        bar.set_postfix_str("NVIDIA concurrency sweeps")
        conc = concurrency_study()
        study.summary["concurrency_sweeps"] = conc.summary  # into summary.json
        written = write_reproduction_outputs(study, paths["out"], paths["calibration"],
                                             sources={"B200 SXM": conc.params})
        # after the transferred calibrations: it writes the B200 calibration fitted on the P-EAGLE rows
        written += write_concurrency_outputs(conc, paths["out"], paths["calibration"])
        bar.set_postfix_str("reproduction figures")
        written += reproduction_figures(study.rep, study.mi355x, study.sensitivity, figures, sweep_curves(study.rep))
        bar.update()
        bar.set_postfix_str("tuning study")
        written += make_tuning_figures(figures, tuning_study())
        bar.update()
        if validating:
            bar.set_postfix_str("CPU validation")
            try:
                result = validate(paths["runs"])
            except DataError as exc:  # no recorded runs / probe yet: say so, the rest of the job stands
                warnings.warn(f"no validation figures: {exc}", UserWarning, stacklevel=2)
            else:
                written += write_outputs(result, paths["validation"])
                written += make_validation_figures(figures, result)
                try:  # the fast loop (make validate-cpu) judged against the full one, where both are recorded
                    written += write_loop_comparison(compare_loops(paths["runs"], results={HEADLINE_MATRIX: result}),
                                                     paths["validation"])
                except DataError as exc:
                    log.info("no loop comparison: %s", exc)
            bar.update()
    n_png = sum(1 for w in written if str(w).endswith(".png"))
    log.info("wrote %d figures to %s and %d tables / calibrations", n_png, figures, len(written) - n_png)
    return MainJobResult(summary=study.summary, written=tuple(Path(w) for w in written), paths=paths)
