"""LAPACK-tester style checks and matrix generators shared by the LU tests.

Plain functions (no pytest in here), so that benchmarks and notebooks can use them too:

- ``getrf_ratio(a, lu, piv)``: ||P A - L U||_1 / (max(m, n) ||A||_1 eps), LAPACK's xGET01 test ratio;
- ``solve_backward_error(a, x, b)``: max over columns of ||b - A x||_1 / (||A||_1 ||x||_1 n eps);
- ``matrix_with_condition(m, n, cond, dtype, rng)``: U diag(s) V^H with prescribed singular values;
- ``to_device(a, kind)`` / ``to_host(x)``: move test data to CuPy, PyTorch or PyCUDA arrays and back.
- ``reflectors_product(factors, tau, storage)``: the Q that LAPACK's xGEQRF / xGEQLF / xGELQF
  storage represents, one reflector at a time; ``triangle_of(factors, storage)``: its R or L;
- ``factorization_ratio``, ``orthogonality_ratio``, ``least_squares_ratio``: LAPACK's xQRT01 and
  xQRT17-style ratios; ``match_phases``: a QR made to agree with another in its column phases.
- ``lapack_householder(a, storage)``: (factors, tau) of xGEQRF / xGEQLF / xGELQF computed by
  scipy.linalg.lapack's ?geqrf (QL and LQ through the identities that relate them to QR);
  ``q_by_lapack(factors, tau, storage)``: the economic Q and triangle, Q formed by scipy's
  ?orgqr / ?ungqr;
- ``potrf_ratio(a, c, lower)``: ||A - U^H U||_1 / (n ||A||_1 eps) (xPOT01);
- ``normwise_backward_error(a, x, b)``: max_j ||b_j - A x_j||_inf / ((||A||_inf ||x_j||_inf
  + ||b_j||_inf) n eps); ``forward_error_ratio(x, x_ref, kappa)``: ||x - x_ref||_inf /
  (kappa n eps ||x_ref||_inf);
- ``lstsq_forward_ratio``, ``residues_ratio``: a least-squares solution and its residues against
  a reference, in units of the first-order perturbation bound, (kappa + kappa^2 ||r|| /
  (||A|| ||x||)) max(m, n) eps for x.

Residuals are computed in float64/complex128 whatever the working precision; ``eps`` is that of
the working precision (``np.finfo(dtype).eps``), as in LAPACK's testers.
"""
from __future__ import annotations

import numpy as np

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
DEVICE_KINDS = ("cupy", "torch", "pycuda")


# -- precision helpers ------------------------------------------------------------------

def working_dtype(dtype) -> np.dtype:
    """The inexact dtype a computation on ``dtype`` runs in (integers and bools -> float64)."""
    dtype = np.dtype(dtype)
    return dtype if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)


def eps_of(dtype) -> float:
    """Machine epsilon of the working precision of ``dtype``."""
    return float(np.finfo(working_dtype(dtype)).eps)


def wide(x) -> np.ndarray:
    """``x`` as float64 or complex128 (a copy), for residuals that must not add rounding."""
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def norm1(x) -> float:
    """Matrix 1-norm (max column sum); 0 for an empty matrix."""
    x = np.asarray(x)
    if x.size == 0:
        return 0.0
    return float(np.abs(x).sum(axis=0).max())


# -- LU factors -------------------------------------------------------------------------

def apply_pivots(a, piv) -> np.ndarray:
    """P A: row i swapped with row piv[i], for i = 0, 1, ... in order (0-based LAPACK ipiv)."""
    pa = np.array(a, copy=True)
    for i, p in enumerate(np.asarray(piv).tolist()):
        if p != i:
            pa[[i, p], :] = pa[[p, i], :]
    return pa


def permutation_of(piv, m) -> np.ndarray:
    """The row order ``perm`` with (P A) == A[perm] for the swap sequence ``piv`` of m rows."""
    perm = np.arange(m)
    for i, p in enumerate(np.asarray(piv).tolist()):
        perm[[i, p]] = perm[[p, i]]
    return perm


def unpack_lu(lu):
    """(L, U) from a packed m x n LU: L unit lower trapezoid m x k, U upper trapezoid k x n."""
    lu = wide(lu)
    m, n = lu.shape
    k = min(m, n)
    lower = np.tril(lu[:, :k], -1) + np.eye(m, k, dtype=lu.dtype)
    upper = np.triu(lu[:k, :])
    return lower, upper


