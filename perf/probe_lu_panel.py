#!/usr/bin/env python3
"""The LU panel alone on the GPU: cuSOLVER getrf on a whole tall panel against recursive halving
(panel/lu.py) down to leaves factored by the fused kernel (cuda/getrf_panel.cu) or by tournament
pivoting (cuda/tslu.cu), on the panel lane as a factorization runs it. Each result is checked
against cuSOLVER's: the pivots that differ and LAPACK's ratio ||P A - L U||_1 / (m ||A||_1 eps).

    python3 perf/probe_lu_panel.py --m 32768 --width 1024 256 --leaf 0 32 64 128 \
        --dtype float32 float64 [--min-rows 256 1024] [--cooperative 1 0] [--busy 0 1] \
        [--pivoting partial tournament] [--tree 256,8 512,16] [--repeat 3]

leaf 0 = cuSOLVER getrf on the whole panel; a leaf >= width = the fused kernel (or the
tournament) on the whole panel (it takes up to 256 columns; the tournament up to 32). --tree:
the tournament's rows per level-0 node and children per node above. --min-rows: the kernel's fewest rows per block (fewer blocks on a
short panel); --cooperative 0: an ordinary launch; --busy 1: a float32 GEMM of 16384^3 runs on
another stream meanwhile, as a trailing update does. Times: CUDA events around the panel on its
stream (GPU idle waiting for the host included), median of `repeat` after a warm-up; "enqueue":
the host's time to enqueue the panel.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import time

import cupy as cp
import numpy as np

import hybridla.backend
import hybridla.backend.cuda as cuda_backend
from hybridla.backend import _driver
from hybridla.panel import lu as panel_lu
from hybridla.panel.lu import getrf_panel_recursive


def factor(backend, a, leaf, busy, pivoting="partial"):
    """Factor the device panel `a` (F-ordered CuPy) in place; (pivots, info, milliseconds on the
    GPU, milliseconds to enqueue)."""
    m, width = a.shape
    A = backend.matrix(m, width, a.dtype, width, device_ptr=a.data.ptr, ld=m)
    lane = backend.lane("gpu:panel")
    cp.cuda.Device().synchronize()  # our streams do not wait for CuPy's
    if busy is not None:
        with busy[0]:
            busy[1] @ busy[1]
    fused_shape = backend.fused_panel_shape
    try:
        with lane:
            if leaf == 0:  # cuSOLVER on the whole panel, whatever its width
                backend.fused_panel_shape = lambda *args: None
            start = _driver.Event().record(lane.handle)
            enqueue = time.perf_counter()
            whole = backend.getrf_panel if pivoting == "partial" else backend.tslu_panel
            if leaf == 0 or leaf >= width:
                whole(lane, A, 0, 0, 0, width)
            else:
                getrf_panel_recursive(backend, lane, A, 0, 0, width, leaf, pivoting)
            enqueue = time.perf_counter() - enqueue
            end = _driver.Event().record(lane.handle)
        end.synchronize()
        pivots = cp.empty(width, cp.int32)
        cp.cuda.runtime.memcpy(pivots.data.ptr, int(A.pivots_dev), width * 4, 4)
        info = cp.empty(1, cp.int32)
        cp.cuda.runtime.memcpy(info.data.ptr, int(A.info_dev), 4, 4)
        cp.cuda.Device().synchronize()
        return cp.asnumpy(pivots), int(info[0]), end.time_since(start), 1000 * enqueue
    finally:
        backend.fused_panel_shape = fused_shape
        A.close()


def ratio(a0, lu, pivots):
    m, width = a0.shape
    order = np.arange(m)
    for i, p in enumerate(pivots):
        order[i], order[p] = order[p], order[i]
    lower = cp.tril(lu, -1)
    lower[:width] += cp.eye(width, dtype=lu.dtype)
    upper = cp.triu(lu[:width])
    residual = a0[cp.asarray(order)] - lower @ upper
    norm = lambda x: float(cp.abs(x).sum(axis=0).max())  # noqa: E731
    return norm(residual) / (m * norm(a0) * np.finfo(a0.dtype).eps)


def add_tree_argument(parser):
    """--tree CHUNK,FAN ...: the tournament trees to try (panel/lu.TOURNAMENT_CHUNK, _FAN)."""
    parser.add_argument("--tree", nargs="+", default=[f"{panel_lu.TOURNAMENT_CHUNK},"
                                                      f"{panel_lu.TOURNAMENT_FAN}"])


def use_tree(text):
    """Set the tournament's tree from a --tree value; returns (chunk, fan)."""
    panel_lu.TOURNAMENT_CHUNK, panel_lu.TOURNAMENT_FAN = map(int, text.split(","))
    return panel_lu.tournament_tree()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, default=32768)
    p.add_argument("--width", type=int, nargs="+", default=[1024])
    p.add_argument("--leaf", type=int, nargs="+", default=[0, 32, 64, 128])
    p.add_argument("--dtype", nargs="+", default=["float32", "float64"])
    p.add_argument("--min-rows", type=int, nargs="+", default=[cuda_backend._FUSED_PANEL_MIN_ROWS])
    p.add_argument("--cooperative", type=int, nargs="+", default=[1])
    p.add_argument("--busy", type=int, nargs="+", default=[0])
    p.add_argument("--pivoting", nargs="+", default=["partial"], choices=panel_lu.PIVOTING)
    add_tree_argument(p)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    backend = hybridla.backend.get_backend("cuda")
    print(f"device: {backend.device_name}, {backend.multiprocessors} SMs")
    print("| dtype | m | width | leaf | pivoting | min rows / tree | cooperative | busy GPU | "
          "time (ms) | us per column | enqueue (ms) | pivots unlike cuSOLVER's | ratio | info |")
    print("|---|---:|---:|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    variants = [("partial", min_rows, cooperative) for min_rows in args.min_rows
                for cooperative in args.cooperative] * ("partial" in args.pivoting) + \
        [("tournament", tree, 0) for tree in args.tree] * ("tournament" in args.pivoting)
    stream = cp.cuda.Stream(non_blocking=True)
    hog = cp.ones((16384, 16384), cp.float32)
    for dtype in args.dtype:
        rng = cp.random.default_rng(0)
        for width in args.width:
            a0 = cp.asfortranarray(rng.standard_normal((args.m, width), dtype=dtype))
            reference = None
            for leaf, (pivoting, shape, cooperative), busy in itertools.product(
                    args.leaf, variants, args.busy):
                if leaf == 0 and (pivoting, shape, cooperative) != variants[0]:
                    continue  # cuSOLVER's panel has no such options
                if pivoting == "partial":
                    cuda_backend._FUSED_PANEL_MIN_ROWS = shape
                    cuda_backend._FUSED_PANEL_COOPERATIVE = bool(cooperative)
                else:
                    use_tree(shape)
                times, enqueues = [], []
                for _ in range(args.repeat + 1):
                    a = a0.copy(order="F")
                    pivots, info, ms, enqueue = factor(backend, a, leaf,
                                                       (stream, hog) if busy else None, pivoting)
                    times.append(ms)
                    enqueues.append(enqueue)
                if reference is None:
                    reference = pivots
                unlike = int((pivots != reference).sum())
                ms = statistics.median(times[1:])
                print(f"| {dtype} | {args.m} | {width} | {leaf} | {pivoting} | {shape} | "
                      f"{'yes' if cooperative else 'no'} | {'yes' if busy else 'no'} | {ms:.2f} | "
                      f"{1000 * ms / width:.2f} | {statistics.median(enqueues[1:]):.2f} | "
                      f"{unlike} | {ratio(a0, a, pivots):.3g} | {info} |", flush=True)


if __name__ == "__main__":
    main()
