"""Dask distributed plumbing of the multi-worker factorizations: the client, the workers, the
matrix's columns placed on them, one long-lived task per worker, results and failures back.

A Dask distributed task costs milliseconds (2.3 ms batched, 10.8 ms a round trip, measured
on the 2-GPU machine), our engine's task 50-150 us: so Dask only places the data, starts ONE
task per worker (`run_job`) and brings back what it returns or raised. Inside it the worker
connects to its peers (HostTransport: sockets, their addresses exchanged through distributed
Variables; on GPUs NCCL over it, a new communicator's unique id made by rank 0 and sent over
the sockets), runs the driver on its engine, and closes the transport whatever happens; a
failing worker aborts the transport so that the others' collectives raise instead of waiting
(scheduler/transport.py).
"""
from __future__ import annotations

import contextlib
import operator
import secrets
import threading
import time
import uuid

import numpy as np

from .. import config as _config
from ..backend import get_backend
from ..backend.host.transfers import ColumnBlocks
from .trace import Trace
from .transport import Connecting, HostTransport, TransportAborted

# how long a collective (or the rendezvous) waits for a peer before it gives up: a peer that
# died without a word is noticed by its dropped connection long before
TIMEOUT_S = 600.0


def find_client(client=None):
    """The client to run on: `client`, else the active one (distributed.default_client)."""
    if client is not None:
        return client
    from distributed import default_client
    try:
        return default_client()
    except ValueError:
        raise ValueError("no Dask distributed client: start one (distributed.Client(cluster)) "
                         "or pass client=") from None


def workers(client) -> list[str]:
    """The workers' addresses, in rank order (sorted: the same order on every call). Asked of
    the scheduler (Client.nthreads): Client.scheduler_info returns the client's cached copy,
    which its periodic refresh may have just replaced by totals without workers (CI saw "no
    workers" so, with two running)."""
    addresses = sorted(client.nthreads())
    if not addresses:
        raise RuntimeError("the Dask cluster has no workers")
    return addresses


def workers_per_host(addresses) -> list[int]:
    """For each worker (by address, in rank order), how many of the workers run on its host
    (the same host part of the address): the processes that stage host memory at once there
    (plan.CostModel.sharing_host)."""
    from collections import Counter

    from distributed.comm.addressing import get_address_host
    hosts = [get_address_host(address) for address in addresses]
    counts = Counter(hosts)
    return [counts[host] for host in hosts]


def is_dask_array(x) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a dependency
        return False
    return isinstance(x, da.Array)


def place(client, addresses, a, owned, dtype, nb, stack=True, futures=None):
    """Each rank's local matrix: its block columns of nb side by side, F-ordered, as a Future
    held by that worker. owned[rank] lists the indices of those block columns in local order,
    the layout's. (Named by their block columns, not their columns: lists of the 65536 global
    columns as Python ints cost the client 12-15 ms a call at n = 65536 on the 2-GPU machine,
    perf/RESULTS.md, issue 32, stop 61.) A dask array is first cut
    into block columns of nb (Dask's rechunk: nothing moves where its chunks are already
    so), then each worker stacks its block columns into one F-ordered array, the chunks
    fetched by Dask from where they live (one copy of each: Dask's fancy indexing a[:, cols]
    and a rechunk to one chunk took 2.8-4.6 s for 512 MB on the CPU machine and gave a
    C-ordered part to copy once more); a NumPy array is scattered from the client, one piece
    per worker. Also returns, per rank, whether its piece is certainly a new array, this
    call's alone, which the worker may write the factors over (lapack/_dist.on_worker): a
    scattered piece is, and so is a stacked one. With `stack` False a dask array's part is
    the list of its block columns as they lie, not copied (a device worker streams them up
    from there: lapack/_dist.on_worker), and not the worker's to write over: for an array
    persisted in block columns (block_columns), the list of their Futures, which Dask brings
    to the worker's task as it starts (a task that makes the list cost 31 ms of the client's
    time at 128 block columns on the 2-GPU machine, perf/RESULTS.md, issue 32, stop 49).
    `futures`: those Futures, in block order, where the caller has them (block_columns'),
    so that they are not looked up again."""
    parts, private = [], []
    blocks = held = None
    if is_dask_array(a):
        import dask
        a = a.rechunk((a.shape[0], nb))
        if not stack:
            held = futures if futures is not None else _block_futures(a)
        if held is None:
            blocks = a.to_delayed().ravel()
    for address, mine in zip(addresses, owned):
        if held is not None:
            parts.append([held[j] for j in mine])
            private.append(False)
        elif blocks is not None:
            part = dask.delayed(_stack_columns)([blocks[j] for j in mine], a.shape[0],
                                                dtype) if stack else \
                dask.delayed(list)([blocks[j] for j in mine])
            parts.append(client.compute(part, workers=[address], allow_other_workers=False))
            private.append(stack)
        else:
            cols = np.concatenate([np.arange(j * nb, min((j + 1) * nb, a.shape[1]))
                                   for j in mine] or [np.zeros(0, dtype=np.intp)])
            parts.append(client.scatter(np.asfortranarray(a[:, cols], dtype=dtype),
                                        workers=[address], hash=False))
            private.append(True)
    return parts, private


