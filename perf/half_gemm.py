"""The probes' half-precision tensor-core GEMM on CuPy arrays: C := alpha A op(B) + beta C with
A and B half, C float32 (cuBLAS gemmEx on the lane's handle and stream), as the reduced backend
calls it (perf/probe_x3_gemm.py, perf/probe_chol_update.py)."""
from __future__ import annotations

import numpy as np

from hybridla.backend import cuda as cuda_backend


def half_gemm(lane, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    scalars = np.array([alpha, beta], dtype=np.float32)
    with lane:
        cuda_backend.cublas.gemm_ex(
            lane.blas, cuda_backend._OP["N"], cuda_backend._OP[op_b], m, n, k,
            scalars.ctypes.data, a.data.ptr, cuda_backend._CUDA_R_16F, lda,
            b.data.ptr, cuda_backend._CUDA_R_16F, ldb, scalars.ctypes.data + 4,
            c.data.ptr, cuda_backend._CUDA_R_32F, ldc, cuda_backend._COMPUTE_32F,
            cuda_backend._GEMM_DEFAULT)
