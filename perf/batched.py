#!/usr/bin/env python3
"""Batched LU and Cholesky of stacks of matrices on the GPU: hybridla against PyTorch.

Usage (from the repository root, on a machine with a GPU, PyTorch and hybridla's cuda extra):

    python3 perf/batched.py --sizes 32 128 512 --gbytes 1 [--repeats 7] [--routines lu chol] \
        [--method auto|cublas|blocked|all] [--nb 32] [--check-finite] [--sample 4]

For each order n, a float64 stack of count = gbytes * 2^30 / (8 n^2) matrices (torch.randn,
C-contiguous: row-major members, as PyTorch makes them; Cholesky: X X^T + n I), factored in
the same process on the same GPU by

  hybridla    hybridla.lu_factor(A, check_finite=False) / hybridla.cholesky(A, lower=True,
              check_finite=False) on the torch tensor (Cholesky: a warp per member up to 32 x 32,
              cuSOLVER potrfBatched above) (the GPU interface: results are torch
              tensors, pivots on the device, as torch's); --method picks the batched LU
              ("auto": hybridla's choice; "warp": a warp per member, n <= 32; "cublas": cuBLAS
              getrfBatched; "blocked": the blocked batched LU with panel width --nb; "all": a
              row for each that applies)
  torch       torch.linalg.lu_factor(A) / torch.linalg.cholesky(A)

Both allocate their results on every call (hybridla from PyTorch's caching allocator, as torch
does) and copy A first (neither overwrites it). check_finite=False: torch checks nothing; with
--check-finite hybridla's pass over the stack is timed as well.

Timing: the median of --repeats calls after one untimed warm-up each, the two libraries
alternating, each call between torch.cuda.synchronize() (wall time, host overhead included).
Columns: n, count, implementation, time (ms), spread (max - min of the --repeats, ms; torch's
row: its calls alternating with the last implementation's), TFLOP/s by LAPACK's counts (hybridla/bench/
flops.py: getrf_flops, potrf_flops, times count), "torch / this" (>= 1: at least as fast as
torch), the residual of --sample members (the first, the last and ones between): LU
||P A - L U||_1 / (n ||A||_1 eps), Cholesky ||A - L L^T||_1 / (n ||A||_1 eps), the largest
over the sample (< 30 passes LAPACK's testers).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # the working tree's hybridla, before any installed one

import hybridla  # noqa: E402
from hybridla.bench.flops import getrf_flops, potrf_flops  # noqa: E402

EPS = float(np.finfo(np.float64).eps)


def _torch():
    try:
        import torch
    except ImportError:
        sys.exit("perf/batched.py needs PyTorch (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("perf/batched.py needs a GPU that PyTorch sees")
    return torch


def timed(fn, repeats, torch):
    """Median wall time of fn() over `repeats` calls, each between synchronizes; the result of
    the last call."""
    times, result = [], None
    for _ in range(repeats):
        result = None  # the previous result's memory back to the allocator first
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def sample_members(count, sample):
    return sorted({int(i) for i in np.linspace(0, count - 1, max(min(sample, count), 1))})


def lu_ratio(a, lu, piv, one_based):
    """||P A - L U||_1 / (n ||A||_1 eps) for one member (host arrays)."""
    n = a.shape[0]
    pa = a.copy()
    for i, p in enumerate(np.asarray(piv).astype(np.int64) - (1 if one_based else 0)):
        if p != i:
            pa[[i, p]] = pa[[p, i]]
    lower = np.tril(lu, -1) + np.eye(n)
    upper = np.triu(lu)
    return np.abs(pa - lower @ upper).sum(axis=0).max() / (n * np.abs(a).sum(axis=0).max() * EPS)


def chol_ratio(a, c):
    n = a.shape[0]
    lower = np.tril(c)
    return np.abs(a - lower @ lower.T).sum(axis=0).max() / (n * np.abs(a).sum(axis=0).max() * EPS)


def lu_methods(n, method):
    """The batched LUs to time: "all" is every one that takes members of order n."""
    if method == "all":
        return (["warp"] if n <= 32 else []) + ["cublas", "blocked"]
    return [method]


def hybridla_lu(torch, a, method, nb, check_finite):
    if method == "auto":
        return lambda: hybridla.lu_factor(a, check_finite=check_finite, nb=nb)
    from hybridla import _stacked_device
    backend = hybridla.backend.get_backend("cuda")

    def run():
        with backend.call():
            return _stacked_device.lu_factor(a, check_finite, None, {"nb": nb}, method=method)
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--gbytes", type=float, default=1.0, help="each stack's size, GiB")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--routines", nargs="+", default=["lu", "chol"], choices=["lu", "chol"])
    parser.add_argument("--method", default="auto",
                        choices=["auto", "warp", "cublas", "blocked", "all"])
    parser.add_argument("--nb", type=int, default=None, help="the blocked LU's panel width")
    parser.add_argument("--check-finite", action="store_true")
    parser.add_argument("--sample", type=int, default=4, help="members checked per stack")
    args = parser.parse_args(argv)
    torch = _torch()
    torch.manual_seed(0)
    print(f"# {datetime.date.today()} {torch.cuda.get_device_name()} | torch {torch.__version__} "
          f"(cuda {torch.version.cuda}) | hybridla {hybridla.__version__} | "
          f"python {platform.python_version()}")
    print(f"# python3 perf/batched.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# float64, {args.gbytes} GiB per stack, median of {args.repeats}, "
          f"check_finite={args.check_finite}")
    print("| n | count | routine | implementation | time (ms) | spread (ms) | TFLOP/s | "
          "torch / this | residual |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        count = max(1, int(args.gbytes * 2**30) // (8 * n * n))
        members = sample_members(count, args.sample)
        if "lu" in args.routines:
            a = torch.randn(count, n, n, dtype=torch.float64, device="cuda")
            a_host = a[members].cpu().numpy()
            flops = count * getrf_flops(n, n)
            _, (lu, piv) = timed(lambda a=a: torch.linalg.lu_factor(a), 1, torch)  # warm-up
            torch_times, rows = [], []
            for method in lu_methods(n, args.method):
                ours = hybridla_lu(torch, a, method, args.nb, args.check_finite)
                ours()  # warm-up: kernels compiled, pools filled
                t_ours, t_torch = [], []
                for _ in range(args.repeats):  # alternating, one call each
                    t, result = timed(ours, 1, torch)
                    t_ours.append(t)
                    t, (lu, piv) = timed(lambda a=a: torch.linalg.lu_factor(a), 1, torch)
                    t_torch.append(t)
                our_lu, our_piv = result
                residual = max(lu_ratio(a_host[j], our_lu[i].cpu().numpy(),
                                        our_piv[i].cpu().numpy(), one_based=False)
                               for j, i in enumerate(members))
                rows.append((f"hybridla ({method})", t_ours, residual))
                torch_times = t_torch
            torch_residual = max(lu_ratio(a_host[j], lu[i].cpu().numpy(), piv[i].cpu().numpy(),
                                          one_based=True) for j, i in enumerate(members))
            rows.append(("torch.linalg.lu_factor", torch_times, torch_residual))
            _print_rows(n, count, "getrf", rows, statistics.median(torch_times), flops)
            del a, lu, piv, result
        if "chol" in args.routines:
            x = torch.randn(count, n, n, dtype=torch.float64, device="cuda")
            a = torch.bmm(x, x.mT)
            del x
            a.diagonal(dim1=-2, dim2=-1).add_(n)
            a_host = a[members].cpu().numpy()
            flops = count * potrf_flops(n)

            def ours(a=a):
                return hybridla.cholesky(a, lower=True, check_finite=args.check_finite)
            ours()
            timed(lambda a=a: torch.linalg.cholesky(a), 1, torch)
            t_ours, t_torch = [], []
            for _ in range(args.repeats):
                t, c = timed(ours, 1, torch)
                t_ours.append(t)
                t, c_torch = timed(lambda a=a: torch.linalg.cholesky(a), 1, torch)
                t_torch.append(t)
            method = "warp" if n <= 32 else "potrfBatched"  # _stacked_device's choice
            rows = [(f"hybridla ({method})", t_ours,
                     max(chol_ratio(a_host[j], c[i].cpu().numpy()) for j, i in enumerate(members))),
                    ("torch.linalg.cholesky", t_torch,
                     max(chol_ratio(a_host[j], c_torch[i].cpu().numpy())
                         for j, i in enumerate(members)))]
            _print_rows(n, count, "potrf", rows, statistics.median(t_torch), flops)
            del a, c, c_torch
        torch.cuda.empty_cache()


def _print_rows(n, count, routine, rows, torch_time, flops):
    """One row per implementation: the median of its times, their spread (max - min)."""
    for name, times, residual in rows:
        seconds = statistics.median(times)
        print(f"| {n} | {count} | {routine} | {name} | {seconds * 1e3:.3f} | "
              f"{(max(times) - min(times)) * 1e3:.3f} | {flops / seconds / 1e12:.2f} | "
              f"{torch_time / seconds:.2f} | {residual:.2g} |", flush=True)


if __name__ == "__main__":
    main()
