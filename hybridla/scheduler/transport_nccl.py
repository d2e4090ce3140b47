"""The transport between GPU workers: NCCL through nccl4py (NCCL's own Python bindings), with
the host transport beside it for what NCCL does not do: telling the peers of a failure.

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

import numpy as np
import nccl.core as nc

from ..backend.cuda import DeviceBlock
from .transport import Transport, TransportAborted


def unique_id_bytes() -> bytes:
    """A new NCCL unique id, as bytes to send to the workers (made on the client)."""
    return nc.get_unique_id().as_bytes


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
        with ops.active():
            self.comm = nc.Communicator.init(size, rank, nc.UniqueId.from_bytes(nccl_id))
        self._staging: dict = {}  # lane name -> (pointer, bytes): pack buffers, per lane
        self._lock = threading.Lock()
        self._watch = threading.Thread(target=self._abort_on_peer_failure, daemon=True,
                                       name=f"hybridla-nccl-watch-{rank}")
        self._closed = threading.Event()
        self._watch.start()

    # -- collectives ---------------------------------------------------------------------------
    def broadcast(self, lane, send, recv, root):
        self._check()
        with self.ops.active():
            for i, target in enumerate(recv):
                source = send[i] if self.rank == root else target
                packed_send = self._contiguous(lane, source, "send", pack=self.rank == root)
                packed_recv = self._contiguous(lane, target, "recv", pack=False) \
                    if not _same(source, target) else packed_send
                self.comm.broadcast(packed_send, packed_recv, root, stream=lane.handle)
                self._unpack(lane, packed_recv, target)

    def reduce(self, lane, send, recv, root):
        self._check()
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
        with self.ops.active():
            if self.control.aborted is None:
                self.ops.synchronize()  # nothing of ours may still use the communicator
                self.comm.destroy()
            else:
                self._abort_comm()
            for ptr, _ in self._staging.values():
                self.ops.free(ptr)
        self.control.close()

    def _abort_comm(self):
        with self._lock:
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
