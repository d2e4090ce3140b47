"""Stacks of matrices (..., M, N), as scipy.linalg >= 1.15 takes them (issue 29, item 1): lu_factor,
lu_solve, solve, cholesky, cho_factor, cho_solve, qr, lstsq, hessenberg.

Host stacks on every backend, both member paths (small members straight to LAPACK, and the 2-D
engine, forced by setting _stacked.HOST_LAPACK_UP_TO to 0); device stacks (marker ``cuda``) as
CuPy, PyTorch and PyCUDA arrays; and the device side once more on an emulated device, in CI
(tests/_batched_emulation.py: cuda/batched.py over NumPy emulations of its kernels and of
cuBLAS / cuSOLVER). Every member checked as LAPACK's testers check it (ratios < 30), the
shapes, dtypes and errors against scipy's own batched answers where scipy has them.
"""
import math
import warnings

import numpy as np
import pytest
import scipy
import scipy.linalg
from _lapack_checks import (
    DTYPES,
    eps_of,
    factorization_ratio,
    getrf_ratio,
    lstsq_forward_ratio,
    orthogonality_ratio,
    potrf_ratio,
    random_matrix,
    residues_ratio,
    solve_backward_error,
    to_host,
    wide,
)
from scipy.linalg import LinAlgError, LinAlgWarning

import hybridla
from hybridla import _stacked

THRESH = 30.0  # LAPACK's testers' threshold for the test ratios
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
SCIPY_BATCHES = tuple(int(p) for p in scipy.__version__.split(".")[:2]) >= (1, 15)
needs_scipy_batches = pytest.mark.skipif(not SCIPY_BATCHES,
                                         reason="scipy < 1.15 has no batched linalg")
BATCHES = [(3,), (2, 3), (0,)]
BATCH_IDS = ["3", "2x3", "0"]


@pytest.fixture(params=["lapack", "engine"])
def member_path(request, monkeypatch):
    """Host members: straight to LAPACK (small ones), or through the 2-D engine."""
    if request.param == "engine":
        monkeypatch.setattr(_stacked, "HOST_LAPACK_UP_TO", 0)
    return request.param


def stack(batch, m, n, dtype, rng):
    return random_matrix(math.prod(batch) * m, n, dtype, rng).reshape(tuple(batch) + (m, n))


def hpd_stack(batch, n, dtype, rng):
    x = wide(stack(batch, n, n, dtype, rng))
    a = x @ np.swapaxes(x, -1, -2).conj() + n * np.eye(n)
    return ((a + np.swapaxes(a, -1, -2).conj()) / 2).astype(dtype)


def members(batch):
    return list(np.ndindex(*batch))


def op(a, trans):
    return {0: a, 1: a.T, 2: a.conj().T}[trans]


