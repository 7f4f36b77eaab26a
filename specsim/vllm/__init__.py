"""vLLM's formats (layer 1): the speculative-decoding counts record and one reader per format
(Prometheus text, log lines, bench JSON), the ``--speculative-config`` validator with vLLM's one
method list, and dynamic-speculation schedules.  Nothing here imports vllm or torch, nor the model
layer; ``prometheus_client`` (extra ``specsim[vllm]``) is imported only by the Prometheus parser.
"""
from __future__ import annotations

from specsim.vllm.bench import BenchResult, read_bench_result
from specsim.vllm.config import SpeculativeConfig, parse_speculative_config
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts
from specsim.vllm.logs import (
    LogRecord,
    SpecDecodeLog,
    parse_spec_decode_log,
    read_spec_decode_log,
)
from specsim.vllm.prometheus import (
    MetricsSnapshot,
    diff_scrapes,
    parse_offline_metrics,
    parse_prometheus_text,
    read_prometheus,
)
from specsim.vllm.schedule import (
    SCHEDULE_FIELD,
    expand_schedule,
    speculative_config,
    validate_schedule,
)

__all__ = [
    "SCHEDULE_FIELD",
    "BenchResult",
    "IngestWarning",
    "LogRecord",
    "MetricsSnapshot",
    "SpecDecodeCounts",
    "SpecDecodeLog",
    "SpeculativeConfig",
    "diff_scrapes",
    "expand_schedule",
    "parse_offline_metrics",
    "parse_prometheus_text",
    "parse_speculative_config",
    "parse_spec_decode_log",
    "read_bench_result",
    "read_prometheus",
    "read_spec_decode_log",
    "speculative_config",
    "validate_schedule",
]
