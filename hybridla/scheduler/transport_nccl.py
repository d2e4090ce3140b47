"""The transport between GPU workers: NCCL through nccl4py (NCCL's own Python bindings), with
the host transport beside it for what NCCL does not do: telling the peers of a failure.

The communicator is made in a thread of its own, and warmed up there by one broadcast the size
of a panel, while the worker records its graph: on the 2-GPU machine the first broadcast of a
new communicator took 0.25 s (NCCL connects its peers at their first collective), on the
critical path of step 0 (perf/RESULTS.md, issue 32). A collective waits for that thread.

Imported only where the cuda backend runs (scheduler/cluster.py, for backend "cuda"); nccl4py,
PyCUDA and the cuda backend's blocks are needed only here. The nccl4py calls are those of the
sketch verified on the 2-GPU machine (shared/device/example_nccl_dask.py): the unique id made
on the client (`nc.get_unique_id()`, its `.as_bytes` passed to the workers),
`nc.UniqueId.from_bytes`, `nc.Communicator.init(nranks, rank, uid)`,
`comm.broadcast(send, recv, root, stream=<raw stream>)`, `comm.destroy()`; and, from
nccl4py's Communicator, `comm.reduce(send, recv, nc.SUM, root, stream=...)` and
`comm.abort()`. Buffers go to NCCL as objects with __cuda_array_interface__ (nccl4py's
NcclBuffer resolves them); complex ones as their real pairs (NCCL has no complex type; a
sum of pairs is the complex sum).

A collective runs on the comm lane's stream, after the lane waited (on the device) for the
events of the tasks it depends on, as every device task does: no host wait. A block that is
not contiguous (a panel of a store whose leading dimension exceeds its rows) is packed into a
contiguous buffer of the transport's on the same stream first (and unpacked after), so that
exactly the panel's bytes cross the link.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import nccl.core as nc

from ..backend.cuda import DeviceBlock
from .transport import Transport, TransportAborted


def unique_id_bytes() -> bytes:
    """A new NCCL unique id, as bytes to send to the workers (made on the client)."""
    return nc.get_unique_id().as_bytes


# the warm-up broadcast's size: NCCL picks its protocol by size, and a panel (m x nb float64)
# is hundreds of MB; 64 MiB takes the same (simple) protocol as those
WARM_UP_BYTES = 64 << 20

# how long a collective waits for the communicator to be made (the peers meet in NCCL's init)
SETUP_TIMEOUT_S = 600.0

# NCCL has no complex type: complex buffers travel as twice as many reals
_AS_REAL = {np.dtype(np.complex64): np.dtype(np.float32),
            np.dtype(np.complex128): np.dtype(np.float64)}


class _Buffer:
    """A contiguous device buffer (pointer, element count, NumPy dtype) as NCCL takes it."""

    def __init__(self, ptr, count, dtype):
        dtype = np.dtype(dtype)
        if dtype in _AS_REAL:
            dtype, count = _AS_REAL[dtype], 2 * count
        self.__cuda_array_interface__ = {"shape": (int(count),), "typestr": dtype.str,
                                         "data": (int(ptr), False), "version": 3,
                                         "strides": None, "stream": None}
        self.block = None  # the staging block it is, when packed (NcclTransport._contiguous)


class NcclTransport:
    """Collectives over NCCL between the ranks' GPUs (scheduler/transport.Transport).
    `control`: the HostTransport between the same ranks, which carries aborts."""

    def __init__(self, ops, rank, size, nccl_id, control):
        self.ops, self.rank, self.size, self.control = ops, rank, size, control
        self.comm = None
        self.phases: dict = {}  # seconds: "nccl_init_s", "nccl_warm_up_s", "nccl_wait_s"
        self._staging: dict = {}  # lane name -> (pointer, bytes): pack buffers, per lane
        self._lock = threading.Lock()
        self._aborting = False  # set by _abort_comm: a communicator made after it is aborted
        self._setup_error: BaseException | None = None
        self._setup = threading.Thread(target=self._make_communicator, args=(nccl_id,),
                                       daemon=True, name=f"hybridla-nccl-setup-{rank}")
        self._setup.start()
        self._watch = threading.Thread(target=self._abort_on_peer_failure, daemon=True,
                                       name=f"hybridla-nccl-watch-{rank}")
        self._closed = threading.Event()
        self._watch.start()

    def _make_communicator(self, nccl_id):
        """The setup thread: the communicator, then one broadcast of WARM_UP_BYTES from rank 0,
        waited for (every rank runs the same, so the peers' first collective meets here)."""
        started = time.perf_counter()
        try:
            with self.ops.active():
                comm = nc.Communicator.init(self.size, self.rank, nc.UniqueId.from_bytes(nccl_id))
                with self._lock:
                    self.comm = comm
                    if self._aborting:
                        self._abort_comm_locked()
                        return
                made = time.perf_counter()
                self.phases["nccl_init_s"] = round(made - started, 6)
                lane = self.ops.lane("comm:setup")
                buffer = self.ops.alloc(WARM_UP_BYTES)
                try:
                    with lane:
                        comm.broadcast(_Buffer(buffer, WARM_UP_BYTES, np.uint8),
                                       _Buffer(buffer, WARM_UP_BYTES, np.uint8), 0,
                                       stream=lane.handle)
                        lane.stream.synchronize()
                finally:
                    self.ops.free(buffer)
                self.phases["nccl_warm_up_s"] = round(time.perf_counter() - made, 6)
        except BaseException as exc:  # noqa: BLE001 - raised by the first collective
            self._setup_error = exc

    def _ready(self):
        """Wait for the setup thread (its error raised here), then for nothing aborted."""
        if self._setup.is_alive():
            began = time.perf_counter()
            self._setup.join(SETUP_TIMEOUT_S)
            self.phases["nccl_wait_s"] = round(self.phases.get("nccl_wait_s", 0.0) +
                                               time.perf_counter() - began, 6)
            if self._setup.is_alive():
                raise TransportAborted(f"the NCCL communicator was not made in "
                                       f"{SETUP_TIMEOUT_S:.0f} s")
        if self._setup_error is not None:
            self._check()  # an abort explains it best
            raise TransportAborted(f"making the NCCL communicator failed: "
                                   f"{self._setup_error}") from self._setup_error
        self._check()

    # -- collectives ---------------------------------------------------------------------------
    def broadcast(self, lane, send, recv, root):
        self._ready()
        with self.ops.active():
            for i, target in enumerate(recv):
                source = send[i] if self.rank == root else target
                packed_send = self._contiguous(lane, source, "send", pack=self.rank == root)
                packed_recv = self._contiguous(lane, target, "recv", pack=False) \
                    if not _same(source, target) else packed_send
                self.comm.broadcast(packed_send, packed_recv, root, stream=lane.handle)
                self._unpack(lane, packed_recv, target)

    def reduce(self, lane, send, recv, root):
        self._ready()
        with self.ops.active():
            for source, target in zip(send, recv):
                packed_send = self._contiguous(lane, source, "send", pack=True)
                packed_recv = self._contiguous(lane, target, "recv", pack=False) \
                    if not _same(source, target) else packed_send
                self.comm.reduce(packed_send, packed_recv, nc.SUM, root, stream=lane.handle)
                if self.rank == root:
                    self._unpack(lane, packed_recv, target)

    def pivots(self, store, i0, i1):
        return DeviceBlock(int(store.pivots_dev) + 4 * i0, i1 - i0, 1, max(i1 - i0, 1),
                           np.dtype(np.int32))

    # -- failure -------------------------------------------------------------------------------
    def abort(self, reason: str) -> None:
        """Tell the peers (host transport), then abort NCCL here: an operation in flight on
        this rank's streams ends (ncclCommAbort)."""
        self.control.abort(reason)
        self._abort_comm()

    def close(self) -> None:
        self._closed.set()
        self._setup.join(SETUP_TIMEOUT_S if self.control.aborted is None else 10.0)
        with self.ops.active():
            if self.control.aborted is None and self.comm is not None:
                self.ops.synchronize()  # nothing of ours may still use the communicator
                self.comm.destroy()
                self.comm = None
            else:
                self._abort_comm()
            for ptr, _ in self._staging.values():
                self.ops.free(ptr)
        self.control.close()

    def _abort_comm(self):
        with self._lock:
            self._abort_comm_locked()

    def _abort_comm_locked(self):
        self._aborting = True  # a communicator still being made is aborted once it is
        if self.comm is not None:
            self.comm.abort()
            self.comm = None

    def _abort_on_peer_failure(self):
        """A peer's abort arrives on the host transport: abort NCCL too, so that a
        collective waiting on the device for that peer ends instead of hanging."""
        while not self._closed.wait(0.05):
            if self.control.aborted is not None:
                self._abort_comm()
                return

    def _check(self):
        if self.control.aborted is not None or self.comm is None:
            raise TransportAborted(self.control.aborted or "the communicator was aborted")

    # -- contiguous buffers --------------------------------------------------------------------
    def _contiguous(self, lane, block, role, pack):
        """`block` as a contiguous NCCL buffer: itself where it is, else the lane's staging
        buffer for `role` (filled from the block on the lane's stream when `pack`)."""
        rows, cols = block.shape
        if cols == 1 or block.ld == rows:
            return _Buffer(block.ptr, rows * cols, block.dtype)
        nbytes = rows * cols * block.dtype.itemsize
        key = (lane.name, role)
        ptr, size = self._staging.get(key, (None, 0))
        if size < nbytes:
            if ptr is not None:
                self.ops.synchronize()  # the old buffer may still be in use on the lane
                self.ops.free(ptr)
            ptr = self.ops.alloc(nbytes)
            self._staging[key] = (ptr, nbytes)
        staged = DeviceBlock(int(ptr), rows, cols, rows, block.dtype)
        if pack:
            self.ops.lacpy(lane, "A", block, staged)
        buffer = _Buffer(int(ptr), rows * cols, block.dtype)
        buffer.block = staged
        return buffer

    def _unpack(self, lane, buffer, target):
        staged = getattr(buffer, "block", None)
        if staged is not None and not _same(staged, target):
            self.ops.lacpy(lane, "A", staged, target)


def _same(a, b) -> bool:
    return int(a.ptr) == int(b.ptr) and a.shape == b.shape


def _conforms(transport: NcclTransport) -> Transport:
    """mypy checks here that the NCCL transport satisfies the contract."""
    return transport
