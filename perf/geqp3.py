#!/usr/bin/env python3
"""QR with column pivoting and the rank-revealing least-squares solve: hybridla against scipy.

Usage (from the repository root, on the GPU machine):

    python3 perf/geqp3.py [--sizes 4096 8192] [--lstsq 8192 4096] [--repeat 3] [--check-max 8192]

One process, the implementations alternating within each repetition (median of --repeat after
one untimed warm-up of each at n = 512; the spread is the range):

  geqp3 (float64, n x n, randn)
    scipy           scipy.linalg.lapack.dgeqp3(a) (LAPACK, the host's cores; the strongest
                    baseline: qr(pivoting=True, mode="raw") is this plus copies)
    hybridla cpu    hybridla.geqp3(a) on the NumPy array, defaults (the cuda backend: the
                    matrix up, the blocked geqp3 on the GPU, the factors back)
    hybridla gpu    hybridla.geqp3(d_a) on a CuPy array (its upload outside the clock)
  lstsq (float64, m x n randn, one right-hand side)
    scipy gelsd     scipy.linalg.lstsq(a, b) (its default driver)
    scipy gelsy     scipy.linalg.lstsq(a, b, lapack_driver="gelsy") (the strongest here)
    hybridla gelsy  hybridla.lstsq(a, b, lapack_driver="gelsy") on NumPy arrays, defaults

Columns: time (s), spread (max - min), scipy / this (the geqp3 rows against dgeqp3, the lstsq
rows against gelsd and gelsy), and a check: geqp3, ||A P - Q R||_1 / (n ||A||_1 eps) (Q from
LAPACK's orgqr on the factors, for n <= --check-max); lstsq, ||x - x_gelsd|| / ||x_gelsd|| and
the rank.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np
import scipy
import scipy.linalg as sl
from scipy.linalg.lapack import dgeqp3, dorgqr

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # the working tree's hybridla, before any installed one

import hybridla  # noqa: E402
from hybridla.bench.harness import cupy, cupy_sync, to_host  # noqa: E402

EPS = float(np.finfo(np.float64).eps)


def timed(fn):
    sync = cupy_sync if cupy() is not None else (lambda: None)
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return time.perf_counter() - start, result


def alternate(candidates, repeat):
    """{name: (times, last result)}: each candidate once per round, rounds of `repeat`."""
    times = {name: [] for name in candidates}
    results = {}
    for _ in range(repeat):
        for name, fn in candidates.items():
            seconds, results[name] = timed(fn)
            times[name].append(seconds)
    return {name: (times[name], results[name]) for name in candidates}


def geqp3_ratio(a, factors, jpvt, tau):
    n = a.shape[1]
    q, _, _ = dorgqr(np.asfortranarray(factors), tau)
    return np.linalg.norm(a[:, jpvt] - q @ np.triu(factors), 1) / (n * np.linalg.norm(a, 1) * EPS)


def row(name, times, base, check):
    median = statistics.median(times)
    ratios = " / ".join(f"{statistics.median(b) / median:.2f}" for b in base)
    print(f"| {name} | {median:.3f} | {max(times) - min(times):.3f} | {ratios} | {check} |",
          flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--lstsq", type=int, nargs=2, default=[8192, 4096])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--check-max", type=int, default=8192)
    args = p.parse_args(argv)
    cp = cupy()
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | hybridla "
          f"{hybridla.__version__} | scipy {scipy.__version__} | {os.cpu_count()} cores | "
          f"cupy {'yes' if cp else 'no'}")
    rng = np.random.default_rng(0)
    warm = np.asfortranarray(rng.standard_normal((512, 512)))
    dgeqp3(warm)
    hybridla.geqp3(warm)
    if cp is not None:
        hybridla.geqp3(cp.asarray(warm, order="F"))
    print("\n| geqp3 n | time (s) | spread | vs dgeqp3 | check |\n|---|---:|---:|---:|---:|")
    for n in args.sizes:
        a = np.asfortranarray(rng.standard_normal((n, n)))
        d_a = cp.asarray(a, order="F") if cp is not None else None
        candidates = {"scipy dgeqp3": lambda: dgeqp3(a, lwork=3 * (n + 1) + (n + 1) * 64),
                      "hybridla cpu": lambda: hybridla.geqp3(a)}
        if d_a is not None:
            candidates["hybridla gpu"] = lambda: hybridla.geqp3(d_a)
        measured = alternate(candidates, args.repeat)
        base = [measured["scipy dgeqp3"][0]]
        for name, (times, result) in measured.items():
            if name == "scipy dgeqp3":
                factors, jpvt, tau = result[0], result[1] - 1, result[2]
            else:
                factors, jpvt, tau = to_host(result[0]), result[1], result[2]
            check = f"{geqp3_ratio(a, factors, jpvt, tau):.2g}" if n <= args.check_max else ""
            row(f"{name} {n}", times, base, check)
        del d_a
    m, n = args.lstsq
    a = np.asfortranarray(rng.standard_normal((m, n)))
    b = rng.standard_normal(m)
    print(f"\n| lstsq {m} x {n} | time (s) | spread | vs gelsd / gelsy | check |\n"
          f"|---|---:|---:|---:|---:|")
    measured = alternate({"scipy gelsd": lambda: sl.lstsq(a, b),
                          "scipy gelsy": lambda: sl.lstsq(a, b, lapack_driver="gelsy"),
                          "hybridla gelsy": lambda: hybridla.lstsq(a, b, lapack_driver="gelsy")},
                         args.repeat)
    x_ref = measured["scipy gelsd"][1][0]
    base = [measured["scipy gelsd"][0], measured["scipy gelsy"][0]]
    for name, (times, result) in measured.items():
        error = np.linalg.norm(result[0] - x_ref) / np.linalg.norm(x_ref)
        row(name, times, base, f"{error:.1e}, rank {result[2]}")


if __name__ == "__main__":
    main()
