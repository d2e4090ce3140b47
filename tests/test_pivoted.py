"""QR with column pivoting (qr(pivoting=True), geqp3) and rank-revealing lstsq (gelsy):
scipy.linalg.qr(pivoting=True), LAPACK's geqp3 and scipy.linalg.lstsq(lapack_driver="gelsd")
are the references. The host backend runs LAPACK's; the blocked driver of a device backend
(lapack/geqp3.py) runs here on the host backend's stores (CI), and on the GPU (cuda-marked)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack
from _lapack_checks import DTYPES, eps_of, is_on_device, random_matrix, to_device, to_host

import hybridla
from hybridla import geqp3

HOST = dict(backend="host")
SHAPES = [(13, 7), (7, 13), (9, 9)]
SHAPE_IDS = ["tall", "wide", "square"]
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
MODES = ["full", "economic", "r", "raw"]
THRESH = 30.0


def _graded(m, n, dtype, rng):
    """A matrix whose columns have very different norms, so that pivoting matters."""
    return random_matrix(m, n, dtype, rng) * np.logspace(0, -6, n).astype(
        np.finfo(np.dtype(dtype)).dtype)[rng.permutation(n)]


def _as_tuple(result):
    return tuple(x for part in result for x in (part if isinstance(part, tuple) else (part,)))


# -- qr(pivoting=True) ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_qr_pivoting_is_scipys(dtype, shape, mode, rng):
    a = _graded(*shape, dtype, rng)
    saved = a.copy()
    ours = hybridla.qr(a, mode=mode, pivoting=True, **HOST)
    ref = scipy.linalg.qr(a, mode=mode, pivoting=True)
    assert len(ours) == len(ref)
    for x, y in zip(_as_tuple(ours), _as_tuple(ref)):
        assert x.shape == y.shape and x.dtype == y.dtype
    np.testing.assert_array_equal(a, saved)
    p = ours[-1]
    assert p.dtype == np.int32
    np.testing.assert_array_equal(p, ref[-1])
    np.testing.assert_array_equal(np.sort(p), np.arange(shape[1]))
    r = ours[-2]
    eps, norm = eps_of(dtype), np.linalg.norm(a, 1)
    assert np.array_equal(r, np.triu(r))
    diagonal = np.abs(np.diagonal(r))
    assert np.all(diagonal[:-1] >= diagonal[1:] * (1 - 10 * eps))
    if mode in ("full", "economic"):
        q = ours[0]
        k = q.shape[1]
        assert np.abs(q.conj().T @ q - np.eye(k)).max() / (shape[0] * eps) < THRESH
        assert np.abs(q @ r - a[:, p]).max() / (norm * max(shape) * eps) < THRESH
        assert np.abs(q - ref[0]).max() / (shape[0] * eps) < 1e3  # same Q, to rounding
    assert np.abs(r - ref[-2]).max() / (norm * max(shape) * eps) < 1e3
    if mode == "raw":
        (factors, tau), _, _ = ours
        (factors_ref, tau_ref), _, _ = ref
        assert np.abs(tau - tau_ref).max() < 1e3 * eps


def test_qr_pivoting_reveals_the_rank(rng):
    """A rank-4 matrix: R's trailing rows are at rounding level."""
    a = random_matrix(20, 4, np.float64, rng) @ random_matrix(4, 10, np.float64, rng)
    r, p = hybridla.qr(a, mode="r", pivoting=True, **HOST)
    diagonal = np.abs(np.diagonal(r))
    assert diagonal[3] > 1e-3 * diagonal[0]
    assert np.abs(r[4:]).max() <= 1e3 * eps_of(np.float64) * diagonal[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(0, 3), (4, 0), (0, 0)])
def test_qr_pivoting_empty_is_scipys(shape, mode):
    ours = hybridla.qr(np.empty(shape), mode=mode, pivoting=True, **HOST)
    ref = scipy.linalg.qr(np.empty(shape), mode=mode, pivoting=True)
    assert len(ours) == len(ref)
    for x, y in zip(_as_tuple(ours), _as_tuple(ref)):
        assert x.shape == y.shape and x.dtype == y.dtype
    np.testing.assert_array_equal(ours[-1], ref[-1])
    if mode == "full":
        np.testing.assert_array_equal(ours[0], ref[0])


