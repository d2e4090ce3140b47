#!/usr/bin/env python3
"""Where solve_mixed's time goes, over a grid of block sizes and low precisions (one matrix
built on the GPU with CuPy; GPU interface, or the CPU interface on a copy of it in host memory):
a tuning aid beside perf/mixed.py, which compares with the baselines.

    python3 perf/mixed_phases.py --n 32768 --nb 256 512 --lowest half-x3 tf32 \
        [--assume gen|pos] [--matrix spd-kappa=1e4] [--refinement classical-gmres classical]
        [--inner-tol 1e-4 1e-6] [--max-inner 50] [--max-iter 30] [--repeat 2]
        [--lookahead 1 2] [--tail 0 3072]
        [--panel-leaf 0 64] [--panel-sms 0 48] [--lu-panel-sms 0 48]
        [--interface cpu --copy-threads 8 16] [--config mixed.solve_lane=panel,update ...]
        [--profile 40]

Matrices: gen = standard normal; pos = G G^T / n + I (G standard normal); --matrix takes one of
perf/mixed.py's words instead (randn, kappa=K, spd-kappa=K: the same matrices as its tables;
spd-* solve with assume pos). One untimed warm-up solve per block size, then the best of
--repeat timed solves per setting; each row gives the phases of MixedInfo.seconds, the
iterations and the backward error ||b - A x||_inf / (||A||_inf ||x||_inf), with the
solver's own history of it (MixedInfo.residuals: x_0, then each refinement step). --profile N runs one
more solve of the last setting under cProfile and prints its N costliest functions by cumulative
and by own time (a host wait shows as the own time of the call that waits).
"""
from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats

import cupy as cp

import hybridla
from hybridla.bench import harness
from hybridla.bench.matrices import MatrixFactory, parse_matrix  # perf/mixed.py's matrices


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


