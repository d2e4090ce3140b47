"""Trust: threads, process state, device memory, validation before work, and scipy's behaviour at
the edges of lu_factor / lu_solve / solve / cho_factor / cho_solve / cholesky.

Each test here failed on the code before issue 28's fixes (the defect it names is in its
docstring). Numeric bounds are LAPACK's ratios in units of the working precision's eps.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import warnings

from concurrent.futures import ThreadPoolExecutor as _ThreadPool

import numpy as np
import pytest
import scipy.linalg
from _lapack_checks import (DTYPES, eps_of, getrf_ratio, matrix_with_condition, random_matrix,
                            solve_backward_error, to_device, to_host)
from threadpoolctl import threadpool_info

import hybridla
from hybridla import LinAlgError, LinAlgWarning


def _spd(n, dtype, rng):
    g = random_matrix(n, n, dtype, rng).astype(np.complex128)
    h = g @ g.conj().T
    h = (h + h.conj().T) / 2 + n * np.eye(n)  # exactly Hermitian, also once rounded
    return (h if np.dtype(dtype).kind == "c" else h.real).astype(dtype)


def _process_state():
    return sys.getswitchinterval(), [(i["internal_api"], i["num_threads"])
                                     for i in threadpool_info()]


# -- threads ----------------------------------------------------------------------------------
def _mixed_calls(backend, rng, device_kind=None):
    """One round of mixed routines on small matrices; each returns (name, ratio) with ratio a
    LAPACK-style residual in units of eps that must stay below 30."""
    dtype = DTYPES[rng.integers(len(DTYPES))]
    n = int(rng.integers(40, 130))
    a = random_matrix(n, n, dtype, rng)
    b = random_matrix(n, 2, dtype, rng)
    spd = _spd(n, dtype, rng)
    choice = int(rng.integers(5))
    move = (lambda x: to_device(np.asfortranarray(x), device_kind)) if device_kind else \
        (lambda x: x)
    if choice == 0:
        lu, piv = hybridla.lu_factor(move(a), backend=backend, nb=32)
        return "lu_factor", getrf_ratio(a, to_host(lu), to_host(piv))
    if choice == 1:
        x = hybridla.solve(move(a), move(b), backend=backend, nb=32)
        return "solve", solve_backward_error(a, to_host(x), b)
    if choice == 2:
        c = hybridla.cho_factor(move(spd), backend=backend, nb=32)
        x = hybridla.cho_solve(c, move(b), backend=backend)
        return "cho_solve", solve_backward_error(spd, to_host(x), b)
    if choice == 3:
        q, r = hybridla.qr(move(a), backend=backend, nb=32)
        q, r = to_host(q), to_host(r)
        return "qr", np.linalg.norm(q @ r - a, 1) / (n * np.linalg.norm(a, 1) * eps_of(dtype))
    x = hybridla.solve(move(spd), move(b), assume_a="pos", backend=backend, nb=32)
    return "solve pos", solve_backward_error(spd, to_host(x), b)


def _hammer(backend, device_kind=None, threads=8, calls=20):
    before = _process_state()
    failures, results = [], []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(calls):
                results.append(_mixed_calls(backend, rng, device_kind))
        except BaseException as exc:  # noqa: BLE001 - reported below, with its thread
            failures.append(repr(exc))
    pool = [threading.Thread(target=worker, args=(seed,)) for seed in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert not failures, failures[:3]
    assert len(results) == threads * calls
    worst = max(results, key=lambda r: r[1])
    assert worst[1] < 30, worst
    assert _process_state() == before


def test_eight_threads_mixed_routines(backend):
    """Two threads at once crashed (`switch interval must be strictly positive`) and left the
    switch interval shrunk and BLAS at one thread for the whole process."""
    _hammer(backend)


@pytest.mark.cuda
def test_eight_threads_device_arrays(device_kind):
    if device_kind == "pycuda":
        pytest.skip("a PyCUDA GPUArray needs a context current in the thread that makes it: the "
                    "test's own threads have none (hybridla's calls do not need one)")
    _hammer("cuda", device_kind, calls=10)


def test_blas_threads_restored_after_concurrent_runs():
    """Two runs overlapping each restored 'their' limit: the later restore left one thread."""
    original = _process_state()
    a = np.random.default_rng(1).standard_normal((400, 400))
    barrier = threading.Barrier(4)

    def call():
        barrier.wait()
        hybridla.lu_factor(a, backend="host", nb=16)
    pool = [threading.Thread(target=call) for _ in range(4)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert _process_state() == original


_ONE_CALL_THREAD = textwrap.dedent("""
    import threading, numpy as np, hybridla, sys
    kind = sys.argv[1]
    a = np.random.default_rng(0).standard_normal((300, 300))
    if kind == "cupy":
        import cupy
        a = cupy.asarray(a, order="F")
    out = []
    t = threading.Thread(target=lambda: out.append(hybridla.lu_factor(a, backend=sys.argv[2])))
    t.start(); t.join()
    assert len(out) == 1
    print("main thread goes on")
