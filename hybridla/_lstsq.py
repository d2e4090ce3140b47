"""Least squares by QR (m >= n) or LQ (m < n), LAPACK gels: lstsq."""
from __future__ import annotations

import numbers

import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import get_lapack_funcs

from . import _solve_place, _stacked, _stacked_qr
from . import backend as _backends
from . import lapack as _lapack
from ._common import (
    _common_dtype,
    _device_backend,
    _device_matrix_checks,
    _flag,
    _host_backend,
    _host_matrix,
    _shape_and_dtype,
    is_device_array,
)
from ._memory import _check_memory, _memory_budget
from ._decomp_householder import _householder_factor
from .lapack._householder import LQ, QR
from .lapack._scaling import host_max_abs, max_abs, range_scale
from .lapack.gels import gels_factored, gels_load_rhs, gels_zero_solution, lascl_copy, \
    rank_test, unscale_solution
from .lapack.geqrs_ooc import geqrs_ooc
from .scheduler.plan import make_plan


# -- least squares -------------------------------------------------------------------------------
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None, *, backend=None, nb=None, lookahead=None, panel=None, trace=None,
          progress=False):
    """Least squares by QR (m >= n) or LQ (m < n), LAPACK gels or gelsy, as scipy.linalg.lstsq.

    The minimum-norm least-squares solution of a x = b. For `a` of full rank, by QR (m >= n) or
    LQ (m < n) on the hybrid engine; an `a` that the rank test finds rank deficient is solved
    again by QR with column pivoting (LAPACK gelsy's algorithm, as scipy's
    lapack_driver="gelsy"), which reveals the effective rank: on a device backend the pivoted
    QR runs on the GPU (geqp3) and gelsy's rank decision and minimum-norm solve on its R on the
    host; on the host backend LAPACK's gelsy through scipy.linalg.lapack. Every argument is
    checked before any work.

    Parameters
    ----------
    a : (..., M, N) array_like or device array
        The matrix, host or device as for lu_factor. A stack, as
        scipy >= 1.15 takes it: on the host member by member (members of order up to 256 by
        LAPACK gels through scipy.linalg.lapack, with the same rank test and gelsy), on the
        device the 2-D device lstsq of each member in turn (no batched routine has the rank
        test: cuBLAS gelsBatched solves full-rank tall members only).
    b : (M,) or (..., M, K) array_like or device array
        The right-hand side(s), where `a` is (on a device of `a`'s dtype). With stacks, as
        scipy: a 1-D `b` is one vector for every member, and the batch axes broadcast.
    cond : float, optional
        The rank test's tolerance tol, a real number >= 0 (see Notes), which is also gelsy's
        rcond (as scipy passes cond to gelsy); None (the default): max(M, N) eps (scipy's
        default for gelsy is eps).
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False).
    overwrite_b : bool, optional
        Accepted (True or False, or 0, 1); `b` is never modified.
    check_finite : bool, optional
        Check that `a` and `b` hold no infs or NaNs before any work (default True).
    lapack_driver : {None, "gelsy"}, optional
        None (the default): gels (QR or LQ), and gelsy where `a` is found rank deficient.
        "gelsy": gelsy directly. scipy's SVD drivers ("gelsd", "gelss") are not available.
    backend, nb, lookahead, panel, trace, progress : optional
        Keyword-only engine options, as qr's (lu_factor's, configuration keys under "qr.").

    Returns
    -------
    x : (N,) or (N, K) ndarray or device array
        The solution ((N,) for 1-D b), where `a` lives, in the precision where `a` and `b`
        meet (float32 a with float64 b: float64, as scipy).
    residues : float or (K,) ndarray
        The squared 2-norms of the columns of b - a x when M > N and the rank is N (a scalar
        for 1-D b), else an empty array (rank < N or M <= N, as scipy's gelsd; scipy's gelsy
        always returns an empty array).
    rank : int
        The effective rank: min(M, N) when `a` passes the rank test, else gelsy's (the order
        of the largest leading triangle of the pivoted R whose estimated condition number is
        below 1 / cond).

        For a stack: x (..., N) or (..., N, K); residues stacked, (...) or (..., K), where
        every member has them, else an empty (..., 0) array; rank an int64 array (...); s
        None.
    s : None
        No SVD is computed (as scipy's gelsy).

    Raises
    ------
    LinAlgError
        A device `a` with overwrite_a=True fails the rank test (``|T(i, i)| <= tol max_j
        |T(j, j)|``, the message names i; `b` is not touched): its factors are written over it,
        and the pivoted solve has no `a` left to start from.
    ValueError
        lapack_driver is not None or "gelsy"; cond is not None or a real number >= 0;
        overwrite_a or overwrite_b is not True or False; one of `a` and `b` is a device array
        and the other not; `a` is not 2-D, `b` not 1-D or 2-D with M rows; infs or NaNs
        (check_finite); a bad engine option (named), as lu_factor's.
    TypeError
        `a` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose dtype
        is not `a`'s, or an unsupported device dtype.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        On a device, a matrix over the device-memory budget, as lu_factor's; a host matrix
        over it with configuration device.ooc "never", or whose out-of-core working store
        would not fit it either.

    See Also
    --------
    lstsq_mixed : The QR in a lower precision, refined to the working one.

    Notes
    -----
    The rank test sees what QR without pivoting sees: T has a diagonal entry with
    ``|T(i, i)| <= tol max_j |T(j, j)|``. A numerically rank-deficient `a` whose
    ``|T(i, i)|`` all stay large passes it (and is solved as of full rank); one that fails it
    is solved by gelsy from the original `a` (on the host rebuilt from its factors, to
    rounding, where overwrite_a let the factorization write over it). As LAPACK's gels, `a`
    and `b` whose largest entry lies outside the safe range
    [safmin / eps, eps / safmin] (entries near overflow, or tiny ones) are scaled into it
    first, by powers of two, and x scaled back (lapack/gels.py). An empty `a` (M or N zero)
    gives scipy's results: x = 0, residues the squared norms of b's columns when N == 0 (else
    empty), rank 0, s an empty array.

    A host `a` over the memory budget (configuration "device.memory_budget") is factored out
    of core (geqrf_ooc; gelqf's for M < N), its factors in host memory. For M >= N the solve,
    Q^H b and R's triangular solve, then runs on the host or streams the factors through the
    device once (b up once; lapack/geqrs_ooc.py), as configuration "solve.place" says (see
    lu_solve); the rank test and the scaling are the same either way, and the trace
    (``trace=``) holds the factorization, then the solve, its metadata's "solve_place" saying
    which way it ran. M < N, and an `a` that fails the rank test (gelsy), are solved on the
    host as before.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])  # a line through three points
    >>> b = np.array([1., 2., 2.])
    >>> x, residues, rank, s = hybridla.lstsq(a, b, backend="host")
    >>> np.allclose(x, [2 / 3, 1 / 2]), round(float(residues), 6), rank, s
    (True, 0.166667, 2, None)
    >>> x, residues, rank, s = hybridla.lstsq(a.T, [1., 2.], backend="host")  # minimum norm
    >>> np.allclose(x, [1 / 3, 1 / 3, 1 / 3]), residues.shape
    (True, (0,))

    A rank-deficient `a` (host arrays) gets the minimum-norm solution and its rank:

    >>> a = np.array([[1., 2.], [2., 4.], [3., 6.]])  # rank 1
    >>> x, residues, rank, s = hybridla.lstsq(a, [1., 2., 3.], backend="host")
    >>> np.allclose(x, [0.2, 0.4]), rank, residues.shape, s
    (True, 1, (0,), None)
    """
    overwrite_a, overwrite_b = _flag("overwrite_a", overwrite_a), _flag("overwrite_b", overwrite_b)
    if lapack_driver not in (None, "gelsy"):
        raise ValueError(f"lapack_driver must be None (QR or LQ, LAPACK gels, and gelsy for a "
                         f"rank-deficient a) or 'gelsy'; got lapack_driver={lapack_driver!r}")
    if cond is not None and not (isinstance(cond, numbers.Real) and
                                 not isinstance(cond, (bool, np.bool_)) and cond >= 0):
        raise ValueError(f"cond must be a real number >= 0 or None; got cond={cond!r}")
    if _stacked.is_stack((a, 2), (b, 2)):  # stacks: _stacked.py, _stacked_qr.py
        return _stacked_qr.lstsq(a, b, cond, check_finite, lapack_driver, backend,
                              dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace,
                                   progress=progress))
    device = is_device_array(a)
    if device != is_device_array(b):
        raise ValueError("a and b must both be host arrays or both device arrays")
    if device:
        engine = _device_backend("a", backend)
        (m, n), dtype = _device_matrix_checks("a", a, engine, check_finite)
        b_shape, b_dtype = _device_matrix_checks("b", b, engine, check_finite, ndims=(1, 2))
        if b_dtype != dtype:
            raise TypeError(f"b must have the dtype of a ({dtype}) on the device; got {b_dtype}")
        array = b_array = None
    else:
        engine = _host_backend(backend)
        array, a_dtype = _host_matrix("a", a, check_finite)
        b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
        (m, n), b_shape = array.shape, b_array.shape
        dtype = _common_dtype(a_dtype, b_dtype)
    if b_shape[0] != m:
        raise ValueError(f"b must have {m} rows to match a (shape {(m, n)}); got shape {b_shape}")
    # the engine options too, before any work (the factorization makes its plan again)
    qr_plan = make_plan(engine, m, n, dtype, routine="qr", nb=nb, lookahead=lookahead,
                        panel=panel, trace=trace)
    nrhs = 1 if len(b_shape) == 1 else b_shape[1]
    # the stages after the factorization run where the factors are
    ops = _backends.get_backend("cuda" if device else "host")
    if m == 0 or n == 0:
        return _empty(ops, b, b_array, m, n, nrhs, b_shape, dtype)
    # gelsy's rcond: scipy passes cond as it is (None: eps); ours defaults to the rank test's
    rank_tol = max(m, n) * np.finfo(dtype).eps if cond is None else float(cond)
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress)
    if lapack_driver == "gelsy":
        return _gelsy_where(engine, a if device else array, array, b, b_array, b_shape, dtype,
                            rank_tol, overwrite_a, backend, options)

    # a host a over the budget is factored out of core (geqrf_ooc); its solve then runs on
    # the host or streamed through the device (solve.place; m >= n: Q^H b and R's solve)
    where = None
    if not device and m >= n and \
            _check_memory(engine, m, n, dtype, qr_plan.nb, ooc=qr_plan.ooc) is not None:
        where = _solve_place.choose(backend, "gels", m, n, nrhs, dtype, trace, append=True,
                                    nb=nb, lookahead=lookahead, panel=panel)
    may_overwrite_a = overwrite_a  # the user's word, for gelsy
    a_work, overwrite_a, scale_a = _scaled_matrix(ops, a, array, dtype, overwrite_a)
    rhs = b if device else np.asfortranarray(b_array.reshape(m, nrhs), dtype=dtype)
    form = QR if m >= n else LQ
    factors, _, tau = _householder_factor(a_work, form, overwrite_a, False, backend, options)
    plan = make_plan(ops, m, n, dtype, routine="qr", nb=nb, lookahead=lookahead,
                     progress=progress)
    # the right-hand side goes into the max(m, n) x nrhs array the solve overwrites; x is its
    # first n rows, copied out when there are more (m > n: the rest holds the residuals)
    work = ops.empty((max(m, n), nrhs), dtype, like=b)
    x = work if max(m, n) == n else ops.empty((n, nrhs), dtype, like=b)
    # (a row-major device b's copy must live as long as its store: _device_store)
    B, _b_copy = _device_store(ops, b) if device else (ops.wrap(rhs), None)
    stores = [B, ops.wrap(work), ops.wrap(x)]
    B, W, X = stores
    try:
        # B copied into W and brought into the safe range too (dgels), in our copy
        scale_b = gels_load_rhs(ops, B, W, m, nrhs, dtype)
        F = ops.wrap(factors, tau=tau)
        stores.append(F)
        if where is not None and where.place == "device":
            info, residues = _gels_streamed(where, F, factors, tau, work, W,
                                            None if x is work else X, rank_tol, scale_a,
                                            scale_b)
        else:
            def solve():
                return gels_factored(ops, F, W, None if x is work else X, plan, rank_tol,
                                     scale_a, scale_b)
            info, residues = solve() if where is None else where.run_host(solve)
    finally:
        for store in stores:
            store.close()
    if info > 0:  # rank-revealing: QR with column pivoting, LAPACK gelsy
        if not device:
            intact = not (np.may_share_memory(factors, array) or
                          (a_work is array and scale_a != 1))
            original = array if intact else _rebuilt(factors, tau, form, scale_a)
            return _gelsy_where(engine, original, array, b, b_array, b_shape, dtype, rank_tol,
                                may_overwrite_a, backend, options)
        if factors is not a:  # the user's device a is intact (gels factored a copy)
            return _gelsy_where(engine, a, None, b, None, b_shape, dtype, rank_tol, False,
                                backend, options)
        name = "R" if form is QR else "L"
        raise LinAlgError(
            f"a is rank deficient, or too close to it for a solve by {form.storage}: "
            f"|{name}({info}, {info})| <= {rank_tol:.3g} * max_j |{name}(j, j)| "
            f"(a has shape {(m, n)}), and its factors are written over it (overwrite_a=True), "
            f"so the rank-revealing solve (pivoted QR, gelsy) has no a to start from: call "
            f"again with overwrite_a=False")
    if residues is None:
        residues = np.empty(0, dtype=dtype)  # scipy's: x's dtype
    else:
        residues = (np.abs(residues) ** 2).sum(axis=0)
        residues = residues[0] if len(b_shape) == 1 else residues
    rank = min(m, n)
    return (x.reshape(n) if len(b_shape) == 1 else x), residues, rank, None


