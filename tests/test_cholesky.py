"""Cholesky (potrf, potrs; cho_factor, cho_solve, cholesky, solve assume_a="pos") on every
backend, checked the way LAPACK's testers check it: ||A - L L^H||_1 / (n ||A||_1 eps) < 30."""
import numpy as np
import pytest
import scipy.linalg

import hybridla
from _lapack_checks import (DTYPES, eps_of, norm1, potrf_ratio, random_matrix,
                            solve_backward_error, to_device, to_host, wide)

THRESH = 30.0


def hpd_matrix(n, dtype, rng, cond=None):
    """A Hermitian positive definite matrix: X X^H + n I (or prescribed condition number)."""
    if cond is None:
        x = random_matrix(n, n, dtype, rng)
        a = wide(x) @ wide(x).conj().T + n * np.eye(n)
    else:
        q, _ = np.linalg.qr(wide(random_matrix(n, n, dtype, rng)))
        a = (q * np.geomspace(1.0, 1.0 / cond, n)) @ q.conj().T
    a = (a + a.conj().T) / 2
    return np.asfortranarray(a.astype(dtype))


def assert_cholesky_factor(a, factor, lower, dtype):
    """What scipy.linalg.cholesky returns, checked as LAPACK's tester checks potrf (xPOT01):
    ||A - U^H U||_1 / (n ||A||_1 eps) < 30 (L L^H for lower), the other triangle exactly zero, a
    real positive diagonal, the working dtype."""
    factor = np.asarray(factor)
    assert factor.dtype == np.dtype(dtype) and factor.shape == a.shape
    other = np.triu(factor, 1) if lower else np.tril(factor, -1)
    assert not other.any(), "the triangle that is not the factor is not zero"
    diagonal = np.diagonal(factor)
    assert np.all(diagonal.real > 0) and np.all(diagonal.imag == 0)
    ratio = potrf_ratio(a, factor, lower, dtype)
    assert ratio < THRESH, ratio


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n", [1, 31, 173])
def test_cho_factor_ratio_and_other_triangle_untouched(backend, dtype, lower, n, rng):
    a = hpd_matrix(n, dtype, rng)
    # the triangle that is not referenced holds a marker, which must come back unchanged
    marked = a.copy(order="F")
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    marked[other] = 7
    c, low = hybridla.cho_factor(marked, lower=lower, backend=backend, nb=32)
    assert low is lower
    assert potrf_ratio(a, c, lower) < THRESH
    assert (c[other] == 7).all()


@pytest.mark.parametrize("lookahead", [0, 1, 2])
@pytest.mark.parametrize("panel", ["cpu", "gpu", "auto"])
def test_cho_factor_lookahead_and_panel_placement(backend, lookahead, panel, rng):
    a = hpd_matrix(150, np.float64, rng)
    c, _ = hybridla.cho_factor(a, lower=True, backend=backend, nb=16, lookahead=lookahead,
                               panel=panel)
    assert potrf_ratio(a, c, True) < THRESH
    c_ref, _ = scipy.linalg.cho_factor(a, lower=True)
    assert np.allclose(np.tril(c), np.tril(c_ref), rtol=0, atol=1e3 * eps_of(a.dtype) * 150)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n, nb, dtype", [(1700, 512, np.complex64), (2600, 1024, np.float64)])
def test_cho_factor_large_blocks(backend, dtype, lower, n, nb, rng):
    """Blocks wide enough that the off-diagonal solve is cut into column blocks of the inverse
    (update/chol.SOLVE_BLOCK) and, on a device, the diagonal blocks of the trailing update are
    halved in batched gemms."""
    a = hpd_matrix(n, dtype, rng)
    c, _ = hybridla.cho_factor(a, lower=lower, backend=backend, nb=nb, lookahead=1)
    assert potrf_ratio(a, c, lower) < THRESH


@pytest.mark.parametrize("cond", [1e4, 1e8])
def test_cho_factor_prescribed_condition(backend, cond, rng):
    a = hpd_matrix(120, np.float64, rng, cond=cond)
    c, _ = hybridla.cho_factor(a, backend=backend, nb=16)
    assert potrf_ratio(a, c, False) < THRESH


