"""check_finite inside the staging of the CPU interface (issue 34): where a host matrix is staged
to a device and the factors go to a new array, the threads that copy each piece into a staging
slot test it there, instead of a pass over the whole matrix before the first upload.

No GPU here: `staging` gives the library a host backend whose stores go the device's way
(backend/host/store.StreamedHostMatrix: a working array of its own, the matrix staged up
through slots and the factors staged home by the transfer plan's tasks, as the cuda store
moves them), for matrices that device.host_transfer "staged" and device.pin_min_bytes stage.
"""
import numpy as np
import pytest
import scipy.linalg

import hybridla
from hybridla import _common
from hybridla.backend.host import HostBackend
from hybridla.backend.host import store as host_store
from hybridla.backend.host.transfers import CHECK_STRIP_BYTES, all_finite, copy_checked
from hybridla.backend.ops import DeviceSettings
from hybridla.scheduler.plan import device_settings, make_plan

MESSAGE = r"^a must not contain infs or NaNs \(check_finite=True\)$"
NB = 8


class _StagingHost(HostBackend):
    """The host backend handed the run's device settings, as the library hands a device
    backend's host_matrix them: a matrix they stage goes the device's way. Counts the stores
    that check as they stage."""

    def __init__(self):
        super().__init__()
        self.checking_stores = 0

    def host_matrix(self, source, result, nb, dtype=None, settings=None, check_finite=None):
        A = host_store.host_matrix(source, result, nb, dtype, device_settings(), check_finite)
        self.checking_stores += A.checks_finite
        return A


@pytest.fixture
def staging(monkeypatch):
    """Every host matrix is staged (pin_min_bytes 0) on a _StagingHost; the up-front check
    counted in `.up_front`."""
    ops = _StagingHost()
    ops.up_front = 0
    monkeypatch.setattr(_common, "_host_backend", lambda backend: ops)
    check = _common._all_finite

    def counted(array):
        ops.up_front += 1
        return check(array)
    monkeypatch.setattr(_common, "_all_finite", counted)
    with hybridla.config.set({"device.host_transfer": "staged", "device.pin_min_bytes": 0}):
        yield ops


def _matrix(m, n, dtype, seed=3):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((m, n))
    return np.asfortranarray(a.astype(dtype))


def _spd(n, dtype):
    x = _matrix(n, n, dtype)
    return np.asfortranarray((x @ x.conj().T + n * np.eye(n)).astype(dtype))


FACTOR = {
    "lu": lambda a, **kw: hybridla.lu_factor(a, nb=NB, **kw),
    "cho": lambda a, **kw: hybridla.cho_factor(a, lower=True, nb=NB, **kw),
    "qr": lambda a, **kw: hybridla.qr(a, mode="raw", nb=NB, **kw),
    "ql": lambda a, **kw: hybridla.ql(a, mode="raw", nb=NB, **kw),
    "lq": lambda a, **kw: hybridla.lq(a, mode="raw", nb=NB, **kw),
}

# (row, column) as fractions of the shape: the first block, a middle column only a later step
# reads, the last row of the last column, the last row of the first column, the first row of
# the last column (for Cholesky with lower=True: a triangle the factorization never reads)
PLACES = [(0, 0), (0.5, 0.6), (1, 1), (1, 0), (0, 1)]
SHAPES = [(40, 40), (45, 29), (29, 45)]


def _place(shape, where):
    return tuple(min(int(f * s), s - 1) for f, s in zip(where, shape))


def _bad_values(dtype):
    values = [np.nan, np.inf, -np.inf]
    return values + [complex(0, np.nan), complex(np.inf, 0)] if np.dtype(dtype).kind == "c" \
        else values