def test_qr_pivoting_overwrite_and_other_dtypes(rng):
    a = np.asfortranarray(_graded(8, 5, np.float64, rng))
    saved = a.copy()
    (factors, tau), r, p = hybridla.qr(a, mode="raw", pivoting=True, overwrite_a=True, **HOST)
    assert factors is a or np.shares_memory(factors, a)  # written in place, as allowed
    np.testing.assert_array_equal(p, scipy.linalg.qr(saved, pivoting=True)[2])
    # integers and float16 in scipy's LAPACK precision; a list
    q, r, p = hybridla.qr(np.arange(12).reshape(4, 3), pivoting=True, **HOST)
    assert q.dtype == np.float64 and np.allclose(q @ r, np.arange(12).reshape(4, 3)[:, p])
    q, r, p = hybridla.qr(np.ones((3, 2), np.float16), pivoting=True, **HOST)
    assert q.dtype == np.float32
    q, r, p = hybridla.qr([[1, 2], [3, 4]], pivoting=1, **HOST)
    assert np.allclose(q @ r, np.array([[1, 2], [3, 4]])[:, p])


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="qr"), "mode"), (dict(lwork=1.5), "lwork"), (dict(overwrite_a="yes"), "overwrite_a"),
    (dict(pivoting=2), "pivoting"), (dict(nb=0), "nb"), (dict(backend="nonesuch"), "backend"),
])
def test_qr_pivoting_checks_arguments_first(kwargs, match):
    a = np.eye(4) + 1.0
    saved = a.copy()
    kwargs = {"pivoting": True, **kwargs}
    kwargs.setdefault("backend", "host")
    with pytest.raises(ValueError, match=match):
        hybridla.qr(a, overwrite_a=kwargs.pop("overwrite_a", True), **kwargs)
    np.testing.assert_array_equal(a, saved)
    bad = a.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.qr(bad, pivoting=True, **HOST)
    with pytest.raises(ValueError, match="2-D"):
        hybridla.qr(np.ones(3), pivoting=True, **HOST)


# -- the blocked driver (lapack/geqp3.py) on the host backend's stores ------------------------
def _driver_geqp3(a, panel_width=None, monkeypatch=None):
    from hybridla import backend as backends
    from hybridla import lapack
    from hybridla.scheduler.plan import make_plan
    if panel_width is not None:
        monkeypatch.setattr(sys.modules["hybridla.lapack.geqp3"], "PANEL_WIDTH", panel_width)
    ops = backends.get_backend("host")
    factors = np.asfortranarray(a.copy())
    plan = make_plan(ops, *a.shape, a.dtype, routine="qr", nb=8)
    store = ops.host_matrix(factors, factors, plan.nb)
    try:
        jpvt, tau, info, _ = lapack.geqp3(store, plan)
    finally:
        store.close()
    return factors, jpvt, tau, info


def _check_geqp3(a, factors, jpvt, tau, rank=None):
    """LAPACK's tester ratios for A P = Q R, |R(i, i)| non-increasing, and R's trailing
    diagonal negligible after a matrix's known rank."""
    m, n = a.shape
    k = min(m, n)
    eps, dtype = eps_of(a.dtype), a.dtype
    assert jpvt.dtype == np.int32
    np.testing.assert_array_equal(np.sort(jpvt), np.arange(n))
    (orgqr,) = scipy.linalg.lapack.get_lapack_funcs(("orgqr",), (factors,))
    q, _, info = orgqr(np.asfortranarray(factors[:, :k]), tau)
    assert info == 0
    r = np.triu(factors[:k])
    norm = max(np.linalg.norm(a, 1), np.finfo(dtype).tiny)
    assert np.linalg.norm(a[:, jpvt] - q @ r, 1) / (norm * max(m, n) * eps) < THRESH
    assert np.linalg.norm(np.eye(k) - q.conj().T @ q, 1) / (m * eps) < THRESH
    diagonal = np.abs(np.diagonal(r))
    assert np.all(diagonal[:-1] >= diagonal[1:] * (1 - 10 * eps))
    if rank is not None and rank < k:
        assert diagonal[rank] <= 1e2 * max(m, n) * eps * diagonal[0]
        assert diagonal[rank - 1] > 1e-3 * diagonal[0]


