"""QR on a Dask distributed cluster: geqrf, qr and the least-squares solve of
hybridla.distributed (which re-exports them; its docstring says how the work is placed)."""
from __future__ import annotations

import functools

import numpy as np

from ._common import _flag
from ._dist_common import (_assemble, _factor, _merged, _module, _Operand, _options, _out, _rhs,
                           _run, _solve, _x_out)
from .lapack import _dist
from .lapack import solves_dist
from .lapack.geqrf_dist import geqrf_dist, orgqr_dist
from .scheduler import cluster as _cluster


# -- QR ------------------------------------------------------------------------------------------
def _geqrf(client, backend, operand, nb, lookahead, trace):
    parts, layout, results, context = _factor(client, backend, "qr", geqrf_dist, operand, nb,
                                              lookahead, trace)
    tau = np.concatenate(_merged(results, "tau")).astype(operand.dtype)
    return parts, layout, context, tau


def geqrf(a, overwrite_a=False, check_finite=True, *, client=None, backend=None, nb=None,
          lookahead=None, trace=None):
    """QR factorization in LAPACK's storage on a Dask cluster, as hybridla.geqrf.

    Parameters
    ----------
    a : (M, N) array_like or dask.array.Array
        Any shape.
    overwrite_a, check_finite, client, backend, nb, lookahead, trace : optional
        As lu_factor's (configuration "qr.nb", "qr.lookahead").

    Returns
    -------
    qr : (M, N) ndarray or dask.array.Array
        R on and above the diagonal, the reflectors below it.
    tau : (K,) ndarray
        The reflectors' scalars, K = min(M, N).
    """
    _flag("overwrite_a", overwrite_a)
    operand = _Operand("a", a, check_finite)
    client, backend, nb, lookahead = _options(client, backend, nb, lookahead)
    if 0 in operand.shape:
        return _out(client, None, operand), np.zeros(0, operand.dtype)
    parts, layout, context, tau = _geqrf(client, backend, operand, nb, lookahead, trace)
    return _assemble(client, parts, layout, operand.dtype, operand), tau


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True, *,
       client=None, backend=None, nb=None, lookahead=None, trace=None):
    """QR decomposition A = Q R on a Dask cluster, as hybridla.qr and scipy.linalg.qr.

    Parameters
    ----------
    a : (M, N) array_like or dask.array.Array
        Any shape.
    overwrite_a : bool, optional
        Accepted for scipy's signature.
    lwork : int, optional
        Accepted and ignored, as hybridla.qr's.
    mode : {"full", "r", "economic", "raw"}, optional
        As scipy's: Q (M x M) and R (M x N); R only; Q (M x K) and R (K x N); ((qr, tau), R).
    pivoting : bool, optional
        Must be False: column pivoting has no distributed version (NotImplementedError).
    check_finite, client, backend, nb, lookahead, trace : optional
        As geqrf's.

    Returns
    -------
    Q, R as scipy's for the mode; each a dask array for a dask `a`, else NumPy.
    """
    from ._common import _check_mode_and_lwork
    _check_mode_and_lwork(mode, lwork)
    _flag("overwrite_a", overwrite_a)
    if _flag("pivoting", pivoting):
        raise NotImplementedError("qr(pivoting=True) has no distributed version: use "
                                  "hybridla.qr on one GPU")
    operand = _Operand("a", a, check_finite)
    client, backend, nb, lookahead = _options(client, backend, nb, lookahead)
    m, n = operand.shape
    k = min(m, n)
    lazy = operand.dask is not None
    if 0 in operand.shape:
        factors, tau, parts = _out(client, None, operand), np.zeros(0, operand.dtype), None
    else:
        parts, layout, context, tau = _geqrf(client, backend, operand, nb, lookahead, trace)
        factors = _assemble(client, parts, layout, operand.dtype, operand)
    triu = _module(lazy).triu
    r = triu(factors if mode in ("full", "r", "raw") else factors[:k])
    if mode == "r":
        return (r,)
    if mode == "raw":
        return (factors, tau), r
    columns = m if mode == "full" else k
    if parts is None:
        q = _module(lazy).eye(m, columns, dtype=operand.dtype)
    else:
        addresses, lookahead = context
        qlayout = _dist.BlockColumns(m, columns, layout.nb, layout.size)
        job = dict(name="a", routine="qr", dtype=operand.dtype, check_finite=False,
                   writes_part=False, device=operand.device, device_meta=operand.meta,
                   arguments={"columns": columns, "tau": tau})
        futures, _ = _run(client, backend, addresses, layout, lookahead, parts,
                          functools.partial(_dist.on_worker, orgqr_dist), job, None)
        q = _assemble(client, _cluster.local_parts(client, futures), qlayout, operand.dtype,
                      operand)
    return q, r