def _raises_in_staging(staging, call, a):
    """call(a) raises check_finite's ValueError from the staging (no up-front pass), leaves
    a as it was and holds nothing afterwards; then a clean call goes through."""
    saved = a.copy(order="K")
    before = staging.checking_stores
    held = staging.allocated_bytes()  # other tests' stores may still be held by the backend
    with pytest.raises(ValueError, match=MESSAGE):
        call(a)
    assert staging.checking_stores == before + 1 and staging.up_front == 0
    np.testing.assert_array_equal(a, saved)  # NaN == NaN here
    assert staging.allocated_bytes() == held  # the store's working array given back


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("where", PLACES, ids=lambda w: f"{w[0]}-{w[1]}")
@pytest.mark.parametrize("kind", list(FACTOR))
def test_a_bad_entry_anywhere_fails_the_staging_of_its_block(staging, kind, where, dtype):
    n = 40
    for value in _bad_values(dtype):
        a = _spd(n, dtype) if kind == "cho" else _matrix(n, n, dtype)
        a[_place(a.shape, where)] = value
        _raises_in_staging(staging, FACTOR[kind], a)
    clean = _spd(n, dtype) if kind == "cho" else _matrix(n, n, dtype)
    FACTOR[kind](clean)  # a following call works: nothing of the failed one is left


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("where", PLACES, ids=lambda w: f"{w[0]}-{w[1]}")
@pytest.mark.parametrize("kind", ["lu", "qr", "ql", "lq"])
def test_rectangular_matrices_are_checked_everywhere(staging, kind, where, shape):
    """Past min(m, n) too: the rows below the last panel's, the columns right of it."""
    a = _matrix(*shape, np.float64)
    a[_place(shape, where)] = np.nan
    _raises_in_staging(staging, FACTOR[kind], a)


