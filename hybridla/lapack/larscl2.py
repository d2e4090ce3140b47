"""larscl2: B := D^-1 B for a diagonal D given by its entries d (LAPACK xLARSCL2's reciprocal
diagonal scaling; solve's "diagonal" form on device arrays).

    B := diag(1 / d) B     the reciprocals formed on the host (n divisions), one cuBLAS dgmm
                           into a workspace and a copy back (dgmm is not documented in place)

b_i / d_i and b_i (1 / d_i) differ by at most one rounding. Where a reciprocal is not a normal
number (d_i below 1 / the largest float, or above 1 / the smallest normal one) the product would
lose what the quotient keeps, so B comes to the host, is divided there and goes back up.
"""
from __future__ import annotations

import numpy as np

from .sytrf import LANE, ldl_ops


def larscl2(backend, d, B) -> None:
    """Overwrite the store B (n x nrhs) with diag(d)^-1 B; d a host vector of n nonzero
    entries of B's dtype."""
    n, nrhs = B.m, B.n
    if n == 0 or nrhs == 0:
        return
    d = np.asarray(d, dtype=B.dtype)
    lane, X = backend.lane(LANE), B.block(0, n, 0, nrhs)
    with np.errstate(over="ignore", divide="ignore", under="ignore", invalid="ignore"):
        r = 1 / d
    size = np.abs(r)
    if not (np.isfinite(size) & (size >= np.finfo(B.dtype).tiny)).all():
        backend.from_host(lane, backend.to_host(lane, X) / d[:, None], X)
        return
    R, S = B.workspace("larscl2 d", n, 1), B.workspace("larscl2 x", n, nrhs)
    backend.from_host(lane, r.reshape(n, 1), R)
    with lane:
        ldl_ops(backend).scale_rows(backend, lane, R, X, S)
        backend.lacpy(lane, "A", S, X)