""")


@pytest.mark.parametrize("kind, backend_name", [
    ("numpy", "host"),
    pytest.param("numpy", "cuda", marks=pytest.mark.cuda),
    pytest.param("cupy", "cuda", marks=pytest.mark.cuda)])
def test_thread_that_calls_once_and_ends(kind, backend_name):
    """On the GPU machine a thread that called lu_factor once and ended aborted the process
    (PyCUDA: context stack not empty upon module cleanup, exit 134)."""
    if backend_name == "cuda":
        from conftest import _skip_without_cuda
        _skip_without_cuda()
        if kind == "cupy":
            pytest.importorskip("cupy")
    done = subprocess.run([sys.executable, "-c", _ONE_CALL_THREAD, kind, backend_name],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "main thread goes on" in done.stdout


# -- device memory ----------------------------------------------------------------------------
@pytest.mark.cuda
def test_cupys_cached_blocks_are_memory_a_call_can_have(cuda_backend):
    """CuPy keeps what a process freed (a Dask worker's chunks of the call before) in its
    pool: the device's memory is then almost all CuPy's cache. hybridla counts that cache as
    free memory, and an allocation the driver refuses is tried again after it is freed."""
    cupy = pytest.importorskip("cupy")
    import pycuda.driver as drv
    ops = hybridla.backend.get_backend("cuda")
    ops.free_cached()
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    with ops.active():
        driver_free = drv.mem_get_info()[0]
    held = cupy.empty(driver_free - (256 << 20), dtype=np.uint8)  # 256 MiB left
    del held  # freed into CuPy's pool, not to the driver
    try:
        assert pool.free_bytes() >= driver_free - (256 << 20)
        # the cache is counted: without it, a few hundred MiB (CuPy's own use on its first
        # array, 70 MB on the H100, is not)
        assert ops.free_memory() >= pool.free_bytes()
        allocation = ops.alloc(1 << 30, True)  # the driver alone has 256 MiB
        assert pool.free_bytes() == 0
        ops.free(allocation)
    finally:
        ops.free_cached()
        pool.free_all_blocks()


@pytest.mark.cuda
@pytest.mark.parametrize("routine", ["lu_factor", "cho_factor", "geqrf", "hessenberg",
                                     "solve_mixed", "solve"])
def test_device_memory_comes_back(cuda_backend, routine, rng):
    """After a CPU-interface lu_factor at n = 32768, 8.8 of 9.3 GiB stayed in use while
    cached_bytes() said 0: get_backend("auto") and get_backend("cuda") were two objects with two
    pools. Now what a call keeps is the pool's cache, reported, capped, and given back."""
    import pycuda.driver as drv
    ops = hybridla.backend.get_backend("cuda")
    assert hybridla.backend.get_backend("auto") is ops
    n = 1536
    a = _spd(n, np.float64, rng)
    call = {"lu_factor": lambda: hybridla.lu_factor(a),
            "cho_factor": lambda: hybridla.cho_factor(a),
            "geqrf": lambda: hybridla.geqrf(a),
            "hessenberg": lambda: hybridla.hessenberg(a, calc_q=True),
            "solve_mixed": lambda: hybridla.solve_mixed(a, np.ones(n)),
            "solve": lambda: hybridla.solve(a, np.ones(n))}[routine]
    call()  # handles, kernels and lanes exist from here on

    def used():
        with ops.active():
            free, total = drv.mem_get_info()
        return total - free
    ops.free_cached()
    before = used()
    with hybridla.config.set({"device.pool_max_bytes": 1 << 40}):  # keep everything cached
        call()
    assert ops.allocated_bytes() == 0
    kept = ops.cached_bytes()
    assert kept > 0
    slack = 64 << 20  # the driver's and cuBLAS's own small allocations
    assert used() - before <= kept + slack
    ops.free_cached()
    assert ops.cached_bytes() == 0
    assert used() - before <= slack
    with hybridla.config.set({"device.pool_max_bytes": 0}):
        call()
    assert ops.cached_bytes() == 0 and used() - before <= slack


# -- validation before work -------------------------------------------------------------------
def test_solve_checks_b_before_factoring(monkeypatch):
    """solve factored a before checking b: with overwrite_a=True a call rejected for b's shape or
    a NaN in b had destroyed a, and spent the factorization on a shape error."""
    import hybridla._decomp_lu as lu_module
    a = np.asfortranarray(np.random.default_rng(2).standard_normal((50, 50)))
    kept = a.copy()

    def no_factorization(*args, **kwargs):
        raise AssertionError("factored before validating")
    monkeypatch.setattr(lu_module, "getrf", no_factorization)
    # (a 3-D b is a stack of 2 x 1 right-hand sides, as scipy >= 1.15 reads it: 2 rows, not 50)
    for b, error in [(np.ones(49), "b must have 50 rows"), (np.full(50, np.nan), "b must not"),
                     (np.ones((50, 2, 1)), "b must have 50 rows")]:
        with pytest.raises(ValueError, match=error):
            hybridla.solve(a, b, overwrite_a=True, backend="host")
        np.testing.assert_array_equal(a, kept)


@pytest.mark.parametrize("call", [
    lambda a: hybridla.cho_factor(a, lower="yes"),
    lambda a: hybridla.cholesky(a, lower="False"),
    lambda a: hybridla.cho_solve((a, "yes"), np.ones(len(a))),
    lambda a: hybridla.solve(a, np.ones(len(a)), lower="yes"),
    lambda a: hybridla.solve(a, np.ones(len(a)), transposed="no"),
    lambda a: hybridla.lu_factor(a, overwrite_a="False"),
    lambda a: hybridla.lu_solve(hybridla.lu_factor(a), np.ones(len(a)), overwrite_b="yes"),
    lambda a: hybridla.lu_solve(hybridla.lu_factor(a), np.ones(len(a)), trans=True),
])
def test_flags_are_checked_as_scipy_does(call):
    """lower="yes" / lower="False" were taken as true; scipy raises."""
    a = _spd(6, np.float64, np.random.default_rng(3))
    with pytest.raises(ValueError, match=r"(lower|transposed|overwrite_a|overwrite_b|trans) "
                                         r"must be"):
        call(a)


@pytest.mark.parametrize("a_dtype, b_dtype", [(np.float32, np.float64),
                                              (np.complex64, np.float64),
                                              (np.float32, np.complex128)])
@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_solve_computes_in_the_common_precision(a_dtype, b_dtype, assume_a, backend):
    """float32 a with float64 b returned float64 with float32's accuracy (5e-7)."""
    rng = np.random.default_rng(4)
    n = 90
    a = (_spd(n, a_dtype, rng) if assume_a == "pos" else
         matrix_with_condition(n, n, 1e3, a_dtype, rng))
    b = random_matrix(n, 3, b_dtype, rng)
    x = hybridla.solve(a, b, assume_a=assume_a, backend=backend)
    reference = scipy.linalg.solve(a, b, assume_a=assume_a)
    assert x.dtype == reference.dtype
    # the backward error of the system a and b define, in the common precision's eps
    assert solve_backward_error(a, x, b, dtype=x.dtype) < 30


def test_solve_warns_on_ill_conditioned_matrices(backend):
    """No condition estimate existed, so solve never gave scipy's LinAlgWarning."""
    hilbert = scipy.linalg.hilbert(12)  # condition 1.7e16
    for assume_a in ("gen", "pos"):
        with pytest.warns(LinAlgWarning, match="Ill-conditioned matrix"):
            hybridla.solve(hilbert, np.ones(12), assume_a=assume_a, backend=backend)
    well = _spd(60, np.float64, np.random.default_rng(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LinAlgWarning)
        hybridla.solve(well, np.ones(60), backend=backend)
        hybridla.solve(well, np.ones(60), assume_a="pos", backend=backend)


def test_overflowing_factorization_is_named(backend):
    """An LU that overflowed was blamed on the input ("lu must not contain infs")."""
    a = np.array([[1.0, 1.5e308], [-1.0, 1.5e308]])
    with pytest.raises(LinAlgError, match="overflowed"):
        hybridla.solve(a, np.ones(2), backend=backend)


def test_subnormal_pivot_solves_as_lapack(backend):
    """lu_solve with a subnormal pivot returned NaN where LAPACK's getrs gives the quotient."""
    if backend == "cuda":
        pytest.skip("host lu_solve only (device factors solve on the device)")
    a = np.diag([1e-310, 1.0, 2.0])
    a[0, 1] = 1.0
    lu = scipy.linalg.lu_factor(a)
    for b in (np.ones(3), np.ones((3, 2))):
        expected = np.stack([scipy.linalg.lu_solve(lu, column) for column in
                             np.atleast_2d(b.T)], axis=-1).reshape(b.shape)
        np.testing.assert_array_equal(hybridla.lu_solve(lu, b, backend=backend), expected)


# -- empty inputs and cleaned results ------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_shape", [(0,), (0, 3)])
def test_empty_systems_as_scipy(dtype, b_shape, backend):
    """A 0 x 0 system with a 1-D b crashed (`cannot reshape array of size 0`)."""
    a, b = np.empty((0, 0), dtype), np.empty(b_shape, dtype)
    cases = [
        (hybridla.solve(a, b, backend=backend), scipy.linalg.solve(a, b)),
        (hybridla.lu_solve(hybridla.lu_factor(a, backend=backend), b),
         scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), b)),
        (hybridla.cho_solve(hybridla.cho_factor(a, backend=backend), b),
         scipy.linalg.cho_solve(scipy.linalg.cho_factor(a), b)),
        (hybridla.cholesky(a, backend=backend), scipy.linalg.cholesky(a)),
        (hybridla.lu_factor(a, backend=backend)[0], scipy.linalg.lu_factor(a)[0]),
        (hybridla.lu_factor(a, backend=backend)[1], scipy.linalg.lu_factor(a)[1]),
    ]
    for ours, theirs in cases:
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    integers = hybridla.solve(np.empty((0, 0), int), np.empty(b_shape, int), backend=backend)
    assert integers.shape == b_shape and integers.dtype == np.float64


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_overwrite_a_zeroes_the_other_triangle(dtype, lower, backend):
    """cholesky(overwrite_a=True) returned a factor whose other triangle still held the input."""
    a = np.asfortranarray(_spd(70, dtype, np.random.default_rng(6)))
    original = a.copy()
    c = hybridla.cholesky(a, lower=lower, overwrite_a=True, backend=backend, nb=16)
    other = np.triu(c, 1) if lower else np.tril(c, -1)
    assert not other.any()
    factor = c if lower else c.conj().T
    residual = np.linalg.norm(factor @ factor.conj().T - original, 1)
    assert residual / (70 * np.linalg.norm(original, 1) * eps_of(dtype)) < 30
    if backend == "host":
        assert np.shares_memory(c, a)  # in place, as scipy's


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_host_copy_by_columns_in_threads(monkeypatch, order, dtype):
    """The copy a CPU-interface call makes of a matrix it may not overwrite (a C-ordered one is
    transposed on the way) is cut into column blocks over threads when large: the same bits as
    a plain assignment, whatever the source's order and dtype."""
    from hybridla import _common
    from hybridla.backend.host import transfers
    monkeypatch.setattr(transfers, "PARALLEL_COPY_BYTES", 0)
    monkeypatch.setattr(transfers.os, "cpu_count", lambda: 3)
    pools = []
    monkeypatch.setattr(transfers, "ThreadPoolExecutor",
                        lambda n: pools.append(n) or _ThreadPool(n))
    source = (np.random.default_rng(7).standard_normal((37, 50)) * 100).astype(dtype)
    source = np.asarray(source, order=order)
    working = np.dtype(np.float64 if dtype == np.int64 else dtype)
    read_from, result = _common._host_source_and_result(source, working, False, True)
    assert result.flags.f_contiguous and result.dtype == working and read_from is result
    np.testing.assert_array_equal(result, source.astype(working))
    assert pools == [3]  # the copy went by threads
    a = np.asarray(_spd(64, np.float64, np.random.default_rng(8)), order="C")
    lu, piv = hybridla.lu_factor(a, backend="host", nb=8)
    assert getrf_ratio(a, lu, piv) < 30