def _gels_streamed(where, F, factors, tau, work, W, X, rank_tol, scale_a, scale_b):
    """gels_factored's steps with the host factors (QR of s_a A, m >= n) streamed through the
    device for Q^H b and R's solve (lapack/geqrs_ooc.py): the rank test on R's diagonal and
    the unscaling on the host as there, `work` (W's array, s_b b in its m rows) solved in
    place. Returns (info, residues) as gels_factored's."""
    m, n = factors.shape
    info = rank_test(F, rank_tol)
    if info:
        return info, None
    where.run_device(geqrs_ooc, factors, tau, work)
    ops = _backends.get_backend("host")
    nrhs = W.n
    unscale_solution(ops, W, m, n, nrhs, scale_a, scale_b)
    if X is not None:
        lane = ops.lane("gpu:update")
        with lane:
            ops.lacpy(lane, "A", W.block(0, n, 0, nrhs), X.block(0, n, 0, nrhs))
    return 0, (W.read_block(n, m, 0, nrhs) if m > n else None)


def _gelsy_where(engine, matrix, array, b, b_array, b_shape, dtype, rcond, overwrite_a, backend,
                 options):
    """gelsy's results for `matrix` (the user's a, `array` its host form, or a copy rebuilt
    from its factors): on a device backend (either interface) by the pivoted QR of
    lapack/geqp3.py and gelsy_factored; on the host backend, or for a host matrix over the
    device's budget (the pivoted QR has no out-of-core driver), by LAPACK's gelsy."""
    if is_device_array(matrix) or (engine.has_device and _fits_device(engine, matrix, dtype,
                                                                      options)):
        return _gelsy_engine(matrix, array, b, b_array, b_shape, dtype, rcond, overwrite_a,
                             backend, options)
    return _gelsy(matrix, array, b_array, dtype, rcond, overwrite_a)