def check_pivots(piv, m, n) -> None:
    """Assert ``piv`` looks like LAPACK's 0-based ipiv: int32, length min(m, n), i <= piv[i] < m."""
    piv = np.asarray(piv)
    k = min(m, n)
    assert piv.dtype == np.int32, f"piv dtype {piv.dtype}, expected int32"
    assert piv.shape == (k,), f"piv shape {piv.shape}, expected ({k},)"
    if k:
        assert np.all(piv >= np.arange(k)), f"piv[i] < i somewhere: {piv}"
        assert np.all(piv < m), f"piv out of range for {m} rows: {piv}"


def getrf_ratio(a, lu, piv, dtype=None) -> float:
    """||P A - L U||_1 / (max(m, n) ||A||_1 eps) in float64/complex128 (LAPACK xGET01).

    ``dtype`` is the working precision whose eps is used; by default that of ``lu``.
    The pivots are checked for shape, dtype and range first (a malformed piv fails here).
    """
    a = wide(a)
    lu = np.asarray(lu)
    m, n = a.shape
    assert lu.shape == (m, n), f"lu shape {lu.shape}, expected {(m, n)}"
    check_pivots(piv, m, n)
    if m == 0 or n == 0:
        return 0.0
    eps = eps_of(lu.dtype if dtype is None else dtype)
    lower, upper = unpack_lu(lu)
    resid = norm1(apply_pivots(a, piv) - lower @ upper)
    anorm = norm1(a)
    if anorm == 0.0:
        return 0.0 if resid == 0.0 else float("inf")
    ratio = resid / (max(m, n) * anorm * eps)
    return float("inf") if not np.isfinite(ratio) else float(ratio)


def solve_backward_error(a, x, b, dtype=None) -> float:
    """max over columns j of ||b_j - A x_j||_1 / (||A||_1 ||x_j||_1 n eps), in double precision.

    ``a`` is the matrix of the system actually solved (pass A.T or A.conj().T for trans=1, 2);
    ``dtype`` is the working precision (default: that of ``x``). 1-D ``x`` and ``b`` are one column.
    """
    # the working precision is x's, before the residual is widened to double
    eps = eps_of(np.asarray(x).dtype if dtype is None else dtype)
    a = wide(a)
    x, b = wide(x), wide(b)
    if x.ndim == 1:
        x = x[:, None]
    if b.ndim == 1:
        b = b[:, None]
    n = a.shape[1]
    assert x.shape == (n, b.shape[1]), f"x shape {x.shape} does not fit A {a.shape}, b {b.shape}"
    anorm = norm1(a)
    worst = 0.0
    for j in range(b.shape[1]):
        resid = np.abs(b[:, j] - a @ x[:, j]).sum()
        xnorm = np.abs(x[:, j]).sum()
        if not np.isfinite(resid) or not np.isfinite(xnorm):
            return float("inf")
        if resid == 0.0:
            continue
        denom = anorm * xnorm * max(n, 1) * eps
        worst = max(worst, float("inf") if denom == 0.0 else resid / denom)
    return worst


# -- test matrices ----------------------------------------------------------------------