@pytest.mark.parametrize("failing", [1, 17, 40, 100])
def test_not_positive_definite_info_matches_lapack(backend, failing, rng):
    """SPD except for one leading minor: the error names the same minor as LAPACK's potrf."""
    a = hpd_matrix(100, np.float64, rng)
    a[failing - 1, failing - 1] = -abs(a[failing - 1, failing - 1])
    _, info_ref = scipy.linalg.lapack.dpotrf(a, lower=1)
    assert info_ref == failing
    saved = a.copy()
    with pytest.raises(scipy.linalg.LinAlgError, match=f"^{info_ref}-th leading minor"):
        hybridla.cho_factor(a, lower=True, backend=backend, nb=16)
    assert np.array_equal(a, saved)  # overwrite_a=False: untouched even on failure
    info, _ = _driver_potrf(a, backend, nb=16)
    assert info == info_ref


def _driver_potrf(a, backend, nb):
    from hybridla.lapack import potrf
    from hybridla.scheduler.plan import make_plan
    ops = hybridla.backend.get_backend(backend)
    work = np.array(a, order="F", copy=True)
    plan = make_plan(ops, *a.shape, a.dtype, routine="cho", nb=nb)
    A = ops.host_matrix(work, work, plan.nb)
    try:
        return potrf(A, plan, "L")
    finally:
        A.close()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nrhs", [None, 3])
