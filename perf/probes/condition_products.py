"""One product of the condition estimator, (L U)^-1 x on device factors, by cuBLAS trsm (one
column) against cuBLAS trsv: which reads the factors faster (n = 16384 on the H100: solve's
estimate cost 9% of solve with trsm, the target is 3%).

    python3 perf/probes/condition_products.py --n 16384 --repeat 20
"""
import argparse
import statistics
import time

import cupy
import numpy as np

import hybridla
from hybridla.backend import get_backend

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=16384)
parser.add_argument("--repeat", type=int, default=20)
args = parser.parse_args()
n = args.n
ops = get_backend("cuda")
a = cupy.asarray(np.random.default_rng(0).standard_normal((n, n)), order="F")
lu, piv = hybridla.lu_factor(a, overwrite_a=True, check_finite=False)
x = np.random.default_rng(1).standard_normal(n)
with ops.active():
    F = ops.wrap(lu, piv)
    T, block = F.block(0, n, 0, n), F.workspace("probe", n, 1)
    lane = ops.lane("gpu:update")

    def product(kind):
        ops.from_host(lane, x.reshape(n, 1), block)
        with lane:
            for uplo, diag in (("L", "U"), ("U", "N")):
                if kind == "trsm":
                    ops.trsm(lane, "L", uplo, "N", diag, 1, T, block)
                else:
                    ops.trsv(lane, uplo, "N", diag, T, block)
        return ops.to_host(lane, block)

    reference = product("trsm")
    assert np.allclose(product("trsv"), reference, rtol=1e-8, atol=0)
    times = {"trsm": [], "trsv": []}
    for _ in range(args.repeat):
        for kind in times:
            start = time.perf_counter()
            product(kind)
            times[kind].append(time.perf_counter() - start)
    for kind, seconds in times.items():
        print(f"{kind}: one product (x up, L and U solves, x down) median "
              f"{1e3 * statistics.median(seconds):.3f} ms ({1e3 * min(seconds):.3f}-"
              f"{1e3 * max(seconds):.3f}), {2 * 8 * n * n / 2 / statistics.median(seconds) / 1e12:.2f}"
              f" TB/s of factors read")
    F.close()
