"""Several GPUs, several machines: LU, Cholesky and QR on a Dask distributed cluster.

The same names, arguments and results as the single-GPU functions (and scipy.linalg's), plus
``client=``: the Dask distributed client to run on (default: the active one,
``distributed.default_client()``). One worker process per GPU (dask-cuda's LocalCUDACluster on
one machine, ``dask cuda worker`` across machines), or host workers (``distributed.LocalCluster``)
on the host backend. A NumPy array comes in and goes out as NumPy (scattered from the client,
the factors gathered); a ``dask.array.Array`` stays distributed: its chunks are redistributed
into the algorithm's layout (1-D block-cyclic columns: lapack/_dist.py says why) and the
factors come back as a dask array whose chunks live on the workers, with the pivots (or tau)
as NumPy. A dask array of CuPy chunks on GPU workers is factored on the GPUs that hold it (the
blocks moved between them over NCCL), and its factors stay there, as CuPy chunks: the
distributed counterpart of the GPU interface.

Each worker runs hybridla's engine on its own block columns, the panels moving between the
workers as tasks of its local graph (NCCL on GPUs, sockets between host workers); Dask starts
one task per worker and never sits in the per-panel loop (scheduler/cluster.py).
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from ._common import _TRANS, _flag, _warn_singular
from ._dist_common import (_assemble, _factor, _factors_operand, _info, _layout, _merged,
                           _Operand, _options, _out, _resolving, _rhs, _solve, _x_out)
from ._dist_qr import geqrf, lstsq, qr
from .lapack.getrf_dist import getrf_dist
from .lapack.potrf_dist import potrf_dist
from .lapack import solves_dist
from .scheduler import cluster as _cluster

__all__ = ["lu_factor", "lu_solve", "solve", "cho_factor", "cholesky", "cho_solve", "qr",
           "geqrf", "lstsq", "release"]


def release(client=None) -> dict:
    """Let go of what hybridla keeps on the workers between calls: each GPU worker keeps the
    NCCL communicator of its worker set, so that the next call on the same workers skips
    making one and connecting its peers (0.25-0.35 s a call on 2 H100s, perf/RESULTS.md).
    Call it to give that GPU memory back without restarting the workers; the next call makes
    a new communicator. Returns {worker address: communicators released}.

    client : distributed.Client, optional
        The client whose workers to release (default: the active one).
    """
    return _cluster.release(_cluster.find_client(client))


# -- LU ------------------------------------------------------------------------------------------
def lu_factor(a, overwrite_a=False, check_finite=True, *, client=None, backend=None, nb=None,
              lookahead=None, trace=None):
    """LU factorization with partial pivoting on a Dask cluster, P A = L U, as
    hybridla.lu_factor and scipy.linalg.lu_factor.

    Parameters
    ----------
    a : (M, N) array_like or dask.array.Array
        The matrix, real or complex. A NumPy array is scattered from the client and the
        factors come back as NumPy; a dask array is redistributed from where its chunks are
        and the factors stay on the workers, as a dask array (of CuPy chunks on the GPUs for
        CuPy chunks, which need the cuda backend).
    overwrite_a : bool, optional
        Accepted for scipy's signature (True or False, or 0, 1); the workers factor copies,
        so `a` is never written.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs (default True): on the client for a NumPy
        array, on the workers (where its chunks are) for a dask array.
    client : distributed.Client, optional
        Keyword-only: the cluster to run on; default the active client
        (``distributed.default_client()``). One worker per GPU (or host workers).
    backend : {None, "auto", "host", "cuda"}, optional
        Keyword-only: what the workers compute with; None or "auto": cuda where the workers
        have it, else host.
    nb, lookahead : optional
        Keyword-only engine options, as hybridla.lu_factor's (configuration "lu.nb",
        "lu.lookahead", resolved on the first worker; the block size is also the layout's
        block-column width).
    trace : str or path-like, optional
        Keyword-only: write one Chrome trace of every worker's run there, each worker's lanes
        prefixed "w<rank>/", the collectives on lanes named "comm:...".

    Returns
    -------
    lu : (M, N) ndarray or dask.array.Array
        U on and above the diagonal, L below it (unit diagonal not stored), in `a`'s LAPACK
        dtype; a dask array (block columns of nb, on the workers) for a dask `a`.
    piv : (K,) ndarray of int32
        The 0-based pivots, K = min(M, N), as scipy's.

    Raises
    ------
    ValueError
        `a` is not 2-D, holds infs or NaNs (check_finite), has unknown chunk sizes; a bad
        flag or engine option (the message names it); no client is active and none given.
    TypeError
        `a` does not hold numbers.
    Exception
        A worker failed: its own exception, raised here once every worker's task has ended
        (the others stop at their next collective instead of waiting).

    Warns
    -----
    LinAlgWarning
        A zero U(i, i): "Diagonal number i is exactly zero. Singular matrix.", as scipy's.

    See Also
    --------
    hybridla.lu_factor : One GPU (or the host).
    lu_solve : Solve with the factors, on the cluster.
    """
    _flag("overwrite_a", overwrite_a)
    operand = _Operand("a", a, check_finite)
    client, backend, nb, lookahead = _options(client, backend, nb, lookahead)
    factors, piv, info = _getrf(client, backend, operand, nb, lookahead, trace)
    _warn_singular(info)
    return _out(client, factors, operand), piv


def _getrf(client, backend, operand, nb, lookahead, trace):
    m, n = operand.shape
    if m == 0 or n == 0:
        return None, np.zeros(0, np.int32), 0
    parts, layout, results, context = _factor(client, backend, "lu", getrf_dist, operand, nb,
                                              lookahead, trace)
    piv = np.concatenate(_merged(results, "pivots")).astype(np.int32)
    return (parts, layout, context), piv, _info(results)










def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True, *, client=None,
             backend=None, nb=None):
    """Solve A x = b (trans 0), A^T x = b (1) or A^H x = b (2) with lu_factor's factors, on a
    Dask cluster, as hybridla.lu_solve and scipy.linalg.lu_solve.

    Parameters
    ----------
    lu_and_piv : tuple of (lu, piv)
        The factors (an N x N NumPy or dask array) and the 0-based pivots (N,).
    b : (N,) or (N, K) array_like or dask.array.Array
        The right-hand side(s); a dask `b` is brought to the client (it is small beside the
        factors), and x comes back as a dask array.
    trans : {0, 1, 2, "N", "T", "C"}, optional
        The system, as lu_solve's.
    overwrite_b : bool, optional
        Accepted for scipy's signature; `b` is never written.
    check_finite : bool, optional
        Check `lu` and `b` for infs and NaNs (default True).
    client, backend, nb : optional
        Keyword-only, as lu_factor's (nb: the block columns the factors are laid out in).

    Returns
    -------
    x : ndarray or dask.array.Array
        The solution, of `b`'s shape, in the dtype where lu and b meet.

    Raises
    ------
    ValueError
        trans is not one of its values; shapes that do not match; infs or NaNs; a bad flag.
    TypeError
        `lu` or `b` does not hold numbers.
    """
    lu, piv = lu_and_piv
    _flag("overwrite_b", overwrite_b)
    if isinstance(trans, (bool, np.bool_)) or trans not in _TRANS:
        raise ValueError(f"trans must be 0, 1 or 2 (or 'N', 'T', 'C'); got trans={trans!r}")
    operand = _factors_operand("lu", lu, check_finite)
    n = operand.shape[0]
    piv = np.asarray(piv)
    if piv.shape != (n,):
        raise ValueError(f"piv must have shape ({n},) to match lu; got shape {piv.shape}")
    rhs, shape, lazy = _rhs("b", b, operand, check_finite)
    client, backend, nb, _ = _options(client, backend, nb, None)
    if n == 0 or rhs.size == 0:
        return _x_out(rhs, shape, lazy)

    def attempt(cached):
        addresses, layout, lookahead, parts, placement = _layout(client, backend, "lu", operand,
                                                                 n, n, nb, None, cached=cached)
        return _solve(client, backend, "lu", solves_dist.getrs_dist, parts, layout,
                      (addresses, lookahead), rhs, "lu", operand.dtype, operand.check_finite,
                      extra={"pivots": piv, **placement}, arguments={"trans": _TRANS[trans]},
                      device=operand.device_kind)

    return _x_out(_resolving(attempt), shape, lazy)


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, client=None, backend=None, nb=None,
          lookahead=None, trace=None):
    """Solve a x = b for a square `a` on a Dask cluster, by LU (assume_a None, "gen",
    "general") or Cholesky ("pos", "positive definite"), as hybridla.solve and
    scipy.linalg.solve.

    Parameters
    ----------
    a : (N, N) array_like or dask.array.Array
        The matrix.
    b : (N,) or (N, K) array_like or dask.array.Array
        The right-hand side(s), as lu_solve's.
    lower : bool, optional
        With assume_a "pos": the triangle of `a` that is read (default False: the upper).
    overwrite_a, overwrite_b : bool, optional
        Accepted for scipy's signature; nothing is written over.
    check_finite : bool, optional
        Check `a` and `b` for infs and NaNs (default True).
    assume_a : {None, "gen", "general", "pos", "positive definite"}, optional
        The structure of `a`; the others scipy knows (symmetric, Hermitian, banded,
        triangular, ...) have no distributed version and raise NotImplementedError.
    transposed : bool, optional
        Solve a^T x = b (default False).
    client, backend, nb, lookahead, trace : optional
        Keyword-only, as lu_factor's.

    Returns
    -------
    x : ndarray or dask.array.Array
        The solution, of `b`'s shape.

    Raises
    ------
    LinAlgError
        `a` is singular ("Matrix is singular.") or, with "pos", not positive definite.
    ValueError, TypeError
        As lu_factor's and lu_solve's.
    NotImplementedError
        Another assume_a.

    Notes
    -----
    Unlike scipy's, no condition estimate is made, so an ill-conditioned (but not exactly
    singular) `a` does not warn.
    """
    for flag in ("lower", "overwrite_a", "overwrite_b", "transposed"):
        _flag(flag, locals()[flag])
    if assume_a in ("pos", "positive definite"):
        routine = "cho"
    elif assume_a in (None, "gen", "general"):
        routine = "lu"
    else:
        raise NotImplementedError(f"assume_a={assume_a!r} has no distributed solver; "
                                  f"hybridla.distributed.solve takes None, 'gen', 'general', "
                                  f"'pos' or 'positive definite'")
    operand = _factors_operand("a", a, check_finite)
    n = operand.shape[0]
    rhs, shape, lazy = _rhs("b", b, operand, check_finite)
    client, backend, nb, lookahead = _options(client, backend, nb, lookahead)
    if n == 0 or rhs.size == 0:
        return _x_out(rhs, shape, lazy)
    if routine == "lu":
        factors, piv, info = _getrf(client, backend, operand, nb, lookahead, trace)
        if info:
            raise LinAlgError("Matrix is singular.")
        parts, layout, context = factors
        x = _solve(client, backend, "lu", solves_dist.getrs_dist, parts, layout, context, rhs,
                   "a", operand.dtype, extra={"pivots": piv},
                   arguments={"trans": "T" if transposed else "N"}, device=operand.device_kind)
    else:
        # a^T x = b is a^* x^* ... : for a Hermitian a, a^T = conj(a), x = conj(solve(a, conj b))
        rhs = rhs.conj() if transposed else rhs
        parts, layout, context = _potrf(client, backend, operand, lower, nb, lookahead, trace)
        x = _solve(client, backend, "cho", solves_dist.potrs_dist, parts, layout, context, rhs,
                   "a", operand.dtype, device=operand.device_kind)
        x = x.conj() if transposed else x
    return _x_out(x, shape, lazy)


# -- Cholesky ------------------------------------------------------------------------------------
def _as_lower(operand, lower):
    """The lower triangle to factor: `a` itself, or for the upper one a^H (whose lower
    triangle it is); a dask array's transpose stays lazy."""
    if lower:
        return operand
    flipped = _Operand.__new__(_Operand)
    flipped.__dict__.update(operand.__dict__)
    if operand.dask is not None:
        flipped.dask = operand.dask.conj().T
    else:
        flipped.array = operand.array.conj().T
    return flipped