def test_cho_solve_and_solve_pos_backward_error(backend, dtype, nrhs, rng):
    n = 90
    a = hpd_matrix(n, dtype, rng)
    b = random_matrix(n, 1 if nrhs is None else nrhs, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    for lower in (True, False):
        c = hybridla.cho_factor(a, lower=lower, backend=backend, nb=16)
        x = hybridla.cho_solve(c, b)
        assert x.shape == b.shape
        assert solve_backward_error(a, x, b) < THRESH
        x2 = hybridla.solve(a, b, assume_a="pos", lower=lower, backend=backend, nb=16)
        assert solve_backward_error(a, x2, b) < THRESH


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_returns_the_triangular_factor(backend, dtype, lower, rng):
    """LAPACK's ratio, and agreement with scipy's factor (the Cholesky factor with a positive
    diagonal is unique) to what its perturbation theory allows: ||dR||_1 / ||R||_1 <= kappa n eps
    to first order (Sun; Higham, ASNA thm 10.8), kappa = 1e2 here."""
    n, kappa = 60, 1e2
    a = hpd_matrix(n, dtype, rng, cond=kappa)
    factor = hybridla.cholesky(a, lower=lower, backend=backend, nb=16)
    assert_cholesky_factor(a, factor, lower, dtype)
    expected = scipy.linalg.cholesky(a, lower=lower)
    agreement = norm1(wide(factor) - wide(expected)) / (kappa * n * eps_of(dtype)
                                                          * norm1(wide(expected)))
    assert agreement < THRESH, agreement


def test_cholesky_errors_name_the_argument():
    with pytest.raises(ValueError, match="square"):
        hybridla.cho_factor(np.ones((3, 4)))
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.cho_factor(np.full((3, 3), np.nan))
    c = hybridla.cho_factor(np.eye(3) * 2)
    with pytest.raises(ValueError, match="b must have 3 rows"):
        hybridla.cho_solve(c, np.ones(4))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where", ["c", "b", "b1d"])
@pytest.mark.parametrize("lower", [True, False])
def test_cho_solve_check_finite_rejects_non_finite(dtype, where, lower, rng):
    """cho_solve(check_finite=True), the default, raises ValueError naming c or b for a NaN or an
    infinity in the factor's triangle of c or anywhere in b (scipy's asarray_chkfinite), before
    any work: b is untouched even with overwrite_b=True. check_finite=False lets them through
    (the NaN reaches x instead of an error)."""
    n = 12
    a = hpd_matrix(n, dtype, rng)
    c0, _ = hybridla.cho_factor(a, lower=lower, backend="host")
    b0 = np.asfortranarray(random_matrix(n, 2, dtype, rng))
    if where == "b1d":
        b0 = b0[:, 0].copy()
    name = "c" if where == "c" else "b"
    for bad in (np.nan, np.inf, -np.inf):
        c, b = c0.copy(order="F"), b0.copy(order="F")
        if where == "c":
            c[(n - 1, 3) if lower else (3, n - 1)] = bad  # inside the factor's triangle
        else:
            b[5] = bad
        saved = b.copy()
        with pytest.raises(ValueError, match=f"{name} must not contain infs or NaNs"):
            hybridla.cho_solve((c, lower), b, overwrite_b=True, backend="host")
        np.testing.assert_array_equal(b, saved)
        with pytest.raises(ValueError, match="infs or NaNs"):
            hybridla.cho_solve((c, lower), b, check_finite=True, backend="host")
        with np.errstate(invalid="ignore", over="ignore"):
            x = hybridla.cho_solve((c, lower), b, check_finite=False, backend="host")
        assert not np.all(np.isfinite(x)), bad


@pytest.mark.cuda
@pytest.mark.parametrize("lower", [True, False])
def test_gpu_interface_cholesky(device_kind, lower, rng):
    a = hpd_matrix(130, np.float64, rng)
    c_dev, _ = hybridla.cho_factor(to_device(a, device_kind), lower=lower, nb=32)
    assert potrf_ratio(a, to_host(c_dev), lower) < THRESH
    b = random_matrix(130, 2, np.float64, rng)
    x = hybridla.cho_solve((c_dev, lower), to_device(b, device_kind))
    assert solve_backward_error(a, to_host(x), b) < THRESH
    factor = hybridla.cholesky(to_device(a, device_kind), lower=lower, nb=32)
    assert_cholesky_factor(a, to_host(factor), lower, np.float64)


@pytest.mark.cuda
@pytest.mark.parametrize("transfer", ["staged", "register"])
def test_cpu_interface_pinned_cholesky(cuda_backend, transfer):
    """Large enough to be staged or pinned while it streams (device.pin_min_bytes)."""
    n = 2944
    a = hpd_matrix(n, np.float64, np.random.default_rng(3))
    with hybridla.config.set({"device.host_transfer": transfer}):
        c, _ = hybridla.cho_factor(a, lower=True, backend="cuda", nb=256)
    assert potrf_ratio(a, c, True) < THRESH


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("tail", [0, 70, 150, 400])
def test_gpu_interface_tail_in_one_device_potrf(device_kind, dtype, lower, tail, rng):
    """cho.tail: the trailing matrix of that order or less goes to cuSOLVER's potrf whole (tail
    70 starts it inside a block of 32; 400 covers the whole matrix); the factor is the same as
    without it, and the other triangle is left as it was."""
    n = 173
    a = hpd_matrix(n, dtype, rng)
    marked = a.copy(order="F")
    other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
    marked[other] = 7
    with hybridla.config.set({"cho.tail": tail}):
        c_dev, _ = hybridla.cho_factor(to_device(marked, device_kind), lower=lower, nb=32)
    c = to_host(c_dev)
    assert potrf_ratio(a, c, lower) < THRESH
    assert (c[other] == 7).all()


@pytest.mark.cuda
@pytest.mark.parametrize("failing", [17, 120, 173])
def test_gpu_interface_tail_info_matches_lapack(device_kind, failing, rng):
    """A minor that fails before the tail starts (17) or inside it: LAPACK's info either way."""
    n = 173
    a = hpd_matrix(n, np.float64, rng)
    a[failing - 1, failing - 1] = -abs(a[failing - 1, failing - 1])
    _, info_ref = scipy.linalg.lapack.dpotrf(a, lower=1)
    assert info_ref == failing
    with hybridla.config.set({"cho.tail": 80}):
        with pytest.raises(scipy.linalg.LinAlgError, match=f"^{info_ref}-th leading minor"):
            hybridla.cho_factor(to_device(a, device_kind), lower=True, nb=32)


def test_plan_takes_the_tuning_entrys_panel_place_and_tail():
    """panel "auto" resolves to the device entry's cho_panel where it has one, cho.tail "auto"
    to its cho_tail; explicit values win; a bad tail names the option."""
    from hybridla.scheduler.plan import make_plan
    ops = hybridla.backend.get_backend("host")  # its entry is "host": tuning.host.*
    plain = make_plan(ops, 100, 100, np.float64, routine="cho")
    assert (plain.panel, plain.tail) == ("auto", 0)
    with hybridla.config.set({"tuning.host.cho_panel": "gpu", "tuning.host.cho_tail": 64}):
        tuned = make_plan(ops, 100, 100, np.float64, routine="cho")
        assert (tuned.panel, tuned.tail) == ("gpu", 64)
        assert make_plan(ops, 100, 100, np.float64, routine="cho", panel="cpu").panel == "cpu"
        assert make_plan(ops, 100, 100, np.float64, routine="lu").panel == "auto"
        with hybridla.config.set({"cho.tail": 7}):
            assert make_plan(ops, 100, 100, np.float64, routine="cho").tail == 7
    with hybridla.config.set({"cho.tail": 2.5}):
        with pytest.raises(ValueError, match="cho.tail"):
            make_plan(ops, 100, 100, np.float64, routine="cho")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("starts, below", [([0, 8, 16, 24], 5), ([0, 4, 12, 16, 28], 5),
                                           ([0, 12], 5), (list(range(0, 72, 8)), 0),
                                           (list(range(0, 56, 8)), 9)],
                         ids=["spaced", "uneven", "two", "nine-spaced", "seven-spaced"])
def test_the_staircase_update_is_the_lower_staircase_of_c_minus_p_p_h(backend, dtype, starts,
                                                                      below):
    """update/chol.staircase_update (the distributed Cholesky's trailing update of a worker's
    block columns): block column i from row starts[i] down gets C - P P^H, the strict upper
    triangle of its diagonal block and everything above it untouched; the last block column
    narrower than nb (with `below` rows under it); equally spaced blocks in batched calls
    (the rectangles of staircase_rectangles, the diagonal runs' row_step), any other spacing
    block by block."""
    from hybridla.backend import get_backend
    from hybridla.update.chol import staircase_update

    ops, nb, rng = get_backend(backend), 4, np.random.default_rng(7)
    width = nb * (len(starts) - 1) + 3
    rows = starts[-1] + 3 + below
    p = random_matrix(rows, 3, dtype, rng)
    c = random_matrix(rows, width, dtype, rng)
    for i, top in enumerate(starts):  # a Hermitian matrix's diagonal is real (herk keeps it so)
        for j in range(i * nb, min(i * nb + nb, width)):
            c[top + j - i * nb, j] = c[top + j - i * nb, j].real
    expected = c.copy()
    product = p @ p.conj().T
    for i, top in enumerate(starts):
        c0, c1 = i * nb, min(i * nb + nb, width)
        for j in range(c0, c1):
            r0 = top + j - c0  # from the diagonal of its block down
            expected[r0:, j] -= product[r0:, top + j - c0]
    lane = ops.lane("gpu:update")
    if backend == "host":
        got = np.asfortranarray(c.copy())
        staircase_update(ops, lane, np.asfortranarray(p), got, starts, nb,
                         lambda lane, r, k: np.empty((r, k), dtype, order="F"))
    else:  # the blocks of device stores
        P, C = ops.matrix(rows, 3, dtype, nb), ops.matrix(rows, width, dtype, nb)
        try:
            with lane:
                ops.from_host(lane, np.asfortranarray(p), P.block(0, rows, 0, 3))
                ops.from_host(lane, np.asfortranarray(c), C.block(0, rows, 0, width))
                staircase_update(ops, lane, P.block(0, rows, 0, 3), C.block(0, rows, 0, width),
                                 starts, nb, C.scratch)
                got = ops.to_host(lane, C.block(0, rows, 0, width))
            ops.synchronize()
        finally:
            P.close()
            C.close()
    tol = 50 * eps_of(dtype) * max(1.0, np.abs(product).max())
    assert np.abs(got - expected).max() <= tol


@pytest.mark.parametrize("count, rows", [(9, 70), (16, 130), (1, 20)])
def test_the_staircase_rectangles_cover_each_blocks_rows_below_its_diagonal_once(count, rows):
    """staircase_rectangles: every (row, block) below a block's diagonal block in exactly one
    rectangle, nothing above it, the largest rectangle first."""
    from hybridla.update.chol import staircase_rectangles
    nb, spacing = 4, 8
    tops = [i * spacing for i in range(count)]
    rows = max(rows, tops[-1] + nb)
    covered = np.zeros((rows, count), dtype=int)
    rectangles = staircase_rectangles(tops, nb, rows)
    for i0, i1, r0, r1 in rectangles:
        covered[r0:r1, i0:i1] += 1
    needed = np.zeros_like(covered)
    for i, top in enumerate(tops):
        needed[top + nb:, i] = 1
    np.testing.assert_array_equal(covered, needed)
    areas = [(i1 - i0) * (r1 - r0) for i0, i1, r0, r1 in rectangles]
    assert areas == sorted(areas, reverse=True)