# -- LU ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS)
@pytest.mark.parametrize("shape", [(6, 6), (7, 4), (4, 7)], ids=["square", "tall", "wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_factor(backend, member_path, dtype, shape, batch, rng):
    a = stack(batch, *shape, dtype, rng)
    saved = a.copy()
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=3)
    k = min(shape)
    assert lu.shape == a.shape and lu.dtype == np.dtype(dtype)
    assert piv.shape == tuple(batch) + (k,) and piv.dtype == np.int32
    for index in members(batch):
        assert getrf_ratio(a[index], lu[index], piv[index]) < THRESH
    np.testing.assert_array_equal(a, saved)
    if SCIPY_BATCHES and math.prod(batch):
        lu_ref, piv_ref = scipy.linalg.lu_factor(a)
        assert lu_ref.shape == lu.shape and lu_ref.dtype == lu.dtype
        if member_path == "lapack":  # the very LAPACK call scipy makes
            np.testing.assert_array_equal(lu, lu_ref)
            np.testing.assert_array_equal(piv, piv_ref)


@pytest.mark.parametrize("b_shape", [(6,), (6, 2), (3, 6, 2), (2, 1, 6, 1)],
                         ids=["vector", "matrix", "stack", "broadcast"])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_solve_broadcasts_b(backend, member_path, dtype, trans, b_shape, rng):
    a = stack((3,), 6, 6, dtype, rng)
    b = random_matrix(math.prod(b_shape) // 6, 6, dtype, rng).reshape(b_shape)
    lu, piv = hybridla.lu_factor(a, backend=backend)
    x = hybridla.lu_solve((lu, piv), b, trans=trans, backend=backend)
    batch = np.broadcast_shapes((3,), b_shape[:-2] if len(b_shape) > 1 else ())
    core = b_shape[-1:] if len(b_shape) == 1 else b_shape[-2:]
    assert x.shape == batch + core and x.dtype == np.dtype(dtype)
    a_b, b_b = np.broadcast_to(a, batch + (6, 6)), np.broadcast_to(b, batch + core)
    for index in members(batch):
        assert solve_backward_error(op(a_b[index], trans), x[index], b_b[index]) < THRESH
    if SCIPY_BATCHES:
        assert scipy.linalg.lu_solve((lu, piv), b, trans=trans).shape == x.shape


def test_lu_solve_mixed_precisions_and_empty(backend, rng):
    a = stack((2,), 5, 5, np.float32, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend)
    x = hybridla.lu_solve((lu, piv), np.ones((2, 5, 3), np.complex128), backend=backend)
    assert x.dtype == np.complex128  # where float32 and complex128 meet, as scipy
    assert hybridla.lu_solve((lu, piv), np.ones((2, 5, 0)), backend=backend).shape == (2, 5, 0)
    lu0, piv0 = hybridla.lu_factor(np.ones((0, 5, 5)), backend=backend)
    assert hybridla.lu_solve((lu0, piv0), np.ones(5), backend=backend).shape == (0, 5)


def test_lu_factor_singular_members_warn_as_scipy(backend):
    a = np.stack([np.eye(3), np.diag([1.0, 0.0, 1.0]), np.zeros((3, 3))])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lu, piv = hybridla.lu_factor(a, backend=backend)
    messages = [str(w.message) for w in caught if issubclass(w.category, LinAlgWarning)]
    assert messages == ["Diagonal number 2 is exactly zero. Singular matrix.",
                        "Diagonal number 1 is exactly zero. Singular matrix."]
    for index in members((3,)):
        assert getrf_ratio(a[index], lu[index], piv[index]) < THRESH


# -- solve ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["gen", "pos", "sym", "her", "upper triangular", "diagonal"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_solve_every_member(backend, member_path, dtype, transposed, form, rng):
    a = hpd_stack((3,), 6, dtype, rng)
    if form == "upper triangular":
        a = np.triu(a)
    elif form == "diagonal":
        a = a * np.eye(6, dtype=dtype)
    b = random_matrix(2 * 6, 2, dtype, rng).reshape(2, 1, 6, 2)  # batch (2, 1) against (3,)
    lower = form in ("pos", "sym", "her")
    x = hybridla.solve(a, b, lower=lower, assume_a=form, transposed=transposed,
                       backend=backend)
    assert x.shape == (2, 3, 6, 2) and x.dtype == np.dtype(dtype)
    for i, j in members((2, 3)):
        member = a[j]
        if form == "sym":
            member = np.tril(member) + np.tril(member, -1).T  # the lower triangle, symmetric
        system = member.T if transposed else member
        assert solve_backward_error(system, x[i, j], b[i, 0]) < THRESH
    x1 = hybridla.solve(a, b[0, 0, :, 0], lower=lower, assume_a=form, transposed=transposed,
                        backend=backend)
    assert x1.shape == (3, 6)
    np.testing.assert_allclose(x1, x[0, :, :, 0], rtol=100 * eps_of(dtype),
                               atol=100 * eps_of(dtype) * np.abs(x).max())


@needs_scipy_batches
def test_solve_shapes_as_scipy(backend, rng):
    a = stack((2, 3), 4, 4, np.float64, rng)
    for b in (np.ones(4), np.ones((4, 2)), np.ones((3, 4, 1)), np.ones((2, 1, 4, 5))):
        assert hybridla.solve(a, b, backend=backend).shape == scipy.linalg.solve(a, b).shape
    with pytest.raises(ValueError):
        hybridla.solve(a, np.ones((3, 4)), backend=backend)  # (3, 4): 3 rows, not 4 (scipy too)
    with pytest.raises(ValueError):
        scipy.linalg.solve(a, np.ones((3, 4)))


@pytest.mark.parametrize("form", ["gen", "pos"])
def test_solve_names_every_singular_member(backend, member_path, form):
    a = np.stack([np.eye(3) * 2] * 6).reshape(2, 3, 3, 3)
    a[0, 1] = np.diag([1.0, 0.0, 1.0]) if form == "gen" else -np.eye(3)
    a[1, 2] = 0
    with pytest.raises(LinAlgError, match=r"A singular matrix detected: slice\(s\) \[1, 5\] "
                                          r"are singular\."):
        hybridla.solve(a, np.ones(3), assume_a=form, backend=backend)


def test_solve_warns_once_naming_ill_conditioned_members(backend):
    a = np.stack([np.eye(3), np.diag([1.0, 1.0, 1e-17]), np.eye(3)])
    with pytest.warns(LinAlgWarning, match=r"An ill-conditioned matrix detected: slice 1 has "
                                           r"rcond = "):
        x = hybridla.solve(a, np.ones(3), backend=backend)
    np.testing.assert_allclose(x[0], 1)


# -- Cholesky ------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS)
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cholesky_and_cho_factor(backend, member_path, dtype, lower, batch, rng):
    a = hpd_stack(batch, 6, dtype, rng)
    marked = a.copy()
    other = np.triu_indices(6, 1) if lower else np.tril_indices(6, -1)
    marked[(...,) + other] = 7  # not read: comes back as it was in cho_factor's c
    c = hybridla.cholesky(marked, lower=lower, backend=backend, nb=2)
    cf, low = hybridla.cho_factor(marked, lower=lower, backend=backend, nb=2)
    assert c.shape == cf.shape == a.shape and c.dtype == cf.dtype == np.dtype(dtype)
    assert low is lower
    for index in members(batch):
        assert potrf_ratio(a[index], c[index], lower) < THRESH
        assert potrf_ratio(a[index], cf[index], lower) < THRESH
    assert not c[(...,) + other].any()
    assert (cf[(...,) + other] == 7).all()
    if SCIPY_BATCHES and math.prod(batch):
        assert scipy.linalg.cholesky(marked, lower=lower).shape == c.shape


@pytest.mark.parametrize("b_shape", [(6,), (3, 6, 3), (2, 1, 6, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cho_solve(backend, member_path, dtype, b_shape, rng):
    a = hpd_stack((3,), 6, dtype, rng)[None].repeat(2, axis=0)  # (2, 3, 6, 6)
    b = random_matrix(math.prod(b_shape) // 6, 6, dtype, rng).reshape(b_shape)
    factor = hybridla.cho_factor(a, lower=True, backend=backend)
    x = hybridla.cho_solve(factor, b, backend=backend)
    batch = np.broadcast_shapes((2, 3), b_shape[:-2] if len(b_shape) > 1 else ())
    core = b_shape[-1:] if len(b_shape) == 1 else b_shape[-2:]
    assert x.shape == batch + core
    b_b = np.broadcast_to(b, batch + core)
    for index in members(batch):
        assert solve_backward_error(a[index], x[index], b_b[index]) < THRESH
    if SCIPY_BATCHES:  # scipy's batched cho_factor gives lower as an array, one per member
        ref = scipy.linalg.cho_factor(a, lower=True)
        np.testing.assert_allclose(hybridla.cho_solve(ref, b, backend=backend), x,
                                   rtol=1e3 * eps_of(dtype), atol=1e3 * eps_of(dtype))


def test_cholesky_first_failing_member_raises_as_scipy(backend, member_path):
    a = np.stack([np.eye(3)] * 4)
    a[2] = np.diag([1.0, 1.0, -1.0])
    a[3] = np.diag([-1.0, 1.0, 1.0])
    with pytest.raises(LinAlgError, match="3-th leading minor of the array is not positive "
                                          "definite"):
        hybridla.cholesky(a, backend=backend)
    if SCIPY_BATCHES:  # scipy raises too; its wording differs between versions (1.17 on the
        with pytest.raises(LinAlgError):  # GPU machine: "Internal potrf return info = [3] ...")
            scipy.linalg.cholesky(a)


# -- QR ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["full", "economic", "r", "raw"])
@pytest.mark.parametrize("shape", [(7, 4), (4, 7)], ids=["tall", "wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_qr(backend, member_path, dtype, shape, mode, rng):
    batch = (2, 3)
    a = stack(batch, *shape, dtype, rng)
    m, n = shape
    k = min(m, n)
    result = hybridla.qr(a, mode=mode, backend=backend, nb=2)
    if mode == "r":  # a stack's R itself, as scipy's stacks give it
        r = result
        assert r.shape == batch + (m, n)
    elif mode == "raw":
        (factors, tau), r = result
        assert factors.shape == a.shape and tau.shape == batch + (k,)
        assert r.shape == batch + (k, n)
    else:
        q, r = result
        assert q.shape == batch + ((m, m) if mode == "full" else (m, k))
    for index in members(batch):
        if mode in ("full", "economic"):
            assert factorization_ratio(a[index], q[index], r[index]) < THRESH
            assert orthogonality_ratio(q[index]) < THRESH
        assert not np.tril(r[index], -1).any()
        rr = wide(r[index])[:k]
        gram = wide(a[index]).conj().T @ wide(a[index])  # R^H R = A^H A
        assert np.abs(rr.conj().T @ rr - gram).max() <= 100 * eps_of(dtype) * \
            np.abs(gram).max() * max(m, n)
    if SCIPY_BATCHES and mode != "raw":  # (scipy's stacks fail in "raw")
        ref = scipy.linalg.qr(a, mode=mode)
        ref = ref if isinstance(ref, (tuple, list)) else (ref,)
        got = result if isinstance(result, tuple) else (result,)
        assert [x.shape for x in got] == [x.shape for x in ref]


def test_qr_pivoting_and_empty_batches(backend, rng):
    a = stack((2, 2), 6, 4, np.float64, rng)
    q, r, p = hybridla.qr(a, pivoting=True, backend=backend)
    assert p.shape == (2, 2, 4) and p.dtype == np.int32
    for index in members((2, 2)):
        assert factorization_ratio(a[index][:, p[index]], q[index], r[index]) < THRESH
        assert (np.abs(np.diagonal(r[index]))[:-1] >= np.abs(np.diagonal(r[index]))[1:]).all()
    if SCIPY_BATCHES:
        np.testing.assert_array_equal(p, scipy.linalg.qr(a, pivoting=True)[2])
    empty = np.ones((0, 5, 3))
    q, r = hybridla.qr(empty, backend=backend)
    assert q.shape == (0, 5, 5) and r.shape == (0, 5, 3)
    assert hybridla.qr(empty, mode="r", backend=backend).shape == (0, 5, 3)
    (f, tau), r = hybridla.qr(empty, mode="raw", backend=backend)
    assert f.shape == (0, 5, 3) and tau.shape == (0, 3) and r.shape == (0, 3, 3)
    q, r, p = hybridla.qr(empty, pivoting=True, mode="economic", backend=backend)
    assert q.shape == (0, 5, 3) and p.shape == (0, 3) and p.dtype == np.int32


# -- least squares -------------------------------------------------------------------------------
@pytest.mark.parametrize("nrhs", [None, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_overdetermined(backend, member_path, dtype, nrhs, rng):
    batch = (2, 3)
    a = stack(batch, 9, 4, dtype, rng)
    # (9,): the same vector for every member; (3, 9, nrhs): broadcast along the first axis
    b = random_matrix(9, 1, dtype, rng)[:, 0] if nrhs is None else \
        random_matrix(3 * 9, nrhs, dtype, rng).reshape(3, 9, nrhs)
    x, residues, rank, s = hybridla.lstsq(a, b, backend=backend, nb=2)
    core = (4,) if nrhs is None else (4, nrhs)
    assert x.shape == batch + core and x.dtype == np.dtype(dtype) and s is None
    assert rank.shape == batch and (rank == 4).all()
    assert residues.shape == batch + core[1:]
    b_b = np.broadcast_to(b, batch + ((9,) if nrhs is None else (9, nrhs)))
    for index in members(batch):
        x_ref, res_ref, _, _ = scipy.linalg.lstsq(a[index], b_b[index])
        assert lstsq_forward_ratio(a[index], b_b[index], x[index], x_ref, dtype) < THRESH
        assert residues_ratio(a[index], b_b[index], residues[index], res_ref, dtype) < THRESH
    if SCIPY_BATCHES:
        ref = scipy.linalg.lstsq(a, b)
        assert ref[0].shape == x.shape and np.shape(ref[1]) == residues.shape


def test_lstsq_underdetermined_rank_deficient_and_empty(backend, member_path, rng):
    a = stack((3,), 4, 7, np.float64, rng)
    x, residues, rank, _ = hybridla.lstsq(a, np.ones(4), backend=backend)
    assert x.shape == (3, 7) and residues.shape == (3, 0) and (rank == 4).all()
    for i in range(3):
        assert solve_backward_error(a[i], x[i], np.ones(4)) < THRESH
    tall = stack((3,), 8, 4, np.float64, rng)
    tall[1, :, 3] = tall[1, :, 2]  # member 1 of rank 3: gelsy's minimum-norm answer
    b = stack((3,), 8, 1, np.float64, rng)
    x, residues, rank, _ = hybridla.lstsq(tall, b, backend=backend)
    assert list(rank) == [4, 3, 4] and residues.shape == (3, 0)
    x_ref = scipy.linalg.lstsq(tall[1], b[1], lapack_driver="gelsd")[0]
    assert np.abs(x[1] - x_ref).max() <= 1e3 * eps_of(np.float64) * np.abs(x_ref).max()
    x, residues, rank, s = hybridla.lstsq(np.ones((0, 5, 3)), np.ones(5), backend=backend)
    assert x.shape == (0, 3) and rank.shape == (0,) and s is None


# -- Hessenberg ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 6])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_hessenberg(backend, member_path, dtype, n, rng):
    batch = (2, 2)
    a = stack(batch, n, n, dtype, rng)
    h, q = hybridla.hessenberg(a, calc_q=True, backend=backend, nb=2)
    assert h.shape == q.shape == a.shape
    for index in members(batch):
        hq = wide(q[index])
        assert factorization_ratio(a[index], hq @ wide(h[index]), hq.conj().T, dtype) < THRESH
        assert orthogonality_ratio(q[index], dtype) < THRESH
        assert not np.tril(h[index], -2).any()
    assert hybridla.hessenberg(a, backend=backend).shape == a.shape
    if SCIPY_BATCHES:
        h_ref, q_ref = scipy.linalg.hessenberg(a, calc_q=True)
        assert (h_ref.shape, h_ref.dtype, q_ref.dtype) == (h.shape, h.dtype, q.dtype)
    h0, q0 = hybridla.hessenberg(np.ones((0, n, n), dtype), calc_q=True, backend=backend)
    assert h0.shape == q0.shape == (0, n, n)


# -- validation: once, before any work -----------------------------------------------------------
def test_errors_name_the_argument(backend):
    a = np.ones((2, 3, 3))
    with pytest.raises(ValueError, match="batch shapes do not broadcast"):
        hybridla.solve(a, np.ones((3, 3, 1)), backend=backend)
    with pytest.raises(ValueError, match="b must have 3 rows"):
        hybridla.lu_solve((a, np.zeros((2, 3), np.int32)), np.ones((2, 4, 1)), backend=backend)
    with pytest.raises(ValueError, match=r"piv must have shape \(\.\.\., 3\)"):
        hybridla.lu_solve((a, np.zeros((2, 4), np.int32)), np.ones(3), backend=backend)
    with pytest.raises(ValueError, match="square matrices for a"):
        hybridla.cholesky(np.ones((2, 3, 4)), backend=backend)
    bad = np.stack([np.eye(3), np.eye(3)])
    bad[1, 2, 2] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.lu_factor(bad, backend=backend)
    with pytest.raises(ValueError, match="nb"):
        hybridla.lu_factor(np.ones((2, 3, 3)), nb=0, backend=backend)
    with pytest.raises(ValueError, match="lower must be the same"):
        hybridla.cho_solve((np.stack([np.eye(2)] * 2), np.array([True, False])), np.ones(2),
                           backend=backend)
    with pytest.raises(TypeError, match="scipy.sparse"):
        import scipy.sparse
        hybridla.lu_factor(scipy.sparse.eye(3), backend=backend)


def test_nan_in_a_later_member_costs_no_work(backend, monkeypatch):
    """check_finite reads the whole stack before the first member is factored."""
    calls = []
    real = scipy.linalg.get_lapack_funcs

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(_stacked, "get_lapack_funcs", counting)
    bad = np.stack([np.eye(3)] * 5)
    bad[4, 0, 0] = np.inf
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.cholesky(bad, backend=backend)
    assert calls == []


# -- device stacks -------------------------------------------------------------------------------
def device_stack(a, kind, order="C"):
    """The NumPy stack `a` on the GPU as a CuPy / torch / PyCUDA array, C-ordered (each member
    row-major, as these libraries make them) or with column-major members (order "F")."""
    a = np.ascontiguousarray(a) if order == "C" else \
        np.ascontiguousarray(np.swapaxes(a, -1, -2))
    if kind == "cupy":
        import cupy
        d = cupy.asarray(a)
    elif kind == "torch":
        import torch
        d = torch.from_numpy(a).cuda()
    else:
        import pycuda.autoprimaryctx  # noqa: F401  (the primary context, as hybridla uses)
        from pycuda import gpuarray
        d = gpuarray.to_gpu(a)
    if order == "C":
        return d
    if kind == "torch":
        return d.transpose(-1, -2)
    if kind == "cupy":
        return d.swapaxes(-1, -2)
    return d.transpose(tuple(range(d.ndim - 2)) + (d.ndim - 1, d.ndim - 2))


def stack_to_host(x):
    """A NumPy copy of a device stack of any strides (PyCUDA's get() takes no strided stacks:
    copied through __cuda_array_interface__)."""
    if type(x).__module__.split(".")[0] != "pycuda":
        return to_host(x)
    import pycuda.driver as drv
    cai = x.__cuda_array_interface__
    dtype, shape = np.dtype(cai["typestr"]), tuple(cai["shape"])
    strides = cai.get("strides") or tuple(
        int(np.prod(shape[i + 1:])) * dtype.itemsize for i in range(len(shape)))
    if 0 in shape:
        return np.empty(shape, dtype)
    extent = sum((s - 1) * st for s, st in zip(shape, strides)) + dtype.itemsize
    raw = np.empty(extent, np.uint8)
    drv.memcpy_dtoh(raw, cai["data"][0])
    return np.ndarray(shape, dtype, buffer=raw, strides=strides).copy()


def kind_of(x):
    return type(x).__module__.split(".")[0]


@pytest.mark.parametrize("check_finite", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("method", ["auto", "warp", "cublas", "blocked"])
@pytest.mark.parametrize("shape", [(5, 5), (32, 32), (40, 40), (70, 30), (30, 70), (32, 20)],
                         ids=["5", "32", "40", "tall", "wide", "tall32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_lu_factor(device_kind, dtype, shape, method, check_finite, rng):
    """Every batched LU, the input read through a copy (check_finite) or where it is (the warp
    LU reads the user's C-ordered members directly)."""
    if (method == "cublas" and shape[0] != shape[1]) or (method == "warp" and max(shape) > 32):
        pytest.skip("the method does not take these members")
    from hybridla import _stacked_device
    batch = (2, 3)
    a = stack(batch, *shape, dtype, rng)
    a_dev = device_stack(a, device_kind)
    if method == "auto":
        lu_dev, piv_dev = hybridla.lu_factor(a_dev, nb=8, check_finite=check_finite)
    else:
        with hybridla.backend.get_backend("cuda").call():
            lu_dev, piv_dev = _stacked_device.lu_factor(a_dev, check_finite, None, {"nb": 8},
                                                        method=method)
    assert kind_of(lu_dev) == kind_of(piv_dev) == device_kind
    lu, piv = stack_to_host(lu_dev), stack_to_host(piv_dev)
    assert lu.shape == a.shape and lu.dtype == np.dtype(dtype)
    assert piv.shape == batch + (min(shape),) and piv.dtype == np.int32
    for index in members(batch):
        assert getrf_ratio(a[index], lu[index], piv[index]) < THRESH
    np.testing.assert_array_equal(stack_to_host(a_dev), a)  # the input is left as it was


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_lu_factor_blocked_large_and_singular(device_kind, dtype, rng):
    """The blocked batched LU over several panels (order 200, nb 32), members with a zero
    column (info as LAPACK's: the first zero pivot) among them, column-major members in."""
    a = stack((4,), 200, 200, dtype, rng)
    a[1, :, 57] = 0
    a[3, :, 0] = 0
    with pytest.warns(LinAlgWarning) as caught:
        lu_dev, piv_dev = hybridla.lu_factor(device_stack(a, device_kind, order="F"))
    messages = sorted(str(w.message) for w in caught)
    assert messages == ["Diagonal number 1 is exactly zero. Singular matrix.",
                        "Diagonal number 58 is exactly zero. Singular matrix."]
    lu, piv = stack_to_host(lu_dev), stack_to_host(piv_dev)
    for index in members((4,)):
        assert getrf_ratio(a[index], lu[index], piv[index]) < THRESH


@pytest.mark.parametrize("piv_where", ["device", "host"])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_lu_solve(device_kind, dtype, trans, piv_where, rng):
    a = stack((3,), 12, 12, dtype, rng)
    lu_dev, piv_dev = hybridla.lu_factor(device_stack(a, device_kind))
    piv = stack_to_host(piv_dev) if piv_where == "host" else piv_dev
    b = random_matrix(2 * 12, 2, dtype, rng).reshape(2, 1, 12, 2)
    x = stack_to_host(hybridla.lu_solve((lu_dev, piv), device_stack(b, device_kind),
                                        trans=trans))
    assert x.shape == (2, 3, 12, 2)
    for i, j in members((2, 3)):
        assert solve_backward_error(op(a[j], trans), x[i, j], b[i, 0]) < THRESH
    x1 = stack_to_host(hybridla.lu_solve((lu_dev, piv), device_stack(b[0, 0, :, 0],
                                                                      device_kind), trans=trans))
    assert x1.shape == (3, 12)


@pytest.mark.parametrize("form", ["gen", "pos"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_solve(device_kind, dtype, form, rng):
    a = hpd_stack((3,), 10, dtype, rng)
    b = random_matrix(2 * 10, 1, dtype, rng).reshape(2, 1, 10, 1)
    x = stack_to_host(hybridla.solve(device_stack(a, device_kind), device_stack(b, device_kind),
                                     assume_a=form, lower=True))
    assert x.shape == (2, 3, 10, 1)
    for i, j in members((2, 3)):
        assert solve_backward_error(a[j], x[i, j], b[i, 0]) < THRESH
    singular = a.copy()
    singular[2] = 0
    with pytest.raises(LinAlgError, match=r"slice\(s\) \[2, 5\] are singular"):
        hybridla.solve(device_stack(singular, device_kind), device_stack(b, device_kind),
                       assume_a=form)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n, check_finite", [(16, True), (16, False), (40, True), (40, False)],
                         ids=["warp-checked", "warp-unchecked", "cusolver-checked",
                              "cusolver-unchecked"])
def test_gpu_cholesky_cho_factor_cho_solve(device_kind, dtype, lower, n, check_finite, rng):
    """Members up to 32 by the warp kernel, larger ones by cuSOLVER's potrfBatched; the input
    read through a checked copy or where it is."""
    a = hpd_stack((2, 3), n, dtype, rng)
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    marked = a.copy()
    marked[(...,) + other] = 7
    c = stack_to_host(hybridla.cholesky(device_stack(marked, device_kind), lower=lower,
                                        check_finite=check_finite))
    cf_dev, low = hybridla.cho_factor(device_stack(marked, device_kind, order="F"), lower=lower,
                                      check_finite=check_finite)
    cf = stack_to_host(cf_dev)
    assert low is lower and kind_of(cf_dev) == device_kind
    for index in members((2, 3)):
        assert potrf_ratio(a[index], c[index], lower) < THRESH
        assert potrf_ratio(a[index], cf[index], lower) < THRESH
    assert not c[(...,) + other].any() and (cf[(...,) + other] == 7).all()
    b = random_matrix(n, 2, dtype, rng)
    x = stack_to_host(hybridla.cho_solve((cf_dev, low), device_stack(b, device_kind)))
    assert x.shape == (2, 3, n, 2)
    for index in members((2, 3)):
        assert solve_backward_error(a[index], x[index], b) < THRESH
    bad = a.copy()
    bad[1, 0] = -np.eye(n)
    with pytest.raises(LinAlgError, match="1-th leading minor"):
        hybridla.cholesky(device_stack(bad, device_kind), check_finite=check_finite)
    bad = a.copy()
    bad[0, 2, 5, 5] = -1e3  # the 6-th leading minor is the first that is not
    with pytest.raises(LinAlgError, match="6-th leading minor"):
        hybridla.cholesky(device_stack(bad, device_kind), check_finite=check_finite)


@pytest.mark.parametrize("mode", ["full", "economic", "r", "raw"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_qr(device_kind, dtype, mode, rng):
    batch, (m, n) = (3,), (9, 5)
    a = stack(batch, m, n, dtype, rng)
    result = hybridla.qr(device_stack(a, device_kind), mode=mode)
    if mode == "r":
        r = stack_to_host(result)
    elif mode == "raw":
        (factors, tau), r = result
        assert kind_of(tau) == device_kind
        assert stack_to_host(factors).shape == a.shape and stack_to_host(tau).shape == (3, 5)
        r = stack_to_host(r)
    else:
        q, r = (stack_to_host(x) for x in result)
    assert r.shape == batch + ((5, 5) if mode in ("economic", "raw") else (m, n))
    for index in members(batch):
        assert not np.tril(r[index], -1).any()
        if mode in ("full", "economic"):
            assert factorization_ratio(a[index], q[index], r[index]) < THRESH
            assert orthogonality_ratio(q[index]) < THRESH
        else:
            rr = wide(r[index])[:5]
            gram = wide(a[index]).conj().T @ wide(a[index])
            assert np.abs(rr.conj().T @ rr - gram).max() <= 100 * eps_of(dtype) * \
                np.abs(gram).max() * m


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_gpu_lstsq_and_hessenberg_loop_on_the_device(device_kind, dtype, rng):
    a = stack((2,), 11, 4, dtype, rng)
    b = random_matrix(11, 2, dtype, rng)
    x_dev, residues, rank, _ = hybridla.lstsq(device_stack(a, device_kind),
                                              device_stack(b, device_kind))
    x = stack_to_host(x_dev)
    assert x.shape == (2, 4, 2) and residues.shape == (2, 2) and list(rank) == [4, 4]
    for index in members((2,)):
        x_ref = scipy.linalg.lstsq(a[index], b)[0]
        assert lstsq_forward_ratio(a[index], b, x[index], x_ref, dtype) < THRESH
    sq = stack((2,), 7, 7, dtype, rng)
    h_dev, q_dev = hybridla.hessenberg(device_stack(sq, device_kind), calc_q=True)
    h, q = stack_to_host(h_dev), stack_to_host(q_dev)
    for index in members((2,)):
        assert factorization_ratio(sq[index], wide(q[index]) @ wide(h[index]),
                                   wide(q[index]).conj().T, dtype) < THRESH


def test_gpu_empty_batches_and_broadcast_inputs(device_kind, rng):
    lu, piv = hybridla.lu_factor(device_stack(np.ones((0, 4, 4)), device_kind))
    assert tuple(lu.shape) == (0, 4, 4) and tuple(piv.shape) == (0, 4)
    assert tuple(hybridla.cholesky(device_stack(np.ones((0, 3, 3)), device_kind)).shape) \
        == (0, 3, 3)
    a = stack((1,), 6, 6, np.float64, rng)  # one matrix against a batch of right-hand sides
    b = random_matrix(4 * 6, 1, np.float64, rng).reshape(4, 6, 1)
    x = stack_to_host(hybridla.solve(device_stack(a, device_kind), device_stack(b, device_kind)))
    assert x.shape == (4, 6, 1)
    for i in range(4):
        assert solve_backward_error(a[0], x[i], b[i]) < THRESH


def test_gpu_errors(device_kind, rng):
    a = device_stack(np.ones((2, 3, 3)), device_kind)
    with pytest.raises(ValueError, match="both be host arrays or both device arrays"):
        hybridla.solve(a, np.ones(3))
    with pytest.raises(TypeError, match="dtype of a"):
        hybridla.solve(a, device_stack(np.ones(3, np.float32), device_kind))
    bad = np.stack([np.eye(3)] * 2)
    bad[1, 1, 1] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.lu_factor(device_stack(bad, device_kind))
    q, r, p = hybridla.qr(a, pivoting=True)  # a loop of the 2-D device geqp3
    assert p.shape == (2, 3) and p.dtype == np.int32


# -- device stacks on an emulated device (CI: tests/_batched_emulation.py) -----------------------
@pytest.fixture
def emulated(monkeypatch):
    from _batched_emulation import install
    return install(monkeypatch)


def emulated_stack(emulated, a, order):
    """a as an emulated device array: C-ordered members, or column-major ones (order "F")."""
    if order == "F":
        a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
    return emulated.array(np.ascontiguousarray(a) if order == "C" else a)


@pytest.mark.parametrize("check_finite", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("method", [None, "warp", "cublas", "blocked"])
@pytest.mark.parametrize("shape", [(5, 5), (40, 40), (70, 30), (30, 70)],
                         ids=["5", "40", "tall", "wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_emulated_device_lu_factor(emulated, dtype, shape, method, order, check_finite, rng):
    if (method == "cublas" and shape[0] != shape[1]) or (method == "warp" and max(shape) > 32):
        pytest.skip("the method does not take these members")
    from hybridla import _stacked_device
    a = stack((2, 3), *shape, dtype, rng)
    a[1, 2, :, 3] = 0  # a zero column: info 4 (or an earlier zero pivot)
    a_dev = emulated_stack(emulated, a, order)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if method is None:
            lu, piv = hybridla.lu_factor(a_dev, nb=8, check_finite=check_finite)
        else:
            lu, piv = _stacked_device.lu_factor(a_dev, check_finite, None, {"nb": 8},
                                                method=method)
    assert [str(w.message) for w in caught if issubclass(w.category, LinAlgWarning)] == \
        ["Diagonal number 4 is exactly zero. Singular matrix."]
    lu, piv = emulated.host(lu), emulated.host(piv)
    assert lu.shape == a.shape and piv.shape == (2, 3, min(shape)) and piv.dtype == np.int32
    for index in members((2, 3)):
        assert getrf_ratio(a[index], lu[index], piv[index]) < THRESH
    np.testing.assert_array_equal(emulated.host(a_dev), a)
    assert emulated.backend.allocations == {}  # the workspace given back


@pytest.mark.parametrize("piv_where", ["device", "host"])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_emulated_device_lu_solve(emulated, dtype, trans, piv_where, rng):
    a = stack((3,), 12, 12, dtype, rng)
    lu, piv = hybridla.lu_factor(emulated_stack(emulated, a, "C"))
    if piv_where == "host":
        piv = emulated.host(piv)
    b = random_matrix(2 * 12, 2, dtype, rng).reshape(2, 1, 12, 2)
    x = emulated.host(hybridla.lu_solve((lu, piv), emulated.array(b), trans=trans))
    assert x.shape == (2, 3, 12, 2)
    for i, j in members((2, 3)):
        assert solve_backward_error(op(a[j], trans), x[i, j], b[i, 0]) < THRESH
    x1 = emulated.host(hybridla.lu_solve((lu, piv), emulated.array(b[0, 0, :, 0].copy()),
                                         trans=trans))
    assert x1.shape == (3, 12)
    # row-major factors (a user's copy) of one member, broadcast against a stack of b
    one = emulated.array(np.ascontiguousarray(emulated.host(lu)[:1]))
    piv_one = (emulated.host(piv) if piv_where == "device" else piv)[:1]
    x = emulated.host(hybridla.lu_solve((one, piv_one), emulated.array(b[:, 0]), trans=trans))
    for i in range(2):
        assert solve_backward_error(op(a[0], trans), x[i], b[i, 0]) < THRESH


@pytest.mark.parametrize("form", ["gen", "pos"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_emulated_device_solve(emulated, dtype, transposed, form, rng):
    if form == "pos" and transposed and np.dtype(dtype).kind == "c":
        pytest.skip("NotImplementedError, as the 2-D device solve")
    a = hpd_stack((3,), 10, dtype, rng)
    b = random_matrix(2 * 10, 1, dtype, rng).reshape(2, 1, 10, 1)
    x = emulated.host(hybridla.solve(emulated_stack(emulated, a, "C"), emulated.array(b),
                                     assume_a=form, lower=True, transposed=transposed))
    assert x.shape == (2, 3, 10, 1)
    for i, j in members((2, 3)):
        assert solve_backward_error(a[j].T if transposed else a[j], x[i, j], b[i, 0]) < THRESH
    singular = a.copy()
    singular[2] = 0
    with pytest.raises(LinAlgError, match=r"slice\(s\) \[2, 5\] are singular"):
        hybridla.solve(emulated.array(singular), emulated.array(b), assume_a=form)
    assert emulated.backend.allocations == {}


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n, check_finite", [(16, True), (16, False), (40, False)])
def test_emulated_device_cholesky(emulated, dtype, lower, n, check_finite, rng):
    a = hpd_stack((2, 3), n, dtype, rng)
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    marked = a.copy()
    marked[(...,) + other] = 7
    c = emulated.host(hybridla.cholesky(emulated_stack(emulated, marked, "C"), lower=lower,
                                       check_finite=check_finite))
    cf_dev, low = hybridla.cho_factor(emulated_stack(emulated, marked, "F"), lower=lower,
                                      check_finite=check_finite)
    cf = emulated.host(cf_dev)
    assert low is lower
    for index in members((2, 3)):
        assert potrf_ratio(a[index], c[index], lower) < THRESH
        assert potrf_ratio(a[index], cf[index], lower) < THRESH
    assert not c[(...,) + other].any() and (cf[(...,) + other] == 7).all()
    b = random_matrix(n, 2, dtype, rng)
    x = emulated.host(hybridla.cho_solve((cf_dev, low), emulated.array(b)))
    for index in members((2, 3)):
        assert solve_backward_error(a[index], x[index], b) < THRESH
    bad = a.copy()
    bad[1, 0] = -np.eye(n)
    with pytest.raises(LinAlgError, match="1-th leading minor"):
        hybridla.cholesky(emulated.array(bad))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_emulated_device_qr_and_errors(emulated, dtype, rng):
    a = stack((3,), 9, 5, dtype, rng)
    r = emulated.host(hybridla.qr(emulated_stack(emulated, a, "C"), mode="r"))
    (factors, tau), r_raw = hybridla.qr(emulated_stack(emulated, a, "C"), mode="raw")
    factors, tau, r_raw = (emulated.host(x) for x in (factors, tau, r_raw))
    assert r.shape == (3, 9, 5) and r_raw.shape == (3, 5, 5) and tau.shape == (3, 5)
    for i in range(3):
        rr = wide(r[i])[:5]
        gram = wide(a[i]).conj().T @ wide(a[i])
        assert np.abs(rr.conj().T @ rr - gram).max() <= 100 * eps_of(dtype) * np.abs(gram).max()
        np.testing.assert_array_equal(r_raw[i], r[i][:5])
        assert not np.tril(r[i], -1).any()
    with pytest.raises(ValueError, match="both be host arrays or both device arrays"):
        hybridla.solve(emulated.array(np.ones((2, 3, 3), dtype)), np.ones(3))
    with pytest.raises(TypeError, match="dtype of a"):
        other = np.float32 if np.dtype(dtype) != np.float32 else np.float64
        hybridla.solve(emulated.array(np.ones((2, 3, 3), dtype)),
                       emulated.array(np.ones(3, other)))
    bad = np.stack([np.eye(3, dtype=dtype)] * 2)
    bad[1, 1, 1] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.lu_factor(emulated.array(bad))
    empty_lu, empty_piv = hybridla.lu_factor(emulated.array(np.ones((0, 4, 4), dtype)))
    assert emulated.host(empty_lu).shape == (0, 4, 4)
    assert emulated.host(empty_piv).shape == (0, 4)
    assert emulated.backend.allocations == {}
