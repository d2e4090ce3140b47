"""The benchmarks' problems and how their results are checked, outside the timed region, in
double precision with the dtype's eps (LAPACK's test ratios).

- ``Case``: one size and matrix kind of perf/bench.py (``hybridla bench``), with the helpers its
  checks share (||A||_1, a random x, products with A).
- getrf ||PA-LU||_1/(n ||A||_1 eps), potrf ||A-LL^H||_1/(...), geqrf/geqlf/gelqf
  ||A-QR||_1/(...) with Q formed by LAPACK's orgqr: dense up to DENSE_CHECK_MAX_HOST (host
  results) or DENSE_CHECK_MAX_DEVICE (getrf and potrf on the device), random-vector estimates
  above, computed where the factors are (NumPy or CuPy).
- perf/mixed.py's solves: backward error ||b-Ax||_inf/(||A||_inf ||x||_inf), forward error,
  the refinement's stopping test.

The limits are read when a check runs: setting checks.DENSE_CHECK_MAX_HOST (or perf/bench.py's
name for it) moves the switch to the estimate.
"""
from __future__ import annotations

import argparse
import os
from typing import Optional

import numpy as np

from . import harness
from .matrices import MATRICES, check_dtype, column_blocks

# Backward error: dense ||PA - LU||_1 up to these sizes, random-vector estimate above.
DENSE_CHECK_MAX_HOST = 8191
DENSE_CHECK_MAX_DEVICE = 16384
EPS = float(np.finfo(np.float64).eps)


class Case:
    """One problem size and matrix kind: the pristine host matrix plus lazily computed helpers.

    At most two full-size host arrays live here: the matrix ``a`` and one work buffer.
    """

    def __init__(self, n: int, dtype: np.dtype, opts: argparse.Namespace, warmup: int,
                 kind: str = "general"):
        self.n = n
        self.dtype = np.dtype(dtype)
        self.opts = opts
        self.warmup = warmup
        self.repeat = opts.repeat
        self.kind = kind
        self.a = MATRICES[kind](n, self.dtype, opts.seed)
        self._work: Optional[np.ndarray] = None
        self._anorm: Optional[float] = None
        self._x: Optional[np.ndarray] = None
        self._products: dict = {}
        self.device_input = None   # baselines.DeviceInput, made by the first row needing it

    @property
    def nbytes(self) -> int:
        return self.a.nbytes

    def work_buffer(self) -> np.ndarray:
        """The reusable F-ordered host buffer (contents undefined)."""
        if self._work is None:
            self._work = np.empty_like(self.a, order="F")
        return self._work

    def host_copy(self) -> np.ndarray:
        """A fresh copy of A in the work buffer."""
        work = self.work_buffer()
        np.copyto(work, self.a)
        return work

    def engine_kwargs(self, routine: str, iface: str, last: bool) -> dict:
        o = self.opts
        kw = dict(nb=o.nb, lookahead=o.lookahead, panel=o.panel)
        if o.trace_dir and last:
            kw["trace"] = os.path.join(o.trace_dir, f"{routine}_{iface}_{self.n}.json")
        return kw

    # --- helpers of the backward error (host, computed once per size) ---------------
    @property
    def anorm(self) -> float:
        """||A||_1, column block by column block (np.abs(A) would be a full copy)."""
        if self._anorm is None:
            self._anorm = max(float(np.abs(self.a[:, j0:j1]).sum(axis=0).max())
                              for j0, j1 in column_blocks(self.n, self.n))
        return self._anorm

    @property
    def x(self) -> np.ndarray:
        if self._x is None:
            rng = np.random.default_rng([self.opts.seed, self.n, 1])
            self._x = rng.standard_normal(self.n).astype(check_dtype(self.dtype))
        return self._x

    def matvec(self, v: np.ndarray, adjoint: bool = False) -> np.ndarray:
        """A @ v (or A^H @ v) in double precision, column block by column block."""
        wdt = np.promote_types(check_dtype(self.dtype), v.dtype)
        out = np.zeros(self.n, dtype=wdt)
        for j0, j1 in column_blocks(self.n, self.n):
            block = self.a[:, j0:j1].astype(wdt, copy=False)
            if adjoint:
                out[j0:j1] = adjoint_matvec(block, v)
            else:
                out += block @ v[j0:j1]
        return out

    def product(self, ops: str) -> np.ndarray:
        """op_k(A) ... op_1(A) x for a string of 'N' (A) and 'H' (A^H), applied right to
        left: product("N") = A x, product("HN") = A^H (A x), product("NH") = A (A^H x)."""
        if ops not in self._products:
            v = self.x if len(ops) == 1 else self.product(ops[1:])
            self._products[ops] = self.matvec(v, adjoint=ops[0] == "H")
        return self._products[ops]

    @property
    def ax(self) -> np.ndarray:
        """A @ x in double precision."""
        return self.product("N")


