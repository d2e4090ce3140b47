"""The LU panel on the CPU: LAPACK getrf (scipy.linalg.lapack, routine chosen by dtype)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_lapack_funcs


def factor_panel(panel: np.ndarray) -> tuple[np.ndarray, int]:
    """Factor ``panel = P L U`` in place with LAPACK getrf.

    Returns the panel-local 0-based pivots and LAPACK's info (the first zero U(i,i), 1-based within
    the panel; the factorization goes on past it, as LAPACK's does)."""
    getrf, = get_lapack_funcs(("getrf",), dtype=panel.dtype)
    lu, piv, info = getrf(panel, overwrite_a=int(panel.flags.f_contiguous))
    if not np.shares_memory(lu, panel):  # f2py copied a strided panel: put the result back
        panel[...] = lu
    return piv, int(info)


def getrf_panel_cpu(A, step: int, r0: int, c0: int, c1: int) -> None:
    """The CPU panel of step `step`: [A11; A21] = P [L11; L21] U11 for rows r0: and columns c0:c1,
    on the host copy the tile store provides (the matrix itself on the host backend, a pinned
    buffer on the cuda backend). Pivots are recorded as global row indices."""
    piv, info = factor_panel(A.host_panel(step, r0, c0, c1))
    A.set_panel_result(step, c0, c1, piv + r0, info)