def _fits_device(engine, matrix, dtype, options) -> bool:
    """Whether the pivoted QR of the host `matrix` fits the device's memory budget."""
    m, n = matrix.shape
    nb = make_plan(engine, m, n, dtype, routine="qr", nb=options["nb"]).nb
    budget = _memory_budget(engine)
    return budget is None or engine.required_bytes(m, n, dtype, nb) <= budget


def _gelsy_engine(matrix, array, b, b_array, b_shape, dtype, rcond, overwrite_a, backend,
                  options):
    """gelsy by the engine: s_a A P = Q R where `matrix` lives (geqp3), s_b B's copy, Q^H
    applied there (gelsy_factored), the rank and the minimum-norm y on the host, x = P y s_a
    / s_b; x where b is."""
    from ._decomp_qr_pivoted import _geqp3
    device = is_device_array(matrix)
    ops = _backends.get_backend("cuda" if device else "host")
    m, n = _shape_and_dtype(matrix)[0]
    nrhs = 1 if len(b_shape) == 1 else b_shape[1]
    ours = not device and matrix is not array  # a copy rebuilt from factors
    a_work, may_overwrite, scale_a = _scaled_matrix(ops, matrix, None if device else matrix,
                                                    dtype, True if ours else overwrite_a)
    factors, jpvt, tau = _geqp3(a_work, may_overwrite, False, backend, options)
    plan = make_plan(ops, m, n, dtype, routine="qr", nb=options["nb"])
    work = ops.empty((m, nrhs), dtype, like=b)
    rhs = b if device else np.asfortranarray(b_array.reshape(m, nrhs), dtype=dtype)
    B, _b_copy = _device_store(ops, b) if device else (ops.wrap(rhs), None)
    stores = [B, ops.wrap(work), ops.wrap(factors, tau=tau)]
    try:
        scale_b = gels_load_rhs(ops, B, stores[1], m, nrhs, dtype)
        y, rank, tail, info = _lapack.gelsy_factored(stores[2], stores[1], plan, rcond)
    finally:
        for store in stores:
            store.close()
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal gelsy")
    x = np.empty_like(y)
    x[jpvt] = y * (scale_a / scale_b)
    residues = np.empty(0, dtype=dtype)
    if rank == n and m > n:
        residues = (np.abs(tail / scale_b) ** 2).sum(axis=0)
        residues = residues[0] if len(b_shape) == 1 else residues
    if device:
        x = _to_device(ops, x, b)
    return (x.reshape(n) if len(b_shape) == 1 else x), residues, rank, None