def block_columns(client, addresses, a, nb):
    """The dask array `a` cut into block columns of nb and persisted where Dask computes them
    (a chunk that is one already stays where it is), the block columns' Futures in order,
    and the rank (index in `addresses`) of the worker holding each block column, -1 where
    none of them does: (the persisted array, the Futures, the ranks)."""
    from distributed import wait

    blocks = a.rechunk((a.shape[0], nb))
    futures = _block_futures(blocks)
    if futures is None:  # persisting what is already computed costs a round trip
        blocks = client.persist(blocks)
        wait(blocks)
        futures = _block_futures(blocks)
    who = client.who_has(futures)
    rank = {address: r for r, address in enumerate(addresses)}
    holders = []
    for future in futures:
        held = [rank[w] for w in who.get(future.key, ()) if w in rank]
        holders.append(held[0] if held else -1)
    return blocks, futures, holders


def _block_futures(a):
    """The finished Futures of the dask array `a`'s chunks in order (one row of block
    columns: its chunks' keys row by row), or None where one is not (not persisted)."""
    from distributed import futures_of
    finished = {f.key: f for f in futures_of(a) if f.status == "finished"}
    keys = [key for row in a.__dask_keys__() for key in row]
    if not all(key in finished for key in keys):
        return None
    return [finished[key] for key in keys]


def _stack_columns(blocks, m, dtype):
    """The block columns `blocks` (m rows each) side by side in one new F-ordered array of
    `dtype`."""
    if not blocks:  # a rank without columns (n below nb times the workers)
        return np.empty((m, 0), dtype=dtype, order="F")
    return ColumnBlocks(blocks).stacked(dtype)


def run_job(client, addresses, work, parts, job, backend="host"):
    """Start `work(ops, transport, rank, part, job)` once on each worker, on its own part;
    wait for all. Returns (one Future per rank of what it returned, left on its worker; one
    Future per rank of what it returned besides its part, `small`, for small_results). A
    failure on any raises here, the first worker's own exception rather than the others'
    TransportAborted, after every task has ended. The small results' tasks are submitted with
    the jobs, so that they run as each job ends instead of a round trip after the last."""
    from distributed import wait

    key = uuid.uuid4().hex
    authkey = secrets.token_bytes(16)
    group = tuple(addresses)  # the worker set: what a kept NCCL communicator is kept for
    with jobs_in_turn(backend):
        futures = [client.submit(_long_lived, work, rank, len(addresses), key, authkey,
                                 group, backend, part, job,
                                 key=f"hybridla-{job['routine']}-{key}-{rank}",
                                 workers=[address], allow_other_workers=False, pure=False)
                   for rank, (address, part) in enumerate(zip(addresses, parts))]
        small = [client.submit(_without_local, f, pure=False) for f in futures]
        wait(small)  # each ends once its job has (an error included)
        wait(futures)
    failures = [f.exception() for f in futures if f.status == "error"]
    if failures:
        client.cancel(futures + small)
        own = [e for e in failures if not isinstance(e, TransportAborted)]
        raise (own or failures)[0]
    return futures, small


