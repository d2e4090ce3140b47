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


class StreamedStoreStub:
    """What a recorder sees of a host-resident m x n matrix on a device backend (nothing runs):
    for tests of which transfers a task graph records."""
    streamed, staged, pin, transfer = True, False, False, "pageable"

    def __init__(self, m, n):
        self.m, self.n, self.dtype = m, n, np.dtype(np.float64)

    def workspace(self, name, rows, cols):
        return None

    def block(self, r0, r1, c0, c1):
        return None

    def upload_block(self, lane, r0, r1, c0, c1):
        pass

    def download_block(self, lane, r0, r1, c0, c1):
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


def assert_downloads_cover_once(graph, m, n):
    """A streamed factorization's recorded graph sends every element of the m x n matrix home
    exactly once, and nothing writes a block after its download was recorded."""
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
