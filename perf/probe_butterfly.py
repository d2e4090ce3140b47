#!/usr/bin/env python3
"""What randomizing the mixed LU's copy costs (gesv_mixed with mixed.panel_pivoting "window"):
the host's RandomButterfly, keeping its groups on the device, and the backend's narrow of an
n x n float64 matrix into its float32 copy, plain (cuda/convert.cu) and with the butterflies
(cuda/butterfly.cu), each timed alone (host clock around a synchronized call, best of
--repeat).

    python3 perf/probe_butterfly.py --n 32768 --repeat 5
"""
from __future__ import annotations

import argparse

import numpy as np

from device_clock import best_of  # perf/device_clock.py, beside this file
from hybridla.backend import get_backend
from hybridla.butterfly import RandomButterfly


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    n = args.n
    ops = get_backend("cuda")
    source, low = ops.matrix(n, n, np.float64, 1536), ops.matrix(n, n, np.float32, 1536)
    try:
        lane = ops.lane("gpu:update")
        whole = source.block(0, n, 0, n), low.block(0, n, 0, n)
        ones = np.ones(n)
        butterfly = RandomButterfly(n)
        keep = lambda name, groups: ops.keep_on_device(low, name, groups)  # noqa: E731
        groups = keep("left", butterfly.left), keep("right", butterfly.right)
        timed = {
            "RandomButterfly(n) on the host": lambda: RandomButterfly(n),
            "keep_on_device of both groups": lambda: (keep("left", butterfly.left),
                                                      keep("right", butterfly.right)),
            "narrow, float64 -> float32": lambda: ops.narrow(lane, low, *whole, ones, ones,
                                                             1e30),
            "narrow with the butterflies, float64 -> float32": lambda: ops.narrow(
                lane, low, *whole, ones, ones, 1e30, butterfly=groups)}
        rows = [(name, best_of(args.repeat, call)) for name, call in timed.items()]
    finally:
        source.close()
        low.close()
    gigabytes = n * n * (8 + 4) / 1e9
    print(f"| n = {n} | ms | GB/s (read of A + write of the copy) |\n|---|---:|---:|")
    for name, seconds in rows:
        rate = f"{gigabytes / seconds:.0f}" if "narrow" in name else "–"
        print(f"| {name} | {seconds * 1e3:.3f} | {rate} |")


if __name__ == "__main__":
    main()
