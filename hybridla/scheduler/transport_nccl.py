"""The transport between GPU workers: NCCL through nccl4py (NCCL's own Python bindings), with
the host transport beside it for what NCCL does not do: telling the peers of a failure.

A communicator outlives its call: made (and warmed up by one broadcast of WARM_UP_BYTES, as
NCCL connects its peers at their first collective) on a worker set's first call, it is kept in
each worker process and taken again by the next call on the same workers, once every rank has
said over the host transport that it holds the same one (`connect`); else every rank makes a
new one. On the 2-GPU machine a new communicator cost 0.05-0.1 s to make, its first broadcast
0.17-0.25 s, and more to destroy, each call (perf/RESULTS.md, issue 32). A call that fails
aborts its communicator instead of keeping it.

Imported only where the cuda backend runs (scheduler/cluster.py, for backend "cuda"); nccl4py,
PyCUDA and the cuda backend's blocks are needed only here. The nccl4py calls are those of the
sketch verified on the 2-GPU machine (shared/device/example_nccl_dask.py): the unique id made
by one rank (`nc.get_unique_id()`, its `.as_bytes` sent to the others; here rank 0, over the
host transport, so the client needs no NCCL),
`nc.UniqueId.from_bytes`, `nc.Communicator.init(nranks, rank, uid)`,
`comm.broadcast(send, recv, root, stream=<raw stream>)`, `comm.destroy()`; and, from
nccl4py's Communicator, `comm.reduce(send, recv, nc.SUM, root, stream=...)` and
`comm.abort()`. Buffers go to NCCL as objects with __cuda_array_interface__ (nccl4py's
NcclBuffer resolves them); complex ones as their real pairs (NCCL has no complex type; a
sum of pairs is the complex sum).

A collective runs on the comm lane's stream, after the lane waited (on the device) for the
events of the tasks it depends on, as every device task does: no host wait. On one machine a
receiver's broadcast is gated (`_Gates`, distributed.nccl_gate, on by default):
its stream waits, without a kernel, for a flag that the root's stream writes just before
the root's own broadcast. NCCL's kernel otherwise starts as soon as the receiver's slot is
free and holds its thread blocks (so SMs) spinning until the owner's panel is done, 8-17 ms
a step beside the update's gemms in the Cholesky at n = 65536 on 2 H100s; in
perf/probes/probe_nccl_gate.py such a wait of 19 ms cost the gemms beside it 2.1 ms. With
the flags in GPU memory the gates made the distributed LU, Cholesky and QR 1.5-3.5% faster;
with them in host memory, as now, the Cholesky's engine gained 0-1% (perf/RESULTS.md, issue
32, stops 59-60). A block that is not contiguous (a panel of a store whose leading
dimension exceeds its rows) is packed into a contiguous buffer of the transport's on the same
stream first (and unpacked after), so that exactly the panel's bytes cross the link.
"""
from __future__ import annotations

import mmap
import os
import socket
import threading
import uuid
import warnings

import numpy as np
import nccl.core as nc

from .. import config as _config
from ..backend import _driver
from ..backend.cuda import DeviceBlock
from .transport import Transport, TransportAborted


def unique_id_bytes() -> bytes:
    """A new NCCL unique id, as bytes to send to the other ranks (made by rank 0 when a
    communicator must be made: making one starts NCCL's bootstrap in the process)."""
    return nc.get_unique_id().as_bytes


# an id's length, known without asking NCCL for one (an empty id is not made by NCCL)
_ID_BYTES = len(nc.get_unique_id(empty=True).as_bytes)


