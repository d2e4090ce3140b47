"""Probe (GPU machine): recursive Cholesky on the device against cuSOLVER's dpotrf.

    R(A):  n <= base: cuSOLVER potrf.  Else split at h (a multiple of 1024 near n/2):
           R(A11);  A21 := A21 L11^-H (solve);  A22 -= A21 A21^T (halving into gemms);  R(A22)

The solve is cuBLAS dtrsm in one call, or recursive halving into gemms down to a `leaf` where
cuBLAS dtrsm takes over. All on one stream; prints the time of each variant and its ratio.
Usage: python3 perf/probes/probe_recursive_potrf.py N [N ...]
"""
import ctypes
import sys
import time

import cupy as cp
import numpy as np
from nvmath.bindings import cublas, cusolverDn

ONE, MINUS_ONE = np.array(1.0), np.array(-1.0)
blas, solver = cublas.create(), cusolverDn.create()
cublas.set_pointer_mode(blas, 0)  # host scalars
for handle, set_stream in ((blas, cublas.set_stream), (solver, cusolverDn.set_stream)):
    set_stream(handle, cp.cuda.get_current_stream().ptr)
TALLY = {}


def timed(name):
    def wrap(f):
        def inner(*args):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            f(*args)
            stop.record()
            TALLY.setdefault(name, []).append((start, stop))
        return inner
    return wrap


class M:
    def __init__(self, a):
        self.a, self.ld = a, a.shape[0]

    def p(self, r, c):
        return self.a.data.ptr + (r + c * self.ld) * 8


def potrf(A, k0, k1, work, info):
    n = k1 - k0
    cusolverDn.dpotrf(solver, 0, n, A.p(k0, k0), A.ld, work.data.ptr, work.size, info.data.ptr)


def gemm_nt(A, r0, r1, c0, c1, k0, k1):
    """A[r0:r1, c0:c1] -= A[r0:r1, k0:k1] A[c0:c1, k0:k1]^T"""
    cublas.dgemm(blas, 0, 1, r1 - r0, c1 - c0, k1 - k0, MINUS_ONE.ctypes.data, A.p(r0, k0), A.ld,
                 A.p(c0, k0), A.ld, ONE.ctypes.data, A.p(r0, c0), A.ld)


def syrk_halving(A, c0, c1, k0, k1, leaf):
    """lower triangle of A[c0:c1, c0:c1] -= A[c0:c1, K] A[c0:c1, K]^T"""
    if c1 - c0 <= leaf:
        cublas.dsyrk(blas, 0, 0, c1 - c0, k1 - k0, MINUS_ONE.ctypes.data, A.p(c0, k0), A.ld,
                     ONE.ctypes.data, A.p(c0, c0), A.ld)
        return
    mid = c0 + -(-(c1 - c0) // (2 * leaf)) * leaf
    gemm_nt(A, mid, c1, c0, mid, k0, k1)
    syrk_halving(A, c0, mid, k0, k1, leaf)
    syrk_halving(A, mid, c1, k0, k1, leaf)


def trsm_one(A, r0, r1, k0, k1):
    """A[r0:r1, k0:k1] := A[r0:r1, k0:k1] L^-T, L = A[k0:k1, k0:k1] lower"""
    cublas.dtrsm(blas, 1, 0, 1, 0, r1 - r0, k1 - k0, ONE.ctypes.data, A.p(k0, k0), A.ld,
                 A.p(r0, k0), A.ld)


def trsm_halving(A, r0, r1, k0, k1, leaf):
    if k1 - k0 <= leaf:
        trsm_one(A, r0, r1, k0, k1)
        return
    h = k0 + -(-(k1 - k0) // (2 * 1024)) * 1024
    trsm_halving(A, r0, r1, k0, h, leaf)
    # X_b = (A_b - X_a L_ba^T) L_bb^-T
    cublas.dgemm(blas, 0, 1, r1 - r0, k1 - h, h - k0, MINUS_ONE.ctypes.data, A.p(r0, k0), A.ld,
                 A.p(h, k0), A.ld, ONE.ctypes.data, A.p(r0, h), A.ld)
    trsm_halving(A, r0, r1, h, k1, leaf)


def recursive(A, k0, k1, base, trsm_leaf, syrk_leaf, work, info):
    if k1 - k0 <= base:
        timed("potrf")(potrf)(A, k0, k1, work, info)
        return
    h = k0 + -(-(k1 - k0) // (2 * 1024)) * 1024
    recursive(A, k0, h, base, trsm_leaf, syrk_leaf, work, info)
    if trsm_leaf:
        timed("trsm")(trsm_halving)(A, h, k1, k0, h, trsm_leaf)
    else:
        timed("trsm")(trsm_one)(A, h, k1, k0, h)
    timed("syrk")(syrk_halving)(A, h, k1, k0, h, syrk_leaf)
    recursive(A, h, k1, base, trsm_leaf, syrk_leaf, work, info)


def spd(n):
    g = cp.random.default_rng(0).standard_normal((n, n))
    a = g @ g.T / n
    a += cp.eye(n)
    return cp.asfortranarray(a)


def best(f, a0, rep=3):
    times = []
    for _ in range(rep):
        a = a0.copy(order="F")
        TALLY.clear()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        f(a)
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    parts = {k: sum(cp.cuda.get_elapsed_time(s, e) for s, e in v) for k, v in TALLY.items()}
    return min(times), a, parts


for n in map(int, sys.argv[1:]):
    a0 = spd(n)
    lwork = cusolverDn.dpotrf_buffer_size(solver, 0, n, a0.data.ptr, n)
    work, info = cp.empty(lwork), cp.zeros(1, cp.int32)
    t_ref, ref, _ = best(lambda a: potrf(M(a), 0, n, work, info), a0)
    print(f"n={n} cuSOLVER dpotrf {t_ref:.4f} s  ({n**3/3/t_ref/1e12:.1f} TFLOP/s)", flush=True)
    for base in (16384, 8192, 4096):
        for trsm_leaf in (0, 1024, 2048, 4096):
            for syrk_leaf in (1024, 2048):
                if base >= n:
                    continue
                t, a, parts = best(lambda a: recursive(M(a), 0, n, base, trsm_leaf, syrk_leaf,
                                                       work, info), a0)
                err = float(cp.abs(cp.tril(a) - cp.tril(ref)).max())
                split = " ".join(f"{k} {v:.1f}ms" for k, v in parts.items())
                print(f"n={n} base {base} trsm_leaf {trsm_leaf or 'cublas'} syrk_leaf {syrk_leaf}:"
                      f" {t:.4f} s  {t_ref / t:.3f}x  max|L-Lref| {err:.1e}  [{split}]",
                      flush=True)
    del a0, ref
    cp.get_default_memory_pool().free_all_blocks()