def _long_lived(work, rank, size, key, authkey, group, backend, part, job):
    """The one task of a worker: connect, work, close. The transport connects in a thread of
    its own from the task's start (`Connecting`), so that the work's first stretch (a device
    part's allocation, its check and its copy: lapack/_dist_parts.device_part) runs while the
    peers' addresses go through the scheduler; `work` gets the Connecting and takes the
    transport from it (`connected`) where it first needs it. What `work` returns (a dict)
    gets the task's "phases": its start (this worker's wall clock), the seconds connecting
    the transport ("rendezvous_s" of them: the host transport's, its peers' addresses
    exchanged through the scheduler) and the seconds of `work`."""
    from distributed import Variable, get_client

    started = time.time()
    ops = get_backend(backend)
    client = get_client()  # the worker's, which a Variable finds only in a task's own thread
    variables = [Variable(f"hybridla-{key}-{r}", client=client) for r in range(size)]
    times = {}

    def exchange(address):
        variables[rank].set(address)
        return [v.get(timeout=TIMEOUT_S) for v in variables]

    def connect():
        transport = HostTransport.connect(rank, size, exchange, authkey, TIMEOUT_S)
        times["rendezvous"] = time.time()
        if backend == "cuda":  # over the host transport, which then carries its aborts
            from .transport_nccl import NcclTransport
            try:
                transport = NcclTransport.connect(ops, rank, size, transport, group)
            except BaseException as exc:
                transport.abort(f"{exc.__class__.__name__}: {exc}")
                transport.close()
                raise
        times["connected"] = time.time()
        return transport

    connection = Connecting(connect)
    try:
        with _device_call(ops, backend):
            result = work(ops, connection, rank, part, job)
        connection.get()  # a work that never needed it: connected all the same
        result["phases"] = {"started": started, "connect_s": times["connected"] - started,
                            "rendezvous_s": times["rendezvous"] - started,
                            "work_s": time.time() - started}
        return result
    except BaseException as exc:
        # the others must not wait for what this rank will never send: connected first, if
        # the work failed before it needed the transport, so that they hear of it
        try:
            transport = connection.get()
        except BaseException:
            raise exc from None
        transport.abort(f"{exc.__class__.__name__}: {exc}")
        raise
    finally:
        connection.close()
        variables[rank].delete()


# the GPU jobs this process starts, one at a time (jobs_in_turn)
_GPU_JOBS = threading.Lock()


def jobs_in_turn(backend):
    """Held while a job runs on the workers: GPU jobs started from this process take turns,
    as one-GPU calls do. Each worker's share of one is a call on its device (_device_call),
    so two at once could each hold one worker's device and wait for the other's (and their
    collectives would share the kept NCCL communicator); host jobs run side by side."""
    return _GPU_JOBS if backend == "cuda" else contextlib.nullcontext()


def _device_call(ops, backend):
    """A worker's share of a distributed call as one call on its device, as a one-GPU call
    is (backend.call): after the other calls on the device in this process, the pool
    trimmed to device.pool_max_bytes when it ends. Without it a worker's pool kept the
    call's memory (the matrix alone 57.6 GB per GPU at n = 120000 on 2 GPUs), and the next
    call's store took 0.43-0.68 s to make in 5 of 6 calls, a full Python collection inside
    it at the same moment on both workers: the one PyCUDA makes when a device allocation
    fails, before it tries again (perf/RESULTS.md, issue 32, stop 54)."""
    if backend != "cuda":
        return contextlib.nullcontext()
    return ops.call(_config.get("device.pool_max_bytes"))


def release(client) -> dict:
    """On every worker of `client`: let go of what hybridla keeps there between calls, the
    NCCL communicators (transport_nccl.release_kept). Returns {worker address: how many}."""
    return client.run(_release_here)


def _release_here() -> int:
    import sys
    nccl = sys.modules.get("hybridla.scheduler.transport_nccl")  # never imported: none kept
    return 0 if nccl is None else nccl.release_kept(get_backend("cuda"))


def local_parts(client, futures):
    """Each rank's factors, a Future on its worker (nothing moves)."""
    return [client.submit(operator.getitem, f, "local", pure=False) for f in futures]


def small_results(client, small):
    """What each rank returned besides its factors (results, trace), on the client, from
    run_job's `small` Futures."""
    return client.gather(small)


def _without_local(result):
    return {k: v for k, v in result.items() if k != "local"}


def clock_offsets(client, addresses) -> list[float]:
    """Each worker's wall clock minus the client's, estimated from a round trip (half the
    round trip is assumed each way): what lines their traces up on one time axis."""
    offsets = []
    for address in addresses:
        sent = time.time()
        theirs = client.run(time.time, workers=[address])[address]
        back = time.time()
        offsets.append(theirs - (sent + back) / 2)
    return offsets


def merged_trace(results, offsets, metadata=None) -> Trace:
    """One trace of every worker's run: rank r's lanes as "w<r>/<lane>", its times moved onto
    the client's clock (its wall origin less its clock offset), time 0 the earliest origin."""
    origins = [r["wall_origin"] - offset for r, offset in zip(results, offsets)]
    start = min(o for o in origins if o is not None)
    records = []
    for rank, (result, origin) in enumerate(zip(results, origins)):
        shift = origin - start
        for record in result["trace"]:
            records.append(dict(record, lane=f"w{rank}/{record['lane']}",
                                start=record["start"] + shift, end=record["end"] + shift))
    return Trace(records, metadata)
