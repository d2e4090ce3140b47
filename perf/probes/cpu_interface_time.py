"""Where a CPU-interface solve's time goes (n = 16384 on the GPU machine took 7 s, where the
factorization alone took 0.24 s on 2026-11-25's earlier code): lu_factor and solve timed with
the pool cap on and off, then one solve profiled.

    python3 perf/probes/cpu_interface_time.py --n 16384
"""
import argparse
import cProfile
import pstats
import time

import numpy as np

import hybridla

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=16384)
n = parser.parse_args().n
a = np.random.default_rng(0).standard_normal((n, n))
b = np.ones(n)


def timed(label, call, repeat=3):
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    print(f"{label}: " + " ".join(f"{s:.3f}" for s in seconds), flush=True)


for cap in (None, 1 << 30):
    with hybridla.config.set({"device.pool_max_bytes": cap}):
        timed(f"lu_factor, pool cap {cap}", lambda: hybridla.lu_factor(a, check_finite=False))
        timed(f"solve, pool cap {cap}", lambda: hybridla.solve(a, b, check_finite=False))
profile = cProfile.Profile()
profile.runcall(hybridla.solve, a, b, check_finite=False)
pstats.Stats(profile).sort_stats("cumtime").print_stats(25)
