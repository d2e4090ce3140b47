"""A backend whose GEMMs run in a reduced precision: the engine of the mixed-precision solvers.

The low-precision LU, Cholesky and QR of lapack/_mixed.py are the ordinary getrf, potrf and
geqrf run on a float32 (complex64) copy of the matrix, with a backend in which `gemm` (and the
`herk` of the Cholesky update) multiply on the tensor cores:

    "single"     float32 GEMM (no tensor cores)
    "tf32"       float32 operands, TensorFloat-32 multiplications (10-bit mantissa), float32 sums
    "half"       operands rounded to IEEE half by our kernel (cuda/convert.cu), float32 sums
    "bfloat16"   operands rounded to bfloat16 by our kernel, float32 sums
    "half-x3"    error-corrected half (Ootomo and Yokota, 2022): each operand split by our
                 kernel into a = hi + 2^-11 lo, both half, and A B = hi hi + 2^-11 (hi lo + lo hi)
                 in two GEMMs of 3x half's flops: float32's accuracy (22 bits of each operand)
                 on the half tensor cores, at a third of their rate
    "tf32-x3"    the same with a = hi + lo in TF32: float32's accuracy and range (the leaves of
                 the blocked triangular solves below, whose operands are not scaled for half)

Panels, triangular solves and everything else stay in float32: MAGMA's recipe (Haidar et al.,
SC18), where only the O(n^3) trailing products see the low precision. The LU's row solves
L11^-1 A12 are blocked (`trsm`): their products with the solved halves run here too. A rounding
that overflows sets a flag in the store (`overflowed`), read once the factorization is done.

The host backend emulates the roundings with NumPy (half: numpy.float16; bfloat16 and TF32: the
float32 mantissa rounded to 8 and 11 significant bits, to nearest with ties to even) and sums in
float32; cuBLAS's TF32 kernels may round differently (truncation on some paths), which changes
the last bit of a TF32 product, not the error analysis.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

COMPUTE = ("single", "tf32", "half", "bfloat16", "half-x3")
# the blocked solves' leaf products (trsm): error-corrected TF32, float32's range and accuracy
LEAF_COMPUTE = "tf32-x3"
# significant bits (with the implicit one) and largest finite value of each operand precision
SIGNIFICANT_BITS = {"single": 24, "tf32": 11, "half": 11, "bfloat16": 8, "half-x3": 22,
                    LEAF_COMPUTE: 22}
LARGEST = {"single": float(np.finfo(np.float32).max), "tf32": float(np.finfo(np.float32).max),
           "half": 65504.0, "bfloat16": float.fromhex("0x1.fep127"), "half-x3": 65504.0,
           LEAF_COMPUTE: float(np.finfo(np.float32).max)}
UNIT_ROUNDOFF = {name: 2.0 ** -bits for name, bits in SIGNIFICANT_BITS.items()}
# the precisions whose GEMM operands are rounded into 16-bit buffers of their own (not tf32's)
ROUNDED = ("half", "bfloat16", "half-x3")
# cuBLAS has no tensor-core GEMM with complex 16-bit operands
REAL_ONLY = ROUNDED
# herk as GEMM strips: at most this many, each at least this wide (ReducedPrecisionOps.herk)
HERK_STRIPS, HERK_STRIP = 8, 1024
# trsm halves its triangle down to diagonal blocks of this order, the leaves: 256 solved fastest;
# with 512 GMRES needed one correction more, since a leaf's inverse multiplies its rounding
# errors by its condition number (perf/RESULTS.md, "The triangular solves' leaves by their
# inverses")
TRSM_LEAF = 256
# the solves `trsm` blocks (side, uplo, trans): the LU's row solves and A21 U11^-1
BLOCKED_SOLVES = (("L", "L", "N"), ("R", "U", "N"))


# the lanes whose GEMMs round their operands into buffers of their own (two operands each)
COMPUTE_LANES = ("gpu:update", "gpu:panel")


def operand_bytes(m, n, nb, compute) -> int:
    """One GEMM operand's buffer (per compute lane and operand) for an m x n store of block
    size nb: its largest operand, nb x max(m, n), rounded to `compute` (half-x3: hi and lo)."""
    if compute not in ROUNDED:
        return 0
    return nb * max(m, n) * (4 if compute == "half-x3" else 2)


def panel_slot_bytes(m, n, nb, compute) -> int:
    """One round_herk_panel slot's buffer: the panel rounded once (half-x3: [hi lo hi])."""
    if compute not in ROUNDED:
        return 0
    return nb * max(m, n) * 2 * (3 if compute == "half-x3" else 1)


