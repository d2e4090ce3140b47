"""gelqf: blocked Householder LQ with look-ahead, A = L Q, by row panels.

For each step k (panel rows k0:k1, kb = k1 - k0 <= nb):

    [A11 A12] = [L11 0] Q1          row panel on the CPU (scipy has no gelqf: panel/qr.py factors
                                    the panel's conjugate transpose with geqrf); Q1 is
                                    H(k1-1)^H ... H(k0)^H, conj(v_i) right of the diagonal
    V1 := the explicit reflectors, in column form;  T1 := larft(V1, tau):  Q1^H = I - V1 T1 V1^H
    for the next `lookahead` block rows below, then all the others, from the right:
        [A21 A22] := [A21 A22] Q1^H                 W = C V1;  W := W T1;  C -= W V1^H

This is QR of A^H step for step, so geqrf's recorder runs it (the LQ form of _householder.py
transposes its rectangles). cuSOLVER has no gelqf: the panel is always on the CPU.
CPU interface on a device backend: a row panel spans every block column, so the matrix goes up
whole before the first panel; the finished blocks (the row panel, and L's block column below
its diagonal block) come back while the factorization goes on.
"""
from __future__ import annotations

from ._householder import LQ
from .geqrf import householder_factorization


def gelqf(A, plan, trace=None):
    """Factor the tile store's matrix A = L Q in place, in LAPACK's storage (L on and below the
    diagonal, the reflectors' conjugates right of it). Returns (tau, info, trace)."""
    return householder_factorization(A, plan, LQ, "gelqf", trace)
