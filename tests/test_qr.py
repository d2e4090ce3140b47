"""The QR family (geqrf, geqlf, gelqf, their Q, gels; qr, ql, lq, lstsq) on every backend, checked
the way LAPACK's testers check it (xQRT01, xQRT17): ||A - Q R||_1 / (max(m, n) ||A||_1 eps) < 30,
||I - Q^H Q||_1 / (m eps) < 30, and for least squares ||A^H r||_1 / (||A||_1 ||r||_1 max(m, n)
eps) < 30; the factors are also checked against LAPACK's documented storage (reflectors_product)
and against scipy. Sizes are small and not multiples of nb, so every run has a ragged block.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack

import hybridla
from _lapack_checks import (DTYPES, StagedStoreStub, StreamedStoreStub, assert_downloads_cover_once, eps_of,
                            factorization_ratio,
                            lapack_householder, least_squares_ratio, lstsq_forward_ratio,
                            match_phases, matrix_with_condition, norm1, orthogonality_ratio,
                            q_by_lapack, random_matrix, reflectors_product, residues_ratio,
                            solve_backward_error, to_device, to_host, triangle_of, wide)

THRESH = 30.0
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
SHAPES = [(61, 23), (23, 61), (37, 37)]
SHAPE_IDS = ["tall", "wide", "square"]
KINDS = ["QR", "QL", "LQ"]
FACTOR = {"QR": hybridla.qr, "QL": hybridla.ql, "LQ": hybridla.lq}


def factor(kind, a, **kw):
    """(Q, T) with A = Q T for QR and QL, (Q, T) = (Q, L) with A = L Q for LQ."""
    first, second = FACTOR[kind](a, **kw)
    return (second, first) if kind == "LQ" else (first, second)


def ratios(kind, a, q, t):
    """(factorization ratio, orthogonality ratio) for the result of `factor`."""
    product = factorization_ratio(a, t, q, q.dtype) if kind == "LQ" \
        else factorization_ratio(a, q, t, q.dtype)
    return product, orthogonality_ratio(q)


# -- accuracy: kinds x dtypes x shapes, modes ------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_ratios_all_kinds_dtypes_and_shapes(backend, kind, dtype, shape, rng):
    m, n = shape
    a = np.asfortranarray(random_matrix(m, n, dtype, rng))
    for mode in ("full", "economic"):
        q, t = factor(kind, a, mode=mode, backend=backend, nb=8)
        assert q.dtype == t.dtype == np.dtype(dtype)
        product, orthogonality = ratios(kind, a, q, t)
        assert product < THRESH, (mode, product)
        assert orthogonality < THRESH, (mode, orthogonality)
    k = min(m, n)
    assert q.shape == ((k, n) if kind == "LQ" else (m, k))


@pytest.mark.cuda
@pytest.mark.parametrize("transfer", ["staged", "register"])
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_interface_large_host_matrix_each_transfer(cuda_backend, kind, transfer):
    """A host matrix large enough to be staged or pinned (device.pin_min_bytes) streams up and its
    factors back, for each device.host_transfer: LAPACK-accurate, the input untouched, no
    device memory left."""
    m, n = 2944, 2900  # 68 MB in float64: over the 64 MiB threshold
    a = np.asfortranarray(np.random.default_rng(11).standard_normal((m, n)))
    saved = a.copy(order="F")
    with hybridla.config.set({"device.host_transfer": transfer}):
        q, t = factor(kind, a, mode="economic", backend=cuda_backend, nb=256)
    product, orthogonality = ratios(kind, saved, q, t)
    assert product < THRESH and orthogonality < THRESH, (product, orthogonality)
    assert np.array_equal(a, saved)
    assert hybridla.backend.get_backend("cuda").allocated_bytes() == 0


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
@pytest.mark.parametrize("kind", KINDS)
def test_raw_factors_are_in_lapack_storage(backend, kind, dtype, shape, rng):
    """raw mode's (factors, tau) represent Q as LAPACK xGEQRF / xGEQLF / xGELQF document it
    (Q rebuilt one reflector at a time by the test helper), the triangle is where LAPACK puts it,
    and Q formed by the library (full mode) is that Q."""
    m, n = shape
    a = np.asfortranarray(random_matrix(m, n, dtype, rng))
    (factors, tau), t = FACTOR[kind](a, mode="raw", backend=backend, nb=8)
    assert tau.shape == (min(m, n),) and tau.dtype == np.dtype(dtype)
    q_doc = reflectors_product(factors, tau, kind)
    full = triangle_of(factors, kind)
    product = factorization_ratio(a, full, q_doc, dtype) if kind == "LQ" \
        else factorization_ratio(a, q_doc, full, dtype)
    assert product < THRESH
    q, t_full = factor(kind, a, mode="full", backend=backend, nb=8)
    np.testing.assert_array_equal(t_full, full)
    assert np.abs(wide(q) - q_doc).max() <= 100 * eps_of(dtype)


@pytest.mark.parametrize("panel", ["cpu", "gpu", "auto"])
@pytest.mark.parametrize("lookahead", [0, 1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_lookahead_and_panel_placement(backend, kind, lookahead, panel, rng):
    """Every look-ahead depth and placement is accepted (QL and LQ always factor their panels on
    the CPU) and gives an accurate factorization."""
    a = np.asfortranarray(random_matrix(70, 53, np.float64, rng))
    q, t = factor(kind, a, mode="economic", backend=backend, nb=8, lookahead=lookahead,
                  panel=panel)
    product, orthogonality = ratios(kind, a, q, t)
    assert product < THRESH and orthogonality < THRESH


@pytest.mark.parametrize("n, nb", [(20, 1), (45, 7), (30, 500), (32, 32), (33, 32)],
                         ids=["nb1", "nb7", "nb_bigger_than_n", "n_eq_nb", "n_eq_nb_plus_1"])
def test_block_size_edge_cases(backend, n, nb, rng):
    a = random_matrix(n + 3, n, np.float64, rng)
    for kind in KINDS:
        q, t = factor(kind, a, mode="economic", backend=backend, nb=nb)
        product, orthogonality = ratios(kind, a, q, t)
        assert product < THRESH and orthogonality < THRESH, kind


# -- agreement with scipy ---------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_qr_matches_scipy_up_to_phases(backend, dtype, shape, rng):
    m, n = shape
    a = random_matrix(m, n, dtype, rng)
    for mode in ("full", "economic"):
        q, r = hybridla.qr(a, mode=mode, backend=backend, nb=8)
        q_ref, r_ref = scipy.linalg.qr(a, mode=mode)
        assert q.shape == q_ref.shape and r.shape == r_ref.shape
        assert np.all(np.diagonal(r).imag == 0)  # LAPACK's convention: a real diagonal
        q, r = match_phases(q, r, q_ref, r_ref)
        k = min(m, n)
        tol = 1e3 * eps_of(dtype)
        assert np.abs(q[:, :k] - q_ref[:, :k]).max() <= tol
        assert norm1(r - r_ref) <= tol * norm1(r_ref)
    (r_only,) = hybridla.qr(a, mode="r", backend=backend, nb=8)
    assert r_only.shape == scipy.linalg.qr(a, mode="r")[0].shape


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_raw_mode_interoperates_with_scipy_lapack(backend, dtype, rng):
    """scipy.linalg.lapack's orgqr/ungqr on our (factors, tau) gives our Q, and its ormqr/unmqr
    applies the same Q^H as the economic Q does."""
    m, n = 53, 29
    a = random_matrix(m, n, dtype, rng)
    (factors, tau), r = hybridla.qr(a, mode="raw", backend=backend, nb=8)
    q, _ = hybridla.qr(a, mode="economic", backend=backend, nb=8)
    orgqr, ormqr = scipy.linalg.lapack.get_lapack_funcs(("orgqr", "ormqr"), dtype=factors.dtype)
    q_lapack, _, info = orgqr(factors, tau)
    assert info == 0
    tol = 100 * eps_of(dtype)
    assert np.abs(q_lapack - q).max() <= tol
    c = random_matrix(m, 3, dtype, rng)
    trans = "C" if np.iscomplexobj(factors) else "T"
    applied, _, info = ormqr("L", trans, factors, tau, c, max(1, 3 * 64))
    assert info == 0
    assert np.abs(applied[:n] - q.conj().T @ c).max() <= tol * norm1(c)


@pytest.mark.parametrize("shape", [(6, 0), (0, 5), (0, 0)], ids=["m_by_0", "0_by_n", "0_by_0"])
def test_empty_matrices_shaped_as_scipy(backend, shape):
    a = np.empty(shape)
    for mode in ("full", "economic", "r"):
        ours, theirs = hybridla.qr(a, mode=mode, backend=backend), scipy.linalg.qr(a, mode=mode)
        assert [x.shape for x in ours] == [x.shape for x in theirs], mode
    q, _ = hybridla.qr(a, backend=backend)
    np.testing.assert_array_equal(q, np.eye(shape[0]))


# -- tau == 0: reflectors that are the identity -------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_already_triangular_input_gives_zero_tau_and_itself(backend, kind, dtype, rng):
    """Input that is already triangular (with a real diagonal) is left as it is: every reflector
    is H = I (tau = 0), as LAPACK's larfg makes it, and the blocked updates keep it exact."""
    m, n = 45, 30
    k = min(m, n)
    a = random_matrix(m, n, dtype, rng)
    shift = (m - k, n - k) if kind == "QL" else (0, 0)  # where the triangle's diagonal is
    a[np.arange(k) + shift[0], np.arange(k) + shift[1]] = -np.arange(1, k + 1)  # real, as larfg
    a = np.asfortranarray(triangle_of(a, kind))                                 # leaves it
    (factors, tau), _ = FACTOR[kind](a, mode="raw", backend=backend, nb=8)
    np.testing.assert_array_equal(tau, 0)
    np.testing.assert_array_equal(factors, a)
    q, t = factor(kind, a, backend=backend, nb=8)
    np.testing.assert_array_equal(q, np.eye(q.shape[0]))


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_zero_first_column_matches_lapack(backend, dtype, rng):
    a = np.asfortranarray(random_matrix(40, 25, dtype, rng))
    a[:, 0] = 0
    (factors, tau), _ = hybridla.qr(a, mode="raw", backend=backend, nb=8)
    (factors_ref, tau_ref), _ = scipy.linalg.qr(a, mode="raw")
    assert tau[0] == tau_ref[0] == 0
    q, r = hybridla.qr(a, backend=backend, nb=8)
    product, orthogonality = ratios("QR", a, q, r)
    assert product < THRESH and orthogonality < THRESH


