"""The Cholesky panel on the CPU: LAPACK potrf on the diagonal block (scipy, by dtype)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_lapack_funcs


def potrf_panel_cpu(A, step: int, k0: int, k1: int, uplo: str) -> None:
    """A11 = L11 L11^H (uplo "L") or U11^H U11 ("U") on the host copy the tile store provides
    (the matrix on the host backend, a pinned buffer holding just the diagonal block on the
    cuda backend). Records LAPACK's info: the order of the first leading minor of the
    block that is not positive definite, 0 if none."""
    diagonal = A.host_panel(step, k0, k0, k1, r1=k1)
    potrf, = get_lapack_funcs(("potrf",), dtype=diagonal.dtype)
    factor, info = potrf(diagonal, lower=int(uplo == "L"), clean=0)
    if not np.shares_memory(factor, diagonal):
        diagonal[...] = factor
    A.set_panel_result(step, k0, k1, None, int(info))
