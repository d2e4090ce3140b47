#!/usr/bin/env python3
"""How much a randomized LU with window pivoting grows (the mixed LU's mixed.panel_pivoting
"window"), in float64 on the host: the matrix transformed by hybridla/butterfly.py's random
butterflies, then a blocked right-looking LU whose step k searches its pivots within `window`
block rows from the diagonal and solves the rows below by U11^-1, against partial pivoting of
the matrix itself (scipy.linalg.lu). Prints max |l_ij|, the growth max |u_ij| / max |a_ij| and
the condition numbers of L and U.

    python3 perf/probes/growth_window.py --n 4096 --nb 512 --window 1 2 4
"""
from __future__ import annotations

import argparse

import numpy as np
import scipy.linalg as sl

from hybridla.butterfly import RandomButterfly, transform


def window_lu(a, nb, window):
    """L, U of the blocked LU with pivots searched for within window * nb rows."""
    a = a.copy()
    n = len(a)
    for k0 in range(0, n, nb):
        k1, r1 = min(k0 + nb, n), min(k0 + window * nb, n)
        p, lower, upper = sl.lu(a[k0:r1, k0:k1])
        a[k0:r1, :] = a[k0:r1, :][np.argmax(p, axis=0)]  # the window's rows, pivots first
        a[k0:r1, k0:k1] = np.tril(lower, -1) + np.vstack([upper, np.zeros((r1 - k1, k1 - k0))])
        a[r1:, k0:k1] = sl.solve_triangular(upper, a[r1:, k0:k1].T, trans="T").T
        unit_lower = np.tril(a[k0:k1, k0:k1], -1) + np.eye(k1 - k0)
        a[k0:k1, k1:] = sl.solve_triangular(unit_lower, a[k0:k1, k1:], lower=True,
                                            unit_diagonal=True)
        a[k1:, k1:] -= a[k1:, k0:k1] @ a[k0:k1, k1:]
    return np.tril(a, -1) + np.eye(n), np.triu(a)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--nb", type=int, default=512)
    p.add_argument("--window", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    n = args.n
    q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
    q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
    matrices = {"randn": rng.standard_normal((n, n)),
                "kappa 1e6": (q1 * np.logspace(0, -6, n)) @ q2.T}
    butterfly = RandomButterfly(n)
    print("| matrix | pivoting | max abs l_ij | growth | cond(L) | cond(U) |")
    print("|---|---|---:|---:|---:|---:|")
    for name, a in matrices.items():
        _, lower, upper = sl.lu(a)
        print(f"| {name} | partial (of A) | {abs(lower).max():.1f} | "
              f"{abs(upper).max() / abs(a).max():.1f} | {np.linalg.cond(lower):.1e} | "
              f"{np.linalg.cond(upper):.1e} |")
        randomized = transform(butterfly.left, butterfly.right, a)
        for window in args.window:
            lower, upper = window_lu(randomized, args.nb, window)
            print(f"| {name} | window of {window} | {abs(lower).max():.1f} | "
                  f"{abs(upper).max() / abs(randomized).max():.1f} | "
                  f"{np.linalg.cond(lower):.1e} | {np.linalg.cond(upper):.1e} |", flush=True)


if __name__ == "__main__":
    main()