# -- nothing of a call stays behind it ---------------------------------------------------------
@pytest.mark.parametrize("routine", ["lu_factor", "cho_factor", "qr"])
def test_a_call_keeps_no_reference_to_the_arrays_it_took_or_returned(backend, routine):
    """Large enough (72 MB) that the cuda backend stages the matrix through its pinned slots.
    A reference left in a cycle (a store, a task's closure, a trace) would hold an n x n array
    until the garbage collector's next full pass: 18 GiB each at n = 49152."""
    import gc
    n = 3000
    a = random_matrix(n, n, np.float64, np.random.default_rng(7))
    if routine == "cho_factor":
        a = a @ a.T + n * np.eye(n)
    a = np.asfortranarray(a)
    call = {"lu_factor": lambda: hybridla.lu_factor(a, backend=backend),
            "cho_factor": lambda: hybridla.cho_factor(a, backend=backend),
            "qr": lambda: hybridla.qr(a, backend=backend)}[routine]
    def holders(array):  # what refers to it: a dict by the keys it holds it under
        return [[k for k, v in r.items() if v is array] if isinstance(r, dict)
                else type(r).__name__ for r in gc.get_referrers(array)]

    gc.collect()
    held_a = sys.getrefcount(a)
    gc.disable()
    try:
        first, _ = call()
        assert sys.getrefcount(first) == 2, holders(first)
        assert sys.getrefcount(a) == held_a, holders(a)
    finally:
        gc.enable()