# how long an abort waits for a collective's enqueue under way on another thread to return
# before it aborts anyway: NCCL wants one thread at a time on a communicator, but an enqueue
# blocked behind a collective that waits for a failed peer (NCCL's queue of operations full)
# returns only once the communicator is aborted
ABORT_WAIT_S = 1.0
# the warm-up broadcast of a new communicator: NCCL picks its protocol by size, and a panel
# (m x nb float64) is hundreds of MB; 64 MiB takes the same (simple) protocol as those
WARM_UP_BYTES = 64 << 20
# the communicators kept between calls: ((the workers' addresses, distributed.nccl_max_ctas,
# distributed.nccl_gate), rank) -> (communicator, the unique id it was made from, its _Gates or
# None); a call takes its rank's out while it runs
_kept: dict = {}
_kept_lock = threading.Lock()

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
    """Collectives over NCCL between the ranks' GPUs (scheduler/transport.Transport), on `comm`
    (made from unique id `comm_id`). `control`: the HostTransport between the same ranks,
    which carries aborts. Made by `connect`."""

    def __init__(self, ops, rank, size, comm, comm_id, control, group, gates=None):
        self.ops, self.rank, self.size, self.control = ops, rank, size, control
        self.comm, self._comm_id, self._group = comm, comm_id, group
        self._gates = gates
        self._staging: dict = {}  # lane name -> (pointer, bytes): pack buffers, per lane
        self._lock = threading.Lock()
        self._enqueue = threading.Lock()  # held while a thread is in an NCCL call on comm
        self._watch = threading.Thread(target=self._abort_on_peer_failure, daemon=True,
                                       name=f"hybridla-nccl-watch-{rank}")
        self._closed = threading.Event()
        self._watch.start()

    @classmethod
    def connect(cls, ops, rank, size, control, group):
        """This rank's transport among the workers `group` (their addresses, in rank order):
        the communicator kept from the group's last call where every rank kept the same one,
        else one made now and warmed up, from an id rank 0 makes and sends over `control`."""
        max_ctas = _config.get("distributed.nccl_max_ctas")
        gate = bool(_config.get("distributed.nccl_gate", False))
        # one made with other CTAs or gates is not taken again
        group = (tuple(group), max_ctas, gate)
        with _kept_lock:
            kept = _kept.pop((group, rank), None)
        if _all_hold(control, size, None if kept is None else kept[1], _ID_BYTES):
            return cls(ops, rank, size, kept[0], kept[1], control, group, kept[2])
        new_id = np.frombuffer(unique_id_bytes(), np.uint8).copy() if rank == 0 else \
            np.zeros(_ID_BYTES, np.uint8)
        control.broadcast(None, [new_id], [new_id], 0)
        nccl_id = new_id.tobytes()
        with ops.active():
            if kept is not None:  # a peer has another one, or none: this one is done with
                kept[0].abort()
                if kept[2] is not None:
                    kept[2].free()
            comm = nc.Communicator.init(
                size, rank, nc.UniqueId.from_bytes(nccl_id),
                config=None if max_ctas is None else nc.NCCLConfig(max_ctas=int(max_ctas)))
            gates = _Gates.made(rank, size, control) if gate else None
            transport = cls(ops, rank, size, comm, nccl_id, control, group, gates)
            try:
                transport._warm_up()
            except BaseException:
                transport._closed.set()
                transport._abort_comm()
                raise
        return transport

    def _warm_up(self):
        """One broadcast of WARM_UP_BYTES from rank 0, waited for: NCCL connects the peers at
        their first collective, which would otherwise be step 0's panel broadcast."""
        lane = self.ops.lane("comm:setup")
        buffer = self.ops.alloc(WARM_UP_BYTES)
        try:
            with lane:
                whole = _Buffer(buffer, WARM_UP_BYTES, np.uint8)
                self._call("broadcast", whole, whole, 0, stream=lane.handle)
                lane.stream.synchronize()
        finally:
            self.ops.free(buffer)

    # -- collectives ---------------------------------------------------------------------------
    def broadcast(self, lane, send, recv, root):
        self._check()
        with self.ops.active():
            for i, target in enumerate(recv):
                source = send[i] if self.rank == root else target
                packed_send = self._contiguous(lane, source, "send", pack=self.rank == root)
                packed_recv = self._contiguous(lane, target, "recv", pack=False) \
                    if not _same(source, target) else packed_send
                if self._gates is not None:
                    self._gates.before_broadcast(lane.handle, root)
                self._call("broadcast", packed_send, packed_recv, root, stream=lane.handle)
                self._unpack(lane, packed_recv, target)

    def reduce(self, lane, send, recv, root):
        self._check()
        with self.ops.active():
            for source, target in zip(send, recv):
                packed_send = self._contiguous(lane, source, "send", pack=True)
                packed_recv = self._contiguous(lane, target, "recv", pack=False) \
                    if not _same(source, target) else packed_send
                self._call("reduce", packed_send, packed_recv, nc.SUM, root,
                           stream=lane.handle)
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
        """End this call's use of the communicator: kept for the group's next call where
        nothing was aborted (and no other call of the group's kept one meanwhile), else
        aborted."""
        self._closed.set()
        with self.ops.active():
            if self.control.aborted is None:
                self.ops.synchronize()  # nothing of ours may still use the communicator
                with self._lock, _kept_lock:
                    if self.comm is not None and (self._group, self.rank) not in _kept:
                        _kept[(self._group, self.rank)] = (self.comm, self._comm_id,
                                                           self._gates)
                        self.comm, self._gates = None, None
            if self._gates is not None and self.control.aborted is None:
                self._gates.free()  # not kept: no call of ours writes to them any more
                self._gates = None
            self._abort_comm()
            for ptr, _ in self._staging.values():
                self.ops.free(ptr)
        self.control.close()

    def _call(self, operation, *args, **kwargs):
        """comm.<operation>(*args, **kwargs), the only NCCL call on comm meanwhile (NCCL's
        thread safety: one thread at a time on a communicator; an abort waits, _abort_comm);
        TransportAborted where the communicator was aborted before it."""
        with self._enqueue:
            comm = self.comm
            if comm is None:
                raise TransportAborted(self.control.aborted or "the communicator was aborted")
            getattr(comm, operation)(*args, **kwargs)

    def _abort_comm(self):
        """Abort comm (ncclCommAbort: this rank's collectives in flight end), once. It waits up
        to ABORT_WAIT_S for an NCCL call under way on another thread (_call) to return, so as
        not to abort beside it; one that has not returned by then is blocked on the device
        (behind a collective waiting for a failed peer) and only the abort frees it."""
        if self._gates is not None:  # a gate whose root will not write must not hold us
            self._gates.release()
        entered = self._enqueue.acquire(timeout=ABORT_WAIT_S)
        try:
            with self._lock:
                if self.comm is not None:
                    self.comm.abort()
                    self.comm = None
        finally:
            if entered:
                self._enqueue.release()

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


