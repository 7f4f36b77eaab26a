"""``specsim reproduce --quick`` never replaces the full run's outputs (its summary lacks the secondary splits)."""
from __future__ import annotations

import json

import pytest

from specsim.catalog import project_data_path, project_dir
from specsim.cli import main as cli_main
from specsim.errors import SpecsimValueError
from specsim.main_job import quick_paths, run_main_job


def test_quick_needs_out(capsys):
    with pytest.raises(SpecsimValueError, match="--out"):
        quick_paths(None)
    assert cli_main(["reproduce", "--quick"]) != 0
    assert "--out" in capsys.readouterr().err


def test_quick_run_writes_only_under_out(tmp_path):
    checkout = [project_data_path("reproduction") / "summary.json", project_data_path("validation") / "summary.json",
                *sorted((project_dir() / "figures").glob("*.png"))[:3]]
    before = {p: p.read_bytes() for p in checkout}
    res = run_main_job(out_dir=tmp_path / "q", quick=True, show_progress=False)
    assert res.written and all(tmp_path in w.parents for w in res.written)
    assert {p: p.read_bytes() for p in checkout} == before
    quick = json.loads((tmp_path / "q" / "summary.json").read_text())
    full = json.loads(before[checkout[0]])
    assert set(quick) < set(full)  # the keys a quick run skips are the full run's secondary splits
    assert (tmp_path / "q" / "calibration").is_dir() and (tmp_path / "q" / "validation" / "summary.json").is_file()
