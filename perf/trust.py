"""Issue 28's two measurements on the cuda backend, one process:

1. Device memory before and after each routine (CPU interface): the driver's used memory
   (cuMemGetInfo) with hybridla's own view of it (allocated_bytes: tile stores; cached_bytes: the
   pool), after the call with the default pool cap and after free_cached().
2. solve's condition estimate (gecon / pocon on the factors where they are): solve with the
   estimate against the same getrf + getrs (potrf + potrs) without it, alternating, median of
   --repeat, for the CPU interface (NumPy) and the GPU interface (CuPy).

    python3 perf/trust.py --n 16384 --hessenberg-n 8192 --repeat 5
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

import hybridla
from hybridla import _decomp_cholesky, _decomp_lu
from hybridla.backend import get_backend
from hybridla.bench import harness

GIB = 1 << 30


def used_bytes(ops):
    import pycuda.driver as drv
    with ops.active():
        free, total = drv.mem_get_info()
    return total - free


def memory_table(n, hessenberg_n):
    ops = get_backend("cuda")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    spd = a @ a.T + n * np.eye(n)
    h = rng.standard_normal((hessenberg_n, hessenberg_n))
    b = np.ones(n)
    routines = [
        ("lu_factor", n, lambda: hybridla.lu_factor(a, check_finite=False)),
        ("cho_factor", n, lambda: hybridla.cho_factor(spd, check_finite=False)),
        ("geqrf", n, lambda: hybridla.geqrf(a, check_finite=False)),
        ("solve", n, lambda: hybridla.solve(a, b, check_finite=False)),
        ("solve_mixed", n, lambda: hybridla.solve_mixed(a, b, check_finite=False)),
        ("hessenberg(calc_q)", hessenberg_n,
         lambda: hybridla.hessenberg(h, calc_q=True, check_finite=False)),
    ]
    print(f"device memory, GiB (CPU interface; pool cap device.pool_max_bytes = "
          f"{hybridla.config.get('device.pool_max_bytes')})")
    print("| routine | n | used before | used after | allocated after | cached after | "
          "used after free_cached |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, size, call in routines:
        ops.free_cached()
        before = used_bytes(ops)
        call()
        after, allocated, cached = used_bytes(ops), ops.allocated_bytes(), ops.cached_bytes()
        ops.free_cached()
        print(f"| {name} | {size} | {before / GIB:.3f} | {after / GIB:.3f} | "
              f"{allocated / GIB:.3f} | {cached / GIB:.3f} | {used_bytes(ops) / GIB:.3f} |")


def seconds(call):
    """One call's seconds, the device synchronized before the clock stops."""
    return harness.seconds(call, sync=get_backend("cuda").synchronize)


def condition_cost(n, repeat):
    import cupy
    rng = np.random.default_rng(1)
    # F-ordered, LAPACK's layout: a C-ordered host matrix costs the CPU interface a transposing
    # copy first (6.3 s at n = 16384 on the H100 machine, RESULTS.md "Issue 28 (trust)"), which
    # would hide what is measured here
    a = np.asfortranarray(rng.standard_normal((n, n)))
    spd = np.asfortranarray(a @ a.T + n * np.eye(n))
    b = rng.standard_normal(n)
    print(f"\nsolve's condition estimate, n = {n}, median of {repeat} (alternating), seconds")
    print("| interface | assume_a | solve (with gecon/pocon) | without the estimate | "
          "the estimate's share |")
    print("|---|---|---:|---:|---:|")
    for interface in ("cpu", "gpu"):
        move = (lambda x: cupy.asarray(x, order="F")) if interface == "gpu" else (lambda x: x)
        for assume_a, matrix in (("gen", a), ("pos", spd)):
            A, B = move(matrix), move(b)

            def plain():
                if assume_a == "gen":
                    lu, piv, _, _, _ = _decomp_lu._getrf(A, False, False, None, {})
                    return hybridla.lu_solve((lu, piv), B, check_finite=False)
                c, _, _ = _decomp_cholesky._potrf(A, False, False, False, None, {})
                return hybridla.cho_solve((c, False), B, check_finite=False)

            def full():
                return hybridla.solve(A, B, assume_a=assume_a, check_finite=False)
            full(), plain()  # warm
            with_estimate, without = [], []
            for _ in range(repeat):
                with_estimate.append(seconds(full))
                without.append(seconds(plain))
            w, wo = statistics.median(with_estimate), statistics.median(without)
            print(f"| {interface} | {assume_a} | {w:.4f} ({min(with_estimate):.4f}-"
                  f"{max(with_estimate):.4f}) | {wo:.4f} ({min(without):.4f}-{max(without):.4f})"
                  f" | {100 * (w - wo) / w:.1f}% |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--hessenberg-n", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-memory", action="store_true", help="only the condition estimate")
    args = parser.parse_args()
    print(f"device: {get_backend('cuda').device_name}")
    if not args.no_memory:
        memory_table(args.n, args.hessenberg_n)
    condition_cost(args.n, args.repeat)


if __name__ == "__main__":
    main()
