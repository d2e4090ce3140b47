"""LAPACK's laswp called without holding the GIL.

scipy.linalg.lapack's laswp (like its BLAS wrappers, unlike its getrf) holds the GIL for the
whole call. A host task of the engine that swaps rows of a large matrix then stopped every
other Python thread of the process: the device lanes' threads that enqueue GPU work, the
threads that stage copies, the other CPU workers (a 65536 x 768 laswp of 27648 interchanges
held it 77 ms on the CPU machine; the out-of-core LU's host interchanges run 140 of those;
perf/RESULTS.md, issue 31). The same Fortran routine is called here through the function
pointer scipy.linalg.cython_lapack exports, by ctypes, which releases the GIL for a foreign
call: the interchanges run beside everything else.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np
from scipy.linalg import cython_lapack

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
_INT = ctypes.POINTER(ctypes.c_int)
# prototypes of our own (setting argtypes on ctypes.pythonapi's would change them for the
# whole process)
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@functools.lru_cache(maxsize=None)
def _laswp_function(prefix):
    """xLASWP(N, A, LDA, K1, K2, IPIV, INCX) from cython_lapack, as a ctypes function (ctypes
    releases the GIL while a CFUNCTYPE function runs)."""
    capsule = cython_lapack.__pyx_capi__[f"{prefix}laswp"]
    pointer = _capsule_pointer(capsule, _capsule_name(capsule))
    return ctypes.CFUNCTYPE(None, _INT, ctypes.c_void_p, _INT, _INT, _INT, _INT, _INT)(pointer)


def laswp(a, pivots, k0, k1, forward=True):
    """Apply the row interchanges k0..k1-1 of `pivots` (0-based rows: row i swaps with row
    pivots[i]) to every column of the 2-D array `a`, in place, in order (`forward`) or in
    reverse order: LAPACK's laswp. `a`'s rows must be contiguous (an F-ordered array, or a
    block of its columns or rows); its dtype float32, float64, complex64 or complex128."""
    if a.ndim != 2 or a.dtype not in _PREFIX:
        raise ValueError(f"laswp: a 2-D float or complex array, not {a.dtype} {a.shape}")
    rows, cols = a.shape
    if cols == 0 or k1 <= k0:
        return
    column_step = a.strides[1] // a.itemsize  # LAPACK's lda (one column: any stride)
    if not a.flags.writeable or (rows > 1 and a.strides[0] != a.itemsize) or \
            (cols > 1 and (a.strides[1] % a.itemsize or column_step < rows)):
        raise ValueError("laswp: `a` must be writeable, its rows contiguous (F order)")
    if len(pivots) < k1:
        raise ValueError(f"laswp: {len(pivots)} pivots, not the {k1} asked for")
    ipiv = np.asarray(pivots[:k1], dtype=np.int32) + 1  # LAPACK's rows count from 1
    if ipiv.size and (ipiv[k0:].max() > rows or ipiv[k0:].min() < 1):
        raise ValueError(f"laswp: pivots k0..k1-1 must be rows of `a` (0..{rows - 1})")
    lda = max(1, rows, column_step if cols > 1 else 1)
    values = [ctypes.c_int(v) for v in (cols, lda, k0 + 1, k1, 1 if forward else -1)]
    n, ld, first, last, inc = (ctypes.byref(v) for v in values)
    _laswp_function(_PREFIX[a.dtype])(n, a.ctypes.data, ld, first, last,
                                      ipiv.ctypes.data_as(_INT), inc)
