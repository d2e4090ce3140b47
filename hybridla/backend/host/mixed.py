"""The mixed-precision family on the host (lapack/_mixed.py, backend/reduced.py): equilibration,
narrowing to the low precision (with the random butterfly: hybridla/butterfly.py), vectors to and
from it, and GEMMs with operands rounded as the tensor cores round them."""
from __future__ import annotations

import numpy as np

from ...butterfly import apply_groups, transform
from ..reduced import Equilibration, inverse_power_of_two, round_to
from .blas import gemm


def keep_on_device(owner, name, array):
    """A vector for later `vector_to_low` calls: here the array itself (a device keeps a
    copy)."""
    return None if array is None else np.array(array)


def vector_to_low(lane, src, dst, scale, permutation=None):
    """dst_ij := (s_{p_i} src_{p_i j}) rounded to dst's precision (cuda/convert.cu's
    vector_to_low); p None: no permutation."""
    rows = slice(None) if permutation is None else permutation
    dst[...] = src[rows] if scale is None else scale[rows][:, None] * src[rows]


def vector_from_low(lane, src, dst, scale):
    """dst_ij := s_i src_ij in dst's precision (s None: ones)."""
    np.multiply(1 if scale is None else scale[:, None], src, out=dst, casting="same_kind")


def butterfly_rows(lane, src, dst, groups, transpose, before=None, after=None):
    """dst := diag(after) op(W) diag(before) src (cuda/butterfly.cu's butterfly_rows), W the
    random butterfly of `groups` (hybridla/butterfly.py), op(W) = W^T when `transpose`;
    None: no scaling. dst may be src."""
    x = src if before is None else before[:, None] * src
    y = apply_groups(groups, x, transpose)
    dst[...] = y if after is None else after[:, None] * y


def equilibration(lane, owner, A, rows, cols, meanwhile=None):
    """backend/reduced.Equilibration of the block A (the cuda backend's, pass for pass: the
    row maxima and sums of |a_ij|, the row scales ones unless `rows`, the column maxima of
    diag(r) |A| and sums of |A|, the column scales ones unless `cols`), and the result of
    `meanwhile()` (None: None), host work that the cuda backend runs while the device makes
    the passes."""
    modulus = np.abs(A).astype(np.float64)
    with np.errstate(over="ignore"):  # inf sums: the callers judge them
        row_max, row_sum = modulus.max(axis=1, initial=0.0), modulus.sum(axis=1)
    r = inverse_power_of_two(row_max) if rows else np.ones(A.shape[0])
    col_max = (modulus * r[:, None]).max(axis=0, initial=0.0)
    with np.errstate(over="ignore"):
        col_sum = modulus.sum(axis=0)
    c = inverse_power_of_two(col_max) if cols else np.ones(A.shape[1])
    kept = meanwhile() if meanwhile is not None else None
    return Equilibration(r, c, row_max, row_sum, col_max, col_sum), kept


def narrow(lane, owner, src, dst, row_scale, col_scale, limit, butterfly=None) -> bool:
    """dst := (r_i c_j src_ij) rounded to dst's precision (cuda/convert.cu's narrow); with a
    `butterfly` (left, right: random butterflies' groups), dst := L^T (r src c) R rounded
    (cuda/butterfly.cu's narrow_butterfly, the arithmetic in float64). Returns whether a
    part of an entry of dst exceeds `limit`."""
    scaled = src * (row_scale[:, None] * col_scale[None, :])
    if butterfly is not None:
        scaled = transform(*butterfly, scaled)
    with np.errstate(over="ignore", invalid="ignore"):
        dst[...] = scaled
    largest = np.maximum(np.abs(dst.real), np.abs(dst.imag))
    return not bool(np.all(largest <= limit))


def narrow_hermitian(lane, owner, src, dst, scale, uplo, limit):
    """The `uplo` triangle of dst := (d_i d_j src_ij) rounded, d = scale, and the sums of
    |src_ij| over that triangle per row and per column (cuda/convert.cu's
    narrow_hermitian): (overflow, row sums, column sums). dst's other triangle is not
    written."""
    inside = _part(np.ones(src.shape, dtype=bool), uplo)
    modulus = np.where(inside, np.abs(src).astype(np.float64), 0.0)
    scaled = src * (scale[:, None] * scale[None, :])
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = scaled.astype(dst.dtype)
    np.copyto(dst, rounded, where=inside)
    largest = np.maximum(np.abs(rounded.real), np.abs(rounded.imag))[inside]
    return not bool(np.all(largest <= limit)), modulus.sum(axis=1), modulus.sum(axis=0)


def add_to_diagonal(lane, owner, B, sigma):
    """B's diagonal += sigma (a shifted low-precision Cholesky)."""
    k = np.arange(min(B.shape))
    B[k, k] += sigma


def prepare_reduced(owner, compute, panel_keys=(), leaf_order=0):
    owner.narrowing_overflow = False


def overflowed(owner) -> bool:
    return bool(getattr(owner, "narrowing_overflow", False))


def gemm_reduced(lane, owner, compute, alpha, A, B, beta, C, trans_a="N",
                 trans_b="N"):
    """`gemm` with the operands rounded to `compute` and float32 sums (the emulation of the
    tensor cores: backend/reduced.py)."""
    if C.size == 0:
        return
    rounded_a, rounded_b = round_to(A, compute), round_to(B, compute)
    if not (np.isfinite(rounded_a).all() and np.isfinite(rounded_b).all()):
        owner.narrowing_overflow = True
    gemm(lane, alpha, rounded_a, rounded_b, beta, C, trans_a, trans_b)


def round_panel(lane, owner, compute, A, trans, key=None):
    """A HERK's panel rounded once for all its GEMMs (backend/cuda/mixed.py's round_panel):
    here the float32 array carrying the rounding, and the side its parts are cut along
    (`key`, the device's buffer name, is not needed: each call returns an array of its own)."""
    rounded = round_to(A, compute)
    if not np.isfinite(rounded).all():
        owner.narrowing_overflow = True
    return rounded, trans == "N"


def gemm_rounded_panel(lane, owner, panel, alpha, first, second, beta, C, trans_a,
                       trans_b):
    """C := alpha op(part first) op(part second) + beta C, parts (i0, i1) of a round_panel
    along its long side: rows for op "N", columns for "C"."""
    rounded, along_rows = panel

    def part(i0, i1):
        return rounded[i0:i1] if along_rows else rounded[:, i0:i1]

    gemm(lane, alpha, part(*first), part(*second), beta, C, trans_a, trans_b)


def _part(X, uplo):
    """X with the entries outside the triangle `uplo` ("U" or "L", with the diagonal) zero."""
    return np.triu(X) if uplo == "U" else np.tril(X)
