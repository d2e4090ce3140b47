"""solve: a general, Hermitian positive definite, symmetric, Hermitian, diagonal, tridiagonal,
banded or triangular system (scipy.linalg._basic)."""
from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning, bandwidth, get_lapack_funcs
from scipy.linalg.lapack import _compute_lwork

from . import backend as _backends
from ._common import (
    _common_dtype,
    _device_backend,
    _device_matrix_checks,
    _flag,
    _host_matrix,
    is_device_array,
)
from ._decomp_cholesky import _potrf, cho_solve
from ._decomp_lu import _getrf, lu_solve
from ._logging import get_logger
from ._solve_device import solve_form
from .lapack import getrs, potrs
from .lapack._host_rhs import solve_host_rhs

_log = get_logger()
_ASSUME = {None: "gen", "gen": "gen", "general": "gen", "pos": "pos", "positive definite": "pos",
           "sym": "sym", "symmetric": "sym", "her": "her", "hermitian": "her",
           "diagonal": "diagonal", "tridiagonal": "tridiagonal", "banded": "banded",
           "upper triangular": "upper", "lower triangular": "lower"}
# every form takes device arrays: "gen" and "pos" through lu_factor's / cho_factor's engine, the
# structured ones through _solve_device.py (host arrays: scipy's LAPACK paths, below)
_DEVICE_FORMS = tuple(dict.fromkeys(_ASSUME.values()))
_STRUCTURED = tuple(form for form in _DEVICE_FORMS if form not in ("gen", "pos"))


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, backend=None, nb=None, lookahead=None, panel=None,
          trace=None, progress=False):
    """Solve a x = b for a square a, as scipy.linalg.solve: by LU, Cholesky, LDL^T, ...

    assume_a "gen" (the default) factors by LU (getrf + getrs), "pos" by Cholesky (potrf +
    potrs) on the `lower` (or upper) triangle. The other forms are scipy's LAPACK paths for
    host arrays and their GPU counterparts for device arrays (see assume_a and Notes). Every
    argument is checked before any work (a bad b never costs a factorization, nor a's
    contents under overwrite_a).

    Parameters
    ----------
    a : (..., N, N) array_like or device array
        The matrix, host or device as for lu_factor (a stack: see Notes); with assume_a="pos",
        "sym" or "her" only its `lower` (or upper) triangle is read, with a triangular form
        only that triangle, with "diagonal" only the diagonal, with "tridiagonal" only three
        diagonals.
    b : (N,) or (..., N, K) array_like or device array
        The right-hand side(s), where `a` is (on a device of `a`'s dtype). A host `a` and `b`
        meet in their common precision (float32 a with float64 b: float64, as scipy). With
        stacks, as scipy: a 1-D `b` is one vector for every member, and the batch axes of `a`
        and `b` broadcast.
    lower : bool, optional
        With "pos", "sym" or "her", use the lower triangle of `a` (default False: the upper);
        ignored otherwise (the triangular forms name their triangle). True or False, or 0, 1.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False).
    overwrite_b : bool, optional
        Whether x may be written over `b` (default False): a device `b` as lu_solve's; with
        "gen" or "pos" a host `b` is left as it is (x comes in a new array from the solve where
        the factors are: see Notes); with the other forms, as scipy (x in `b` when it is
        F-contiguous of the common dtype).
    check_finite : bool, optional
        Check that `a` and `b` hold no infs or NaNs before any work (default True).
    assume_a : str or None, optional
        The kind of matrix, as scipy's names:

        - None (the default) or "gen" / "general": general, LU. Unlike scipy, None does not
          detect structure: it means "gen".
        - "pos" / "positive definite": Hermitian positive definite, Cholesky.
        - "sym" / "symmetric": symmetric, LDL^T with Bunch-Kaufman pivoting (sytrf, sytrs,
          sycon); "her" / "hermitian": Hermitian, LDL^H (hetrf, hetrs, hecon); a real "her" is
          "sym", as scipy.
        - "diagonal": b / diag(a); "tridiagonal": gttrf, gttrs, gtcon; "banded": a's bandwidth,
          gbsv, gbcon; "upper triangular" / "lower triangular": trtrs and trcon, no
          factorization.

        Every form takes device arrays (see Notes for how each runs there).
    transposed : bool, optional
        Solve a^T x = b instead (default False); with "pos" or "her", for a complex Hermitian
        `a`, that is conj(a) x = b; a "sym" or "diagonal" a^T is a. scipy refuses complex
        transposed solves, hybridla solves them for every form. True or False, or 0, 1.
    backend, nb, lookahead, panel, trace, progress : optional
        Keyword-only engine options, as lu_factor's (configuration keys "lu.*", or "cho.*"
        with "pos").

    Returns
    -------
    ndarray or device array
        The solution x, of `b`'s shape, where `a` lives (a device x as the same kind of array as
        `b`), in the precision where `a` and `b` meet.

    Raises
    ------
    LinAlgError
        A singular `a`: "Matrix is singular." (an exactly zero pivot, or a condition estimate
        of 0); with "pos", an `a` that is not positive definite (the message names the failing
        minor); factors that overflowed (entries of `a` near the largest float), saying so.
    ValueError
        assume_a is not one of its values; lower, overwrite_a, overwrite_b or transposed is not
        True or False; one of `a` and `b` is a device array and the other not; `a` is not
        square and 2-D, `b` not 1-D or 2-D with N rows; infs or NaNs (check_finite); a bad
        engine option (named), as lu_factor's.
    TypeError
        `a` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose dtype
        is not `a`'s, or an unsupported device dtype.
    NotImplementedError
        assume_a="pos" with transposed=True for a complex device array (solve a x = conj(b) and
        conjugate x instead).
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        On a device, a matrix over the device-memory budget, as lu_factor's.

    Warns
    -----
    LinAlgWarning
        "Ill-conditioned matrix (rcond=...): result may not be accurate." when the condition
        estimate rcond < eps/2 (LAPACK's lamch("E")) with "gen", "pos" and "banded"; < eps with
        the other forms, as scipy 1.17's compiled solve.

    See Also
    --------
    lu_factor, lu_solve, cho_factor, cho_solve : The two steps apart.
    solve_mixed : The factorization in a lower precision, refined to the working one.

    Notes
    -----
    After the factorization rcond = 1 / (||a||_1 ||a^-1||_1) is estimated from the factors
    (gecon / pocon, O(n^2)). scipy takes the inf-norm for transposed=True; here the 1-norm
    serves both (they differ by at most a factor n). A Hermitian a with transposed=True is
    solved as a conj(x) = conj(b).

    A host a is solved where it is factored: on a device backend b goes up and x comes down
    before the factors' device memory is freed (no host triangular solve on the factors).

    A stack (..., N, N) is validated once, then solved member by member on the host (members
    of order up to 256 by LAPACK through scipy.linalg.lapack, larger ones by the engine), its
    singular members (an exactly zero pivot, a condition estimate of 0, with "pos" one that is
    not positive definite) reported together in scipy's words, "A singular matrix detected:
    slice(s) [i, ...] are singular." (flat indices into the broadcast batch), ill-conditioned
    ones in one LinAlgWarning naming each. On the device "gen" and "pos" are one batched
    computation (lu_factor's batched LU and cuBLAS getrsBatched; cuSOLVER potrfBatched and two
    cuBLAS trsmBatched), without a condition estimate; the other forms are the 2-D solve of
    each member in turn. x is a new array.

    Device arrays of the other forms (hybridla/_solve_device.py), x left on the device: "sym"
    by cuSOLVER's Bunch-Kaufman <t>sytrf and Xsytrs, the condition estimated with those
    solves (sycon's ||a||_1, the triangle mirrored into the other, which overwrite_a allows);
    a complex "her" as "gen" on the Hermitian matrix completed from its triangle (cuSOLVER has
    no hetrf: its c/zsytrf are for complex symmetric matrices), LU at twice hetrf's flops;
    the triangular forms by cuBLAS trsm, trcon's estimate on a zero-padded copy of the
    triangle (n^2 more device memory for the call); "diagonal" by cuBLAS dgmm with the
    diagonal's reciprocals. "tridiagonal" and "banded" have no GPU library routine that fits
    (no gtsv in cuSOLVER; cuSPARSE's gtsv2 reports no singularity and solves no transposed
    system): scipy's host path runs on what comes down, the three diagonals (O(n) bytes) or
    all of a (O(n^2): the bandwidth is found on the host), and b; x goes up.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 2., 0.], [2., 5., 1.], [0., 1., 3.]])
    >>> b = np.array([1., 2., 3.])
    >>> x = hybridla.solve(a, b, backend="host")
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.solve(a, b, assume_a="pos", backend="host")  # Cholesky
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.solve(a.astype(np.float32), b, transposed=True, backend="host")
    >>> np.allclose(a.T @ x, b), x.dtype
    (True, dtype('float64'))
    >>> x = hybridla.solve(a, b, assume_a="sym", lower=True, backend="host")  # LDL^T
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.solve(np.triu(a), b, assume_a="upper triangular", backend="host")
    >>> np.allclose(np.triu(a) @ x, b)
    True
    >>> hybridla.solve(np.array([[1., 2.], [2., 4.]]), np.ones(2), backend="host")
    Traceback (most recent call last):
        ...
    numpy.linalg.LinAlgError: Matrix is singular.
    """
    lower, transposed = _flag("lower", lower), _flag("transposed", transposed)
    overwrite_a, overwrite_b = _flag("overwrite_a", overwrite_a), _flag("overwrite_b", overwrite_b)
    if assume_a not in _ASSUME:
        raise ValueError(f"assume_a must be one of {', '.join(map(repr, _ASSUME))}; got "
                         f"assume_a={assume_a!r}")
    form = _ASSUME[assume_a]
    # stacks (..., N, N): validated once, then member by member or batched (_stacked.py)
    from . import _stacked
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress)
    if _stacked.is_stack((a, 2), (b, 2)):
        return _stacked.solve(a, b, lower, check_finite, form, transposed, backend, options)
    a, b, overwrite_a = _system(a, b, check_finite, backend, overwrite_a)
    if form in _STRUCTURED:
        if is_device_array(a):  # x is None where rcond is 0 or NaN: the check raises
            x, rcond, warn_below = solve_form(_device_backend("a", backend), form, a, b, lower,
                                              transposed, overwrite_a, overwrite_b, backend,
                                              options)
        else:
            x, rcond, warn_below = _solve_structured(form, a, b, lower, transposed, overwrite_a,
                                                     overwrite_b)
        _check_condition(rcond, a, check_finite, warn_below)
        return x
    host = not is_device_array(a)
    if form == "pos":
        # Hermitian A: A^T = conj(A), so A^T x = b is A conj(x) = conj(b)
        conjugate = transposed and _dtype_of(a).kind == "c"
        if conjugate and not host:
            raise NotImplementedError("solve(assume_a='pos', transposed=True) of a complex device "
                                      "array: solve a x = conj(b) and conjugate x instead")
        rhs = np.conj(b) if conjugate else b
        uplo = "L" if lower else "U"
        c, rcond, x = _potrf(a, lower, overwrite_a, False, backend, options, condition=True,
                             then=_solver(rhs, lambda ops, C, B: potrs(ops, C, B, uplo))
                             if host else None)
        _check_condition(rcond, c, check_finite)
        if x is None:
            x = cho_solve((c, lower), rhs, overwrite_b=overwrite_b or conjugate,
                          check_finite=False)
        return x.conj() if conjugate else x
    trans = "T" if transposed else "N"
    lu, piv, info, rcond, x = _getrf(a, overwrite_a, False, backend, options, condition=True,
                                     then=_solver(b, lambda ops, LU, B: getrs(ops, LU, B, trans))
                                     if host else None)
    if info > 0:
        raise LinAlgError("Matrix is singular.")
    _check_condition(rcond, lu, check_finite)
    if x is None:
        x = lu_solve((lu, piv), b, trans=trans, overwrite_b=overwrite_b, check_finite=False)
    return x


