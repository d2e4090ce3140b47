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
from _lapack_checks import (DTYPES, StreamedStoreStub, assert_downloads_cover_once, eps_of, norm1,
                            orthogonality_ratio, random_matrix, to_device, to_host, wide)

import hybridla
from hybridla.backend.host import HostBackend, HostMatrix

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


# -- the CPU interface on a device backend: Q formed where the reduction ran ----------------------
# On the CPU machine a host backend stands in for the device: it says it has one, and a host
# matrix becomes a store with a working copy of its own that moves to and from the user's arrays
# only through the transfer plan, as a cuda store's does (hessenberg's real device runs are the
# `backend` fixture's "cuda" parameter and the cuda tests below).

class _StreamedStore(HostMatrix):
    """A host-resident matrix as a device backend keeps it: a working copy of its own, NaN until
    uploaded (a read of anything not brought up shows), filled from host_source by the uploads
    and copied into host_result by the downloads, pageable or staged through slots. Counts what
    each element of the working copy sent home (`sent`) and what arrived from home (`arrived`).
    One store at a time holds the staging slots, as on the cuda backend (a lock there)."""

    def __init__(self, backend, source, result, nb):
        super().__init__(np.full(source.shape, np.nan, dtype=source.dtype, order="F"), nb)
        self.backend, self.host_source, self.host_result = backend, source, result
        self.streamed, self.transfer = True, "pageable"
        self.checks_finite = False  # the caller checks up front
        self.sent, self.arrived = np.zeros(source.shape, int), np.zeros(source.shape, int)
        if backend.staged:
            self.use_staging(4, 4)

    def use_staging(self, up_slots, down_slots):
        assert self.backend.slots_held_by is None, "the staging slots are another store's"
        self.backend.slots_held_by = self
        super().use_staging(up_slots, down_slots)
        self.transfer = "staged"

    def end_staging(self):
        if self.backend.slots_held_by is self:
            self.backend.slots_held_by = None
        super().end_staging()

    def upload_block(self, lane, r0, r1, c0, c1):
        self.a[r0:r1, c0:c1] = self.host_source[r0:r1, c0:c1]
        self.arrived[r0:r1, c0:c1] += 1

    def upload_staged(self, lane, slot, r0, r1, c0, c1):
        super().upload_staged(lane, slot, r0, r1, c0, c1)
        self.arrived[r0:r1, c0:c1] += 1

    def stage_block(self, lane, slot, r0, r1, c0, c1):
        self.stage_array(lane, slot, self.host_source[r0:r1, c0:c1])

    def download_block(self, lane, r0, r1, c0, c1):
        self.host_result[r0:r1, c0:c1] = self.a[r0:r1, c0:c1]
        self.sent[r0:r1, c0:c1] += 1

    def download_staged(self, lane, slot, r0, r1, c0, c1):
        super().download_staged(lane, slot, r0, r1, c0, c1)
        self.sent[r0:r1, c0:c1] += 1

    def unstage_block(self, lane, slot, r0, r1, c0, c1):
        self.unstage_array(lane, slot, self.host_result[r0:r1, c0:c1])


class _StreamingHost(HostBackend):
    """The host backend standing in for a device backend: has_device, and every host matrix a
    _StreamedStore (all of them staged, or none), kept in `stores` in the order made."""
    has_device = True
    device_name = "emulated device"

    def __init__(self, staged):
        super().__init__()
        self.staged, self.stores, self.slots_held_by = staged, [], None

    def host_matrix(self, source, result, nb, dtype=None, settings=None, check_finite=None):
        store = _StreamedStore(self, source, result, nb)
        self.stores.append(store)
        return store

    @staticmethod
    def free_memory():
        return 1 << 40


@pytest.fixture(params=[False, True], ids=["pageable", "staged"])
def emulated(request, monkeypatch):
    """backend="cuda" means a _StreamingHost for the test (hybridla.backend.get_backend's other
    names as they are)."""
    device = _StreamingHost(staged=request.param)
    get_backend = hybridla.backend.get_backend
    monkeypatch.setattr(hybridla.backend, "get_backend",
                        lambda name="auto", ordinal=None: device if name == "cuda"
                        else get_backend(name, ordinal))
    return device


