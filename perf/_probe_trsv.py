import cupy as cp, time, numpy as np
from nvmath.bindings import cublas
n = 32768
a = cp.asfortranarray(cp.random.default_rng(0).standard_normal((n, n), dtype=cp.float32))
a += n * cp.eye(n, dtype=cp.float32)
x = cp.ones((n, 1), dtype=cp.float32)
h = cublas.create(); cublas.set_stream(h, cp.cuda.get_current_stream().ptr)
one = np.ones(1, np.float32)
def t(f, reps=10):
    f(); cp.cuda.Device().synchronize(); s = time.perf_counter()
    for _ in range(reps): f()
    cp.cuda.Device().synchronize(); return (time.perf_counter() - s) / reps * 1e3
for uplo, diag in ((0, 1), (1, 0)):
    tm = t(lambda: cublas.strsm(h, 0, uplo, 0, diag, n, 1, one.ctypes.data, a.data.ptr, n, x.data.ptr, n))
    tv = t(lambda: cublas.strsv(h, uplo, 0, diag, n, a.data.ptr, n, x.data.ptr, 1))
    print(f"uplo {uplo}: strsm {tm:.2f} ms, strsv {tv:.2f} ms (2.1 GB triangle: {2.15/ (tm*1e-3)/1e3:.0f} / {2.15/(tv*1e-3)/1e3:.0f} GB/s)")
ad = cp.asfortranarray(a.astype(cp.float64)); xd = cp.ones(n); yd = cp.zeros(n)
oned, zerod = np.ones(1), np.zeros(1)
print("dgemv", t(lambda: cublas.dgemv(h, 0, n, n, oned.ctypes.data, ad.data.ptr, n, xd.data.ptr, 1, zerod.ctypes.data, yd.data.ptr, 1)), "ms")
print("dsymv", t(lambda: cublas.dsymv(h, 0, n, oned.ctypes.data, ad.data.ptr, n, xd.data.ptr, 1, zerod.ctypes.data, yd.data.ptr, 1)), "ms")