# -- Householder leaves on a thread-block cluster (cuda/geqrf_leaf_cluster.cu) ------------------
# On an sm_90 device a GPU panel is factored by recursive halves down to leaves of at most
# device.qr_panel_leaf columns (16; 32 for real types where asked), each one launch on a cluster of 16
# blocks; elsewhere, or with the setting 0, by cuSOLVER's geqrf. The heights put the rows in one
# block, in several and in all 16, and above 65536; the widths make leaves of both kernels and
# narrower ones.

def _qr_leaves_only_on_the_cluster(monkeypatch):
    """On a device with the cluster kernel, make cuSOLVER's geqrf fail, so that a test of the
    recursive panel cannot pass through it."""
    import hybridla.backend.cuda.qr as device_qr
    if not hybridla.backend.get_backend("cuda").leaf_cluster:
        return

    class NoGeqrf:
        def __getattr__(self, name):
            raise AssertionError(f"a QR panel left the cluster leaves for cuSOLVER ({name})")
    monkeypatch.setattr(device_qr, "cusolverDn", NoGeqrf())


def _gpu_panels_raw(a, nb, leaf=16):
    with hybridla.config.set({"device.qr_panel_leaf": leaf}):
        (factors, tau), _ = hybridla.qr(a, mode="raw", backend="cuda", nb=nb, panel="gpu",
                                        lookahead=1)
    return factors, tau