def random_matrix(m, n, dtype, rng) -> np.ndarray:
    """A standard normal m x n matrix of ``dtype`` (complex: real and imaginary parts normal)."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        a = rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))
    else:
        a = rng.standard_normal((m, n))
    return a.astype(dtype)


def random_orthogonal(n, k, dtype, rng) -> np.ndarray:
    """n x k with orthonormal columns (Q of the QR of a random matrix), real or complex like dtype."""
    complex_ = np.issubdtype(np.dtype(dtype), np.complexfloating)
    g = random_matrix(n, k, np.complex128 if complex_ else np.float64, rng)
    q, r = np.linalg.qr(g)
    # Fix the signs/phases so that Q is Haar-distributed (and independent of the QR routine).
    d = np.diagonal(r)
    return q * np.where(d == 0, 1, d / np.abs(np.where(d == 0, 1, d)))


def matrix_with_condition(m, n, cond, dtype, rng) -> np.ndarray:
    """U diag(s) V^H, s geometrically spaced from 1 down to 1/cond (2-norm condition ``cond``)."""
    k = min(m, n)
    u = random_orthogonal(m, k, dtype, rng)
    v = random_orthogonal(n, k, dtype, rng)
    s = np.geomspace(1.0, 1.0 / cond, k) if k > 1 else np.ones(k)
    a = (u * s) @ v.conj().T
    return np.asfortranarray(a.astype(dtype))


# -- device arrays ----------------------------------------------------------------------

def to_device(a, kind):
    """A column-major copy of the NumPy array ``a`` on the GPU, as a CuPy / torch / PyCUDA array."""
    a = np.asfortranarray(a)
    if kind == "cupy":
        import cupy
        d = cupy.array(a, order="F")
        assert d.flags.f_contiguous
        return d
    if kind == "torch":
        import torch
        if a.ndim == 1:
            return torch.from_numpy(a.copy()).cuda()
        m, n = a.shape
        # from_numpy of the C-ordered transpose, moved to the GPU, transposed back: a view with
        # strides (1, m), i.e. column-major like LAPACK.
        d = torch.from_numpy(np.ascontiguousarray(a.T)).cuda().T
        assert d.is_cuda and tuple(d.shape) == (m, n)
        assert m <= 1 or n <= 1 or tuple(d.stride()) == (1, m), d.stride()
        return d
    if kind == "pycuda":
        import pycuda.autoprimaryctx  # noqa: F401  (the primary context, as hybridla uses)
        import pycuda.gpuarray as gpuarray
        d = gpuarray.to_gpu(a)
        assert d.flags.f_contiguous
        return d
    raise ValueError(f"unknown device kind {kind!r}")


def device_kind_of(x) -> str:
    """"cupy", "torch", "pycuda" or "numpy": what kind of array ``x`` is."""
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        return "cupy"
    if module == "torch":
        return "torch"
    if module == "pycuda":
        return "pycuda"
    if isinstance(x, np.ndarray):
        return "numpy"
    return module


def is_on_device(x, kind) -> bool:
    """True when ``x`` is an array of ``kind`` that lives in GPU memory."""
    if kind == "cupy":
        import cupy
        return isinstance(x, cupy.ndarray)
    if kind == "torch":
        import torch
        return isinstance(x, torch.Tensor) and x.is_cuda
    if kind == "pycuda":
        import pycuda.gpuarray as gpuarray
        return isinstance(x, gpuarray.GPUArray)
    raise ValueError(f"unknown device kind {kind!r}")


def to_host(x) -> np.ndarray:
    """A NumPy copy of a CuPy / torch / PyCUDA array (NumPy arrays pass through as arrays)."""
    kind = device_kind_of(x)
    if kind == "cupy":
        import cupy
        return cupy.asnumpy(x)
    if kind == "torch":
        return x.detach().cpu().numpy()
    if kind == "pycuda":
        return x.get()
    return np.asarray(x)


# -- Householder factorizations (QR, QL, LQ) --------------------------------------------

def reflectors_product(factors, tau, storage) -> np.ndarray:
    """The full orthogonal Q that LAPACK's documentation says (factors, tau) represent, built
    one elementary reflector H(i) = I - tau_i v_i v_i^H at a time (0-based i, k = len(tau)):

    - "QR" (xGEQRF): Q = H(0) H(1) ... H(k-1), m x m; v_i zero above a unit at row i, below it
      factors[i+1:, i].
    - "QL" (xGEQLF): Q = H(k-1) ... H(1) H(0), m x m; v_i zero below a unit at row m-k+i, above
      it factors[:m-k+i, n-k+i].
    - "LQ" (xGELQF): Q = H(k-1)^H ... H(0)^H, n x n; v_i zero left of a unit at i, after it
      conj(factors[i, i+1:]).

    Independent of hybridla's own code (a plain loop in double precision), so it checks that
    factors and tau are in LAPACK's storage format."""
    factors, tau = wide(factors), wide(tau)
    m, n = factors.shape
    k = len(tau)
    order = n if storage == "LQ" else m
    q = np.eye(order, dtype=factors.dtype)
    for i in range(k):
        v = np.zeros(order, dtype=factors.dtype)
        if storage == "QR":
            v[i], v[i + 1:] = 1, factors[i + 1:, i]
        elif storage == "QL":
            v[m - k + i], v[:m - k + i] = 1, factors[:m - k + i, n - k + i]
        else:
            v[i], v[i + 1:] = 1, factors[i, i + 1:].conj()
        h = np.eye(order, dtype=factors.dtype) - tau[i] * np.outer(v, v.conj())
        if storage == "QR":
            q = q @ h          # H(0) H(1) ... accumulated on the right
        elif storage == "QL":
            q = h @ q          # ... H(1) H(0): each later reflector goes on the left
        else:
            q = h.conj().T @ q
    return q


