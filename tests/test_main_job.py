"""``specsim reproduce --quick`` never replaces the full run's outputs (its summary lacks the secondary splits)."""
from __future__ import annotations

import json

import pytest

from specsim.catalog import project_data_path, project_dir
from specsim.cli import main as cli_main
from specsim.errors import SpecsimValueError
from specsim.main_job import default_paths, quick_paths, run_main_job


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


def test_out_in_a_checkout_moves_everything_it_writes_under_out(tmp_path):
    """A new-user trial: ``specsim reproduce --out DIR --figures DIR2`` in a checkout wrote its tables under DIR
    but rewrote the shipped calibration (``specsim/data/calibration``, which every later prediction reads) and
    ``data/validation`` in place.  With ``--out`` everything goes under it; only the plain run writes the tree."""
    out = tmp_path / "o"
    paths = default_paths(out)
    assert paths == {"out": out, "figures": out / "figures", "calibration": out / "calibration",
                     "validation": out / "validation", "runs": project_data_path("runs")}
    assert default_paths(out, tmp_path / "f")["figures"] == tmp_path / "f"
    assert quick_paths(out) == paths
    plain = default_paths()
    assert plain["calibration"] == project_dir() / "specsim" / "data" / "calibration"
    assert (plain["out"], plain["validation"], plain["figures"]) == (
        project_data_path("reproduction"), project_data_path("validation"), project_dir() / "figures")


def test_reproduce_prints_the_headline_and_its_goals_not_the_whole_summary(monkeypatch, capsys):
    """A new-user trial: ``specsim reproduce`` printed the whole summary as JSON (~1700 lines) before the seed table;
    it now prints the headline split, each goal against its measured value, the seed table and where summary.json
    is (``--json`` still prints everything).  The committed summary stands in for a run (the job takes minutes)."""
    import types
    from pathlib import Path

    import specsim.cli as cli

    summary = json.loads((project_data_path("reproduction") / "summary.json").read_text())
    res = types.SimpleNamespace(summary=summary, written=(Path("a.png"), Path("t.csv")),
                                paths={"out": Path("OUT"), "figures": Path("FIG")})
    monkeypatch.setattr(cli, "run_main_job", lambda **kw: res)
    assert cli_main(["reproduce"]) == 0
    out = capsys.readouterr().out.splitlines()
    med, mx = summary["held_out_median_abs_rel_error"], summary["held_out_max_abs_rel_error"]
    assert out[0] == (f"leave-one-target-out (headline): {summary['held_out_rows']} held-out rows, median |ratio "
                      f"error| {med:.1%}, max {mx:.1%}; best N exact {summary['held_out_best_n_exact']}, within one "
                      f"step {summary['held_out_best_n_within_one_step']}")
    goals = [x for x in out if x.startswith("  goal ")]
    assert len(goals) == len(summary["goals"])
    for k, met in summary["goal_met"].items():
        line = next(x for x in goals if x.startswith(f"  goal {k}: "))
        assert line.endswith("(met)" if met else "(NOT met)"), line
    assert len(out) < len(summary["seed_table"]) + len(goals) + 6
    assert out[-2] == f"the whole summary: {Path('OUT') / 'summary.json'} (--json prints it)"
    assert cli_main(["reproduce", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"] == summary
