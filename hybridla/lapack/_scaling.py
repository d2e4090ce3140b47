"""Scaling by powers of two into a safe range: what LAPACK's gels does before it factors
(xLANGE's max-abs norm, then lascl into [smlnum, bignum]), and what the mixed-precision solvers'
preconditioner and refinement need to keep float32 vectors clear of overflow and underflow.
A power of two changes no digit: away from the range's ends, a scaled computation gives the
unscaled one's results to the last bit.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.linalg import get_lapack_funcs


# -- the safe range (dgels) ---------------------------------------------------------------------
def safe_range(dtype):
    """(smlnum, bignum) of dgels: smlnum = lamch("S") / lamch("P") (the safe minimum over the
    precision), bignum = 1 / smlnum; float64 about 1.0e-292 and 1.0e292, float32 9.9e-32 and
    1.0e31 (a complex dtype: its real part's)."""
    finfo = np.finfo(np.dtype(dtype))
    smlnum = float(finfo.tiny) / float(finfo.eps)
    return smlnum, 1.0 / smlnum


def range_scale(norm, dtype) -> float:
    """The power of two s with which a matrix of max-abs norm `norm` goes into the safe range:
    s norm in [smlnum, 2 smlnum) when norm < smlnum, in (bignum / 2, bignum] when norm > bignum;
    1 inside it, for 0 and for a norm that is not finite (nothing to scale, or nothing scaling
    can mend)."""
    smlnum, bignum = safe_range(dtype)
    norm = float(norm)
    if 0 < norm < smlnum:
        mantissa, exponent = math.frexp(smlnum / norm)  # smlnum / norm = mantissa 2^exponent
        return math.ldexp(1.0, exponent if mantissa > 0.5 else exponent - 1)  # 2^ceil(log2)
    if bignum < norm < math.inf:
        _, exponent = math.frexp(bignum / norm)
        return math.ldexp(1.0, exponent - 1)  # 2^floor(log2(bignum / norm))
    return 1.0


def max_abs(ops, S, block) -> float:
    """LAPACK lange("M") of a block of the tile store S: max |s_ij| (the modulus for complex
    entries; 0 for an empty block), as a float, from the backend's statistics pass over the
    block where S lives (`equilibration`, without scales). A host wait for the result."""
    statistics, _ = ops.equilibration(ops.lane("gpu:update"), S, block, False, False)
    return float(np.max(statistics.row_max, initial=0.0))


def host_max_abs(a) -> float:
    """lange("M") of a host array of a LAPACK dtype, without a temporary copy: LAPACK's lange
    on the array as it lies (its transpose when C-ordered: the same entries). 0 when empty."""
    if a.size == 0:
        return 0.0
    if a.ndim == 2 and a.flags.c_contiguous and not a.flags.f_contiguous:
        a = a.T
    lange = get_lapack_funcs("lange", (a,))
    return float(lange("M", a))


def scale(ops, block, factor):
    """block := factor block, in place (nothing for factor 1): the backend's scale_copy, on the
    update lane."""
    if factor == 1:
        return
    lane = ops.lane("gpu:update")
    with lane:
        ops.scale_copy(lane, factor, block, block)


# -- the mixed solvers' vectors ----------------------------------------------------------------
def balanced_scales(scale_in, scale_out):
    """(scale_in / g, scale_out g) for g the power of two at most max scale_in and above half of
    it (lapack/_preconditioner.TriangularPreconditioner's note on range); the scales as they are
    when scale_in has no positive finite maximum."""
    scale_in = np.asarray(scale_in, dtype=np.float64)
    scale_out = np.asarray(scale_out, dtype=np.float64)
    top = float(scale_in.max(initial=0.0))
    if not (0 < top < math.inf):
        return scale_in, scale_out
    _, exponent = math.frexp(top)
    g = math.ldexp(1.0, exponent - 1)
    return scale_in / g, scale_out * g


# the host vectors of the preconditioner's call are scaled to about 1 beyond this (either way):
# rounded to float32 (its range 2^-126..2^128) after an input scaling of at most 1 and with the
# solves' growth, 2^60 keeps them clear of both ends
COLUMN_RANGE = 2.0 ** 60


def column_scales(R):
    """Powers of two s_j near the largest |R_ij| of each column (1 for a column within
    [1 / COLUMN_RANGE, COLUMN_RANGE], a zero or a non-finite one), as a row vector; None where
    every column is within that range."""
    largest = np.abs(R).max(axis=0, initial=0.0).astype(np.float64)
    with np.errstate(invalid="ignore"):
        far = np.isfinite(largest) & (largest > 0) & \
            ((largest > COLUMN_RANGE) | (largest < 1 / COLUMN_RANGE))
    if not far.any():
        return None
    _, exponents = np.frexp(np.where(far, largest, 1.0))
    # in R's own real precision: a power of two between its column's largest entry and half of
    # it is representable there (exactly: a subnormal power of two too)
    scales = np.where(far, np.ldexp(1.0, exponents - 1), 1.0)
    return scales.astype(np.finfo(R.dtype).dtype)[None, :]