def triangle_of(factors, storage) -> np.ndarray:
    """The full-size triangular factor LAPACK leaves in `factors` (m x n): R = triu (QR), L on
    and below the (n-m)-th superdiagonal (QL: lower trapezoid at the bottom right), L = tril
    (LQ)."""
    factors = np.asarray(factors)
    m, n = factors.shape
    if storage == "QR":
        return np.triu(factors)
    if storage == "QL":
        return np.tril(factors, n - m)
    return np.tril(factors)


def factorization_ratio(a, left, right, dtype=None) -> float:
    """||A - left right||_1 / (max(m, n) ||A||_1 eps) in double precision, for A = Q R, A = Q L
    (left = Q) or A = L Q (left = L): LAPACK's xQRT01 first ratio. ``dtype`` is the working
    precision (default: that of ``left``)."""
    eps = eps_of(np.asarray(left).dtype if dtype is None else dtype)
    a = wide(a)
    m, n = a.shape
    if a.size == 0:
        return 0.0
    resid = norm1(a - wide(left) @ wide(right))
    return resid / (max(m, n) * max(norm1(a), np.finfo(float).tiny) * eps)


def orthogonality_ratio(q, dtype=None) -> float:
    """||I - Q^H Q||_1 / (m eps) for Q with orthonormal columns (m rows), or ||I - Q Q^H|| /
    (n eps) for one with more columns than rows (orthonormal rows): LAPACK's xQRT01 second
    ratio."""
    eps = eps_of(np.asarray(q).dtype if dtype is None else dtype)
    q = wide(q)
    m, n = q.shape
    if q.size == 0:
        return 0.0
    gram = q.conj().T @ q if m >= n else q @ q.conj().T
    return norm1(np.eye(gram.shape[0]) - gram) / (max(m, n) * eps)


def least_squares_ratio(a, x, b, dtype=None) -> float:
    """Residual orthogonality of a least-squares solution, LAPACK's xQRT17 style:
    max over columns of ||A^H r||_1 / (||A||_1 ||r||_1 max(m, n) eps) with r = b - A x (0 when
    r is exactly 0, as for a consistent system solved exactly)."""
    eps = eps_of(np.asarray(x).dtype if dtype is None else dtype)
    a, x, b = wide(a), wide(x), wide(b)
    if x.ndim == 1:
        x, b = x[:, None], b[:, None]
    m, n = a.shape
    worst = 0.0
    for j in range(b.shape[1]):
        r = b[:, j] - a @ x[:, j]
        rnorm = np.abs(r).sum()
        if rnorm == 0.0:
            continue
        worst = max(worst, np.abs(a.conj().T @ r).sum() / (norm1(a) * rnorm * max(m, n) * eps))
    return worst


def match_phases(q, r, q_ref, r_ref):
    """(q, r) of a QR factorization with each reflector's sign (real) or phase (complex) made that
    of (q_ref, r_ref): A = Q R is unique only up to a unitary diagonal D, A = (Q D)(D^H R). D is
    read off the diagonals of R and R_ref; it scales Q's first k columns and R's k rows."""
    q, r = wide(q).copy(), wide(r).copy()
    k = min(r.shape)
    d, d_ref = np.diagonal(r)[:k], np.diagonal(wide(r_ref))[:k]
    phase = np.ones(k, dtype=np.result_type(q, r_ref))
    nonzero = d != 0
    ratio = d_ref[nonzero] / d[nonzero]
    phase[nonzero] = ratio / np.abs(ratio)
    q[:, :k] *= phase
    r[:k, :] *= phase.conj()[:, None]
    return q, r


