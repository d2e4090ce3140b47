#!/usr/bin/env python3
"""Probe: which kernels PyTorch's batched float64 LU and Cholesky run, and ours, and how long
each takes (torch.profiler's CUDA activity, one call after a warm-up), for stacks of 32 x 32,
128 x 128 and 512 x 512 matrices filling --gbytes.

    python3 perf/probes/batched_kernels.py [--sizes 32 128 512] [--gbytes 1]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import hybridla  # noqa: E402
from hybridla import _stacked_device  # noqa: E402


def show(label, fn):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    print(f"## {label}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))


def _ours(a, method):
    with hybridla.backend.get_backend("cuda").call():
        return _stacked_device.lu_factor(a, False, None, {}, method=method)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 128, 512])
    p.add_argument("--gbytes", type=float, default=1.0)
    args = p.parse_args()
    for n in args.sizes:
        count = int(args.gbytes * 2**30 / (8 * n * n))
        a = torch.randn(count, n, n, dtype=torch.float64, device="cuda")
        show(f"torch lu_factor n={n} count={count}", lambda: torch.linalg.lu_factor(a))
        for method in (["warp"] if n <= 32 else []) + ["cublas", "blocked"]:
            try:
                show(f"hybridla lu_factor {method} n={n}", lambda: _ours(a, method))
            except Exception as exc:  # noqa: BLE001
                print(f"## hybridla {method}: {type(exc).__name__}: {exc}")
        spd = torch.bmm(a, a.mT) + n * torch.eye(n, dtype=torch.float64, device="cuda")
        show(f"torch cholesky n={n}", lambda: torch.linalg.cholesky(spd))
        show(f"hybridla cholesky n={n}", lambda: hybridla.cholesky(spd, lower=True, check_finite=False))
        del a, spd
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
