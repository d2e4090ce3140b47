"""The multi-worker factorizations (hybridla.distributed) on a Dask cluster: a LocalCluster of two
host worker processes here (one module-scoped cluster for the file), two GPU workers under
``-m cuda`` where two GPUs are visible. Accuracy as LAPACK's testers measure it (THRESH 30),
against scipy; sizes not multiples of the block size, so that the last block column is ragged
and the panels' pivots cross the owners' block boundaries; NumPy and dask arrays in and out;
a singular matrix, a matrix that is not positive definite, and a worker that fails.
"""
from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import threading
import time
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import dask  # noqa: E402
import hybridla.config  # noqa: E402
import hybridla.distributed as hd  # noqa: E402
from hybridla.lapack import _dist, _dist_parts  # noqa: E402
from hybridla.scheduler.transport import HostTransport, TransportAborted  # noqa: E402

from _lapack_checks import (DTYPES, factorization_ratio, getrf_ratio,  # noqa: E402
                            least_squares_ratio, lstsq_forward_ratio, matrix_with_condition,
                            orthogonality_ratio, potrf_ratio, random_matrix, reflectors_product,
                            solve_backward_error)

THRESH = 30.0  # LAPACK's testers' threshold
NB = 16        # small blocks: several per worker and a ragged last one at these sizes
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def client():
    """Two host worker processes, a few threads each: the CI cluster."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _input(a, kind):
    return da.from_array(a, chunks=(37, 23)[:a.ndim]) if kind == "dask" else a


def _value(x):
    return x.compute() if isinstance(x, da.Array) else x


def _hermitian(n, dtype, rng):
    a = random_matrix(n, n, dtype, rng)
    h = a @ a.conj().T + n * np.eye(n, dtype=dtype)
    return ((h + h.conj().T) / 2).astype(dtype)


def _run_options(client):
    return dict(client=client, backend="host", nb=NB)


# -- LU --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("shape", [(101, 101), (120, 53), (53, 120)],
                         ids=["square", "tall", "wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_factor_ratio(client, dtype, shape, kind, rng):
    a = random_matrix(*shape, dtype, rng)
    lu, piv = hd.lu_factor(_input(a, kind), **_run_options(client))
    assert isinstance(lu, da.Array if kind == "dask" else np.ndarray)
    lu = _value(lu)
    assert lu.dtype == np.dtype(dtype) and lu.shape == shape
    assert getrf_ratio(a, lu, piv) < THRESH


def test_lu_pivots_are_lapacks_and_cross_owners(client, rng):
    """The same interchanges as LAPACK's getrf (randn, float64: no near-ties), among them rows
    of other workers' block rows: a panel's pivot search spans every row, whoever owns the
    columns."""
    a = random_matrix(150, 150, np.float64, rng)
    lu, piv = hd.lu_factor(a, **_run_options(client))
    _, piv_ref, _ = scipy.linalg.lapack.dgetrf(a)
    np.testing.assert_array_equal(piv, piv_ref)
    assert np.any(piv // NB != np.arange(150) // NB)  # pivots from beyond the panel's block
    assert getrf_ratio(a, lu, piv) < THRESH


def test_inputs_are_left_as_they_were(client, rng):
    """The workers write the factors over their parts only where those are the call's own:
    a persisted dask array held whole by one rank (one block column) and the NumPy array stay
    as they were."""
    x = random_matrix(30, 30, np.float64, rng)
    original = x.copy()
    persisted = client.persist(da.from_array(x, chunks=x.shape))
    lu, piv = hd.lu_factor(persisted, client=client, backend="host", nb=64)
    assert getrf_ratio(original, lu.compute(), piv) < THRESH
    np.testing.assert_array_equal(persisted.compute(), original)
    hd.lu_factor(x, client=client, backend="host", nb=64)
    np.testing.assert_array_equal(x, original)


def test_block_columns_given_as_they_lie_are_stacked_by_a_host_worker(client, rng, monkeypatch):
    """What a device worker gets from a dask array, its block columns as Dask holds them
    (cluster.place with stack=False): a host worker stacks them and factors the copy (the
    persisted input stays as it was), and a NaN in them is still refused."""
    from hybridla import _dist_common
    layout = _dist_common._layout
    monkeypatch.setattr(_dist_common, "_layout",
                        lambda *args, **kw: layout(*args, **dict(kw, stack=False)))
    x = random_matrix(101, 101, np.float64, rng)
    persisted = client.persist(da.from_array(x, chunks=(101, NB)))
    lu, piv = hd.lu_factor(persisted, **_run_options(client))
    assert getrf_ratio(x, _value(lu), piv) < THRESH
    np.testing.assert_array_equal(persisted.compute(), x)
    x[50, 60] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hd.lu_factor(da.from_array(x, chunks=(101, NB)), **_run_options(client))


def test_unstacked_parts_are_the_persisted_blocks_futures(client, rng):
    """cluster.place with stack=False on an array persisted in block columns: each rank's part
    is the list of its blocks' own Futures (no task to make it), in block order, and a
    worker's task handed it gets the blocks themselves."""
    from distributed import Future

    from hybridla.scheduler import cluster
    x = random_matrix(40, 50, np.float64, rng)
    addresses = cluster.workers(client)
    blocks, futures, _ = cluster.block_columns(client, addresses,
                                               da.from_array(x, chunks=(40, 7)), 8)
    columns = [[c for c in range(50) if (c // 8) % 2 == rank] for rank in range(2)]
    owned = [[j for j in range(7) if j % 2 == rank] for rank in range(2)]
    parts, private = cluster.place(client, addresses, blocks, owned, np.float64, 8,
                                   stack=False)
    assert [[f.key for f in part] for part in parts] == \
        [[f.key for f in part] for part in cluster.place(
            client, addresses, blocks, owned, np.float64, 8, stack=False,
            futures=futures)[0]]
    assert private == [False, False]
    keys = blocks.__dask_keys__()[0]
    for rank, part in enumerate(parts):
        assert all(isinstance(f, Future) for f in part)
        assert [f.key for f in part] == [keys[j] for j in range(rank, len(keys), 2)]
        got = client.submit(np.hstack, part, workers=[addresses[rank]]).result()
        np.testing.assert_array_equal(got, x[:, columns[rank]])


def test_a_resolution_is_asked_once_then_taken_from_the_cache():
    """nb and look-ahead are asked of the first worker once per set of arguments; a later
    call takes them from the cache, with the entries that have its rank 0 check them."""
    from hybridla import _dist_common

    class Asked:
        def __init__(self):
            self.calls = 0

        def submit(self, fn, *args, **kw):
            self.calls += 1
            return type("Done", (), {"result": lambda self: (32, 1)})()

    client = Asked()
    arguments = ("tcp://w0", "host", 100, 100, np.float64, "lu", 32, None)
    _dist_common._resolutions.clear()
    assert _dist_common._resolution(client, *arguments, cached=True) == ((32, 1), {})
    assert _dist_common._resolution(client, *arguments, cached=True) == \
        ((32, 1), {"resolved_from": (32, None)})
    assert client.calls == 1
    assert _dist_common._resolution(client, *arguments, cached=False) == ((32, 1), {})
    assert client.calls == 2
    # parts on the GPUs resolve apart (their table entries may differ: _dist.table_routine)
    assert _dist_common._resolution(client, *arguments, cached=True, device=True) == \
        ((32, 1), {})
    assert client.calls == 3
    unhashable = arguments[:6] + ([32], None)
    _dist_common._resolution(client, *unhashable, cached=True)
    _dist_common._resolution(client, *unhashable, cached=True)
    assert client.calls == 5


@pytest.mark.parametrize("routine", ["lu_factor", "lu_solve"])
def test_a_stale_cached_resolution_is_resolved_again(client, routine, rng):
    """A cached resolution that the first worker's configuration no longer gives (here the
    cache altered: a look-ahead the worker would not choose) fails the first attempt on
    rank 0; the call runs again, resolving anew, and the cache holds the new answer."""
    from hybridla import _dist_common
    x = random_matrix(96, 96, np.float64, rng)
    lu, piv = hd.lu_factor(x, **_run_options(client))
    b = rng.standard_normal(96)
    key = next(k for k in _dist_common._resolutions if k[2:4] == (96, 96) and k[5] == "lu")
    right = _dist_common._resolutions[key]
    _dist_common._resolutions[key] = (right[0], right[1] + 1)
    if routine == "lu_factor":
        lu, piv = hd.lu_factor(x, **_run_options(client))
        assert getrf_ratio(x, lu, piv) < THRESH
    else:
        xs = hd.lu_solve((lu, piv), b, **_run_options(client))
        np.testing.assert_allclose(x @ xs, b, rtol=1e-8, atol=1e-8)
    assert _dist_common._resolutions[key] == right


def test_lu_singular_warns_with_lapacks_info(client, rng):
    a = random_matrix(90, 90, np.float64, rng)
    a[:, 37] = 0  # U(38, 38) is exactly zero (scipy: info 38)
    _, _, info = scipy.linalg.lapack.dgetrf(a)
    with pytest.warns(scipy.linalg.LinAlgWarning, match=f"Diagonal number {info} is exactly"):
        lu, piv = hd.lu_factor(a, **_run_options(client))
    assert getrf_ratio(a, lu, piv) < THRESH
    with pytest.raises(scipy.linalg.LinAlgError, match="singular"):
        hd.solve(a, np.ones(90), **_run_options(client))


@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_solve_backward_error(client, dtype, trans, rng):
    a = matrix_with_condition(83, 83, 1e3, dtype, rng)
    b = random_matrix(83, 3, dtype, rng)
    factors = hd.lu_factor(a, **_run_options(client))
    x = hd.lu_solve(factors, b, trans=trans, **_run_options(client))
    op = {0: a, 1: a.T, 2: a.conj().T}[trans]
    assert x.shape == b.shape
    assert solve_backward_error(op, x, b) < THRESH


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_solve_and_lu_solve_on_dask_factors(client, kind, rng):
    a = matrix_with_condition(77, 77, 1e2, np.complex128, rng)
    b = random_matrix(77, 1, np.complex128, rng)[:, 0]
    x = hd.solve(_input(a, kind), _input(b, kind), **_run_options(client))
    assert isinstance(x, da.Array if kind == "dask" else np.ndarray)
    assert solve_backward_error(a, _value(x), b) < THRESH
    x = hd.solve(a, b, transposed=True, **_run_options(client))
    assert solve_backward_error(a.T, x, b) < THRESH
    lu, piv = hd.lu_factor(_input(a, kind), **_run_options(client))
    x = hd.lu_solve((lu, piv), b, **_run_options(client))
    assert solve_backward_error(a, x, b) < THRESH


# -- Cholesky --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cho_factor_and_solve(client, dtype, lower, rng):
    a = _hermitian(91, dtype, rng)
    marked = a.copy()  # the triangle not read carries marks, which the factor must keep
    other = np.triu_indices(91, 1) if lower else np.tril_indices(91, -1)
    marked[other] = 7
    c, low = hd.cho_factor(marked, lower=lower, **_run_options(client))
    assert low == lower and c.dtype == np.dtype(dtype)
    assert potrf_ratio(a, c, lower) < THRESH
    np.testing.assert_array_equal(c[other], 7)
    b = random_matrix(91, 2, dtype, rng)
    x = hd.cho_solve((c, lower), b, **_run_options(client))
    assert solve_backward_error(a, x, b) < THRESH
    x = hd.solve(a, b, assume_a="pos", lower=lower, **_run_options(client))
    assert solve_backward_error(a, x, b) < THRESH


def test_cholesky_dask_and_not_positive_definite(client, rng):
    a = _hermitian(70, np.float64, rng)
    u = hd.cholesky(_input(a, "dask"), **_run_options(client))
    assert isinstance(u, da.Array)
    u = u.compute()
    np.testing.assert_array_equal(np.tril(u, -1), 0)
    assert potrf_ratio(a, u, False) < THRESH
    bad = a.copy()
    bad[40, 40] = -1.0  # the 41st leading minor is the first that is not positive definite
    with pytest.raises(scipy.linalg.LinAlgError) as scipy_error:
        scipy.linalg.cholesky(bad, lower=True)
    with pytest.raises(scipy.linalg.LinAlgError) as ours:
        hd.cholesky(bad, lower=True, **_run_options(client))
    assert str(ours.value) == str(scipy_error.value)


# -- QR and least squares ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(110, 61), (61, 110)], ids=["tall", "wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_qr_modes(client, dtype, shape, rng):
    a = random_matrix(*shape, dtype, rng)
    q, r = hd.qr(a, **_run_options(client))
    assert q.shape == (shape[0], shape[0]) and r.shape == shape
    assert factorization_ratio(a, q, r) < THRESH
    assert orthogonality_ratio(q) < THRESH
    q, r = hd.qr(_input(a, "dask"), mode="economic", **_run_options(client))
    q, r = q.compute(), r.compute()
    k = min(shape)
    assert q.shape == (shape[0], k) and r.shape == (k, shape[1])
    assert factorization_ratio(a, q, r) < THRESH and orthogonality_ratio(q) < THRESH
    (factors, tau), r_raw = hd.qr(a, mode="raw", **_run_options(client))
    # LAPACK's storage: the reflectors below R and tau represent the same Q
    q_full = reflectors_product(factors, tau, "QR")
    assert factorization_ratio(a, q_full, np.triu(factors), dtype=dtype) < THRESH
    np.testing.assert_array_equal(hd.qr(a, mode="r", **_run_options(client))[0], r_raw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq(client, dtype, rng):
    a = matrix_with_condition(105, 47, 1e2, dtype, rng)
    b = random_matrix(105, 2, dtype, rng)
    x, residues, rank, s = hd.lstsq(_input(a, "dask"), b, **_run_options(client))
    x_ref, residues_ref, _, _ = scipy.linalg.lstsq(a, b)
    assert x.shape == (47, 2) and rank == 47 and s is None
    assert least_squares_ratio(a, x, b) < THRESH
    assert lstsq_forward_ratio(a, b, x, x_ref) < THRESH
    np.testing.assert_allclose(residues, residues_ref, rtol=1e3 * np.finfo(dtype).eps)
    x1, r1, _, _ = hd.lstsq(a, b[:, 0], **_run_options(client))
    assert x1.shape == (47,) and np.ndim(r1) == 0
    with pytest.raises(NotImplementedError, match="M >= N"):
        hd.lstsq(a.T, b[:47], **_run_options(client))


# -- validation, failures, traces -----------------------------------------------------------------
def test_arguments_are_validated_on_the_client(client, rng):
    a = random_matrix(20, 20, np.float64, rng)
    with pytest.raises(ValueError, match="trans must be"):
        hd.lu_solve((a, np.arange(20, dtype=np.int32)), np.ones(20), trans=3, client=client)
    with pytest.raises(ValueError, match="square"):
        hd.cho_factor(a[:, :10], client=client)
    with pytest.raises(ValueError, match="overwrite_a must be True or False"):
        hd.lu_factor(a, overwrite_a="yes", client=client)
    with pytest.raises(ValueError, match="b must have 20 rows"):
        hd.lu_solve((a, np.arange(20, dtype=np.int32)), np.ones(21), client=client)
    bad = a.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hd.lu_factor(bad, client=client)
    with pytest.raises(ValueError, match="infs or NaNs"):  # a dask array's: on its workers
        hd.lu_factor(da.from_array(bad, chunks=7), client=client, backend="host")
    # the rank that refused it before it needed the transport told the other, which ended
    assert all(not tasks for tasks in client.processing().values())
    with pytest.raises(NotImplementedError, match="assume_a"):
        hd.solve(a, np.ones(20), assume_a="sym", client=client)


def test_a_distributed_call_on_device_chunks_takes_the_tables_distributed_block_size():
    """nb "auto" of a distributed call on device chunks: the device table's
    dist_device_<routine>_nb_large where it has one (the workers' own), else the one-GPU
    call's entry; host-resident parts and the one-GPU call never take it, and rank 0's check of
    a cached resolution resolves as the client did."""
    import hybridla.config
    from hybridla._dist_common import _resolve_plan
    from hybridla.backend import get_backend
    from hybridla.scheduler.plan import make_plan
    host = get_backend("host")
    with hybridla.config.set({"tuning.host.nb_large": 64, "tuning.host.nb_switch": 100,
                              "tuning.host.dist_device_lu_nb_large": 96}):
        def resolved(routine, n=300, nb=None, device=True):
            return _resolve_plan("host", n, n, np.float64, routine, nb, None, device)[0]
        assert resolved("lu") == 96
        assert resolved("lu", device=False) == 64  # host-resident parts
        assert resolved("cho") == 64  # no entry of its own
        assert resolved("lu", n=50) != 96  # below nb_switch
        assert resolved("lu", nb=32) == 32  # the call's own
        assert make_plan(host, 300, 300, np.float64, routine="lu").nb == 64
        nb, lookahead = _resolve_plan("host", 300, 300, np.float64, "lu", None, None, True)
        job = dict(shape=(300, 300), dtype=np.float64, routine="lu", nb=nb,
                   lookahead=lookahead, resolved_from=(None, None), device=True)
        _dist.check_resolution(host, job, 0)  # no StaleResolution
        with pytest.raises(_dist.StaleResolution):
            _dist.check_resolution(host, dict(job, device=False), 0)


def test_release_on_host_workers_has_nothing_to_let_go(client):
    assert set(hd.release(client).values()) == {0}


def test_no_client_is_an_error(monkeypatch):
    def none_active():
        raise ValueError("No clients found")
    monkeypatch.setattr(distributed, "default_client", none_active)
    with pytest.raises(ValueError, match="no Dask distributed client"):
        hd.lu_factor(np.eye(3))


@pytest.mark.parametrize("where, step", [("panel", 3), ("recording", 3), ("recording", 5)])
@pytest.mark.parametrize("routine", ["lu_factor", "cholesky", "qr"])
def test_worker_failure_surfaces_and_leaves_nothing_running(client, routine, where, step, rng):
    """A panel, or the recording, that raises on rank 1 aborts the transport: rank 0, waiting
    for the next broadcast, stops instead of hanging; the client gets rank 1's own exception
    once both tasks have ended, and the cluster is idle and usable after it. After 5 steps
    (80 / NB) the recording is whole: rank 0 may finish first."""
    a = _hermitian(80, np.float64, rng)
    address = sorted(client.nthreads())[1]
    client.run(_dist.set_fault, 1, step, f"injected fault on rank 1, step {step}", where,
               workers=[address])
    try:
        with pytest.raises(RuntimeError, match=f"injected fault on rank 1, step {step}"):
            getattr(hd, routine)(a, **_run_options(client))
    finally:
        client.run(_dist.clear_faults)
    assert all(not tasks for tasks in client.processing().values())
    lu, piv = hd.lu_factor(a, **_run_options(client))
    assert getrf_ratio(a, lu, piv) < THRESH


def test_transport_abort_wakes_a_waiting_peer():
    """Two ranks in one process: rank 1 waits in a broadcast from rank 0; rank 0 aborts
    instead of sending; rank 1's broadcast raises TransportAborted at once (no timeout)."""
    from multiprocessing.connection import Pipe
    ends = Pipe()
    zero = HostTransport(0, 2, {1: ends[0]}, timeout=60)
    one = HostTransport(1, 2, {0: ends[1]}, timeout=60)
    caught = []

    def wait():
        try:
            one.broadcast(None, [], [np.zeros(3)], 0)
        except TransportAborted as exc:
            caught.append(exc)

    waiter = threading.Thread(target=wait)
    started = time.monotonic()
    waiter.start()
    zero.abort("a task failed")
    waiter.join(timeout=30)
    assert not waiter.is_alive() and time.monotonic() - started < 30
    assert caught and "a task failed" in str(caught[0])
    zero.close()
    one.close()


def _nccl_transport_module(monkeypatch):
    """hybridla.scheduler.transport_nccl imported anew over stand-ins for nccl4py and the cuda
    backend (neither is on the CPU machine): its locking, without NCCL."""
    import importlib
    core = types.ModuleType("nccl.core")
    core.get_unique_id = lambda empty=False: types.SimpleNamespace(as_bytes=bytes(128))
    core.SUM = "sum"
    nccl = types.ModuleType("nccl")
    nccl.core = core
    cuda = types.ModuleType("hybridla.backend.cuda")
    cuda.DeviceBlock = object
    driver = types.ModuleType("hybridla.backend._driver")  # loads libcuda
    driver.CudaDriverError = RuntimeError
    for name, module in (("nccl", nccl), ("nccl.core", core), ("hybridla.backend.cuda", cuda),
                         ("hybridla.backend._driver", driver)):
        monkeypatch.setitem(sys.modules, name, module)
    name = "hybridla.scheduler.transport_nccl"
    monkeypatch.delitem(sys.modules, name, raising=False)
    import hybridla.scheduler
    monkeypatch.delattr(hybridla.scheduler, "transport_nccl", raising=False)
    module = importlib.import_module(name)
    monkeypatch.setitem(sys.modules, name, module)  # the stand-in goes again at the end
    return module


@pytest.mark.parametrize("returns", [True, False])
def test_nccl_abort_waits_for_a_call_under_way_unless_it_is_blocked(monkeypatch, returns):
    """NCCL wants one thread at a time on a communicator: an abort from the watching thread
    waits for a collective's enqueue under way to return; one that does not return within
    ABORT_WAIT_S (blocked behind a collective waiting for a failed peer) is aborted beside.
    A call after the abort raises TransportAborted, not an error of a missing communicator."""
    module = _nccl_transport_module(monkeypatch)
    monkeypatch.setattr(module, "ABORT_WAIT_S", 5.0 if returns else 0.3)
    events, inside, leave = [], threading.Event(), threading.Event()

    class Comm:
        def broadcast(self, *args, **kwargs):
            events.append("enter")
            inside.set()
            leave.wait(30)
            events.append("leave")

        def abort(self):
            events.append("abort")

    control = types.SimpleNamespace(aborted=None)
    transport = module.NcclTransport(None, 0, 2, Comm(), b"id", control, ("a", "b"))
    try:
        caller = threading.Thread(target=transport._call, args=("broadcast", 1, 2, 0))
        caller.start()
        assert inside.wait(30)
        aborter = threading.Thread(target=transport._abort_comm)
        aborter.start()
        if returns:
            time.sleep(0.3)
            assert events == ["enter"]  # not aborted beside the call
            leave.set()
            aborter.join(30)
            assert events == ["enter", "leave", "abort"]
        else:
            aborter.join(30)
            assert events == ["enter", "abort"]  # the blocked call did not hold it back
            leave.set()
        caller.join(30)
        assert not aborter.is_alive() and not caller.is_alive()
        control.aborted = "rank 1: a task failed"
        with pytest.raises(TransportAborted, match="a task failed"):
            transport._call("broadcast", 1, 2, 0)
        assert events.count("abort") == 1
    finally:
        transport._closed.set()


class _FakeDriver:
    """The driver calls of transport_nccl._Gates, for ranks in threads of their own (each
    thread sets `rank` in `local` first): each rank's calls recorded; registering the page
    fails on the ranks in `refusing`."""

    def __init__(self, refusing=()):
        self.refusing, self.local, self.calls = refusing, threading.local(), {0: [], 1: []}
        self.CudaDriverError = RuntimeError

    def host_register_mapped(self, pointer, nbytes):
        if self.local.rank in self.refusing:
            raise RuntimeError("cannot register")
        return 1000 * (self.local.rank + 1)  # the page's address on this rank's device

    def __getattr__(self, name):  # every other call: recorded
        return lambda *args: self.calls[self.local.rank].append((name, *args))


@pytest.mark.parametrize("refusing, machines", [((), 1), ((1,), 1), ((), 2)])
def test_gates_are_made_on_every_rank_or_none(monkeypatch, tmp_path, refusing, machines):
    """A communicator's broadcasts are gated only where every rank mapped the flags' page
    (asked of all ranks): the root's stream writes broadcast s's count into its word of each
    peer, a receiver's waits for its word of that root to reach it; a failed call's release
    opens the rank's gates from the host (the peers see it in the one page), and a released
    page stays mapped. One rank that cannot map: neither gates, and each says so. Ranks on
    `machines` 2: neither gates, quietly (the gates are for one machine). The page's file
    goes."""
    from multiprocessing.connection import Pipe
    module = _nccl_transport_module(monkeypatch)
    driver = _FakeDriver(refusing)
    monkeypatch.setattr(module, "_driver", driver)
    monkeypatch.setattr(module._Gates, "DIRECTORY", str(tmp_path))
    monkeypatch.setattr(module, "socket", types.SimpleNamespace(
        gethostname=lambda: f"node{driver.local.rank % machines}"))
    ends = Pipe()
    transports = [HostTransport(0, 2, {1: ends[0]}, timeout=10),
                  HostTransport(1, 2, {0: ends[1]}, timeout=10)]
    made, failed = [None, None], []

    def make(rank):
        driver.local.rank = rank
        try:
            made[rank] = module._Gates.made(rank, 2, transports[rank])
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=make, args=(rank,)) for rank in range(2)]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        finally:
            for transport in transports:
                transport.close()
    assert not failed and not list(tmp_path.iterdir())
    notes = sorted(str(w.message) for w in said if "nccl_gate" in str(w.message))
    if machines > 1:
        assert made == [None, None] and not notes, notes
        return
    if refusing:  # asked for and not made: each rank says so, the refusing one why
        assert made == [None, None]
        assert len(notes) == 2 and "cannot register" in notes[1] and \
            "a peer could not map the page" in notes[0], notes
        return
    assert not notes
    zero, one = made
    driver.local.rank = 0
    driver.calls[0].clear()
    zero.before_broadcast("s0", 0)  # broadcast 1, rank 0 its root: its word of rank 1
    zero.before_broadcast("s0", 1)  # broadcast 2, rank 1 its root: rank 0's word of it
    assert driver.calls[0] == [("stream_write_value32", "s0", 1000 + 4 * (1 * 2 + 0), 1),
                               ("stream_wait_value32", "s0", 1000 + 4 * (0 * 2 + 1), 2)]
    zero.release()
    assert list(one.words[:4]) == [2 + (1 << 30)] * 2 + [0, 0]  # one page: rank 1 sees it
    zero.free()
    page = zero._mapping
    del zero  # a released page outlives its gates: unmapped, the GPU would keep it
    made[0] = None
    gc.collect()
    assert not page.closed and any(kept._mapping is page for kept in module._Gates._released)
    driver.local.rank = 1
    one.free()
    assert [call[0] for call in driver.calls[0]].count("host_unregister") == 0
    assert [call[0] for call in driver.calls[1]] == ["host_unregister"]


def test_gates_page_goes_when_a_peer_fails_meanwhile(monkeypatch, tmp_path):
    """A peer that fails while the gates are made (its transport aborted): rank 0's making
    raises TransportAborted, and the page's file it made goes all the same."""
    from multiprocessing.connection import Pipe
    module = _nccl_transport_module(monkeypatch)
    driver = _FakeDriver()
    driver.local.rank = 0
    monkeypatch.setattr(module, "_driver", driver)
    monkeypatch.setattr(module._Gates, "DIRECTORY", str(tmp_path))
    ends = Pipe()
    zero = HostTransport(0, 2, {1: ends[0]}, timeout=10)
    one = HostTransport(1, 2, {0: ends[1]}, timeout=10)
    try:
        one.abort("rank 1 failed")
        with pytest.raises(TransportAborted, match="rank 1 failed"):
            module._Gates.made(0, 2, zero)
    finally:
        zero.close()
        one.close()
    assert not list(tmp_path.iterdir())


def test_transport_timeout():
    from multiprocessing.connection import Pipe
    ends = Pipe()
    zero = HostTransport(0, 2, {1: ends[0]}, timeout=0.2)
    one = HostTransport(1, 2, {0: ends[1]}, timeout=0.2)
    with pytest.raises(TransportAborted, match="no message from rank 1"):
        zero.reduce(None, [np.ones(2)], [np.ones(2)], 0)
    zero.close()
    one.close()


def test_merged_trace_has_every_worker_and_the_collectives(client, rng, tmp_path):
    import json
    path = tmp_path / "lu.json"
    a = random_matrix(90, 90, np.float64, rng)
    hd.lu_factor(a, trace=str(path), **_run_options(client))
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e.get("ph") == "M" and
             e.get("name") == "thread_name"}
    assert any(lane.startswith("w0/") for lane in lanes)
    assert "w0/comm:bcast" in lanes and "w1/comm:bcast" in lanes
    panels = [e for e in events if e.get("ph") == "X" and e["name"] == "panel"]
    assert len(panels) == -(-90 // NB)  # each step's panel once, by its owner


def test_an_untraced_call_brings_back_no_records(client, rng, monkeypatch):
    """The workers' trace records come back only where the call writes a trace."""
    from hybridla import _dist_common
    brought = []
    small_results = _dist_common._cluster.small_results

    def keep(*args):
        brought.append(small_results(*args))
        return brought[-1]

    monkeypatch.setattr(_dist_common._cluster, "small_results", keep)
    a = random_matrix(90, 90, np.float64, rng)
    lu, piv = hd.lu_factor(a, **_run_options(client))
    hd.lu_solve((lu, piv), np.ones(90), **_run_options(client))
    assert len(brought) == 2 and all(r["trace"] == [] for results in brought for r in results)
    assert getrf_ratio(a, lu, piv) < THRESH


def _perf_script(client, trace_dir, *args):
    """perf/distributed.py with `args` on the host backend, on `client`'s cluster with its
    traces in `trace_dir` (None: the arguments alone, for those it refuses before it starts)."""
    where = [] if client is None else ["--backend", "host", "--trace-dir", str(trace_dir),
                                       "--scheduler", client.scheduler.address]
    return subprocess.run([sys.executable, str(ROOT / "perf" / "distributed.py"), *where, *args],
                          capture_output=True, text=True, timeout=300 if client else 60, cwd=ROOT)


def test_perf_script_sweeps_the_workers_block_size(client, tmp_path):
    """--workers-nb runs the workers at each block size against one one-GPU row, --gates each
    in turn with the broadcasts gated and not; --quick leaves out the traced run and the
    check."""
    out = _perf_script(client, tmp_path, "--sizes", "200", "--routines", "lu",
                       "--workers-nb", "32,64", "--gates", "off,on", "--quick")
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(re.findall(r"^one GPU: lu 200 nb", out.stdout, re.M)) == 1, out.stdout
    for nb in (32, 64):
        for gate in ("on", "off"):
            assert re.search(rf"^\| lu gate {gate} nb{nb} \| 200 \| [0-9.]+ \| [0-9.]+ \| "
                             rf"[0-9.]+ \| [0-9.]+x \| - \| - \|$", out.stdout, re.M), out.stdout
    assert "traced run" not in out.stdout and not list(tmp_path.glob("*.json"))


def test_perf_script_smoke(client, tmp_path):
    """perf/distributed.py runs on the host backend (its GPU runs are for the 2-GPU machine)."""
    out = _perf_script(client, tmp_path, "--sizes", "300", "--routines", "lu,cho,qr",
                       "--repeat", "1", "--warm-at-size", "--lookaheads", "1,2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"\| lu la1 \| 300 \|", out.stdout), out.stdout
    assert re.search(r"\| qr la2 \| 300 \|", out.stdout), out.stdout
    # each side at the block size hybridla resolves for it (the library's), said
    assert re.search(r"one GPU: cho 300 nb [0-9]+ ", out.stdout), out.stdout
    assert re.search(r"nb on the workers: .*qr 300: [0-9]+", out.stdout), out.stdout
    # each row's phases, every worker's among them, from the trace's metadata
    assert re.search(r"lu la1 300 traced run [0-9.]+ s, phases \(s\): layout [0-9.]+ "
                     r"\[resolve [0-9.]+, columns [0-9.]+, place [0-9.]+\], "
                     r"jobs [0-9.]+ \(w0: waited -?[0-9.]+, connect [0-9.]+ "
                     r"\[rendezvous [0-9.]+\], work [0-9.]+ "
                     r"\[check [0-9.]+, store [0-9.]+, connected [0-9.]+, run [0-9.]+, before engine [0-9.]+, "
                     r"after engine -?[0-9.]+, records [0-9.]+, output [0-9.]+, close [0-9.]+\]; w1: .*\), "
                     r"results [0-9.]+",
                     out.stdout), out.stdout
    assert list(tmp_path.glob("*.json"))


def test_perf_script_configuration_sets_in_turn(client, tmp_path):
    """--configs runs each routine under each named set of configuration values in turn, set
    on the workers (the traced call of the set "la2" ran at look-ahead 2, the default set's at
    the configured 1), each set's row named; a set that is not KEY=VALUE is refused."""
    out = _perf_script(client, tmp_path, "--sizes", "200", "--routines", "lu", "--repeat", "1",
                       "--configs", "default;la2:lu.lookahead=2")
    assert out.returncode == 0, out.stderr[-3000:]
    for name, depth in (("default", 1), ("la2", 2)):
        assert re.search(rf"^\| lu {name} \| 200 \| .* ok \|$", out.stdout, re.M), out.stdout
        labels = [e["args"]["labels"] for e in json.loads(
            (tmp_path / f"distributed_lu_{name}_200.json").read_text())["traceEvents"]
            if e.get("name") == "process_labels"]
        assert f"look-ahead {depth}," in labels[0], labels
    bad = _perf_script(None, None, "--configs", "x:lu.lookahead")
    assert bad.returncode == 2 and "--configs" in bad.stderr, bad.stderr


def test_perf_script_block_sizes_in_turn(client, tmp_path):
    """--nb default,32 runs the routine at the library's block size and at 32, each side."""
    out = _perf_script(client, tmp_path, "--sizes", "200", "--routines", "lu", "--repeat", "1",
                       "--nb", "default,32")
    assert out.returncode == 0, out.stderr[-3000:]
    default = re.search(r"one GPU: lu 200 nb ([0-9]+) ", out.stdout).group(1)
    assert default != "32" and "one GPU: lu 200 nb 32 " in out.stdout, out.stdout
    assert f"nb on the workers: lu 200: {default}, lu 200: 32" in out.stdout, out.stdout
    for nb in (default, "32"):
        assert re.search(rf"^\| lu nb{nb} \| 200 \| .* ok \|$", out.stdout, re.M), out.stdout
    bad = _perf_script(None, None, "--nb", "0")
    assert bad.returncode == 2 and "--nb" in bad.stderr, bad.stderr


# -- two GPUs --------------------------------------------------------------------------------------
def _gpu_count():
    try:
        import pycuda.driver as drv
        drv.init()
        return drv.Device.count()
    except Exception:
        return 0


def _set_nccl_max_ctas(value):
    import hybridla.config
    hybridla.config.set({"distributed.nccl_max_ctas": value})  # the worker's, from now on


def _kept_communicators():
    from hybridla.scheduler import transport_nccl
    return [comm_id for comm, comm_id, gates in transport_nccl._kept.values()]


def _kept_gated():
    """Whether each communicator this worker keeps gates its broadcasts on the device."""
    from hybridla.scheduler import transport_nccl
    return [gates is not None for comm, comm_id, gates in transport_nccl._kept.values()]


def _set_nccl_gate(value):
    import hybridla.config
    hybridla.config.set({"distributed.nccl_gate": value})  # the worker's, from now on


@pytest.mark.cuda
def test_two_gpus_lu_cholesky_qr(monkeypatch):
    if _gpu_count() < 2:
        pytest.skip("fewer than 2 GPUs visible")
    pytest.importorskip("nccl.core")
    dask_cuda = pytest.importorskip("dask_cuda")
    rng = np.random.default_rng(7)
    # every part staged, however small (the workers inherit the environment): a dask array's
    # block columns then stream up from where they lie, C-ordered ones transposed on the GPU
    monkeypatch.setenv("HYBRIDLA_DEVICE__PIN_MIN_BYTES", "0")
    with dask_cuda.LocalCUDACluster(n_workers=2, threads_per_worker=4) as cluster, \
            distributed.Client(cluster) as gpu_client:
        options = dict(client=gpu_client, backend="cuda", nb=256)
        for dtype in DTYPES:
            a = random_matrix(1500, 1300, dtype, rng)
            lu, piv = hd.lu_factor(_input(a, "dask"), **options)  # C-ordered blocks
            assert getrf_ratio(a, lu.compute(), piv) < THRESH
            columns = da.from_array(np.asfortranarray(a), chunks=(1500, 256))  # F-ordered
            lu, piv = hd.lu_factor(columns, **options)
            assert getrf_ratio(a, lu.compute(), piv) < THRESH
            h = _hermitian(1300, dtype, rng)
            assert potrf_ratio(h, hd.cholesky(h, lower=True, **options), True) < THRESH
            q, r = hd.qr(a, mode="economic", **options)
            assert factorization_ratio(a, q, r) < THRESH and orthogonality_ratio(q) < THRESH
            b = random_matrix(1300, 2, dtype, rng)
            x = hd.solve(a[:1300], b, **options)
            assert solve_backward_error(a[:1300], x, b) < THRESH
        # a staged part is checked on the GPU by its column sums as it arrives: an inf or a
        # NaN in either block order is refused, and a column whose sum alone overflows is
        # checked entry by entry and accepted
        for order, value in (("C", np.nan), ("F", np.inf), ("F", -np.inf)):
            bad = np.array(random_matrix(1500, 1300, np.float64, rng), order=order)
            bad[1400, 700] = value
            with pytest.raises(ValueError, match="infs or NaNs"):
                hd.lu_factor(da.from_array(bad, chunks=(1500, 256)), **options)
        large = random_matrix(1500, 1300, np.float64, rng)
        large[:, 300] = 1e306  # the column's sum of |a_ij| is inf; every entry is finite
        lu, piv = hd.lu_factor(da.from_array(large, chunks=(1500, 256)), **options)
        assert np.isfinite(lu.compute()).all()
        # each worker kept one communicator for the pair, the same one on both (a call that
        # found them differ would have made a new one)
        kept = gpu_client.run(_kept_communicators)
        assert [len(ids) for ids in kept.values()] == [1, 1], kept
        assert len({ids[0] for ids in kept.values()}) == 1, kept
        # the kept communicator gates its broadcasts as distributed.nccl_gate says (on by
        # default): both workers are on this machine, so both map the gates' page
        default = bool(hybridla.config.get("distributed.nccl_gate"))
        assert list(gpu_client.run(_kept_gated).values()) == [[default], [default]]
        assert hd.release(gpu_client) == {w: 1 for w in kept}
        assert [len(ids) for ids in gpu_client.run(_kept_communicators).values()] == [0, 0]
        lu, piv = hd.lu_factor(da.from_array(large, chunks=(1500, 256)), **options)
        assert np.isfinite(lu.compute()).all()  # a new communicator, made again
        # collectives on at most 2 thread blocks (distributed.nccl_max_ctas): a communicator
        # of its own, kept beside the other
        gpu_client.run(_set_nccl_max_ctas, 2)
        try:
            lu, piv = hd.lu_factor(da.from_array(large, chunks=(1500, 256)), **options)
            assert getrf_ratio(large, lu.compute(), piv) < THRESH
            assert [len(ids) for ids in gpu_client.run(_kept_communicators).values()] == [2, 2]
        finally:
            gpu_client.run(_set_nccl_max_ctas, None)
        # the other way of distributed.nccl_gate asked for: a communicator of its own, kept
        # beside the others, and the same results
        gpu_client.run(_set_nccl_gate, not default)
        try:
            lu, piv = hd.lu_factor(da.from_array(large, chunks=(1500, 256)), **options)
            assert getrf_ratio(large, lu.compute(), piv) < THRESH
            gated = [sorted(flags) for flags in gpu_client.run(_kept_gated).values()]
        finally:
            gpu_client.run(_set_nccl_gate, default)
        assert gated == [sorted([default, default, not default])] * 2, gated


def _device_chunks(client, a, cupy, chunks=(None, 256), workers=None):
    """`a` as a dask array of CuPy chunks, persisted on the workers' GPUs (C-ordered chunks,
    as CuPy makes them; all on `workers` where given)."""
    lazy = da.from_array(a, chunks=(a.shape[0] if chunks[0] is None else chunks[0],
                                    chunks[1])[:a.ndim])
    lazy = lazy.map_blocks(cupy.asarray, dtype=a.dtype, meta=cupy.empty((0,) * a.ndim, a.dtype))
    persisted = client.persist(lazy, workers=workers)
    distributed.wait(persisted)
    return persisted


def _arriving_parts(gpu_client, cupy, options, rng, tmp_path):
    """With distributed.arrive_parts, chunks laid out as the call wants them are copied in by
    the run's first tasks, on a copy lane of each worker, while the first steps go on:
    column-major chunks by 2-D copies, row-major ones transposed on the way; a NaN or an inf
    is refused as they arrive, and a column whose sum alone overflows is checked entry by
    entry and accepted."""
    import json

    import hybridla.config
    with hybridla.config.set({"distributed.arrive_parts": True}):
        a = random_matrix(1500, 1300, np.float64, rng)
        for order in ("C", "F"):
            chunks = _placed_device_chunks(gpu_client, a, cupy, order)
            path = tmp_path / f"arrivals_{order}.json"
            lu, piv = hd.lu_factor(chunks, trace=str(path), **options)
            assert getrf_ratio(a, cupy.asnumpy(lu.compute()), piv) < THRESH
            np.testing.assert_array_equal(cupy.asnumpy(chunks.compute()), a)  # not written
            events = json.loads(path.read_text())["traceEvents"]
            lane_of = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                       if e.get("ph") == "M" and e.get("name") == "thread_name"}
            # the copies' device lanes (a slow enqueue shows on a host lane "call:...")
            arrived = [lane_of[e["pid"], e["tid"]] for e in events
                       if e.get("ph") == "X" and e["name"] == "arrive"
                       and "/call:" not in lane_of[e["pid"], e["tid"]]]
            assert sorted(set(arrived)) == ["w0/copy:d2d", "w1/copy:d2d"]
            assert len(arrived) == -(-1300 // 256)  # each block column once, by its owner
        for order, value in (("C", np.nan), ("F", np.inf)):
            bad = random_matrix(1500, 1300, np.float64, rng)
            bad[1400, 700] = value
            with pytest.raises(ValueError, match="infs or NaNs"):
                hd.lu_factor(_placed_device_chunks(gpu_client, bad, cupy, order), **options)
        large = random_matrix(1500, 1300, np.float64, rng)
        large[:, 300] = 1e306
        lu, piv = hd.lu_factor(_placed_device_chunks(gpu_client, large, cupy, "C"), **options)
        assert np.isfinite(cupy.asnumpy(lu.compute())).all()


def _placed_device_chunks(client, a, cupy, order):
    """`a` as CuPy chunks of `order` ("C", "F") in block columns of 256, each on the worker
    that hybridla's layout gives it (nothing moves between workers before the run)."""
    from hybridla.bench.matrices import placed_cyclically
    lazy = da.from_array(np.array(a, order=order), chunks=(a.shape[0], 256)).map_blocks(
        lambda block: cupy.array(block, order=order), dtype=a.dtype,
        meta=cupy.empty((0, 0), a.dtype))
    return placed_cyclically(client, lazy)


@pytest.mark.cuda
def test_two_gpus_device_chunks(tmp_path):
    """A dask array of CuPy chunks is factored on the GPUs that hold it (no host pass): the
    factors come back as CuPy chunks there, the user's chunks are left as they were, the
    solves take them; an inf or NaN is refused, and so is the host backend, by name."""
    if _gpu_count() < 2:
        pytest.skip("fewer than 2 GPUs visible")
    pytest.importorskip("nccl.core")
    dask_cuda = pytest.importorskip("dask_cuda")
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(8)
    with dask_cuda.LocalCUDACluster(n_workers=2, threads_per_worker=4) as cluster, \
            distributed.Client(cluster) as gpu_client:
        options = dict(client=gpu_client, backend="cuda", nb=256)
        for dtype in DTYPES:
            a = random_matrix(1500, 1300, dtype, rng)
            chunks = _device_chunks(gpu_client, a, cupy)
            lu, piv = hd.lu_factor(chunks, **options)
            assert isinstance(lu, da.Array) and isinstance(lu._meta, cupy.ndarray)
            assert getrf_ratio(a, cupy.asnumpy(lu.compute()), piv) < THRESH
            np.testing.assert_array_equal(cupy.asnumpy(chunks.compute()), a)  # not written
            # chunks F-ordered, and cut across the block columns (Dask rechunks them)
            f_ordered = _device_chunks(gpu_client, np.asfortranarray(a), cupy, (700, 300))
            f_ordered = f_ordered.map_blocks(cupy.asfortranarray, dtype=a.dtype,
                                             meta=cupy.empty((0, 0), a.dtype))
            lu, piv = hd.lu_factor(f_ordered, **options)
            assert getrf_ratio(a, cupy.asnumpy(lu.compute()), piv) < THRESH
            # a worker's part, the factors' chunks, came from CuPy's pool (so the next call
            # there takes it back), not from the driver
            assert all(dask.compute(*[dask.delayed(_from_cupy_pool)(block)
                                      for block in lu.to_delayed().ravel()]))
            # every chunk on the first worker: half the block columns go GPU to GPU first
            first = sorted(gpu_client.nthreads())[0]
            lu, piv = hd.lu_factor(_device_chunks(gpu_client, a, cupy, workers=[first]),
                                   **options)
            assert getrf_ratio(a, cupy.asnumpy(lu.compute()), piv) < THRESH

            square, b = a[:1300], random_matrix(1300, 2, dtype, rng)
            lu, piv = hd.lu_factor(_device_chunks(gpu_client, square, cupy), **options)
            x = hd.lu_solve((lu, piv), _device_chunks(gpu_client, b, cupy), **options)
            assert isinstance(x._meta, cupy.ndarray)  # where b was
            assert solve_backward_error(square, cupy.asnumpy(x.compute()), b) < THRESH
            x = hd.solve(_device_chunks(gpu_client, square, cupy), b, **options)
            assert isinstance(x, np.ndarray) and solve_backward_error(square, x, b) < THRESH

            h = _hermitian(1300, dtype, rng)
            for lower in (True, False):
                c, low = hd.cho_factor(_device_chunks(gpu_client, h, cupy), lower=lower,
                                       **options)
                assert isinstance(c._meta, cupy.ndarray)
                factor = cupy.asnumpy(c.compute())
                factor = np.tril(factor) if lower else np.triu(factor)
                assert potrf_ratio(h, factor, lower) < THRESH
                x = hd.cho_solve((c, low), b, **options)
                assert solve_backward_error(h, x, b) < THRESH

            q, r = hd.qr(chunks, mode="economic", **options)
            assert isinstance(q._meta, cupy.ndarray)
            q, r = cupy.asnumpy(q.compute()), cupy.asnumpy(r.compute())
            assert factorization_ratio(a, q, r) < THRESH and orthogonality_ratio(q) < THRESH
            tall_b = random_matrix(1500, 2, dtype, rng)
            x, _, rank, _ = hd.lstsq(chunks, tall_b, **options)
            assert rank == 1300 and least_squares_ratio(a, x, tall_b) < THRESH

        # an inf or a NaN is refused: in row-major chunks (checked after their transposing
        # copy) and in column-major ones (copied and checked in one pass), real or complex
        for dtype, value in ((np.float64, np.nan), (np.float32, -np.inf),
                             (np.complex128, complex(1, np.inf)), (np.complex64, np.nan)):
            bad = random_matrix(1500, 1300, dtype, rng)
            bad[1400, 700] = value
            for chunks in (_device_chunks(gpu_client, bad, cupy),
                           _device_chunks(gpu_client, bad, cupy).map_blocks(
                               cupy.asfortranarray, dtype=dtype, meta=cupy.empty((0, 0), dtype))):
                with pytest.raises(ValueError, match="infs or NaNs"):
                    hd.lu_factor(chunks, **options)
        _arriving_parts(gpu_client, cupy, options, rng, tmp_path)
        with pytest.raises(ValueError, match="cuda backend"):
            hd.lu_factor(_device_chunks(gpu_client, bad, cupy), client=gpu_client,
                         backend="host")


def _from_cupy_pool(block):
    """Whether a CuPy chunk's memory is its pool's (a view's is its base's)."""
    import cupy
    return isinstance(block.data.mem, cupy.cuda.memory.PooledMemory)


def _dump_stacks_later(seconds):
    """In a worker: every thread's stack to stderr if it is still running in `seconds` (what a
    hang on the GPUs leaves to read); `None` cancels."""
    import faulthandler
    if seconds is None:
        faulthandler.cancel_dump_traceback_later()
    else:
        faulthandler.dump_traceback_later(seconds, exit=False)


@pytest.mark.cuda
@pytest.mark.parametrize("gate", [False, True])
def test_two_gpus_worker_failure_surfaces_and_leaves_nothing_running(gate):
    """On the GPUs, with NCCL between them: a panel, or the recording, that raises on rank 1
    surfaces on the client as its own exception, within a bound (rank 0, waiting in a
    collective on its GPU, is woken by the abort), nothing is left running, and the next call
    on the same workers works. The recording's failure is what a workspace refused for want
    of memory is; failing after the whole graph is recorded (24 steps), rank 1 has enqueued
    every collective, so rank 0 may finish and keep the communicator that rank 1 aborted: a
    QR check that failed so, in orgqr, was followed by a hang (perf/RESULTS.md, issue 32,
    stop 56). Each process's threads are dumped to stderr if a case runs past 60 s. With
    `gate` the broadcasts are gated on the device (distributed.nccl_gate): a failed call must
    open its gates, or a rank's stream waits at one for good (with the flags in GPU memory,
    opened by a stream's memset, this hung in ncclCommAbort: stop 59)."""
    if _gpu_count() < 2:
        pytest.skip("fewer than 2 GPUs visible")
    pytest.importorskip("nccl.core")
    dask_cuda = pytest.importorskip("dask_cuda")
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(9)
    a = random_matrix(6144, 6144, np.float64, rng)  # 24 steps of 256: rank 0 runs ahead
    spd = a @ a.T + 6144 * np.eye(6144)
    small = random_matrix(600, 600, np.float64, rng)
    with dask_cuda.LocalCUDACluster(n_workers=2, threads_per_worker=4) as cluster, \
            distributed.Client(cluster) as gpu_client, ThreadPoolExecutor(1) as caller:
        options = dict(client=gpu_client, backend="cuda", nb=256)
        gpu_client.run(_set_nccl_gate, gate)
        rank1 = sorted(gpu_client.nthreads())[1]
        calls = {"lu_factor": lambda: hd.lu_factor(a, **options),
                 "qr": lambda: hd.qr(a, mode="economic", **options),
                 "cholesky": lambda: hd.cholesky(spd, lower=True, **options)}
        cases = [(routine, where, 5, None) for routine in calls for where in ("panel",
                                                                              "recording")]
        cases += [("lu_factor", "recording", 24, "getrf"), ("qr", "recording", 24, "orgqr")]
        for routine, where, step, driver in cases:
            message = f"injected fault on rank 1, {where}, step {step}, {routine}"
            gpu_client.run(_dist.set_fault, 1, step, message, where, driver, workers=[rank1])
            gpu_client.run(_dump_stacks_later, 60)  # every process's threads, if hung
            _dump_stacks_later(60)
            try:
                with pytest.raises(RuntimeError, match=message):
                    caller.submit(calls[routine]).result(timeout=90)
                gpu_client.run(_dist.clear_faults)
                assert all(not tasks for tasks in gpu_client.processing().values())
                lu, piv = caller.submit(hd.lu_factor, small, **options).result(timeout=90)
                assert getrf_ratio(small, lu, piv) < THRESH  # NumPy in, NumPy factors out
            finally:
                _dump_stacks_later(None)
                gpu_client.run(_dump_stacks_later, None)
                gpu_client.run(_dist.clear_faults)
        # the calls after the failures made their gates anew where asked: a released page stays
        # mapped, so a new one cannot land on its registered addresses (stop 60)
        assert gpu_client.run(_kept_gated) == {w: [gate] for w in gpu_client.nthreads()}


class _DeviceLikeHost:
    """The host backend claiming a device, its "device arrays" NumPy arrays: what
    _dist_parts.device_part asks of a device backend (stack_columns, copy_columns, empty,
    has_nonfinite, device_matrix), so that its block moves run here, over the host transport."""

    def __init__(self):
        from hybridla.backend import get_backend
        self._host = get_backend("host")
        self.has_device = True
        self.pooled = []  # each part's `pooled`, as asked of empty

    def stack_columns(self, blocks, m, dtype):
        return np.asfortranarray(np.hstack(blocks), dtype=dtype)

    def empty(self, shape, dtype, like=None, pooled=False):
        self.pooled.append(pooled)
        return np.zeros(shape, dtype=dtype, order="F")

    def copy_columns(self, blocks, out, starts, check=False):
        for block, c0 in zip(blocks, starts):
            out[:, c0:c0 + block.shape[1]] = block
        return check and self.has_nonfinite(blocks)

    def has_nonfinite(self, arrays):  # a device array or a list of them, as the backend's
        arrays = arrays if isinstance(arrays, list) else [arrays]
        return not all(np.isfinite(array).all() for array in arrays)

    def device_matrix(self, array, nb, overwrite, settings=None):
        return self._host.wrap(array), array, None

    def __getattr__(self, name):
        return getattr(self._host, name)


@pytest.mark.parametrize("holders", [[0, 0, 0, 0, 0], [1, 0, 1, 0, 1], [1, 1, 0, 0, 1],
                                     [0, 1, 0, 1, 0]], ids=str)
def test_device_part_moves_blocks_to_their_owners(holders, rng):
    """Each rank gets the block columns it holds; device_part broadcasts each block held away
    from its owner, in block order on both ranks, and copies the rest: every rank ends with
    exactly its cyclic columns, whoever held them (two ranks in threads, the host transport)."""
    from multiprocessing.connection import Pipe
    from hybridla.scheduler.plan import make_plan
    m, n, nb = 30, 45, 10  # five block columns, the last one 5 wide
    a = random_matrix(m, n, np.float64, rng)
    layout = _dist.BlockColumns(m, n, nb, 2)
    ops = _DeviceLikeHost()
    plan = make_plan(ops._host, m, n, np.float64, routine="lu", nb=nb)
    ends = Pipe()
    transports = [HostTransport(0, 2, {1: ends[0]}, timeout=60),
                  HostTransport(1, 2, {0: ends[1]}, timeout=60)]
    homes, failures = [None, None], []

    def rank_part(rank):
        held = [a[:, j * nb:(j + 1) * nb] for j, h in enumerate(holders) if h == rank]
        job = dict(shape=(m, n), dtype=np.float64, name="a", layout=layout,
                   check_finite=True, holders=holders, device_meta=None)
        try:
            _, homes[rank] = _dist_parts.device_part(ops, plan, job, held, rank,
                                                     transports[rank])
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
            transports[rank].abort(str(exc))

    threads = [threading.Thread(target=rank_part, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for t in transports:
        t.close()
    assert not failures, failures
    for rank in (0, 1):
        np.testing.assert_array_equal(homes[rank], a[:, layout.columns(rank)])


@pytest.mark.parametrize("block_dtype", [np.float64, np.float32], ids=str)
@pytest.mark.parametrize("bad", [None, np.nan, -np.inf], ids=str)
def test_a_device_part_of_its_own_blocks_is_copied_and_checked(block_dtype, bad, rng):
    """A rank holding only its own block columns gets them side by side in a new array of
    their kind's pool, checked as they are copied (converted first where they are of another
    dtype), an inf or a NaN refused by name, the user's blocks untouched, and the transport
    never needed."""
    from hybridla.scheduler.plan import make_plan
    m, n, nb = 30, 45, 10
    a = random_matrix(m, n, np.float64, rng).astype(block_dtype)
    if bad is not None:
        a[7, 32] = bad  # block column 3: rank 1's
    layout = _dist.BlockColumns(m, n, nb, 2)
    ops = _DeviceLikeHost()
    plan = make_plan(ops._host, m, n, np.float64, routine="lu", nb=nb)

    class Unconnected:
        def get(self):
            raise AssertionError("the transport was asked for")

    for rank in (0, 1):
        held = [a[:, j * nb:(j + 1) * nb].copy() for j in range(5) if layout.owner(j) == rank]
        kept = [block.copy() for block in held]
        job = dict(shape=(m, n), dtype=np.float64, name="a", layout=layout,
                   check_finite=True, device_meta=None)
        if bad is not None and rank == 1:
            with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
                _dist_parts.device_part(ops, plan, job, held, rank, Unconnected())
        else:
            _, home = _dist_parts.device_part(ops, plan, job, held, rank, Unconnected())
            np.testing.assert_array_equal(home, a[:, layout.columns(rank)].astype(np.float64))
            assert home.dtype == np.float64
        for block, before in zip(held, kept):
            np.testing.assert_array_equal(block, before)
        # unchecked, the same blocks are taken as they are
        _, home = _dist_parts.device_part(ops, plan, dict(job, check_finite=False), held, rank,
                                          Unconnected())
        np.testing.assert_array_equal(home, a[:, layout.columns(rank)].astype(np.float64))
    assert ops.pooled and all(ops.pooled)  # the parts from the chunks' own pool


def test_connecting_hands_over_the_transport_or_what_connecting_raised():
    """The transport connects in a thread of its own from the start (scheduler/cluster's
    long-lived task): `connected` waits for it; a failure to connect is raised where the
    transport is asked for; close closes a made one, and one never made is nothing to close."""
    from hybridla.scheduler.transport import Connecting, connected

    release = threading.Event()

    class Made:
        closed = False

        def close(self):
            self.closed = True

    made = Made()

    def slow():
        release.wait(5)
        return made

    connection = Connecting(slow)
    assert connection._thread.is_alive()  # the caller goes on meanwhile
    release.set()
    assert connected(connection) is made and connected(made) is made
    connection.close()
    assert made.closed

    def refused():
        raise ConnectionRefusedError("no peer")

    failing = Connecting(refused)
    with pytest.raises(ConnectionRefusedError, match="no peer"):
        connected(failing)
    failing.close()  # nothing made, nothing to close


# -- a worker's host-resident part: every final block goes home, once ----------------------------

class _WindowsOfTheStub:
    """The host backend, except that a window of the streamed stub is the stub itself (the
    recorders only take windows for their regions and results, which a recording leaves alone)."""

    def __init__(self, stub):
        from hybridla.backend import get_backend
        self._host, self._stub = get_backend("host"), stub
        self.has_device = True

    def window(self, A, r0, r1, c0, c1):
        return A if A is self._stub else self._host.window(A, r0, r1, c0, c1)

    def __getattr__(self, name):
        return getattr(self._host, name)


@pytest.mark.parametrize("routine", ["getrf", "potrf", "geqrf"])
@pytest.mark.parametrize("shape", [(45, 45), (45, 29), (29, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("rank", [0, 1])
def test_a_host_resident_part_goes_home_once_after_its_last_write(routine, shape, rank):
    """On a device backend each rank's part is a streamed store (uploaded while the first
    steps run, the final blocks downloaded while the rest goes on): the recorded graph of
    each driver sends every element of the rank's part home exactly once, after its last
    write, and the store's residency agrees."""
    from hybridla.lapack.geqrf_dist import record_geqrf_dist
    from hybridla.lapack.getrf_dist import record_getrf_dist
    from hybridla.lapack.potrf_dist import record_potrf_dist
    from _lapack_checks import StreamedStoreStub, assert_downloads_cover_once
    m, n = shape if routine != "potrf" else (shape[0], shape[0])
    layout = _dist.BlockColumns(m, n, 8, 2)
    A = StreamedStoreStub(m, layout.width(rank))
    ops = _WindowsOfTheStub(A)
    record = {"getrf": record_getrf_dist, "potrf": record_potrf_dist,
              "geqrf": record_geqrf_dist}[routine]
    graph = _recorded(record, {"getrf": "lu", "potrf": "cho", "geqrf": "qr"}[routine], layout,
                      rank, ops, ops._host, A)
    if routine == "potrf":  # the strict upper triangle is never written: it stays home
        assert A.residency.home_is_current(), A.residency
        return
    assert_downloads_cover_once(graph, m, layout.width(rank), A)


def _recorded(record, routine, layout, rank, ops, host, A):
    """The graph that the distributed driver `record` records for `rank` of `layout`, its
    part A seen through `ops` (nothing runs), the plan and the panel slots the host backend
    `host`'s."""
    from hybridla.scheduler import TaskGraph
    from hybridla.scheduler.plan import make_plan
    plan = make_plan(host, layout.m, layout.n, np.float64, routine=routine, nb=layout.nb,
                     lookahead=1)
    run = _dist.WorkerRun(ops, plan, HostTransport.__new__(HostTransport), layout, rank, A)
    slots = _dist.PanelSlots(host, layout.m, layout.nb, np.float64, 3)
    graph = TaskGraph()
    try:
        for _ in record(graph, run, slots):
            pass
    finally:
        slots.close()
    return graph


def _recorded_on_host(record, routine, rank, m=45, n=45, nb=8):
    """_recorded on the host backend, a 45 x 45 matrix in blocks of 8 over 2 ranks; and the
    layout."""
    from hybridla.backend import get_backend
    host = get_backend("host")
    layout = _dist.BlockColumns(m, n, nb, 2)
    A = host.matrix(m, layout.width(rank), np.float64, nb)
    try:
        return _recorded(record, routine, layout, rank, host, host, A), layout
    finally:
        A.close()


@pytest.mark.parametrize("rank", [0, 1])
def test_lu_swaps_left_of_the_panel_follow_the_steps_update(rank):
    """getrf_dist's interchanges of a rank's finished columns (swap_left) follow the step's
    last update on the update lane: recorded before it, they were ready once the broadcast was
    enqueued and went ahead of the updates of columns still arriving in the stream."""
    from hybridla.lapack.getrf_dist import record_getrf_dist
    graph, _ = _recorded_on_host(record_getrf_dist, "lu", rank)
    swaps = [t for t in graph.tasks if t.name == "swap_left"]
    assert swaps
    for swap in swaps:
        updates = [t.index for t in graph.tasks
                   if t.name == "update" and t.step == swap.step and t.lane == "gpu:update"]
        if updates:
            assert max(updates) < swap.index and max(updates) in swap.deps, swap


@pytest.mark.parametrize("rank", [0, 1])
def test_qr_next_owner_updates_its_next_panel_column_alone_first(rank):
    """geqrf_dist on the next panel's owner: the rest of the step's update follows its
    look-ahead column (the next panel's), which so runs alone; the other rank's does not
    wait for its look-ahead column."""
    from hybridla.lapack.geqrf_dist import record_geqrf_dist
    graph, layout = _recorded_on_host(record_geqrf_dist, "qr", rank)
    checked = 0
    for step in range(layout.blocks - 1):
        column = [t.index for t in graph.tasks
                  if t.name == "update" and t.step == step and t.lane == "gpu:panel"]
        rest = [t for t in graph.tasks
                if t.name == "update" and t.step == step and t.lane == "gpu:update"]
        if not column or not rest:
            continue
        follows = [column[0] in t.deps for t in rest]
        assert follows == [layout.owner(step + 1) == rank] * len(rest), step
        checked += 1
    assert checked


# -- where the block columns live: the layout follows the data ------------------------------------

def test_block_columns_owned_anywhere_index_alike():
    """Any ownership map: each rank's columns, their local starts and global indices agree
    with one another and cover the matrix once."""
    rng = np.random.default_rng(5)
    layout = _dist.BlockColumns(30, 53, 8, 3, tuple(int(r) for r in rng.integers(0, 3, 7)))
    seen = np.zeros(53, int)
    for rank in range(3):
        cols = layout.columns(rank)
        assert len(cols) == layout.width(rank)
        seen[cols] += 1
        for local, col in enumerate(cols):
            assert layout.global_column(rank, local) == col
        for j in layout.owned(rank):
            assert cols[layout.local_start(rank, j)] == j * 8
    np.testing.assert_array_equal(seen, 1)


def test_layout_near_the_holders_moves_only_what_balance_needs():
    """Blocks held cyclically stay where they are; all on one worker, or each half on one,
    move until the trailing updates are within the tolerance of an even split, and no
    further (cyclic ownership is the yardstick: within it)."""
    m = n = 64 * 16
    cyclic = _dist.BlockColumns(m, n, 16, 2)
    assert cyclic.imbalance(n) <= 1.05
    held = [j % 2 for j in range(64)]
    assert list(_dist.BlockColumns.near(m, n, 16, 2, held, n).owners) == held
    for held, most in (([0] * 64, 32), ([0] * 32 + [1] * 32, 32), ([-1] * 64, 64)):
        layout = _dist.BlockColumns.near(m, n, 16, 2, held, n)
        assert layout.imbalance(n) <= 1.1, (held, layout.owners)
        moved = sum(a != b for a, b in zip(held, layout.owners))
        assert moved <= most, (held, layout.owners)  # a block held nowhere "moves" anyway


def test_workers_of_one_host_share_its_staging_rate():
    """The workers of one machine stage their parts at once: each one's upload is modelled at
    its share of the host's staging rate (plan.CostModel.sharing_host), so that the steps
    whose updates the upload hides are as many as its real length asks for; the pinned-link
    limit and the updates' rates stay the machine's."""
    from hybridla import config
    from hybridla.scheduler.cluster import workers_per_host
    from hybridla.scheduler.plan import CostModel
    assert workers_per_host(["tcp://10.0.0.1:4000", "tcp://10.0.0.2:4000",
                             "tcp://10.0.0.1:4001"]) == [2, 1, 2]
    alone = CostModel(config.device_table("NVIDIA H100 80GB HBM3"), np.float64)
    shared = alone.sharing_host(2)
    part = 120000 * 60000 * 8
    assert shared.upload_seconds(part, "staged") == pytest.approx(
        2 * alone.upload_seconds(part, "staged"))
    assert shared.gpu_update(1e12) == alone.gpu_update(1e12)
    assert shared.upload_seconds(part, "pageable") == alone.upload_seconds(part, "pageable")


def test_a_device_part_arriving_cuts_only_the_steps_its_copy_spans():
    """A device part's chunks are copied in by the run's first tasks (_dist.record_arrivals),
    modelled at the device's copy rate (d2d_gbps): a worker's 17 GB at n = 65536 arrives
    within the first step's update, so only that step's update is cut into groups that
    follow the copies; at the host's staging rate it would be several steps of small
    groups."""
    from hybridla import config
    from hybridla.scheduler.plan import CostModel
    from hybridla.scheduler.transfers import steps_hidden_by_upload
    from hybridla.update import lu as lu_update
    cost = CostModel(config.device_table("NVIDIA H100 80GB HBM3"), np.float64)
    part = types.SimpleNamespace(m=65536, n=32768, dtype=np.dtype(np.float64))
    plan = types.SimpleNamespace(nb=768, cost=cost)

    def step_update_flops(k0, k1):  # getrf_dist's, for one of 2 workers
        return lu_update.update_flops(part.m, k0, k1, k1, part.n)
    assert cost.upload_seconds(part.m * part.n * 8, "device") == pytest.approx(
        part.m * part.n * 8 / 750e9)
    assert steps_hidden_by_upload(part, plan, "device", step_update_flops) == 1
    assert steps_hidden_by_upload(part, plan, "staged", step_update_flops) > 1


def test_a_device_worker_runs_its_share_as_one_call_on_its_device():
    """A GPU worker's share goes through its backend's `call` (others' calls on the device
    wait; the pool is trimmed to device.pool_max_bytes at its end), as a one-GPU call does;
    a host worker's through nothing."""
    import contextlib

    from hybridla import config
    from hybridla.scheduler.cluster import _device_call

    class Device:
        given = []

        @contextlib.contextmanager
        def call(self, pool_max_bytes=None):
            self.given.append(pool_max_bytes)
            yield self

    with config.set({"device.pool_max_bytes": 12345}):
        with _device_call(Device(), "cuda"):
            pass
        with _device_call(Device(), "host"):
            pass
    assert Device.given == [12345]


def test_gpu_jobs_started_from_one_process_take_turns():
    """Two threads starting GPU jobs at once: the second starts once the first has ended
    (each worker's share holds its device, so two jobs at once could each hold one worker's
    and wait for the other's); host jobs run side by side."""
    from hybridla.scheduler.cluster import jobs_in_turn
    for backend, overlap in (("cuda", False), ("host", True)):
        inside, most, lock = [0], [0], threading.Lock()
        both_started = threading.Barrier(2)

        def job():
            both_started.wait()
            with jobs_in_turn(backend):
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.05)
                with lock:
                    inside[0] -= 1

        threads = [threading.Thread(target=job) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (most[0] == 2) == overlap, backend
