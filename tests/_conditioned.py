"""Test matrices with a prescribed 2-norm condition number kappa (plain functions, no pytest).

- ``general(n, kappa, dtype, rng)``: U diag(s) V^H, U and V Haar-random unitary (orthogonal for
  real dtypes);
- ``spd(n, kappa, dtype, rng)``: U diag(s) U^H, Hermitian (symmetric) positive definite;
- ``tall(m, n, kappa, dtype, rng)``: U[:, :n] diag(s) V^H, m >= n, full column rank.

s is geometric from 1 down to 1/kappa, so ||A||_2 = 1 and ||A^-1||_2 = kappa. The product is
formed in float64/complex128 and then rounded once to ``dtype`` (which perturbs kappa by about
kappa eps(dtype): keep kappa eps(dtype) well below 1 when the exact value matters). Results are
column-major, as hybridla's inputs usually are.
"""
from __future__ import annotations

import numpy as np

from _lapack_checks import random_orthogonal


def singular_values(n, kappa) -> np.ndarray:
    """n values geometric from 1 to 1/kappa (one value: kappa must be 1)."""
    if not kappa >= 1:
        raise ValueError(f"kappa must be >= 1; got {kappa}")
    if n == 1 and kappa != 1:
        raise ValueError(f"a 1 x 1 matrix has condition number 1; got kappa={kappa}")
    return np.geomspace(1.0, 1.0 / kappa, n)


def _wide(dtype):
    return np.complex128 if np.issubdtype(np.dtype(dtype), np.complexfloating) else np.float64


def general(n, kappa, dtype, rng) -> np.ndarray:
    """n x n U diag(s) V^H with condition number kappa."""
    s = singular_values(n, kappa)
    u = random_orthogonal(n, n, _wide(dtype), rng)
    v = random_orthogonal(n, n, _wide(dtype), rng)
    return np.asfortranarray(((u * s) @ v.conj().T).astype(dtype))


def spd(n, kappa, dtype, rng) -> np.ndarray:
    """n x n U diag(s) U^H, Hermitian positive definite, with condition number kappa."""
    s = singular_values(n, kappa)
    u = random_orthogonal(n, n, _wide(dtype), rng)
    a = (u * s) @ u.conj().T
    # Exactly Hermitian (the product is so only up to rounding) and a real diagonal.
    a = (a + a.conj().T) / 2
    return np.asfortranarray(a.astype(dtype))


def tall(m, n, kappa, dtype, rng) -> np.ndarray:
    """m x n (m >= n) U[:, :n] diag(s) V^H, full column rank, with condition number kappa."""
    if m < n:
        raise ValueError(f"tall needs m >= n; got m={m}, n={n}")
    s = singular_values(n, kappa)
    u = random_orthogonal(m, n, _wide(dtype), rng)
    v = random_orthogonal(n, n, _wide(dtype), rng)
    return np.asfortranarray(((u * s) @ v.conj().T).astype(dtype))
