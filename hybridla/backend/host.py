"""The host backend: every operation with NumPy/SciPy on the CPU, in the scheduler's worker threads.

It is a real mode, not a mock: machines without a GPU get the task-parallel look-ahead algorithms,
and CI tests the algorithms and the scheduler through it. Device ordering is trivial here: a task
runs to completion in its worker thread, so the Dask dependencies alone order the work.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_blas_funcs, get_lapack_funcs
from threadpoolctl import threadpool_limits


class HostLane:
    """Stands where a CUDA stream stands on the cuda backend: nothing to wait for, nothing to record."""

    def __init__(self, name: str):
        self.name = name

    def wait_for(self, events):
        pass

    def record(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class HostMatrix:
    """The working matrix of one factorization in host memory (an F-ordered NumPy array)."""

    def __init__(self, a: np.ndarray, nb: int):
        self.a, self.nb = a, nb
        self.streamed = False  # the matrix is where the work happens: nothing to transfer
        self.pin = False
        self.m, self.n = a.shape
        self.dtype = a.dtype
        self.pivots = np.zeros(min(self.m, self.n), dtype=np.int32)  # global, 0-based
        self.nsteps = -(-min(self.m, self.n) // nb)
        self.info = np.zeros(max(self.nsteps, 1), dtype=np.int32)  # per step, panel-local

    def host_panel(self, step, r0, c0, c1):
        """Where a CPU panel is factored: here, the matrix itself."""
        return self.a[r0:, c0:c1]

    def set_panel_result(self, step, c0, c1, pivots, info):
        if pivots is not None:
            self.pivots[c0:c1] = pivots
        self.info[step] = info

    def finish(self):
        """Pivots and per-step info, final once every task has run."""
        return self.pivots, self.info

    def block(self, r0, r1, c0, c1):
        return self.a[r0:r1, c0:c1]

    def close(self):
        pass


class HostBackend:
    name = "host"
    device_name = "host"
    has_device = False

    def __init__(self):
        self.lanes = {}

    # -- lanes and synchronization -------------------------------------------------------------
    def lane(self, name: str) -> HostLane:
        return self.lanes.setdefault(name, HostLane(name))

    @staticmethod
    def host_wait(events):
        pass

    def begin_run(self, workers: int):
        """Task parallelism instead of BLAS threading: each worker's BLAS runs one thread (several
        multithreaded BLAS calls at once only fight over the cores), and the trailing update is
        cut into one task per worker (`update_tasks`)."""
        self._blas_limits = threadpool_limits(limits=1, user_api="blas")

    def end_run(self):
        self._blas_limits.restore_original_limits()

    @staticmethod
    def update_tasks(workers: int) -> int:
        return workers

    def synchronize(self):
        pass

    def event_times(self, start_event, end_event, origin):
        return None

    def memory_check(self, nbytes: int, what: str):
        pass

    def allocated_bytes(self) -> int:
        return 0

    # -- operations on blocks ------------------------------------------------------------------
    def laswp(self, lane, A: HostMatrix, c0, c1, k0, k1, forward=True, pivots_of=None):
        """Apply the row interchanges of pivots k0..k1-1 (of `pivots_of`, default A) to the
        columns c0:c1 of A (all rows), in order, or in reverse order when not forward."""
        if c1 <= c0 or k1 <= k0:
            return
        laswp, = get_lapack_funcs(("laswp",), dtype=A.dtype)
        pivots = (pivots_of or A).pivots
        cols = A.a[:, c0:c1]  # full columns of an F-ordered array: contiguous, swapped in place
        laswp(cols, pivots, k1=k0, k2=k1 - 1, inc=1 if forward else -1, overwrite_a=1)

    def trsm(self, lane, side, uplo, trans, diag, alpha, T, B):
        """B := alpha op(T)^-1 B (side "L") or alpha B op(T)^-1 (side "R"); T triangular."""
        if B.size == 0:
            return
        trsm, = get_blas_funcs(("trsm",), dtype=B.dtype)
        B[...] = trsm(alpha, T, B, side=int(side == "R"), lower=int(uplo == "L"),
                      trans_a="NTC".index(trans), diag=int(diag == "U"))

    def gemm(self, lane, alpha, A, B, beta, C, trans_a="N", trans_b="N"):
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

    def herk(self, lane, uplo, trans, alpha, A, beta, C):
        """The `uplo` triangle of C := alpha op(A) op(A)^H + beta C (op: "N" or "C"), the other
        triangle untouched: BLAS herk (syrk for real dtypes, where ^H is ^T)."""
        if C.size == 0:
            return
        herk, = get_blas_funcs((_HERK[C.dtype.char],), dtype=C.dtype)
        C[...] = herk(alpha, A, beta=beta, c=C, trans="NTC".index(trans), lower=int(uplo == "L"))

    # -- matrices ------------------------------------------------------------------------------
    def host_matrix(self, source: np.ndarray, result: np.ndarray, nb: int) -> HostMatrix:
        """The working matrix for a host-resident input: the result array itself (the host
        backend factors in place), filled from `source` unless they are the same array."""
        if source is not result:
            result[...] = source
        return HostMatrix(result, nb)

    def wrap(self, a: np.ndarray, pivots: np.ndarray | None = None) -> HostMatrix:
        """An F-ordered host array as a tile store, for the solves: factors (with their pivots,
        for getrs) or the right-hand side they overwrite."""
        A = HostMatrix(a, max(1, min(a.shape)))
        if pivots is not None:
            A.pivots = pivots.astype(np.int32, copy=False)
        return A


_HERK = {"f": "syrk", "d": "syrk", "F": "herk", "D": "herk"}


def _op(X, trans):
    return {"N": X, "T": X.T, "C": X.conj().T}[trans]
