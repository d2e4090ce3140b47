"""Mixed-precision solvers (solve_mixed, lstsq_mixed): converge to the working precision's
stopping test where theory allows, fall back where not, and the answer is always accurate with
fallback on; codes -2 (overflow on narrowing) and -3 (low-precision factorization failed) as
MAGMA's and cuSOLVER's; both backends (the host one emulates the low precisions), both
interfaces."""
from contextlib import nullcontext

import numpy as np
import pytest
import scipy.linalg

import hybridla
from hybridla.lapack._preconditioner import lu_permutation
from _conditioned import general, spd, tall
from _lapack_checks import (device_kind_of, forward_error_ratio, least_squares_ratio,
                            lstsq_forward_ratio, normwise_backward_error, random_matrix,
                            solve_backward_error, to_device, to_host)
from _mixed_checks import assert_least_squares_accurate, backward_ratio

N = 150  # not a multiple of the block size below
NB = 32


def _eps(dtype):
    return float(np.finfo(dtype).eps)


# -- convergence where theory allows ---------------------------------------------------------
@pytest.mark.parametrize("lowest, refinement, kappa", [
    ("half", "classical-gmres", 1e2), ("half", "classical-gmres", 1e5),
    ("half", "gmres", 1e4), ("half", "classical", 1e2),
    ("bfloat16", "classical-gmres", 1e3), ("tf32", "classical-gmres", 1e5),
    ("single", "classical", 1e5), ("single", "classical-gmres", 1e8),
    ("half-x3", "classical", 1e5), ("half-x3", "classical-gmres", 1e8)])
def test_lu_converges_to_the_stopping_test(backend, lowest, refinement, kappa, rng):
    a = general(N, kappa, np.float64, rng)
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    x, info = hybridla.solve_mixed(a, b, lowest=lowest, refinement=refinement, backend=backend,
                                   nb=NB)
    assert info.iterations >= 0 and not info.fell_back, info
    assert backward_ratio(a, x, b, np.float64) <= 1.0
    assert x.shape == b.shape and x.dtype == np.float64
    assert info.residuals[-1] <= np.sqrt(N) * _eps(np.float64)
    assert set(info.seconds) >= {"convert", "factor", "refine", "total"}


@pytest.mark.parametrize("kappa", [1e2, 1e6, 1e10, 1e12])
@pytest.mark.parametrize("refinement", ["classical-gmres", "gmres", "classical"])
def test_lu_always_accurate_with_fallback(backend, kappa, refinement, rng):
    """Whatever kappa: either refinement passed the test, or it fell back to float64 LU."""
    a = general(N, kappa, np.float64, rng)
    b = random_matrix(N, 2, np.float64, rng)
    x, info = hybridla.solve_mixed(a, b, lowest="half", refinement=refinement, backend=backend,
                                   nb=NB)
    assert info.fell_back == (info.iterations < 0)
    if info.fell_back:
        assert solve_backward_error(a, x, b) < 30  # float64 LU's, as LAPACK's testers ask
    else:
        assert backward_ratio(a, x, b, np.float64) <= 1.0
    if kappa >= 1e10:  # kappa u_half ~ 5e6: classical refinement cannot converge
        if refinement == "classical":
            assert info.fell_back


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("case", ["preconditioned", "kappa 1e8, no preconditioner"])
def test_device_space_takes_the_host_space_steps(backend, dtype, case, rng):
    """GMRES with its Krylov basis where A lives (DeviceSpace: solves, products and
    Gram-Schmidt there, H's column to the host) gives the cycle of the host basis (HostSpace,
    tested against an explicit Krylov least-squares solve in test_refine.py), to rounding, and
    keeps its basis orthonormal; both keep the products A Z that give A D without a pass over
    A. Preconditioned: three columns of which the middle one stops
    after its first step (the others then run as two runs of one column). Kappa 1e8 without a
    preconditioner: a nearly dependent Krylov basis, which only the second Gram-Schmidt pass
    keeps orthonormal."""
    from hybridla.lapack._mixed_operators import DeviceSpace, WorkingOperator
    from hybridla.lapack._refine import HostSpace, _Krylov, _Operators
    ops = hybridla.backend.get_backend(backend)
    if case == "preconditioned":
        n, k, m, tolerance = 40, 3, 6, 1e-10
        a = general(n, 10, dtype, rng)
        m_inv = np.linalg.inv(a + 0.02 * general(n, 1, dtype, rng))
        r = general(n, 1, dtype, rng)[:, :k]
        stop_at = np.array([0.0, 0.9 * np.linalg.norm(r[:, 1]), 0.0])
    else:
        n, k, m, tolerance = 80, 1, 40, 1e-6
        a, m_inv = general(n, 1e8, dtype, rng), np.eye(n, dtype=dtype)
        r = general(n, 1, dtype, rng)[:, :k]
        stop_at = np.zeros(k)
    stores = [ops.matrix(n, n, dtype, 16) for _ in range(2)]
    try:
        lane = ops.lane("gpu:panel")
        for store, matrix in zip(stores, (a, m_inv)):
            ops.from_host(lane, np.asfortranarray(matrix), store.block(0, n, 0, n))

        class DensePreconditioner:  # M^-1 as a matrix where it lives
            def apply(self, src, dst):
                with lane:
                    ops.apply(lane, stores[1].block(0, n, 0, n), src, dst)

        on_host = _Operators(lambda x: a @ x, lambda x: m_inv @ x, n, np.dtype(dtype))
        expected, expected_products = _Krylov(
            HostSpace(on_host, n, k, m, dtype, keep_products=True), k, m, dtype).correction(
            on_host, r, stop_at)
        counter = _Operators(None, None, n, np.dtype(dtype))
        space = DeviceSpace(ops, WorkingOperator(ops, stores[0], k), DensePreconditioner(),
                            counter, n, k, m, dtype, keep_products=True)
        got, got_products = _Krylov(space, k, m, dtype).correction(counter, r, stop_at)
        basis = np.asarray(ops.to_host(lane, space.V))
    finally:
        for store in stores:
            store.close()
    assert counter.inner == on_host.inner == (2 * m + 1 if k == 3 else m)
    residual = np.linalg.norm(r - a @ got, axis=0)
    assert residual == pytest.approx(np.linalg.norm(r - a @ expected, axis=0), rel=tolerance)
    if case == "preconditioned":
        assert np.abs(got - expected).max() <= tolerance * np.abs(expected).max()
    # the kept products give A D (refine's residual_from_products), both spaces alike
    for D, AD in ((got, got_products), (expected, expected_products)):
        assert np.abs(AD - a @ D).max() <= 1e-12 * np.abs(a).max() * np.abs(D).max() * n
    for c in (0, k - 1):
        v = basis[:, c::k][:, :m + 1]
        assert np.abs(v.conj().T @ v - np.eye(m + 1)).max() <= 1e-13


