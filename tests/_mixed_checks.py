"""What the mixed-precision solvers' tests measure (test_mixed.py, test_mixed_ooc.py): the
stopping test of MAGMA and cuSOLVER recomputed in double precision, and least-squares
accuracy as lstsq_mixed's refinement promises it."""
from __future__ import annotations

import numpy as np
import scipy.linalg

from _lapack_checks import eps_of, wide


def backward_ratio(a, x, b, dtype):
    """max_j ||b_j - A x_j||_inf / (sqrt(n) ||A||_inf ||x_j||_inf eps) in double precision
    (0 for a column with r_j = 0): <= 1 is MAGMA's and cuSOLVER's convergence test."""
    a, x, b = wide(a), wide(x).reshape(len(a), -1), wide(b).reshape(len(a), -1)
    r = np.abs(b - a @ x).max(axis=0)
    scale = np.abs(a).sum(axis=1).max() * np.abs(x).max(axis=0)
    ratio = np.divide(r, scale, out=np.zeros_like(r), where=r > 0)
    return float(ratio.max() / (np.sqrt(len(a)) * eps_of(dtype)))


def assert_least_squares_accurate(a, x, b, kappa):
    """The forward error of a backward-stable least-squares solution: kappa eps (plus kappa^2
    eps ||r|| / (||A|| ||x||), the residual's share), and of one that passes the normal
    equations' test (tol sqrt(n) eps): kappa^2 sqrt(n) eps; and lstsq_mixed's own stopping
    test, recomputed here in double precision."""
    reference = scipy.linalg.lstsq(a, b)[0]
    assert np.linalg.norm(x - reference) <= max(30, np.sqrt(a.shape[1])) * kappa ** 2 * \
        eps_of(np.float64) * np.linalg.norm(reference)
    x, b = x.reshape(len(reference), -1), b.reshape(len(a), -1)
    normal_residual = np.abs(a.conj().T @ (b - a @ x)).max(axis=0)
    bound = np.sqrt(a.shape[1]) * eps_of(np.float64) * np.abs(x).max(axis=0) * \
        np.abs(a).sum(axis=0).max() * np.abs(a).sum(axis=1).max()
    assert np.all(normal_residual <= 2 * bound)