def _to_device(ops, host, like):
    """A new device array of `like`'s kind holding the host array."""
    out = ops.empty(host.shape, host.dtype, like=like)
    store = ops.wrap(out)
    try:
        lane = ops.lane("gpu:update")
        ops.from_host(lane, host, store.block(0, store.m, 0, store.n))
    finally:
        store.close()
    return out


def _gelsy(matrix, array, b_array, dtype, rcond, overwrite_a):
    """lstsq's results by LAPACK gelsy (pivoted QR, rank-revealing) for the host matrix
    `matrix` (the user's a, `array`, or a copy rebuilt from its factors): x the minimum-norm
    solution, residues the squared norms of b - a x when rank == N < M (else empty), the
    effective rank, s None. `matrix` may be overwritten when it is not the user's array or
    overwrite_a allows."""
    (m, n), b_shape = matrix.shape, b_array.shape
    nrhs = 1 if len(b_shape) == 1 else b_shape[1]
    work = np.asarray(matrix, dtype=dtype)  # a copy only for another dtype
    may_overwrite = work.flags.writeable and (work is not array or overwrite_a)
    rhs = b_array.reshape(m, nrhs).astype(dtype, copy=False)
    x, rank, tail, info = _lapack.gelsy(work, rhs, rcond, overwrite_a=may_overwrite)
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal gelsy")
    if rank == n and m > n:
        residues = (np.abs(tail) ** 2).sum(axis=0)
        residues = residues[0] if len(b_shape) == 1 else residues
    else:
        residues = np.empty(0, dtype=dtype)
    return (x.reshape(n) if len(b_shape) == 1 else x), residues, rank, None


