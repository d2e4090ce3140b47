"""How the workers of a distributed factorization exchange panels: the `Transport` contract, and
the host transport (plain sockets between the worker processes) that runs it on any machine.

A distributed driver (lapack/*_dist.py) records its inter-worker steps as tasks of its local
graph, on a "comm:*" lane, each calling one collective of the transport it was handed:

    broadcast(lane, send, recv, root)   recv[i] := root's send[i] on every rank (root included)
    reduce(lane, send, recv, root)      root's recv[i] := the sum over ranks of send[i]

`send` and `recv` are lists of the backend's blocks (a host ndarray; on a device a DeviceBlock)
or of a store's result vectors (`pivots(store, i0, i1)`, `store.tau_block(t0, t1)`). As with
NCCL, every rank calls the collectives in the same order (the drivers chain their comm tasks),
and a collective on a device lane is enqueued on the lane's stream, not finished, on return.

A failure anywhere must not leave the other workers waiting in a collective for a message
that will never come: `abort(reason)` wakes this rank's waiters and tells every peer, whose
waiting collectives then raise `TransportAborted`; a peer whose connection drops (its process
died) counts as an abort, and no wait lasts longer than `timeout` seconds.

The NCCL transport (scheduler/transport_nccl.py) is imported only where the cuda backend runs.
A worker's transport connects in a thread of its own while its work begins (`Connecting`), and
the work takes it where it first needs it (`connected`).
"""
from __future__ import annotations

import os
import socket
import threading
from multiprocessing.connection import Client, Listener
from typing import Any, Callable, Protocol, Sequence

import numpy as np


class TransportAborted(RuntimeError):
    """A collective gave up: a peer (or this rank) failed, a peer went away, or a wait timed
    out. The worker's own first exception is what the client reports; this one only stops
    the others."""


class Transport(Protocol):
    """The collectives a distributed driver calls (module docstring). rank, size: this
    worker's rank among `size`."""

    rank: int
    size: int

    def broadcast(self, lane: Any, send: Sequence[Any], recv: Sequence[Any],
                  root: int) -> None: ...
    def reduce(self, lane: Any, send: Sequence[Any], recv: Sequence[Any], root: int) -> None: ...
    def pivots(self, store: Any, i0: int, i1: int) -> Any:
        """Entries i0:i1 of the store's pivots, as a buffer a collective can move."""
    def abort(self, reason: str) -> None: ...
    def close(self) -> None: ...


# -- the host transport ------------------------------------------------------------------------
_ABORT, _DATA = "abort", "data"


