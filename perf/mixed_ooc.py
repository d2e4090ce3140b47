#!/usr/bin/env python3
"""solve_mixed with the working-precision matrix kept on the host against out-of-core
lu_factor + lu_solve on the same host matrix (issue 31, item 4), float64, in the same process.

Usage (from the repository root):

    python3 perf/mixed_ooc.py --sizes 100000 [--budget-gib G] [--ooc auto] [--nb N]
        [--warmup-n 4096] [--warm-at-size] [--seed 0]

For each n: a randn matrix A and right-hand side b generated once, by block columns (no
second full-size array); then, after untimed calls of both at --warmup-n,

  1. solve_mixed(A, b, ooc=--ooc): on a GPU whose budget holds the float32 copy but not A
     beside it (n = 100,000 on an H100), A stays on the host and the refinement's products
     run there (info.a_on_host); its x checked by MAGMA's and cuSOLVER's stopping test,
     ||b - A x||_inf / (sqrt(n) eps ||A||_inf ||x||_inf) <= 1, computed on the host by block
     columns;
  2. lu_factor(A, overwrite_a=True) (out of core where A does not fit: ooc "auto") and
     lu_solve, on a copy of A when the host has room for one, else on A itself (then said so:
     A is gone and the LU's x is compared with solve_mixed's instead of checked against A).

With --warm-at-size, solve_mixed runs once more untimed at each n first (its row says how
long: the first call at a size grows the pinned staging slots, which the LU then reuses).

One row per run: seconds, where A's products ran, iterations, the stopping-test ratio; and
the ratio of the two times (the issue's target: solve_mixed at least 2x faster at n =
100,000). --budget-gib caps device.memory_budget for both (e.g. to force both paths at a
smaller n). Without a GPU it runs on the host backend (small sizes, with a budget).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

import numpy as np  # noqa: E402

import hybridla  # noqa: E402
from hybridla.bench.matrices import random_matrix  # noqa: E402
from hybridla.lapack._mixed_operators import host_product  # noqa: E402

BLOCK = 2048  # columns per block when generating, copying and checking A


def generate(n, seed):
    """(A, b): A n x n F-ordered randn, made a block column at a time by a thread per core
    (hybridla/bench/matrices.random_matrix: seconds at n = 100,000, not minutes)."""
    return random_matrix(n, np.float64, seed), np.random.default_rng(seed).standard_normal(n)


def stopping_ratio(a, x, b):
    """||b - A x||_inf / (sqrt(n) eps ||A||_inf ||x||_inf), A read by block columns."""
    x2 = x.reshape(-1, 1)
    r = np.abs(b.reshape(-1, 1) - host_product(a, x2, "N", None, a.dtype, BLOCK)).max()
    row_sums = np.zeros(a.shape[0])
    for j0 in range(0, a.shape[1], BLOCK):
        row_sums += np.abs(a[:, j0:j0 + BLOCK]).sum(axis=1)
    return float(r / (np.sqrt(len(b)) * np.finfo(a.dtype).eps * row_sums.max()
                      * np.abs(x).max()))


def room_for_a_copy(a) -> bool:
    """Whether the host's available memory holds another A with a tenth to spare."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return False
    return available > 1.1 * a.nbytes


def copy_of(a):
    work = np.empty_like(a, order="F")
    for j0 in range(0, a.shape[1], BLOCK):
        work[:, j0:j0 + BLOCK] = a[:, j0:j0 + BLOCK]
    return work


def mixed(a, b, opts):
    return hybridla.solve_mixed(a, b, nb=opts.nb, ooc=opts.ooc)


def lu(a, b, opts):
    lu_and_piv = hybridla.lu_factor(a, overwrite_a=True, nb=opts.nb)
    return hybridla.lu_solve(lu_and_piv, b)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192])
    parser.add_argument("--budget-gib", type=float, default=None,
                        help="device.memory_budget for both runs (default: as configured)")
    parser.add_argument("--ooc", default="auto", choices=["auto", "always", "never"],
                        help="solve_mixed's ooc (where A stays)")
    parser.add_argument("--nb", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-n", type=int, default=4096)
    parser.add_argument("--warm-at-size", action="store_true",
                        help="an untimed solve_mixed at each size before the timed one")
    opts = parser.parse_args(argv)
    config = {} if opts.budget_gib is None else \
        {"device.memory_budget": int(opts.budget_gib * 2 ** 30)}
    with hybridla.config.set(config):
        # untimed first: kernels compiled, handles made (both paths at a small order)
        small, small_b = generate(opts.warmup_n, opts.seed + 1)
        mixed(small, small_b, opts)
        lu(small, small_b, opts)
        del small
        print("| n | run | seconds | A's products | iterations | stopping-test ratio |")
        print("| --- | --- | --- | --- | --- | --- |")
        for n in opts.sizes:
            a, b = generate(n, opts.seed)
            if opts.warm_at_size:
                start = time.perf_counter()
                mixed(a, b, opts)
                print(f"(untimed first solve_mixed at n = {n}: "
                      f"{time.perf_counter() - start:.3f} s)", flush=True)
            start = time.perf_counter()
            x_mixed, info = mixed(a, b, opts)
            t_mixed = time.perf_counter() - start
            print(f"| {n} | solve_mixed | {t_mixed:.3f} | "
                  f"{'host' if info.a_on_host else 'device'} | {info.iterations}"
                  f"{' (fell back)' if info.fell_back else ''} | "
                  f"{stopping_ratio(a, x_mixed, b):.3g} |", flush=True)
            print(f"solve_mixed: {info.kept_columns} of A's columns kept on the device; "
                  f"{info.refinement}, {info.inner_iterations} GMRES iterations, "
                  f"backward errors {', '.join(f'{r:.2g}' for r in info.residuals)}",
                  flush=True)
            print("solve_mixed's phases (info.seconds): " + ", ".join(
                f"{phase} {seconds:.3f}" for phase, seconds in info.seconds.items()), flush=True)
            keep = room_for_a_copy(a)
            work = copy_of(a) if keep else a
            if not keep:
                print(f"(no room for a second {a.nbytes / 1e9:.0f} GB copy: lu_factor "
                      f"overwrites A; its x is compared with solve_mixed's)", flush=True)
            start = time.perf_counter()
            x_lu = lu(work, b, opts)
            t_lu = time.perf_counter() - start
            del work
            check = f"{stopping_ratio(a, x_lu, b):.3g}" if keep else \
                f"max |x_lu - x_mixed| / max |x_mixed| = " \
                f"{np.abs(x_lu - x_mixed).max() / np.abs(x_mixed).max():.3g}"
            print(f"| {n} | lu_factor + lu_solve | {t_lu:.3f} | | | {check} |")
            print(f"\nn = {n}: lu_factor + lu_solve / solve_mixed = {t_lu / t_mixed:.2f}x",
                  flush=True)
            del a


if __name__ == "__main__":
    main()
