"""Random butterfly transforms of depth 2 (Parker 1995; Baboulin, Dongarra, Herrmann and Tomov,
ACM TOMS 2013; MAGMA's gesv_rbt), the randomization that lets the mixed LU search its pivots
within a window of block rows from the diagonal (panel/lu.getrf_panel_window):

    A_r = U^T A V,   U, V random butterflies of depth 2, applied in O(n^2)

Gaussian elimination of A_r needs no pivoting with high probability for any nonsingular A: the
transform spreads every row and column over others with random weights, so no leading block is
singular or nearly so unless A is. (Without any pivoting the float32-accurate LU still grew too
much for refinement at condition 1e6; pivots searched for within two block rows keep it as
partial pivoting keeps it: perf/RESULTS.md, "A randomized LU with window pivoting".)

A butterfly of order n is B = [R0 R1; R0 -R1] / sqrt(2) with random diagonal R0, R1 of order
n / 2; depth 2 is U = diag(B', B'') B, the order-n butterfly followed by one of order n / 2 on
each half. So U mixes each row only with three others: the rows fall into groups {i, i + q,
i + 2q, i + 3q}, q = floor(n / 4), and U restricted to group i is a 4 x 4 matrix G_i (its
"groups": a 4 x 4 x q array, G_i[c, a] at [c, a, i], so that a warp of the device's kernels,
threads on consecutive groups, reads each entry of its G_i in one coalesced load; the host
and the device apply the same numbers). Rows from 4q on (n not a multiple of 4) are left
alone: the pivot search of the last window still sees them. The diagonals' entries are
exp(rho / 10), rho uniform on [-1/2, 1/2] (Parker's choice), drawn from a fixed seed: the same n
gets the same transform in every run.
"""
from __future__ import annotations

import functools

import numpy as np

SEED = 20131  # any fixed seed: runs are reproducible, and no matrix is special to it


class RandomButterfly:
    """U and V of order n (`left` and `right`: their groups, 4 x 4 x q float64 arrays)."""

    def __init__(self, n: int, seed: int = SEED):
        rng = np.random.default_rng(seed)
        self.left, self.right = random_groups(rng, n // 4), random_groups(rng, n // 4)
        for groups in (self.left, self.right):
            groups.setflags(write=False)  # shared by every solve of this order (below)


@functools.lru_cache(maxsize=4)
def random_butterfly(n: int) -> RandomButterfly:
    """The RandomButterfly of order n from SEED, made once per process: making it on the host
    takes several times as long as applying it on a device, fused into the narrowing
    (perf/RESULTS.md, "A randomized LU with window pivoting", and "Measurements formerly in
    docstrings")."""
    return RandomButterfly(n)


def random_groups(rng, q: int) -> np.ndarray:
    """G_i = B2_i B1_i for i < q: B1 couples local rows (0, 2) and (1, 3) (the order-n
    butterfly: rows i and i + n/2), B2 couples (0, 1) and (2, 3) (the two of order n/2)."""
    r = np.exp(rng.uniform(-0.5, 0.5, size=(q, 8)) / 10)
    first, second = np.zeros((q, 4, 4)), np.zeros((q, 4, 4))
    for level, pairs in ((first, ((0, 2), (1, 3))), (second, ((0, 1), (2, 3)))):
        column = 0 if level is first else 4
        for top, bottom in pairs:
            r0, r1 = r[:, column], r[:, column + 1]
            column += 2
            level[:, top, top], level[:, top, bottom] = r0, r1
            level[:, bottom, top], level[:, bottom, bottom] = r0, -r1
    return np.ascontiguousarray((second @ first).transpose(1, 2, 0) / 2)  # 1 / sqrt 2 a level


def apply_groups(groups: np.ndarray, X: np.ndarray, transpose: bool = False) -> np.ndarray:
    """op(W) X as a new array, W the transform whose groups are `groups` (op: W, or W^T when
    `transpose`); X has n rows (a vector or a matrix), rows from 4q on are copied."""
    q = groups.shape[2]
    Y = np.array(X, dtype=np.result_type(X, np.float64), copy=True)
    if q == 0:
        return Y
    G = groups.transpose(1, 0, 2) if transpose else groups
    stacked = Y[:4 * q].reshape(4, q, -1)  # [local row a, group i, column]
    Y[:4 * q] = np.einsum("cai,aik->cik", G, stacked).reshape(Y[:4 * q].shape)
    return Y


def transform(left: np.ndarray, right: np.ndarray, A: np.ndarray) -> np.ndarray:
    """L^T A R as a new float64 (complex128) array, L and R the transforms of the groups `left`
    and `right` (cuda/butterfly.cu's butterfly_two_sided, on the host)."""
    mixed = apply_groups(left, A, transpose=True)
    return apply_groups(right, mixed.T, transpose=True).T
