"""BLAS and LAPACK auxiliaries on host blocks (NumPy arrays, views into the store): gemm, trsm,
trsv, trmm, herk, triangular inverses, laset, lacpy, and the block views and products the
algorithms share. LAPACK and BLAS routines are chosen by dtype (scipy.linalg's get_*_funcs)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_blas_funcs, get_lapack_funcs

_HERK = {"f": "syrk", "d": "syrk", "F": "herk", "D": "herk"}


def gemm(lane, alpha, A, B, beta, C, trans_a="N", trans_b="N"):
    """C := alpha op(A) op(B) + beta C."""
    if C.size == 0:
        return
    # the product in C's (column-major) order: mixing orders makes the subtraction crawl
    product = np.matmul(_op(A, trans_a), _op(B, trans_b),
                        out=np.empty(C.shape, dtype=C.dtype, order="F"))
    if alpha != 1:
        product *= alpha
    if beta == 0:
        C[...] = product
    else:
        if beta != 1:
            C *= beta
        C += product


def trsm(lane, side, uplo, trans, diag, alpha, T, B):
    """B := alpha op(T)^-1 B (side "L") or alpha B op(T)^-1 (side "R"); T triangular."""
    if B.size == 0:
        return
    if side == "L" and diag == "N" and _has_tiny_pivot(T):
        # OpenBLAS's trsm multiplies by the diagonal's reciprocals, which overflow for a
        # subnormal pivot (0 * inf = NaN where the quotient is 0); trsv divides, as
        # LAPACK's getrs does for one right-hand side: one column at a time
        trsv, = get_blas_funcs(("trsv",), dtype=B.dtype)
        for j in range(B.shape[1]):
            B[:, j] = alpha * trsv(T, B[:, j], lower=int(uplo == "L"),
                                   trans="NTC".index(trans))
        return
    trsm, = get_blas_funcs(("trsm",), dtype=B.dtype)
    B[...] = trsm(alpha, T, B, side=int(side == "R"), lower=int(uplo == "L"),
                  trans_a="NTC".index(trans), diag=int(diag == "U"))


def trsv(lane, uplo, trans, diag, T, x):
    """x := op(T)^-1 x for one column x (BLAS trsv)."""
    if x.size == 0:
        return
    trsv, = get_blas_funcs(("trsv",), dtype=x.dtype)
    x[:, 0] = trsv(T, x[:, 0], lower=int(uplo == "L"), trans="NTC".index(trans),
                   diag=int(diag == "U"))


def trmm(lane, side, uplo, trans, diag, alpha, T, B):
    """B := alpha op(T) B (side "L") or alpha B op(T) (side "R"), in place; T triangular
    (`uplo` "U" or "L", `diag` "U" for a unit diagonal that is not read), op by `trans`
    ("N", "T", "C")."""
    if B.size == 0:
        return
    trmm, = get_blas_funcs(("trmm",), dtype=B.dtype)
    B[...] = trmm(alpha, T, B, side=int(side == "R"), lower=int(uplo == "L"),
                  trans_a="NTC".index(trans), diag=int(diag == "U"))


def herk(lane, uplo, trans, alpha, A, beta, C):
    """The `uplo` triangle of C := alpha op(A) op(A)^H + beta C (op: "N" or "C"), the other
    triangle untouched: BLAS herk (syrk for real dtypes, where ^H is ^T)."""
    if C.size == 0:
        return
    herk, = get_blas_funcs((_HERK[C.dtype.char],), dtype=C.dtype)
    C[...] = herk(alpha, A, beta=beta, c=C, trans="NTC".index(trans), lower=int(uplo == "L"))


def invert_triangular_blocks(lane, uplo, diag, T, b, W, scratch=None):
    """W_c := T_cc^-1 for the diagonal blocks of order b of the square T (the last may be
    smaller), W_c at columns c (b + 1) of W, the other triangle zero (the device's layout:
    backend/cuda/blas.py); LAPACK trtri on each."""
    trtri, = get_lapack_funcs(("trtri",), dtype=T.dtype)
    W[...] = 0
    for c, j0 in enumerate(range(0, T.shape[0], b)):
        j1 = min(j0 + b, T.shape[0])
        inverse, info = trtri(T[j0:j1, j0:j1], lower=int(uplo == "L"),
                              unitdiag=int(diag == "U"))
        if info < 0:
            raise ValueError(f"trtri: argument {-info} is invalid")
        inverse = np.tril(inverse) if uplo == "L" else np.triu(inverse)
        if diag == "U":  # trtri leaves a unit diagonal as it found it
            np.fill_diagonal(inverse, 1)
        W[:j1 - j0, c * (b + 1):c * (b + 1) + j1 - j0] = inverse


def laset(lane, uplo, alpha, beta, B):
    """LAPACK laset: the strictly upper ("U"), strictly lower ("L") or whole ("A") off-
    diagonal part of B := alpha, its main diagonal := beta."""
    if B.size == 0:
        return
    if uplo == "A":
        B[...] = alpha
    else:
        for rectangle, diagonal_block, mask in _triangle_parts(B.shape, uplo, strict=True):
            B[rectangle] = alpha
            B[diagonal_block][mask] = alpha
    np.fill_diagonal(B, beta)


def lacpy(lane, uplo, src, dst):
    """LAPACK lacpy: the upper ("U", with the diagonal), lower ("L") or whole ("A") part of
    src copied into dst (same shape); the rest of dst is left as it is."""
    if dst.size == 0:
        return
    if uplo == "A":
        dst[...] = src
        return
    for rectangle, diagonal_block, mask in _triangle_parts(dst.shape, uplo, strict=False):
        dst[rectangle] = src[rectangle]
        dst[diagonal_block][mask] = src[diagonal_block][mask]


def sub_block(B, r0, r1, c0, c1):
    """Rows r0:r1 x columns c0:c1 of the block B, as a block of its own: a view, no copy and
    no device work (callable while recording or inside a task)."""
    return B[r0:r1, c0:c1]


def strided_columns(B, first, count, step):
    """Columns first, first + step, ... (count of them) of B: a view."""
    return B[:, first::step][:, :count]


def scale_copy(lane, alpha, src, dst):
    """dst := alpha src (same shape)."""
    np.multiply(src, alpha, out=dst, casting="same_kind")


def apply_to_host(lane, A, X, trans="N", uplo=None, work=None) -> np.ndarray:
    """op(A) X for a host array X (op "N" or "C"), as a new host array, complete on return;
    with `uplo` ("L" or "U") A is Hermitian (symmetric when real) and only that triangle is
    read. `work`: a store block of at least (rows + cols) x k elements, where a device
    backend keeps X and the product (unused here). One pass over A."""
    X = np.asarray(X, dtype=A.dtype)
    if uplo is not None:
        hemm, = get_blas_funcs(("hemm" if A.dtype.kind == "c" else "symm",), dtype=A.dtype)
        return hemm(1, A, X, lower=int(uplo == "L"))
    return np.matmul(_op(A, trans), X)


def apply(lane, A, X, Y, trans="N", uplo=None):
    """Y := op(A) X, in place (the device backends' form of apply_to_host)."""
    Y[...] = apply_to_host(lane, A, X, trans, uplo)


def _has_tiny_pivot(T) -> bool:
    """Whether a diagonal entry of the square T has no finite reciprocal (|t| < 1 / max)."""
    diagonal = np.abs(np.diagonal(T))
    return bool(diagonal.size) and bool((diagonal < 1 / np.finfo(T.dtype).max).any())


def _triangle_parts(shape, uplo, strict, width=256):
    """The upper ("U") or lower ("L") triangle of a rows x cols matrix, with its diagonal unless
    `strict`, block column by block column: (the rectangle wholly inside it, the diagonal block,
    the diagonal block's mask), as index tuples. Whole rectangles keep the copy at memory speed:
    a mask over the whole matrix costs far more than the copy."""
    rows, cols = shape
    for j0 in range(0, cols, width):
        j1 = min(j0 + width, cols)
        top, bottom = min(j0, rows), min(j1, rows)
        diagonal_block = (slice(top, bottom), slice(j0, j1))
        ones = np.ones((bottom - top, j1 - j0), dtype=bool)
        if uplo == "U":
            yield (slice(0, top), slice(j0, j1)), diagonal_block, np.triu(ones, int(strict))
        else:
            yield (slice(bottom, rows), slice(j0, j1)), diagonal_block, np.tril(ones, -int(strict))


def _op(X, trans):
    return {"N": X, "T": X.T, "C": X.conj().T}[trans]
