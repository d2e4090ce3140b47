"""The Householder family on the host (QR, QL, LQ and gehrd's panel): block reflectors in
explicit form, their triangular factor (LAPACK larft), and larfg with larft's columns for the
host-driven panel loop."""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_lapack_funcs


def explicit_reflectors(lane, src, dst, storage):
    """dst := the block reflector's V in explicit column form (unit diagonal, zeros on the
    other side), from a factored panel `src` as LAPACK stores it:
      "QR": src rows x kb; column i is v_i below a unit at row i (geqrf).
      "QL": src rows x kb; column i is v_i above a unit at row rows - kb + i (geqlf).
      "LQ": src kb x cols; row i is conj(v_i) right of a unit at column i (gelqf); dst is
            cols x kb, the conjugate transpose of that unit upper-trapezoidal row form.
    dst's shape is given (rows x kb, or cols x kb for "LQ")."""
    if storage == "LQ":  # its column form is the QR storage of src^H
        src, storage = src.conj().T, "QR"
    rows, kb = dst.shape
    if storage == "QR":
        dst[...] = np.tril(src, -1)
        np.fill_diagonal(dst, 1)
    elif storage == "QL":
        dst[...] = np.triu(src, kb - rows + 1)
        np.fill_diagonal(dst[rows - kb:, :], 1)
    else:
        raise ValueError(f"storage must be 'QR', 'QL' or 'LQ'; got storage={storage!r}")


def triangular_factor(lane, V, tau, T, direction, work=None):
    """LAPACK larft for explicit column-form V (rows x kb) and its scalars tau (kb):
    "forward": T upper triangular with H(1) H(2) ... H(k) = I - V T V^H;
    "backward": T lower triangular with H(k) ... H(2) H(1) = I - V T V^H;
    H(i) = I - tau_i v_i v_i^H. A zero tau_i (H(i) = I) gives a zero row and column i, as
    LAPACK's. The other triangle of T is zero.

    LAPACK's recurrence (forward; backward runs from the last column up):
        T(0:i, i) = -tau_i T(0:i, 0:i) V(:, 0:i)^H v_i,  T(i, i) = tau_i
    with the Gram matrix V^H V formed by one GEMM first. `work` (kb x kb scratch, which the
    cuda backend's inverse needs) is not used here."""
    kb = T.shape[0]
    gram = V.conj().T @ V
    T[...] = 0
    for i in range(kb) if direction == "forward" else range(kb - 1, -1, -1):
        if tau[i] == 0:
            continue
        done = slice(0, i) if direction == "forward" else slice(i + 1, kb)
        T[done, i] = -tau[i] * (T[done, done] @ gram[done, i])
        T[i, i] = tau[i]


def larfg(lane, x, tau, beta=None):
    """LAPACK larfg on the column block x (alpha = x[0], the rest below), in place: x :=
    (beta, v[1:]) with H = I - tau v v^H, H^H x = beta e_1; tau (a 1 x 1 block) := tau. With
    `beta` (a 1 x 1 block): beta := beta and x[0] := 1 (v in place, geqp3's panel)."""
    larfg, = get_lapack_funcs(("larfg",), dtype=x.dtype)
    n = x.shape[0]
    rest = x[1:, 0] if n > 1 else np.zeros(1, x.dtype)
    beta_value, v, tau[0, 0] = larfg(n, x[0, 0], rest)
    x[0, 0] = beta_value
    if n > 1:
        x[1:, 0] = v[:n - 1]
    if beta is not None:
        beta[0, 0], x[0, 0] = beta_value, 1


def lahr2_reflector(lane, x, tau, v, w, t_diagonal):
    """larfg on x, then the copies gehrd's panel loop needs: v := x[1:] (the reflector's
    explicit V below its unit), w := -tau (1; x[1:]), t_diagonal := tau (1 x 1 blocks)."""
    larfg(lane, x, tau)
    minus_tau = -tau[0, 0]
    v[:, 0] = x[1:, 0]
    w[0, 0] = minus_tau
    w[1:, 0] = minus_tau * x[1:, 0]
    t_diagonal[0, 0] = tau[0, 0]