def release_kept(ops) -> int:
    """Abort every communicator this process keeps (`connect`): their GPU memory and proxy
    threads go; the next call on those workers makes new ones. Returns how many there were.
    (Aborted, not destroyed: destroying is collective in NCCL, and the peers may already have
    let theirs go.)"""
    with _kept_lock:
        kept = list(_kept.values())
        _kept.clear()
    if kept:
        with ops.active():
            for comm, _, gates in kept:
                comm.abort()
                if gates is not None:
                    gates.free()
    return len(kept)


class _Gates:
    """The device-side gates of a communicator's broadcasts (module docstring). The flags are
    32-bit words in one page of host memory that every rank maps (a file in /dev/shm, so
    only ranks of one machine gate), registered for its GPU: word (p, r) is receiver p's
    flag of root r, written only by rank r (one writer, its writes in one stream's order).
    Broadcast number s (counted alike on every rank): the root's stream writes s into its
    word on every peer, then broadcasts; a receiver's stream waits until its word of that
    root reaches s, then broadcasts.

    Host memory rather than the GPU's: a failed call opens this rank's gates by a plain
    store from the host (`release`), no stream involved. With the flags in device memory,
    opened by a memset on a new stream, the GPU test of a worker's failure hung in
    ncclCommAbort (2 x H100, stop 59); the likely cause, not confirmed: a new stream may
    share a hardware queue with a stream blocked at a gate, so the memset waits behind
    it. A failed call's page stays mapped and registered for good (`release`)."""

    RELEASED = 1 << 30  # past any count a gate waits for (the comparison is cyclic)
    DIRECTORY = "/dev/shm"
    # released gates, held for the process's life: their page must stay mapped while it is
    # registered, and dropping the last reference would unmap it (Python's mmap closes when
    # collected). Unmapped but registered, its address came back for the next call's page and
    # cuMemHostRegister refused it (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 2 x H100, stop 60)
    _released: list = []

    def __init__(self, rank, size, mapping, words, device):
        self.rank, self.size = rank, size
        self._mapping, self.words, self.device = mapping, words, device  # the page here,
        self.count = 0  # its words, its device address
        self.released = False

    @classmethod
    def made(cls, rank, size, control):
        """This rank's gates, or None where the ranks are on several machines (quietly) or
        some rank could not map the page (no /dev/shm, the driver refused it: a warning on
        each rank): asked of all ranks over the host transport, so that either every rank
        gates or none does. In the current context."""
        nbytes = -(-4 * size * size // mmap.PAGESIZE) * mmap.PAGESIZE
        path = os.path.join(cls.DIRECTORY, f"hybridla-gates-{uuid.uuid4().hex}")
        if rank == 0:
            try:
                with open(path, "wb") as page:
                    page.truncate(nbytes)
            except OSError:
                path = ""
        record = np.zeros(320, np.uint8)  # this machine's name, then the page's file
        named = socket.gethostname().encode()[:64].ljust(64, b"\0") + path.encode()[:256]
        record[:len(named)] = np.frombuffer(named, np.uint8)
        host = record[:64].copy()
        try:
            control.broadcast(None, [record], [record], 0)
            path = bytes(record[64:]).rstrip(b"\0").decode()
            one_machine = _every_rank(control, size, np.array_equal(record[:64], host))
            gates, why = cls._mapped(rank, size, path, nbytes) if path and one_machine else \
                (None, "no page was made")
            everywhere = _every_rank(control, size, gates is not None)
        finally:  # every rank has mapped the page or given up, or a peer failed
            if rank == 0 and path:
                os.unlink(path)
        if not everywhere and one_machine:  # workers on several machines never gate: no news
            warnings.warn(f"distributed.nccl_gate: rank {rank}'s broadcasts are not gated ("
                          f"{why or 'a peer could not map the page'})", RuntimeWarning,
                          stacklevel=2)
            if gates is not None:
                gates.free()
            return None
        return gates

    @classmethod
    def _mapped(cls, rank, size, path, nbytes):
        """(The gates over the page in file `path`, mapped here and registered for the GPU,
        None); (None, why not) where either fails."""
        try:
            with open(path, "r+b") as page:
                mapping = mmap.mmap(page.fileno(), nbytes)
        except OSError as exc:
            return None, f"{path}: {exc}"
        words = np.frombuffer(mapping, np.uint32)
        try:
            return cls(rank, size, mapping, words,
                       _driver.host_register_mapped(words.ctypes.data, nbytes)), None
        except _driver.CudaDriverError as exc:
            del words  # the mapping closes only once no array views it
            mapping.close()
            return None, str(exc)

    def before_broadcast(self, stream, root):
        """Enqueue on `stream` this rank's side of the next broadcast's gate."""
        self.count += 1
        if root == self.rank:
            for peer in range(self.size):
                if peer != root:
                    _driver.stream_write_value32(stream, self._word(peer, root), self.count)
        else:
            _driver.stream_wait_value32(stream, self._word(self.rank, root), self.count)

    def _word(self, receiver, root):
        return self.device + 4 * (receiver * self.size + root)

    def release(self):
        """Open every gate of this rank, now and to come (a failed call: a root may never
        write), from the host; the page then stays mapped and registered for the process's
        life (`_released`), since a stream may still wait on it or write to it."""
        row = slice(self.rank * self.size, (self.rank + 1) * self.size)
        self.words[row] = (self.count + self.RELEASED) & 0xFFFFFFFF
        if not self.released:
            self.released = True
            _Gates._released.append(self)  # one page per failed call, never given back

    def free(self):
        """Unmap the page here: once no stream of this rank uses it (a kept communicator's
        call ended synchronized), unless released."""
        if self.released:
            return
        _driver.host_unregister(self.words.ctypes.data)
        self.words = None
        self._mapping.close()


def _all_hold(control, size, comm_id, id_bytes) -> bool:
    """Whether every rank holds a kept communicator with the same id (`comm_id`: this rank's,
    or None; ids are `id_bytes` long), asked over the host transport: rank 0's id to all, a
    count of the ranks that hold it back to rank 0, its verdict to all."""
    mine = np.frombuffer(comm_id, np.uint8) if comm_id is not None else \
        np.zeros(id_bytes, np.uint8)
    root_id = mine.copy()
    control.broadcast(None, [mine], [root_id], 0)
    return _every_rank(control, size, comm_id is not None and np.array_equal(mine, root_id))


def _every_rank(control, size, mine: bool) -> bool:
    """Whether `mine` holds on every rank, asked over the host transport: a count back to
    rank 0, its verdict to all (so that every rank takes the same way)."""
    holding = np.array([int(mine)])
    count = np.zeros(1, holding.dtype)
    control.reduce(None, [holding], [count], 0)
    control.broadcast(None, [count], [count], 0)
    return int(count[0]) == size


def _same(a, b) -> bool:
    return int(a.ptr) == int(b.ptr) and a.shape == b.shape


def _conforms(transport: NcclTransport) -> Transport:
    """mypy checks here that the NCCL transport satisfies the contract."""
    return transport
