"""The vLLM environment's interpreter for tests that run vLLM's own code (tests/ is no package:
importers put this directory on ``sys.path``)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from specsim.runs.provenance import VllmInstall


def vllm_python() -> Path:
    """``.venv-vllm``'s python; fails under ``SPECSIM_REQUIRE_VLLM=1`` when missing, else skips."""
    install = VllmInstall.default()
    if not install.exists():
        if os.environ.get("SPECSIM_REQUIRE_VLLM") == "1":
            pytest.fail("vLLM environment missing (SPECSIM_REQUIRE_VLLM=1)")
        pytest.skip("vLLM environment missing; run `make vllm-env`")
    return install.python
