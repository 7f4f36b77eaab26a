"""Real vLLM runs (layer 4): process handling, provenance, atomic recording, bench plans, the matrix
runner and its matrices, the GPU runbook, and loaders of the recorded runs under ``data/runs``."""
