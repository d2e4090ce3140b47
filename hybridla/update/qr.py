"""The blocked Householder update (LAPACK larfb) for explicit column-form V, against backend ops.

kb reflectors in one block are H = I - V T V^H, with V rows x kb (explicit: unit diagonal, zeros
on the other side) and T kb x kb triangular (upper for a forward product H(0) ... H(kb-1), lower
for a backward one, as larft makes it). Applied to a block C:

    side "L":  C := op(H) C = C - V op(T) V^H C       W = V^H C;  W := op(T) W;  C -= V W
    side "R":  C := C op(H) = C - C V op(T) V^H       W = C V;    W := W op(T);  C -= W V^H

op(H) = H ("N") or H^H ("C", where op(T) = T^H): two GEMMs and one TRMM, nearly all the flops in
the GEMMs. W is scratch of the tile store, private to the task's lane. Every factorization of the
QR family (geqrf, geqlf, gelqf) and everything that applies or forms their Q uses this one update.
"""
from __future__ import annotations

_T_TRIANGLE = {"forward": "U", "backward": "L"}


def apply_block_reflector(ops, lane, A, side, trans, V, T, C, direction="forward") -> None:
    """C := op(H) C (side "L") or C op(H) (side "R"), H = I - V T V^H, in place; `direction`
    says which triangle T is ("forward": upper, "backward": lower); A is the tile store that
    lends the scratch W."""
    rows, cols = C.shape
    kb = V.shape[1]
    if rows == 0 or cols == 0 or kb == 0:
        return
    uplo = _T_TRIANGLE[direction]
    if side == "L":
        W = A.scratch(lane, kb, cols)
        ops.gemm(lane, 1, V, C, 0, W, trans_a="C")      # W = V^H C
        ops.trmm(lane, "L", uplo, trans, "N", 1, T, W)  # W = op(T) W
        ops.gemm(lane, -1, V, W, 1, C)                  # C -= V W
    else:
        W = A.scratch(lane, rows, kb)
        ops.gemm(lane, 1, C, V, 0, W)                   # W = C V
        ops.trmm(lane, "R", uplo, trans, "N", 1, T, W)  # W = W op(T)
        ops.gemm(lane, -1, W, V, 1, C, trans_b="C")     # C -= W V^H


def larfb_flops(rows: int, kb: int, width: int) -> float:
    """Real flops of `apply_block_reflector` with V rows x kb on a C whose other dimension is
    `width`: two GEMMs (2 rows kb width each) and the TRMM (kb^2 width); complex costs 4x."""
    return float(4 * rows * kb * width + kb * kb * width)


def larft_flops(rows: int, kb: int) -> float:
    """Real flops of forming T from rows x kb V: the Gram matrix V^H V and the recurrence."""
    return float(2 * rows * kb * kb + kb ** 3 / 3)
