"""QR, QL and LQ: qr, ql, lq (scipy.linalg._decomp_qr); LAPACK's geqrf, geqlf, gelqf are in
_decomp_householder."""
from __future__ import annotations

import numpy as np

from . import _stacked, _stacked_qr
from . import backend as _backends
from ._common import _check_mode_and_lwork, _flag, _shape_and_dtype, is_device_array
from ._decomp_householder import _householder_factor, _qr_results
from ._decomp_qr_pivoted import _pivoted_qr
from .lapack._householder import LQ, QL, QR

def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True, *,
       backend=None, nb=None, lookahead=None, panel=None, trace=None, progress=False,
       ooc=None):
    """QR decomposition A = Q R (LAPACK geqrf), or A[:, P] = Q R (geqp3), as scipy.linalg.qr.

    Every argument is checked before any work.

    Parameters
    ----------
    a : (..., M, N) array_like or device array
        The matrix, host or device as for lu_factor. A device array gives device arrays (Q
        formed on the device).
        A stack (..., M, N), as scipy >= 1.15 takes it: each result stacked (Q (..., M, M),
        ...). On the host member by member (members of order up to 256 by LAPACK geqrf and
        orgqr / ungqr through scipy.linalg.lapack, larger ones by the engine; pivoting too). On
        the device modes "r" and "raw" are one cuBLAS geqrfBatched (tau a device array of `a`'s
        kind), "full" and "economic" the 2-D device qr of each member in turn (no batched
        routine forms Q); with pivoting the 2-D device qr of each member, P a host stack. As
        scipy's stacks, mode="r" returns R itself, not the tuple (R,) ((R, P) with pivoting);
        mode="raw" returns ((factors, tau), R) stacked (scipy's stacks fail there); an empty
        batch gives empty results.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False). True or
        False, or 0, 1, as scipy's LAPACK flags.
    lwork : int, optional
        Accepted for scipy compatibility and ignored (the engine sizes its workspaces); None or
        an integer.
    mode : {"full", "r", "economic", "raw"}, optional
        What to return (default "full"); see Returns.
    pivoting : bool, optional
        Whether to factor with column pivoting, A[:, P] = Q R with ``|R(j, j)|`` non-increasing
        (default False), and return the permutation P last (a host array on either
        interface), as scipy: geqp3 (see there) on a device backend, LAPACK's on the host
        backend, then Q formed where the factors are.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "qr."
        ("qr.nb", "qr.lookahead", "qr.panel").

    Returns
    -------
    Q : ndarray or device array
        With k = min(M, N): M x M for "full", M x k for "economic"; not returned for "r" and
        "raw".
    R : ndarray or device array
        Upper trapezoidal: M x N for "full" and "r", k x N for "economic" and "raw". Its
        diagonal is real (LAPACK's convention); Q and R agree with scipy's up to rounding.
        mode="r" returns the tuple (R,).
    (factors, tau) : tuple
        Only for mode="raw", returned as ((factors, tau), R): LAPACK geqrf's output (see geqrf),
        which scipy.linalg.lapack's orgqr / ungqr and ormqr / unmqr take; tau is a host array
        on either interface. With pivoting=True, geqp3's (see geqp3).
    P : (N,) ndarray of int32
        Only for pivoting=True: the column permutation, 0-based, as scipy's (Q R = A[:, P]);
        returned last: (Q, R, P), (R, P) for "r", ((factors, tau), R, P) for "raw".

    Raises
    ------
    ValueError
        mode is not one of its values; lwork is not None or an integer; overwrite_a or pivoting is
        not True or False; `a` is not 2-D, or holds infs or NaNs (check_finite); a bad engine
        option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    geqrf : LAPACK's output alone.
    geqp3 : LAPACK's output alone, with column pivoting.
    ql, lq : The QL and LQ decompositions.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> q, r = hybridla.qr(a, backend="host")
    >>> q.shape, r.shape
    ((3, 3), (3, 2))
    >>> np.allclose(q @ r, a), np.allclose(q.T @ q, np.eye(3))
    (True, True)
    >>> q, r = hybridla.qr(a, mode="economic", backend="host")
    >>> q.shape, r.shape
    ((3, 2), (2, 2))
    >>> print(np.round(np.abs(r), 4))
    [[1.7321 3.4641]
     [0.     1.4142]]
    >>> (factors, tau), r = hybridla.qr(a, mode="raw", backend="host")
    >>> factors.shape, tau.shape, r.shape
    ((3, 2), (2,), (2, 2))

    With column pivoting (host arrays), the permutation comes last:

    >>> q, r, p = hybridla.qr(a, mode="economic", pivoting=True, backend="host")
    >>> p
    array([1, 0], dtype=int32)
    >>> np.allclose(q @ r, a[:, p]), bool(abs(r[0, 0]) >= abs(r[1, 1]))
    (True, True)
    """
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress,
                   ooc=ooc)
    if _stacked.is_stack((a, 2)):  # (..., M, N): _stacked.py, _stacked_qr.py
        return _stacked_qr.qr(a, overwrite_a, lwork, mode, _flag("pivoting", pivoting),
                              check_finite, backend, options)
    if _flag("pivoting", pivoting):
        return _pivoted_qr(a, mode, overwrite_a, lwork, check_finite, backend, options)
    return _householder(a, QR, mode, overwrite_a, lwork, check_finite, backend, options)