def lapack_householder(a, storage):
    """(factors, tau) of LAPACK's xGEQRF ("QR"), xGEQLF ("QL") or xGELQF ("LQ") of ``a``, from
    scipy.linalg.lapack's ?geqrf alone (scipy has no ?geqlf or ?gelqf); exact identities of
    LAPACK's algorithms (the same ?larfg calls on the same data):

    - QL: with J the reversal of rows and columns, J A J = (J Q J)(J L J) is a QR, and xGEQL2's
      reflector i is xGEQR2's reflector k - 1 - i of the reversed matrix, reversed;
    - LQ: A^H = Q^H L^H is a QR: xGELQF's factors are xGEQRF's of A^H, conjugate-transposed
      (xGELQ2 conjugates the row, calls ?larfg, stores the conjugate), the same tau.

    The result is in the working precision of ``a`` (ints -> float64)."""
    import scipy.linalg.lapack as lapack
    a = np.asarray(a)
    a = a.astype(working_dtype(a.dtype))
    if storage == "QR":
        t = a
    elif storage == "QL":
        t = a[::-1, ::-1]
    elif storage == "LQ":
        t = a.conj().T
    else:
        raise ValueError(f"unknown storage {storage!r}")
    (geqrf,) = lapack.get_lapack_funcs(("geqrf",), (t,))
    factors, tau, _, info = geqrf(np.asfortranarray(t))
    assert info == 0, f"scipy's {geqrf.typecode}geqrf: info={info}"
    if storage == "QR":
        return factors, tau
    if storage == "QL":
        return np.asfortranarray(factors[::-1, ::-1]), tau[::-1].copy()
    return np.asfortranarray(factors.conj().T), tau


def q_by_lapack(factors, tau, storage):
    """(Q, T) of the economic factorization that (factors, tau) represent in LAPACK's storage,
    Q formed by scipy.linalg.lapack's ?orgqr / ?ungqr (independent of the library under test;
    QL and LQ through the identities of ``lapack_householder``); k = min(m, n):

    - "QR": A = Q T, Q m x k, T = R's first k rows (k x n);
    - "QL": A = Q T, Q m x k (the full Q's last k columns), T = L's last k rows (k x n);
    - "LQ": A = T Q, T = L's first k columns (m x k), Q k x n (the full Q's first k rows)."""
    import scipy.linalg.lapack as lapack
    factors, tau = np.asarray(factors), np.asarray(tau)
    m, n = factors.shape
    k = min(m, n)
    name = "ungqr" if factors.dtype.kind == "c" else "orgqr"
    if storage == "QR":
        v, t = factors[:, :k], np.triu(factors)[:k, :]
    elif storage == "QL":
        v, t = factors[::-1, ::-1][:, :k], triangle_of(factors, "QL")[m - k:, :]
        tau = tau[::-1]
    else:
        v, t = factors.conj().T[:, :k], np.tril(factors)[:, :k]
    (orgqr,) = lapack.get_lapack_funcs((name,), (v,))
    q, _, info = orgqr(np.asfortranarray(v), tau)
    assert info == 0, f"scipy's {orgqr.typecode}{name}: info={info}"
    if storage == "QL":
        q = q[::-1, ::-1]
    elif storage == "LQ":
        q = q.conj().T
    return q, t


def potrf_ratio(a, c, lower, dtype=None) -> float:
    """||A - L L^H||_1 / (n ||A||_1 eps) with L = tril(c) (lower), or ||A - U^H U||_1 / (n
    ||A||_1 eps) with U = triu(c): LAPACK's xPOT01, in double precision; eps that of ``dtype``
    (default: ``c``'s)."""
    eps = eps_of(np.asarray(c).dtype if dtype is None else dtype)
    a = wide(a)
    n = a.shape[0]
    if n == 0:
        return 0.0
    factor = np.tril(wide(c)) if lower else np.triu(wide(c))
    product = factor @ factor.conj().T if lower else factor.conj().T @ factor
    return norm1(a - product) / (n * max(norm1(a), np.finfo(float).tiny) * eps)


def _columns(*arrays):
    return [wide(x)[:, None] if np.ndim(x) == 1 else wide(x) for x in arrays]


