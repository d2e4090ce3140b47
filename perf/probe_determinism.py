#!/usr/bin/env python3
"""Whether solve_mixed's low-precision LU is the same from run to run (a race between the
device's lanes would make it differ): on perf/mixed.py's kappa 1e6 matrix, for lowest single
and half-x3 and partial and window pivoting, three solves with refinement "none" (their x_0
compared bit for bit) and three full solves (their GMRES steps).

    python3 perf/probe_determinism.py --n 32768 --nb 2048
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

import hybridla
import mixed as tables  # perf/mixed.py, beside this file


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=2048)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    spec = tables.parse_matrix("kappa=1e6")
    a = cp.asfortranarray(tables.MatrixFactory(args.n, 0, cp).make(spec))
    b = cp.asarray(np.random.default_rng(1).standard_normal(args.n))
    for lowest in ("single", "half-x3"):
        for pivoting in ("partial", "window"):
            first_solutions = []
            with hybridla.config.set({"mixed.panel_pivoting": pivoting}):
                for run in range(args.runs):
                    x0, info0 = hybridla.solve_mixed(a, b, lowest=lowest, nb=args.nb,
                                                     refinement="none", fallback=False)
                    first_solutions.append(cp.asnumpy(x0))
                    _, info = hybridla.solve_mixed(a, b, lowest=lowest, nb=args.nb)
                    print(f"{lowest:8s} {pivoting:8s} run {run}: x_0's backward error "
                          f"{info0.residuals[0]:.3e}; refined: {info.inner_iterations} GMRES "
                          f"steps, code {info.iterations}", flush=True)
            equal = [np.array_equal(first_solutions[0], x) for x in first_solutions[1:]]
            print(f"{lowest:8s} {pivoting:8s} x_0 bit for bit the same in every run: {all(equal)}",
                  flush=True)


if __name__ == "__main__":
    main()
