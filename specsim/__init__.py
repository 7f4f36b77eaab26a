"""specsim: an analytical cost model of speculative decoding in vLLM.

See README.md for the quickstart.  The public names are re-exported here lazily so that
``import specsim`` stays cheap and never imports vLLM or torch.
"""
from __future__ import annotations

from .errors import DataError, NotCollectedError, RunError, SpecsimError, SpecsimValueError

__version__ = "0.1.0"

_LAZY = {
    "Acceptance": "specsim.acceptance",
    "Hardware": "specsim.hardware",
    "load_hardware": "specsim.hardware",
    "ModelSpec": "specsim.architecture",
    "load_model": "specsim.architecture",
    "Roofline": "specsim.latency",
    "Efficiency": "specsim.latency",
    "MeasuredLatency": "specsim.latency",
    "calibrate": "specsim.latency",
    "get_drafter": "specsim.drafters",
}

# Eager: the submodules ``specsim.predict`` / ``specsim.recommend`` share their function's name, so
# the functions are bound here after the submodule import (otherwise ``specsim.predict`` would be
# the module once anything imported it).
from .predict import Prediction, best_n, predict, sweep  # noqa: E402
from .recommend import recommend  # noqa: E402

__all__ = ["DataError", "NotCollectedError", "RunError", "SpecsimError", "SpecsimValueError", "Prediction",
           "best_n", "predict", "sweep", "recommend", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod = importlib.import_module(_LAZY[name])
        return getattr(mod, name)
    raise AttributeError(f"module 'specsim' has no attribute {name!r}")
