#!/usr/bin/env python3
"""Where solve_mixed's time goes, over a grid of block sizes and low precisions (one matrix
built on the GPU with CuPy; GPU interface, or the CPU interface on a copy of it in host memory):
a tuning aid beside perf/mixed.py, which compares with the baselines.

    python3 perf/mixed_phases.py --n 32768 --nb 256 512 --lowest half-x3 tf32 \
        [--assume gen|pos] [--refinement classical-gmres] [--max-inner 50] [--max-iter 30]
        [--panel-leaf 0 64] [--panel-sms 0 48] [--interface cpu --copy-threads 8 16]

Matrices: gen = standard normal; pos = G G^T / n + I (G standard normal). One untimed warm-up
solve, then one timed solve per (nb, lowest); each row gives the phases of MixedInfo.seconds,
the iterations and the backward error ||b - A x||_inf / (||A||_inf ||x||_inf).
"""
from __future__ import annotations

import argparse
import itertools
import time

import cupy as cp

import hybridla


def matrix(n, assume, seed=0):
    rng = cp.random.default_rng(seed)
    g = rng.standard_normal((n, n), dtype=cp.float64)
    if assume == "gen":
        return cp.asfortranarray(g)
    a = g @ g.T
    a /= n
    a += cp.eye(n)
    del g
    return cp.asfortranarray(a)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, nargs="+", default=[512])
    p.add_argument("--lowest", nargs="+", default=["half-x3"])
    p.add_argument("--assume", default="gen", choices=("gen", "pos"))
    p.add_argument("--refinement", default="classical-gmres")
    p.add_argument("--max-inner", type=int, default=50)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--panel-leaf", type=int, nargs="+", default=[None],
                   help="mixed.panel_leaf values (default: the configured one)")
    p.add_argument("--panel-sms", type=int, nargs="+", default=[None],
                   help="device.panel_sms values (default: the configured one)")
    p.add_argument("--interface", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--copy-threads", type=int, nargs="+", default=[None],
                   help="device.copy_threads values (default: the configured one)")
    args = p.parse_args()
    a = matrix(args.n, args.assume)
    b = cp.asarray(cp.random.default_rng(1).standard_normal((args.n, 1)), order="F")
    norm_a = float(cp.abs(a).sum(axis=1).max())
    solve_a, solve_b = (a, b) if args.interface == "gpu" else \
        (cp.asnumpy(a, order="F"), cp.asnumpy(b, order="F"))
    options = dict(assume_a=args.assume, lower=True, refinement=args.refinement,
                   max_inner=args.max_inner, max_iter=args.max_iter, check_finite=False)
    hybridla.solve_mixed(solve_a, solve_b, lowest=args.lowest[0], nb=args.nb[0],
                         **options)  # warm-up
    print(f"| n | assume | interface | lowest | nb | panel leaf | panel SMs | copy threads | "
          f"time (s) | iterations | inner | fell back | phases (s) | backward error |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    for lowest, nb, leaf, sms, threads in itertools.product(
            args.lowest, args.nb, args.panel_leaf, args.panel_sms, args.copy_threads):
        settings = {key: value for key, value in (("mixed.panel_leaf", leaf),
                                                  ("device.panel_sms", sms),
                                                  ("device.copy_threads", threads))
                    if value is not None}
        with hybridla.config.set(settings):
            cp.cuda.Device().synchronize()
            started = time.perf_counter()
            x, info = hybridla.solve_mixed(solve_a, solve_b, lowest=lowest, nb=nb, **options)
            cp.cuda.Device().synchronize()
            seconds = time.perf_counter() - started
            x = cp.asarray(x)
            error = float(cp.abs(b - a @ x).max() / (norm_a * cp.abs(x).max()))
            phases = ", ".join(f"{k} {v:.3f}" for k, v in info.seconds.items())
            leaf = hybridla.config.get("mixed.panel_leaf")
            threads = hybridla.config.get("device.copy_threads")
            sms = hybridla.config.get("device.panel_sms")
            print(f"| {args.n} | {args.assume} | {args.interface} | {lowest} | {nb} | {leaf} | "
                  f"{sms} | {threads} | {seconds:.3f} | {info.iterations} | {info.inner_iterations} | "
                  f"{info.fell_back} | {phases} | {error:.2e} |", flush=True)


if __name__ == "__main__":
    main()
