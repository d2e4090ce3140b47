#!/usr/bin/env python3
"""Where a window-pivoted LU panel's time goes (panel/lu.getrf_panel_window, the mixed LU's
default): cuSOLVER sgetrf on the window of `--window` block rows, against the whole panel's
height, and the tall solve of the rows below (A21 U11^-1) as the reduced backend blocks it
(half-x3 GEMMs between strsm leaves of TRSM_LEAF) and as one cuBLAS strsm. Each timed alone on
the panel lane, host clock around a synchronized call, best of --repeat; the first step's
sizes (the tallest) and the middle step's.

    python3 perf/probe_window_panel.py --n 32768 --nb 1536 --window 1 2 3 --repeat 5
"""
from __future__ import annotations

import argparse

import numpy as np

from device_clock import best_of  # perf/device_clock.py, beside this file
from hybridla.backend import get_backend
from hybridla.backend.reduced import ReducedPrecisionOps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=1536)
    p.add_argument("--window", type=int, nargs="+", default=[2])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    ops = get_backend("cuda")
    n, nb = args.n, args.nb
    rng = np.random.default_rng(0)
    panel = np.asfortranarray(rng.standard_normal((n, nb)), np.float32)
    low = ops.matrix(n, n, np.float32, nb)
    try:
        reduced = ReducedPrecisionOps(ops, "half-x3", low)
        lane = ops.lane("gpu:panel")
        print(f"| rows | what | ms |\n|---:|---|---:|")
        for rows in (n, n // 2):
            def fresh():
                ops.from_host(lane, panel[:rows], low.block(0, rows, 0, nb))

            def getrf(r1):
                fresh()
                with lane:
                    ops.getrf_panel(lane, low, 0, 0, 0, nb, r1=r1)
            copy_only = best_of(args.repeat, fresh)
            for window in [*args.window, None]:
                r1 = rows if window is None else min(window * nb, rows)
                label = "whole panel" if window is None else f"window of {window} block rows"
                seconds = best_of(args.repeat, lambda: getrf(r1)) - copy_only
                print(f"| {rows} | sgetrf, {label} ({r1} x {nb}) | {seconds * 1e3:.2f} |")
            getrf(nb)  # U11 in place for the solves
            below = low.block(nb, rows, 0, nb)
            U11 = low.block(0, nb, 0, nb)
            saved = ops.to_host(lane, below)

            def restore():
                ops.from_host(lane, saved, below)
            restore_only = best_of(args.repeat, restore)
            for name, solver in (("blocked, half-x3 GEMMs", reduced), ("cuBLAS strsm", ops)):
                def solve():
                    restore()
                    with lane:
                        solver.trsm(lane, "R", "U", "N", "N", 1, U11, below)
                seconds = best_of(args.repeat, solve) - restore_only
                print(f"| {rows} | A21 U11^-1 ({rows - nb} x {nb}), {name} | "
                      f"{seconds * 1e3:.2f} |")
    finally:
        low.close()


if __name__ == "__main__":
    main()