@pytest.mark.parametrize("panel_width", [None, 3], ids=["panels32", "panels3"])
@pytest.mark.parametrize("shape", [(70, 45), (45, 70), (50, 50)], ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_blocked_geqp3_driver_is_lapacks(dtype, shape, panel_width, rng, monkeypatch):
    """The device algorithm on the host backend: LAPACK's pivots on graded matrices (no ties),
    its ratios, and on a matrix of known rank (whose norms' downdates lose their accuracy and
    end panels early) the rank in R's diagonal."""
    a = _graded(*shape, dtype, rng)
    factors, jpvt, tau, info = _driver_geqp3(a, panel_width, monkeypatch)
    assert info == 0
    _check_geqp3(a, factors, jpvt, tau)
    (func,) = scipy.linalg.lapack.get_lapack_funcs(("geqp3",), (a,))
    np.testing.assert_array_equal(jpvt, func(a)[1] - 1)
    low, _ = _known_rank(*shape, 7, dtype, rng, kappa=10.0)
    factors, jpvt, tau, _ = _driver_geqp3(low, panel_width, monkeypatch)
    _check_geqp3(low, factors, jpvt, tau, rank=7)


# -- on the GPU: both interfaces --------------------------------------------------------------
GPU_SHAPES = [(300, 200), (200, 300), (257, 257)]


@pytest.mark.cuda
@pytest.mark.parametrize("interface", ["gpu", "cpu"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_geqp3(device_kind, dtype, shape, interface, rng):
    """geqp3 on the GPU (a device array, or a host array with the cuda backend): LAPACK's
    ratios and pivots (graded columns: no near ties), the rank of a known-rank matrix, the
    input left as it was."""
    for a, rank in ((_graded(*shape, dtype, rng), None),
                    (_known_rank(*shape, 40, dtype, rng, kappa=10.0)[0], 40)):
        x = to_device(a, device_kind) if interface == "gpu" else a.copy()
        factors, jpvt, tau = geqp3(x, backend="cuda")
        assert is_on_device(factors, device_kind) == (interface == "gpu")
        factors = to_host(factors)
        _check_geqp3(a, factors, jpvt, tau, rank=rank)
        if rank is None:
            (func,) = scipy.linalg.lapack.get_lapack_funcs(("geqp3",), (a,))
            np.testing.assert_array_equal(jpvt, func(a)[1] - 1)
        np.testing.assert_array_equal(to_host(x), a)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_qr_pivoting_is_scipys(device_kind, dtype, mode, rng):
    a = _graded(90, 60, dtype, rng)
    ours = hybridla.qr(to_device(a, device_kind), mode=mode, pivoting=True)
    ref = scipy.linalg.qr(a, mode=mode, pivoting=True)
    ours_flat, ref_flat = _as_tuple(ours), _as_tuple(ref)
    assert [x.shape for x in ours_flat] == [x.shape for x in ref_flat]
    np.testing.assert_array_equal(ours[-1], ref[-1])
    r = to_host(ours[-2])
    eps = eps_of(dtype)
    diagonal = np.abs(np.diagonal(r))
    assert np.all(diagonal[:-1] >= diagonal[1:] * (1 - 10 * eps))
    if mode in ("full", "economic"):
        q = to_host(ours[0])
        assert np.abs(q.conj().T @ q - np.eye(q.shape[1])).max() / (90 * eps) < THRESH
        assert np.abs(q @ r - a[:, ours[-1]]).max() / (np.linalg.norm(a, 1) * 90 * eps) < THRESH
    if device_kind == "cupy":  # a stack (to_device makes 3-D arrays of CuPy only), whose
        # members are strided views (the batch axis varies fastest in an F-ordered stack)
        stacked = hybridla.qr(to_device(np.stack([a, a[::-1]]), device_kind), mode=mode,
                              pivoting=True)
        assert stacked[-1].shape == (2, 60)
        np.testing.assert_array_equal(stacked[-1][0], ref[-1])


@pytest.mark.cuda
@pytest.mark.parametrize("driver", [None, "gelsy"])
@pytest.mark.parametrize("interface", ["gpu", "cpu"])
@pytest.mark.parametrize("shape", [(300, 120), (120, 300), (150, 150)], ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_lstsq_rank_deficient(device_kind, dtype, shape, interface, driver, rng):
    """The minimum-norm solution and the rank of a rank-deficient a, by the GPU's pivoted QR
    (lapack_driver None: after the full-rank solve's rank test fails), against scipy's gelsd;
    then gelsy on a full-rank a, residues included."""
    m, n = shape
    a, kappa = _known_rank(m, n, 25, dtype, rng)
    b = random_matrix(m, 2, dtype, rng)
    # the reference's cutoff above a's rounding (its default, eps, can count rounding's
    # singular values of a rank-deficient a as its own: a solution of norm 1e15)
    x_ref = scipy.linalg.lstsq(a, b, cond=1e-3, lapack_driver="gelsd")[0]
    if interface == "gpu":
        x, residues, rank, s = hybridla.lstsq(to_device(a, device_kind),
                                              to_device(b, device_kind), lapack_driver=driver)
        assert is_on_device(x, device_kind)
        x = to_host(x)
    else:
        x, residues, rank, s = hybridla.lstsq(a, b, lapack_driver=driver, backend="cuda")
    assert rank == 25 and s is None and residues.shape == (0,)
    error = np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref)
    assert error / (kappa ** 2 * max(m, n) * eps_of(dtype)) < THRESH
    # full rank, well conditioned (as wide or tall as a, twice as long as it is short)
    rows, cols = (m, m // 2) if m >= n else (n // 2, n)
    full, _ = _known_rank(rows, cols, min(rows, cols), dtype, rng, kappa=10.0)
    b = random_matrix(rows, 2, dtype, rng)
    x, residues, rank, _ = hybridla.lstsq(full, b, lapack_driver="gelsy", backend="cuda")
    x_ref, residues_ref, _, _ = scipy.linalg.lstsq(full, b, lapack_driver="gelsd")
    eps = eps_of(dtype)
    assert rank == min(rows, cols)
    assert np.abs(x - x_ref).max() <= 1e3 * eps * np.abs(x_ref).max() * max(rows, cols)
    if rows > cols:
        assert np.abs(residues - residues_ref).max() <= 1e3 * eps * residues_ref.max() * rows


# -- geqp3 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_geqp3_is_lapacks_with_0_based_jpvt(dtype, shape, rng):
    a = _graded(*shape, dtype, rng)
    factors, jpvt, tau = geqp3(a, **HOST)
    (func,) = scipy.linalg.lapack.get_lapack_funcs(("geqp3",), (a,))
    factors_ref, jpvt_ref, tau_ref, _, info = func(a)
    assert info == 0 and jpvt.dtype == np.int32
    np.testing.assert_array_equal(jpvt, jpvt_ref - 1)
    eps = eps_of(dtype)
    assert np.abs(factors - factors_ref).max() <= 1e3 * eps * np.abs(a).max()
    assert np.abs(tau - tau_ref).max() <= 1e3 * eps
    assert factors.dtype == tau.dtype == np.dtype(dtype)


def test_geqp3_arguments_and_empty():
    with pytest.raises(ValueError, match="overwrite_a"):
        geqp3(np.eye(2), overwrite_a="no")
    factors, jpvt, tau = geqp3(np.empty((3, 0)))
    assert factors.shape == (3, 0) and jpvt.shape == (0,) and tau.shape == (0,)
    factors, jpvt, tau = geqp3(np.empty((0, 2)))
    np.testing.assert_array_equal(jpvt, [0, 1])


# -- lstsq: rank deficient ------------------------------------------------------------------------
def _known_rank(m, n, r, dtype, rng, kappa=10.0):
    """An m x n matrix of rank r, its nonzero singular values from 1 down to 1 / kappa."""
    u, _ = np.linalg.qr(random_matrix(m, r, np.complex128 if np.dtype(dtype).kind == "c"
                                      else np.float64, rng))
    v, _ = np.linalg.qr(random_matrix(n, r, u.dtype, rng))
    s = np.logspace(0, -np.log10(kappa), r)
    return np.asfortranarray((u * s) @ v.conj().T).astype(dtype), kappa


@pytest.mark.parametrize("overwrite_a", [False, True])
@pytest.mark.parametrize("nrhs", [None, 3])
@pytest.mark.parametrize("shape", [(30, 12), (12, 30), (15, 15)], ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_rank_deficient_is_the_minimum_norm_solution(dtype, shape, nrhs, overwrite_a, rng):
    m, n = shape
    r = 5
    a, kappa = _known_rank(m, n, r, dtype, rng)
    b = random_matrix(m, nrhs or 1, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    a0, b0 = a.copy(), b.copy()
    # the references first: overwrite_a may leave a written over
    x_ref = scipy.linalg.lstsq(a0, b0, cond=1e-3, lapack_driver="gelsd")[0]  # above rounding
    x, residues, rank, s = hybridla.lstsq(a, b, overwrite_a=overwrite_a, **HOST)
    assert rank == r and s is None
    assert residues.shape == (0,)
    assert x.shape == x_ref.shape and x.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(b, b0)
    if not overwrite_a:
        np.testing.assert_array_equal(a, a0)
    # forward error of the minimum-norm solution: kappa eps (kappa^2 for the residual's part)
    error = np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref)
    assert error / (kappa ** 2 * max(m, n) * eps_of(dtype)) < THRESH
    # and x lies in a's row space (minimum norm): orthogonal to its null space
    _, _, vh = np.linalg.svd(a0.astype(np.complex128))
    null = vh[r:].conj().T
    x2 = x.reshape(n, -1)
    assert np.abs(null.conj().T @ x2).max() <= 1e2 * kappa * eps_of(dtype) * np.abs(x2).max()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_gelsy_forced_on_full_rank_and_cond(dtype, rng):
    m, n = 20, 6
    a = random_matrix(m, n, dtype, rng)
    b = random_matrix(m, 2, dtype, rng)
    x, residues, rank, s = hybridla.lstsq(a, b, lapack_driver="gelsy", **HOST)
    x_ref, residues_ref, rank_ref, _ = scipy.linalg.lstsq(a, b, lapack_driver="gelsd")
    eps = eps_of(dtype)
    assert rank == n and s is None
    assert np.abs(x - x_ref).max() <= 1e3 * eps * np.abs(x_ref).max()
    # residues as scipy's gelsd gives them for rank == n < m (scipy's gelsy gives none)
    assert residues.shape == (2,) and residues.dtype == np.finfo(np.dtype(dtype)).dtype
    assert np.abs(residues - residues_ref).max() <= 1e3 * eps * residues_ref.max()
    x1, residues1, _, _ = hybridla.lstsq(a, b[:, 0], lapack_driver="gelsy", **HOST)
    assert x1.shape == (n,) and np.ndim(residues1) == 0
    # cond is gelsy's rcond, as scipy's (lapack_driver=None would first try the full-rank
    # solve, whose test on the unpivoted R's diagonal these singular values can pass)
    graded, _ = _known_rank(m, n, n, dtype, rng, kappa=1e3)
    for cond in (1e-2, 1e-4 if np.dtype(dtype) in (np.float64, np.complex128) else 1e-2):
        ours = hybridla.lstsq(graded, b, cond=cond, lapack_driver="gelsy", **HOST)
        ref = scipy.linalg.lstsq(graded, b, cond=cond, lapack_driver="gelsy")
        assert ours[2] == ref[2]
        assert np.abs(ours[0] - ref[0]).max() <= 1e4 * eps * np.abs(ref[0]).max()


def test_lstsq_rank_deficient_special_cases(rng):
    # a zero matrix: rank 0, x = 0
    x, residues, rank, s = hybridla.lstsq(np.zeros((4, 3)), np.ones(4), **HOST)
    assert rank == 0 and np.array_equal(x, np.zeros(3)) and residues.shape == (0,)
    # float32 a with a float64 b: float64, as scipy (a's rank exact in float64 too: a product
    # of rank 3 rounded to float32 is of full rank there)
    a = random_matrix(10, 6, np.float32, rng)
    a[:, 3:] = a[:, :3]
    x, _, rank, _ = hybridla.lstsq(a, np.ones(10), **HOST)
    assert x.dtype == np.float64 and rank == 3
    x_ref = scipy.linalg.lstsq(a.astype(np.float64), np.ones(10), lapack_driver="gelsd")[0]
    assert np.abs(x - x_ref).max() <= 1e-12 * np.abs(x_ref).max()
    # a C-ordered, read-only a with overwrite_a=True is left as it is
    a, _ = _known_rank(8, 5, 2, np.float64, rng)
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    saved = a.copy()
    x, _, rank, _ = hybridla.lstsq(a, np.ones(8), overwrite_a=True, **HOST)
    assert rank == 2 and np.array_equal(a, saved)


def test_lstsq_driver_argument():
    a = np.ones((4, 3))
    for driver in ("gelsd", "gelss", "gels", 1):
        with pytest.raises(ValueError, match="lapack_driver"):
            hybridla.lstsq(a, np.ones(4), lapack_driver=driver, **HOST)
    x, _, rank, _ = hybridla.lstsq(a, np.ones(4), lapack_driver="gelsy", **HOST)
    assert rank == 1 and np.allclose(x, 1 / 3)
