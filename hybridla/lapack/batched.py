"""Drivers for stacks of matrices on the device: one batched computation for all members.

    getrf_batched   P_b A_b = L_b U_b         a warp per member (up to 32 x 32: the member in
                                              registers), cuBLAS getrfBatched (square members),
                                              or the blocked right-looking LU below
    getrs_batched   A_b X_b = B_b (op)        cuBLAS getrsBatched
    potrf_batched   A_b = L_b L_b^H           cuSOLVER potrfBatched
    potrs_batched   A_b X_b = B_b             two cuBLAS trsmBatched (cuSOLVER's potrsBatched
                                              takes one right-hand side and overwrites the
                                              factor's other triangle)
    geqrf_batched   A_b = Q_b R_b             cuBLAS geqrfBatched

    Batched         one batched computation: the update lane (held) and its workspace, and
                    the steps around the drivers above (copies in and out, infos down,
                    pivots converted) for the user layer's stacks (_stacked_device.py)
    memory_budget   the device memory a stack may take

The blocked LU (LAPACK's dgetrf, right-looking, for every member at once), step k of width jb:

    P [A11; A21] = [L11; L21] U11     the panel, in shared memory, a block of threads per member
    A[k:k+jb, other columns] swapped  the panel's interchanges on its left and right
    A12 := L11^-1 A12                 trsmBatched
    A22 := A22 - A21 A12              gemmStridedBatched (the blocks sit at the same offset in
                                      every member: one stride reaches them all)

Why not cuBLAS' getrfBatched throughout: it is built for small matrices, and PyTorch leaves it
from order 512 on for a loop of cuSOLVER getrf (aten BatchLinearAlgebra.cpp: "m >= 512"), which
runs one member at a time; the blocked LU keeps every member's update in one GEMM launch.
Where the crossover lies on a device is perf/batched.py's to measure.

Stacks are backend StackArrays (dense, column-major members); the caller owns the lane (held),
the workspace and the infos (count int32 on the device, zeroed), and waits for the results
(a `Batched` does all three).
"""
from __future__ import annotations

import math

import numpy as np

LANE = "gpu:update"  # the lane every batched computation runs on

PANEL_WIDTH = 32  # the blocked LU's default panel width (narrowed where shared memory is short)
MIN_PANEL_WIDTH = 8  # below this a panel's column-at-a-time work is all there is


def _ops():
    from ..backend import get_backend  # the cuda backend only: its stacks family
    return get_backend("cuda").batched


def panel_width(backend, m, itemsize, nb=None) -> int:
    """The blocked LU's panel width for members of m rows: nb (default PANEL_WIDTH), halved
    until an m x width panel fits the shared memory a block may take; 0 when not even
    MIN_PANEL_WIDTH columns fit (the members are too tall for the batched LU)."""
    width = PANEL_WIDTH if nb is None else int(nb)
    capacity = _ops().panel_capacity(backend)
    while width > MIN_PANEL_WIDTH and m * width * itemsize > capacity:
        width //= 2
    return width if m * width * itemsize <= capacity else 0


def getrf_batched(backend, lane, ws, A, piv, info, method="blocked", nb=None, source=None):
    """P_b A_b = L_b U_b for every member of the stack A (m x n), in place: L below the diagonal
    (unit, not stored), U on and above it; piv (count x min(m, n) int32) := the pivots, 0-based;
    info (count int32, zeroed by the caller) := each member's first exactly zero U(i, i)
    (1-based), as LAPACK's. method "warp" (members up to 32 x 32), "cublas" (square members:
    cuBLAS getrfBatched) or "blocked" (panel width nb, see panel_width, which must be > 0).
    `source` (an Operand of A's batch and shape): the matrices to factor, copied into A first
    (the warp LU reads them where they are instead); default: A holds them."""
    k_all = min(A.m, A.n)
    if A.count == 0 or k_all == 0:
        return
    ops = _ops()
    if method == "warp":
        if max(A.m, A.n) > ops.WARP_LU_LARGEST:
            raise ValueError(f"the warp LU takes members up to {ops.WARP_LU_LARGEST} x "
                             f"{ops.WARP_LU_LARGEST}; got {A.m} x {A.n}")
        ops.getrf_warp(backend, lane, A, piv, info, source=source)
        return
    if source is not None:
        ops.copy_stack(backend, lane, source, A)
    if method == "cublas":
        if A.m != A.n:
            raise ValueError(f"cuBLAS getrfBatched takes square members; got {A.m} x {A.n}")
        ops.getrf_cublas(backend, lane, ws, A, piv, info)
        return
    width = panel_width(backend, A.m, A.itemsize, nb)
    if width == 0:
        raise ValueError(f"members of {A.m} rows are too tall for the batched LU's panels")
    m, n = A.m, A.n
    for k in range(0, k_all, width):
        jb = min(width, k_all - k)
        # P [A11; A21] = [L11; L21] U11, pivots k..k+jb-1, the first zero pivot to info
        ops.getrf_panel(backend, lane, A, piv, info, k, jb)
        # the same interchanges on the columns left and right of the panel
        ops.laswp(backend, lane, A, piv, k, k + jb, k, k + jb)
        if k + jb < n:
            # A12 := L11^-1 A12
            ops.trsm(backend, lane, ws, "L", "L", "N", "U", 1, ops.dense_operand(A), (k, k), A,
                     (k, k + jb), jb, n - k - jb)
            # A22 := A22 - A21 A12
            ops.gemm(backend, lane, -1, A, (k + jb, k), A, (k, k + jb), 1, A, (k + jb, k + jb),
                     m - k - jb, n - k - jb, jb)