@pytest.mark.parametrize("n", [0, 1, 2, 7, 300])
def test_lu_permutation_is_the_sequential_interchanges(n, rng):
    pivots = np.array([rng.integers(i, n) for i in range(n)], dtype=np.int64)
    b = rng.standard_normal(n)
    expected = b.copy()
    for i, p in enumerate(pivots):  # LAPACK's order: row i with row pivots[i]
        expected[[i, p]] = expected[[p, i]]
    np.testing.assert_array_equal(b[lu_permutation(pivots)], expected)


def test_not_converging_without_fallback_returns_the_code(backend, rng):
    a = general(N, 1e10, np.float64, rng)
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    x, info = hybridla.solve_mixed(a, b, lowest="half", refinement="classical", max_iter=3,
                                   fallback=False, backend=backend, nb=NB)
    assert info.iterations in (-1, -3) and not info.fell_back
    assert x.shape == b.shape


def test_several_right_hand_sides_and_complex(backend, rng):
    a = general(N, 1e4, np.complex128, rng)
    b = random_matrix(N, 3, np.complex128, rng)
    b[:, 1] = 0
    for refinement in ("classical-gmres", "gmres"):
        x, info = hybridla.solve_mixed(a, b, refinement=refinement, backend=backend, nb=NB)
        assert info.lowest == "tf32" and info.iterations >= 0, info
        assert x.shape == (N, 3) and x.dtype == np.complex128
        assert np.all(x[:, 1] == 0)
        assert backward_ratio(a, x, b, np.complex128) <= 1.0


@pytest.mark.parametrize("lowest", ["half", "bfloat16", "tf32"])
def test_float32_working_precision(backend, lowest, rng):
    a = general(N, 1e2, np.float32, rng)
    b = random_matrix(N, 1, np.float32, rng)[:, 0]
    x, info = hybridla.solve_mixed(a, b, lowest=lowest, backend=backend, nb=NB)
    assert x.dtype == np.float32 and info.iterations >= 0, info
    assert backward_ratio(a, x, b, np.float32) <= 1.0


# -- codes -2 and -3 -------------------------------------------------------------------------
def test_overflow_on_narrowing_gives_code_minus_2_and_a_correct_answer(backend, rng):
    a = general(N, 1e3, np.float64, rng) * 1e7  # entries far above half's 65504
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    x, info = hybridla.solve_mixed(a, b, lowest="half", equilibrate=False, backend=backend,
                                   nb=NB)
    assert info.iterations == -2 and info.fell_back
    # the fallback is float64 LU: backward stable, so within kappa n eps of LAPACK's answer
    assert normwise_backward_error(a, x, b) < 30
    assert solve_backward_error(a, x, b) < 30
    assert forward_error_ratio(x, scipy.linalg.solve(a, b), np.linalg.cond(a)) < 30
    with pytest.raises(hybridla.LinAlgError, match="overflows half") as caught:
        hybridla.solve_mixed(a, b, lowest="half", equilibrate=False, fallback=False,
                             backend=backend, nb=NB)
    assert caught.value.info.iterations == -2
    # scaled by powers of two first, the same matrix is no problem for half
    x, info = hybridla.solve_mixed(a, b, lowest="half", backend=backend, nb=NB)
    assert info.iterations >= 0 and backward_ratio(a, x, b, np.float64) <= 1.0


@pytest.mark.parametrize("pivoting", ["partial", "window"])
@pytest.mark.parametrize("zero", ["column", "row"])
def test_singular_matrix_info_as_lapack(backend, pivoting, zero, rng):
    """A zero column (row) makes U(40, 40) = 0 exactly whatever the precision with partial
    pivoting: getrf's info is 41. Window pivoting would randomize the zero away, so a matrix
    with a zero line gets partial pivoting (gesv_mixed)."""
    a = random_matrix(N, N, np.float64, rng)
    if zero == "column":
        a[:, 40] = 0
    else:
        a[40] = 0
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    _, _, lapack_info = scipy.linalg.lapack.dgetrf(a)
    with hybridla.config.set({"mixed.panel_pivoting": pivoting}), \
            pytest.raises(hybridla.LinAlgError, match="Matrix is singular"):
        hybridla.solve_mixed(a, b, backend=backend, nb=NB)
    with hybridla.config.set({"mixed.panel_pivoting": pivoting}), \
            pytest.raises(hybridla.LinAlgError, match="Matrix is singular") as caught:
        hybridla.solve_mixed(a, b, fallback=False, backend=backend, nb=NB)
    assert caught.value.info.iterations == -3
    assert caught.value.info.info == lapack_info
    assert lapack_info == 41 or zero == "row"


TOURNAMENT = {"mixed.panel_leaf": 32, "mixed.panel_pivoting": "tournament"}


@pytest.mark.parametrize("kappa", [1e2, 1e6])
def test_lu_with_tournament_pivoting_converges(backend, kappa, rng):
    """Recursive panels of 128 with tournament leaves of 32 over several tree levels (700 rows,
    chunks of 256): a preconditioner as good as partial pivoting's."""
    n = 700
    a = general(n, kappa, np.float64, rng)
    b = random_matrix(n, 2, np.float64, rng)
    with hybridla.config.set(TOURNAMENT):
        x, info = hybridla.solve_mixed(a, b, lowest="half-x3", backend=backend, nb=128)
    assert info.iterations >= 0 and not info.fell_back, info
    assert backward_ratio(a, x, b, np.float64) <= 1.0


WINDOW = {"mixed.panel_pivoting": "window"}


@pytest.mark.parametrize("n, kappa, dtype, window, leaf", [
    (700, 1e2, np.float64, 2, 0), (700, 1e6, np.float64, 2, 0), (700, 1e6, np.float64, 1, 0),
    (701, 1e4, np.float64, 3, 0), (703, 1e4, np.complex128, 2, 0),
    (700, 1e6, np.float64, 2, 16), (701, 1e4, np.float64, 2, 32)])