def _value(text):
    """A --config value: an integer, a number, true or false, or the word itself."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, nargs="+", default=[512])
    p.add_argument("--lowest", nargs="+", default=["half-x3"])
    p.add_argument("--assume", default="gen", choices=("gen", "pos"))
    p.add_argument("--matrix", default=None,
                   help="a perf/mixed.py matrix word (randn, kappa=K, spd-kappa=K) instead")
    p.add_argument("--inner-tol", type=float, nargs="+", default=[None],
                   help="mixed.inner_tol values (default: the configured one)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--lookahead", type=int, nargs="+", default=[None],
                   help="mixed.lookahead values (default: the configured one)")
    p.add_argument("--tail", type=int, nargs="+", default=[None],
                   help="mixed.tail values: the Cholesky's last columns in one cuSOLVER potrf")
    p.add_argument("--refinement", nargs="+", default=["classical-gmres"])
    p.add_argument("--max-inner", type=int, default=50)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--panel-leaf", type=int, nargs="+", default=[None],
                   help="mixed.panel_leaf values (default: the configured one)")
    p.add_argument("--panel-sms", type=int, nargs="+", default=[None],
                   help="device.panel_sms values (default: the configured one)")
    p.add_argument("--lu-panel-sms", type=int, nargs="+", default=[None],
                   help="mixed.lu_panel_sms values (0: none reserved; default: the configured "
                        "one); gesv_mixed's panels use this instead of device.panel_sms")
    p.add_argument("--interface", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--copy-threads", type=int, nargs="+", default=[None],
                   help="device.copy_threads values (default: the configured one)")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=V1,V2",
                   help="any other config keys, each swept over its values")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="profile one more solve of the last setting; print N functions")
    args = p.parse_args()
    if args.matrix:
        spec = parse_matrix(args.matrix)
        args.assume = "pos" if spec.spd else "gen"
        a = cp.asfortranarray(MatrixFactory(args.n, 0, cp).make(spec))
    else:
        a = matrix(args.n, args.assume)
    b = cp.asarray(cp.random.default_rng(1).standard_normal((args.n, 1)), order="F")
    norm_a = float(cp.abs(a).sum(axis=1).max())
    solve_a, solve_b = (a, b) if args.interface == "gpu" else \
        (cp.asnumpy(a, order="F"), cp.asnumpy(b, order="F"))
    options = dict(assume_a=args.assume, lower=True,
                   max_inner=args.max_inner, max_iter=args.max_iter, check_finite=False)
    print(f"| n | matrix | interface | lowest | refinement | nb | inner tol | lookahead | tail | "
          f"panel leaf | panel SMs | LU panel SMs | copy threads | time (s) | iterations | inner | "
          f"fell back | phases (s) | backward error | its history |")
    print("|---:|---|---|---|---|" + "---:|" * 11 + "---|---|---|---|")
    warm = set()
    swept = [[(key, _value(v)) for v in values.split(",")]
             for key, values in (item.split("=", 1) for item in args.config)]
    for (lowest, refinement, nb, inner_tol, leaf, sms, lu_sms, threads, lookahead, tail,
         others) in itertools.product(args.lowest, args.refinement, args.nb, args.inner_tol,
                                      args.panel_leaf, args.panel_sms, args.lu_panel_sms,
                                      args.copy_threads, args.lookahead, args.tail,
                                      itertools.product(*swept)):
        options["refinement"] = refinement
        if (lowest, nb) not in warm:  # the workspaces of this block size, the kernels' loading
            hybridla.solve_mixed(solve_a, solve_b, lowest=lowest, nb=nb, **options)
            warm.add((lowest, nb))
        settings = {key: value for key, value in (("mixed.panel_leaf", leaf),
                                                  ("device.panel_sms", sms),
                                                  ("mixed.lu_panel_sms", lu_sms),
                                                  ("device.copy_threads", threads),
                                                  ("mixed.inner_tol", inner_tol),
                                                  ("mixed.lookahead", lookahead),
                                                  ("mixed.tail", tail), *others)
                    if value is not None}
        with hybridla.config.set(settings):
            best = harness.measure(
                lambda _, last: hybridla.solve_mixed(solve_a, solve_b, lowest=lowest, nb=nb,
                                                     **options),
                harness.no_setup, args.repeat, sync=harness.cupy_sync, statistic=min)
            seconds, (x, info) = best.seconds, best.result
            x = cp.asarray(x)
            error = float(cp.abs(b - a @ x).max() / (norm_a * cp.abs(x).max()))
            phases = ", ".join(f"{k} {v:.3f}" for k, v in info.seconds.items())
            config = {key: hybridla.config.get(key, None) for key in (
                "mixed.panel_leaf", "device.copy_threads", "device.panel_sms",
                "mixed.lu_panel_sms", "mixed.inner_tol", "mixed.lookahead", "mixed.tail")}
            print(f"| {args.n} | {args.matrix or args.assume} | {args.interface} | {lowest} | "
                  f"{refinement} | "
                  f"{nb} | {config['mixed.inner_tol']:g} | {config['mixed.lookahead']} | "
                  f"{config['mixed.tail']} | {config['mixed.panel_leaf']} | "
                  f"{config['device.panel_sms']} | {config['mixed.lu_panel_sms']} | "
                  f"{config['device.copy_threads']} | "
                  f"{seconds:.4f} | {info.iterations} | {info.inner_iterations} | "
                  f"{info.fell_back} | {phases} | {error:.2e} | "
                  f"{' '.join(f'{e:.1e}' for e in info.residuals)} |"
                  + "".join(f" {key}={value}" for key, value in others), flush=True)
        if args.profile:
            profile = cProfile.Profile()
            with hybridla.config.set(settings):
                cp.cuda.Device().synchronize()
                profile.enable()
                _, info = hybridla.solve_mixed(solve_a, solve_b, lowest=lowest, nb=nb, **options)
                cp.cuda.Device().synchronize()
                profile.disable()
    if args.profile:
        print(f"\nprofiled solve: iterations {info.iterations}, inner {info.inner_iterations}, "
              + ", ".join(f"{k} {v:.4f}" for k, v in info.seconds.items()))
        for order in ("cumulative", "tottime"):
            pstats.Stats(profile).sort_stats(order).print_stats(args.profile)


if __name__ == "__main__":
    main()