@pytest.mark.cuda
@pytest.mark.parametrize("leaf", [16, 32, 0])
@pytest.mark.parametrize("shape, nb", [((37, 37), 37), ((1500, 40), 40), ((20000, 96), 96),
                                       ((70000, 48), 48), ((181, 97), 64)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cluster_qr_leaves_match_lapack(cuda_backend, dtype, shape, nb, leaf, monkeypatch, rng):
    """LAPACK's factorization ratios for Q (dorgqr of our reflectors) and R, and LAPACK's signs:
    R's diagonal and tau as geqrf's (the same larfg); with device.qr_panel_leaf 0, cuSOLVER's
    panels, to the same standard."""
    if leaf:
        _qr_leaves_only_on_the_cluster(monkeypatch)
    m, n = shape
    a = np.asfortranarray(random_matrix(m, n, dtype, rng))
    factors, tau = _gpu_panels_raw(a, nb, leaf)
    q, r = q_by_lapack(factors, tau, "QR")
    assert factorization_ratio(a, q, r, dtype) < THRESH
    assert orthogonality_ratio(q) < THRESH
    factors_ref, tau_ref, _, _ = scipy.linalg.lapack.get_lapack_funcs("geqrf", dtype=a.dtype)(a)
    np.testing.assert_array_equal(np.sign(np.diag(r).real), np.sign(np.diag(factors_ref).real))
    assert np.abs(wide(tau) - tau_ref).max() <= 1e3 * eps_of(dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cluster_qr_leaves_scale_with_the_columns(cuda_backend, dtype, monkeypatch, rng):
    """Householder QR commutes with a positive column scaling D: the factors of A D are R D and
    A's reflectors. The scales take the sums of squares past what they hold (double: squares
    below 1e-250, over 1e308; the kernel's scaled path) and to the edges of float's range."""
    _qr_leaves_only_on_the_cluster(monkeypatch)
    m, n = 3000, 40
    a = np.asfortranarray(random_matrix(m, n, dtype, rng))
    single = np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64))
    extremes = [1e-30, 1e30, 1e-20, 1e25] if single else [1e-160, 1e160, 1e-300, 1e200]
    scales = np.ones(n)
    scales[[1, 17, 18, 35]] = extremes
    factors, tau = _gpu_panels_raw(a, 40)
    scaled, tau_scaled = _gpu_panels_raw(np.asfortranarray(a * scales.astype(dtype)), 40)
    tolerance = 1e3 * eps_of(dtype)
    assert np.abs(wide(tau_scaled) - wide(tau)).max() <= tolerance
    below = np.tril(np.ones((m, n), bool), -1)
    assert np.abs(wide(scaled)[below] - wide(factors)[below]).max() <= tolerance
    r, r_scaled = np.triu(wide(factors[:n])), np.triu(wide(scaled[:n])) / scales
    assert np.all(np.abs(r_scaled - r) <= tolerance * np.abs(r).max(axis=0))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_cluster_qr_leaves_zero_and_triangular_columns(cuda_backend, dtype, monkeypatch, rng):
    """A zero column and a column already zero below the diagonal with a real diagonal inside a
    leaf: tau 0 there and the column left as it is (LAPACK's larfg), the rest LAPACK's."""
    _qr_leaves_only_on_the_cluster(monkeypatch)
    a = np.asfortranarray(random_matrix(5000, 48, dtype, rng))
    a[:, 21] = 0
    factors_ref, tau_ref, _, _ = scipy.linalg.lapack.get_lapack_funcs("geqrf", dtype=a.dtype)(a)
    factors, tau = _gpu_panels_raw(a, 48)
    assert tau[21] == tau_ref[21] == 0
    np.testing.assert_array_equal(factors[22:, 21], 0)
    assert np.abs(wide(factors) - factors_ref).max() <= 1e3 * eps_of(dtype) * \
        np.abs(factors_ref).max()
    b = np.asfortranarray(random_matrix(5000, 48, dtype, rng))
    b[1:, 0] = 0
    b[0, 0] = 3
    factors, tau = _gpu_panels_raw(b, 48)
    assert tau[0] == 0 and factors[0, 0] == 3
    np.testing.assert_array_equal(factors[1:, 0], 0)


@pytest.mark.parametrize("leaf", [-1, 33, "16", 2.5, True])
def test_qr_panel_leaf_setting_is_checked_before_any_work(backend, leaf, rng):
    """A bad device.qr_panel_leaf is refused by name before the matrix is touched (it would
    otherwise raise inside a panel task, the matrix half factored)."""
    a = np.asfortranarray(random_matrix(30, 20, np.float64, rng))
    saved = a.copy(order="F")
    with hybridla.config.set({"device.qr_panel_leaf": leaf}):
        with pytest.raises(ValueError, match="device.qr_panel_leaf"):
            hybridla.qr(a, overwrite_a=True, backend=backend, nb=8)
    np.testing.assert_array_equal(a, saved)


# -- memory layouts and overwrite_a -----------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_padded_strided_and_c_order_inputs_untouched(backend, kind, rng):
    m, n = 47, 29
    big = np.asfortranarray(random_matrix(2 * m + 5, n + 4, np.complex128, rng))
    saved = big.copy(order="K")
    for a in (big[:m, :n], big[: 2 * m : 2, :n], np.ascontiguousarray(big[:m, :n])):
        q, t = factor(kind, a, backend=backend, nb=8)
        product, orthogonality = ratios(kind, a, q, t)
        assert product < THRESH and orthogonality < THRESH
    assert big.tobytes() == saved.tobytes(), "overwrite_a=False modified the input"


def test_overwrite_a_factors_in_place_and_int_input_promotes(backend, rng):
    a = np.asfortranarray(random_matrix(40, 20, np.float64, rng))
    (factors, _), _ = hybridla.qr(a, mode="raw", overwrite_a=True, backend=backend, nb=8)
    assert np.shares_memory(factors, a)
    q, r = hybridla.qr(np.arange(12).reshape(4, 3), backend=backend)
    assert q.dtype == r.dtype == np.float64
    assert np.allclose(q @ r, np.arange(12).reshape(4, 3))


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("func", [hybridla.qr, hybridla.ql, hybridla.lq])
def test_errors_name_the_argument_and_leave_input_untouched(backend, func):
    a = np.ones((5, 3))
    with pytest.raises(ValueError, match="mode must be one of"):
        func(a, mode="thin", backend=backend)
    with pytest.raises(ValueError, match="2-D array for a"):
        func(np.ones(4), backend=backend)
    bad = a.copy()
    bad[2, 1] = np.nan
    saved = bad.copy()
    with pytest.raises(ValueError, match="infs or NaNs"):
        func(bad, overwrite_a=True, backend=backend)
    assert np.array_equal(bad, saved, equal_nan=True)
    with pytest.raises(ValueError, match="nb"):
        func(a, nb=0, backend=backend)
    with hybridla.config.set({"qr.lookahead": -1}):  # the configuration key is the one read
        with pytest.raises(ValueError, match="lookahead"):
            func(a, backend=backend)


def test_pivoting_gives_scipys_permutation(backend):
    """QR with column pivoting is LAPACK geqp3's on host arrays (tests/test_pivoted.py)."""
    a = np.array([[1., 5., 0.], [0., 2., 3.], [1., 0., 0.]])
    q, r, p = hybridla.qr(a, pivoting=True, backend=backend)
    np.testing.assert_array_equal(p, scipy.linalg.qr(a, pivoting=True)[2])
    np.testing.assert_allclose(q @ r, a[:, p], atol=1e-14)


# -- least squares ---------------------------------------------------------------------------

@pytest.mark.parametrize("nrhs", [None, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_overdetermined(backend, dtype, nrhs, rng):
    m, n = 67, 29
    a = random_matrix(m, n, dtype, rng)
    b = random_matrix(m, nrhs or 1, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    saved = b.copy()
    x, residues, rank, s = hybridla.lstsq(a, b, backend=backend, nb=8)
    assert x.shape == (n,) + b.shape[1:] and x.dtype == np.dtype(dtype)
    assert rank == n and s is None
    assert least_squares_ratio(a, x, b) < THRESH
    x_ref, residues_ref, _, _ = scipy.linalg.lstsq(a, b)
    assert np.shape(residues) == np.shape(residues_ref)
    # real, as scipy's current lstsq gives them (older scipy returned complex residues)
    assert residues.dtype == np.finfo(np.dtype(dtype)).dtype
    # scipy's answer as the reference, in units of the problem's perturbation bound times eps
    assert residues_ratio(a, b, residues, residues_ref, dtype) < THRESH
    assert lstsq_forward_ratio(a, b, x, x_ref, dtype) < THRESH
    np.testing.assert_array_equal(b, saved)


@pytest.mark.parametrize("nrhs", [None, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_underdetermined_minimum_norm(backend, dtype, nrhs, rng):
    """m < n: x solves a x = b and lies in a's row space (orthogonal to its null space), which
    is what makes it the minimum-norm solution: scipy's (SVD) is the same x."""
    m, n = 23, 58
    a = random_matrix(m, n, dtype, rng)
    b = random_matrix(m, nrhs or 1, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    x, residues, rank, _ = hybridla.lstsq(a, b, backend=backend, nb=8)
    assert x.shape == (n,) + b.shape[1:] and rank == m and residues.size == 0
    assert solve_backward_error(a, x, b) < THRESH
    null_space = scipy.linalg.null_space(wide(a))
    x2 = wide(x).reshape(n, -1)
    assert np.abs(null_space.conj().T @ x2).max() <= 1e2 * eps_of(dtype) * np.abs(x2).max()
    x_ref = scipy.linalg.lstsq(a, b)[0]
    assert np.abs(x - x_ref).max() <= 1e3 * eps_of(dtype) * np.abs(x_ref).max()


def test_lstsq_square_and_mixed_dtypes(backend, rng):
    a = random_matrix(40, 40, np.float32, rng)
    b = random_matrix(40, 2, np.complex64, rng)
    x, _, rank, _ = hybridla.lstsq(a, b, backend=backend, nb=8)
    assert x.dtype == np.complex64 and rank == 40
    assert solve_backward_error(a, x, b) < THRESH


@pytest.mark.parametrize("shape", [(30, 12), (12, 30)], ids=["tall", "wide"])
def test_lstsq_rank_deficient_host_is_rank_revealing(backend, shape, rng):
    """A host a that fails the rank test (R(6, 6) or L(6, 6) nearly zero) is solved by gelsy:
    the minimum-norm solution, rank min(m, n) - 1 (tests/test_pivoted.py for the rest)."""
    a = random_matrix(*shape, np.float64, rng)
    if shape[0] >= shape[1]:
        a[:, 5] = a[:, 4]  # R(6, 6) is (nearly) zero
    else:
        a[5, :] = a[4, :]  # L(6, 6)
    b = random_matrix(shape[0], 1, np.float64, rng)
    saved = b.copy()
    x, residues, rank, s = hybridla.lstsq(a, b, overwrite_b=True, backend=backend, nb=8)
    assert rank == min(shape) - 1 and s is None and residues.size == 0
    x_ref = scipy.linalg.lstsq(a, b, lapack_driver="gelsd")[0]
    assert np.abs(x - x_ref).max() <= 1e3 * eps_of(np.float64) * np.abs(x_ref).max()
    np.testing.assert_array_equal(b, saved)


def test_lstsq_errors_and_empty_problems(backend):
    a = np.ones((4, 3))
    with pytest.raises(ValueError, match="b must have 4 rows"):
        hybridla.lstsq(a, np.ones(5), backend=backend)
    with pytest.raises(ValueError, match="lapack_driver"):
        hybridla.lstsq(a, np.ones(4), lapack_driver="gelsd", backend=backend)
    with pytest.raises(ValueError, match="2-D array for a"):
        hybridla.lstsq(np.ones(4), np.ones(4), backend=backend)
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.lstsq(a, np.array([1.0, np.nan, 0, 0]), backend=backend)
    for shape in [(0, 3), (4, 0)]:
        b = np.arange(shape[0], dtype=float)
        ours, theirs = hybridla.lstsq(np.ones(shape), b), scipy.linalg.lstsq(np.ones(shape), b)
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_allclose(ours[1], theirs[1])
        assert ours[2] == theirs[2] == 0


# -- the GPU interface -------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
def test_gpu_interface_results_stay_on_the_device(device_kind, kind, rng):
    a = random_matrix(130, 75, np.float64, rng)
    q, t = factor(kind, to_device(a, device_kind), nb=32)
    product, orthogonality = ratios(kind, a, to_host(q), to_host(t))
    assert product < THRESH and orthogonality < THRESH
    b = random_matrix(130, 2, np.float64, rng)
    x, _, _, _ = hybridla.lstsq(to_device(a, device_kind), to_device(b, device_kind), nb=32)
    assert least_squares_ratio(a, to_host(x), b) < THRESH


# -- the driver layer: applying Q from either side --------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_driver_apply_q_both_sides_both_ways(kind, rng):
    """ormqr / ormql / ormlq (host tile stores): op(Q) C and C op(Q) for op = N, C (and T for a
    real Q) against the Q that LAPACK's documentation defines."""
    from hybridla.lapack import gelqf, geqlf, geqrf, ormlq, ormql, ormqr
    from hybridla.scheduler.plan import make_plan
    factorize, apply = {"QR": (geqrf, ormqr), "QL": (geqlf, ormql), "LQ": (gelqf, ormlq)}[kind]
    ops = hybridla.backend.get_backend("host")
    for (m, n), dtype in [((38, 21), np.complex128), ((21, 38), np.float32)]:
        a = np.asfortranarray(random_matrix(m, n, dtype, rng))
        plan = make_plan(ops, m, n, dtype, routine="qr", nb=8, lookahead=1)
        tau, info, _ = factorize(ops.host_matrix(a, a, plan.nb), plan)
        assert info == 0
        q = reflectors_product(a, tau, kind)
        order = q.shape[0]
        for side in "LR":
            for trans in ("N", "C") if np.iscomplexobj(a) else ("N", "T", "C"):
                c = np.asfortranarray(random_matrix(*((order, 5) if side == "L" else (5, order)),
                                                    dtype, rng))
                op_q = q if trans == "N" else q.conj().T
                expected = op_q @ wide(c) if side == "L" else wide(c) @ op_q
                apply(ops.wrap(a, tau=tau), ops.wrap(c), plan, side, trans)
                assert np.abs(c - expected).max() <= 100 * eps_of(dtype) * np.abs(expected).max()


@pytest.mark.parametrize("staged", [False, True], ids=["pageable", "staged"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_streamed_uploads_go_in_the_order_the_panels_take_them(kind, shape, staged):
    """A host matrix goes up in the order its form's panels need it (QL: block columns right to
    left, LQ: block rows): the first panel waits for one upload, not for the whole matrix, and
    the uploads cover the matrix exactly once."""
    from hybridla.lapack._householder import LQ, QL, QR
    from hybridla.lapack.geqrf import record_geqrf
    from hybridla.scheduler import TaskGraph
    from hybridla.scheduler.plan import make_plan
    m, n = shape
    nb = 8
    A = StagedStoreStub(m, n, nb) if staged else StreamedStoreStub(m, n)
    plan = make_plan(hybridla.backend.get_backend("host"), m, n, np.float64, routine="qr",
                     nb=nb, lookahead=1)
    plan = dataclasses.replace(plan, panel="gpu")  # a device backend's panel tasks
    graph = TaskGraph()
    for _ in record_geqrf(graph, A, plan, {"QR": QR, "QL": QL, "LQ": LQ}[kind]):
        pass
    uploads = [t for t in graph.tasks if t.name == "upload"]
    covered = np.zeros((m, n), int)
    for task in uploads:
        (region,) = [w for w in task.writes if w.resource == "A"]
        covered[region.r0:region.r1, region.c0:region.c1] += 1
    np.testing.assert_array_equal(covered, 1)
    first_panel = next(t for t in graph.tasks if t.name == "panel")
    before, stack = set(), list(first_panel.deps)
    while stack:
        index = stack.pop()
        if index not in before:
            before.add(index)
            stack.extend(graph.tasks[index].deps)
    assert sum(graph.tasks[i].name == "upload" for i in before) == 1


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_streamed_downloads_cover_each_element_once_after_its_last_write(kind, shape):
    """CPU interface on a device backend: the finished blocks that go home while the
    factorization runs cover the matrix exactly once, and nothing writes a block after its
    download was recorded (the graph would otherwise send stale data)."""
    from hybridla.lapack._householder import LQ, QL, QR
    from hybridla.lapack.geqrf import record_geqrf
    from hybridla.scheduler import TaskGraph
    from hybridla.scheduler.plan import make_plan
    m, n = shape
    A = StreamedStoreStub(m, n)
    plan = make_plan(hybridla.backend.get_backend("host"), m, n, np.float64, routine="qr",
                     nb=8, lookahead=1)
    graph = TaskGraph()
    for _ in record_geqrf(graph, A, plan, {"QR": QR, "QL": QL, "LQ": LQ}[kind]):
        pass
    assert_downloads_cover_once(graph, m, n, A)


# -- the backend operations the QR family added (host) ----------------------------------------

@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_triangular_factor_with_zero_taus(direction, dtype, rng):
    """larft: I - V T V^H is the product of the H(i) in the direction's order, with T's row and
    column i zero where tau_i = 0 (H(i) = I), T triangular (upper forward, lower backward)."""
    ops = hybridla.backend.get_backend("host")
    rows, kb = 19, 7
    storage = "QR" if direction == "forward" else "QL"
    V = np.empty((rows, kb), dtype, order="F")
    ops.explicit_reflectors(None, random_matrix(rows, kb, dtype, rng), V, storage)
    tau = (2 / (np.abs(V) ** 2).sum(axis=0)).astype(dtype)  # each H(i) unitary
    tau[[0, 3, 6]] = 0
    T = np.full((kb, kb), np.nan, dtype, order="F")
    ops.triangular_factor(None, V, tau, T, direction)
    product = np.eye(rows)
    for i in range(kb) if direction == "forward" else range(kb - 1, -1, -1):
        product = product @ (np.eye(rows) - tau[i] * np.outer(wide(V[:, i]), wide(V[:, i]).conj()))
    assert np.abs(np.eye(rows) - wide(V) @ wide(T) @ wide(V).conj().T - product).max() \
        <= 100 * eps_of(dtype)
    assert np.all(T[[0, 3, 6], :] == 0) and np.all(T[:, [0, 3, 6]] == 0)
    other = np.tril(T, -1) if direction == "forward" else np.triu(T, 1)
    assert np.all(other == 0)


def test_trmm_laset_lacpy_match_numpy(rng):
    ops = hybridla.backend.get_backend("host")
    t = random_matrix(5, 5, np.complex128, rng)
    for side in "LR":
        for uplo in "UL":
            for trans in "NTC":
                for diag in "NU":
                    tri = np.triu(t) if uplo == "U" else np.tril(t)
                    if diag == "U":
                        np.fill_diagonal(tri, 1)
                    op = {"N": tri, "T": tri.T, "C": tri.conj().T}[trans]
                    b = np.asfortranarray(random_matrix(*((5, 3) if side == "L" else (3, 5)),
                                                        np.complex128, rng))
                    expected = 2 * (op @ b if side == "L" else b @ op)
                    ops.trmm(None, side, uplo, trans, diag, 2, t, b)
                    assert np.allclose(b, expected)
    b = np.ones((4, 6))
    ops.laset(None, "U", 7, 3, b)
    np.testing.assert_array_equal(b, np.triu(np.full((4, 6), 7.0), 1)
                                  + np.tril(np.ones((4, 6)), -1) + 3 * np.eye(4, 6))
    dst = np.zeros((4, 6))
    ops.lacpy(None, "L", b, dst)
    np.testing.assert_array_equal(dst, np.tril(b))


@pytest.mark.parametrize("name, mode_fn", [("geqrf", "qr"), ("geqlf", "ql"), ("gelqf", "lq")])
def test_lapack_level_factors_are_raw_mode(backend, name, mode_fn):
    """geqrf / geqlf / gelqf return exactly what the raw mode of qr / ql / lq returns as its
    (factors, tau), without the triangle."""
    a = np.random.default_rng(11).standard_normal((70, 45))
    factors, tau = getattr(hybridla, name)(a, backend=backend, nb=16)
    (raw_factors, raw_tau), _ = getattr(hybridla, mode_fn)(a, mode="raw", backend=backend, nb=16)
    factors, raw_factors = to_host(factors), to_host(raw_factors)
    assert factors.shape == a.shape and tau.shape == (45,)
    np.testing.assert_array_equal(factors, raw_factors)
    np.testing.assert_array_equal(tau, raw_tau)


# -- geqrf / geqlf / gelqf against LAPACK itself (scipy.linalg.lapack) --------------------------

LAPACK_LEVEL = {"QR": hybridla.geqrf, "QL": hybridla.geqlf, "LQ": hybridla.gelqf}


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_lapack_level_factors_agree_with_scipy_lapack(backend, kind, dtype, shape, rng):
    """geqrf / geqlf / gelqf against LAPACK's own output (scipy.linalg.lapack's ?geqrf; QL and LQ
    through the identities that relate xGEQLF and xGELQF to xGEQRF, see lapack_householder):

    - factors and tau agree with LAPACK's to kappa max(m, n) eps (Householder QR with LAPACK's
      ?larfg convention is unique, and perturbs like kappa eps, for this kappa = 10 matrix):
      ||F - F_lapack||_1 / (kappa max(m, n) ||A||_1 eps) < 30 and likewise max |tau - tau_lapack|;
    - Q formed from our reflectors by scipy's ?orgqr / ?ungqr passes LAPACK's xQRT01 ratios
      with our triangle: ||A - Q R||_1 / (max(m, n) ||A||_1 eps) < 30, ||I - Q^H Q||_1 /
      (max(m, n) eps) < 30."""
    m, n = shape
    k = min(m, n)
    kappa = 10.0
    a = matrix_with_condition(m, n, kappa, dtype, rng)
    saved = a.copy(order="F")
    factors, tau = LAPACK_LEVEL[kind](a, backend=backend, nb=8)
    factors, tau = to_host(factors), np.asarray(tau)
    np.testing.assert_array_equal(a, saved)  # overwrite_a=False
    assert factors.shape == (m, n) and factors.dtype == np.dtype(dtype)
    assert tau.shape == (k,) and tau.dtype == np.dtype(dtype)
    factors_ref, tau_ref = lapack_householder(a, kind)
    assert factors_ref.dtype == np.dtype(dtype) and tau_ref.shape == (k,)
    eps = eps_of(dtype)
    kappa = np.linalg.cond(wide(a))  # the prescribed 10, up to rounding a to dtype
    factor_ratio = norm1(wide(factors) - wide(factors_ref)) / (
        kappa * max(m, n) * norm1(wide(a)) * eps)
    tau_ratio = np.abs(wide(tau) - wide(tau_ref)).max() / (kappa * max(m, n) * eps)
    assert factor_ratio < THRESH, factor_ratio
    assert tau_ratio < THRESH, tau_ratio
    q, t = q_by_lapack(factors, tau, kind)
    product = factorization_ratio(a, t, q, dtype) if kind == "LQ" \
        else factorization_ratio(a, q, t, dtype)
    assert product < THRESH, product
    assert orthogonality_ratio(q, dtype) < THRESH


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_lapack_householder_reference_is_lapacks_storage(kind, dtype, rng):
    """The test's own reference (lapack_householder, q_by_lapack) represents A as LAPACK's
    documentation of xGEQRF / xGEQLF / xGELQF says (Q rebuilt one reflector at a time): so the
    comparison above is against LAPACK's storage, not against a convention of the test."""
    for m, n in [(13, 7), (7, 13)]:
        a = random_matrix(m, n, dtype, rng)
        factors, tau = lapack_householder(a, kind)
        q_doc = reflectors_product(factors, tau, kind)
        full = triangle_of(factors, kind)
        product = factorization_ratio(a, full, q_doc, dtype) if kind == "LQ" \
            else factorization_ratio(a, q_doc, full, dtype)
        assert product < THRESH
        q, t = q_by_lapack(factors, tau, kind)
        k = min(m, n)
        expected = q_doc[:k, :] if kind == "LQ" else q_doc[:, m - k:] if kind == "QL" \
            else q_doc[:, :k]
        assert np.abs(wide(q) - expected).max() / eps_of(dtype) < THRESH