# -- factorizations ------------------------------------------------------------------------

def swaps_to_perm(piv, m: int) -> np.ndarray:
    """Row permutation p with (P A) = A[p], from a 0-based LAPACK swap sequence."""
    piv = np.asarray(piv).ravel()
    if piv.size and (piv.min() < 0 or piv.max() >= m):
        raise ValueError(f"pivot out of range [0, {m}): min {piv.min()}, max {piv.max()}")
    perm = list(range(m))
    for i, p in enumerate(piv.tolist()):
        perm[i], perm[p] = perm[p], perm[i]
    return np.asarray(perm, dtype=np.intp)


def adjoint_matvec(m, v):
    """m^H @ v as a row-vector product (no transposed copy of m); NumPy or CuPy."""
    if m.dtype.kind == "c" or v.dtype.kind == "c":
        return (v.conj() @ m).conj()
    return v @ m


def tri_matvec(f, x, xp, wdt, *, lower: bool, adjoint: bool = False, unit: bool = False,
               block: int = 2048):
    """op(T) @ x for the lower (or upper) triangle T of the square array f, with a unit
    diagonal if ``unit``; op(T) = T, or T^H if ``adjoint``.

    Works column block by column block in precision wdt (never forming T), for NumPy and
    CuPy alike.
    """
    n = f.shape[0]
    y = xp.zeros(n, dtype=np.promote_types(wdt, x.dtype))
    for j0 in range(0, n, block):
        j1 = min(n, j0 + block)
        diag = f[j0:j1, j0:j1]
        k = 1 if unit else 0
        diag = (xp.tril(diag, -k) if lower else xp.triu(diag, k)).astype(wdt, copy=False)
        rows = slice(j1, n) if lower else slice(0, j0)    # the rest of the column block
        off = f[rows, j0:j1]
        if adjoint:
            y[j0:j1] += adjoint_matvec(diag, x[j0:j1])
            if off.size:
                y[j0:j1] += adjoint_matvec(off.astype(wdt, copy=False), x[rows])
        else:
            y[j0:j1] += diag @ x[j0:j1]
            if off.size:
                y[rows] += off.astype(wdt, copy=False) @ x[j0:j1]
        if unit:
            y[j0:j1] += x[j0:j1]
    return y


def lu_matvec(lu, x, xp, wdt, block: int = 2048):
    """L @ (U @ x) for packed LU factors (unit lower L, upper U), without forming L or U."""
    y = tri_matvec(lu, x, xp, wdt, lower=False, block=block)
    return tri_matvec(lu, y, xp, wdt, lower=True, unit=True, block=block)


def _factor_array(case: Case, f):
    """The factor array as NumPy or CuPy, with its array module; checks its shape."""
    f = harness.as_checkable(f)
    if f.shape != (case.n, case.n):
        raise ValueError(f"factors have shape {f.shape}, expected {(case.n, case.n)}")
    return f, harness.array_module(f)


def _norm1(r, xp) -> float:
    return float(xp.abs(r).sum(axis=0).max()) if r.ndim == 2 else float(xp.abs(r).sum())