def normwise_backward_error(a, x, b, dtype=None) -> float:
    """max over columns j of ||b_j - A x_j||_inf / ((||A||_inf ||x_j||_inf + ||b_j||_inf) n eps),
    in double precision: the normwise backward error (Rigal-Gaches) in units of n eps, eps that of
    ``dtype`` (default: ``x``'s). A backward-stable solve keeps it O(1)."""
    eps = eps_of(np.asarray(x).dtype if dtype is None else dtype)
    a = wide(a)
    x, b = _columns(x, b)
    n = a.shape[1]
    anorm = float(np.abs(a).sum(axis=1).max()) if a.size else 0.0
    worst = 0.0
    for j in range(b.shape[1]):
        resid = float(np.abs(b[:, j] - a @ x[:, j]).max())
        if not np.isfinite(resid):
            return float("inf")
        if resid == 0.0:
            continue
        denom = (anorm * float(np.abs(x[:, j]).max()) + float(np.abs(b[:, j]).max())) \
            * max(n, 1) * eps
        worst = max(worst, float("inf") if denom == 0.0 else resid / denom)
    return worst


def forward_error_ratio(x, x_ref, kappa, dtype=None) -> float:
    """max over columns of ||x_j - x_ref_j||_inf / (kappa n eps ||x_ref_j||_inf): the forward
    error against a reference solution, in units of what a backward-stable solver of a system of
    condition number ``kappa`` (and order n = len(x)) guarantees to first order."""
    eps = eps_of(np.asarray(x).dtype if dtype is None else dtype)
    x, x_ref = _columns(x, x_ref)
    n = x.shape[0]
    worst = 0.0
    for j in range(x.shape[1]):
        diff = float(np.abs(x[:, j] - x_ref[:, j]).max())
        if not np.isfinite(diff):
            return float("inf")
        if diff == 0.0:
            continue
        denom = kappa * max(n, 1) * eps * float(np.abs(x_ref[:, j]).max())
        worst = max(worst, float("inf") if denom == 0.0 else diff / denom)
    return worst


def _lstsq_sensitivity(a, b, x_ref):
    """(kappa_2(A), ||A||_2, ||r_ref_j||_2 and ||x_ref_j||_2 per column), r_ref = b - A x_ref."""
    a = wide(a)
    x_ref, b = _columns(x_ref, b)
    s = np.linalg.svd(a, compute_uv=False)
    kappa, anorm = float(s[0] / s[-1]), float(s[0])
    r = b - a @ x_ref
    return kappa, anorm, np.linalg.norm(r, axis=0), np.linalg.norm(x_ref, axis=0)


def lstsq_forward_ratio(a, b, x, x_ref, dtype=None) -> float:
    """max over columns of ||x_j - x_ref_j||_2 / (||x_ref_j||_2 max(m, n) eps (kappa + kappa^2
    ||r_j||_2 / (||A||_2 ||x_ref_j||_2))), r = b - A x_ref: a full-rank least-squares solution
    (m >= n) against a reference one in units of the first-order perturbation bound of the
    problem (Higham, ASNA 2nd ed., thm 20.1), which both backward-stable solutions satisfy."""
    eps = eps_of(np.asarray(x).dtype if dtype is None else dtype)
    m, n = np.shape(a)
    kappa, anorm, rnorm, xnorm = _lstsq_sensitivity(a, b, x_ref)
    x, x_ref = _columns(x, x_ref)
    diff = np.linalg.norm(x - x_ref, axis=0)
    worst = 0.0
    for j in range(x.shape[1]):
        if diff[j] == 0.0:
            continue
        if not np.isfinite(diff[j]):
            return float("inf")
        denom = xnorm[j] * max(m, n) * eps * (kappa + kappa ** 2 * rnorm[j] /
                                              max(anorm * xnorm[j], np.finfo(float).tiny))
        worst = max(worst, float("inf") if denom == 0.0 else float(diff[j] / denom))
    return worst


