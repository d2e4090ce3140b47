"""Quick probe (first device call of a session): hybridla potrf vs cuSOLVER potrf, GPU and CPU iface."""
import sys, time
import numpy as np, cupy as cp
from nvmath.bindings import cusolverDn
import hybridla

def spd(n, seed=0):
    rng = cp.random.default_rng(seed)
    g = rng.standard_normal((n, n), dtype=cp.float64)
    a = g @ g.T / n
    a += cp.eye(n) * 1.0
    return cp.asfortranarray(a)

h = cusolverDn.create()
def cusolver_potrf(d):
    cusolverDn.set_stream(h, cp.cuda.get_current_stream().ptr)
    n = d.shape[0]
    lw = cusolverDn.dpotrf_buffer_size(h, 0, n, d.data.ptr, n)
    w = cp.empty(max(1, lw)); info = cp.zeros(1, cp.int32)
    cusolverDn.dpotrf(h, 0, n, d.data.ptr, n, w.data.ptr, lw, info.data.ptr)
    return info

def t(f, setup, rep=3):
    ts = []
    for _ in range(rep):
        x = setup(); cp.cuda.Device().synchronize(); t0 = time.perf_counter(); r = f(x)
        cp.cuda.Device().synchronize(); ts.append(time.perf_counter() - t0)
    return min(ts), r

import os
OUT = os.environ.get("OUT", ".")
for n in [int(s) for s in sys.argv[1:]]:
    a0 = spd(n)
    tc, _ = t(cusolver_potrf, lambda: a0.copy(order="F"))
    for panel in ("gpu", "auto"):
        tg, c = t(lambda x: hybridla.cho_factor(x, lower=True, overwrite_a=True, backend="cuda", panel=panel, trace=f"{OUT}/potrf_gpu_{n}_{panel}.json")[0], lambda: a0.copy(order="F"))
        print(f"n={n} panel={panel} cusolver {tc:.4f}s hyb-gpu {tg:.4f}s ratio {tc/tg:.2f}x", flush=True)
    L = cp.tril(c); r = float(cp.linalg.norm(a0 - L @ L.T, 1) / (n * cp.linalg.norm(a0, 1) * np.finfo(float).eps))
    ha = cp.asnumpy(a0)
    def cs_tr(x):
        d = cp.asarray(x); cusolver_potrf(d); return cp.asnumpy(d)
    tct, _ = t(cs_tr, lambda: np.asfortranarray(ha), rep=2)
    tcpu, hc = t(lambda x: hybridla.cho_factor(x, lower=True, overwrite_a=True, backend="cuda", trace=f"{__import__('os').environ.get('OUT','.')}/potrf_cpu_{n}.json")[0], lambda: np.asfortranarray(ha), rep=2)
    Lh = cp.tril(cp.asarray(hc)); r2 = float(cp.linalg.norm(a0 - Lh @ Lh.T, 1) / (n * cp.linalg.norm(a0, 1) * np.finfo(float).eps))
    print(f"n={n} cusolver {tc:.3f}s  hyb-gpu {tg:.3f}s ratio {tc/tg:.2f}x ratio_lapack {r:.2f} | cusolver+xfer {tct:.3f}s hyb-cpu {tcpu:.3f}s ratio {tct/tcpu:.2f}x r {r2:.2f}", flush=True)
    del a0, c, ha, hc, L, Lh; cp.get_default_memory_pool().free_all_blocks()