def _solver(b, solve):
    """then(ops, F) for _getrf / _potrf: x for the host right-hand side b, solved where the
    factors F are before their store is freed (on a device: up with b, the triangular solves
    there, x down; the factors never come back to be solved on the host, whose triangular
    solve of one column reads them at a fraction of the device's bandwidth)."""
    def then(ops, F):
        n = F.n
        rhs = np.asfortranarray(b.reshape(n, -1), dtype=F.dtype)
        if rhs.size == 0:
            return None  # the usual path handles empty right-hand sides
        storage = ops.empty(rhs.shape, F.dtype)
        X = ops.wrap(storage)
        try:
            return solve_host_rhs(ops, F, X, rhs, solve).reshape(b.shape)
        finally:
            X.close()
    return then


def _system(a, b, check_finite, backend, overwrite_a):
    """Check a (square) and b (1-D or 2-D, as many rows) before any work, both on the host or
    both on the device. A host a is returned in the precision where a and b meet (a new array
    when that is not a's, which the factorization may then overwrite). Returns (a, b,
    overwrite_a)."""
    if is_device_array(a) != is_device_array(b):
        raise ValueError("a and b must both be host arrays or both device arrays")
    if is_device_array(a):
        ops = _device_backend("a", backend)
        shape, dtype = _device_matrix_checks("a", a, ops, check_finite)
        b_shape, b_dtype = _device_matrix_checks("b", b, ops, check_finite, ndims=(1, 2))
        if b_dtype != dtype:
            raise TypeError(f"b must have the dtype of a ({dtype}) on the device; got {b_dtype}")
    else:
        _backends.check_name(backend)
        a_array, a_dtype = _host_matrix("a", a, check_finite)
        b, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
        shape, b_shape = a_array.shape, b.shape
        dtype = _common_dtype(a_dtype, b_dtype)
        a = a_array
        if a_array.dtype != dtype:
            a, overwrite_a = a_array.astype(dtype, order="F"), True
    if shape[0] != shape[1]:
        raise ValueError(f"expected a square matrix for a; got shape {shape}")
    if b_shape[0] != shape[0]:
        raise ValueError(f"b must have {shape[0]} rows to match a (shape {shape}); got shape "
                         f"{b_shape}")
    return a, b, overwrite_a


