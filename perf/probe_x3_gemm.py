#!/usr/bin/env python3
"""What half-x3's two GEMMs cost against one, at the mixed LU's first trailing update
(w x w x nb, w = n - 2 nb, float32 C): backend/reduced.py multiplies hi hi (depth nb) and then
[hi lo] [lo; hi] scaled by 2^-11 (depth 2 nb), so C is read and written twice; with the low
halves stored unscaled (lo' = half(a - hi), subnormal for |a| < 2^-3) the three products are
one GEMM of depth 3 nb, [hi hi lo'] [hi; lo'; hi], C once; and the same GEMM with the lows
kept normal by opposite powers of two, [hi 2^-t hi 2^(t-11) lo] [hi; 2^(t-11) lo; 2^-t hi]
(lo = 2^11 (a - hi) rounded, --shift t). Also the rounding included
(reduced.gemm as the LU calls it) and one half GEMM of depth nb (the tensor cores' rate).
Host clock around synchronized calls, best of --repeat.

    python3 perf/probe_x3_gemm.py --n 32768 --nb 2048 --repeat 5
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from device_clock import best_of  # perf/device_clock.py, beside this file
from half_gemm import half_gemm  # perf/half_gemm.py
from hybridla.backend import get_backend
from hybridla.backend.reduced import ReducedPrecisionOps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--shift", type=int, nargs="+", default=[5, 6])
    args = p.parse_args()
    ops = get_backend("cuda")
    n, nb = args.n, args.nb
    w = n - 2 * nb
    low = ops.matrix(n, n, np.float32, nb)
    try:
        reduced = ReducedPrecisionOps(ops, "half-x3", low)
        lane = ops.lane("gpu:update")
        rng = cp.random.default_rng(0)
        a = rng.standard_normal((w, nb), dtype=cp.float32)
        b = rng.standard_normal((nb, w), dtype=cp.float32)
        for src, block in ((a, low.block(2 * nb, n, 0, nb)), (b, low.block(0, nb, 2 * nb, n))):
            src = cp.asfortranarray(src)
            cp.cuda.runtime.memcpy2D(block.ptr, block.ld * 4, src.data.ptr, src.shape[0] * 4,
                                     src.shape[0] * 4, src.shape[1],
                                     cp.cuda.runtime.memcpyDeviceToDevice)
        A, B, C = low.block(2 * nb, n, 0, nb), low.block(0, nb, 2 * nb, n), \
            low.block(2 * nb, n, 2 * nb, n)

        def split(x):  # hi and the unscaled lo'
            hi = x.astype(cp.float16)
            return hi, (x - hi.astype(cp.float32)).astype(cp.float16)

        a_hi, a_lo = split(a)
        b_hi, b_lo = split(b)
        scaled = (cp.float16(2048) * (a - a_hi.astype(cp.float32))).astype(cp.float16)
        a_cat3 = cp.asfortranarray(cp.concatenate([a_hi, a_hi, a_lo], axis=1))
        b_cat3 = cp.asfortranarray(cp.concatenate([b_hi, b_lo, b_hi], axis=0))
        a_two = (cp.asfortranarray(a_hi), cp.asfortranarray(cp.concatenate([a_hi, scaled], 1)))
        b_scaled = (cp.float16(2048) * (b - b_hi.astype(cp.float32))).astype(cp.float16)
        b_two = (cp.asfortranarray(b_hi), cp.asfortranarray(cp.concatenate([b_scaled, b_hi], 0)))
        def shifted(t):  # [hi 2^-t hi 2^(t-11) lo] and [hi; 2^(t-11) lo; 2^-t hi]
            a_sh = [a_hi, (a_hi.astype(cp.float32) * 2.0 ** -t).astype(cp.float16),
                    ((a - a_hi.astype(cp.float32)) * 2.0 ** t).astype(cp.float16)]
            b_sh = [b_hi, ((b - b_hi.astype(cp.float32)) * 2.0 ** t).astype(cp.float16),
                    (b_hi.astype(cp.float32) * 2.0 ** -t).astype(cp.float16)]
            return (cp.asfortranarray(cp.concatenate(a_sh, axis=1)),
                    cp.asfortranarray(cp.concatenate(b_sh, axis=0)))

        shifts = {t: shifted(t) for t in args.shift}
        out = cp.zeros((w, w), dtype=cp.float32, order="F")

        def gemm(x, y, depth, alpha, beta):
            half_gemm(lane, "N", w, w, depth, alpha, x, w, y, depth, beta, out, w)

        def reduced_gemm():
            with lane:
                reduced.gemm(lane, -1, A, B, 1, C)

        def two():
            gemm(a_two[0], b_two[0], nb, -1, 1)
            gemm(a_two[1], b_two[1], 2 * nb, -1 / 2048, 1)

        rows = [("reduced.gemm half-x3 (rounding + 2 GEMMs)", reduced_gemm, 3),
                ("2 GEMMs, depth nb and 2 nb (operands ready)", two, 3),
                ("1 GEMM, depth 3 nb, unscaled lo", lambda: gemm(a_cat3, b_cat3, 3 * nb, -1, 1), 3),
                *((f"1 GEMM, depth 3 nb, lows shifted by 2^{t}",
                   lambda x=x, y=y: gemm(x, y, 3 * nb, -1, 1), 3)
                  for t, (x, y) in shifts.items()),
                ("1 half GEMM, depth nb", lambda: gemm(a_two[0], b_two[0], nb, -1, 1), 1)]
        print(f"n {n}, nb {nb}, w {w}\n\n| what | ms | TFLOP/s (products' flops) |\n|---|---:|---:|")
        for label, call, products in rows:
            seconds = best_of(args.repeat, call)
            print(f"| {label} | {seconds * 1e3:.2f} | "
                  f"{products * 2 * w * w * nb / seconds / 1e12:.0f} |")
        # how far the unscaled form is from float32's product, against the scaled one
        exact = a[:4096].astype(cp.float64) @ b[:, :4096].astype(cp.float64)
        for label, x, y in (("scaled (2 GEMMs)", None, None), ("unscaled lo", a_cat3, b_cat3),
                            *((f"shifted by 2^{t}", *shifts[t]) for t in shifts)):
            if x is None:
                approx = a_hi[:4096].astype(cp.float32) @ b_hi[:, :4096].astype(cp.float32) + \
                    (a_two[1][:4096].astype(cp.float32) @ b_two[1][:, :4096].astype(cp.float32)) / 2048
            else:
                approx = x[:4096].astype(cp.float32) @ y[:, :4096].astype(cp.float32)
            error = float(cp.abs(approx - exact).max() / cp.abs(exact).max())
            print(f"| max error of the product, {label} | {error:.2e} | |")
    finally:
        low.close()


if __name__ == "__main__":
    main()
