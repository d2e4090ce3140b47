#!/usr/bin/env python3
"""Solves on host factors (issue 31 item 3): the host solve (LAPACK on the factors where they
are) against the streamed one (b up once, the factors' block columns through the device once
per triangular solve; lapack/getrs_ooc.py, potrs_ooc.py), CPU interface, in the same process,
with the cost model's choice (configuration solve.place "auto") beside the measured one.

Usage (from the repository root):

    python3 perf/ooc_solve.py --sizes 32768 65536 --nrhs 1 256 --routines getrs potrs \
        [--repeat 2] [--nb N] [--budget-gib G] [--trace-dir DIR]

The factors are made, not factored (an LU of n = 65536 would take longer than the solves): a
unit lower L and an upper U with off-diagonal entries uniform in (-1, 1) / n and U's diagonal
in [1, 2], well conditioned, in one F-ordered host array (34 GB at n = 65536 in float64), with
identity pivots; potrs reads the same array's upper triangle as a Cholesky factor U. Each row:
the routine, n, k, the host and the streamed solve's seconds (the best of --repeat, after one
untimed call of each at n = 2048), streamed / host, the cost model's times and pick, the
faster measured place, and max |x_streamed - x_host| / max |x_host|. check_finite=False:
the check would read the factors once more.

Without a GPU it runs on the host backend (small sizes; the streamed path in host memory).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

import numpy as np  # noqa: E402

import hybridla  # noqa: E402
from hybridla import config  # noqa: E402
from hybridla.backend import available_backends, get_backend  # noqa: E402
from hybridla.scheduler.plan import CostModel, make_plan  # noqa: E402


def make_factors(n, dtype, seed=0):
    """L (unit, below the diagonal) and U (on and above) in one F-ordered n x n array, filled a
    block of columns per thread (NumPy's generators release the GIL)."""
    lu = np.empty((n, n), dtype=dtype, order="F")
    threads = os.cpu_count() or 1
    step = -(-n // threads)

    def fill(index):
        j0, j1 = index * step, min((index + 1) * step, n)
        rng = np.random.default_rng([seed, index])
        block = lu[:, j0:j1]
        block[...] = rng.uniform(-1.0, 1.0, block.shape) / n
        for j in range(j0, j1):
            block[j, j - j0] = 1.0 + rng.uniform()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fill, range(-(-n // step))))
    return lu


def timed(function, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def solve(routine, lu, pivots, b, backend, place, trace=None):
    with config.set({"solve.place": place}):
        if routine == "getrs":
            return hybridla.lu_solve((lu, pivots), b, check_finite=False, backend=backend,
                                     trace=trace)
        return hybridla.cho_solve((lu, False), b, check_finite=False, backend=backend,
                                  trace=trace)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32768, 65536])
    parser.add_argument("--nrhs", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--routines", nargs="+", default=["getrs", "potrs"],
                        choices=["getrs", "potrs"])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--nb", type=int, default=None, help="lu.nb and cho.nb (default auto)")
    parser.add_argument("--budget-gib", type=float, default=None,
                        help="device.memory_budget (default: 90%% of the free device memory)")
    parser.add_argument("--backend", default=None, help="default: cuda where available")
    parser.add_argument("--trace-dir", default=None)
    args = parser.parse_args(argv)
    backend = args.backend or ("cuda" if "cuda" in available_backends() else "host")
    ops = get_backend(backend)
    settings = {}
    if args.nb:
        settings.update({"lu.nb": args.nb, "cho.nb": args.nb})
    if args.budget_gib:
        settings["device.memory_budget"] = int(args.budget_gib * 2 ** 30)
    dtype = np.float64
    model = CostModel(config.device_table(ops.device_name), dtype)
    print(f"backend {backend} ({ops.device_name}); host_gbps {model.table['host_gbps']}, "
          f"link (staged) {min(model.table.get('stage_gbps', 1e9), model.table['h2d_gbps'])} "
          f"GB/s; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| routine | n | k | host s | streamed s | streamed/host | model host s | "
          "model streamed s | model picks | faster | rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with config.set(settings):
        warm = make_factors(2048, dtype)
        for routine in args.routines:  # kernels compiled, handles and slots made
            for place in ("host", "device"):
                solve(routine, warm, np.arange(2048, dtype=np.int32), np.ones((2048, 2)),
                      backend, place)
        del warm
        for n in args.sizes:
            lu = make_factors(n, dtype)
            pivots = np.arange(n, dtype=np.int32)
            for routine in args.routines:
                for k in args.nrhs:
                    b = np.asfortranarray(np.random.default_rng(k).standard_normal((n, k)))
                    host_s, x_host = timed(lambda: solve(routine, lu, pivots, b, backend,
                                                         "host"), args.repeat)
                    trace = (os.path.join(args.trace_dir, f"{routine}_{n}_{k}.json")
                             if args.trace_dir else None)
                    device_s, x_device = timed(lambda: solve(routine, lu, pivots, b, backend,
                                                             "device", trace), args.repeat)
                    nb = make_plan(ops, n, n, dtype, routine="lu" if routine == "getrs"
                                   else "cho").nb
                    seconds = model.solve_seconds(routine, n, n, k, nb)
                    pick = model.solve_place(routine, n, n, k, nb)
                    diff = (np.abs(x_device - x_host).max() / np.abs(x_host).max())
                    print(f"| {routine} | {n} | {k} | {host_s:.3f} | {device_s:.3f} | "
                          f"{device_s / host_s:.2f} | {seconds['host']:.3f} | "
                          f"{seconds['device']:.3f} | {pick} | "
                          f"{'device' if device_s < host_s else 'host'} | {diff:.1e} |",
                          flush=True)
            del lu


if __name__ == "__main__":
    main()