def test_lu_pivoting_within_a_window_converges(backend, n, kappa, dtype, window, leaf, rng):
    """The copy randomized by butterflies (hybridla/butterfly.py; n = 701, 703: rows past the
    last group of four left as they are), its LU's pivots searched for within `window` block
    rows of 128 from the diagonal (1: the diagonal block; the last windows cut short by the
    matrix), the window factored whole or recursively down to leaves of `leaf` (16: one
    thread-block cluster each on a device): a preconditioner that converges as partial
    pivoting's does, several right-hand sides, complex too (tf32)."""
    a = general(n, kappa, dtype, rng)
    b = random_matrix(n, 2, dtype, rng)
    with hybridla.config.set({**WINDOW, "mixed.pivot_window": window, "mixed.panel_leaf": leaf}):
        x, info = hybridla.solve_mixed(a, b, backend=backend, nb=128)
    assert info.iterations >= 0 and not info.fell_back, info
    assert backward_ratio(a, x, b, dtype) <= 1.0


@pytest.mark.parametrize("lookahead, leaf", [(1, 0), (2, 0), (1, 32)])
def test_window_lu_is_an_lu_with_pivots_in_the_windows(backend, lookahead, leaf, rng):
    """getrf with window pivoting on its own (float64, no rounding): P A = L U to float64's
    accuracy, and every step's pivots within its window of two block rows; with leaves, within
    two block rows of the leaf's width from the leaf's diagonal (nb 128 halved to leaves of
    32: windows of 64 rows)."""
    from hybridla.lapack import getrf
    from hybridla.scheduler.plan import make_plan
    ops = hybridla.backend.get_backend(backend)
    n, nb = 1000, 128
    a = np.asfortranarray(rng.standard_normal((n, n)))
    with hybridla.config.set({**WINDOW, "mixed.pivot_window": 2, "mixed.panel_leaf": leaf}):
        plan = make_plan(ops, n, n, np.float64, routine="mixed", nb=nb, lookahead=lookahead,
                         panel="gpu")
    store = ops.matrix(n, n, np.float64, nb)
    try:
        lane = ops.lane("gpu:update")
        ops.from_host(lane, a, store.block(0, n, 0, n))
        pivots, info, _ = getrf(store, plan)
        lu = ops.to_host(lane, store.block(0, n, 0, n))
    finally:
        store.close()
    assert info == 0
    pivots = np.asarray(pivots)
    width = leaf or nb
    blocks = np.arange(n) // width * width
    assert np.all((pivots >= np.arange(n)) & (pivots < np.minimum(blocks + 2 * width, n)))
    lower, upper = np.tril(lu, -1) + np.eye(n), np.triu(lu)
    permuted = a[lu_permutation(pivots)]
    residual = np.abs(permuted - lower @ upper).max() / np.abs(a).max()
    assert residual < 1e-12, residual


def test_lu_pivoting_within_a_window_of_a_matrix_that_needs_pivoting(backend, rng):
    """A = [0 B; C 0] (n = 512, nb 128): the windows of two block rows of A's first half are
    zero, so an LU of A itself that pivots within them fails at once (U(1, 1) = 0). Of the
    randomized copy it does not: refinement converges without falling back."""
    n, half = 512, 256
    a = np.zeros((n, n))
    a[:half, half:] = general(half, 1e2, np.float64, rng)
    a[half:, :half] = general(half, 1e2, np.float64, rng)
    b = random_matrix(n, 1, np.float64, rng)[:, 0]
    with hybridla.config.set(WINDOW):
        x, info = hybridla.solve_mixed(a, b, backend=backend, nb=128)
    assert info.iterations >= 0 and not info.fell_back, info
    assert backward_ratio(a, x, b, np.float64) <= 1.0


def test_the_mixed_lu_takes_its_own_block_size_from_the_tuning_entry(rng):
    """nb "auto" of solve_mixed: the device entry's mixed_lu_nb_large for the LU where it has one,
    mixed_nb_large for the Cholesky (and for the LU where there is none)."""
    import hybridla._solve_mixed
    from hybridla.scheduler.plan import make_plan
    seen = []
    real = hybridla._solve_mixed.make_plan

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        seen.append(plan.nb)
        return plan
    a, b = spd(1100, 1e2, np.float64, rng), np.ones(1100)
    ops = hybridla.backend.get_backend("host")
    entry = {"tuning.host.mixed_nb_large": 96, "tuning.host.nb_switch": 1000}
    with hybridla.config.set(entry), pytest.MonkeyPatch.context() as patch:
        patch.setattr(hybridla._solve_mixed, "make_plan", spy)
        hybridla.solve_mixed(a, b, backend="host", max_iter=1, fallback=False)
        with hybridla.config.set({"tuning.host.mixed_lu_nb_large": 160}):
            hybridla.solve_mixed(a, b, backend="host", max_iter=1, fallback=False)
            hybridla.solve_mixed(a, b, assume_a="pos", backend="host", max_iter=1,
                                 fallback=False)
        assert make_plan(ops, 1100, 1100, np.float32, routine="mixed").nb == 96
    assert seen == [96, 160, 96]


def test_window_pivoting_is_for_randomized_matrices_only(backend, rng):
    a = general(64, 1e2, np.float64, rng)
    with hybridla.config.set({"lu.panel_pivoting": "window"}), \
            pytest.raises(ValueError, match="lu.panel_pivoting='window' is stable only for a "
                                            "randomized matrix"):
        hybridla.lu_factor(a, backend=backend)
    with hybridla.config.set({"mixed.pivot_window": 0}), \
            pytest.raises(ValueError, match="mixed.pivot_window"):
        hybridla.solve_mixed(a, np.ones(64), backend=backend)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("rows", [True, False])
