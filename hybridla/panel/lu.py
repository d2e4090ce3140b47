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


def getrf_panel_recursive(ops, lane, A, step: int, k0: int, k1: int, leaf: int) -> None:
    """The panel A[k0:, k0:k1] factored by recursive halving (Toledo 1997; MAGMA's and cuSOLVER's
    fast panels), on one lane, where the matrix is:

        [A11 A12; A21 A22] with the left half k0:mid, the right half mid:k1
        P1 [A11; A21] = [L11; L21] U11          the left half, recursively
        [A12; A22] := P1^T [A12; A22]           its interchanges on the right half
        A12 := L11^-1 A12                        U12
        A22 := A22 - L21 U12                     one tall GEMM: most of the panel's flops
        P2 A22 = L22 U22                         the right half, recursively
        A21 := P2^T A21                          its interchanges on the left half

    Halves at most `leaf` wide go to the backend's own panel (`ops.getrf_panel`: cuSOLVER getrf
    on a device, LAPACK getrf on the host). A whole-panel cuSOLVER getrf spends most of its time
    in narrow, latency-bound steps; the recursion moves (w - leaf) / w of the panel's flops into
    GEMMs, at the update's precision (the tensor cores in a mixed solve). The leaves' infos are
    local to them, so the step's info is taken at the end from U's diagonal (`ops.panel_info`):
    the first exactly zero U(i, i), as LAPACK's getrf reports it."""
    _recursive(ops, lane, A, step, k0, k1, leaf)
    ops.panel_info(lane, A, step, k0, k1)


def _recursive(ops, lane, A, step, c0, c1, leaf):
    if c1 - c0 <= leaf:
        ops.getrf_panel(lane, A, step, c0, c0, c1)
        return
    mid = c0 + max(leaf, ((c1 - c0) // 2) // 32 * 32)  # a multiple of 32 for aligned GEMMs
    _recursive(ops, lane, A, step, c0, mid, leaf)
    ops.laswp(lane, A, mid, c1, c0, mid)
    ops.trsm(lane, "L", "L", "N", "U", 1, A.block(c0, mid, c0, mid), A.block(c0, mid, mid, c1))
    ops.gemm(lane, -1, A.block(mid, A.m, c0, mid), A.block(c0, mid, mid, c1), 1,
             A.block(mid, A.m, mid, c1))
    _recursive(ops, lane, A, step, mid, c1, leaf)
    ops.laswp(lane, A, c0, mid, mid, c1)