def getrf_error(case: Case, factors) -> tuple[float, bool]:
    """(||PA - LU||_1 / (n ||A||_1 eps), estimated?) computed where lu lives.

    Dense for host results with n < 8192 and device results with n <= 16384; otherwise
    estimated with a random vector: ||PAx - L(Ux)||_1 / (n ||A||_1 ||x||_1 eps).
    Arithmetic in double precision; eps is that of the factorization's dtype.
    """
    lu, piv = factors
    lu, xp = _factor_array(case, lu)
    n = case.n
    eps = float(np.finfo(case.dtype).eps)
    wdt = check_dtype(case.dtype)
    perm = swaps_to_perm(harness.to_host(piv), n)
    dense_max = DENSE_CHECK_MAX_HOST if xp is np else DENSE_CHECK_MAX_DEVICE
    if n <= dense_max:
        l_mat = xp.tril(lu, -1).astype(wdt, copy=False)
        xp.fill_diagonal(l_mat, 1)
        r = l_mat @ xp.triu(lu).astype(wdt, copy=False)
        del l_mat
        r -= xp.asarray(case.a[perm]).astype(wdt, copy=False)
        num = _norm1(r, xp)
        del r
        return num / (n * case.anorm * eps), False
    x = xp.asarray(case.x)
    r = lu_matvec(lu, x, xp, wdt)
    r -= xp.asarray(case.ax[perm])
    num = _norm1(r, xp)
    xnorm = float(np.abs(case.x).sum())
    return num / (n * case.anorm * xnorm * eps), True


def potrf_error(case: Case, factors) -> tuple[float, bool]:
    """(||A - LL^H||_1 / (n ||A||_1 eps), estimated?) computed where L lives (the lower
    triangle of the factor; the other one is not read).

    Dense for host results with n < 8192 and device results with n <= 16384; otherwise
    estimated with a random vector: ||Ax - L(L^H x)||_1 / (n ||A||_1 ||x||_1 eps).
    """
    (c,) = factors
    c, xp = _factor_array(case, c)
    n = case.n
    eps = float(np.finfo(case.dtype).eps)
    wdt = check_dtype(case.dtype)
    dense_max = DENSE_CHECK_MAX_HOST if xp is np else DENSE_CHECK_MAX_DEVICE
    if n <= dense_max:
        l_mat = xp.tril(c).astype(wdt, copy=False)
        r = l_mat @ l_mat.conj().T
        del l_mat
        r -= xp.asarray(case.a).astype(wdt, copy=False)
        num = _norm1(r, xp)
        del r
        return num / (n * case.anorm * eps), False
    x = xp.asarray(case.x)
    y = tri_matvec(c, x, xp, wdt, lower=True, adjoint=True)
    r = tri_matvec(c, y, xp, wdt, lower=True)
    r -= xp.asarray(case.ax)
    num = _norm1(r, xp)
    xnorm = float(np.abs(case.x).sum())
    return num / (n * case.anorm * xnorm * eps), True


# QR family: (the triangle of the factors is lower, the Gram product as Case.product's ops).
# QR: R^H R = A^H A; QL: L^H L = A^H A; LQ: L L^H = A A^H.
_QR_FORMS = {"qr": (False, "HN"), "ql": (True, "HN"), "lq": (True, "NH")}


