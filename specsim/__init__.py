"""specsim: an analytical cost model of speculative decoding in vLLM (layer 3, the public API).

See README.md for the quickstart and ``docs/architecture.md`` for the layers.  ``import specsim``
never imports vLLM or torch; no module of a lower layer imports this package module.
"""
from __future__ import annotations

from specsim.acceptance import Acceptance
from specsim.architecture import ModelSpec, load_model
from specsim.drafters import get_drafter
from specsim.errors import (
           DataError,
           NotCollectedError,
           RunError,
           SpecsimError,
           SpecsimValueError,
)
from specsim.hardware import Hardware, load_hardware
from specsim.latency import Efficiency, MeasuredLatency, Roofline, calibrate
from specsim.predict import Prediction, best_n, predict, sweep
from specsim.recommend import recommend

__version__ = "0.1.0"

__all__ = ["DataError", "NotCollectedError", "RunError", "SpecsimError", "SpecsimValueError", "Prediction",
           "best_n", "predict", "sweep", "recommend", "Acceptance", "Hardware", "load_hardware", "ModelSpec",
           "load_model", "Roofline", "Efficiency", "MeasuredLatency", "calibrate", "get_drafter"]