def ql(a, overwrite_a=False, lwork=None, mode="full", check_finite=True, *, backend=None,
       nb=None, lookahead=None, panel=None, trace=None, progress=False, ooc=None):
    """QL decomposition A = Q L (LAPACK geqlf; scipy has none), with qr's modes.

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix, host or device as for lu_factor (a device array gives device arrays).
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False). True or
        False, or 0, 1, as scipy's LAPACK flags.
    lwork : int, optional
        Accepted for scipy compatibility and ignored (the engine sizes its workspaces); None or
        an integer.
    mode : {"full", "r", "economic", "raw"}, optional
        What to return (default "full"); see Returns.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "qr."
        ("qr.nb", "qr.lookahead", "qr.panel").

    Returns
    -------
    Q : ndarray or device array
        With k = min(M, N): M x M for "full"; M x k, Q's last k columns, for "economic"; not
        returned for "r" and "raw".
    L : ndarray or device array
        M x N for "full" and "r", lower trapezoidal on and below the (N - M)-th
        superdiagonal; k x N, L's last k rows, for "economic" and "raw". mode="r" returns the
        tuple (L,).
    (factors, tau) : tuple
        Only for mode="raw", returned as ((factors, tau), L), in LAPACK geqlf's storage (see
        geqlf); tau is a host array.

    Raises
    ------
    ValueError
        mode is not one of its values; lwork is not None or an integer; overwrite_a is
        not True or False; `a` is not 2-D, or holds infs or NaNs (check_finite); a bad engine
        option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    geqlf : LAPACK's output alone.
    qr, lq : The QR and LQ decompositions.

    Notes
    -----
    On the GPU the panels are cuSOLVER geqrf's on the reversed panel.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> q, l = hybridla.ql(a, backend="host")
    >>> q.shape, l.shape
    ((3, 3), (3, 2))
    >>> np.allclose(q @ l, a)
    True
    >>> np.allclose(np.triu(l, 2 - 3 + 1), 0)  # zero above the (N - M)-th superdiagonal
    True
    >>> q, l = hybridla.ql(a, mode="economic", backend="host")
    >>> q.shape, l.shape, np.allclose(q @ l, a)
    ((3, 2), (2, 2), True)
    """
    return _householder(a, QL, mode, overwrite_a, lwork, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace,
                             progress=progress, ooc=ooc))


def lq(a, overwrite_a=False, lwork=None, mode="full", check_finite=True, *, backend=None,
       nb=None, lookahead=None, panel=None, trace=None, progress=False, ooc=None):
    """LQ decomposition A = L Q (LAPACK gelqf; scipy has none), with qr's modes.

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix, host or device as for lu_factor (a device array gives device arrays).
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False). True or
        False, or 0, 1, as scipy's LAPACK flags.
    lwork : int, optional
        Accepted for scipy compatibility and ignored (the engine sizes its workspaces); None or
        an integer.
    mode : {"full", "r", "economic", "raw"}, optional
        What to return (default "full"); see Returns.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "qr."
        ("qr.nb", "qr.lookahead", "qr.panel").

    Returns
    -------
    L : ndarray or device array
        With k = min(M, N): M x N for "full" and "r", M x k for "economic" and "raw"; lower
        trapezoidal. mode="r" returns the tuple (L,).
    Q : ndarray or device array
        N x N for "full"; k x N, Q's first k rows, for "economic"; not returned for "r" and
        "raw".
    (factors, tau) : tuple
        Only for mode="raw", returned as ((factors, tau), L), in LAPACK gelqf's storage (see
        gelqf); tau is a host array.

    Raises
    ------
    ValueError
        mode is not one of its values; lwork is not None or an integer; overwrite_a is
        not True or False; `a` is not 2-D, or holds infs or NaNs (check_finite); a bad engine
        option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    gelqf : LAPACK's output alone.
    qr, ql : The QR and QL decompositions.

    Notes
    -----
    On the GPU the panels are cuSOLVER geqrf's on the conjugate-transposed panel.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1., 1.], [1., 2., 3.]])
    >>> l, q = hybridla.lq(a, backend="host")
    >>> l.shape, q.shape
    ((2, 3), (3, 3))
    >>> np.allclose(l @ q, a), np.allclose(q @ q.T, np.eye(3))
    (True, True)
    >>> l, q = hybridla.lq(a, mode="economic", backend="host")
    >>> l.shape, q.shape, np.allclose(l @ q, a)
    ((2, 2), (2, 3), True)
    """
    return _householder(a, LQ, mode, overwrite_a, lwork, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace,
                             progress=progress, ooc=ooc))


def _householder(a, form, mode, overwrite_a, lwork, check_finite, backend, options):
    """Factor with the form's driver (geqrf, geqlf, gelqf) through `_factor`, then build what
    `mode` asks for where the factors are (_qr_results). The arguments are checked first (the
    rest, a and the engine options, by `_factor` before it factors)."""
    overwrite_a = _flag("overwrite_a", overwrite_a)
    _check_mode_and_lwork(mode, lwork)
    factors, _, tau = _householder_factor(a, form, overwrite_a, check_finite, backend, options)
    return _qr_results(factors, tau, form, mode, options)