def _dtype_of(x):
    return np.dtype(x.__cuda_array_interface__["typestr"]) if is_device_array(x) else x.dtype


def _check_condition(rcond, factors, check_finite, warn_below=0.5):
    """scipy's tests on the condition estimate: 0 is singular, NaN means the factors are not
    finite (a was, when checked: the factorization overflowed), below warn_below * eps a
    warning; None (no estimate: ||a||_1 overflows) passes."""
    _log.debug("solve: reciprocal condition estimate %s", rcond)
    if rcond is None:
        return
    if rcond == 0:
        raise LinAlgError("Matrix is singular.")
    if np.isnan(rcond):
        raise LinAlgError("the factorization of a overflowed: its factors hold infs or NaNs "
                          "(entries of a near the largest floating-point number; scale a)"
                          if check_finite else
                          "the factors of a hold infs or NaNs: a has non-finite entries "
                          "(check_finite=False), or its factorization overflowed")
    if not rcond >= np.finfo(_dtype_of(factors)).eps * warn_below:
        warnings.warn(f"Ill-conditioned matrix (rcond={rcond:.6g}): result may not be "
                      f"accurate.", LinAlgWarning, stacklevel=4)


# -- the host-only forms: scipy's own LAPACK paths ---------------------------------------------
def _singular(info):
    if info > 0:
        raise LinAlgError("Matrix is singular.")