def hessenberg_emulated(a, **kw):
    """hessenberg itself, without the public wrapper (which would enter a real CUDA context
    for backend="cuda")."""
    from hybridla._decomp_hessenberg import hessenberg
    return hessenberg(a, backend="cuda", **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cpu_interface_on_a_device_forms_q_there_and_streams_it_home(emulated, dtype, rng):
    """The reduction's store is the one Q is formed from (nothing of the factors goes up
    again); Q's store has the new host array q as its home, receives nothing from it, and sends
    every element home once; the slots are free at the end; the results are scipy's, and the
    user's array (streamed from directly: F-ordered, its LAPACK dtype) is left as it was."""
    n = 45
    a = np.asfortranarray(random_matrix(n, n, dtype, rng))
    saved = a.copy(order="F")
    h, q = hessenberg_emulated(a, calc_q=True, nb=8)
    reduction, q_store = emulated.stores
    assert reduction.host_source is a and q_store.host_result is q and q_store.host_source is q
    np.testing.assert_array_equal(reduction.arrived, 1)
    np.testing.assert_array_equal(q_store.arrived, 0)
    np.testing.assert_array_equal(q_store.sent, 1)
    assert emulated.slots_held_by is None
    np.testing.assert_array_equal(a, saved)
    assert h.dtype == q.dtype == np.dtype(dtype) and q.flags.f_contiguous
    assert np.all(np.tril(h, -2) == 0)
    assert similarity_ratio(a, h, q, dtype) < THRESH and orthogonality_ratio(q) < THRESH
    h_ref, q_ref = scipy.linalg.hessenberg(a, calc_q=True)
    tol = 1e3 * eps_of(dtype)
    assert norm1(h - h_ref) <= tol * norm1(h_ref) and np.abs(q - q_ref).max() <= tol
    np.testing.assert_array_equal(hessenberg_emulated(a, nb=8), h)  # H alone: the same reduction
    assert len(emulated.stores) == 3


def test_q_that_does_not_fit_beside_the_factors_is_formed_on_the_host(emulated, rng):
    """device.memory_budget: room for both stores forms Q on the device; room for the
    reduction's alone forms it on the host from the factors (the same Q); less than that is
    the reduction's MemoryError, as before."""
    n, nb, dtype = 37, 8, np.complex128
    a = random_matrix(n, n, dtype, rng)  # C-ordered: the reduction streams from a copy
    saved = a.copy()
    one_store = HostBackend.required_bytes(n, n, dtype, nb)
    results = {}
    for budget, stores in ((2 * one_store, 2), (2 * one_store - 1, 1), (one_store, 1)):
        emulated.stores.clear()
        with hybridla.config.set({"device.memory_budget": budget}):
            h, q = hessenberg_emulated(a, calc_q=True, nb=nb)
        assert len(emulated.stores) == stores, budget
        assert similarity_ratio(a, h, q, dtype) < THRESH and orthogonality_ratio(q) < THRESH
        results[stores] = h, q
    np.testing.assert_array_equal(a, saved)
    for h_q_device, h_q_host in zip(results[2], results[1]):
        assert np.abs(h_q_device - h_q_host).max() <= 100 * eps_of(dtype)
    with hybridla.config.set({"device.memory_budget": one_store - 1}), \
            pytest.raises(MemoryError, match="budget"):
        hessenberg_emulated(a, calc_q=True, nb=nb)


@pytest.mark.parametrize("n, lo, hi", [(37, 0, 36), (37, 4, 30), (37, 5, 5), (9, 0, 8)])
def test_orghr_home_forms_the_documented_q_for_lo_hi(emulated, n, lo, hi, rng):
    """The driver itself on a streamed reduction with lo and hi: q holds LAPACK's documented
    Q; a q of the wrong shape, dtype or layout is refused before anything happens."""
    from hybridla.lapack import gehrd
    from hybridla.lapack.orghr import orghr_home
    from hybridla.scheduler.plan import make_plan
    dtype = np.float64
    a = balanced_matrix(n, lo, hi, dtype, rng)
    factors = np.empty_like(a, order="F")
    F = emulated.host_matrix(a, factors, 8)
    try:
        plan = make_plan(emulated, n, n, dtype, routine="hrd", nb=8, lookahead=0, panel="cpu")
        tau, _, trace = gehrd(F, plan, lo, hi)
        F.set_tau(tau)
        for bad in (np.empty((n, n)), np.empty((n, n + 1), order="F"),
                    np.empty((n, n), np.float32, order="F")):
            with pytest.raises(ValueError, match="q must be"):
                orghr_home(F, bad, plan, lo, hi, trace)
        assert len(emulated.stores) == 1 and (emulated.slots_held_by is F) == emulated.staged
        q = np.full((n, n), np.nan, order="F")
        orghr_home(F, q, plan, lo, hi, trace)
    finally:
        F.close()
    assert np.abs(q - gehrd_q(factors, tau, lo, hi)).max() <= 100 * eps_of(dtype)
    np.testing.assert_array_equal(emulated.stores[1].sent, 1)


def _trace_names_and_times(path):
    from hybridla.scheduler import Trace
    return [(r["name"], r["start"], r["end"]) for r in Trace.load(path).records]


def test_trace_shows_q_formed_after_the_reduction(backend, tmp_path, rng):
    """The trace of hessenberg(calc_q=True) on a host array holds the reduction, then Q's
    formation (orgqr's identity and updates; on a device Q's way home too), on one clock: Q's
    tasks start once the reduction's panels have ended."""
    from hybridla.scheduler import Trace
    path = tmp_path / "hessenberg.json"
    a = random_matrix(40, 40, np.complex64, rng)
    h, q = hybridla.hessenberg(a, calc_q=True, backend=backend, nb=8, trace=str(path))
    assert similarity_ratio(a, h, q, np.complex64) < THRESH
    records = Trace.load(path).records
    last_panel = max(r["end"] for r in records if r["name"] == "panel")
    q_started = min(r["start"] for r in records if r["name"] == "identity")
    assert q_started >= last_panel - 1e-3


# -- the CPU interface on the GPU: the transfers Q goes home by, and the budget's fallback --------

@pytest.mark.cuda
@pytest.mark.parametrize("transfer", ["staged", "pageable"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_cpu_interface_q_on_the_gpu_by_each_transfer(cuda_backend, transfer, dtype, rng):
    """device.pin_min_bytes 0 makes even this small matrix travel as a large one does: staged
    through the pinned slots (Q's store takes them once the reduction's has given them back),
    or pageable. ("register" is left out: it would pin this small array's heap pages, which
    cuda/store.py's host_matrix says made copies fail.)"""
    n = 301
    a = np.asfortranarray(random_matrix(n, n, dtype, rng))
    saved = a.copy(order="F")
    with hybridla.config.set({"device.host_transfer": transfer, "device.pin_min_bytes": 0}):
        h, q = hybridla.hessenberg(a, calc_q=True, backend="cuda", nb=32)
    np.testing.assert_array_equal(a, saved)
    assert np.all(np.tril(h, -2) == 0)
    assert similarity_ratio(a, h, q, dtype) < THRESH and orthogonality_ratio(q) < THRESH


@pytest.mark.cuda
def test_cpu_interface_q_over_the_gpu_budget_is_formed_on_the_host(cuda_backend, rng):
    n, nb, dtype = 200, 32, np.float64
    a = random_matrix(n, n, dtype, rng)
    one_store = hybridla.backend.get_backend("cuda").required_bytes(n, n, dtype, nb)
    with hybridla.config.set({"device.memory_budget": one_store + one_store // 2}):
        h, q = hybridla.hessenberg(a, calc_q=True, backend="cuda", nb=nb)
    assert similarity_ratio(a, h, q, dtype) < THRESH and orthogonality_ratio(q) < THRESH


# -- perf/gehrd.py's hessenberg table (host rows) ------------------------------------------------

def test_perf_script_prints_what_q_adds(capsys):
    from _lapack_checks import load_perf_script, markdown_rows, unload_perf_script
    module = load_perf_script("gehrd")
    try:
        assert module.main(["--sizes", "40", "--tables", "hessenberg", "--interfaces", "cpu",
                            "--check-max", "40"]) == 0
    finally:
        unload_perf_script(module)
    header, rows = markdown_rows(capsys.readouterr().out)
    assert header[2:5] == ["H (s)", "H and Q (s)", "Q adds"]
    assert [r["implementation"] for r in rows] == ["SciPy (host)", "hybridla CPU iface"]
    for r in rows:
        assert r["n"] == "40" and r["Q adds"].endswith("%") and float(r["check"]) < THRESH