def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None, *, client=None, backend=None, nb=None, lookahead=None,
          trace=None):
    """Least squares by QR on a Dask cluster, for a full-rank `a` with M >= N, as
    hybridla.lstsq and scipy.linalg.lstsq.

    Parameters
    ----------
    a : (M, N) array_like or dask.array.Array
        Of full rank, M >= N; M < N (the minimum-norm solution needs LQ) raises
        NotImplementedError.
    b : (M,) or (M, K) array_like or dask.array.Array
        The right-hand side(s), as lu_solve's.
    cond : None
        Only None: the rank-revealing drivers have no distributed version.
    overwrite_a, overwrite_b : bool, optional
        Accepted for scipy's signature.
    check_finite : bool, optional
        Check `a` and `b` for infs and NaNs (default True).
    lapack_driver : {None, "gels"}, optional
        Only QR ("gels"); scipy's "gelsd", "gelsy", "gelss" raise NotImplementedError.
    client, backend, nb, lookahead, trace : optional
        As lu_factor's.

    Returns
    -------
    x : (N,) or (N, K) ndarray or dask.array.Array
    residues : (K,) or () ndarray
        ||b - a x||_2^2 per column when M > N, else empty (scipy's).
    rank : int
        N.
    s : None
        No singular values (QR, as hybridla.lstsq's gels).
    """
    for flag in ("overwrite_a", "overwrite_b"):
        _flag(flag, locals()[flag])
    if cond is not None:
        raise NotImplementedError("cond has no distributed version (only cond=None)")
    if lapack_driver not in (None, "gels"):
        raise NotImplementedError(f"lapack_driver={lapack_driver!r} has no distributed "
                                  f"version: None or 'gels'")
    operand = _Operand("a", a, check_finite)
    m, n = operand.shape
    if m < n:
        raise NotImplementedError(f"a of shape {operand.shape} (M < N): the distributed lstsq "
                                  f"solves M >= N only")
    rhs, shape, lazy = _rhs("b", b, operand, check_finite)
    client, backend, nb, lookahead = _options(client, backend, nb, lookahead)
    if n == 0 or rhs.size == 0:
        x = np.zeros((n,) + tuple(shape[1:]), dtype=rhs.dtype)
        return _x_out(x, x.shape, lazy), np.zeros(0), n, None
    parts, layout, context, tau = _geqrf(client, backend, operand, nb, lookahead, trace)
    c = _solve(client, backend, "qr", solves_dist.gels_dist, parts, layout, context, rhs, "a",
               operand.dtype, arguments={"tau": tau}, device=operand.device_kind)
    # scipy's: the squared residual norms when m > n (c's rows n:m), a scalar for a 1-D b
    c_rows = c[n:, 0] if len(shape) == 1 else c[n:]
    residues = (np.sum(np.abs(c_rows) ** 2, axis=0) if m > n
                else np.zeros(0, dtype=np.finfo(rhs.dtype).dtype))
    return _x_out(c, (n,) + tuple(shape[1:]), lazy, rows=n), residues, n, None