def _potrf(client, backend, operand, lower, nb, lookahead, trace):
    """Factor (the lower triangle of `a`, or of a^H for the upper one); raises LinAlgError
    naming the failing minor. Returns (parts, layout, context) of the lower factor."""
    parts, layout, results, context = _factor(client, backend, "cho", potrf_dist,
                                              _as_lower(operand, lower), nb, lookahead, trace)
    info = _info(results)
    if info:
        raise LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    return parts, layout, context


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, *, client=None,
               backend=None, nb=None, lookahead=None, trace=None):
    """Cholesky factorization on a Dask cluster, as hybridla.cho_factor and
    scipy.linalg.cho_factor.

    Parameters
    ----------
    a : (M, M) array_like or dask.array.Array
        Hermitian positive definite; only its `lower` (or upper) triangle is read.
    lower : bool, optional
        A = L L^H from the lower triangle (True) or A = U^H U from the upper (False, the
        default; factored as the lower triangle of A^H, a lazy transpose for a dask array).
    overwrite_a : bool, optional
        Accepted for scipy's signature; `a` is never written.
    check_finite : bool, optional
        Check `a` for infs and NaNs (default True).
    client, backend, nb, lookahead, trace : optional
        Keyword-only, as lu_factor's (configuration "cho.nb", "cho.lookahead").

    Returns
    -------
    c : (M, M) ndarray or dask.array.Array
        The factor in the `lower` (or upper) triangle; the other keeps what `a` held there.
    lower : bool

    Raises
    ------
    LinAlgError
        `a` is not positive definite: "k-th leading minor of the array is not positive
        definite", as scipy's.
    ValueError, TypeError
        As lu_factor's; `a` not square.
    """
    lower = _flag("lower", lower)
    _flag("overwrite_a", overwrite_a)
    operand = _factors_operand("a", a, check_finite)
    client, backend, nb, lookahead = _options(client, backend, nb, lookahead)
    if operand.shape[0] == 0:
        return _out(client, None, operand), lower
    parts, layout, context = _potrf(client, backend, operand, lower, nb, lookahead, trace)
    c = _assemble(client, parts, layout, operand.dtype, operand)
    return (c if lower else c.conj().T), lower


