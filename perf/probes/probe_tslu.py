#!/usr/bin/env python3
"""Where a tournament-pivoting leaf's time goes (cuda/tslu.cu): each kernel launch of
`tslu_panel` timed on its own by CUDA events, for leaves of several heights (one tree level,
two, ...), next to cuBLAS trsm on the same A21 (the alternative to the finish kernel's solve).

    python3 perf/probes/probe_tslu.py --m 256 2048 32768 --width 32 --dtype float32 \
        [--tree 256,8 512,16] [--repeat 5]

Times: medians over `repeat` calls after a warm-up, milliseconds of GPU time per kernel.
"""
from __future__ import annotations

import argparse
import collections
import statistics

import cupy as cp

import hybridla.backend
from hybridla.backend import _driver, tournament


def add_tree_argument(parser):
    """--tree CHUNK,FAN ...: the tournament trees to try (backend/tournament.TOURNAMENT_CHUNK,
    TOURNAMENT_FAN, which cuda/tslu.cu's launches read)."""
    parser.add_argument("--tree", nargs="+", default=[f"{tournament.TOURNAMENT_CHUNK},"
                                                      f"{tournament.TOURNAMENT_FAN}"])


def use_tree(text):
    """Set the tournament's tree from a --tree value; returns (chunk, fan)."""
    tournament.TOURNAMENT_CHUNK, tournament.TOURNAMENT_FAN = map(int, text.split(","))
    return tournament.tournament_tree()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, nargs="+", default=[256, 2048, 32768])
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--dtype", nargs="+", default=["float32"])
    add_tree_argument(p)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    backend = hybridla.backend.get_backend("cuda")
    print(f"device: {backend.device_name}, {backend.multiprocessors} SMs")
    print("| dtype | m | width | tree | levels | tslu (ms) | finish (ms) | cuBLAS trsm (ms) | "
          "whole leaf (ms) |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    launch = backend.kernels.launch
    times = collections.defaultdict(list)

    def timed_launch(name, grid, block, stream, *rest, **kw):
        start = _driver.Event().record(stream)
        launch(name, grid, block, stream, *rest, **kw)
        times[name.rsplit("_", 1)[0]].append((start, _driver.Event().record(stream)))

    backend.kernels.launch = timed_launch
    lane = backend.lane("gpu:panel")
    for dtype in args.dtype:
        for m in args.m:
            a0 = cp.asfortranarray(cp.random.default_rng(0).standard_normal((m, args.width),
                                                                              dtype=dtype))
            for tree in args.tree:
                chunk, fan = use_tree(tree)
                a = a0.copy(order="F")
                A = backend.matrix(m, args.width, a.dtype, args.width, device_ptr=a.data.ptr,
                                   ld=m)
                times.clear()
                whole, trsm = [], []
                try:
                    for _ in range(args.repeat + 1):
                        cp.copyto(a, a0)
                        cp.cuda.Device().synchronize()
                        with lane:
                            start = _driver.Event().record(lane.handle)
                            backend.tslu_panel(lane, A, 0, 0, 0, args.width)
                            end = _driver.Event().record(lane.handle)
                            backend.trsm(lane, "R", "U", "N", "N", 1,
                                         A.block(0, args.width, 0, args.width),
                                         A.block(args.width, m, 0, args.width))
                            after = _driver.Event().record(lane.handle)
                        after.synchronize()
                        whole.append(end.time_since(start))
                        trsm.append(after.time_since(end))
                finally:
                    A.close()
                kernel = {name: statistics.median(e.time_since(s) for s, e in pairs[1:])
                          for name, pairs in times.items() if len(pairs) > 1}
                levels, nodes = 1, -(-m // chunk)
                while nodes > 1:
                    nodes, levels = -(-nodes // fan), levels + 1
                print(f"| {dtype} | {m} | {args.width} | {tree} | {levels} | "
                      f"{kernel.get('tslu', 0):.4f} | {kernel.get('tslu_finish', 0):.4f} | "
                      f"{statistics.median(trsm[1:]):.4f} | {statistics.median(whole[1:]):.4f} |",
                      flush=True)


if __name__ == "__main__":
    main()