def leaf_operand_bytes(m, n, leaf_order) -> int:
    """One operand buffer of the blocked solves' leaf products (tf32-x3, hi and lo)."""
    return max(m, n) * leaf_order * 2 * 4 if leaf_order else 0


def workspace_bytes(m, n, nb, compute, herk_panels=False) -> int:
    """The device memory a reduced-precision factorization of an m x n store keeps beyond the
    backend's required_bytes (what prepare_reduced allocates up front, and trsm's leaf
    inverses): what a caller fitting other arrays beside it into a budget must count."""
    operands = len(COMPUTE_LANES) * 2 * (operand_bytes(m, n, nb, compute)
                                         + leaf_operand_bytes(m, n, _leaf_order(compute)))
    slots = ReducedPrecisionOps.HERK_PANEL_SLOTS * panel_slot_bytes(m, n, nb, compute) \
        if herk_panels else 0
    # trsm's, per lane: the leaves of a triangle of order nb at most (the LU's L11, U11)
    leaf_inverses = len(COMPUTE_LANES) * TRSM_LEAF * -(-nb // TRSM_LEAF) * (TRSM_LEAF + 1) * 4 \
        if _leaf_order(compute) else 0
    return operands + slots + leaf_inverses


def _leaf_order(compute) -> int:
    """The order of trsm's leaves inverted for `compute` (0: the backend's trsm there)."""
    return TRSM_LEAF if compute in ROUNDED else 0


class ReducedPrecisionOps:
    """The backend `ops`, but for its GEMMs (see the module docstring). `owner` is the tile store
    of the low-precision matrix: it owns the operand buffers and the overflow flag.
    `herk_panels`: the factorization rounds HERK panels once for several products
    (round_herk_panel: the Cholesky's update), whose slots are then kept too."""

    HERK_PANEL_SLOTS = 2  # round_herk_panel's slots (lapack/potrf.py: one per step, in turn)

    def __init__(self, ops, compute: str, owner, herk_panels=True):
        if compute not in COMPUTE:
            raise ValueError(f"compute must be one of {COMPUTE}; got {compute!r}")
        self._ops, self.compute, self.owner = ops, compute, owner
        self.herk_panel_slots = self.HERK_PANEL_SLOTS if herk_panels else 0
        # a gemm whose operands are rounded into buffers first may write over one of them
        # (update/chol.py's solve then needs no copy of the block it solves)
        self.gemm_copies_operands = compute in ROUNDED
        # the ops a recursive LU panel runs on: panels stay in float32, GEMMs included
        self.panel_ops = ops
        self._rounded = {}  # round_herk_panel's panels, by slot
        # trsm's leaves by their inverses for the 16-bit computes (real only); "single" and
        # "tf32" keep the backend's solves there
        self.inverts_leaves = _leaf_order(compute) > 0
        ops.prepare_reduced(owner, compute,
                            panel_keys=[_slot_key(slot) for slot in range(self.herk_panel_slots)],
                            leaf_order=_leaf_order(compute))

    def __getattr__(self, name):
        return getattr(self._ops, name)

    def gemm(self, lane, alpha, A, B, beta, C, trans_a="N", trans_b="N"):
        self._ops.gemm_reduced(lane, self.owner, self.compute, alpha, A, B, beta, C,
                               trans_a, trans_b)

    def trsm(self, lane, side, uplo, trans, diag, alpha, T, B):
        """The LU's triangular solves, blocked: B := alpha T^-1 B for a lower-triangular T on the
        left (its row solves, update/lu.py) and B := alpha B T^-1 for an upper-triangular T on
        the right (L21 below a window-pivoted panel's window, panel/lu.py). With T
        halved, T11 first, T22 last:

            left, lower:    B1 := alpha T11^-1 B1;  B2 := alpha B2 - T21 B1;  B2 := T22^-1 B2
            right, upper:   B1 := alpha B1 T11^-1;  B2 := alpha B2 - B1 T12;  B2 := B2 T22^-1

        (B1, B2 the row halves on the left, the column halves on the right; the products in
        this backend's gemm), recursively down to T's diagonal blocks of order TRSM_LEAF. A
        leaf is one more product, B_c := alpha T_cc^-1 B_c (B_c T_cc^-1 on the right), with
        the block's inverse in float32 (the backend's invert_triangular_blocks, all leaves at
        once) and the product in tf32-x3: float32's accuracy, and its range, which an inverse
        needs (its entries grow with 1 / u_ii). Why: with cuBLAS strsm at its leaves (of 128)
        most of the solve below the first window was strsm leaves and narrow GEMMs, not its
        products, and the LU waits for these solves every step; this way all their flops are
        tensor-core GEMMs, and the LU's factor phase got shorter (perf/RESULTS.md, "The
        triangular solves' leaves by their inverses"). Only the leaves are inverted: an
        inverse of the whole T in half-x3 stopped the kappa 1e6 LU from converging (an inverse
        multiplies the product's rounding errors by its block's condition number). With
        "single" and "tf32" the leaves are the backend's trsm, as are the solves of other
        shapes."""
        if (side, uplo, trans) not in BLOCKED_SOLVES or B.size == 0:
            self._ops.trsm(lane, side, uplo, trans, diag, alpha, T, B)
            return
        n = T.shape[0]
        leaves = -(-n // TRSM_LEAF)
        inverses = None
        if self.inverts_leaves:
            inverses = self.owner.workspace(f"trsm leaf inverses {lane.name}", TRSM_LEAF,
                                            leaves * (TRSM_LEAF + 1))
            self._ops.invert_triangular_blocks(lane, uplo, diag, T, TRSM_LEAF, inverses,
                                               self.owner.scratch(lane, TRSM_LEAF, n))
        self._blocked_solve(lane, side, diag, alpha, T, B, 0, leaves, inverses)

    def _blocked_solve(self, lane, side, diag, alpha, T, B, first, leaves, inverses):
        """trsm's recursion on T, the diagonal blocks of order TRSM_LEAF first .. first +
        leaves - 1 of the triangle whose leaf inverses `inverses` holds (None: none)."""
        sub, (rows, cols), n = self._ops.sub_block, B.shape, T.shape[0]
        if leaves == 1:
            if inverses is None:
                self._ops.trsm(lane, side, "L" if side == "L" else "U", "N", diag, alpha, T, B)
                return
            at = first * (TRSM_LEAF + 1)
            inverse = sub(inverses, 0, n, at, at + n)
            # in place: the products read the operands' split copies only
            self._ops.gemm_reduced(lane, self.owner, LEAF_COMPUTE, alpha,
                                   *((inverse, B) if side == "L" else (B, inverse)), 0, B)
            return
        half = leaves // 2
        split = half * TRSM_LEAF
        T11, T22 = sub(T, 0, split, 0, split), sub(T, split, n, split, n)
        if side == "L":
            B1, B2 = sub(B, 0, split, 0, cols), sub(B, split, n, 0, cols)
            coupling = (sub(T, split, n, 0, split), B1)   # T21 B1
        else:
            B1, B2 = sub(B, 0, rows, 0, split), sub(B, 0, rows, split, n)
            coupling = (B1, sub(T, 0, split, split, n))   # B1 T12
        self._blocked_solve(lane, side, diag, alpha, T11, B1, first, half, inverses)
        self.gemm(lane, -1, *coupling, alpha, B2)
        self._blocked_solve(lane, side, diag, 1, T22, B2, first + half, leaves - half, inverses)

    herk_is_gemm = True  # update/chol.py: the whole update of a block column in one call

    def round_herk_panel(self, lane, A, trans, slot):
        """Round a panel once for several herks that each take a part of it (update/chol.py: a
        Cholesky step's look-ahead column and the rest of its trailing matrix both multiply by
        the step's L21), into a buffer of `slot`'s own, so that the panels of consecutive steps
        can be in use at once; `herk(..., rounded=(slot, offset))` reads it."""
        self._rounded[slot] = self._ops.round_panel(lane, self.owner, self.compute, A, trans,
                                                    key=_slot_key(slot))

    def herk(self, lane, uplo, trans, alpha, A, beta, C, rounded=None):
        """C := alpha op(A) op(A)^H + beta C as GEMMs (no tensor-core HERK exists), on a
        trapezoid: C is w x c, c <= w, for lower (op(A) w x k: block columns from the diagonal
        down, the square when c = w), its transpose for upper. Strips of C's c columns (lower;
        rows for upper), each from its diagonal block to the edge of C. The low-precision copy's
        other triangle is never read, so the square blocks on the diagonal may be written whole;
        s strips of a square compute (s + 1) / (2 s) of its flops. The panel is rounded once
        (round_panel) and every strip's GEMMs take parts of it; more strips mean more, narrower
        GEMMs, so they stay few and at least HERK_STRIP wide. `rounded` (slot, offset): A is
        already rounded, as the part of round_herk_panel(slot) from `offset` on along its long
        side (rows for op "N", columns for "C")."""
        w, c = C.shape if trans == "N" else C.shape[::-1]
        strips = max(1, min(HERK_STRIPS, c // HERK_STRIP))
        edges = [0] + [-(-c * j // strips) // 32 * 32 for j in range(1, strips)] + [c]
        sub = self._ops.sub_block
        if rounded is None:
            panel, offset = self._ops.round_panel(lane, self.owner, self.compute, A, trans), 0
        else:
            slot, offset = rounded
            panel = self._rounded[slot]
        for b0, b1 in zip(edges, edges[1:]):
            rows, cols = (offset + b0, offset + w), (offset + b0, offset + b1)
            if trans == "N":   # lower: C[b0:, b0:b1] = A[b0:] A[b0:b1]^H
                self._ops.gemm_rounded_panel(lane, self.owner, panel, alpha, rows, cols,
                                             beta, sub(C, b0, w, b0, b1), "N", "C")
            else:              # upper: C[b0:b1, b0:] = A[:, b0:b1]^H A[:, b0:]
                self._ops.gemm_rounded_panel(lane, self.owner, panel, alpha, cols, rows,
                                             beta, sub(C, b0, b1, b0, w), "C", "N")

    def overflowed(self) -> bool:
        """Whether a rounding of this factorization overflowed (a host wait on a device)."""
        return self._ops.overflowed(self.owner)


def _slot_key(slot):
    """round_panel's buffer key of a round_herk_panel slot (allocated up front by
    prepare_reduced)."""
    return f"slot {slot}"


class Equilibration(NamedTuple):
    """The backends' `equilibration` of a matrix A: the exact scales r, c of diag(r) A diag(c)
    and, from the same passes, the maxima and sums of |a_ij| per row and per column (the
    column maxima of diag(r) A)."""
    r: np.ndarray
    c: np.ndarray
    row_max: np.ndarray
    row_sum: np.ndarray
    col_max: np.ndarray
    col_sum: np.ndarray

    @property
    def norm_inf(self) -> float:
        return float(self.row_sum.max(initial=0.0))

    @property
    def norm_one(self) -> float:
        return float(self.col_sum.max(initial=0.0))

    @property
    def zero_line(self) -> bool:
        """Whether a row or a column of A is zero (A is exactly singular)."""
        return not (np.all(self.row_max > 0) and np.all(self.col_max > 0))


# frexp's mantissa m in [1/2, 1) from which log2 rounds up: cuda/convert.cu's power_of_two_scales
# compares with the same double
SQRT_HALF = 0.70710678118654752440


def inverse_power_of_two(x):
    """2^-k, k the integer nearest log2 x, elementwise; 1 where x is 0 or not finite: an exact
    scale that brings x to [0.7, 1.4]. With x = m 2^e, m in [1/2, 1) (frexp), k = e where m >=
    sqrt(1/2), else e - 1: how cuda/convert.cu decides too, so both backends scale alike."""
    x = np.asarray(x, dtype=np.float64)
    good = np.isfinite(x) & (x > 0)
    mantissa, exponent = np.frexp(np.where(good, x, 1.0))
    nearest = np.where(mantissa >= SQRT_HALF, exponent, exponent - 1)
    with np.errstate(over="ignore"):
        return np.where(good, np.ldexp(1.0, -nearest), 1.0)


def round_to(x: np.ndarray, compute: str) -> np.ndarray:
    """The host emulation of the operand rounding: a float32 (complex64) copy of x whose every
    real number carries `compute`'s significant bits (nearest, ties to even); numbers beyond its
    range become infinite."""
    x = np.asarray(x)
    if compute in ("single",):
        return x.copy()
    real = np.ascontiguousarray(x).view(np.float32) if x.dtype.kind == "c" else \
        np.ascontiguousarray(x, dtype=np.float32)
    if compute in ("half", "half-x3"):
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = real.astype(np.float16).astype(np.float32)
            if compute == "half-x3":  # hi + 2^-11 half((a - hi) 2^11): what the two GEMMs see
                rest = ((real - rounded) * np.float32(2048)).astype(np.float16)
                rounded = rounded + rest.astype(np.float32) / np.float32(2048)
    else:
        dropped = 24 - SIGNIFICANT_BITS[compute]
        bits = real.view(np.uint32).astype(np.uint64)
        half_ulp = np.uint64((1 << (dropped - 1)) - 1)
        bits = (bits + half_ulp + ((bits >> np.uint64(dropped)) & np.uint64(1))) \
            & np.uint64(0xFFFFFFFF & ~((1 << dropped) - 1))
        rounded = bits.astype(np.uint32).view(np.float32)
    out = rounded.view(x.dtype) if x.dtype.kind == "c" else rounded
    return out.reshape(x.shape)
