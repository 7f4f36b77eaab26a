"""vLLM's formats (layer 1): the speculative-decoding counts record and one reader per format
(Prometheus text, log lines, bench JSON and console output, bench sweep results, per-request
speculative metrics, GuideLLM reports, speculators evaluation output, InferenceX golden-AL
files), the ``--speculative-config`` validator with vLLM's one
method list, and dynamic-speculation schedules.  Nothing here imports vllm or torch, nor the model
layer; ``prometheus_client`` (extra ``specsim[vllm]``) is imported only by the Prometheus parser.
"""
from __future__ import annotations

from specsim.vllm.bench import BenchResult, read_bench_result, read_bench_results
from specsim.vllm.bench_log import parse_bench_log, read_bench_log, read_bench_logs
from specsim.vllm.config import SpeculativeConfig, parse_speculative_config
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts
from specsim.vllm.detect import KINDS, detect_kind, read_counts
from specsim.vllm.guidellm import GuideLLMBenchmark, read_guidellm_report
from specsim.vllm.inferencex import GoldenAL, read_golden_al
from specsim.vllm.logs import (
    LogRecord,
    SpecDecodeLog,
    parse_spec_decode_log,
    read_spec_decode_log,
)
from specsim.vllm.per_request import (
    DraftLengthAcceptance,
    RequestSpecMetrics,
    acceptance_by_draft_length,
    parse_request_spec_metrics,
    read_response_spec_metrics,
    sum_request_counts,
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
from specsim.vllm.speculators import (
    read_speculators_acceptance,
    read_speculators_eval_log,
)
from specsim.vllm.sweep import (
    SweepRun,
    read_bench_sweep,
    read_sweep_summary_csv,
    read_sweep_summary_runs,
    sweep_failures,
)

__all__ = [
    "KINDS",
    "SCHEDULE_FIELD",
    "BenchResult",
    "DraftLengthAcceptance",
    "GoldenAL",
    "GuideLLMBenchmark",
    "IngestWarning",
    "LogRecord",
    "MetricsSnapshot",
    "RequestSpecMetrics",
    "SpecDecodeCounts",
    "SpecDecodeLog",
    "SpeculativeConfig",
    "SweepRun",
    "acceptance_by_draft_length",
    "detect_kind",
    "diff_scrapes",
    "expand_schedule",
    "parse_bench_log",
    "parse_offline_metrics",
    "parse_prometheus_text",
    "parse_request_spec_metrics",
    "parse_spec_decode_log",
    "parse_speculative_config",
    "read_bench_log",
    "read_bench_logs",
    "read_bench_result",
    "read_bench_results",
    "read_bench_sweep",
    "sweep_failures",
    "read_counts",
    "read_golden_al",
    "read_guidellm_report",
    "read_prometheus",
    "read_response_spec_metrics",
    "read_spec_decode_log",
    "read_speculators_acceptance",
    "read_speculators_eval_log",
    "read_sweep_summary_csv",
    "read_sweep_summary_runs",
    "speculative_config",
    "sum_request_counts",
    "validate_schedule",
]
