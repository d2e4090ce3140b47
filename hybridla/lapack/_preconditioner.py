"""The low-precision factors as the refinement's preconditioner: M^-1 R applied where the
factors live (TriangularPreconditioner; the triangles of gesv_mixed's LU, posv_mixed's Cholesky,
gels_mixed's R), and LU's row interchanges as one gather (lu_permutation).

For the factors of the scaled copy diag(r) A diag(c) (optionally randomized by butterflies U, V:
the factors of U^T diag(r) A diag(c) V), M^-1 R = diag(c) V T_k^-op ... T_1^-op P U^T diag(r) R:
R rounded to the factors' precision (float32, complex64) with the row scaling and the
permutation in one pass, the triangular solves in that precision, the result back to the
working precision with the column scaling. The scales are powers of two, balanced between the
two sides (lapack/_scaling.balanced_scales) so that the rounded input stays in float32's range;
being the same linear operator, the balance changes no digit. Each triangular solve goes by
blocks of the factorization's nb with the inverses of the diagonal blocks made once: per block
J, y_J := W_J y_J (W_J = op(T_JJ)^-1), then the rows still to solve lose op(T)'s block column J
times y_J. The solves are recorded once and replayed for every number of columns.
"""
from __future__ import annotations

import functools
import time

import numpy as np
from scipy.linalg import lapack

from ._scaling import balanced_scales, column_scales


