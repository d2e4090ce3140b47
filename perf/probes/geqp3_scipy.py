#!/usr/bin/env python3
"""Probe: scipy's QR with column pivoting and least squares on the host's cores (the baselines
of issue 29): dgeqp3 at each n, and lstsq (gelsd, scipy's default, and gelsy) at m x n.

    python3 perf/probes/geqp3_scipy.py [--n 4096 8192] [--lstsq 8192 4096]
"""
import argparse
import os
import time

import numpy as np
import scipy
import scipy.linalg as sl
from scipy.linalg.lapack import dgeqp3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--lstsq", type=int, nargs=2, default=[8192, 4096])
    args = p.parse_args()
    print(f"scipy {scipy.__version__}, numpy {np.__version__}, cores {os.cpu_count()}")
    np.show_config()
    rng = np.random.default_rng(0)
    for n in args.n:
        a = np.asfortranarray(rng.standard_normal((n, n)))
        t = time.perf_counter()
        dgeqp3(a, lwork=3 * (n + 1) + (n + 1) * 64)
        print(f"dgeqp3 n={n}: {time.perf_counter() - t:.3f} s", flush=True)
    m, n = args.lstsq
    a = np.asfortranarray(rng.standard_normal((m, n)))
    b = rng.standard_normal((m, 1))
    for driver in ("gelsd", "gelsy"):
        t = time.perf_counter()
        sl.lstsq(a, b, lapack_driver=driver)
        print(f"lstsq {m}x{n} {driver}: {time.perf_counter() - t:.3f} s", flush=True)


if __name__ == "__main__":
    main()