def residues_ratio(a, b, residues, residues_ref, dtype) -> float:
    """max over columns of |rho_j - rho_ref_j| / (2 ||b_j||_2^2 (1 + 2 kappa) max(m, n) eps) for
    the squared residual norms rho = ||b - A x||_2^2 that lstsq returns: |rho - rho_ref| <=
    ||r - r_ref|| (||r|| + ||r_ref||), ||r|| <= ||b||, and a backward-stable solution's residual
    is within (1 + 2 kappa) max(m, n) eps ||b|| of the exact one (Higham, ASNA thm 20.1), to first
    order."""
    eps = eps_of(dtype)
    a = wide(a)
    m, n = a.shape
    s = np.linalg.svd(a, compute_uv=False)
    kappa = float(s[0] / s[-1])
    (b,) = _columns(b)
    bnorm = np.linalg.norm(b, axis=0)
    diff = np.abs(np.atleast_1d(np.asarray(residues, dtype=float))
                  - np.atleast_1d(np.asarray(residues_ref, dtype=float)))
    assert diff.shape == bnorm.shape, (diff.shape, bnorm.shape)
    worst = 0.0
    for j in range(len(diff)):
        if diff[j] == 0.0:
            continue
        if not np.isfinite(diff[j]):
            return float("inf")
        denom = 2 * bnorm[j] ** 2 * (1 + 2 * kappa) * max(m, n) * eps
        worst = max(worst, float("inf") if denom == 0.0 else float(diff[j] / denom))
    return worst


class StreamedStoreStub:
    """What a recorder sees of a host-resident m x n matrix on a device backend (nothing runs):
    for tests of which transfers a task graph records."""
    streamed, staged, pin, transfer = True, False, False, "pageable"

    def __init__(self, m, n):
        from hybridla.backend.residency import HOST, Residency
        self.m, self.n, self.dtype = m, n, np.dtype(np.float64)
        self.residency = Residency(m, n, 1, home=HOST)  # tiles of one element: exact

    def workspace(self, name, rows, cols):
        return None

    def block(self, r0, r1, c0, c1):
        return None

    def upload_block(self, lane, r0, r1, c0, c1):
        pass

    def download_block(self, lane, r0, r1, c0, c1):
        pass

    def panel_to_host(self, lane, step, r0, c0, c1, r1=None):
        pass

    def panel_to_device(self, lane, step, r0, c0, c1, r1=None):
        pass


class StagedStoreStub(StreamedStoreStub):
    """The same, staged through pinned slots (device.host_transfer: staged)."""
    staged, transfer, up_slots, down_slots = True, "staged", 4, 4

    def __init__(self, m, n, nb):
        super().__init__(m, n)
        self.slot_elements = nb * max(m, n)

    def stage_block(self, lane, slot, r0, r1, c0, c1):
        pass

    def upload_staged(self, lane, slot, r0, r1, c0, c1):
        pass

    def download_staged(self, lane, slot, r0, r1, c0, c1):
        pass

    def unstage_block(self, lane, slot, r0, r1, c0, c1):
        pass


def load_perf_script(name):
    """perf/<name>.py as a module (the benchmarks are scripts, not package modules), for a
    pytest fixture that yields it; `unload` it afterwards."""
    import importlib.util
    import sys
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "perf" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"hybridla_perf_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def unload_perf_script(module):
    import sys
    sys.modules.pop(module.__name__, None)


def assert_downloads_cover_once(graph, m, n, store=None):
    """A streamed factorization's recorded graph sends every element of the m x n matrix home
    exactly once, and nothing writes a block after its download was recorded; the store's
    residency (when given) agrees: its home holds every tile at the end."""
    if store is not None:
        assert store.residency.home_is_current(), store.residency
    covered = np.zeros((m, n), int)
    for task in graph.tasks:
        if task.name != "download":
            continue
        r0, r1, c0, c1 = (task.fn.keywords[key] for key in ("r0", "r1", "c0", "c1"))
        covered[r0:r1, c0:c1] += 1
        for later in graph.tasks[task.index + 1:]:
            for w in later.writes:
                assert not (w.resource == "A" and w.r0 < r1 and r0 < w.r1 and w.c0 < c1
                            and c0 < w.c1), f"{later.name} writes into a downloaded block"
    np.testing.assert_array_equal(covered, 1)


def markdown_rows(out):
    """(header, [cells as a dict per row]) of the first markdown table printed in `out`."""
    lines = [ln for ln in out.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for ln in lines[1:]:
        cells = dict(zip(header, (c.strip() for c in ln.strip("|").split("|"))))
        assert len(cells) == len(header), ln
        rows.append(cells)
    return header, rows
