"""The Hessenberg reduction (gehrd, orghr, ormhr; hessenberg) on every backend, checked the way
LAPACK's tester checks it (xHST01): ||A - Q H Q^H||_1 / (n ||A||_1 eps) < 30 and
||I - Q^H Q||_1 / (n eps) < 30, H exactly zero below the first subdiagonal; the factors against
LAPACK's documented storage (Q rebuilt one reflector at a time), against scipy.linalg.lapack's
gehrd with the same lo and hi, and through scipy's orghr / unghr (interoperability). Sizes are
small and not multiples of nb, so every run has a short last panel.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack

import hybridla
from _lapack_checks import (DTYPES, StreamedStoreStub, assert_downloads_cover_once, eps_of, norm1, orthogonality_ratio,
                            random_matrix, to_device, to_host, wide)

THRESH = 30.0
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]


def similarity_ratio(a, h, q, dtype) -> float:
    """||A - Q H Q^H||_1 / (n ||A||_1 eps), in double precision (xHST01's first ratio)."""
    a, h, q = wide(a), wide(h), wide(q)
    n = a.shape[0]
    if n == 0:
        return 0.0
    return norm1(a - q @ h @ q.conj().T) / (n * max(norm1(a), np.finfo(float).tiny)
                                            * eps_of(dtype))


def balanced_matrix(n, lo, hi, dtype, rng):
    """A random n x n matrix that is upper triangular outside rows and columns lo..hi, as
    gebal leaves one: A[i, j] = 0 for i > j unless lo <= j and i <= hi."""
    a = random_matrix(n, n, dtype, rng)
    i, j = np.indices((n, n))
    a[(i > j) & ((j < lo) | (i > hi))] = 0
    return np.asfortranarray(a)


def gehrd_q(factors, tau, lo, hi) -> np.ndarray:
    """The Q that LAPACK's xGEHRD documentation says (factors, tau) represent, built one
    reflector at a time in double precision: Q = H(lo) ... H(hi-1), v_j zero in rows 0..j, 1 in
    row j+1, factors[j+2:hi+1, j] below."""
    factors, tau = wide(factors), wide(tau)
    n = factors.shape[0]
    q = np.eye(n, dtype=factors.dtype)
    for j in range(lo, hi):
        v = np.zeros(n, dtype=factors.dtype)
        v[j + 1], v[j + 2:hi + 1] = 1, factors[j + 2:hi + 1, j]
        q = q @ (np.eye(n) - tau[j] * np.outer(v, v.conj()))
    return q


def lapack(name, dtype):
    """scipy.linalg.lapack's routine by LAPACK's real name (orghr -> unghr for complex)."""
    if np.dtype(dtype).kind == "c":
        name = {"orghr": "unghr"}.get(name, name)
    return scipy.linalg.lapack.get_lapack_funcs(name, dtype=dtype)


# -- accuracy: dtypes, sizes, block sizes -------------------------------------------------------

@pytest.mark.parametrize("n, nb", [(45, 8), (33, 8), (9, 4), (20, 1), (17, 64)],
                         ids=["n45_nb8", "n33_nb8", "n9_nb4", "nb1", "nb_bigger_than_n"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ratios_all_dtypes(backend, dtype, n, nb, rng):
    a = random_matrix(n, n, dtype, rng)
    h, q = hybridla.hessenberg(a, calc_q=True, backend=backend, nb=nb)
    assert h.dtype == q.dtype == np.dtype(dtype) and h.shape == q.shape == (n, n)
    assert np.all(np.tril(h, -2) == 0), "H is not exactly zero below the first subdiagonal"
    assert similarity_ratio(a, h, q, dtype) < THRESH
    assert orthogonality_ratio(q) < THRESH
    h_only = hybridla.hessenberg(a, backend=backend, nb=nb)
    np.testing.assert_array_equal(h_only, h)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_matches_scipy_hessenberg(backend, dtype, rng):
    """The same algorithm as LAPACK's: H and Q agree with scipy's to rounding (no sign or phase
    freedom is taken differently), and complex H has a real subdiagonal as LAPACK's."""
    a = random_matrix(41, 41, dtype, rng)
    h, q = hybridla.hessenberg(a, calc_q=True, backend=backend, nb=8)
    h_ref, q_ref = scipy.linalg.hessenberg(a, calc_q=True)
    tol = 1e3 * eps_of(dtype)
    assert norm1(h - h_ref) <= tol * norm1(h_ref)
    assert np.abs(q - q_ref).max() <= tol
    assert np.all(np.diagonal(h, -1).imag == 0)


# -- lo, hi: matrices already triangular outside a range ---------------------------------------

@pytest.mark.parametrize("lo, hi", [(0, 36), (3, 30), (5, 6), (0, 1), (12, 12), (36, 36),
                                    (0, 0), (10, 36)])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lo_hi_match_lapack_and_its_orghr(backend, dtype, lo, hi, rng):
    """gehrd with lo, hi (scipy's 0-based inclusive convention) gives LAPACK's factors and tau
    (zero outside lo..hi-1, rows and columns outside untouched where LAPACK leaves them), the
    documented Q, and scipy's orghr / unghr on our output gives a Q with A = Q H Q^H."""
    n = 37
    a = balanced_matrix(n, lo, hi, dtype, rng)
    factors, tau = hybridla.gehrd(a, lo=lo, hi=hi, backend=backend, nb=8)
    factors_ref, tau_ref, info = lapack("gehrd", dtype)(a, lo=lo, hi=hi)
    assert info == 0 and tau.shape == tau_ref.shape == (n - 1,) and tau.dtype == np.dtype(dtype)
    tol = 1e3 * eps_of(dtype)
    assert np.abs(factors - factors_ref).max() <= tol * norm1(a)
    assert np.abs(tau - tau_ref).max() <= tol
    assert np.all(tau[:lo] == 0) and np.all(tau[hi:] == 0)
    np.testing.assert_array_equal(factors[:, :lo], a[:, :lo])        # columns left of lo
    np.testing.assert_array_equal(factors[hi + 1:, :], a[hi + 1:, :])  # rows below hi
    h = np.triu(factors, -1)
    q_doc = gehrd_q(factors, tau, lo, hi)
    assert similarity_ratio(a, h, q_doc, dtype) < THRESH
    q_lapack, info = lapack("orghr", dtype)(factors, tau, lo=lo, hi=hi)
    assert info == 0
    assert similarity_ratio(a, h, q_lapack, dtype) < THRESH
    assert np.abs(q_lapack - q_doc).max() <= 100 * eps_of(dtype)


def test_lo_hi_defaults_and_errors(backend):
    a = np.asfortranarray(np.random.default_rng(3).standard_normal((6, 6)))
    full, tau_full = hybridla.gehrd(a, backend=backend, nb=2)
    same, tau_same = hybridla.gehrd(a, lo=0, hi=5, backend=backend, nb=2)
    np.testing.assert_array_equal(full, same)
    np.testing.assert_array_equal(tau_full, tau_same)
    saved = a.copy()
    for kw, name in [(dict(lo=-1), "lo"), (dict(lo=6), "lo"), (dict(hi=6), "hi"),
                     (dict(lo=3, hi=2), "hi"), (dict(lo=1.0), "lo"), (dict(hi="5"), "hi")]:
        with pytest.raises(ValueError, match=rf"^{name} must"):
            hybridla.gehrd(a, overwrite_a=True, backend=backend, **kw)
    np.testing.assert_array_equal(a, saved)  # refused before anything was written
    empty, tau = hybridla.gehrd(np.empty((0, 0)), backend=backend)
    assert empty.shape == (0, 0) and tau.shape == (0,)


# -- scipy's conventions at the user layer ----------------------------------------------------

def test_small_and_empty_as_scipy(backend):
    """Order 1 and 2 come back as they are (scipy's shortcut, dtype kept, Q the float64
    identity), order 0 gives empty results in the LAPACK dtype."""
    for a in (np.array([[1, 2], [3, 4]]), np.array([[2.0 + 1j]]),
              np.array([[1, 2j], [3 + 1j, 4]], dtype=np.complex64)):
        h, q = hybridla.hessenberg(a, calc_q=True, backend=backend)
        h_ref, q_ref = scipy.linalg.hessenberg(a, calc_q=True)
        np.testing.assert_array_equal(h, h_ref)
        np.testing.assert_array_equal(q, q_ref)
        assert h.dtype == h_ref.dtype and q.dtype == q_ref.dtype
        assert not np.shares_memory(h, a)
    for dtype in (np.float32, np.int64):
        h, q = hybridla.hessenberg(np.empty((0, 0), dtype), calc_q=True, backend=backend)
        h_ref, q_ref = scipy.linalg.hessenberg(np.empty((0, 0), dtype), calc_q=True)
        assert h.shape == q.shape == (0, 0) and h.dtype == h_ref.dtype and q.dtype == q_ref.dtype


def test_int_input_promotes_and_layouts_leave_input_untouched(backend, rng):
    h, q = hybridla.hessenberg(np.arange(16).reshape(4, 4) % 5, calc_q=True, backend=backend)
    assert h.dtype == q.dtype == np.float64
    big = np.asfortranarray(random_matrix(60, 50, np.complex128, rng))
    saved = big.copy(order="K")
    for a in (big[:23, :23], big[:46:2, :23], np.ascontiguousarray(big[:23, :23])):
        h, q = hybridla.hessenberg(a, calc_q=True, backend=backend, nb=8)
        assert similarity_ratio(a, h, q, np.complex128) < THRESH
    assert big.tobytes() == saved.tobytes(), "overwrite_a=False modified the input"


def test_overwrite_a_reduces_in_place(backend, rng):
    a = np.asfortranarray(random_matrix(30, 30, np.float64, rng))
    original = a.copy()
    factors, tau = hybridla.gehrd(a, overwrite_a=True, backend=backend, nb=8)
    assert np.shares_memory(factors, a)
    h = hybridla.hessenberg(original.copy(order="F"), overwrite_a=True, backend=backend, nb=8)
    np.testing.assert_array_equal(h, np.triu(factors, -1))
    copy, _ = hybridla.gehrd(original, backend=backend, nb=8)
    assert not np.shares_memory(copy, original)
    np.testing.assert_array_equal(copy, factors)


def test_errors_name_the_argument_and_leave_input_untouched(backend):
    with pytest.raises(ValueError, match="square matrix for a"):
        hybridla.hessenberg(np.ones((4, 3)), backend=backend)
    with pytest.raises(ValueError, match="2-D array for a"):
        hybridla.hessenberg(np.ones(4), backend=backend)
    bad = np.ones((5, 5))
    bad[2, 1] = np.inf
    saved = bad.copy()
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.hessenberg(bad, overwrite_a=True, backend=backend)
    np.testing.assert_array_equal(bad, saved)
    with pytest.raises(ValueError, match="nb"):
        hybridla.hessenberg(np.ones((5, 5)), nb=0, backend=backend)
    with hybridla.config.set({"hrd.nb": -2}):  # the configuration key is the one read
        with pytest.raises(ValueError, match="nb"):
            hybridla.gehrd(np.ones((5, 5)), backend=backend)


def test_stats_count_the_matrix_vector_phase(backend, rng):
    """One GEMV per reflector; in the panel of reflectors k0:k1 (r = hi - k0 rows below row k0)
    reflector k0 + i reads A[k0+1:hi+1, k0+i+1:hi+1], r (r - i) elements."""
    from hybridla.lapack.gehrd import HessenbergStats
    n, lo, hi, nb = 29, 2, 25, 8
    a = balanced_matrix(n, lo, hi, np.float32, rng)
    stats = HessenbergStats()
    hybridla.gehrd(a, lo=lo, hi=hi, backend=backend, nb=nb, stats=stats)
    elements = sum((hi - k0) * (hi - k0 - i)
                   for k0 in range(lo, hi, nb) for i in range(min(nb, hi - k0)))
    assert stats.calls == hi - lo
    assert stats.bytes == 4 * elements
    assert stats.seconds > 0 and stats.panel_seconds >= stats.seconds


# -- the driver layer: orghr and ormhr ---------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_driver_orghr_and_ormhr_both_sides_both_ways(dtype, rng):
    """orghr forms the documented Q; ormhr applies op(Q) from either side (host tile stores)."""
    from hybridla.lapack import gehrd, orghr, ormhr
    from hybridla.scheduler.plan import make_plan
    ops = hybridla.backend.get_backend("host")
    n, lo, hi = 31, 4, 26
    a = balanced_matrix(n, lo, hi, dtype, rng)
    plan = make_plan(ops, n, n, dtype, routine="hrd", nb=8, lookahead=0, panel="cpu")
    tau, info, _ = gehrd(ops.host_matrix(a, a, plan.nb), plan, lo, hi)
    assert info == 0
    q = gehrd_q(a, tau, lo, hi)
    tol = 100 * eps_of(dtype)
    formed = np.full((n, n), np.nan, dtype, order="F")
    orghr(ops.wrap(a, tau=tau), ops.wrap(formed), plan, lo, hi)
    assert np.abs(formed - q).max() <= tol
    for side in "LR":
        for trans in ("N", "C") if np.iscomplexobj(a) else ("N", "T", "C"):
            c = np.asfortranarray(random_matrix(*((n, 5) if side == "L" else (5, n)), dtype, rng))
            op_q = q if trans == "N" else q.conj().T
            expected = op_q @ wide(c) if side == "L" else wide(c) @ op_q
            ormhr(ops.wrap(a, tau=tau), ops.wrap(c), plan, lo, hi, side, trans)
            assert np.abs(c - expected).max() <= tol * np.abs(expected).max(), (side, trans)
    with pytest.raises(ValueError, match="side"):
        ormhr(ops.wrap(a, tau=tau), ops.wrap(c), plan, lo, hi, "X", "N")
    with pytest.raises(ValueError, match="does not fit"):
        ormhr(ops.wrap(a, tau=tau), ops.wrap(np.zeros((n + 1, 2), dtype, order="F")), plan,
              lo, hi, "L", "N")


# -- streaming a host matrix: what goes home, and when ----------------------------------------

@pytest.mark.parametrize("n, lo, hi", [(37, 0, 36), (37, 4, 30), (37, 5, 5), (9, 0, 8)])
def test_streamed_downloads_cover_each_element_once_after_its_last_write(n, lo, hi):
    from hybridla.lapack.gehrd import HessenbergStats, record_gehrd
    from hybridla.scheduler.plan import make_plan
    plan = make_plan(hybridla.backend.get_backend("host"), n, n, np.float64, routine="hrd",
                     nb=8, lookahead=0, panel="cpu")
    A = StreamedStoreStub(n, n)
    graph = record_gehrd(A, plan, lo, hi, np.zeros(n - 1), HessenbergStats())
    assert_downloads_cover_once(graph, n, n, A)


# -- the GPU interface ---------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_gpu_interface_results_stay_on_the_device(device_kind, dtype, rng):
    from _lapack_checks import is_on_device
    a = random_matrix(70, 70, dtype, rng)
    h, q = hybridla.hessenberg(to_device(a, device_kind), calc_q=True, nb=16)
    assert is_on_device(h, device_kind) and is_on_device(q, device_kind)
    h, q = to_host(h), to_host(q)
    assert np.all(np.tril(h, -2) == 0)
    assert similarity_ratio(a, h, q, dtype) < THRESH and orthogonality_ratio(q) < THRESH
    factors, tau = hybridla.gehrd(to_device(a, device_kind), lo=3, hi=60, nb=16)
    assert isinstance(tau, np.ndarray) and tau.shape == (69,)
    assert np.all(tau[:3] == 0) and np.all(tau[60:] == 0)
    small = random_matrix(2, 2, dtype, rng)  # order 2: as it is, Q = I (scipy's shortcut)
    h, q = hybridla.hessenberg(to_device(small, device_kind), calc_q=True)
    np.testing.assert_array_equal(to_host(h), small)
    np.testing.assert_array_equal(to_host(q), np.eye(2))
