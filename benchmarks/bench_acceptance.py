"""Speed goals of specsim.acceptance (run with `make benchmark`; disabled in unit tests).

``Acceptance.mal`` is called on large (N, scenario) grids by predict/sweep, so it must be a table
look-up: goal well under 1 ms for 10^5 N values once the table is built.
"""
from __future__ import annotations

import numpy as np

from specsim.acceptance import Acceptance

# Source: vllm-amd-specdec-post appendix (gemma-4-26B-A4B-it, dflash, MI300X, GSM8K, N=15), cumulative.
CUM = [0.863, 0.732, 0.622, 0.525, 0.440, 0.366, 0.304, 0.249, 0.204, 0.166, 0.132, 0.104, 0.080, 0.060, 0.042]


def test_bench_mal_grid(benchmark):
    acc = Acceptance.from_rates(CUM, kind="cumulative")
    grid = np.random.default_rng(0).integers(1, 64, size=100_000)
    acc.mal(grid)  # build the table (includes the extrapolation fit)
    out = benchmark(acc.mal, grid)
    assert out.shape == grid.shape


def test_bench_from_counts_and_extrapolate(benchmark):
    def build():
        return Acceptance.from_counts(10_000, [8630, 7320, 6220, 5250, 4400, 3660, 3040]).mal(15)

    assert benchmark(build) > 1.0


def test_bench_mal_interval(benchmark):
    acc = Acceptance.from_counts(10_000, [8630, 7320, 6220, 5250, 4400, 3660, 3040])
    ns = np.arange(1, 33)
    lo, hi = benchmark(acc.mal_interval, ns)
    assert np.all(lo <= hi)
