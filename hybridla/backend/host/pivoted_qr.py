"""QR with column pivoting's steps (lapack/geqp3.py, LAPACK's laqps panel) on the host backend,
in NumPy: the same contracts as the cuda backend's pivoted_qr.py, so that the driver runs and is
tested without a GPU (the host backend's own geqp3 is LAPACK's: _decomp_qr_pivoted.py)."""
from __future__ import annotations

import numpy as np


def column_norms(lane, A, norms, flags, stop, every=False):
    """norms[j] := (||A[:, j]||, the same) for every column of A (every) or those whose flag is
    set (their flags cleared); stop := 0."""
    chosen = np.arange(A.shape[1]) if every else np.flatnonzero(flags[:, 0])
    values = np.linalg.norm(A[:, chosen], axis=0) if A.shape[0] else np.zeros(len(chosen))
    norms[chosen, 0] = norms[chosen, 1] = values
    flags[chosen, 0] = 0
    stop[0, 0] = 0


def laqps_pivot(lane, A, k, F, norms, jpvt):
    """The pivot p = k + argmax(norms[k:, 0]) (the first on a tie); columns k and p of A, rows k
    and p of F[:, 0:k], jpvt[k] and jpvt[p] exchanged, norms[p] := norms[k]."""
    p = k + int(np.argmax(norms[k:, 0]))
    if p != k:
        A[:, [k, p]] = A[:, [p, k]]
        F[[k, p], :k] = F[[p, k], :k]
        jpvt[[k, p], 0] = jpvt[[p, k], 0]
        norms[p] = norms[k]


def laqps_f_column(lane, F, k, y, tau):
    """F[:, k] := tau (y masked to rows > k - F[:, k] when k > 0, where F[:, 0:k] y[0:k] is)."""
    masked = np.where(np.arange(F.shape[0]) > k, y[:, 0], 0)
    F[:, k] = tau[0, 0] * (masked - F[:, k] if k > 0 else masked)


def laqps_downdate(lane, row, k, norms, flags, stop, diagonal, beta, downdate=True):
    """After row rk (the 1 x cols block `row`) is final: norms[j] downdated for j > k, or
    flags[j] := 1 and stop := 1 where the downdate has lost too much accuracy (LAPACK's test,
    tol3z = sqrt(eps)); then diagonal := beta. Only the latter when not downdate."""
    if downdate:
        tol3z = np.sqrt(np.finfo(row.dtype).eps)
        j = np.arange(k + 1, row.shape[1])
        j = j[norms[j, 0] != 0]
        t = np.abs(row[0, j]) / norms[j, 0]
        t = np.maximum(0, (1 + t) * (1 - t))
        lost = t * (norms[j, 0] / norms[j, 1]) ** 2 <= tol3z
        flags[j[lost], 0] = 1
        if lost.any():
            stop[0, 0] = 1
        norms[j[~lost], 0] *= np.sqrt(t[~lost])
    diagonal[0, 0] = beta[0, 0]