def _rebuilt(factors, tau, form, scale_a):
    """a from the factors of a * scale_a (QR for M >= N, LQ for M < N, LAPACK's storage) that
    were written over it: Q [R; 0] or [L 0] Q, with scipy's ormqr / unmqr (the LQ factors'
    conjugate transpose is the QR storage of a^H, with the same tau). Backward stable: the
    result is a + E, ||E|| of the order of eps ||a||."""
    m, n = factors.shape
    if form is LQ:
        factors = factors.conj().T
        m, n = n, m
    c = np.zeros((m, n), factors.dtype, order="F")
    c[:n] = np.triu(factors[:n])
    v = np.asfortranarray(factors)
    (ormqr,) = get_lapack_funcs(("ormqr",), (v,))
    c, _, info = ormqr("L", "N", v, tau, c, max(n, 1) * 64, overwrite_c=True)
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal ormqr / unmqr")
    c = c if scale_a == 1 else c / scale_a  # a power of two: exact
    return np.asfortranarray(c.conj().T) if form is LQ else c


def _scaled_matrix(ops, a, array, dtype, overwrite_a):
    """a in the precision `dtype`, brought into the safe range as gels does (lapack/gels.py):
    (the matrix to factor, whether the factorization may overwrite it, the power of two it was
    scaled by). A copy is made only where the precision or the scaling calls for one (then it is
    ours to overwrite); the scaling is in place where overwrite_a lets it be (a host array that
    is F-ordered and writeable, as the factorization would use it)."""
    if array is None:  # a device array: max |a_ij| where it lives, a scaled copy if need be
        source, _a_copy = _device_store(ops, a)
        try:
            factor = range_scale(max_abs(ops, source, source.block(0, source.m, 0, source.n)),
                                 dtype)
            if factor == 1:
                return a, overwrite_a, 1.0
            scaled = ops.empty((source.m, source.n), dtype, like=a)
            target = ops.wrap(scaled)
            try:
                lascl_copy(ops, factor, source, target)
            finally:
                target.close()
        finally:
            source.close()
        return scaled, True, factor
    # a host array (whatever the backend): LAPACK's lange, no temporary
    a_work = array if array.dtype == dtype else array.astype(dtype, order="F")
    ours = a_work is not array
    factor = range_scale(host_max_abs(a_work), dtype)
    if factor == 1:
        return a_work, overwrite_a or ours, 1.0
    in_place = ours or (overwrite_a and a_work is a and a_work.flags.f_contiguous and
                        a_work.flags.writeable)
    if in_place:
        np.multiply(a_work, factor, out=a_work, casting="same_kind")
        return a_work, True, factor
    return np.multiply(a_work, factor, order="F"), True, factor


