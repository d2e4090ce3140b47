"""geqlf: blocked Householder QL with look-ahead, A = Q L, from the last columns to the first.

For each step (reflectors t0:t1 of k = min(m, n), in the columns c0:c1 = n-k+t0 : n-k+t1, the
panel's rows 0:r1, r1 = m-k+t1; the first step takes the last nb reflectors):

    A[0:r1, c0:c1] = Q1 [0; L11]    panel on the CPU (scipy has no geqlf: panel/qr.py factors
                                    the reversed panel with geqrf); Q1 = H(t1-1) ... H(t0), each
                                    reflector above a unit at row m-k+i, tau[t0:t1]
    V1 := the explicit reflectors;  T1 := larft(V1, tau), backward (T1 lower): Q1 = I - V1 T1 V1^H
    for the next `lookahead` block columns to the left, then all the others:
        A[0:r1, :c0] := Q1^H A[0:r1, :c0]

This is QR of J A J (J reverses rows and columns) step for step, so geqrf's recorder runs it
(the QL form of _householder.py reverses its rectangles). cuSOLVER has no geqlf: the panel is
always on the CPU, whatever the plan's placement says.
CPU interface on a device backend: the matrix goes up whole before the first panel (it is the
last block column, and uploads go left to right); the finished blocks come back while the
factorization goes on, as geqrf's, mirrored.
"""
from __future__ import annotations

from ._householder import QL
from .geqrf import householder_factorization


def geqlf(A, plan, trace=None):
    """Factor the tile store's matrix A = Q L in place, in LAPACK's storage (L on and below the
    (n-m)-th superdiagonal, the reflectors above it). Returns (tau, info, trace)."""
    return householder_factorization(A, plan, QL, "geqlf", trace)
