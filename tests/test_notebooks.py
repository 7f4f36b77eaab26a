"""Every notebook in notebooks/ executes headless, top to bottom, without an error.

One parametrized test per notebook (nbclient, a fresh ``python3`` kernel of this interpreter,
working directory = notebooks/); none may change or remove a recorded run (``data/runs``).  The
per-cell timeout is a hang guard, not a speed goal (speed goals live in benchmarks/); the notebooks
themselves are kept short (logic in specsim).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from recorded_runs import tree_hash, unchanged  # noqa: E402  (tests/ is on sys.path)

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RUNS = ROOT / "data" / "runs"
CELL_TIMEOUT_S = 600


def test_notebooks_exist():
    assert any(p.name.startswith("01_") for p in NOTEBOOKS), [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch, tmp_path):
    nb = nbformat.read(path, as_version=4)
    # the kernel inherits the environment: make the source tree importable, render off-screen, keep
    # the GPU path of notebook 03 off, and keep matplotlib / IPython caches out of the user's home
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("SPECSIM_RUN_GPU", raising=False)  # notebook 03's GPU switch: never on in a test
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    # the kernel's temporary files go here, to be checked: a notebook run leaves none behind (01 and 02 left
    # a directory of figures in /tmp on every run)
    kernel_tmp = tmp_path / "tmp"
    kernel_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(kernel_tmp))
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    # the kernel must be this interpreter (the project's environment), not whatever "python3" is on PATH
    client.kernel_manager_class = _this_python_kernel_manager()
    before = tree_hash(RUNS)
    client.execute()
    assert unchanged(before, tree_hash(RUNS)), f"{path.name} changed or removed a recorded run"
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells, f"{path.name} has no code cells"
    assert all(c.get("execution_count") for c in code_cells), "a code cell did not run"
    errors = [o for c in code_cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    assert not list(kernel_tmp.iterdir()), f"{path.name} left temporary files: {sorted(kernel_tmp.iterdir())}"


def _this_python_kernel_manager():
    from jupyter_client.manager import KernelManager

    class ThisPythonKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if cmd and Path(cmd[0]).name.startswith("python"):
                cmd[0] = sys.executable
            return cmd

    return ThisPythonKernelManager
