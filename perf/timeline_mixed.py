#!/usr/bin/env python3
"""The host's timeline of one mixed-precision solve on the device: when each of its steps (the
convert kernels' calls, the factorization, the preconditioner's applications and their copies,
the products with A, GMRES cycles) started and how long the host spent in it, to see where the
host waits on the device and where the device waits on the host.

    python3 perf/timeline_mixed.py [--n 32768] [--matrix spd-kappa=1e4] [--nb 2048] \
        [--lowest half] [--refinement gmres] [--repeat 3]

--repeat solves (the first also loads kernels and fills the memory pool); each prints its total
and MixedInfo (iterations, backward errors, phases), and the last one's timeline follows:
start (ms from the call) + time in the step. The steps are timed by wrapping these functions
in this process only; a step inside another shows inside its span.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import time

import cupy as cp

import hybridla
from hybridla.backend import cuda as cuda_backend
from hybridla.bench.matrices import MatrixFactory, parse_matrix  # perf/mixed.py's matrices
from hybridla.lapack import _mixed, _mixed_operators, _preconditioner, _refine
from hybridla.scheduler import engine

# the modules (hybridla.lapack's names gesv_mixed and posv_mixed are their functions)
gesv_mixed = importlib.import_module("hybridla.lapack.gesv_mixed")
posv_mixed = importlib.import_module("hybridla.lapack.posv_mixed")

# a module-level function is wrapped in the module that calls it: run_refinement where
# MixedSolver.solve looks it up (_mixed imports it), lu_permutation in _preconditioner
TIMED = [(_mixed.MixedSolver, "solve"), (_preconditioner.TriangularPreconditioner, "__init__"),
         (_preconditioner.TriangularPreconditioner, "__call__"),
         (_preconditioner.TriangularPreconditioner, "_invert_diagonal_blocks"),
         (_mixed_operators.WorkingOperator, "product"), (_mixed, "run_refinement"),
         (posv_mixed.PosvMixed, "factor"), (gesv_mixed.GesvMixed, "factor"),
         (_preconditioner, "lu_permutation"), (_refine._Krylov, "cycle"), (_refine, "_residual"),
         (_mixed_operators.DeviceSpace, "arnoldi"), (_mixed_operators.DeviceSpace, "combine"),
         (_preconditioner.TriangularPreconditioner, "apply"),
         (_mixed_operators.WorkingOperator, "apply"),
         (cuda_backend.CudaBackend, "narrow_hermitian"), (cuda_backend.CudaBackend, "narrow"),
         (cuda_backend.CudaBackend, "from_host"), (cuda_backend.CudaBackend, "to_host"),
         (cuda_backend.CudaBackend, "replay"), (cuda_backend.CudaBackend, "synchronize"),
         (cuda_backend.CudaBackend, "equilibration"), (cuda_backend.DeviceMatrix, "finish"),
         (gesv_mixed, "getrf"), (gesv_mixed, "keep_butterfly"), (engine, "_run")]


def timed(events, origin, owner, name):
    """owner.name wrapped to append (label, start, seconds) to events (a staticmethod stays
    one: the cuda backend's facade binds its families so)."""
    function = getattr(owner, name)
    static = isinstance(inspect.getattr_static(owner, name), staticmethod)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            events.append((f"{getattr(owner, '__name__', owner)}.{name}", started - origin[0],
                           time.perf_counter() - started))
    setattr(owner, name, staticmethod(wrapper) if static else wrapper)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--matrix", default="spd-kappa=1e4", help="a perf/mixed.py matrix word")
    p.add_argument("--nb", type=int, default=None)
    p.add_argument("--lowest", default="half-x3")
    p.add_argument("--refinement", default="classical-gmres")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    spec = parse_matrix(args.matrix)
    a = cp.asfortranarray(MatrixFactory(args.n, 0, cp).make(spec))
    b = cp.asarray(cp.random.default_rng(1).standard_normal((args.n, 1)), order="F")
    events, origin = [], [0.0]
    for owner, name in TIMED:
        timed(events, origin, owner, name)
    for repetition in range(args.repeat):
        events.clear()
        cp.cuda.Device().synchronize()
        origin[0] = time.perf_counter()
        _, info = hybridla.solve_mixed(a, b, assume_a="pos" if spec.spd else "gen", lower=True,
                                       check_finite=False, nb=args.nb, lowest=args.lowest,
                                       refinement=args.refinement)
        cp.cuda.Device().synchronize()
        total = time.perf_counter() - origin[0]
        print(f"solve {repetition}: {total * 1e3:.2f} ms, iterations {info.iterations} "
              f"({info.inner_iterations} inner), backward errors "
              f"{' '.join(f'{e:.1e}' for e in info.residuals)}; "
              + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in info.seconds.items()), flush=True)
    for label, start, seconds in sorted(events, key=lambda event: event[1]):
        print(f"  {start * 1e3:9.3f} +{seconds * 1e3:8.3f} ms  {label}")


if __name__ == "__main__":
    main()