def cholesky(a, lower=False, overwrite_a=False, check_finite=True, *, client=None,
             backend=None, nb=None, lookahead=None, trace=None):
    """The Cholesky factor on a Dask cluster, the other triangle zero, as hybridla.cholesky
    and scipy.linalg.cholesky. Arguments, results and errors as cho_factor's.

    Returns
    -------
    (M, M) ndarray or dask.array.Array
        L (lower=True) or U, zero in the other triangle.
    """
    c, lower = cho_factor(a, lower, overwrite_a, check_finite, client=client, backend=backend,
                          nb=nb, lookahead=lookahead, trace=trace)
    if _cluster.is_dask_array(c):
        import dask.array as da
        return da.tril(c) if lower else da.triu(c)
    return np.tril(c) if lower else np.triu(c)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True, *, client=None,
              backend=None, nb=None):
    """Solve A x = b with cho_factor's factor on a Dask cluster, as hybridla.cho_solve and
    scipy.linalg.cho_solve.

    Parameters
    ----------
    c_and_lower : tuple of (c, lower)
        The factor (N x N, NumPy or dask; only its `lower` or upper triangle is read) and
        `lower`.
    b : (N,) or (N, K) array_like or dask.array.Array
        The right-hand side(s), as lu_solve's.
    overwrite_b : bool, optional
        Accepted for scipy's signature.
    check_finite : bool, optional
        Check `c` and `b` for infs and NaNs (default True).
    client, backend, nb : optional
        Keyword-only, as lu_solve's.

    Returns
    -------
    x : ndarray or dask.array.Array
        The solution, of `b`'s shape.
    """
    c, lower = c_and_lower
    lower = _flag("lower", lower)
    _flag("overwrite_b", overwrite_b)
    operand = _factors_operand("c", c, check_finite)
    n = operand.shape[0]
    rhs, shape, lazy = _rhs("b", b, operand, check_finite)
    client, backend, nb, _ = _options(client, backend, nb, None)
    if n == 0 or rhs.size == 0:
        return _x_out(rhs, shape, lazy)
    factor = _as_lower(operand, lower)

    def attempt(cached):
        addresses, layout, lookahead, parts, placement = _layout(client, backend, "cho",
                                                                 operand, n, n, nb, None,
                                                                 data=factor.data,
                                                                 cached=cached)
        return _solve(client, backend, "cho", solves_dist.potrs_dist, parts, layout,
                      (addresses, lookahead), rhs, "c", operand.dtype, operand.check_finite,
                      extra=placement, device=operand.device_kind)

    return _x_out(_resolving(attempt), shape, lazy)