class HostTransport:
    """The transport between host worker processes: one socket (multiprocessing.connection)
    per pair of ranks, a thread per socket that files arriving messages by (sender, sequence
    number), and collectives that wait for theirs. Sends never block on a peer's progress,
    because the peer's thread always drains its socket; so a rank blocked in one collective
    never holds up another rank's. Made by `connect`."""

    def __init__(self, rank: int, size: int, connections: dict, timeout: float):
        self.rank, self.size, self.timeout = rank, size, timeout
        self._connections = connections  # peer rank -> Connection
        self._send_locks = {peer: threading.Lock() for peer in connections}
        self._inbox: dict = {}  # (sender, sequence) -> payload
        self._arrived = threading.Condition()
        self._sequence = 0
        self._aborted: str | None = None
        self._gone: set = set()  # peers whose connection ended: nothing more comes from them
        self._readers = [threading.Thread(target=self._read, args=(peer, conn), daemon=True,
                                          name=f"hybridla-transport-{rank}<-{peer}")
                         for peer, conn in connections.items()]
        for reader in self._readers:
            reader.start()

    @classmethod
    def connect(cls, rank: int, size: int, exchange: Callable[[Any], list], authkey: bytes,
                timeout: float = 600.0) -> HostTransport:
        """Connect to every peer: `exchange(address)` publishes this rank's listening address
        and returns every rank's; `authkey` (the job's, made by the client) authenticates
        each connection both ways."""
        listener = Listener((_host_address(), 0), authkey=authkey)
        try:
            addresses = exchange(listener.address)
            connections = {}
            # each pair once: the lower rank dials, the higher one accepts; the first message
            # names the dialling rank
            for peer in range(rank):
                conn = Client(addresses[peer], authkey=authkey)
                _no_delay(conn)
                conn.send(rank)
                connections[peer] = conn
            for _ in range(rank + 1, size):
                conn = listener.accept()
                _no_delay(conn)
                connections[conn.recv()] = conn
        finally:
            listener.close()
        return cls(rank, size, connections, timeout)

    # -- collectives ---------------------------------------------------------------------------
    def broadcast(self, lane, send, recv, root):
        sequence = self._next()
        if self.rank == root:
            payload = [np.ascontiguousarray(s) for s in send]
            for peer in self._connections:
                self._send(peer, (_DATA, sequence, payload))
            for source, target in zip(payload, recv):
                if not np.shares_memory(source, target):
                    target[...] = source
        else:
            for source, target in zip(self._wait(root, sequence), recv):
                target[...] = source

    def reduce(self, lane, send, recv, root):
        sequence = self._next()
        if self.rank != root:
            self._send(root, (_DATA, sequence, [np.ascontiguousarray(s) for s in send]))
            return
        total = [np.array(s, copy=True) for s in send]
        for peer in self._connections:
            for acc, part in zip(total, self._wait(peer, sequence)):
                acc += part
        for acc, target in zip(total, recv):
            target[...] = acc

    def pivots(self, store, i0, i1):
        return store.pivots[i0:i1]

    # -- failure -------------------------------------------------------------------------------
    def abort(self, reason: str) -> None:
        """Stop: this rank's waiting collectives raise, and every peer is told (best effort:
        a peer that has gone already cannot be)."""
        with self._arrived:
            if self._aborted is not None:
                return
            self._aborted = f"rank {self.rank}: {reason}"
            self._arrived.notify_all()
        for peer in self._connections:
            try:
                self._send(peer, (_ABORT, None, self._aborted))
            except (OSError, TransportAborted):
                pass

    @property
    def aborted(self) -> str | None:
        return self._aborted

    def close(self) -> None:
        """Shut the sockets down (which also wakes this rank's reader threads, blocked in a
        receive: closing alone would not) and wait for the readers to end."""
        for conn in self._connections.values():
            try:
                with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        for reader in self._readers:
            reader.join()

    # -- internals -----------------------------------------------------------------------------
    def _next(self) -> int:
        # the drivers chain their collectives: one at a time per rank, in the same order on all
        self._sequence += 1
        return self._sequence

    def _send(self, peer, message):
        if self._aborted is not None and message[0] == _DATA:
            raise TransportAborted(self._aborted)
        with self._send_locks[peer]:
            self._connections[peer].send(message)

    def _wait(self, peer, sequence):
        key = (peer, sequence)
        with self._arrived:
            arrived = self._arrived.wait_for(
                lambda: key in self._inbox or self._aborted is not None or peer in self._gone,
                timeout=self.timeout)
            if key in self._inbox:
                return self._inbox.pop(key)
            if not arrived:
                reason = f"no message from rank {peer} in {self.timeout:g} s"
            else:
                reason = self._aborted or f"rank {peer} closed its connection"
        if not arrived:
            self.abort(reason)
        raise TransportAborted(reason)

    def _read(self, peer, conn):
        while True:
            try:
                kind, sequence, payload = conn.recv()
            except (EOFError, OSError):
                # a peer that finished closes its end once it needs nothing more; only waits
                # for a message from it fail (a peer that died mid-run: an abort in effect)
                with self._arrived:
                    self._gone.add(peer)
                    self._arrived.notify_all()
                return
            if kind == _ABORT:
                self._set_aborted(payload)
                continue
            with self._arrived:
                self._inbox[(peer, sequence)] = payload
                self._arrived.notify_all()

    def _set_aborted(self, reason):
        with self._arrived:
            if self._aborted is None:
                self._aborted = reason
            self._arrived.notify_all()


def _no_delay(conn) -> None:
    """Send small messages at once (TCP_NODELAY). With Nagle's algorithm a small message sent
    right after the last one may wait for the peer's delayed acknowledgement: on the CPU
    machine the accepting rank connected 5-8 ms after the dialling one, 37-45 ms in some
    calls, and within 2 ms with this (perf/RESULTS.md, issue 32, stop 49)."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _host_address() -> str:
    """The address peers reach this process at: the one this host uses for outgoing
    connections (a machine's name may resolve to a loopback address only)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks a route
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _conforms(transport: HostTransport) -> Transport:
    """mypy checks here that the host transport satisfies the contract (pyproject's files)."""
    return transport


class Connecting:
    """A worker's transport being connected by `connect()` in a thread of its own, begun at
    once: `get()` waits for it (and raises what connecting raised), `close()` closes it once
    made. At n = 65536 on 2 GPUs the connection took 4-12 ms of a worker's task, and the
    device part's allocation, check and copy 0.026-0.040 s after it, one after the other
    (perf/RESULTS.md, issue 32, stops 56-57)."""

    def __init__(self, connect):
        self._transport, self._error = None, None
        self._thread = threading.Thread(target=self._connect, args=(connect,),
                                        name="hybridla-connect", daemon=True)
        self._thread.start()

    def _connect(self, connect):
        try:
            self._transport = connect()
        except BaseException as exc:  # noqa: BLE001 - raised in the task's thread by get()
            self._error = exc

    def get(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._transport

    def close(self):
        self._thread.join()
        if self._transport is not None:
            self._transport.close()


def connected(transport):
    """The transport itself: `transport`, or what a Connecting one connects (waited for)."""
    return transport.get() if isinstance(transport, Connecting) else transport
