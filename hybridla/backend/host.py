"""The host backend: every operation with NumPy/SciPy on the CPU, in the scheduler's worker threads.

It is a real mode, not a mock: machines without a GPU get the task-parallel look-ahead algorithms,
and CI tests the algorithms and the scheduler through it. Device ordering is trivial here: a task
runs to completion in its worker thread, so the Dask dependencies alone order the work.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_blas_funcs, get_lapack_funcs

from ..butterfly import apply_groups, transform
from ..panel.lu import factor_panel_tournament, getrf_panel_cpu
from .blas_threads import single_threaded_blas
from .reduced import Equilibration, inverse_power_of_two, round_to


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
    """The working matrix of one factorization in host memory (an F-ordered NumPy array), with
    what its panels produce (LU's pivots, the Householder scalars tau of QR, QL and LQ, per-step
    info) and the workspaces its tasks share."""

    def __init__(self, a: np.ndarray, nb: int):
        self.a, self.nb = a, nb
        self.streamed = False  # the matrix is where the work happens: nothing to transfer
        self.pin = False
        self.staged = False
        self.transfer = None
        self.m, self.n = a.shape
        self.dtype = a.dtype
        self.pivots = np.zeros(min(self.m, self.n), dtype=np.int32)  # global, 0-based
        self.tau = np.zeros(min(self.m, self.n), dtype=self.dtype)  # QR, QL, LQ: reflector i's
        self.nsteps = -(-min(self.m, self.n) // nb)
        self.info = np.zeros(max(self.nsteps, 1), dtype=np.int32)  # per step, panel-local
        self._workspaces = {}

    def track_one_norm(self):
        """||A||_1 of the matrix as it is now, before the factorization overwrites it (LAPACK
        lange's "1"; `one_norm` returns it)."""
        self._one_norm = float(get_lapack_funcs("lange", (self.a,))("1", self.a)) \
            if self.a.size else 0.0

    def one_norm(self) -> float:
        return self._one_norm

    def set_pivots(self, pivots):
        """Pivots of existing factors (0-based global), for getrs."""
        self.pivots[:] = pivots

    def host_panel(self, step, r0, c0, c1, r1=None):
        """Where a CPU panel is factored: here, the matrix itself (rows r0:r1, r1 None for the
        last row; columns c0:c1)."""
        return self.a[r0:r1, c0:c1]

    def set_panel_result(self, step, c0, c1, pivots, info, tau=None):
        """A panel's results: the pivots (global rows) of entries c0:c1, or the Householder
        scalars of reflectors c0:c1 (`tau`), and the panel's info."""
        if pivots is not None:
            self.pivots[c0:c1] = pivots
        if tau is not None:
            self.tau[c0:c1] = tau
        self.info[step] = info

    def finish(self):
        """Pivots and per-step info, final once every task has run."""
        return self.pivots, self.info

    def finish_tau(self):
        """The Householder scalars (length min(m, n)) and per-step info, final once every task
        has run: what `finish` is to LU, for QR, QL and LQ."""
        return self.tau, self.info

    def set_tau(self, tau):
        """The Householder scalars of existing factors (to apply or form their Q)."""
        self.tau = np.asarray(tau, dtype=self.dtype)

    def tau_block(self, t0, t1):
        """The scalars of reflectors t0:t1, as `triangular_factor` takes them."""
        return self.tau[t0:t1]

    def diagonal(self):
        """The main diagonal (min(m, n) entries), as a host array."""
        return np.diagonal(self.a).copy()

    def read_block(self, r0, r1, c0, c1):
        """A host copy of a block (small results the caller needs on the host: residuals)."""
        return self.a[r0:r1, c0:c1].copy()

    def block(self, r0, r1, c0, c1):
        return self.a[r0:r1, c0:c1]

    def workspace(self, name, rows, cols, dtype=None):
        """A rows x cols block of the workspace `name`, which lives as long as the store: the
        first use allocates it (ask for the largest size first, while recording: allocating
        during a run would synchronize a device), later uses share it. Algorithms order the
        reuse of a workspace through a graph Region of the same name. Its elements are the
        store's dtype, or `dtype` (a name keeps the dtype it was first given)."""
        buffer = self._workspaces.get(name)
        if buffer is None or buffer.shape[0] < rows or buffer.shape[1] < cols:
            # a larger request gets a new buffer; blocks handed out earlier keep the old one
            buffer = np.empty((rows, cols), dtype=self.dtype if dtype is None else dtype,
                              order="F")
            self._workspaces[name] = buffer
        return buffer[:rows, :cols]

    def scratch(self, lane, rows, cols):
        """A temporary rows x cols block for one operation of a task on `lane` (the W of a block
        reflector). Fresh each call here: host tasks of one lane run concurrently in worker
        threads."""
        return np.empty((rows, cols), dtype=self.dtype, order="F")

    def close(self):
        pass


def _has_tiny_pivot(T) -> bool:
    """Whether a diagonal entry of the square T has no finite reciprocal (|t| < 1 / max)."""
    diagonal = np.abs(np.diagonal(T))
    return bool(diagonal.size) and bool((diagonal < 1 / np.finfo(T.dtype).max).any())




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
        """Task parallelism instead of BLAS threading: each worker's BLAS runs one thread
        (several multithreaded BLAS calls at once only fight over the cores: LU, QR and
        Cholesky at n = 3000 took 2x, 9x and 3x as long on two cores), and the trailing update
        is cut into one task per worker (`update_tasks`)."""
        single_threaded_blas.enter()

    def end_run(self):
        single_threaded_blas.leave()

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

    def cached_bytes(self) -> int:
        return 0

    def free_cached(self):
        pass

    # -- operations on blocks ------------------------------------------------------------------
    @staticmethod
    def getrf_panel(lane, A: HostMatrix, step, r0, c0, c1, r1=None):
        """LAPACK getrf on the panel A[r0:r1, c0:c1] in place (r1 None: to the last row); pivots
        global (the leaves of a recursive panel, windows: panel/lu.py)."""
        getrf_panel_cpu(A, step, r0, c0, c1, r1)

    def getrf_leaf(self, lane, A: HostMatrix, step, r0, c0, c1, k0=None, k1=None, r1=None):
        """The leaf A[r0:r1, c0:c1] of the panel A[r0:r1, k0:k1] (k0, k1 default c0, c1; r1
        None: to the last row) by LAPACK getrf, its interchanges applied to the panel's other
        columns; pivots global, the info left to panel_info."""
        getrf_panel_cpu(A, step, r0, c0, c1, r1)
        self._interchange_other_columns(lane, A, c0, c1, k0, k1)

    def tslu_panel(self, lane, A: HostMatrix, step, r0, c0, c1, k0=None, k1=None):
        """The leaf A[r0:, c0:c1] of the panel A[r0:, k0:k1] by tournament pivoting
        (panel/lu.factor_panel_tournament, the tree of cuda/tslu.cu), its interchanges applied
        to the panel's other columns; pivots global, the info left to panel_info."""
        pivots = factor_panel_tournament(A.host_panel(step, r0, c0, c1))
        A.set_panel_result(step, c0, c1, pivots + r0, 0)
        self._interchange_other_columns(lane, A, c0, c1, k0, k1)

    def _interchange_other_columns(self, lane, A, c0, c1, k0, k1):
        self.laswp(lane, A, c0 if k0 is None else k0, c0, c0, c1)
        self.laswp(lane, A, c1, c1 if k1 is None else k1, c0, c1)

    @staticmethod
    def panel_info(lane, A: HostMatrix, step, k0, k1):
        """The step's info := the first exactly zero U(i, i) of the panel (1-based), else 0."""
        zeros = np.flatnonzero(np.diagonal(A.a[k0:k1, k0:k1]) == 0)
        A.info[step] = zeros[0] + 1 if zeros.size else 0

    @staticmethod
    def prepare_interchanges(lane, A: HostMatrix, step, k0, k1):
        """Nothing to prepare: LAPACK's laswp applies a step's interchanges well as they are."""

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

    @staticmethod
    def trsv(lane, uplo, trans, diag, T, x):
        """x := op(T)^-1 x for one column x (BLAS trsv)."""
        if x.size == 0:
            return
        trsv, = get_blas_funcs(("trsv",), dtype=x.dtype)
        x[:, 0] = trsv(T, x[:, 0], lower=int(uplo == "L"), trans="NTC".index(trans),
                       diag=int(diag == "U"))

    @staticmethod
    def invert_triangular_blocks(lane, uplo, diag, T, b, W, scratch=None):
        """W_c := T_cc^-1 for the diagonal blocks of order b of the square T (the last may be
        smaller), W_c at columns c (b + 1) of W, the other triangle zero (the device's layout:
        backend/cuda.py); LAPACK trtri on each."""
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

    def trmm(self, lane, side, uplo, trans, diag, alpha, T, B):
        """B := alpha op(T) B (side "L") or alpha B op(T) (side "R"), in place; T triangular
        (`uplo` "U" or "L", `diag` "U" for a unit diagonal that is not read), op by `trans`
        ("N", "T", "C")."""
        if B.size == 0:
            return
        trmm, = get_blas_funcs(("trmm",), dtype=B.dtype)
        B[...] = trmm(alpha, T, B, side=int(side == "R"), lower=int(uplo == "L"),
                      trans_a="NTC".index(trans), diag=int(diag == "U"))

    def explicit_reflectors(self, lane, src, dst, storage):
        """dst := the block reflector's V in explicit column form (unit diagonal, zeros on the
        other side), from a factored panel `src` as LAPACK stores it:
          "QR": src rows x kb; column i is v_i below a unit at row i (geqrf).
          "QL": src rows x kb; column i is v_i above a unit at row rows - kb + i (geqlf).
          "LQ": src kb x cols; row i is conj(v_i) right of a unit at column i (gelqf); dst is
                cols x kb, the conjugate transpose of that unit upper-trapezoidal row form.
        dst's shape is given (rows x kb, or cols x kb for "LQ")."""
        if storage == "LQ":  # its column form is the QR storage of src^H
            src, storage = src.conj().T, "QR"
        rows, kb = dst.shape
        if storage == "QR":
            dst[...] = np.tril(src, -1)
            np.fill_diagonal(dst, 1)
        elif storage == "QL":
            dst[...] = np.triu(src, kb - rows + 1)
            np.fill_diagonal(dst[rows - kb:, :], 1)
        else:
            raise ValueError(f"storage must be 'QR', 'QL' or 'LQ'; got storage={storage!r}")

    def triangular_factor(self, lane, V, tau, T, direction, work=None):
        """LAPACK larft for explicit column-form V (rows x kb) and its scalars tau (kb):
        "forward": T upper triangular with H(1) H(2) ... H(k) = I - V T V^H;
        "backward": T lower triangular with H(k) ... H(2) H(1) = I - V T V^H;
        H(i) = I - tau_i v_i v_i^H. A zero tau_i (H(i) = I) gives a zero row and column i, as
        LAPACK's. The other triangle of T is zero.

        LAPACK's recurrence (forward; backward runs from the last column up):
            T(0:i, i) = -tau_i T(0:i, 0:i) V(:, 0:i)^H v_i,  T(i, i) = tau_i
        with the Gram matrix V^H V formed by one GEMM first. `work` (kb x kb scratch, which the
        cuda backend's inverse needs) is not used here."""
        kb = T.shape[0]
        gram = V.conj().T @ V
        T[...] = 0
        for i in range(kb) if direction == "forward" else range(kb - 1, -1, -1):
            if tau[i] == 0:
                continue
            done = slice(0, i) if direction == "forward" else slice(i + 1, kb)
            T[done, i] = -tau[i] * (T[done, done] @ gram[done, i])
            T[i, i] = tau[i]

    def laset(self, lane, uplo, alpha, beta, B):
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

    def lacpy(self, lane, uplo, src, dst):
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

    def herk(self, lane, uplo, trans, alpha, A, beta, C):
        """The `uplo` triangle of C := alpha op(A) op(A)^H + beta C (op: "N" or "C"), the other
        triangle untouched: BLAS herk (syrk for real dtypes, where ^H is ^T)."""
        if C.size == 0:
            return
        herk, = get_blas_funcs((_HERK[C.dtype.char],), dtype=C.dtype)
        C[...] = herk(alpha, A, beta=beta, c=C, trans="NTC".index(trans), lower=int(uplo == "L"))

    def herk_diagonal_blocks(self, lane, uplo, trans, alpha, A, C, nb, scratch=None):
        """The `uplo` triangles of C's diagonal blocks of nb += alpha op(A) op(A)^H for the
        matching rows ("N") or columns ("C") of A (the cuda backend's batched form; here one
        herk per block)."""
        for start in range(0, C.shape[0], nb):
            end = min(start + nb, C.shape[0])
            part = A[start:end] if trans == "N" else A[:, start:end]
            self.herk(lane, uplo, trans, alpha, part, 1, C[start:end, start:end])

    @staticmethod
    def sub_block(B, r0, r1, c0, c1):
        """Rows r0:r1 x columns c0:c1 of the block B, as a block of its own: a view, no copy and
        no device work (callable while recording or inside a task)."""
        return B[r0:r1, c0:c1]

    # -- host-driven loops on store blocks (gehrd's panel) -------------------------------------
    # A CPU task that calls these leaves no device event behind (engine.py), so each one is
    # complete when it returns: the device tasks after the CPU task start on the data being there.
    def to_host(self, lane, B, out=None) -> np.ndarray:
        """A new F-ordered host array holding the block B, complete on return (on a device
        backend: a copy down and a wait), or `out` (an F-ordered array of B's shape and dtype)
        filled and returned. `lane` is the calling CPU task's lane."""
        if out is None:
            return np.array(B, order="F", copy=True)
        out[...] = B
        return out

    def from_host(self, lane, x, B):
        """The block B := the host array x (B's shape, B's dtype), complete on return (on a
        device backend: a copy up and a wait); x may be reused or freed afterwards."""
        B[...] = x

    @staticmethod
    def replay(lane, recordings: dict, key, record, launch=True):
        """Run record(), work on `lane` only. A device backend records it once per `key` (into
        `recordings`, which the caller keeps while it may replay) and replays the recording
        after that (launch=False: only records it); here it simply runs, when launched."""
        if launch:
            record()

    @staticmethod
    def larfg(lane, x, tau):
        """LAPACK larfg on the column block x (alpha = x[0], the rest below), in place: x :=
        (beta, v[1:]) with H = I - tau v v^H, H^H x = beta e_1; tau (a 1 x 1 block) := tau."""
        larfg, = get_lapack_funcs(("larfg",), dtype=x.dtype)
        n = x.shape[0]
        rest = x[1:, 0] if n > 1 else np.zeros(1, x.dtype)
        beta, v, tau[0, 0] = larfg(n, x[0, 0], rest)
        x[0, 0] = beta
        if n > 1:
            x[1:, 0] = v[:n - 1]

    @staticmethod
    def t_column(lane, t, tau):
        """larft's column i of T: t[0:i] *= -tau, t[i] = tau (t = T[0:i+1, i])."""
        t[:-1] *= -tau[0, 0]
        t[-1] = tau[0, 0]

    def apply_to_host(self, lane, A, X, trans="N", uplo=None, work=None) -> np.ndarray:
        """op(A) X for a host array X (op "N" or "C"), as a new host array, complete on return;
        with `uplo` ("L" or "U") A is Hermitian (symmetric when real) and only that triangle is
        read. `work`: a store block of at least (rows + cols) x k elements, where a device
        backend keeps X and the product (unused here). One pass over A."""
        X = np.asarray(X, dtype=A.dtype)
        if uplo is not None:
            hemm, = get_blas_funcs(("hemm" if A.dtype.kind == "c" else "symm",), dtype=A.dtype)
            return hemm(1, A, X, lower=int(uplo == "L"))
        return np.matmul(_op(A, trans), X)

    def apply(self, lane, A, X, Y, trans="N", uplo=None):
        """Y := op(A) X, in place (the device backends' form of apply_to_host)."""
        Y[...] = self.apply_to_host(lane, A, X, trans, uplo)

    @staticmethod
    def strided_columns(B, first, count, step):
        """Columns first, first + step, ... (count of them) of B: a view."""
        return B[:, first::step][:, :count]

    @staticmethod
    def scale_copy(lane, alpha, src, dst):
        """dst := alpha src (same shape)."""
        np.multiply(src, alpha, out=dst, casting="same_kind")

    @staticmethod
    def keep_on_device(owner, name, array):
        """A vector for later `vector_to_low` calls: here the array itself (a device keeps a
        copy)."""
        return None if array is None else np.array(array)

    @staticmethod
    def vector_to_low(lane, src, dst, scale, permutation=None):
        """dst_ij := (s_{p_i} src_{p_i j}) rounded to dst's precision (cuda/convert.cu's
        vector_to_low); p None: no permutation."""
        rows = slice(None) if permutation is None else permutation
        dst[...] = src[rows] if scale is None else scale[rows][:, None] * src[rows]

    @staticmethod
    def vector_from_low(lane, src, dst, scale):
        """dst_ij := s_i src_ij in dst's precision (s None: ones)."""
        np.multiply(1 if scale is None else scale[:, None], src, out=dst, casting="same_kind")

    @staticmethod
    def butterfly_rows(lane, src, dst, groups, transpose, before=None, after=None):
        """dst := diag(after) op(W) diag(before) src (cuda/butterfly.cu's butterfly_rows), W the
        random butterfly of `groups` (hybridla/butterfly.py), op(W) = W^T when `transpose`;
        None: no scaling. dst may be src."""
        x = src if before is None else before[:, None] * src
        y = apply_groups(groups, x, transpose)
        dst[...] = y if after is None else after[:, None] * y

    # -- mixed precision (lapack/_mixed.py, backend/reduced.py) ---------------------------------
    @staticmethod
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

    @staticmethod
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

    @staticmethod
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

    @staticmethod
    def add_to_diagonal(lane, owner, B, sigma):
        """B's diagonal += sigma (a shifted low-precision Cholesky)."""
        k = np.arange(min(B.shape))
        B[k, k] += sigma

    @staticmethod
    def prepare_reduced(owner, compute, panel_keys=(), leaf_order=0):
        owner.narrowing_overflow = False

    @staticmethod
    def overflowed(owner) -> bool:
        return bool(getattr(owner, "narrowing_overflow", False))

    def gemm_reduced(self, lane, owner, compute, alpha, A, B, beta, C, trans_a="N",
                     trans_b="N"):
        """`gemm` with the operands rounded to `compute` and float32 sums (the emulation of the
        tensor cores: backend/reduced.py)."""
        if C.size == 0:
            return
        rounded_a, rounded_b = round_to(A, compute), round_to(B, compute)
        if not (np.isfinite(rounded_a).all() and np.isfinite(rounded_b).all()):
            owner.narrowing_overflow = True
        self.gemm(lane, alpha, rounded_a, rounded_b, beta, C, trans_a, trans_b)

    @staticmethod
    def round_panel(lane, owner, compute, A, trans, key=None):
        """A HERK's panel rounded once for all its GEMMs (backend/cuda.py's round_panel): here
        the float32 array carrying the rounding, and the side its parts are cut along (`key`,
        the device's buffer name, is not needed: each call returns an array of its own)."""
        rounded = round_to(A, compute)
        if not np.isfinite(rounded).all():
            owner.narrowing_overflow = True
        return rounded, trans == "N"

    def gemm_rounded_panel(self, lane, owner, panel, alpha, first, second, beta, C, trans_a,
                           trans_b):
        """C := alpha op(part first) op(part second) + beta C, parts (i0, i1) of a round_panel
        along its long side: rows for op "N", columns for "C"."""
        rounded, along_rows = panel

        def part(i0, i1):
            return rounded[i0:i1] if along_rows else rounded[:, i0:i1]

        self.gemm(lane, alpha, part(*first), part(*second), beta, C, trans_a, trans_b)

    @staticmethod
    def matrix(m, n, dtype, nb) -> HostMatrix:
        """A new m x n working matrix of its own (the low-precision copy of a mixed solve)."""
        return HostMatrix(np.zeros((m, n), dtype=dtype, order="F"), nb)

    # -- matrices ------------------------------------------------------------------------------
    def host_matrix(self, source: np.ndarray, result: np.ndarray, nb: int) -> HostMatrix:
        """The working matrix for a host-resident input: the result array itself (the host
        backend factors in place), filled from `source` unless they are the same array."""
        if source is not result:
            result[...] = source
        return HostMatrix(result, nb)

    def wrap(self, a: np.ndarray, pivots: np.ndarray | None = None,
             tau: np.ndarray | None = None) -> HostMatrix:
        """An F-ordered host array as a tile store, in place, for the stages after a
        factorization: factors (with their pivots, for getrs; with their Householder scalars,
        for applying or forming Q) or the right-hand side / result they overwrite."""
        A = HostMatrix(a, max(1, min(a.shape)))
        if pivots is not None:
            A.pivots = pivots.astype(np.int32, copy=False)
        if tau is not None:
            A.set_tau(tau)
        return A

    @staticmethod
    def empty(shape, dtype, like=None) -> np.ndarray:
        """A new F-ordered array for a result, where the interface's data lives: host memory
        (`like`, the user's input, says where on a device backend)."""
        return np.empty(shape, dtype=dtype, order="F")


def _part(X, uplo):
    """X with the entries outside the triangle `uplo` ("U" or "L", with the diagonal) zero."""
    return np.triu(X) if uplo == "U" else np.tril(X)


_HERK = {"f": "syrk", "d": "syrk", "F": "herk", "D": "herk"}


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
