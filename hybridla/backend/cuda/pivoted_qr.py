"""What QR with column pivoting (lapack/geqp3.py, LAPACK's laqps panel) asks of the cuda backend
beyond BLAS: the column norms, the pivot's column exchange, laqps's column of F and the norms'
downdate, as our kernels (geqp3.cu); the reflector is qr.py's larfg with its beta out.

Module-level functions over (lane, blocks, ...) as blas.py's: enqueued on the lane's stream, no
host wait. `norms` is a cols x 2 block of the real dtype (vn1, vn2: LAPACK's partial and last
computed column norms); `flags`, `jpvt` int32 cols x 1 blocks; `stop` an int32 1 x 1 block.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .runtime import _PREFIX

_THREADS = 512  # geqp3.cu's QP3_THREADS: qp3_norms' and qp3_pivot's blocks
_LINEAR = 256  # threads per block of the one-thread-per-column kernels
_NORM_BLOCKS = 4096  # qp3_norms' grid at most (its blocks loop over the columns)


def _p(block):
    return ctypes.c_void_p(block.ptr)


def _second_column(block):
    return ctypes.c_void_p(block.ptr + block.ld * block.dtype.itemsize)


def column_norms(lane, A, norms, flags, stop, every=False):
    """norms[j] := (||A[:, j]||, the same) for every column of A (every) or those whose flag is
    set (their flags cleared); stop := 0."""
    lane.backend.kernels.launch(
        f"qp3_norms_{_PREFIX[A.dtype]}", (max(1, min(A.cols, _NORM_BLOCKS)),), (_THREADS,),
        lane.handle, _p(A), ctypes.c_longlong(A.ld), ctypes.c_int(A.rows), ctypes.c_int(A.cols),
        _p(norms), _second_column(norms), _p(flags), _p(stop), ctypes.c_int(int(every)))


def laqps_pivot(lane, A, k, F, norms, jpvt):
    """The pivot p = k + argmax(norms[k:, 0]) (the first on a tie); columns k and p of A, rows k
    and p of F[:, 0:k], jpvt[k] and jpvt[p] exchanged, norms[p] := norms[k]."""
    lane.backend.kernels.launch(
        f"qp3_pivot_{_PREFIX[A.dtype]}", (1,), (_THREADS,), lane.handle, _p(A),
        ctypes.c_longlong(A.ld), ctypes.c_int(A.rows), ctypes.c_int(A.cols), ctypes.c_int(k),
        _p(F), ctypes.c_longlong(F.ld), _p(norms), _second_column(norms), _p(jpvt))


def laqps_f_column(lane, F, k, y, tau):
    """F[:, k] := tau (y masked to rows > k - F[:, k] when k > 0, where F[:, 0:k] y[0:k] is)."""
    lane.backend.kernels.launch(
        f"qp3_f_column_{_PREFIX[F.dtype]}", (-(-F.rows // _LINEAR),), (_LINEAR,), lane.handle,
        _p(F), ctypes.c_longlong(F.ld), ctypes.c_int(F.rows), ctypes.c_int(k), _p(y), _p(tau))


def laqps_downdate(lane, row, k, norms, flags, stop, diagonal, beta, downdate=True):
    """After row rk (the 1 x cols block `row`) is final: norms[j] downdated for j > k, or
    flags[j] := 1 and stop := 1 where the downdate has lost too much accuracy (LAPACK's test,
    tol3z = sqrt(eps)); then diagonal := beta. Only the latter when not downdate."""
    tol3z = float(np.sqrt(np.finfo(row.dtype).eps))
    lane.backend.kernels.launch(
        f"qp3_downdate_{_PREFIX[row.dtype]}", (max(1, -(-row.cols // _LINEAR)),), (_LINEAR,),
        lane.handle, _p(row), ctypes.c_longlong(row.ld), ctypes.c_int(row.cols), ctypes.c_int(k),
        _p(norms), _second_column(norms), _p(flags), _p(stop), _p(diagonal), _p(beta),
        ctypes.c_int(int(downdate)), ctypes.c_double(tol3z))
