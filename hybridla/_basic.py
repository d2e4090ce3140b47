"""solve: a general or Hermitian positive definite system (scipy.linalg._basic)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from ._common import is_device_array
from ._decomp_cholesky import _potrf, cho_solve
from ._decomp_lu import _getrf, lu_solve


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, backend=None, nb=None, lookahead=None, panel=None,
          trace=None):
    """Solve a x = b for a square a, as scipy.linalg.solve: assume_a "gen" (the default) by LU
    (getrf + getrs), "pos" by Cholesky (potrf + potrs) on the `lower` (or upper) triangle.

    A singular a raises LinAlgError("Matrix is singular."); one that is not positive definite
    with "pos", LinAlgError naming the failing minor. transposed=True solves a^T x = b ("gen").
    """
    if assume_a not in (None, "gen", "general", "pos", "positive definite"):
        raise ValueError(f"assume_a={assume_a!r} is not supported yet; use None, 'gen' or 'pos'")
    shape = tuple(a.__cuda_array_interface__["shape"]) if is_device_array(a) else np.shape(a)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"expected a square 2-D matrix for a; got shape {shape}")
    if assume_a in ("pos", "positive definite"):
        # A^T = conj(A) for Hermitian A: transposed=True changes nothing a real user would see
        c, _ = _potrf(a, lower, overwrite_a, check_finite, backend,
                      dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))
        return cho_solve((c, lower), b, overwrite_b=overwrite_b, check_finite=check_finite)
    lu, piv, info = _getrf(a, overwrite_a, check_finite, backend,
                           dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))
    if info > 0:
        raise LinAlgError("Matrix is singular.")
    return lu_solve((lu, piv), b, trans=1 if transposed else 0, overwrite_b=overwrite_b,
                    check_finite=check_finite)