def _empty(ops, b, b_array, m, n, nrhs, b_shape, dtype):
    """scipy's results for an empty a (m or n zero): x = 0 (n x nrhs, or (n,)), the residues
    ||b_j||^2 when n == 0 (as scipy: in b's own precision, a scalar for 1-D b), else an empty
    float64 array; rank 0; s empty. A device b gives a device x."""
    if b_array is None:  # on the device: its norms from a host copy (m x nrhs, small here)
        x = ops.empty((n, nrhs), dtype, like=b)
        if n * nrhs:
            X = ops.wrap(x)
            try:
                gels_zero_solution(ops, X)
            finally:
                X.close()
        x = x.reshape(n) if len(b_shape) == 1 else x
        if n == 0:
            B, _b_copy = _device_store(ops, b)
            try:
                b_array = B.read_block(0, m, 0, nrhs)
            finally:
                B.close()
            b_array = b_array[:, 0] if len(b_shape) == 1 else b_array
    else:
        x = np.zeros((n,) + tuple(b_shape[1:]), dtype=dtype)
    residues = np.linalg.norm(b_array, axis=0) ** 2 if n == 0 else np.empty((0,))
    return x, residues, 0, np.empty((0,))


def _device_store(ops, x):
    """A tile store over the device array x, to read: x itself when it is column-major, else a
    column-major copy. Returns (store, copy): the caller keeps `copy` (None when in place) for
    as long as it uses the store. (The backend's wrap keeps no reference to its copy, whose
    memory is then freed while the store still points to it: a row-major x would be read from
    freed memory.)"""
    from .backend.cuda import device_array_layout  # device arrays only: the cuda backend's
    _, (m, n), dtype, strides = device_array_layout(x)
    column_major = strides[0] == dtype.itemsize and (n <= 1 or strides[1] >= m * dtype.itemsize)
    store, result, _ = ops.device_matrix(x, 1, overwrite=column_major)
    return store, (None if column_major else result)
