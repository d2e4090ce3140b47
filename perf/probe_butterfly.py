#!/usr/bin/env python3
"""What randomizing the mixed LU's copy costs (gesv_mixed with mixed.panel_pivoting "diagonal"):
the host's RandomButterfly, keeping its groups on the device, and cuda/butterfly.cu's two-sided
kernel on an n x n float32 copy, each timed alone (host clock around a synchronized call, best
of --repeat), beside a plain copy of the same bytes for the bandwidth it could reach.

    python3 perf/probe_butterfly.py --n 32768 --repeat 5
"""
from __future__ import annotations

import argparse
import time

import cupy as cp
import numpy as np

from hybridla.backend import get_backend
from hybridla.butterfly import RandomButterfly


def best(repeat, call):
    seconds = float("inf")
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        started = time.perf_counter()
        call()
        cp.cuda.Device().synchronize()
        seconds = min(seconds, time.perf_counter() - started)
    return seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    n = args.n
    ops = get_backend("cuda")
    low = ops.matrix(n, n, np.float32, 1536)
    try:
        lane = ops.lane("gpu:update")
        block = low.block(0, n, 0, n)
        butterfly = RandomButterfly(n)
        keep = lambda name, groups: ops.keep_on_device(low, name, groups)  # noqa: E731
        left, right = keep("left", butterfly.left), keep("right", butterfly.right)
        rows = [("RandomButterfly(n) on the host", best(args.repeat, lambda: RandomButterfly(n))),
                ("keep_on_device of both groups", best(args.repeat, lambda: (
                    keep("left", butterfly.left), keep("right", butterfly.right)))),
                ("butterfly_two_sided (float32, in place)", best(args.repeat, lambda: (
                    ops.butterfly_two_sided(lane, low, block, left, right, 1e30))))]
        source = cp.empty((n, n), cp.float32, order="F")
        target = cp.empty_like(source)
        rows.append(("cupy copy of the same bytes", best(args.repeat, lambda: target.__setitem__(
            Ellipsis, source))))
    finally:
        low.close()
    gigabytes = 2 * n * n * 4 / 1e9
    print(f"| n = {n} | ms | GB/s (read + write of the copy) |\n|---|---:|---:|")
    for name, seconds in rows:
        rate = f"{gigabytes / seconds:.0f}" if "copy" in name or "two_sided" in name else "–"
        print(f"| {name} | {seconds * 1e3:.3f} | {rate} |")


if __name__ == "__main__":
    main()
