"""The host tile store: the working matrix of one factorization in host memory, and the ways a
run gets one (a matrix of its own, the user's array factored in place, existing factors wrapped)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_lapack_funcs

from ..residency import HOST, Residency
from . import memory


class HostMatrix:
    """The working matrix of one factorization in host memory (an F-ordered NumPy array), with
    what its panels produce (LU's pivots, the Householder scalars tau of QR, QL and LQ, per-step
    info) and the workspaces its tasks share."""

    def __init__(self, a: np.ndarray, nb: int, parent: HostMatrix | None = None,
                 owned: bool = False):
        self.a, self.nb = a, nb
        self.streamed = False  # the matrix is where the work happens: nothing to transfer
        self.pin = False
        self.staged = False  # staging slots taken (use_staging): out-of-core's working store
        self._slots: dict | None = None
        self.up_slots = self.down_slots = self.slot_elements = 0
        self.transfer = None
        self._pinned_ranges: list = []  # what pin_host was given (see there)
        # `owned`: the array is the store's own (matrix()), its bytes counted until close
        self._held = a.nbytes if owned else 0
        if self._held:
            memory.hold(self._held)
        self.m, self.n = a.shape
        self.dtype = a.dtype
        self.pivots = np.zeros(min(self.m, self.n), dtype=np.int32)  # global, 0-based
        self.tau = np.zeros(min(self.m, self.n), dtype=self.dtype)  # QR, QL, LQ: reflector i's
        self.nsteps = -(-min(self.m, self.n) // nb)
        self.info = np.zeros(max(self.nsteps, 1), dtype=np.int32)  # per step, panel-local
        # a window's workspaces are its parent's (window(): ordered by the graph's regions)
        self._workspaces: dict = {} if parent is None else parent._workspaces
        # home and workplace at once: every tile is always valid here
        self.residency = Residency(self.m, self.n, nb, home=HOST)

    def track_one_norm(self, arriving=False):
        """||A||_1 of the matrix as it is now, before the factorization overwrites it (LAPACK
        lange's "1"; `one_norm` returns it). A host store never arrives: `arriving` is for
        the contract's sake."""
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

    # -- staging (backend/ops.StagedTileStore): copies between host arrays and this store
    # through slots, as a device store moves them; out-of-core's working store (lapack/_ooc.py)
    # runs the same tasks on both backends
    def use_staging(self, up_slots, down_slots):
        """Take `up_slots` and `down_slots` slots of nb x max(m, n) elements each."""
        self.slot_elements = self.nb * max(self.m, self.n)
        self._slots = {way: [np.empty(self.slot_elements, dtype=self.dtype) for _ in range(count)]
                       for way, count in (("up", up_slots), ("down", down_slots))}
        self.up_slots, self.down_slots, self.staged = up_slots, down_slots, True

    def end_staging(self):
        self._slots, self.staged = None, False

    def _slot(self, direction, slot, rows, cols):
        return self._slots[direction][slot][:rows * cols].reshape((rows, cols), order="F")

    def stage_array(self, lane, slot, source):
        """Up slot `slot` := the host array `source` (any 2-D array)."""
        self._slot("up", slot, *source.shape)[...] = source

    def upload_staged(self, lane, slot, r0, r1, c0, c1):
        self.a[r0:r1, c0:c1] = self._slot("up", slot, r1 - r0, c1 - c0)

    def download_staged(self, lane, slot, r0, r1, c0, c1):
        self._slot("down", slot, r1 - r0, c1 - c0)[...] = self.a[r0:r1, c0:c1]

    def unstage_array(self, lane, slot, target):
        """The host array `target` := down slot `slot`."""
        target[...] = self._slot("down", slot, *target.shape)

    def pin_host(self, lo, hi):
        """Host memory needs no pinning: the direct copies below are plain copies. The ranges
        are kept, and refused as a device's driver refuses them (a range that overlaps one
        pinned already; a copy spanning two ranges, or a pinned and an unpinned one), so that
        CI sees a plan of pieces that would fail on a GPU."""
        if any(lo < end and start < hi for start, end in self._pinned_ranges):
            raise RuntimeError(f"host range [{lo:#x}, {hi:#x}) is already pinned in part "
                               f"(a device's driver: HOST_MEMORY_ALREADY_REGISTERED)")
        self._pinned_ranges.append((lo, hi))
        return True

    def _check_one_range(self, array):
        if array.size == 0:
            return
        first = array.ctypes.data
        last = first + (array.shape[0] - 1) * array.strides[0] + \
            (array.shape[1] - 1) * array.strides[1] + array.itemsize
        touched = [(lo, hi) for lo, hi in self._pinned_ranges if first < hi and lo < last]
        if touched and (len(touched) > 1 or not touched[0][0] <= first < last <= touched[0][1]):
            raise RuntimeError("a direct copy spans two pinned ranges, or a pinned and an "
                               "unpinned one (a device's driver refuses it)")

    def upload_array(self, lane, source, r0, r1, c0, c1):
        """Rows r0:r1 x columns c0:c1 := the host array `source` (their shape)."""
        self._check_one_range(source)
        self.a[r0:r1, c0:c1] = source

    def download_array(self, lane, r0, r1, c0, c1, target):
        """The host array `target` := rows r0:r1 x columns c0:c1."""
        self._check_one_range(target)
        target[...] = self.a[r0:r1, c0:c1]

    def close(self):
        """Give back what the store holds: its array's count when it is its own, the slots."""
        if self._held:
            memory.release(self._held)
            self._held = 0
        self.end_staging()


def matrix(m, n, dtype, nb, settings=None) -> HostMatrix:
    """A new m x n working matrix of its own (the low-precision copy of a mixed solve); the
    host has no device settings."""
    return HostMatrix(np.zeros((m, n), dtype=dtype, order="F"), nb, owned=True)


def host_matrix(source: np.ndarray, result: np.ndarray | None, nb: int, dtype=None,
                settings=None) -> HostMatrix:
    """The working matrix for a host-resident input: the result array itself (the host
    backend factors in place), filled from `source` unless they are the same array; `result`
    None: a new F-ordered array of `dtype` (default source's), rounded from `source`. The host
    has no device settings."""
    if result is None:
        result = np.empty(source.shape, dtype=np.dtype(dtype or source.dtype), order="F")
    if source is not result:
        result[...] = source
    return HostMatrix(result, nb)


def window(A: HostMatrix, r0, r1, c0, c1) -> HostMatrix:
    """A store over rows r0:r1 x columns c0:c1 of A, in place (a view of A's array): results of
    its own (pivots, tau, infos), A's workspaces (backend/ops.StoreOps.window)."""
    return HostMatrix(A.a[r0:r1, c0:c1], A.nb, parent=A)


def wrap(a: np.ndarray, pivots: np.ndarray | None = None,
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


def empty(shape, dtype, like=None, pooled=False) -> np.ndarray:
    """A new F-ordered array for a result, where the interface's data lives: host memory
    (`like`, the user's input, says where on a device backend; so does `pooled`)."""
    return np.empty(shape, dtype=dtype, order="F")
