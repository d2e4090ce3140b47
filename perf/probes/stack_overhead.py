#!/usr/bin/env python3
"""Probe: where the wall time of a batched call goes beyond its kernels (cProfile of 20 calls of
hybridla.cholesky and hybridla.lu_factor on a float64 torch stack of 131072 32 x 32 members,
check_finite=False), against the same calls' kernel time (torch.cuda events around each).

    python3 perf/probes/stack_overhead.py
"""
import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import torch  # noqa: E402

import hybridla  # noqa: E402

n, count = 32, 131072
x = torch.randn(count, n, n, dtype=torch.float64, device="cuda")
spd = torch.bmm(x, x.mT) + n * torch.eye(n, dtype=torch.float64, device="cuda")
for name, fn in (("cholesky", lambda: hybridla.cholesky(spd, lower=True, check_finite=False)),
                 ("lu_factor", lambda: hybridla.lu_factor(x, check_finite=False)),
                 ("torch cholesky", lambda: torch.linalg.cholesky(spd)),
                 ("torch lu_factor", lambda: torch.linalg.lu_factor(x))):
    fn()
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        fn()
        torch.cuda.synchronize()
    profile.disable()
    print(f"## {name}: 20 calls")
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)