def getrs_batched(backend, lane, ws, trans, LU, piv1, B):
    """B_b := op(A_b)^-1 B_b (trans "N", "T", "C") for every member of B, with the factors of
    getrf_batched: LU an Operand (column-major members, broadcast to B's batch), piv1 the
    device address of the members' pivots in LAPACK's 1-based form, count x n dense."""
    _ops().getrs(backend, lane, ws, trans, LU, piv1, B)


def potrf_batched(backend, lane, ws, uplo, A, info, method="cusolver", source=None,
                  keep=False):
    """A_b = L_b L_b^H (uplo "L") or U_b^H U_b ("U") for every member, the factor in that
    triangle. info (count int32) := the order of each member's first leading minor that is not
    positive definite. method "cusolver" (potrfBatched): the other triangle is left undefined
    (its workspace), `source` copied into A first; "warp" (members up to 32 x 32, our kernel):
    `source` (an Operand) read where it is, the other triangle the source's (keep) or zeros."""
    if A.count == 0 or A.n == 0:
        return
    ops = _ops()
    if method == "warp":
        if A.n > ops.WARP_LU_LARGEST:
            raise ValueError(f"the warp Cholesky takes members up to {ops.WARP_LU_LARGEST} x "
                             f"{ops.WARP_LU_LARGEST}; got {A.n} x {A.n}")
        ops.potrf_warp(backend, lane, A, info, uplo, keep, source=source)
        return
    if source is not None:
        ops.copy_stack(backend, lane, source, A)
    ops.potrf(backend, lane, ws, uplo, A, info)


def potrs_batched(backend, lane, ws, uplo, C, B):
    """B_b := A_b^-1 B_b with the Cholesky factor of A_b in the `uplo` triangle of C_b (an
    Operand: column-major members, broadcast to B's batch):

        lower (A = L L^H):  B := L^-1 B;  B := L^-H B
        upper (A = U^H U):  B := U^-H B;  B := U^-1 B
    """
    first, second = ("N", "C") if uplo == "L" else ("C", "N")
    ops = _ops()
    for trans in (first, second):
        ops.trsm(backend, lane, ws, "L", uplo, trans, "N", 1, C, (0, 0), B, (0, 0), B.m, B.n)


def geqrf_batched(backend, lane, ws, A, tau):
    """A_b = Q_b R_b for every member, in LAPACK's storage (R on and above the diagonal, the
    reflectors below it), tau (count x min(m, n)) their scalars."""
    _ops().geqrf(backend, lane, ws, A, tau)


def memory_budget(backend, configured=None) -> int:
    """The bytes of device memory a stack may take: `configured` (the caller's configuration,
    "device.memory_budget") where given, else 90% of what the device has free now."""
    return int(0.9 * backend.free_memory()) if configured is None else int(configured)


