"""vLLM glue: read vLLM's speculative-decoding outputs, validate speculative configs and build
dynamic-speculation schedules (:mod:`specsim.vllm.schedule`).

The only specsim package that knows vLLM's formats. Nothing here imports vllm or torch;
``prometheus_client`` (extra ``specsim[vllm]``) is imported only by the Prometheus parser.
"""
from __future__ import annotations

from .config import SpeculativeConfig, parse_speculative_config
from .ingest import (
    BenchResult,
    IngestWarning,
    LogRecord,
    MetricsSnapshot,
    SpecDecodeCounts,
    SpecDecodeLog,
    diff_scrapes,
    parse_offline_metrics,
    parse_prometheus_text,
    parse_spec_decode_log,
    read_bench_result,
    read_prometheus,
    read_spec_decode_log,
)
from .schedule import SCHEDULE_FIELD, expand_schedule, speculative_config, validate_schedule

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
