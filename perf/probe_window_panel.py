#!/usr/bin/env python3
"""Where a window-pivoted LU panel's time goes (panel/lu.getrf_panel_window, the mixed LU's
default): cuSOLVER sgetrf on the window of `--window` block rows, against the whole panel's
height, and the tall solve of the rows below (A21 U11^-1) as the reduced backend blocks it
(half-x3 GEMMs down to leaves of TRSM_LEAF, each a tf32-x3 product with its inverse) and as
one cuBLAS strsm. Each timed alone on
the panel lane, host clock around a synchronized call, best of --repeat, less the device copy
that restores the matrix before each; the first step's
sizes (the tallest) and the middle step's. Then the whole panel as the LU runs it,
getrf_panel_window with each `--leaf` (0: the window in one getrf; else recursive halving
down to leaves that pivot within windows of their own width), the solve below included.

    python3 perf/probe_window_panel.py --n 32768 --nb 1536 --window 1 2 3 --leaf 0 512 \
        --trsm-leaf 64 128 --repeat 5
"""
from __future__ import annotations

import argparse
import contextlib

import cupy as cp
import numpy as np

from device_clock import best_of  # perf/device_clock.py, beside this file
from hybridla.backend import get_backend
from hybridla.backend import reduced as reduced_backend
from hybridla.backend.reduced import ReducedPrecisionOps
from hybridla.panel.lu import getrf_panel_window


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=1536)
    p.add_argument("--window", type=int, nargs="+", default=[2])
    p.add_argument("--leaf", type=int, nargs="+", default=[0])
    p.add_argument("--trsm-leaf", type=int, nargs="+", default=[reduced_backend.TRSM_LEAF])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    ops = get_backend("cuda")
    n, nb = args.n, args.nb
    rng = np.random.default_rng(0)
    panel = cp.asarray(np.asfortranarray(rng.standard_normal((n, nb)), np.float32), order="F")
    low = ops.matrix(n, n, np.float32, nb)
    try:
        reduced = ReducedPrecisionOps(ops, "half-x3", low)
        lane = ops.lane("gpu:panel")
        print(f"| rows | what | ms |\n|---:|---|---:|")
        for rows in (n, n // 2):
            def fresh():
                copy_block(panel, low.block(0, rows, 0, nb))

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
            saved = cp.empty((n, nb), dtype=cp.float32, order="F")
            copy_block(saved, below, to_array=True)

            def restore():
                copy_block(saved, below)
            restore_only = best_of(args.repeat, restore)
            solvers = [(f"blocked, half-x3 GEMMs, leaves {leaf}", reduced, leaf)
                       for leaf in args.trsm_leaf] + [("cuBLAS strsm", ops, None)]
            for name, solver, trsm_leaf in solvers:
                def solve():
                    restore()
                    with lane:
                        solver.trsm(lane, "R", "U", "N", "N", 1, U11, below)
                with trsm_leaves(trsm_leaf):
                    seconds = best_of(args.repeat, solve) - restore_only
                print(f"| {rows} | A21 U11^-1 ({rows - nb} x {nb}), {name} | "
                      f"{seconds * 1e3:.2f} |")
            for window in args.window:
                for leaf in args.leaf:
                    def whole():
                        fresh()
                        with lane:
                            getrf_panel_window(reduced, ops, lane, low, 0, 0, nb, window, leaf)
                    seconds = best_of(args.repeat, whole) - copy_only
                    print(f"| {rows} | getrf_panel_window, window {window}, leaf {leaf} | "
                          f"{seconds * 1e3:.2f} |")
    finally:
        low.close()


@contextlib.contextmanager
def trsm_leaves(order):
    """backend/reduced.py's TRSM_LEAF set to `order` (None: as it is) for the block's calls."""
    kept = reduced_backend.TRSM_LEAF
    reduced_backend.TRSM_LEAF = kept if order is None else order
    try:
        yield
    finally:
        reduced_backend.TRSM_LEAF = kept


def copy_block(array, block, to_array=False):
    """block := array[:block.rows, :block.cols] (or the other way), device to device."""
    pitch, width = array.shape[0] * 4, block.rows * 4
    source = (block.ptr, block.ld * 4) if to_array else (array.data.ptr, pitch)
    target = (array.data.ptr, pitch) if to_array else (block.ptr, block.ld * 4)
    cp.cuda.runtime.memcpy2D(*target, *source, width, block.cols,
                             cp.cuda.runtime.memcpyDeviceToDevice)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