def _sym_her(prefix):
    """LDL^T (sytrf) or LDL^H (hetrf) with Bunch-Kaufman pivoting, sytrs / hetrs, sycon / hecon.
    A^T = A (sym), A^T = conj(A) (her): a transposed solve is a x = b, or a conj(x) = conj(b)."""
    def solve(a, b, lower, transposed, overwrite_a, overwrite_b):
        trf, lwork, trs, con = get_lapack_funcs(
            (f"{prefix}trf", f"{prefix}trf_lwork", f"{prefix}trs", f"{prefix}con"), (a, b))
        anorm = _symmetric_norm(a, lower)  # before trf may overwrite a
        ldu, ipiv, info = trf(a, lower=lower, lwork=_compute_lwork(lwork, a.shape[0], lower),
                              overwrite_a=overwrite_a)
        _singular(info)
        conjugate = transposed and prefix == "he"
        x, info = trs(ldu, ipiv, b.conj() if conjugate else b, lower=lower,
                      overwrite_b=overwrite_b or conjugate)
        _singular(info)
        rcond, _ = con(ldu, ipiv, anorm, lower=lower)
        return (x.conj() if conjugate else x), rcond
    return solve


def _symmetric_norm(a, lower):
    """||A||_1 of the symmetric or Hermitian A that the `lower` (or upper) triangle of a holds."""
    t = np.abs(np.tril(a) if lower else np.triu(a))
    return float((t.sum(axis=0) + t.sum(axis=1) - np.diagonal(t)).max())


def _diagonal(a, b, lower, transposed, overwrite_a, overwrite_b):
    d = np.diagonal(a)
    _singular(int((d == 0).any()))
    in_place = overwrite_b and b.flags.writeable
    x = np.divide(b, d[:, None], out=b if in_place else None)
    size = np.abs(d)
    return x, size.min() / size.max()


