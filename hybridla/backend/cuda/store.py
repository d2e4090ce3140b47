"""The cuda backend's tile store: `DeviceMatrix`, the matrix of one factorization on the device
and everything that lives with it (pivots, tau, per-step info, workspaces), and `DeviceBlock`, a
rectangle of it. The store's transfers (the CPU interface's staging, pinning and panel buffers)
are transfers.py's functions, bound here as its methods.

`matrix` and `host_matrix` make stores (the facade binds them); a store keeps the run's
DeviceSettings (`settings`: its memory pool, its host copies' threads).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas, cusolverDn

from .. import _driver
from .. import tournament as _tournament
from ..ops import DeviceSettings
from ..residency import DEVICE, HOST, Residency
from . import transfers
from .lu import _FusedPanelSlots
from .runtime import _PREFIX, _STATS_STRIP, _STATS_THREADS
from .transfers import HOST_TRANSFERS


class DeviceBlock:
    """A rectangle of a column-major device matrix: a pointer, its shape and leading dimension."""

    __slots__ = ("ptr", "rows", "cols", "ld", "dtype")

    def __init__(self, ptr, rows, cols, ld, dtype):
        self.ptr, self.rows, self.cols, self.ld, self.dtype = ptr, rows, cols, ld, dtype

    @property
    def size(self):
        return self.rows * self.cols

    @property
    def shape(self):
        return (self.rows, self.cols)

    def sub(self, r0, r1, c0, c1):
        """The rectangle rows r0:r1 x columns c0:c1 of this block."""
        return DeviceBlock(self.ptr + (r0 + c0 * self.ld) * self.dtype.itemsize, r1 - r0, c1 - c0,
                           self.ld, self.dtype)


class DeviceMatrix:
    """The tile store of one factorization: the device copy of the matrix (ours, or the user's
    device array in place), the pivots on both sides, per-step info, the cuSOLVER workspace and
    the pinned buffers for CPU panels. It is the only owner of device memory; `close` frees it all.

    For a host-resident matrix it also moves data: blocks up before they are first needed (block
    columns, or block rows for LQ), finished blocks down while the factorization goes on
    (`upload_block`, `download_block`; staged through pinned slots: `stage_block`,
    `upload_staged`, `download_staged`, `unstage_block`). `settings`: the run's DeviceSettings
    (None: the defaults), which its allocations and host copies follow.
    """

    def __init__(self, backend, m, n, dtype, nb, *, device_ptr=None, ld=None, host_source=None,
                 host_result=None, settings: DeviceSettings | None = None, parent=None):
        self.backend, self.m, self.n, self.dtype, self.nb = backend, m, n, np.dtype(dtype), nb
        self.settings = DeviceSettings() if settings is None else settings
        self.itemsize = self.dtype.itemsize
        self._allocations = []
        # a window (`window`) allocates through its parent, which frees everything, and shares
        # its workspaces, scratch blocks, pinned panel buffers and cuSOLVER workspace
        self._parent = parent
        # CPU interface: the F-ordered host arrays the matrix comes from and the factors go to
        # (the same array when factoring in place); None for a device-resident matrix
        self.host_source, self.host_result = host_source, host_result
        self.streamed = host_result is not None
        # where each tile lives (the transfer plan keeps it): home the user's host array for the
        # CPU interface, else device memory
        self.residency = Residency(m, n, nb, home=HOST if host_source is not None else DEVICE)
        if device_ptr is None:
            self.ld = max(1, -(-m // 32) * 32)  # 32-element columns keep cuBLAS loads aligned
            device_ptr = self._alloc(self.ld * max(n, 1) * self.itemsize)
        else:
            self.ld = ld
        self.ptr = int(device_ptr)
        k = min(m, n)
        self.nsteps = -(-k // nb) if k else 0
        self.pivots = np.zeros(k, dtype=np.int32)
        self.pivots_dev = self._alloc(max(k, 1) * 4)
        # each step's interchanges as row moves (prepare_interchanges): step s's count and up
        # to 2 w pairs from int s + 4 k0; `moves` maps (k0, k1) to its address once prepared
        self.moves_ints = max(self.nsteps + 4 * k, 1)
        self.moves_dev = self._alloc(self.moves_ints * 4)
        self.moves = {}
        self.info_dev = self._alloc(max(self.nsteps, 1) * 4)
        # the Householder scalars of QR, QL and LQ (host copy complete after `finish_tau`)
        self.tau = np.zeros(k, dtype=self.dtype)
        self.tau_dev = self._alloc(max(k, 1) * self.itemsize)
        self._pinned_tau = None
        self._tau_from_host = {}  # step -> (t0, t1): a CPU panel's tau, to go up with its panel
        drv.memset_d32(self.info_dev, 0, max(self.nsteps, 1))
        self.info_host = np.zeros(max(self.nsteps, 1), dtype=np.int32)
        self.info_on_host = np.zeros(max(self.nsteps, 1), dtype=bool)
        # cuSOLVER's workspace for the largest (first) panel, allocated now: cuMemAlloc during
        # the run could synchronize the device
        lane = backend.lane("gpu:panel")
        self._workspace_elems = getattr(cusolverDn, _PREFIX[self.dtype] + "getrf_buffer_size")(
            lane.solver, m, min(nb, max(k, 1)), self.ptr, self.ld) if k else 0
        if parent is not None and parent._workspace_elems >= self._workspace_elems:
            self._workspace_elems, self.solver_workspace = (parent._workspace_elems,
                                                            parent.solver_workspace)
        else:
            self.solver_workspace = self._alloc(max(self._workspace_elems, 1) * self.itemsize)
        self.panel_slots = None if not k else parent.panel_slots if \
            parent is not None and parent.panel_slots is not None else \
            _FusedPanelSlots(self, backend.multiprocessors)
        self._pinned_panels = {} if parent is None else parent._pinned_panels
        self._extra_workspaces = {} if parent is None else parent._extra_workspaces
        self._pinned_pivots = None  # allocated with the first CPU panel (pinning costs time)
        self._registered = []  # host page ranges pinned by this store, unpinned by `close`
        self.pin = False  # pin the host matrix as it uploads (CPU interface)
        self.pin_ranges, self.pin_cuts = [], []
        self.staged = False  # or copy it through the backend's pinned slots (`use_staging`)
        self._slots = None
        self.up_slots = self.down_slots = self.slot_elements = 0  # `use_staging` sets them
        self._transposed_slots = {}  # up slot -> whether it holds its block transposed
        self._transposition_buffers = {}  # lane name -> device buffer (transfers.upload_staged)
        self._column_sums = None  # `track_one_norm`: ones (m), column maxima (n), sums (n)

    # -- memory --------------------------------------------------------------------------------
    def _alloc(self, nbytes):
        if self._parent is not None:
            return self._parent._alloc(nbytes)
        allocation = self.backend.alloc(nbytes, self.settings.memory_pool)
        self._allocations.append(allocation)
        return allocation

    def close(self):
        """Free every device allocation and pinned buffer of this factorization (also after a
        failure), here, with the context current: PyCUDA frees an allocation that the garbage
        collector reaches in a thread without its context current never ("could not be cleaned
        up"), and a user's thread has none outside our calls."""
        shared_panels = () if self._parent is not None else self._pinned_panels.values()
        with self.backend.active():
            for allocation in self._allocations:
                self.backend.free(allocation)
            for pointer in self._registered:
                _driver.host_unregister(pointer)
            for buffer in (*shared_panels, self._pinned_tau, self._pinned_pivots):
                free = getattr(getattr(buffer, "base", None), "free", None)
                if free is not None:  # pagelocked_empty's array: its base is the allocation
                    free()
        self._allocations.clear()
        self._registered.clear()
        if self._parent is None:  # a window's are its parent's, freed with it
            self._pinned_panels.clear()
        self._pinned_tau = self._pinned_pivots = None
        self.end_staging()
        # The run's tasks and lanes hold this store in reference cycles, which live until the
        # garbage collector's next full pass: the user's arrays must not live as long (an
        # n x n each; tests/test_trust.py).
        self.host_source = self.host_result = None

    # -- the input's 1-norm (the condition estimate's ||A||_1) ---------------------------------
    def track_one_norm(self, arriving=False):
        """Sum |a_ij| down each column of the input as it is (before any step overwrites it):
        now for a matrix already on the device, as each block arrives for a streamed one or
        one whose blocks the run copies in (`arriving`: backend arrive_columns; one more read
        of the block on its copy stream, which the factorization's first use of it waits for
        anyway). `one_norm` then gives max_j sum_i |a_ij| (LAPACK lange's "1")."""
        sums = self._alloc((self.m + 2 * self.n) * 8)
        self._column_sums = int(sums)
        lane = self.backend.lane("gpu:update")
        with lane:
            ones = DeviceBlock(self._column_sums, self.m, 1, max(self.m, 1), np.dtype(np.float64))
            self.backend.laset(lane, "A", 1, 1, ones)
            _driver.memset_d32_async(self._column_sums + self.m * 8, 0, 4 * self.n, lane.handle)
            if not (self.streamed or arriving):
                self._sum_columns(lane, 0, self.m, 0, self.n)
            else:  # the arrivals are summed on the copy stream: it must see the zeros first
                _driver.stream_synchronize(lane.handle)

    def _sum_columns(self, lane, r0, r1, c0, c1):
        if self._column_sums is None or r1 <= r0 or c1 <= c0:
            return
        ones, maxima, sums = (self._column_sums, self._column_sums + self.m * 8,
                              self._column_sums + (self.m + self.n) * 8)
        rows, cols = r1 - r0, c1 - c0
        self.backend.kernels.launch(
            f"col_stats_{_PREFIX[self.dtype]}",
            (-(-rows // _STATS_THREADS), -(-cols // _STATS_STRIP)), (_STATS_THREADS,),
            lane.handle, ctypes.c_void_p(self.ptr + (r0 + c0 * self.ld) * self.itemsize),
            ctypes.c_longlong(self.ld), ctypes.c_int(rows), ctypes.c_int(cols),
            ctypes.c_void_p(ones + r0 * 8), ctypes.c_void_p(maxima + c0 * 8),
            ctypes.c_void_p(sums + c0 * 8))

    def one_norm(self) -> float:
        """||A||_1 of the input, after `track_one_norm` (waits for the sums: a named host wait,
        the caller is about to use the number)."""
        out = np.empty(self.n)
        if self.n:
            lane = self.backend.lane("gpu:update")
            with lane:
                cublas.get_vector_async(self.n, 8, self._column_sums + (self.m + self.n) * 8, 1,
                                        out.ctypes.data, 1, lane.handle)
                _driver.stream_synchronize(lane.handle)
        return float(out.max()) if self.n else 0.0

    # -- transfers of a host-resident matrix and CPU panels (transfers.py) ----------------------
    stage_array = transfers.stage_array
    pin_host = transfers.pin_host
    upload_array = transfers.upload_array
    download_array = transfers.download_array
    unstage_array = transfers.unstage_array
    plan_pin_pieces = transfers.plan_pin_pieces
    pin_piece = transfers.pin_piece
    use_staging = transfers.use_staging
    end_staging = transfers.end_staging
    upload_in_background = transfers.upload_in_background
    transfer = property(transfers.transfer)
    stage_block = transfers.stage_block
    upload_staged = transfers.upload_staged
    download_staged = transfers.download_staged
    unstage_block = transfers.unstage_block
    upload_block = transfers.upload_block
    download_rows = transfers.download_rows
    download_block = transfers.download_block
    pinned_panel = transfers.pinned_panel
    panel_to_host = transfers.panel_to_host
    panel_to_device = transfers.panel_to_device

    # -- blocks --------------------------------------------------------------------------------
    def block(self, r0, r1, c0, c1):
        return DeviceBlock(self.ptr + (r0 + c0 * self.ld) * self.itemsize,
                           r1 - r0, c1 - c0, self.ld, self.dtype)

    def tournament_tree(self, lane, chunk, fan):
        """tslu.cu's tree for panels of up to this store's rows, its leaves `chunk` rows and its
        nodes `fan` children: (candidates, counts, arrivals, moves) pointers, each node's slot
        at the same index in the first three. The arrival counters are zeroed on `lane` when
        first made."""
        nodes, level = 0, -(-self.m // chunk)
        while True:
            nodes += level
            if level == 1:
                break
            level = -(-level // fan)
        width = _tournament.TOURNAMENT_WIDTH
        name = f"tournament {chunk} {fan}"
        fresh = name not in self._extra_workspaces
        base = self.extra_workspace(name, (nodes * (width + 2) + 4 * width + 1) * 4)
        counts, arrivals = base + nodes * width * 4, base + nodes * (width + 1) * 4
        if fresh:
            _driver.memset_d32_async(arrivals, 0, nodes, lane.handle)
        return base, counts, arrivals, arrivals + nodes * 4

    def extra_workspace(self, name, nbytes):
        """A device workspace kept for this store's lifetime (first use allocates it)."""
        current = self._extra_workspaces.get(name)
        if current is None or current[1] < nbytes:
            current = (self._alloc(max(nbytes, 1)), nbytes)
            self._extra_workspaces[name] = current
        return int(current[0])

    def _buffer(self, name, elements):
        """A device buffer of at least `elements`, kept under `name` for the store's lifetime."""
        return self.extra_workspace(name, elements * self.itemsize)

    def workspace(self, name, rows, cols, dtype=None):
        """A rows x cols block of the workspace `name`, which lives as long as the store: the
        first use allocates it, later uses share it (algorithms order the reuse through a graph
        Region of the same name; ask for the largest size first, while recording). Its
        elements are the store's dtype, or `dtype`."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        return DeviceBlock(self.extra_workspace("workspace " + name,
                                                rows * cols * dtype.itemsize),
                           rows, cols, max(rows, 1), dtype)

    def scratch(self, lane, rows, cols):
        """A temporary rows x cols block for one operation of a task on `lane`: one buffer per
        lane, which the lane's stream orders. Sized once for the largest use (nb x max(m, n)),
        so that no allocation happens while a run is under way after the first."""
        need = max(rows * cols, self.nb * max(self.m, self.n))
        return DeviceBlock(self._buffer("scratch " + lane.name, need), rows, cols, max(rows, 1),
                           self.dtype)

    # -- results -------------------------------------------------------------------------------
    def set_pivots(self, pivots):
        """Pivots of existing factors (0-based global), for getrs."""
        self.pivots[:] = pivots
        self.backend.context.push()
        try:
            drv.memcpy_htod(self.pivots_dev, self.pivots)
        finally:
            drv.Context.pop()

    def host_panel(self, step, r0, c0, c1, r1=None):
        """Where a CPU panel is factored: the pinned buffer `panel_to_host` downloaded it to."""
        return self.pinned_panel(step, (self.m if r1 is None else r1) - r0, c1 - c0)

    def set_panel_result(self, step, c0, c1, pivots, info, tau=None):
        """A CPU panel's results: pivots of entries c0:c1 or Householder scalars of reflectors
        c0:c1 (`tau`), uploaded with the panel by `panel_to_device`, and its info."""
        if tau is not None:
            self.tau[c0:c1] = tau
            self._tau_from_host[step] = (c0, c1)
        if pivots is not None:
            self.pivots[c0:c1] = pivots
            self.moves.pop((c0, c1), None)  # none prepared from these pivots: laswp replays them
        self.info_host[step] = info
        self.info_on_host[step] = True

    def finish_tau(self):
        """The Householder scalars and per-step info on the host (`finish`, for QR, QL, LQ)."""
        self.backend.context.push()
        try:
            if self.tau.size:
                drv.memcpy_dtoh(self.tau, self.tau_dev)  # CPU panels' tau went up too
        finally:
            drv.Context.pop()
        return self.tau.copy(), self.finish()[1]

    def set_tau(self, tau):
        """The Householder scalars of existing factors (to apply or form their Q)."""
        tau = np.ascontiguousarray(tau, dtype=self.dtype)
        self.tau = tau.copy()
        if tau.size:
            self.backend.context.push()
            try:
                self.tau_dev = self._alloc(tau.size * self.itemsize)
                drv.memcpy_htod(self.tau_dev, tau)
            finally:
                drv.Context.pop()

    def tau_block(self, t0, t1):
        """The scalars of reflectors t0:t1 on the device, as `triangular_factor` takes them."""
        return DeviceBlock(int(self.tau_dev) + t0 * self.itemsize, t1 - t0, 1, max(t1 - t0, 1),
                           self.dtype)

    def read_block(self, r0, r1, c0, c1):
        """A copy of a block in host memory (a host wait: for small results after a run)."""
        out = np.empty((r1 - r0, c1 - c0), dtype=self.dtype, order="F")
        if out.size:
            self._sync_copy(self.block(r0, r1, c0, c1), out, self.ld)
        return out

    def diagonal(self):
        """The main diagonal (min(m, n) entries), in host memory: one strided copy."""
        k = min(self.m, self.n)
        out = np.empty((1, k), dtype=self.dtype, order="F")
        if k:
            self._sync_copy(self.block(0, 1, 0, k), out, self.ld + 1)
        return out[0]

    def _sync_copy(self, block, out, pitch_elements):
        copy = drv.Memcpy2D()
        copy.set_src_device(block.ptr)
        copy.src_pitch = pitch_elements * self.itemsize
        copy.set_dst_host(out.reshape(-1, order="F"))
        copy.dst_pitch = out.shape[0] * self.itemsize
        copy.width_in_bytes = out.shape[0] * self.itemsize
        copy.height = out.shape[1]
        self.backend.context.push()
        try:
            self.backend.synchronize()
            copy(aligned=False)
        finally:
            drv.Context.pop()

    def finish(self):
        """Pivots and per-step info on the host. A host wait, at the one point where the caller
        needs them: every task has been enqueued by then."""
        self.backend.context.push()
        try:
            if self.pivots.size:
                drv.memcpy_dtoh(self.pivots, self.pivots_dev)  # CPU panels' pivots went up too
            infos = np.empty(max(self.nsteps, 1), np.int32)
            drv.memcpy_dtoh(infos, self.info_dev)
        finally:
            drv.Context.pop()
        on_device = ~self.info_on_host
        self.info_host[on_device] = infos[on_device]
        return self.pivots, self.info_host


# -- making stores (the facade's matrix, host_matrix) -------------------------------------------
def matrix(backend, m, n, dtype, nb, settings: DeviceSettings | None = None,
           **kw) -> DeviceMatrix:
    """A new m x n tile store on the device (uninitialized), or over `device_ptr` (with `ld`);
    `host_source` / `host_result` for the CPU interface (host_matrix). `settings`: the run's
    DeviceSettings (None: the defaults)."""
    backend.context.push()
    try:
        return DeviceMatrix(backend, m, n, dtype, nb, settings=settings, **kw)
    finally:
        drv.Context.pop()


def window(backend, A: DeviceMatrix, r0, r1, c0, c1) -> DeviceMatrix:
    """A store over rows r0:r1 x columns c0:c1 of store A, in place (backend/ops.StoreOps.window):
    pivots, tau, infos and row moves of its own; A's workspaces, scratch blocks (a lane's,
    ordered by its stream), pinned panel buffers, fused-panel slots and cuSOLVER workspace
    shared; everything it allocates is A's, freed by A's close."""
    return backend.matrix(r1 - r0, c1 - c0, A.dtype, A.nb, settings=A.settings,
                          device_ptr=A.block(r0, r1, c0, c1).ptr, ld=A.ld, parent=A)


def host_matrix(backend, source: np.ndarray, result: np.ndarray, nb: int, dtype=None,
                settings: DeviceSettings | None = None) -> DeviceMatrix:
    """The device working matrix for a host-resident input (CPU interface): streamed up from
    `source`, the factors streamed down into `result` (F-ordered, possibly the same array).
    A narrower `dtype` than the source's (a mixed solver's low-precision copy, `result`
    None) is rounded on the host: by the threads that stage it, or at once when small. How it
    travels is the run's `settings` (host_transfer, pin_min_bytes; None: the defaults)."""
    settings = DeviceSettings() if settings is None else settings
    dtype = np.dtype(dtype or source.dtype)
    transfer = settings.host_transfer
    if transfer not in HOST_TRANSFERS:
        raise ValueError(f"device.host_transfer must be one of {HOST_TRANSFERS}; got "
                         f"{transfer!r}")
    # Only matrices of pages of their own are pinned: a small array lives in the heap,
    # sharing pages with other objects, and pinning those pages made copies fail ("invalid
    # argument") in the tests on the H200. Below the threshold the pageable copies take
    # milliseconds anyway, so small matrices are not staged either.
    large = source.nbytes >= int(settings.pin_min_bytes)
    if dtype != source.dtype:  # only staging rounds as it copies
        transfer = "staged"
        if not large:
            source = np.asfortranarray(source, dtype=dtype)
    A = backend.matrix(*source.shape, dtype, nb, host_source=source, host_result=result,
                       settings=settings)
    try:
        if large and transfer == "staged":
            A.use_staging(up_slots=4, down_slots=4)
    except BaseException:
        A.close()
        raise
    A.pin = large and transfer == "register"
    return A
