#!/usr/bin/env python3
"""How fast the mixed solvers' low-precision factorization could be if its latency-bound pieces
cost nothing: the same solve with the LU's panels (or the Cholesky's diagonal blocks) replaced by
a stub that only writes identity pivots and info 0. What remains is the trailing updates on the
tensor cores, the look-ahead, the interchanges and the scheduling: a floor for this design's
factor phase, set beside the real one in the same process.

    python3 perf/probe_mixed_floor.py --n 32768 --matrix randn [--nb 1536] \
        [--lu-panel-sms 48 0] [--repeat 2]
    python3 perf/probe_mixed_floor.py --n 32768 --matrix spd-kappa=1e4

The stubbed factor is garbage (no pivoting, diagonal blocks not factored), so its solve is not
refined (max_iter 1, no fallback: its overflow on narrowing is reported as an error, which
carries the MixedInfo) and only its factor phase is reported; tensor-core GEMMs take
the same time whatever the values. One untimed solve first, then the best of --repeat per row.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import time

import cupy as cp
import numpy as np
import hybridla
from hybridla.backend import _driver
from hybridla.backend import cuda as cuda_backend

import mixed as tables  # perf/mixed.py, beside this file


@contextlib.contextmanager
def free_panels():
    """CudaBackend.getrf_panel and potrf_panel as stubs: pivots r0 + i for column c0 + i, info 0."""
    ones_up = cp.arange(1, 1 << 16, dtype=cp.int32)  # 1-based local pivots, as getrf's
    real_getrf, real_potrf = cuda_backend.CudaBackend.getrf_panel, \
        cuda_backend.CudaBackend.potrf_panel

    def getrf_panel(self, lane, A, step, r0, c0, c1):
        count = c1 - c0
        piv_ptr = int(A.pivots_dev) + c0 * 4
        cp.cuda.runtime.memcpyAsync(piv_ptr, ones_up.data.ptr, count * 4,
                                    cp.cuda.runtime.memcpyDeviceToDevice, lane.handle)
        self.kernels.launch("pivots_to_global", (-(-count // 256),), (256,), lane.handle,
                            ctypes.c_void_p(piv_ptr), ctypes.c_int(count), ctypes.c_int(r0))
        _driver.memset_d32_async(int(A.info_dev) + step * 4, 0, 1, lane.handle)

    def potrf_panel(self, lane, A, step, uplo, k0, k1):
        _driver.memset_d32_async(int(A.info_dev) + step * 4, 0, 1, lane.handle)

    cuda_backend.CudaBackend.getrf_panel = getrf_panel
    cuda_backend.CudaBackend.potrf_panel = potrf_panel
    try:
        yield
    finally:
        cuda_backend.CudaBackend.getrf_panel = real_getrf
        cuda_backend.CudaBackend.potrf_panel = real_potrf


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=None, help="default: mixed.nb (auto)")
    p.add_argument("--matrix", default="randn", help="a perf/mixed.py matrix word")
    p.add_argument("--lowest", default="half-x3")
    p.add_argument("--lu-panel-sms", type=int, nargs="+", default=[None],
                   help="mixed.lu_panel_sms values (default: the configured one)")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    spec = tables.parse_matrix(args.matrix)
    a = cp.asfortranarray(tables.MatrixFactory(args.n, 0, cp).make(spec))
    b = cp.asarray(cp.random.default_rng(1).standard_normal((args.n, 1)), order="F")
    options = dict(assume_a="pos" if spec.spd else "gen", lower=True, check_finite=False,
                   lowest=args.lowest, nb=args.nb)
    print("| n | matrix | nb | LU panel SMs | panels | factor (s) | whole solve (s) | iterations |")
    print("|---:|---|---:|---:|---|---:|---:|---|")
    hybridla.solve_mixed(a, b, **options)  # workspaces, kernels
    for sms in args.lu_panel_sms:
        settings = {} if sms is None else {"mixed.lu_panel_sms": sms}
        for stubbed in (False, True):
            stub = free_panels() if stubbed else contextlib.nullcontext()
            extra = dict(max_iter=1, fallback=False) if stubbed else {}
            with hybridla.config.set(settings), stub:
                best = None
                for _ in range(args.repeat):
                    cp.cuda.Device().synchronize()
                    started = time.perf_counter()
                    try:
                        _, info = hybridla.solve_mixed(a, b, **options, **extra)
                    except np.linalg.LinAlgError as failure:  # the stub's garbage overflows
                        info = failure.info
                    cp.cuda.Device().synchronize()
                    seconds = time.perf_counter() - started
                    if best is None or info.seconds["factor"] < best[0]:
                        best = (info.seconds["factor"], seconds, info.iterations)
            shown_sms = hybridla.config.get("mixed.lu_panel_sms", None) if sms is None else sms
            print(f"| {args.n} | {args.matrix} | {args.nb or 'auto'} | {shown_sms} | "
                  f"{'free (stub)' if stubbed else 'real'} | {best[0]:.4f} | "
                  f"{best[1] if not stubbed else float('nan'):.4f} | {best[2]} |", flush=True)


if __name__ == "__main__":
    main()