def _tridiagonal(a, b, lower, transposed, overwrite_a, overwrite_b):
    """gttrf + gttrs (trans) + gtcon, on the three diagonals of a."""
    return _gtsv(np.diag(a, -1), np.diag(a), np.diag(a, 1), b, transposed, overwrite_b)


def _gtsv(dl, d, du, b, transposed, overwrite_b):
    """_tridiagonal on the host vectors of a's sub-, main and superdiagonal (the device form
    brings them down: _solve_device.py)."""
    trf, trs, con = get_lapack_funcs(("gttrf", "gttrs", "gtcon"), (d, b))
    norm = "I" if transposed else "1"  # ||A^T||_1 = ||A||_inf
    sums = np.abs(d)
    sums[1:] += np.abs(dl if transposed else du)
    sums[:-1] += np.abs(du if transposed else dl)
    dl, d, du, du2, ipiv, info = trf(dl, d, du)
    _singular(info)
    x, info = trs(dl, d, du, du2, ipiv, b, trans="T" if transposed else "N",
                  overwrite_b=overwrite_b)
    _singular(info)
    rcond, _ = con(dl, d, du, du2, ipiv, float(sums.max()), norm=norm)
    return x, rcond


def _banded(a, b, lower, transposed, overwrite_a, overwrite_b):
    """scipy's: a's bandwidth, gbsv on the band of a (or a^T), gbcon."""
    gbsv, gbcon, langb = get_lapack_funcs(("gbsv", "gbcon", "langb"), (a, b))
    m = a.T if transposed else a
    kl, ku = bandwidth(m)
    n = m.shape[0]
    ab = np.zeros((2 * kl + ku + 1, n), dtype=a.dtype, order="F")
    for k in range(-kl, ku + 1):  # LAPACK band storage: A(i, j) at row kl + ku + i - j
        ab[kl + ku - k, max(k, 0):n + min(k, 0)] = np.diagonal(m, k)
    anorm = langb("1", kl, ku, ab[kl:])
    lub, piv, x, info = gbsv(kl, ku, ab, b, overwrite_ab=True, overwrite_b=overwrite_b)
    _singular(info)
    rcond, _ = gbcon(kl, ku, lub, piv, anorm, norm="1")
    return x, rcond


def _triangular(uplo):
    """trtrs (trans) + trcon on the `uplo` triangle (scipy ignores `lower` here)."""
    def solve(a, b, lower, transposed, overwrite_a, overwrite_b):
        trs, con = get_lapack_funcs(("trtrs", "trcon"), (a, b))
        x, info = trs(a, b, lower=uplo == "L", trans=int(transposed), overwrite_b=overwrite_b)
        _singular(info)
        rcond, _ = con(a, norm="I" if transposed else "1", uplo=uplo)
        return x, rcond
    return solve


# form: (solver(a, b2d, lower, transposed, overwrite_a, overwrite_b) -> (x2d, rcond), warning
# threshold in units of eps: scipy 1.17's compiled solve warns below eps, its banded path (the
# Python one) below lamch("E") = eps / 2)
_HOST_FORMS = {
    "sym": (_sym_her("sy"), 1.0),
    "her": (_sym_her("he"), 1.0),
    "diagonal": (_diagonal, 1.0),
    "tridiagonal": (_tridiagonal, 1.0),
    "banded": (_banded, 0.5),
    "upper": (_triangular("U"), 1.0),
    "lower": (_triangular("L"), 1.0),
}


def _solve_structured(form, a, b, lower, transposed, overwrite_a, overwrite_b):
    """A host system of one of the host-only forms, a and b validated, a in the common dtype.
    Returns (x, rcond or None, warning threshold in eps)."""
    dtype, n = a.dtype, a.shape[0]
    rhs = b[:, None] if b.ndim == 1 else b
    if rhs.dtype != dtype:
        rhs, overwrite_b = rhs.astype(dtype, order="F"), True
    if n == 0 or rhs.size == 0:
        return np.empty(b.shape, dtype), None, 1.0
    if form == "her" and dtype.kind != "c":
        form = "sym"  # as scipy: LAPACK has no real Hermitian routines
    solver, warn_below = _HOST_FORMS[form]
    if n == 1:  # scipy's scalar path, for every form
        _singular(int(a[0, 0] == 0))
        x, rcond = rhs / a[0, 0], None
    else:
        x, rcond = solver(a, rhs, lower, transposed, overwrite_a, overwrite_b)
    return (x[:, 0] if b.ndim == 1 else x), rcond, warn_below
