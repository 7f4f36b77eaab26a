"""Regenerate the *_synthetic* samples of this directory (run from the repo root:
``.venv/bin/python tests/data/vllm_samples/make_synthetic.py``).

The synthetic files are NOT real vLLM output. They are built from the integer counts below with
the log-line layouts and Prometheus/JSON shapes documented in specsim/vllm/ingest.py (vLLM
0.8.5 / 0.9.2 / 0.10.2 / 0.32.0 wheels), to exercise multi-engine aggregation, older formats,
and malformed / truncated inputs. The counts are the ground truth the tests check against.
"""
from __future__ import annotations

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# (engine, drafts, draft_tokens, accepted_per_pos), N = 3, ~10 s logging intervals
MULTI_ENGINE_INTERVALS = [
    ("000", 129, 371, (97, 80, 66)),
    ("001", 88, 250, (60, 47, 35)),
    ("000", 301, 880, (214, 170, 139)),
    ("001", 57, 171, (40, 31, 22)),
]
# Prometheus, two engines: (engine, drafts, draft_tokens, accepted_per_pos)
PROM_ENGINES = [("0", 200, 580, (160, 130, 100)), ("1", 120, 350, (90, 65, 45))]
# vLLM v0 cumulative lines: (k, drafts, prefix_accepted, accepted_any_position)
V0_LINES = [(4, 100, 170, 190), (4, 250, 420, 470)]
# vLLM 0.8.5 / 0.9.2 layouts: (drafts, draft_tokens, accepted_per_pos)
OLD_V1 = (200, 560, (150, 110, 80))


def v1_line(d, t, per, elapsed=10.0):
    a = sum(per)
    rates = ", ".join(f"{x / d:.3f}" for x in per)
    return ("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
            "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
            "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
            % (1 + a / d, a / elapsed, t / elapsed, a, t, rates, 100 * a / t))


def old_v1_line(d, t, per, bonus):
    a = sum(per)
    rates = ", ".join(f"{x / d:.3f}" for x in per)
    return ("SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, "
            "Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s"
            % (100 * a / t, (1 if bonus else 0) + a / d, a, t, rates))


def v0_line(k, d, prefix, any_pos):
    t, emitted = d * k, prefix + d
    return ("Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f, "
            "Number of speculative tokens: %d, Number of accepted tokens: %d, Number of draft "
            "tokens: %d, Number of emitted tokens: %d." % (any_pos / t, emitted / (d * (k + 1)), k,
                                                          any_pos, t, emitted))


def prom_text(engines):
    out = []
    for name, doc in (("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                      ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                      ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")):
        out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
        for eng, d, t, per in engines:
            v = {"vllm:spec_decode_num_drafts": d, "vllm:spec_decode_num_draft_tokens": t,
                 "vllm:spec_decode_num_accepted_tokens": sum(per)}[name]
            out.append(f'{name}_total{{engine="{eng}",model_name="m"}} {float(v)}')
        out += [f"# HELP {name}_created {doc}", f"# TYPE {name}_created gauge"]
        out += [f'{name}_created{{engine="{eng}",model_name="m"}} 1.7959e+09' for eng, *_ in engines]
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    out += [f"# HELP {name}_total Accepted tokens per draft position.", f"# TYPE {name}_total counter"]
    for eng, _d, _t, per in engines:
        out += [f'{name}_total{{engine="{eng}",model_name="m",position="{i}"}} {float(v)}'
                for i, v in enumerate(per)]
    out += ["# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter"]
    out += [f'vllm:generation_tokens_total{{engine="{eng}",model_name="m"}} {float(d + sum(per))}'
            for eng, d, _t, per in engines]
    return "\n".join(out) + "\n"


def main():
    w = lambda name, text: open(os.path.join(HERE, name), "w", encoding="utf-8").write(text)
    lines = []
    for i, (eng, d, t, per) in enumerate(MULTI_ENGINE_INTERVALS):
        ts = f"11-29 10:0{i}:00"
        lines.append(f"(APIServer pid=7) INFO {ts} [loggers.py:250] Engine {eng}: Avg prompt throughput: "
                     f"10.0 tokens/s, Avg generation throughput: 40.0 tokens/s, Running: 2 reqs, "
                     f"Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%")
        lines.append(f"(APIServer pid=7) INFO {ts} [metrics.py:120] " + v1_line(d, t, per))
    w("specdecoding_multi_engine_synthetic.log", "\n".join(lines) + "\n")
    w("specdecoding_v0_synthetic.log", "".join(
        f"INFO 04-28 12:00:{10 * i:02d} metrics.py:509] " + v0_line(*x) + "\n" for i, x in enumerate(V0_LINES)))
    w("specdecoding_v1_0.8.5_synthetic.log", "INFO 04-28 12:00:00 [loggers.py:111] "
      + old_v1_line(*OLD_V1, bonus=False) + "\n")
    w("specdecoding_v1_0.9.2_synthetic.log", "INFO 07-01 12:00:00 [loggers.py:118] "
      + old_v1_line(*OLD_V1, bonus=True) + "\n")
    good = "INFO 11-29 10:00:00 [metrics.py:120] " + v1_line(129, 371, (97, 80, 66))
    w("specdecoding_truncated_synthetic.log", good + "\n" + good[: good.index("Avg Draft") - 2] + "\n")
    bad = v1_line(129, 371, (97, 80, 66)).replace("0.752, 0.620", "0.620, 0.752")
    w("specdecoding_malformed_synthetic.log", "INFO 11-29 10:00:00 [metrics.py:120] " + bad + "\n")
    w("metrics_multi_engine_synthetic.txt", prom_text(PROM_ENGINES))
    full = open(os.path.join(HERE, "metrics_ngram.txt"), encoding="utf-8").read()
    cut = full.index('position="1"} ') + len('position="1"} ') + 2  # mid-value: "202.0" -> "20"
    w("metrics_truncated_synthetic.txt", full[:cut] + "\n")
    bench = json.load(open(os.path.join(HERE, "bench_ngram.json"), encoding="utf-8"))
    raw = json.dumps(bench)
    w("bench_truncated_synthetic.json", raw[: len(raw) // 2])
    bench["spec_decode_acceptance_length"] = 2.97  # disagrees with 1 + 617/330
    w("bench_inconsistent_synthetic.json", json.dumps(bench))
    offline = []
    for eng, d, t, per in PROM_ENGINES:
        lab = {"engine": eng, "model_name": "m"}
        offline += [
            {"name": "vllm:spec_decode_num_drafts", "labels": lab, "type": "counter", "value": d},
            {"name": "vllm:spec_decode_num_draft_tokens", "labels": lab, "type": "counter", "value": t},
            {"name": "vllm:spec_decode_num_accepted_tokens", "labels": lab, "type": "counter", "value": sum(per)},
            {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": lab, "type": "vector",
             "values": list(per)},
            {"name": "vllm:generation_tokens", "labels": lab, "type": "counter", "value": d + sum(per)},
            {"name": "vllm:kv_cache_usage_perc", "labels": lab, "type": "gauge", "value": 0.01},
            {"name": "vllm:time_to_first_token_seconds", "labels": lab, "type": "histogram",
             "count": 3, "sum": 0.9, "buckets": {"0.5": 2, "+Inf": 3}},
        ]
    w("offline_metrics_multi_engine_synthetic.json", json.dumps(offline, indent=1))


if __name__ == "__main__":
    main()
