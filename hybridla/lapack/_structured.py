"""The device work around solve's structured forms on device arrays (_solve_device.py): the
right-hand side's store, the Hermitian matrix completed from a triangle, and the host round
trips of the forms no GPU library routine fits.

    solve_into       b's store B overwritten by a solve (a driver: sytrs, trtrs, larscl2, or
                     solve_on_host), x handed over complete
    lacpy_hermitian  w := the Hermitian matrix one triangle of a holds (for an LU: see sytrf.py)
    gtdiag_to_host   the three diagonals of a tridiagonal device matrix, on the host
    lacpy_to_host    the whole device matrix on the host (banded: its bandwidth is found there)
    solve_on_host    B := a host solve of B's contents (down, solved, up)

Every copy runs on the update lane (sytrf.LANE) and is complete on return.
"""
from __future__ import annotations

import numpy as np

from .sytrf import LANE, ldl_ops, symmetrize


def solve_into(backend, b, overwrite_b, solve):
    """(x, solve(B)): b's store B (b itself under overwrite_b where its layout allows, else a
    column-major copy of b's kind) overwritten by solve(B) -> info, freed whatever happens;
    x is the backend's n x nrhs array (the caller gives a vector b's shape back)."""
    B, x, write_back = backend.device_matrix(b, 1, overwrite_b)
    try:
        info = solve(B)
        backend.synchronize()  # x is handed over: its last writes must have landed
    finally:
        B.close()
    if write_back is not None:
        write_back()
    return x, info


def lacpy_hermitian(backend, a, w, n, uplo, copy):
    """w (n x n, column-major) := the Hermitian matrix whose `uplo` triangle a holds, the
    diagonal made real (as hetrf reads it): the triangle copied from a first where `copy`
    (else w is a itself), then the other triangle filled in (sytrf.symmetrize)."""
    W = backend.wrap(w)
    try:
        if copy:
            S = backend.wrap(a)  # a itself when column-major (only read), else a copy
            try:
                lane = backend.lane(LANE)
                with lane:
                    backend.lacpy(lane, uplo, S.block(0, n, 0, n), W.block(0, n, 0, n))
                backend.synchronize()  # S's copy of a row-major a must outlive the lacpy
            finally:
                S.close()
        symmetrize(backend, W, uplo, hermitian=True)
    finally:
        W.close()


def gtdiag_to_host(backend, a, n):
    """(dl, d, du): the sub-, main and superdiagonal of the n x n device matrix a, host
    arrays (O(n) bytes down)."""
    lane = backend.lane(LANE)
    A = backend.wrap(a)
    try:
        whole = A.block(0, n, 0, n)
        return tuple(backend.to_host(lane, ldl_ops(backend).diagonal(whole, k))[0]
                     for k in (-1, 0, 1))
    finally:
        A.close()


def lacpy_to_host(backend, a, n):
    """The n x n device matrix a, a host array (O(n^2) bytes down)."""
    lane = backend.lane(LANE)
    A = backend.wrap(a)
    try:
        return backend.to_host(lane, A.block(0, n, 0, n))
    finally:
        A.close()


def solve_on_host(backend, B, n, host_solve):
    """B's rows 0:n := host_solve(those rows, a host array) -> x (host, n x B.n): down,
    solved on the host, up (complete once the lane's work is)."""
    lane = backend.lane(LANE)
    X = B.block(0, n, 0, B.n)
    rhs = backend.to_host(lane, X)
    x = host_solve(rhs)
    backend.from_host(lane, np.asfortranarray(x), X)