class Batched:
    """One batched computation on the cuda backend: the lane LANE, held, and its workspace.
    Entering waits for the device (the producers' pending writes to the user's arrays land
    first), takes the lane and opens the workspace; leaving frees the workspace and releases
    the lane (a named wait: the results are read next on the user's stream). `template`: the
    user's array whose library allocates the new stacks (`stack`)."""

    def __init__(self, backend, template):
        self.backend, self.ops, self.template = backend, _ops(), template
        self.lane = backend.lane(LANE)

    def __enter__(self):
        self.backend.synchronize()
        self.lane.__enter__()
        self.ws = self.ops.Workspace(self.backend, self.lane)
        return self

    def __exit__(self, *exc):
        try:
            self.ws.close()
        finally:
            self.lane.__exit__(*exc)
        return False

    def stack(self, batch, core, dtype):
        """A new dense stack, from the user's library's allocator where it has one."""
        return self.ops.StackArray(self.backend, batch, core, dtype, like=self.template)

    def operand(self, obj, batch, core_ndim):
        """The device array obj (members of core_ndim axes) as the kernels read it, broadcast
        to `batch`."""
        return self.ws.operand(obj, batch, core_ndim)

    def lacpy_in(self, obj, batch, core_ndim, out, check_finite) -> bool:
        """out := the user's obj broadcast to the batch (one launch). Returns True when
        check_finite and the copy holds an inf or NaN (the caller raises, before any
        factorization)."""
        self.ops.copy_stack(self.backend, self.lane, self.ws.operand(obj, batch, core_ndim),
                            out)
        return bool(check_finite and self.ops.has_nonfinite(self.backend, out))

    def column_major(self, obj, own_batch, batch):
        """An operand of the matrices obj (their own batch own_batch) broadcast to `batch`, for
        the pointer-array routines: obj itself where its members are column-major, else a
        column-major copy (of its own batch: a broadcast member is copied once)."""
        op = self.ws.operand(obj, batch, 2)
        if op.rs == 1 and op.cs >= max(op.m, 1):
            return op
        dtype = np.dtype(obj.__cuda_array_interface__["typestr"])
        dense = self.stack(own_batch, (op.m, op.n), dtype)
        self.ops.copy_stack(self.backend, self.lane, self.ws.operand(obj, own_batch, 2), dense)
        self.ws._keep.append(dense)  # until close()
        return self.ws.operand(dense, batch, 2)

    def _zeroed_infos(self, count):
        info = self.ws.alloc(4 * count)
        self.ops.zero_ints(self.lane, info, count)
        return info

    def _infos(self, info, count):
        """The members' infos on the host: a named wait for the lane."""
        return self.ops.download(self.lane, info, np.empty(count, np.int32))

    def getrf(self, A, piv, method, nb, source=None):
        """getrf_batched on the dense stack A (pivots to piv), of the user's device array
        `source` (broadcast to A's batch) where given, else of what A holds; returns the
        members' infos, a host int32 array (a named wait for the lane)."""
        info = self._zeroed_infos(A.count)
        operand = None if source is None else self.ws.operand(source, A.batch, 2)
        getrf_batched(self.backend, self.lane, self.ws, A, piv, info, method=method, nb=nb,
                      source=operand)
        return self._infos(info, A.count)

    def potrf(self, uplo, A, method="cusolver", source=None, keep=False):
        """potrf_batched on the dense stack A, of the user's device array `source` (broadcast to
        A's batch) where given, else of what A holds; returns the members' infos (host
        int32)."""
        info = self._zeroed_infos(A.count)
        operand = None if source is None else self.ws.operand(source, A.batch, 2)
        potrf_batched(self.backend, self.lane, self.ws, uplo, A, info, method=method,
                      source=operand, keep=keep)
        return self._infos(info, A.count)

    def _pivots_one_based(self, piv, batch, n):
        """The pivots (0-based, device or host, broadcast to the batch) as cuBLAS getrs takes
        them: 1-based, dense count x n int32 on the device. Returns the address."""
        count = math.prod(batch)
        if hasattr(piv, "__cuda_array_interface__"):
            src = self.ws.operand(piv, batch, 1)
            out = self.ws.alloc(4 * count * n)
            self.ops.gather_pivots(self.backend, self.lane, src, out, n, count, 1)
            return out
        host = np.broadcast_to(np.asarray(piv), tuple(batch) + (n,)).astype(np.int32) + 1
        return self.ws.upload(host)

    def getrs(self, trans, LU, piv, batch, n, B):
        """getrs_batched: B := op(A)^-1 B with the factors LU (an Operand broadcast to B's
        batch) and their pivots piv (0-based, device or host, n per member), made 1-based
        first."""
        pivots = self._pivots_one_based(piv, batch, n)
        getrs_batched(self.backend, self.lane, self.ws, trans, LU, pivots, B)

    def potrs(self, uplo, C, B):
        """potrs_batched (C an Operand broadcast to B's batch)."""
        potrs_batched(self.backend, self.lane, self.ws, uplo, C, B)

    def laset_other(self, part, C, a=None, batch=None):
        """C's triangle `part` ("strict_upper", "strict_lower"; cuSOLVER's workspace after
        potrf) := 0 (a None) or the device array a's (broadcast to `batch`)."""
        self.ops.copy_stack(self.backend, self.lane,
                            None if a is None else self.ws.operand(a, batch, 2), C, part=part)

    def geqrf(self, A, tau):
        """geqrf_batched on the dense stack A."""
        geqrf_batched(self.backend, self.lane, self.ws, A, tau)

    def lacpy_r(self, A, R):
        """R := the factors A's upper triangle (trapezoid), zeros below (one launch)."""
        self.ops.copy_stack(self.backend, self.lane, self.ops.dense_operand(A), R, part="upper",
                            rest=True)

    def pivots_from_host(self, host, piv, k):
        """The stack piv (count x k int32) := the host pivots (count x k, C-ordered)."""
        source = self.ws.upload(host)
        self.ops.gather_pivots(self.backend, self.lane,
                               self.ops.Operand(source, 1, k, k, 0, k, 1, piv.dtype), piv.ptr,
                               k, piv.count, 0)

    def pivots_to_host(self, piv, batch, k):
        """The device pivots piv (int32, k per member, any layout, broadcast to the batch) as a
        host int32 array batch + (k,) (a named wait for the lane: the caller reads them)."""
        count = math.prod(batch)
        dense = self.ws.alloc(max(4 * count * k, 1))
        self.ops.gather_pivots(self.backend, self.lane, self.ws.operand(piv, batch, 1), dense,
                               k, count, 0)
        return self.ops.download(self.lane, dense, np.empty(tuple(batch) + (k,), np.int32))

    def lacpy_member(self, r, out, index):
        """Member `index` of the stack out := the device array r (one member's shape)."""
        self.ops.copy_stack(self.backend, self.lane, self.ws.operand(r, (), len(out.core)), out,
                            first=index, count=1)
