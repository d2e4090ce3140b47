"""Floating-point operation counts of LAPACK routines, as LAPACK's testers count them.

The formulas are those of LAPACK Working Note 41 (LAWN 41: "Installation Guide for
LAPACK", Anderson, Bai, Dongarra et al., Appendix: operation counts), the same ones
that the LAPACK timing programs, MAGMA and PLASMA (``flops.h``) use.

Multiplications and additions are counted separately; the total is

* real types (float32, float64):       flops = muls + adds
* complex types (complex64, complex128): flops = 6 * muls + 2 * adds

(a complex multiplication costs 4 real multiplications and 2 real additions, a complex
addition 2 real additions).  These counts are conventions: an implementation that does
extra work (e.g. recomputation, or an algorithm with a different constant) is still
credited only with this count, which is what makes GFLOP/s rates comparable.

Leading terms, square real case: getrf 2/3 n^3, potrf 1/3 n^3, geqrf (geqlf, gelqf)
4/3 n^3, gehrd 10/3 n^3, getrs 2 n^2 nrhs.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "flops",
    "getrf_flops",
    "getrs_flops",
    "potrf_flops",
    "geqrf_flops",
    "geqlf_flops",
    "gelqf_flops",
    "gehrd_flops",
    "fmuls_getrf",
    "fadds_getrf",
    "fmuls_getrs",
    "fadds_getrs",
    "fmuls_potrf",
    "fadds_potrf",
    "fmuls_geqrf",
    "fadds_geqrf",
    "fmuls_gelqf",
    "fadds_gelqf",
    "fmuls_gehrd",
    "fadds_gehrd",
]


def flops(muls: float, adds: float, dtype) -> float:
    """Combine multiplication and addition counts into a flop count for ``dtype``."""
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        return 6.0 * muls + 2.0 * adds
    return float(muls + adds)


# --- xGETRF: LU factorization with partial pivoting of an m x n matrix -------------

def fmuls_getrf(m: int, n: int) -> float:
    m, n = float(m), float(n)
    if m < n:
        return 0.5 * m * (m * (n - m / 3.0 - 1.0) + n) + 2.0 * m / 3.0
    return 0.5 * n * (n * (m - n / 3.0 - 1.0) + m) + 2.0 * n / 3.0


def fadds_getrf(m: int, n: int) -> float:
    m, n = float(m), float(n)
    if m < n:
        return 0.5 * m * (m * (n - m / 3.0) - n) + m / 6.0
    return 0.5 * n * (n * (m - n / 3.0) - m) + n / 6.0


def getrf_flops(m: int, n: int, dtype=np.float64) -> float:
    """Flops of xGETRF on an m x n matrix (LAWN 41).

    For m >= n, real: m n^2 - n^3/3 - n^2/2 + 5n/6  (2/3 n^3 - n^2/2 + 5n/6 for m == n).
    """
    return flops(fmuls_getrf(m, n), fadds_getrf(m, n), dtype)


# --- xGETRS: solve with the LU factors, n x n matrix, nrhs right-hand sides ---------

def fmuls_getrs(n: int, nrhs: int) -> float:
    return float(nrhs) * float(n) * float(n)


def fadds_getrs(n: int, nrhs: int) -> float:
    return float(nrhs) * float(n) * (float(n) - 1.0)


def getrs_flops(n: int, nrhs: int, dtype=np.float64) -> float:
    """Flops of xGETRS (LAWN 41): real 2 n^2 nrhs - n nrhs."""
    return flops(fmuls_getrs(n, nrhs), fadds_getrs(n, nrhs), dtype)


# --- xPOTRF: Cholesky factorization of an n x n matrix -------------------------------

def fmuls_potrf(n: int) -> float:
    n = float(n)
    return n * ((n / 6.0 + 0.5) * n + 1.0 / 3.0)


def fadds_potrf(n: int) -> float:
    n = float(n)
    return n * ((n / 6.0) * n - 1.0 / 6.0)


def potrf_flops(n: int, dtype=np.float64) -> float:
    """Flops of xPOTRF (LAWN 41): real n^3/3 + n^2/2 + n/6."""
    return flops(fmuls_potrf(n), fadds_potrf(n), dtype)


# --- xGEQRF: Householder QR factorization of an m x n matrix -------------------------

def fmuls_geqrf(m: int, n: int) -> float:
    m, n = float(m), float(n)
    if m > n:
        return n * (n * (0.5 - n / 3.0 + m) + m + 23.0 / 6.0)
    return m * (m * (-0.5 - m / 3.0 + n) + 2.0 * n + 23.0 / 6.0)


def fadds_geqrf(m: int, n: int) -> float:
    m, n = float(m), float(n)
    if m > n:
        return n * (n * (0.5 - n / 3.0 + m) + 5.0 / 6.0)
    return m * (m * (-0.5 - m / 3.0 + n) + n + 5.0 / 6.0)


def geqrf_flops(m: int, n: int, dtype=np.float64) -> float:
    """Flops of xGEQRF (LAWN 41): real 2 m n^2 - 2/3 n^3 + ... for m >= n (4/3 n^3 square)."""
    return flops(fmuls_geqrf(m, n), fadds_geqrf(m, n), dtype)


def geqlf_flops(m: int, n: int, dtype=np.float64) -> float:
    """Flops of xGEQLF (LAWN 41 counts QL as QR): the same as geqrf_flops."""
    return geqrf_flops(m, n, dtype)


# --- xGELQF: Householder LQ factorization of an m x n matrix (LAWN 41: as xGERQF) ---

def fmuls_gelqf(m: int, n: int) -> float:
    m, n = float(m), float(n)
    if m > n:
        return n * (n * (0.5 - n / 3.0 + m) + m + 29.0 / 6.0)
    return m * (m * (-0.5 - m / 3.0 + n) + 2.0 * n + 29.0 / 6.0)


def fadds_gelqf(m: int, n: int) -> float:
    m, n = float(m), float(n)
    if m > n:
        return n * (n * (-0.5 - n / 3.0 + m) + m + 5.0 / 6.0)
    return m * (m * (0.5 - m / 3.0 + n) + 5.0 / 6.0)


def gelqf_flops(m: int, n: int, dtype=np.float64) -> float:
    """Flops of xGELQF (LAWN 41, the xGERQF count): real 4/3 n^3 + 2 n^2 + 17/3 n for
    m == n; the same leading terms as geqrf."""
    return flops(fmuls_gelqf(m, n), fadds_gelqf(m, n), dtype)


# --- xGEHRD: reduction of an n x n matrix to upper Hessenberg form -------------------

def fmuls_gehrd(n: int) -> float:
    n = float(n)
    return n * (n * (5.0 / 3.0 * n + 0.5) - 7.0 / 6.0) - 13.0


def fadds_gehrd(n: int) -> float:
    n = float(n)
    return n * (n * (5.0 / 3.0 * n - 1.0) - 2.0 / 3.0) - 8.0


def gehrd_flops(n: int, dtype=np.float64) -> float:
    """Flops of xGEHRD (LAWN 41): real 10/3 n^3 - n^2/2 - 11/6 n - 21."""
    return flops(fmuls_gehrd(n), fadds_gehrd(n), dtype)
