"""The Householder panels on the CPU: QR, QL and LQ, all through LAPACK geqrf (scipy, by dtype).

scipy has geqrf but neither geqlf nor gelqf. The QL and LQ panels therefore factor a copy of the
panel P turned into a QR problem and read the result back in LAPACK's own storage:

QL: with J the reversal (J x = x[::-1]), factor B = J P J = Q' R' (geqrf: Q' = H'(0) ... H'(k-1),
    v'_i zero above its unit at row i). Then P = (J Q' J)(J R' J). J R' J is lower trapezoidal,
    aligned at the bottom right: geqlf's L. J Q' J = G(0) ... G(k-1) with
    G(i) = J H'(i) J = I - tau'_i (J v'_i)(J v'_i)^H, and J v'_i is zero below its unit at row
    m-1-i. Renumbered i -> k-1-i, that is geqlf's Q = H(k-1) ... H(0), H(i) with its unit at row
    m-k+i, zeros below, and v above it stored in column n-k+i of P: B's storage read through J,
    with tau reversed.
LQ: factor B = P^H = Q_R R. Then P = R^H Q_R^H = L Q with L = R^H lower trapezoidal and
    Q = Q_R^H = H(k-1)^H ... H(0)^H, the same H(i) = I - tau_i v_i v_i^H (tau unchanged): gelqf's
    representation. gelqf keeps conj(v_i) right of the diagonal in row i, and L below it: both
    are B^H read back.
J X J and X^H are involutions, so one map takes the panel to its QR problem and the result back.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_lapack_funcs

# storage -> (the map between a panel and its QR problem, tau's order reversed?)
_AS_QR = {
    "QR": (lambda x: x, False),
    "QL": (lambda x: x[::-1, ::-1], True),
    "LQ": (lambda x: x.conj().T, False),
}


def factor_panel(panel: np.ndarray, storage: str) -> np.ndarray:
    """Factor `panel` in place as LAPACK geqrf ("QR"), geqlf ("QL") or gelqf ("LQ") leave it;
    returns tau."""
    as_qr, reverse_tau = _AS_QR[storage]
    problem = as_qr(panel)
    geqrf, geqrf_lwork = get_lapack_funcs(("geqrf", "geqrf_lwork"), dtype=panel.dtype)
    work, _ = geqrf_lwork(*problem.shape)  # LAPACK's blocked panel needs its optimal workspace
    in_place = storage == "QR" and panel.flags.f_contiguous
    factors, tau, _, _ = geqrf(problem, lwork=max(1, int(np.real(work))),
                               overwrite_a=int(in_place))
    if not np.shares_memory(factors, panel):
        panel[...] = as_qr(factors)
    return tau[::-1] if reverse_tau else tau


def householder_panel_cpu(A, step: int, storage: str, rows, cols, taus) -> None:
    """The CPU panel of `step`: rows r0:r1 and columns c0:c1 of A (`rows`, `cols`), factored as
    `storage` says, on the host copy the tile store provides (the matrix itself on the host
    backend, a pinned buffer on a device backend); its scalars become tau[t0:t1] (`taus`).
    A Householder factorization cannot fail: info 0."""
    (r0, r1), (c0, c1), (t0, t1) = rows, cols, taus
    panel = A.host_panel(step, r0, c0, c1, **({} if r1 == A.m else {"r1": r1}))
    A.set_panel_result(step, t0, t1, None, 0, tau=factor_panel(panel, storage))