@pytest.mark.parametrize("order", ["F", "C"])
def test_a_clean_staged_run_matches_scipy(staging, order):
    """The staged path itself (the ground of these tests): LAPACK's pivots and factors, the
    input untouched, checked while staging only."""
    a = np.asarray(_matrix(45, 29, np.float64), order=order)
    saved = a.copy(order="K")
    lu, piv = hybridla.lu_factor(a, nb=NB)
    lu_ref, piv_ref = scipy.linalg.lu_factor(saved)
    np.testing.assert_array_equal(piv, piv_ref)
    np.testing.assert_allclose(lu, lu_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(a, saved)
    assert staging.checking_stores == 1 and staging.up_front == 0


def test_overwrite_a_in_place_checks_before_anything_is_touched(staging):
    """With overwrite_a and an array the factors can go into (F-ordered, its own dtype),
    finished blocks would go home into it during the run: the whole array is checked before."""
    a = _matrix(40, 40, np.float64)
    a[39, 39] = np.nan
    saved = a.copy(order="F")
    held = staging.allocated_bytes()
    with pytest.raises(ValueError, match=MESSAGE):
        hybridla.lu_factor(a, overwrite_a=True, nb=NB)
    assert staging.up_front == 1 and staging.checking_stores == 0
    np.testing.assert_array_equal(a, saved)
    assert staging.allocated_bytes() == held
    a[39, 39] = 1.0
    lu, _ = hybridla.lu_factor(a, overwrite_a=True, nb=NB)
    assert np.shares_memory(lu, a)


def test_overwrite_a_on_a_copy_checks_while_staging(staging):
    """overwrite_a on an array the factors cannot go into (C-ordered) factors a copy: a
    failure midway loses nothing there either."""
    a = np.ascontiguousarray(_matrix(40, 40, np.float64))
    a[20, 30] = np.inf
    _raises_in_staging(staging, lambda x: hybridla.lu_factor(x, overwrite_a=True, nb=NB), a)


def test_another_dtype_is_checked_up_front(staging):
    """float16 is factored in float32: the check reads the user's entries, not rounded ones."""
    a = _matrix(40, 40, np.float16)
    a[5, 5] = np.nan
    with pytest.raises(ValueError, match=MESSAGE):
        hybridla.lu_factor(a, nb=NB)
    assert staging.up_front == 1 and staging.checking_stores == 0


def test_a_matrix_that_is_not_staged_is_checked_up_front(staging):
    """Below device.pin_min_bytes a matrix travels unstaged: the up-front pass checks it."""
    a = _matrix(40, 40, np.float64)
    a[39, 0] = np.nan
    with hybridla.config.set({"device.pin_min_bytes": a.nbytes + 1}), \
            pytest.raises(ValueError, match=MESSAGE):
        hybridla.lu_factor(a, nb=NB)
    assert staging.up_front == 1 and staging.checking_stores == 0


def test_check_finite_false_checks_nothing(staging):
    a = _matrix(40, 40, np.float64)
    a[3, 5] = np.nan
    saved = a.copy(order="F")
    lu, _ = hybridla.lu_factor(a, check_finite=False, nb=NB)
    assert staging.up_front == 0 and staging.checking_stores == 0
    assert np.isnan(lu).any()
    np.testing.assert_array_equal(a, saved)


def _store_over_users_array(a, check_finite=True):
    """The store a device gets for the CPU interface: staged straight from the user's F-ordered
    array `a` into a new result; its prefault tasks counted in `.prefaulted`."""
    result = np.empty_like(a, order="F")
    A = host_store.host_matrix(a, result, NB, settings=DeviceSettings(pin_min_bytes=0),
                               check_finite=_common._nonfinite_message("a") if check_finite
                               else None)
    assert A.streamed and A.staged and A.prefault and A.checks_finite == check_finite
    A.prefaulted, prefault = [], A.prefault_result

    def counted(lane, c0, c1):
        A.prefaulted.append((c0, c1))
        prefault(lane, c0, c1)
    A.prefault_result = counted
    return A, result


def _getrf(A):
    from hybridla.lapack.getrf import getrf
    ops = hybridla.backend.get_backend("host")
    try:
        return getrf(A, make_plan(ops, A.m, A.n, A.dtype, routine="lu", nb=NB))
    finally:
        A.close()


def test_the_store_checks_the_users_array_as_it_stages():
    """The run fails in the staging task of the last block column, the user's array
    untouched, the store closed clean."""
    a = _matrix(40, 37, np.float64)
    a[39, 36] = -np.inf
    saved = a.copy(order="F")
    held = hybridla.backend.get_backend("host").allocated_bytes()
    A, _ = _store_over_users_array(a)
    with pytest.raises(ValueError, match=MESSAGE):
        _getrf(A)
    np.testing.assert_array_equal(a, saved)
    assert hybridla.backend.get_backend("host").allocated_bytes() == held


def test_the_new_result_is_prefaulted_and_the_factors_are_right():
    """Every column of the new result is faulted in once, by tasks that change nothing in it:
    the factors that come home are LAPACK's."""
    a = _matrix(40, 37, np.float64)
    A, result = _store_over_users_array(a, check_finite=False)
    pivots, info, _ = _getrf(A)
    covered = np.zeros(37, int)
    for c0, c1 in A.prefaulted:
        covered[c0:c1] += 1
    np.testing.assert_array_equal(covered, 1)
    lu_ref, piv_ref = scipy.linalg.lu_factor(a)
    np.testing.assert_array_equal(pivots, piv_ref)
    np.testing.assert_allclose(result, lu_ref, rtol=1e-12, atol=1e-12)
    assert info == 0


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_copy_checked_finds_a_bad_entry_in_any_strip(dtype):
    rows = 64
    width = CHECK_STRIP_BYTES // (rows * np.dtype(dtype).itemsize)
    src = np.ones((rows, 3 * width + 5), dtype=dtype, order="F")
    dst = np.empty_like(src)
    assert copy_checked(dst, src, True) and np.array_equal(dst, src)
    for j in (0, width - 1, width, 2 * width + 3, src.shape[1] - 1):
        bad = src.copy(order="F")
        bad[rows - 1, j] = np.nan
        assert not copy_checked(np.empty_like(bad), bad, True), j
        assert copy_checked(np.empty_like(bad), bad, False)  # unchecked: only the copy


def test_all_finite_is_not_fooled_by_a_sum_that_overflows():
    big = np.full((4, 4), np.finfo(np.float64).max / 2)
    assert all_finite(big)
    big[1, 2] = np.inf
    assert not all_finite(big)
    assert all_finite(np.arange(6).reshape(2, 3))  # integers are finite