class TriangularPreconditioner:
    """M^-1 R = diag(scale_out) T_k^-op ... T_1^-op P diag(scale_in) R: the low-precision factors
    applied in their precision where they live, R and the result in the working precision. With
    a `butterfly` (keep_butterfly's pair for U and V: the factors are of U^T diag(r) A diag(c)
    V), M^-1 R = diag(scale_out) V T_k^-op ... P U^T diag(scale_in) R.
    `solves` lists (uplo, trans, diag) of the triangular solves with the leading n x n block of
    `low`; `permutation` (host indices) is LU's row interchanges, applied as a gather of the
    rows when R is rounded to the factors' precision (one pass, not a pass per interchange);
    or `pivots`, LAPACK's sequence of them, made into the permutation while the device
    inverts the diagonal blocks.

    One path: `apply` for blocks where the factors are (DeviceSpace's basis: R into the factors'
    precision and back by kernels, no host copy and no wait), and the call for host arrays
    (refine's x_0 and corrections), which puts R where the factors are, applies, and takes the
    result back.

    Range: the factors are of diag(scale_in) A diag(scale_out), entries about 1, but scale_in R
    has the magnitude of R / ||A||, which leaves float32's range for A near the working
    precision's limits (1e307: every entry underflows to 0; 1e-300: overflows). So a power of
    two g moves from the input side to the output side, M^-1 = diag(scale_out g) ...
    diag(scale_in / g) (the same operator: the solves are linear), with g = max scale_in: the
    rounded input is at most R's size, and the output scaling is done in the working precision.
    The call for host arrays also scales each column of R by a power of two to about 1 where it
    is far from it (a right-hand side of 1e300 or 1e-300), and the result back. Powers of two
    change no digit: for matrices in the ordinary range the results are those without.

    Each solve goes by blocks of `block` rows (the factorization's nb), with the inverses of the
    diagonal blocks made once (the backend's invert_triangular_blocks): per block,
    y_J := op(W_J) y_J, and the rest of y less the block column (row, for op "C") of T times
    y_J. The work is the same
    bandwidth-bound pass over the triangle as trsm's, as gemv-shaped products, which read the
    triangle faster than cuBLAS strsm on one column (perf/RESULTS.md, "Earlier today
    (14:10-14:24 UTC)")."""

    def __init__(self, ops, low, n, nrhs, solves, scale_in, scale_out, permutation=None,
                 butterfly=None, pivots=None):
        self.ops, self.low, self.n, self.solves = ops, low, n, solves
        scale_in, scale_out = balanced_scales(scale_in, scale_out)
        self.scale_in, self.scale_out, self.permutation = scale_in, scale_out, permutation
        self.butterfly = butterfly
        self.factors = low.block(0, n, 0, n)
        self.block = b = max(1, min(low.nb, n))
        low.workspace("preconditioner", n, nrhs)  # at its largest now: no allocation later
        low.workspace("preconditioner block", b, nrhs)
        self.scratch = low.workspace("inversion scratch", b, -(-max(b, n) // 4))
        self.seconds = 0.0
        self._recordings = {}
        self._kept = None  # the scales and permutation where the factors are
        started = time.perf_counter()
        # one set per triangle: the Cholesky's two solves (op N and C) share L's
        self.inverses = {key: self._invert_diagonal_blocks(*key)
                         for key in dict.fromkeys((uplo, diag) for uplo, _, diag in solves)}
        if pivots is not None:  # the host's share, while the device inverts
            self.permutation = lu_permutation(pivots)
        # the solves' recording (host work, nothing runs) while the device inverts: recorded at
        # the first application, it held the device idle (perf/RESULTS.md, "Windows factored
        # by leaves, one GMRES correction")
        lane = ops.lane("gpu:panel")
        with lane:
            self._replay_solves(lane, low.workspace("preconditioner", n, nrhs), launch=False)
        self.seconds += time.perf_counter() - started

    @staticmethod
    def workspace_bytes(n, nb, nrhs, triangles, low_dtype, dtype) -> int:
        """The device memory a preconditioner of `triangles` distinct triangles (the LU's two,
        a Cholesky's or R's one) keeps in its factors' store: the diagonal blocks' inverses,
        the inversion's scratch and the vectors of the working `dtype` and of the factors'
        `low_dtype`, for up to nrhs columns (what __init__, apply and the call allocate)."""
        b = max(1, min(nb, n))
        low_elements = (triangles * b * -(-n // b) * (b + 1) + b * -(-max(b, n) // 4)
                        + (n + b) * nrhs)
        # argument, result, and the butterflies' mixed vector
        return low_elements * np.dtype(low_dtype).itemsize + \
            3 * n * nrhs * np.dtype(dtype).itemsize

    def __call__(self, R):
        """M^-1 R for a host array R (n x k, the working precision), as a new host array: R up,
        `apply`, the result down (one wait)."""
        started = time.perf_counter()
        try:
            ops, n, k = self.ops, self.n, R.shape[1]
            src, dst = (self.low.workspace(f"preconditioner {side}", n, k, dtype=R.dtype)
                        for side in ("argument", "result"))
            lane = ops.lane("gpu:panel")
            columns = column_scales(R)  # None where R's columns are all in range
            ops.from_host(lane, R if columns is None else R / columns, src)
            self._apply(src, dst)
            result = ops.to_host(lane, dst)
            if columns is not None:
                result *= columns
            return result
        finally:
            self.seconds += time.perf_counter() - started

    def _edges(self):
        return [(j0, min(j0 + self.block, self.n)) for j0 in range(0, self.n, self.block)]

    def _invert_diagonal_blocks(self, uplo, diag):
        """The inverses of T's diagonal blocks, W_J at columns J (block + 1) of a workspace
        (the backend's layout for invert_triangular_blocks)."""
        ops, b = self.ops, self.block
        inverses = self.low.workspace(f"diagonal inverses {uplo}{diag}", b,
                                      len(self._edges()) * (b + 1))
        lane = ops.lane("gpu:panel")
        with lane:
            ops.invert_triangular_blocks(lane, uplo, diag, self.factors, b, inverses,
                                         self.scratch)
        return inverses

    def apply(self, src, dst):
        """dst := M^-1 src for n x k blocks of the working precision where the factors live,
        enqueued without a wait; `seconds` counts the host's time to enqueue it."""
        started = time.perf_counter()
        self._apply(src, dst)
        self.seconds += time.perf_counter() - started

    def _apply(self, src, dst):
        ops, k = self.ops, src.shape[1]
        if self._kept is None:
            keep = functools.partial(ops.keep_on_device, self.low)
            self._kept = (keep("scale in", np.asarray(self.scale_in, np.float64)),
                          keep("permutation", None if self.permutation is None
                               else self.permutation.astype(np.int32)),
                          keep("scale out", np.asarray(self.scale_out, np.float64)))
        scale_in, permutation, scale_out = self._kept
        work = self.low.workspace("preconditioner", self.n, k)
        lane = ops.lane("gpu:panel")
        with lane:
            if self.butterfly is None:
                ops.vector_to_low(lane, src, work, scale_in, permutation)
                self._replay_solves(lane, work)
                ops.vector_from_low(lane, work, dst, scale_out)
                return
            # the factors are of U^T diag(r) A diag(c) V: in with U^T diag(r), out with diag(c) V
            left, right = self.butterfly
            mixed = self.low.workspace("preconditioner mixed", self.n, k, dtype=src.dtype)
            ops.butterfly_rows(lane, src, mixed, left, True, before=scale_in)
            ops.vector_to_low(lane, mixed, work, None, permutation)
            self._replay_solves(lane, work)
            ops.vector_from_low(lane, work, dst, None)
            ops.butterfly_rows(lane, dst, dst, right, False, after=scale_out)

    def _replay_solves(self, lane, work, launch=True):
        """The triangular solves on `work` (k columns), replayed: the same kernels on the same
        buffers for every k (launch=False: only recorded, for later)."""
        def solves():
            for uplo, trans, diag in self.solves:
                self._blocked_solve(lane, uplo, trans, self.inverses[uplo, diag], work)

        self.ops.replay(lane, self._recordings, work.shape[1], solves, launch=launch)

    def _blocked_solve(self, lane, uplo, trans, inverses, Y):
        """Y := op(T)^-1 Y, op "N" or "C": blocks from the top when op(T) is lower triangular,
        from the bottom when upper; after each block J, the rows still to solve lose op(T)'s
        part of block column J times Y_J."""
        ops, sub, T, n = self.ops, self.ops.sub_block, self.factors, self.n
        k = Y.shape[1]
        kept = self.low.workspace("preconditioner block", self.block, k)
        forward = (uplo == "L") == (trans == "N")
        edges = self._edges() if forward else self._edges()[::-1]
        b = self.block
        for j0, j1 in edges:
            Y_J, previous = sub(Y, j0, j1, 0, k), sub(kept, 0, j1 - j0, 0, k)
            W_J = sub(inverses, 0, j1 - j0, j0 // b * (b + 1), j0 // b * (b + 1) + j1 - j0)
            ops.lacpy(lane, "A", Y_J, previous)
            ops.gemm(lane, 1, W_J, previous, 0, Y_J, trans_a=trans)
            r0, r1 = (j1, n) if forward else (0, j0)
            if r0 == r1:
                continue
            # op(T)[rest, J]: T[rest, J] for "N", T[J, rest]^H for "C"
            coupling = sub(T, r0, r1, j0, j1) if trans == "N" else sub(T, j0, j1, r0, r1)
            ops.gemm(lane, -1, coupling, Y_J, 1, sub(Y, r0, r1, 0, k), trans_a=trans)


def lu_permutation(pivots) -> np.ndarray:
    """LAPACK's sequential interchanges (row i with row pivots[i], 0-based) as one gather:
    (P b) = b[perm]. laswp applies them to the row numbers (exact in float64): a Python loop
    over them was a third of the LU's refinement phase (perf/RESULTS.md, "Earlier today (H100
    14:53-14:56 UTC, H200 14:59-15:01 UTC)")."""
    if not len(pivots):
        return np.arange(0)
    rows = np.arange(len(pivots), dtype=np.float64).reshape(-1, 1)
    return lapack.dlaswp(rows, np.asarray(pivots, dtype=np.int32))[:, 0].astype(np.intp)