def test_equilibration_scales_by_the_nearest_powers_of_two(backend, dtype, rows, rng):
    """The backend's equilibration (cuda: the scales made on the device between the passes)
    against NumPy: r_i = 2^-round(log2 max_j |a_ij|), c_j the same of diag(r) A's columns,
    the sums of |a_ij|; a zero row and a zero column keep scale 1 and are reported; maxima
    next to sqrt(2) 2^k round both ways as log2 does."""
    from hybridla.backend.reduced import inverse_power_of_two
    ops = hybridla.backend.get_backend(backend)
    m, n = 70, 50
    a = random_matrix(m, n, dtype, rng) * (2.0 ** rng.integers(-20, 20, m))[:, None]
    a[3], a[:, 7] = 0, 0
    a[5, 0] = np.sqrt(2) * 2.0 ** 9 * (1 + 1e-15)  # the row's maximum: log2 just above k + 1/2
    a[6, 0] = np.sqrt(2) * 2.0 ** 9 * (1 - 1e-15)  # just below
    a[5, 1:], a[6, 1:] = 0, 0
    a = a.astype(dtype)
    store = ops.matrix(m, n, dtype, 32)
    try:
        ops.from_host(ops.lane("gpu:update"), np.asfortranarray(a), store.block(0, m, 0, n))
        scaling, kept = ops.equilibration(ops.lane("gpu:update"), store,
                                          store.block(0, m, 0, n), rows, True,
                                          meanwhile=lambda: "overlapped")
    finally:
        store.close()
    modulus = np.abs(a).astype(np.float64)
    row_max = modulus.max(axis=1)
    r = 2.0 ** -np.round(np.log2(np.where(row_max > 0, row_max, 1))) if rows else np.ones(m)
    col_max = (r[:, None] * modulus).max(axis=0)
    c = 2.0 ** -np.round(np.log2(np.where(col_max > 0, col_max, 1)))
    assert kept == "overlapped"
    np.testing.assert_array_equal(scaling.r, r)
    np.testing.assert_array_equal(scaling.c, c)
    if rows and dtype != np.float32:  # (float32 rounds both to one number)
        assert scaling.r[5] == 2.0 ** -10 and scaling.r[6] == 2.0 ** -9
    np.testing.assert_allclose(scaling.row_max, row_max, rtol=1e-7)
    np.testing.assert_allclose(scaling.col_max, col_max, rtol=1e-7)
    np.testing.assert_allclose(scaling.row_sum, modulus.sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(scaling.col_sum, modulus.sum(axis=0), rtol=1e-6)
    assert scaling.zero_line and scaling.norm_inf == pytest.approx(modulus.sum(axis=1).max())
    np.testing.assert_array_equal(inverse_power_of_two([0.0, np.inf, np.nan, 3.0]),
                                  [1.0, 1.0, 1.0, 0.25])


@pytest.mark.parametrize("n", [4, 13, 150])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_butterfly_kernels_are_the_transform(backend, n, dtype, rng):
    """The backend's butterfly_rows (any scales, op W or W^T, in place) and its narrow with a
    butterfly (from the working matrix, and in place on a low-precision copy) against the
    transforms as explicit matrices, built column by column from hybridla/butterfly.py's
    apply_groups."""
    from hybridla.butterfly import RandomButterfly, apply_groups
    ops = hybridla.backend.get_backend(backend)
    butterfly = RandomButterfly(n)
    U, V = (apply_groups(groups, np.eye(n)) for groups in (butterfly.left, butterfly.right))
    assert np.linalg.cond(U) < 2 and np.linalg.cond(V) < 2
    low_dtype = np.complex64 if dtype == np.complex128 else np.float32
    x = random_matrix(n, 3, dtype, rng)
    before, after = rng.random(n) + 0.5, rng.random(n) + 0.5
    r, c = 2.0 ** rng.integers(-3, 3, n), 2.0 ** rng.integers(-3, 3, n)
    a = np.asfortranarray(random_matrix(n, n, dtype, rng))
    source, store = ops.matrix(n, n, dtype, 32), ops.matrix(n, n, low_dtype, 32)
    try:
        keep = lambda name, array: ops.keep_on_device(store, name, array)  # noqa: E731
        groups = keep("left", butterfly.left), keep("right", butterfly.right)
        lane = ops.lane("gpu:update")
        X, A, low = (store.workspace("x", n, 3, dtype=dtype), source.block(0, n, 0, n),
                     store.block(0, n, 0, n))
        ops.from_host(lane, x, X)
        ops.from_host(lane, a, A)
        with lane:
            ops.butterfly_rows(lane, X, X, groups[0], True, before=keep("before", before))
        mixed = ops.to_host(lane, X)
        with lane:
            ops.butterfly_rows(lane, X, X, groups[1], False, after=keep("after", after))
        both = ops.to_host(lane, X)
        overflow = ops.narrow(lane, store, A, low, r, c, 1e30, butterfly=groups)
        transformed = ops.to_host(lane, low)
        ones = np.ones(n)
        assert not ops.narrow(lane, store, low, low, ones, ones, 1e30, butterfly=groups)
        twice = ops.to_host(lane, low)
        assert ops.narrow(lane, store, A, low, r, c, 1e-3, butterfly=groups)  # flags the limit
    finally:
        source.close()
        store.close()
    np.testing.assert_allclose(mixed, U.T @ (before[:, None] * x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(both, after[:, None] * (V @ mixed), rtol=1e-13, atol=1e-13)
    assert not overflow
    expected = U.T @ (r[:, None] * a * c) @ V
    np.testing.assert_allclose(transformed, expected, rtol=1e-5, atol=1e-5 * abs(expected).max())
    np.testing.assert_allclose(twice, U.T @ expected @ V, rtol=1e-5,
                               atol=1e-5 * abs(expected).max())


@pytest.mark.cuda
@pytest.mark.parametrize("split", [{"mixed.lu_panel_sms": 48, "device.sm_split": "green"},
                                   {"mixed.lu_panel_sms": 16, "device.sm_split": "green",
                                    "mixed.panel_leaf": 16}], ids=["48", "16-cluster-leaves"])
def test_lu_with_the_sms_split_by_green_contexts(cuda_backend, split, rng):
    """The LU's panels on their own green context, the rest on the others' (device.sm_split):
    the same convergence, and after the run the refinement and the next calls on the ordinary
    lanes (each waits for its green namesake's work)."""
    import hybridla.backend
    cuda = hybridla.backend.get_backend("cuda")
    n = 1500
    a = general(n, 1e6, np.float64, rng)
    b = random_matrix(n, 2, np.float64, rng)
    ordinary = cuda.lane("gpu:panel")
    with hybridla.config.set(split):
        x, info = hybridla.solve_mixed(a, b, lowest="half-x3", backend="cuda", nb=256)
        x_again, _ = hybridla.solve_mixed(a, b, lowest="half-x3", backend="cuda", nb=256)
    assert info.iterations >= 0 and not info.fell_back, info
    assert backward_ratio(a, x, b, np.float64) <= 1.0
    np.testing.assert_array_equal(x, x_again)
    assert cuda.lane("gpu:panel") is ordinary


@pytest.mark.parametrize("n, expected", [(60, 32), (61, 7)])
def test_lu_panel_sms_up_to_its_order(backend, monkeypatch, n, expected, rng):
    """mixed.lu_panel_sms reserves SMs for the LU's panels up to mixed.lu_panel_sms_max_n;
    a larger LU takes device.panel_sms, as everything else does."""
    import importlib
    gesv_mixed = importlib.import_module("hybridla.lapack.gesv_mixed")  # the module
    seen = []
    real_getrf = gesv_mixed.getrf

    def spy(A, plan):
        seen.append(plan.device_settings.panel_sms)
        return real_getrf(A, plan)
    monkeypatch.setattr(gesv_mixed, "getrf", spy)
    a = general(n, 10, np.float64, rng)
    with hybridla.config.set({"mixed.lu_panel_sms": 32, "mixed.lu_panel_sms_max_n": 60,
                              "device.panel_sms": 7}):
        x, info = hybridla.solve_mixed(a, np.ones(n), backend=backend)
    assert seen == [expected] and info.iterations >= 0
    assert backward_ratio(a, x, np.ones(n), np.float64) <= 1.0


@pytest.mark.cuda
def test_sm_split_is_checked(cuda_backend, rng):
    a = general(200, 1e2, np.float64, rng)
    with hybridla.config.set({"device.panel_sms": 16, "device.sm_split": "walls"}), \
            pytest.raises(ValueError, match="device.sm_split must be one of"):
        hybridla.lu_factor(a, backend="cuda")


def test_singular_matrix_with_tournament_pivoting(backend, rng):
    """An exact zero pivot under tournament pivoting leaves L's column below it not finite:
    still code -3 (not an overflow), LAPACK's info, and the float64 answer's error."""
    n = 700
    a = random_matrix(n, n, np.float64, rng)
    a[:, 300] = 0
    b = random_matrix(n, 1, np.float64, rng)[:, 0]
    with hybridla.config.set(TOURNAMENT), \
            pytest.raises(hybridla.LinAlgError, match="Matrix is singular") as caught:
        hybridla.solve_mixed(a, b, fallback=False, backend=backend, nb=128)
    assert caught.value.info.iterations == -3
    assert caught.value.info.info == 301


def test_nonfinite_and_bad_arguments_are_named(backend, rng):
    a = general(8, 10, np.float64, rng)
    b = np.ones(8)
    bad = a.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        hybridla.solve_mixed(bad, b, backend=backend)
    with pytest.raises(ValueError, match="b must not contain infs or NaNs"):
        hybridla.solve_mixed(a, np.full(8, np.inf), backend=backend)
    with pytest.raises(ValueError, match="lowest must be one of"):
        hybridla.solve_mixed(a, b, lowest="fp8", backend=backend)
    with pytest.raises(ValueError, match="refinement must be one of"):
        hybridla.solve_mixed(a, b, refinement="newton", backend=backend)
    with pytest.raises(ValueError, match="max_iter must be an integer >= 1"):
        hybridla.solve_mixed(a, b, max_iter=0, backend=backend)
    with pytest.raises(ValueError, match="inner_tol must be in"):
        hybridla.solve_mixed(a, b, inner_tol=2.0, backend=backend)
    with pytest.raises(ValueError, match="tol must be a positive number"):
        hybridla.solve_mixed(a, b, tol=-1.0, backend=backend)
    with pytest.raises(ValueError, match="lowest='half' is for real matrices"):
        hybridla.solve_mixed(a.astype(complex), b, lowest="half", backend=backend)
    with pytest.raises(ValueError, match="b must have 8 rows"):
        hybridla.solve_mixed(a, np.ones(7), backend=backend)
    with pytest.raises(ValueError, match="expected a square matrix for a"):
        hybridla.solve_mixed(a[:, :5], b, backend=backend)
    with pytest.raises(ValueError, match="assume_a must be"):
        hybridla.solve_mixed(a, b, assume_a="sym", backend=backend)


def test_inputs_untouched(backend, rng):
    a = np.asfortranarray(general(N, 1e3, np.float64, rng))
    b = random_matrix(N, 2, np.float64, rng)
    a0, b0 = a.copy(), b.copy()
    hybridla.solve_mixed(a, b, overwrite_a=True, overwrite_b=True, backend=backend, nb=NB)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


# -- Cholesky ---------------------------------------------------------------------------------
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("kappa", [1e2, 1e4])
def test_cholesky_converges_reading_one_triangle(backend, lower, kappa, rng):
    a = spd(N, kappa, np.float64, rng)
    garbage = np.where(np.tri(N, k=-1, dtype=bool).T if lower else np.tri(N, k=-1, dtype=bool),
                       1e3, a)  # the triangle that must not be read
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    x, info = hybridla.solve_mixed(garbage, b, assume_a="pos", lower=lower, lowest="half",
                                   backend=backend, nb=NB)
    assert info.iterations >= 0 and not info.fell_back, info
    assert backward_ratio(a, x, b, np.float64) <= 1.0


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("trapezoid", [False, True])
@pytest.mark.parametrize("compute", ["half", "half-x3", "tf32"])
@pytest.mark.parametrize("rounded_ahead", [False, True])
def test_reduced_herk_strips_cover_the_triangle(backend, uplo, trapezoid, compute,
                                                rounded_ahead, rng):
    """The tensor-core herk (GEMM strips from a panel rounded once, backend/reduced.py) updates
    the whole `uplo` triangle with the rounded operands' product, the strips' edges included;
    or a trapezoid of fewer block columns (rows, for upper) than rows, from the diagonal down
    (right). `rounded_ahead`: the panel is the part past `ahead` rows (columns) of a larger one
    rounded before by round_herk_panel, as the Cholesky's look-ahead and rest share theirs."""
    from hybridla.backend.reduced import HERK_STRIP, ReducedPrecisionOps, round_to
    ops = hybridla.backend.get_backend(backend)
    w, k, ahead = 2 * HERK_STRIP + 100, 48, 96 if rounded_ahead else 0
    c = HERK_STRIP + 40 if trapezoid else w
    a_shape, c_shape = ((w + ahead, k), (w, c)) if uplo == "L" else ((k, w + ahead), (c, w))
    trans = "N" if uplo == "L" else "C"
    a = np.asfortranarray(rng.standard_normal(a_shape), np.float32)
    before = np.asfortranarray(rng.standard_normal(c_shape), np.float32)
    low = ops.matrix(w + ahead, w + ahead, np.float32, 64)
    try:
        reduced = ReducedPrecisionOps(ops, compute, low)
        lane = ops.lane("gpu:update")
        whole, C = low.workspace("panel", *a_shape), low.workspace("update", *c_shape)
        ops.from_host(lane, a, whole)
        ops.from_host(lane, before, C)
        A = ops.sub_block(whole, ahead, ahead + w, 0, k) if uplo == "L" else \
            ops.sub_block(whole, 0, k, ahead, ahead + w)
        with lane:
            if rounded_ahead:
                reduced.round_herk_panel(lane, whole, trans, slot=1)
                reduced.herk(lane, uplo, trans, -1, A, 1, C, rounded=(1, ahead))
            else:
                reduced.herk(lane, uplo, trans, -1, A, 1, C)
        after = ops.to_host(lane, C)
        a = a[ahead:] if uplo == "L" else a[:, ahead:]
        assert not reduced.overflowed()
    finally:
        low.close()
    def product(x):
        return x @ x[:c].T if uplo == "L" else x[:, :c].T @ x

    rounded = round_to(a, compute).astype(np.float64)
    expected = before - product(rounded)
    # float32 sums of k products; tf32: cuBLAS may truncate where the emulation rounds
    # (backend/reduced.py), a relative 2^-10 more per operand
    bound = product(np.abs(rounded)) * (2.0 ** -8 if compute == "tf32" else k * 2.0 ** -23)
    inside = (np.tril if uplo == "L" else np.triu)(np.ones(c_shape, dtype=bool))
    assert np.all((np.abs(after - expected) <= bound + 1e-6)[inside])


@pytest.mark.parametrize("compute", ["single", "half-x3", "tf32"])
@pytest.mark.parametrize("diag, scale", [("U", 1), ("N", 1), ("N", 2.0 ** -20)])
@pytest.mark.parametrize("side", ["L", "R"])
def test_reduced_trsm_is_a_blocked_solve(backend, compute, diag, scale, side, rng):
    """The LU's solves halved down to TRSM_LEAF with this precision's GEMMs (backend/
    reduced.py): the row solve L11^-1 A12 (side L, lower) and the panels' A21 U11^-1 (side R,
    upper). Within a float32 solve's error of the exact one where the products are float32's
    (single, half-x3), and a TF32 product's where they are TF32's; the columns all solved (an
    order that is no multiple of the halving). Side R is the transpose of side L's problem.
    A triangle scaled by 2^-20 (and B with it, so that the solution is as before: L21's
    entries are bounded) has an inverse far beyond half's range: the leaves' products by
    their inverses (tf32-x3) keep float32's, so no rounding overflows."""
    from hybridla.backend.reduced import TRSM_LEAF, ReducedPrecisionOps
    ops = hybridla.backend.get_backend(backend)
    n, cols = 4 * TRSM_LEAF + 72, 300
    lower = np.tril(rng.standard_normal((n, n)), -1) / np.sqrt(n)
    np.fill_diagonal(lower, 1 if diag == "U" else 1 + rng.random(n))
    lower *= scale
    t = np.asfortranarray(lower + (np.triu(rng.standard_normal((n, n)), 1) if diag == "U"
                                   else 0), np.float32)  # the other triangle must not be read
    b = np.asfortranarray(scale * rng.standard_normal((n, cols)), np.float32)
    if side == "R":
        t, b = np.asfortranarray(t.T), np.asfortranarray(b.T)
    low = ops.matrix(n, n, np.float32, 64)
    try:
        reduced = ReducedPrecisionOps(ops, compute, low)
        lane = ops.lane("gpu:update")
        T, B = low.workspace("panel", n, n), low.workspace("update", *b.shape)
        ops.from_host(lane, t, T)
        ops.from_host(lane, b, B)
        with lane:
            reduced.trsm(lane, side, "L" if side == "L" else "U", "N", diag, 2, T, B)
        x = ops.to_host(lane, B)
        overflowed = reduced.overflowed()
    finally:
        low.close()
    assert not overflowed
    exact_lower = np.tril(lower, -1).astype(np.float32).astype(np.float64) + (
        np.eye(n) if diag == "U" else np.diag(np.diag(lower).astype(np.float32)))
    exact = scipy.linalg.solve_triangular(exact_lower, 2 * (b if side == "L" else b.T)
                                          .astype(np.float64), lower=True)
    if side == "R":
        exact = exact.T
    unit = 2.0 ** -10 if compute == "tf32" else 2.0 ** -23
    error = np.abs(x - exact).max() / np.abs(exact).max()
    assert error <= 4 * n * unit, error


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("nrhs", [1, 2])
def test_hermitian_product_reads_one_triangle(backend, uplo, dtype, nrhs, rng):
    """The refinement's A X for Hermitian A stored in one triangle (the device's own hemv for
    one column, hemm for more): the full matrix's product, NaN in the other triangle unread."""
    ops = hybridla.backend.get_backend(backend)
    n = 300
    h = random_matrix(n, n, dtype, rng)
    h = h + h.conj().T
    other = np.tri(n, k=-1, dtype=bool)
    other = other.T if uplo == "L" else other
    x = random_matrix(n, nrhs, dtype, rng)
    A = ops.matrix(n, n, dtype, 64)
    try:
        lane = ops.lane("gpu:panel")
        ops.from_host(lane, np.where(other, np.nan, h), A.block(0, n, 0, n))
        work = A.workspace("refine", 2 * n, nrhs)
        y = ops.apply_to_host(lane, A.block(0, n, 0, n), x, "N", uplo, work)
    finally:
        A.close()
    scale = np.abs(h) @ np.abs(x)
    assert np.all(np.abs(y - h @ x) <= 4 * n * np.finfo(dtype).eps * scale)


@pytest.mark.parametrize("uplo, diag", [("L", "N"), ("U", "N"), ("L", "U")])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("b", [128, 150])
def test_invert_triangular_blocks(backend, uplo, diag, dtype, b, rng):
    """The inverses of a triangle's diagonal blocks (the preconditioner's and the Cholesky
    solve's): W_c T_cc = I for each block, the last one shorter, at columns c (b + 1) of W and
    nothing but the triangle written there. b = 128: halves down to leaves of 64 and a last
    block of 44; b = 150: leaves of 75, an odd order taken whole."""
    ops = hybridla.backend.get_backend(backend)
    n = 300
    t = random_matrix(n, n, dtype, rng) / np.sqrt(b) + 4 * np.eye(n, dtype=dtype)
    t = np.tril(t) if uplo == "L" else np.triu(t)
    blocks = [(j0, min(j0 + b, n)) for j0 in range(0, n, b)]
    T = ops.matrix(n, n, dtype, b)
    try:
        # workspaces: leading dimension b, as the layout of the inverses wants
        W = T.workspace("inverses", b, len(blocks) * (b + 1))
        lane = ops.lane("gpu:panel")
        ops.from_host(lane, np.where(t == 0, np.nan, t).astype(dtype), T.block(0, n, 0, n))
        ops.from_host(lane, np.full(W.shape, np.nan, dtype), W)
        ops.invert_triangular_blocks(lane, uplo, diag, T.block(0, n, 0, n), b, W,
                                     T.workspace("scratch", b, -(-n // 4)))
        w = ops.to_host(lane, W)
    finally:
        T.close()
    if diag == "U":
        np.fill_diagonal(t, 1)
    unwritten = np.ones(w.shape, dtype=bool)
    for c, (j0, j1) in enumerate(blocks):
        kb, at = j1 - j0, c * (b + 1)
        inverse = w[:kb, at:at + kb]
        residual = inverse @ t[j0:j1, j0:j1] - np.eye(kb)
        assert np.abs(residual).max() < 50 * kb * np.finfo(dtype).eps
        other = np.triu(np.ones((kb, kb), bool), 1) if uplo == "L" else \
            np.tril(np.ones((kb, kb), bool), -1)
        assert np.all(inverse[other] == 0)
        unwritten[:kb, at:at + kb] = False
    assert np.all(w[unwritten] == 0)  # the whole workspace is zeroed first


def test_to_host_fills_the_given_array(backend, rng):
    """to_host(..., out=) (the preconditioner's host vectors, kept for a solve): the block's
    values land in `out`, which is returned; a column slice of a wider F-ordered array is a
    valid `out`, and its other columns are left alone."""
    ops = hybridla.backend.get_backend(backend)
    n = 70
    a = random_matrix(n, 3, np.float32, rng)
    A = ops.matrix(n, 3, np.float32, 32)
    try:
        lane = ops.lane("gpu:panel")
        ops.from_host(lane, a, A.block(0, n, 0, 3))
        wide = np.full((n, 4), 7.0, dtype=np.float32, order="F")
        got = ops.to_host(lane, A.block(0, n, 0, 2), out=wide[:, :2])
    finally:
        A.close()
    assert np.shares_memory(got, wide)
    assert np.array_equal(wide[:, :2], a[:, :2]) and np.all(wide[:, 2:] == 7.0)


def test_replay_runs_the_recorded_work_every_time(backend, rng):
    """backend.replay (the preconditioner's blocked solves: a CUDA graph on the device): the
    work of each key runs on every call, recorded once; launch=False runs nothing (the first
    key 2 below: recorded only); a failure while recording leaves the lane usable."""
    ops = hybridla.backend.get_backend(backend)
    n = 96
    a, x = random_matrix(n, n, np.float64, rng), random_matrix(n, 2, np.float64, rng)
    A = ops.matrix(n, n, np.float64, 32)
    try:
        lane = ops.lane("gpu:panel")
        X, copy, C = (A.workspace(name, n, 2) for name in ("x", "copy", "c"))
        ops.from_host(lane, a, A.block(0, n, 0, n))
        ops.from_host(lane, x, X)
        ops.from_host(lane, np.zeros((n, 2)), C)
        recordings = {}

        def accumulate(columns):  # C[:, columns] += A X[:, columns], through a copy of X
            ops.lacpy(lane, "A", ops.sub_block(X, 0, n, 0, columns),
                      ops.sub_block(copy, 0, n, 0, columns))
            ops.gemm(lane, 1, A.block(0, n, 0, n), ops.sub_block(copy, 0, n, 0, columns), 1,
                     ops.sub_block(C, 0, n, 0, columns))

        def fails():
            raise RuntimeError("while recording")

        with lane:
            ops.replay(lane, recordings, 2, lambda: accumulate(2), launch=False)
            for columns in (2, 1, 2, 2, 1):
                ops.replay(lane, recordings, columns, lambda: accumulate(columns))
            ops.replay(lane, recordings, 1, lambda: accumulate(1), launch=False)
            with pytest.raises(RuntimeError, match="while recording"):
                ops.replay(lane, recordings, "fails", fails)
            ops.gemm(lane, 1, A.block(0, n, 0, n), X, 1, C)
        c = ops.to_host(lane, C)
    finally:
        A.close()
    expected = (a @ x) * np.array([6, 4])
    assert np.abs(c - expected).max() <= 1e-12 * np.abs(a).sum(axis=1).max() * \
        np.abs(x).max() * 6
    # one recording per key on a device; the host backend runs the work and keeps nothing
    assert set(recordings) == (set() if backend == "host" else {1, 2})


@pytest.mark.parametrize("kappa", [1e6, 1e8, 1e12])
def test_cholesky_shift_or_fallback_always_accurate(backend, kappa, rng):
    a = spd(N, kappa, np.float64, rng)
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    x, info = hybridla.solve_mixed(a, b, assume_a="pos", lowest="half", backend=backend, nb=NB)
    assert info.fell_back == (info.iterations < 0)
    assert info.shift >= 0
    if not info.fell_back:
        assert backward_ratio(a, x, b, np.float64) <= 1.0
    else:
        assert solve_backward_error(a, x, b) < 30


def test_not_positive_definite(backend, rng):
    a = spd(N, 10, np.float64, rng)
    a[7, 7] = -1.0
    b = np.ones(N)
    _, lapack_info = scipy.linalg.lapack.dpotrf(a, lower=1)
    with pytest.raises(hybridla.LinAlgError, match=f"{lapack_info}-th leading minor"):
        hybridla.solve_mixed(a, b, assume_a="pos", lower=True, backend=backend, nb=NB)
    with pytest.raises(hybridla.LinAlgError, match="leading minor") as caught:
        hybridla.solve_mixed(a, b, assume_a="pos", lower=True, fallback=False,
                             backend=backend, nb=NB)
    assert caught.value.info.iterations == -3


# -- least squares ------------------------------------------------------------------------------
@pytest.mark.parametrize("lowest, kappa", [("half", 1e2), ("tf32", 1e3), ("single", 1e5)])
def test_lstsq_mixed_matches_lapack(backend, lowest, kappa, rng):
    a = tall(230, N, kappa, np.float64, rng)
    b = random_matrix(230, 2, np.float64, rng)
    x, info = hybridla.lstsq_mixed(a, b, lowest=lowest, backend=backend, nb=NB)
    assert info.iterations >= 0 and not info.fell_back, info
    assert_least_squares_accurate(a, x, b, kappa)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32, np.complex64])
@pytest.mark.parametrize("nrhs", [None, 2], ids=["b1d", "b2d"])
@pytest.mark.parametrize("force", ["no refinement", "overflow"])
def test_lstsq_mixed_fallback_is_lstsqs_answer(backend, force, nrhs, dtype, rng):
    """Where the low precision cannot answer (no refinement, which cannot reach the working
    precision from half's or tf32's QR; entries that overflow half without equilibration: code
    -2), lstsq_mixed falls back to lstsq, and the answer is lstsq's: LAPACK's least-squares
    ratio ||A^H r||_1 / (||A||_1 ||r||_1 max(m, n) eps) < 30, and scipy's solution within the
    problem's perturbation bound (lstsq_forward_ratio < 30)."""
    real = np.dtype(dtype).kind == "f"
    if force == "overflow" and not real:
        pytest.skip("half precision (where the overflow is) is for real matrices only")
    m, n = 120, 50
    a = tall(m, n, 1e2, dtype, rng)
    b = random_matrix(m, nrhs or 1, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    if force == "overflow":
        a = a * 1e7  # entries far above half's 65504
        options = dict(lowest="half", equilibrate=False)
    else:
        options = dict(lowest="half" if real else "tf32", refinement="none")
    x, info = hybridla.lstsq_mixed(a, b, backend=backend, nb=NB, **options)
    assert info.fell_back and info.iterations < 0, info
    assert info.iterations == -2 or force != "overflow", info
    assert x.shape == (n,) + b.shape[1:] and x.dtype == np.dtype(dtype)
    assert least_squares_ratio(a, x, b) < 30
    assert lstsq_forward_ratio(a, b, x, scipy.linalg.lstsq(a, b)[0]) < 30
    # without fallback: the code (and an error where there is no x at all)
    with pytest.raises(hybridla.LinAlgError) if force == "overflow" else nullcontext():
        x, info = hybridla.lstsq_mixed(a, b, backend=backend, nb=NB, fallback=False, **options)
        assert info.iterations < 0 and not info.fell_back


def test_lstsq_mixed_rejects_wide(backend, rng):
    with pytest.raises(ValueError, match="m >= n"):
        hybridla.lstsq_mixed(np.ones((3, 5)), np.ones(3), backend=backend)


# -- the GPU interface ---------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_gpu_interface(device_kind, assume_a, rng):
    a = (spd if assume_a == "pos" else general)(N, 1e3, np.float64, rng)
    b = random_matrix(N, 2, np.float64, rng)
    a_dev, b_dev = to_device(a, device_kind), to_device(b, device_kind)
    x, info = hybridla.solve_mixed(a_dev, b_dev, assume_a=assume_a, lower=True, nb=NB)
    assert device_kind_of(x) == device_kind and info.iterations >= 0
    assert backward_ratio(a, to_host(x), b, np.float64) <= 1.0
    assert np.array_equal(to_host(a_dev), a) and np.array_equal(to_host(b_dev), b)
    # no refinement cannot reach float64: the fallback solves on the device (one column too)
    x, info = hybridla.solve_mixed(a_dev, to_device(b[:, :1], device_kind), assume_a=assume_a,
                                   lower=True, refinement="none", nb=NB)
    assert info.fell_back and device_kind_of(x) == device_kind and x.shape == (N, 1)
    assert solve_backward_error(a, to_host(x), b[:, :1]) < 30


@pytest.mark.cuda
def test_gpu_interface_lstsq_and_row_major(device_kind, rng):
    a = tall(200, N, 1e2, np.float64, rng)
    b = random_matrix(200, 1, np.float64, rng)[:, 0]
    x, info = hybridla.lstsq_mixed(to_device(np.ascontiguousarray(a), device_kind),
                                   to_device(b, device_kind), lowest="tf32", nb=NB)
    assert info.iterations >= 0
    assert_least_squares_accurate(a, to_host(x), b, 1e2)


LARGE = 2944  # 2944^2 float64 entries: more than device.pin_min_bytes (64 MiB)


@pytest.mark.cuda
@pytest.mark.parametrize("case", ["gen", "gen complex", "pos shifted", "lstsq"])
def test_cpu_interface_large_matrix_arrives_during_the_factorization(cuda_backend, case):
    """A host matrix of more than device.pin_min_bytes (staged): its rounded copy goes up first,
    the matrix itself during the low-precision factorization (lapack/_mixed.ArrivingMatrix);
    the shifted Cholesky's second attempt re-reads the matrix, so waits for it."""
    rng = np.random.default_rng(5)
    dtype = np.complex128 if "complex" in case else np.float64
    m = LARGE + 1000 if case == "lstsq" else LARGE
    a = tall(m, LARGE, 1e2, dtype, rng) if case == "lstsq" else \
        spd(LARGE, 1e8, dtype, rng) if case == "pos shifted" else \
        random_matrix(LARGE, LARGE, dtype, rng)
    b = random_matrix(m, 1, dtype, rng)[:, 0]
    before = hybridla.backend.get_backend("cuda").allocated_bytes()
    if case == "lstsq":
        x, info = hybridla.lstsq_mixed(a, b, backend="cuda")
        assert info.iterations >= 0 and not info.fell_back
        assert_least_squares_accurate(a, x, b, 1e2)
    else:
        x, info = hybridla.solve_mixed(a, b, assume_a="pos" if "pos" in case else "gen",
                                       lower=True, lowest="half" if "pos" in case else None,
                                       backend="cuda")
        if case == "pos shifted":  # kappa u_half >> 1: the unshifted Cholesky breaks down
            assert info.shift > 0
        if info.fell_back:
            assert solve_backward_error(a, x[:, None], b[:, None]) < 30
        else:
            assert info.iterations >= 0 and backward_ratio(a, x, b, dtype) <= 1.0
    assert hybridla.backend.get_backend("cuda").allocated_bytes() == before


@pytest.mark.cuda
def test_cpu_interface_overflow_and_failed_upload_free_everything(cuda_backend, monkeypatch):
    """Code -2 while the matrix is still arriving: the fallback answers and the upload was
    waited for; an upload that fails surfaces as the solve's exception, nothing left allocated."""
    from hybridla.backend.cuda import DeviceMatrix
    rng = np.random.default_rng(6)
    a = random_matrix(LARGE, LARGE, np.float64, rng)
    a[3, 4] = 1e6
    b = random_matrix(LARGE, 1, np.float64, rng)[:, 0]
    backend = hybridla.backend.get_backend("cuda")
    before = backend.allocated_bytes()
    x, info = hybridla.solve_mixed(a, b, lowest="half", equilibrate=False, backend="cuda")
    assert info.fell_back and solve_backward_error(a, x[:, None], b[:, None]) < 30
    assert backend.allocated_bytes() == before

    def failing_stage(self, lane, slot, r0, r1, c0, c1):
        if self.dtype == np.float64 and c0 > 0:
            raise RuntimeError("injected upload failure")
        return original(self, lane, slot, r0, r1, c0, c1)
    original = DeviceMatrix.stage_block
    monkeypatch.setattr(DeviceMatrix, "stage_block", failing_stage)
    with pytest.raises(RuntimeError, match="injected upload failure"):
        hybridla.solve_mixed(a, b, backend="cuda")
    assert backend.allocated_bytes() == before
