"""QR with column pivoting: qr(pivoting=True) and LAPACK's geqp3. On a device backend (either
interface) the blocked geqp3 of lapack/geqp3.py (MAGMA's shape: laqps's panel where the matrix
lives); on the host backend LAPACK's own, through scipy.linalg.lapack."""
from __future__ import annotations

import numpy as np

from . import backend as _backends
from . import lapack as _lapack
from ._common import (_check_mode_and_lwork, _factor, _flag, _host_backend, _host_matrix,
                      _shape_and_dtype, is_device_array)
from ._decomp_householder import _qr_results
from .lapack._householder import QR
from .scheduler.plan import make_plan


# -- QR with column pivoting -----------------------------------------------------------------------
def geqp3(a, overwrite_a=False, check_finite=True, *, backend=None):
    """LAPACK geqp3: QR with column pivoting, A[:, jpvt] = Q R, in LAPACK's storage.

    As scipy.linalg.lapack's dgeqp3 returns (qr, jpvt, tau), except that jpvt is 0-based, as
    scipy.linalg.qr(pivoting=True) returns it (LAPACK's and scipy.linalg.lapack's are 1-based).
    On a device backend (a device array, or a host array with the cuda backend) LAPACK's
    blocked algorithm with its laqps panel runs where the matrix lives (lapack/geqp3.py; cuSOLVER
    has none); on the host backend, LAPACK's geqp3.

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix to factor, host or device as for lu_factor.
    overwrite_a : bool, optional
        Whether the factors may be written over `a` (default False); they are where `a` is
        F-ordered, writeable and of its LAPACK dtype.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend : optional
        Keyword-only, checked as lu_factor's; the work is LAPACK's on the host whatever it is.

    Returns
    -------
    factors : (M, N) ndarray
        R on and above the diagonal (``|R(j, j)|`` non-increasing), the Householder reflectors
        below it, in `a`'s LAPACK dtype.
    jpvt : (N,) ndarray of int32
        The column permutation, 0-based: column j of A[:, jpvt] (= Q R) is column jpvt[j] of A.
    tau : (K,) ndarray
        The K = min(M, N) scalar factors of the reflectors (orgqr / ungqr form Q from them).

    Raises
    ------
    NotImplementedError
        `a` is a device array: the GPU version of QR with column pivoting is not implemented
        yet.
    ValueError
        `a` is not 2-D, or holds infs or NaNs (check_finite); overwrite_a is not True or False;
        a bad backend.
    TypeError
        `a` does not hold numbers or is a scipy.sparse matrix.
    RuntimeError
        backend="cuda" where the cuda backend is not available.

    See Also
    --------
    qr : With pivoting=True, Q, R and the permutation as the user wants them.
    geqrf : QR without pivoting, on the hybrid engine.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> from scipy.linalg.lapack import dorgqr
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> factors, jpvt, tau = hybridla.geqp3(a, backend="host")
    >>> factors.shape, jpvt, tau.shape
    ((3, 2), array([1, 0], dtype=int32), (2,))
    >>> q, work, info = dorgqr(factors, tau)
    >>> np.allclose(q @ np.triu(factors[:2]), a[:, jpvt])
    True
    """
    overwrite_a = _flag("overwrite_a", overwrite_a)
    return _geqp3(a, overwrite_a, check_finite, backend, {})


def _geqp3(a, overwrite_a, check_finite, backend, options):
    """Validate (a, backend, the engine options), then QR with column pivoting: (factors, jpvt
    0-based, tau), factors where `a` lives; an empty matrix gives a new empty array, jpvt =
    0, ..., N - 1 and an empty tau, as scipy."""
    if is_device_array(a) or _host_backend(backend).has_device:
        def driver(A, plan):
            jpvt, tau, info, trace = _lapack.geqp3(A, plan)
            return info, (jpvt, tau), trace
        factors, _, results = _factor(a, overwrite_a, check_finite, backend, options, "qr",
                                      driver)
        if results is None:  # empty: a new array, never the user's own
            (m, n), dtype = _shape_and_dtype(factors)
            if is_device_array(factors):
                factors = _backends.get_backend("cuda").empty((m, n), dtype, like=factors)
            return factors, np.arange(n, dtype=np.int32), np.zeros(0, dtype)
        return (factors, *results)
    array, dtype = _host_matrix("a", a, check_finite)
    ops = _host_backend(backend)
    m, n = array.shape
    make_plan(ops, m, n, dtype, routine="qr", **options)  # checked, as every engine option
    if m == 0 or n == 0:
        return (np.empty((m, n), dtype, order="F"), np.arange(n, dtype=np.int32),
                np.zeros(0, dtype))
    work = array if array.dtype == dtype else array.astype(dtype, order="F")
    ours = work is not array
    may_overwrite = ours or (overwrite_a and work.flags.writeable)
    factors, jpvt, tau, info = _lapack.geqp3_host(work, overwrite_a=may_overwrite)
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal geqp3")
    return factors, jpvt, tau


def _pivoted_qr(a, mode, overwrite_a, lwork, check_finite, backend, options):
    """qr(pivoting=True): scipy.linalg.qr's results, built where the factors are (geqp3, then
    orgqr / ungqr as qr's)."""
    overwrite_a = _flag("overwrite_a", overwrite_a)
    _check_mode_and_lwork(mode, lwork)
    factors, jpvt, tau = _geqp3(a, overwrite_a, check_finite, backend, options)
    return (*_qr_results(factors, tau if tau.size else None, QR, mode, options), jpvt)
