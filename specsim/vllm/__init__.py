"""vLLM glue: read vLLM's speculative-decoding outputs, validate speculative configs and build
dynamic-speculation schedules (:mod:`specsim.vllm.schedule`), load the recorded real runs
(:mod:`specsim.vllm.records`) and configure the GPU runbook (:mod:`specsim.vllm.runbook`).

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
from .records import BENCH_FILES, load_health_checks, load_probe, load_run, load_runs, pair_runs
from .runbook import (
    GPU_TARGETS,
    device_available,
    gpu_matrix,
    gpu_runbook_matrices,
    run_runbook,
    runbook_plan,
    runbook_serve_commands,
)
from .schedule import SCHEDULE_FIELD, expand_schedule, speculative_config, validate_schedule

__all__ = [
    "BENCH_FILES",
    "GPU_TARGETS",
    "SCHEDULE_FIELD",
    "BenchResult",
    "IngestWarning",
    "LogRecord",
    "MetricsSnapshot",
    "SpecDecodeCounts",
    "SpecDecodeLog",
    "SpeculativeConfig",
    "device_available",
    "diff_scrapes",
    "expand_schedule",
    "gpu_matrix",
    "gpu_runbook_matrices",
    "load_health_checks",
    "load_probe",
    "load_run",
    "load_runs",
    "pair_runs",
    "parse_offline_metrics",
    "parse_prometheus_text",
    "parse_speculative_config",
    "parse_spec_decode_log",
    "read_bench_result",
    "read_prometheus",
    "read_spec_decode_log",
    "run_runbook",
    "runbook_plan",
    "runbook_serve_commands",
    "speculative_config",
    "validate_schedule",
]