def _orgqr(f: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Q (n x n) from geqrf's reflectors in f and tau, by LAPACK's xorgqr / xungqr."""
    from scipy.linalg import lapack
    orgqr = getattr(lapack, "zungqr" if f.dtype.kind == "c" else "dorgqr")
    lwork = int(orgqr(f, tau, lwork=-1)[1][0].real)
    q, _, info = orgqr(f, tau, lwork=max(1, lwork, f.shape[1]))
    if info != 0:
        raise RuntimeError(f"orgqr: info={info}")
    return q


def qr_dense_error(kind: str, case: Case, f: np.ndarray, tau: np.ndarray) -> float:
    """||A - QR||_1 (QL, LQ) / (n ||A||_1 eps) with Q formed on the host, in double.

    QL and LQ are checked as QRs (identities of LAPACK's geqlf and gelqf): the QL of A is
    the QR of J A J (J the reversal) with factors J F J and tau reversed; the LQ of A is the
    QR of A^H with factors F^H; ||A - LQ||_1 is then the infinity norm of A^H - Q'R.
    """
    wdt = check_dtype(case.dtype)
    a = case.a
    if kind == "ql":
        a, f, tau = a[::-1, ::-1], f[::-1, ::-1], tau[::-1]
    elif kind == "lq":
        a, f = a.conj().T, f.conj().T
    f = np.asfortranarray(f, dtype=wdt)
    q = _orgqr(f, np.ascontiguousarray(tau, dtype=wdt))
    r = q @ np.triu(f)
    r -= a
    num = float(np.abs(r).sum(axis=1 if kind == "lq" else 0).max())
    return num / (case.n * case.anorm * float(np.finfo(case.dtype).eps))


def qr_error(kind: str, case: Case, factors) -> tuple[float, bool]:
    """(||A - QR||_1 / (n ||A||_1 eps), estimated?) for kind "qr", "ql" (A = QL) or "lq"
    (A = LQ), from LAPACK-layout factors and tau.

    Dense (on the host) for n < 8192; otherwise estimated, where the factors live, from the
    triangular factor alone with a random vector, as the relative error of the Gram product
    in units of n eps: for QR ||A^H(Ax) - R^H(Rx)||_2 / (n eps ||A^H(Ax)||_2)
    (R^H R = A^H A), for QL the same with L, for LQ ||A(A^H x) - L(L^H x)||_2 /
    (n eps ||A(A^H x)||_2) (L L^H = A A^H).  ||A^H A x||_2 stands for ||A||_2^2 ||x||_2: a
    lower bound, close to it for these random matrices (the estimate errs on the high side;
    with 1-norms and ||A||_1 ||A||_inf it would be about n times too small).  On random
    matrices it comes out at 0.6-0.9x the dense ratio (n = 300..2000).  The estimate does
    not look at tau.
    """
    f, tau = factors
    f, xp = _factor_array(case, f)
    n = case.n
    if n <= DENSE_CHECK_MAX_HOST:
        return qr_dense_error(kind, case, harness.to_host(f), harness.to_host(tau)), False
    lower, ops = _QR_FORMS[kind]
    wdt = check_dtype(case.dtype)
    z = xp.asarray(case.x)
    for op in reversed(ops):
        z = tri_matvec(f, z, xp, wdt, lower=lower, adjoint=op == "H")
    gram = case.product(ops)
    z -= xp.asarray(gram)
    num = float(xp.linalg.norm(z))
    eps = float(np.finfo(case.dtype).eps)
    return num / (n * eps * float(np.linalg.norm(gram))), True


# -- solves -------------------------------------------------------------------------------

def inf_norm(a, xp=np) -> float:
    """||A||_inf (largest row sum of |A|), one column block at a time (no |A| copy)."""
    n, m = a.shape
    rows = xp.zeros(n)
    for j0, j1 in column_blocks(m, n):
        rows += xp.abs(a[:, j0:j1]).sum(axis=1)
    return float(rows.max()) if n else 0.0


def _columns_max_abs(v, xp):
    return xp.abs(v).max(axis=0) if v.ndim == 2 else xp.abs(v).max(keepdims=True)


def backward_error(a, x, b, anorm: Optional[float] = None, xp=np) -> float:
    """max over right-hand sides of ||b - A x||_inf / (||A||_inf ||x||_inf), in float64."""
    anorm = inf_norm(a, xp) if anorm is None else anorm
    x = x.astype(np.float64, copy=False)
    r = b - a @ x
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = _columns_max_abs(r, xp) / (anorm * _columns_max_abs(x, xp))
    return float(ratio.max())


def forward_error(x, x_true, xp=np) -> float:
    """max over right-hand sides of ||x - x_true||_inf / ||x_true||_inf."""
    diff = x.astype(np.float64, copy=False) - x_true
    return float((_columns_max_abs(diff, xp) / _columns_max_abs(x_true, xp)).max())


def passes_stopping_test(berr: float, n: int) -> bool:
    """||r||_inf < sqrt(n) ||x||_inf ||A||_inf eps, i.e. backward error < sqrt(n) eps."""
    return bool(berr < np.sqrt(n) * EPS)
