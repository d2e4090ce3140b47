"""Out-of-core factorizations (issue 31; lapack/_ooc.py, getrf_ooc.py, potrf_ooc.py,
geqrf_ooc.py): a host matrix over the memory budget, factored left-looking over wide block
columns. The budget (device.memory_budget) is capped so that the matrix is cut into 2, 3 or
many wide columns; the host backend keeps to it as a device does, so every test body runs on
the CPU machine too.

Accuracy as LAPACK's testers measure it (ratios < 30), the same pivots as LAPACK's (matrices
without ties), the same info, and the bytes the passes over the host matrix move as the
drivers' docstrings count them.
"""
from __future__ import annotations

import json
import re
import threading
import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack

import hybridla
from hybridla.backend import get_backend
from hybridla.lapack import _ooc

from _lapack_checks import (DTYPES, factorization_ratio, getrf_ratio, orthogonality_ratio,
                            potrf_ratio, q_by_lapack, random_matrix, wide)

THRESH = 30.0
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
NB = 16
COUNTS = {"two": 2, "three": 3, "many": None}  # wide columns; many: one block column each


def capped(backend, routine, shape, dtype, count, uplo="L", nb=NB):
    """(configuration whose budget cuts the matrix into `count` wide columns (None: one block
    column each), their width). Two wide columns take one buffer (device.ooc_buffers: 1):
    where two buffers of them fit, the whole matrix does (lapack/_ooc.py)."""
    ops = get_backend(backend)
    geometry, extra = _ooc.layout(routine, uplo, 1, nb)
    rows, columns = geometry.shape(*shape)
    buffers = 1 if count == 2 else 2
    for width in range(columns // nb * nb, 0, -nb) if count else [nb]:
        if count and -(-columns // width) != count:
            continue
        budget = _ooc.budget_for_width(ops, routine, shape, dtype, nb, width, uplo=uplo,
                                       buffers=buffers)
        if _ooc.width_for_budget(ops, geometry, rows, columns, dtype, nb, budget, extra,
                                 buffers) == width:
            return {"device.memory_budget": budget, "device.ooc_buffers": buffers}, width
    raise AssertionError(f"no budget cuts {shape} into {count} wide columns")


def out_of_core(path):
    """The out-of-core record of a run's trace file (None: it ran in core)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["metadata"].get("out_of_core")


def copies(path):
    """Bytes of the run's uploads and downloads (the DMAs), from its trace file."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    total = {"upload": 0.0, "download": 0.0}
    for event in events:
        if event.get("ph") == "X" and event["name"] in total:
            total[event["name"]] += event["args"]["bytes"]
    return total


def hpd_matrix(n, dtype, rng):
    x = wide(random_matrix(n, n, dtype, rng))
    a = x @ x.conj().T + n * np.eye(n)
    return np.asfortranarray(((a + a.conj().T) / 2).astype(dtype))


# -- LU ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("count", list(COUNTS), ids=list(COUNTS))
@pytest.mark.parametrize("shape", [(200, 200), (263, 203), (171, 230)],
                         ids=["square", "tall", "wide"])
def test_lu_out_of_core_matches_in_core_and_lapack(backend, shape, count, rng, tmp_path):
    m, n = shape
    a = np.asfortranarray(rng.standard_normal(shape))
    saved = a.copy(order="F")
    settings, width = capped(backend, "getrf", shape, np.float64, COUNTS[count])
    trace = tmp_path / "lu.json"
    with hybridla.config.set(settings):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=NB, ooc="always", trace=trace)
    assert out_of_core(trace)["wide_columns"] == -(-n // width) > 1
    assert getrf_ratio(a, lu, piv) < THRESH
    lu_in_core, piv_in_core = hybridla.lu_factor(a, backend=backend, nb=NB, ooc="never")
    lu_lapack, piv_lapack = scipy.linalg.lu_factor(a)
    np.testing.assert_array_equal(piv, piv_lapack)
    np.testing.assert_array_equal(piv, piv_in_core)
    # the same steps in another order: the factors agree to rounding
    np.testing.assert_allclose(lu, lu_in_core, rtol=0, atol=1e3 * np.finfo(float).eps *
                               np.abs(lu_in_core).max())
    assert a.tobytes() == saved.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_out_of_core_every_dtype(backend, dtype, rng):
    a = np.asfortranarray(random_matrix(139, 139, dtype, rng))
    settings, _ = capped(backend, "getrf", a.shape, dtype, 3)
    with hybridla.config.set(settings):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=NB)  # "auto": it does not fit
    assert lu.dtype == np.dtype(dtype)
    assert getrf_ratio(a, lu, piv) < THRESH
    np.testing.assert_array_equal(piv, scipy.linalg.lu_factor(a)[1])


def test_lu_pivots_crossing_the_wide_column_boundaries(backend, rng, tmp_path):
    """Each wide column's pivots come from rows of the wide columns below it (the pivot rows
    are the largest, placed from the bottom up): the interchanges go across every boundary,
    in the wide columns on the device and in the finished ones on the host."""
    n = 160
    a = rng.uniform(-1, 1, (n, n))
    a[n - 1 - np.arange(n), np.arange(n)] = 50 + np.arange(n)  # distinct: no ties
    a = np.asfortranarray(a)
    settings, width = capped(backend, "getrf", a.shape, np.float64, 4)
    trace = tmp_path / "lu.json"
    with hybridla.config.set(settings):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=NB, trace=trace)
    assert out_of_core(trace)["wide_columns"] == 4
    for j0 in range(0, n // 2, width):  # the upper half's wide columns pivot from below them
        assert (piv[j0:j0 + width] >= j0 + width).any(), (j0, piv[j0:j0 + width])
    np.testing.assert_array_equal(piv, scipy.linalg.lu_factor(a)[1])
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("zero", [5, 70, 149], ids=["first", "middle", "last"])
def test_lu_singular_info_as_lapack(backend, zero, rng):
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    a[:, zero] = 0
    _, _, info = scipy.linalg.lapack.dgetrf(a)
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    with hybridla.config.set(settings), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=NB)
    found = [re.search(r"Diagonal number (\d+)", str(w.message)) for w in records]
    assert [int(f.group(1)) for f in found if f] == [info] == [zero + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)  # scipy's, on the same a
        np.testing.assert_array_equal(piv, scipy.linalg.lu_factor(a)[1])


def test_lu_overwrite_a_factors_in_place(backend, rng):
    a = np.asfortranarray(rng.standard_normal((120, 120)))
    ref = scipy.linalg.lu_factor(a)
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    with hybridla.config.set(settings):
        lu, piv = hybridla.lu_factor(a, overwrite_a=True, backend=backend, nb=NB)
    assert lu is a
    np.testing.assert_array_equal(piv, ref[1])
    np.testing.assert_allclose(lu, ref[0], atol=1e-10)


@pytest.mark.parametrize("order", ["C", "F"])
def test_lu_input_of_any_layout_is_left_untouched(backend, order, rng):
    """The wide columns come up from the user's array itself (F-ordered) or from a copy (a C
    order one); the factors go to a new array."""
    a = np.asarray(rng.standard_normal((150, 150)), order=order)
    saved = a.copy(order="K")
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    with hybridla.config.set(settings):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=NB)
    assert lu is not a and lu.flags.f_contiguous
    assert getrf_ratio(a, lu, piv) < THRESH
    assert a.tobytes(order="K") == saved.tobytes(order="K")


@pytest.mark.parametrize("shape, count", [((170, 150), 4), ((200, 200), 5)],
                         ids=["last-on-host", "last-on-device"])
def test_lu_moves_the_bytes_its_docstring_counts(backend, shape, count, rng, tmp_path):
    """Pass 1 brings every element up once, pass 3 takes it home once; pass 2 streams, for each
    wide column, the L of the block columns left of the previous wide column (still on the
    device), rows k0:m; pass 4 sends the rows of those that the device interchanged home, and,
    where they fit the other buffer, brings rows l0:m left of the last wide column up and
    home again for its interchanges."""
    m, n = shape
    a = np.asfortranarray(rng.standard_normal((m, n)))
    settings, width = capped(backend, "getrf", a.shape, np.float64, count)
    trace = tmp_path / "lu.json"
    with hybridla.config.set(settings):
        hybridla.lu_factor(a, backend=backend, nb=NB, trace=trace)
    # the wide columns (the first takes the remainder), and for each the block columns left
    # of the previous one
    columns = _ooc.cut(n, width, NB)
    assert columns[0][1] < width and columns[1][1] - columns[1][0] == width
    streamed = sum((m - k0) * (min(k0 + NB, n) - k0)
                   for (p0, _), (j0, _) in zip(columns[1:], columns[2:])
                   for k0 in range(0, p0, NB))
    # pass 4 on the device: each streamed block column's rows p0:m, once the previous wide
    # column's interchanges are applied in its slot, go home (all but the last wide column's
    # interchanges, which the host applies at the end)
    interchanged = sum((m - p0) * (min(k0 + NB, n) - k0)
                       for (p0, _), (j0, _) in zip(columns[1:], columns[2:])
                       for k0 in range(0, p0, NB))
    last = columns[-1][0]
    on_device = -(-last // width) * (m - last) <= m
    assert on_device == (shape == (200, 200))
    last_rows = (m - last) * last if on_device else 0
    assert streamed > 0 and interchanged > 0
    assert copies(trace) == {"upload": 8.0 * (m * n + streamed + last_rows),
                             "download": 8.0 * (m * n + interchanged + last_rows)}


# -- Cholesky ------------------------------------------------------------------------------------

@pytest.mark.parametrize("count", list(COUNTS), ids=list(COUNTS))
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
def test_cholesky_out_of_core(backend, lower, count, rng, tmp_path):
    n = 201
    a = hpd_matrix(n, np.float64, rng)
    saved = a.copy(order="F")
    settings, width = capped(backend, "potrf", a.shape, np.float64, COUNTS[count],
                             uplo="L" if lower else "U")
    trace = tmp_path / "cho.json"
    with hybridla.config.set(settings):
        c, low = hybridla.cho_factor(a, lower=lower, backend=backend, nb=NB, ooc="always",
                                     trace=trace)
    assert out_of_core(trace)["wide_columns"] == -(-n // width) > 1
    assert low is lower
    assert potrf_ratio(a, c, lower) < THRESH
    other = np.triu if lower else np.tril
    np.testing.assert_array_equal(other(c, 1 if lower else -1), other(a, 1 if lower else -1))
    reference = scipy.linalg.cholesky(a, lower=lower)
    np.testing.assert_allclose((np.tril if lower else np.triu)(c), reference,
                               atol=1e3 * np.finfo(float).eps * np.abs(reference).max())
    assert a.tobytes() == saved.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cholesky_out_of_core_every_dtype(backend, dtype, rng):
    a = hpd_matrix(133, dtype, rng)
    settings, _ = capped(backend, "potrf", a.shape, dtype, 3)
    with hybridla.config.set(settings):
        factor = hybridla.cholesky(a, lower=True, backend=backend, nb=NB)
    assert factor.dtype == np.dtype(dtype)
    assert potrf_ratio(a, factor, True) < THRESH
    assert not np.triu(factor, 1).any()


@pytest.mark.parametrize("minor", [10, 77, 140], ids=["first", "middle", "last"])
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
def test_cholesky_not_positive_definite_info_as_lapack(backend, lower, minor, rng):
    """The first leading minor that is not positive definite, in whichever wide column."""
    n = 150
    a = hpd_matrix(n, np.float64, rng)
    a[minor, minor] = -1.0
    _, info = scipy.linalg.lapack.dpotrf(a, lower=lower)
    assert info == minor + 1
    settings, _ = capped(backend, "potrf", a.shape, np.float64, 4, uplo="L" if lower else "U")
    with hybridla.config.set(settings), \
            pytest.raises(np.linalg.LinAlgError, match=f"^{info}-th leading minor"):
        hybridla.cho_factor(a, lower=lower, backend=backend, nb=NB)


def test_cholesky_moves_the_bytes_its_docstring_counts(backend, rng, tmp_path):
    """Pass 1 brings each wide column's rows j0:n up once, pass 3 takes them home; pass 2
    streams rows j0:n of the block columns left of the previous wide column."""
    n = 150
    a = hpd_matrix(n, np.float64, rng)
    settings, width = capped(backend, "potrf", a.shape, np.float64, 4)
    trace = tmp_path / "cho.json"
    with hybridla.config.set(settings):
        hybridla.cho_factor(a, lower=True, backend=backend, nb=NB, trace=trace)
    columns = _ooc.cut(n, width, NB)
    once = sum((n - j0) * (j1 - j0) for j0, j1 in columns)
    streamed = sum((n - j0) * (min(k0 + NB, n) - k0)
                   for (p0, _), (j0, _) in zip(columns[1:], columns[2:])
                   for k0 in range(0, p0, NB))
    assert copies(trace) == {"upload": 8.0 * (once + streamed), "download": 8.0 * once}


# -- QR, QL, LQ ----------------------------------------------------------------------------------

HOUSEHOLDER = {"QR": ("geqrf", hybridla.geqrf), "QL": ("geqlf", hybridla.geqlf),
               "LQ": ("gelqf", hybridla.gelqf)}


def householder_ratios(a, factors, tau, storage):
    q, t = q_by_lapack(factors, tau, storage)
    left, right = (t, q) if storage == "LQ" else (q, t)
    return factorization_ratio(a, left, right, a.dtype), orthogonality_ratio(q, a.dtype)


@pytest.mark.parametrize("count", list(COUNTS), ids=list(COUNTS))
@pytest.mark.parametrize("shape", [(200, 200), (230, 171), (171, 230)],
                         ids=["square", "tall", "wide"])
@pytest.mark.parametrize("storage", list(HOUSEHOLDER))
def test_householder_out_of_core(backend, storage, shape, count, rng, tmp_path):
    routine, function = HOUSEHOLDER[storage]
    a = np.asfortranarray(rng.standard_normal(shape))
    saved = a.copy(order="F")
    settings, width = capped(backend, routine, shape, np.float64, COUNTS[count])
    trace = tmp_path / "qr.json"
    with hybridla.config.set(settings):
        factors, tau = function(a, backend=backend, nb=NB, ooc="always", trace=trace)
    record = out_of_core(trace)
    assert record["wide_columns"] == -(-_ooc.layout(routine)[0].shape(*shape)[1] // width) > 1
    assert all(r < THRESH for r in householder_ratios(a, factors, tau, storage))
    # the same reflectors as in core, to rounding
    factors_in_core, tau_in_core = function(a, backend=backend, nb=NB, ooc="never")
    tolerance = 1e3 * np.finfo(float).eps * np.abs(factors_in_core).max()
    np.testing.assert_allclose(factors, factors_in_core, rtol=0, atol=tolerance)
    np.testing.assert_allclose(tau, tau_in_core, rtol=0, atol=1e-12)
    assert a.tobytes() == saved.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_qr_out_of_core_every_dtype(backend, dtype, rng):
    a = np.asfortranarray(random_matrix(157, 131, dtype, rng))
    settings, _ = capped(backend, "geqrf", a.shape, dtype, 3)
    with hybridla.config.set(settings):
        factors, tau = hybridla.geqrf(a, backend=backend, nb=NB, ooc="always")
        q, r = hybridla.qr(a, mode="economic", backend=backend, nb=NB, ooc="always")
    assert factors.dtype == np.dtype(dtype)
    assert all(x < THRESH for x in householder_ratios(a, factors, tau, "QR"))
    assert factorization_ratio(a, q, r) < THRESH and orthogonality_ratio(q) < THRESH


# -- options, budgets and failures ----------------------------------------------------------------

def test_auto_goes_out_of_core_only_over_the_budget(backend, rng, tmp_path):
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    for config, expected in ((settings, True), ({}, False)):
        trace = tmp_path / "lu.json"
        with hybridla.config.set(config):
            hybridla.lu_factor(a, backend=backend, nb=NB, trace=trace)
        assert (out_of_core(trace) is not None) == expected


def test_ooc_from_configuration_and_bad_values_named(backend, rng):
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    with hybridla.config.set({**settings, "device.ooc": "never"}), pytest.raises(MemoryError):
        hybridla.lu_factor(a, backend=backend, nb=NB)
    for function in (hybridla.lu_factor, hybridla.cho_factor, hybridla.cholesky,
                     hybridla.geqrf, hybridla.qr):
        with pytest.raises(ValueError, match=r"ooc must be one of .*got ooc='sometimes'"):
            function(a, backend=backend, ooc="sometimes")


def test_never_raises_the_clear_memory_error_before_any_work(backend, rng):
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    saved = a.copy(order="F")
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    budget = settings["device.memory_budget"]
    with hybridla.config.set(settings), pytest.raises(MemoryError) as excinfo:
        hybridla.lu_factor(a, overwrite_a=True, backend=backend, nb=NB, ooc="never")
    message = str(excinfo.value)
    assert "150 x 150" in message and str(budget) in message and "ooc='never'" in message
    assert a.tobytes() == saved.tobytes()
    # a routine without an out-of-core version says so
    with hybridla.config.set(settings), pytest.raises(MemoryError, match="no out-of-core"):
        hybridla.solve(a, np.ones(150), backend=backend)


def test_a_budget_too_small_even_out_of_core_is_refused_before_any_work(backend, rng):
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    saved = a.copy(order="F")
    with hybridla.config.set({"device.memory_budget": 1000}), \
            pytest.raises(MemoryError, match="out of core.*over the budget of 1000 bytes"):
        hybridla.lu_factor(a, overwrite_a=True, backend=backend, nb=NB)
    assert a.tobytes() == saved.tobytes()


@pytest.mark.parametrize("routine", ["lu", "cholesky"])
def test_failure_mid_run_leaves_the_input_and_no_memory(backend, routine, monkeypatch, rng):
    """A task that fails in the left-looking update (the 4th) fails the call; the user's array
    is untouched with overwrite_a=False, the working store is freed, and the next call works."""
    import hybridla.update.chol as chol_update
    import hybridla.update.lu as lu_update
    module, name = (lu_update, "eliminate") if routine == "lu" else \
        (chol_update, "trapezoid_update")
    original, lock, calls = getattr(module, name), threading.Lock(), [0]

    def failing(*args, **kwargs):
        with lock:
            calls[0] += 1
            if calls[0] == 4:
                raise RuntimeError("injected")
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, failing)
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    if routine == "cholesky":
        a = hpd_matrix(150, np.float64, rng)
    saved = a.copy(order="F")
    ops = get_backend(backend)
    before = ops.allocated_bytes()
    # (hybridla.cholesky's default is the upper triangle: wide block rows)
    settings, _ = capped(backend, "getrf" if routine == "lu" else "potrf", a.shape,
                         np.float64, None, uplo="L" if routine == "lu" else "U")
    factor = hybridla.lu_factor if routine == "lu" else hybridla.cholesky
    with hybridla.config.set(settings), pytest.raises(RuntimeError, match="injected"):
        factor(a, overwrite_a=False, backend=backend, nb=NB)
    assert calls[0] >= 4
    assert a.tobytes() == saved.tobytes(), "a failed run modified the input (overwrite_a=False)"
    assert ops.allocated_bytes() == before
    with hybridla.config.set(settings):
        result = factor(a, backend=backend, nb=NB)
    if routine == "lu":
        assert getrf_ratio(a, *result) < THRESH
    else:
        assert potrf_ratio(a, result, False) < THRESH


# -- how the copies travel (device.ooc_transfer) -------------------------------------------------

def transfer_of(path):
    return out_of_core(path)["transfer"]


@pytest.mark.parametrize("transfer", ["register", "staged"])
@pytest.mark.parametrize("routine", ["getrf", "potrf-upper", "geqrf"])
def test_both_transfers_give_the_in_core_factors(backend, routine, transfer, rng, tmp_path,
                                                 monkeypatch):
    """Pinned in place (every copy of a pinned wide column one DMA from the host matrix, cut
    where its pinned pieces meet; here every wide column is pinned, PIN_WHEN_READ 0, in
    pieces of 64 KiB) or staged through slots: the same factors as in core, and the trace
    says which way the copies went. Upper Cholesky runs over wide block rows, which are
    never pinned."""
    monkeypatch.setattr(_ooc, "PIN_WHEN_READ", 0)
    monkeypatch.setattr(_ooc, "PIN_PIECE_BYTES", 1 << 16)
    n = 203
    name, uplo = (routine.split("-") + ["L"])[:2]
    uplo = "U" if uplo == "upper" else "L"
    a = hpd_matrix(n, np.float64, rng) if name == "potrf" else \
        np.asfortranarray(rng.standard_normal((n, n)))
    settings, _ = capped(backend, name, a.shape, np.float64, 3, uplo=uplo)
    settings = {**settings, "device.ooc_transfer": transfer}
    factor = {"getrf": lambda x, **kw: hybridla.lu_factor(x, **kw)[0],
              "potrf": lambda x, **kw: hybridla.cholesky(x, lower=False, **kw),
              "geqrf": lambda x, **kw: hybridla.geqrf(x, **kw)[0]}[name]
    trace = tmp_path / "run.json"
    with hybridla.config.set(settings):
        out = factor(a, backend=backend, nb=NB, ooc="always", trace=trace)
    assert transfer_of(trace) == transfer
    pinned = out_of_core(trace)["pinned"]
    on_device = get_backend(backend).has_device  # small matrices stay staged on a device
    assert pinned == ([0, 1, 2] if transfer == "register" and name != "potrf"
                      and not on_device else [])
    reference = factor(a, backend=backend, nb=NB, ooc="never")
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-10 * np.abs(reference).max())


def test_a_bad_transfer_is_named(backend, rng):
    a = np.asfortranarray(rng.standard_normal((150, 150)))
    settings, _ = capped(backend, "getrf", a.shape, np.float64, 4)
    ops = get_backend(backend)
    before = ops.allocated_bytes()
    with hybridla.config.set({**settings, "device.ooc_transfer": "teleport"}), \
            pytest.raises(ValueError, match="device.ooc_transfer must be one of"):
        hybridla.lu_factor(a, backend=backend, nb=NB, ooc="always")
    # refused before any memory was taken (the staging slots too: the next run would wait
    # for them forever, as it did on the GPU when this check came after them)
    assert ops.allocated_bytes() == before
    with hybridla.config.set(settings):
        hybridla.lu_factor(a, backend=backend, nb=NB, ooc="always")


@pytest.mark.cuda
@pytest.mark.parametrize("overwrite", [True, False], ids=["in-place", "copy"])
def test_pinned_in_place_on_the_device(cuda_backend, overwrite, rng, tmp_path):
    """A matrix above device.pin_min_bytes (64 MiB) cut into one wide column per block
    column: the first ones, streamed most, are pinned in place and unpinned after; LU and
    lower Cholesky against LAPACK, the user's array again pageable (a second pinning of the
    same pages would fail if the first were left)."""
    n = 3000
    a = np.asfortranarray(rng.standard_normal((n, n)))
    saved = a.copy(order="F")
    settings, _ = capped(cuda_backend, "getrf", a.shape, np.float64, None, nb=256)
    settings["device.ooc_transfer"] = "register"
    trace = tmp_path / "lu.json"
    for _ in range(2):
        work = a.copy(order="F") if overwrite else a
        with hybridla.config.set(settings):
            lu, piv = hybridla.lu_factor(work, overwrite_a=overwrite, backend=cuda_backend,
                                         nb=256, ooc="always", trace=trace)
        assert out_of_core(trace)["pinned"][:3] == [0, 1, 2]
        assert getrf_ratio(a, lu, piv) < THRESH
    assert a.tobytes() == saved.tobytes()
    s = hpd_matrix(n, np.float64, rng)
    settings, _ = capped(cuda_backend, "potrf", s.shape, np.float64, None, nb=256)
    settings["device.ooc_transfer"] = "register"
    with hybridla.config.set(settings):
        c = hybridla.cholesky(s, lower=True, backend=cuda_backend, nb=256, ooc="always",
                              trace=trace)
    assert out_of_core(trace)["pinned"][:3] == [0, 1, 2]
    assert potrf_ratio(s, c, True) < THRESH


def test_register_pins_the_wide_columns_read_most(backend, rng, tmp_path):
    """With ten wide columns and two buffers, wide column p crosses the link 2 + (8 - p)
    times (up, home, and streamed to every later one but the next): those crossing at least
    PIN_WHEN_READ (4) times, 0 to 6, are pinned; the last ones stay staged."""
    a = np.asfortranarray(rng.standard_normal((160, 160)))
    settings, width = capped(backend, "getrf", a.shape, np.float64, None)
    assert width == NB and _ooc.PIN_WHEN_READ == 4
    trace = tmp_path / "lu.json"
    with hybridla.config.set({**settings, "device.ooc_transfer": "register"}):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=NB, ooc="always", trace=trace)
    # (on a device a matrix below device.pin_min_bytes is never pinned)
    assert out_of_core(trace)["pinned"] == ([] if get_backend(backend).has_device
                                            else list(range(7)))
    assert getrf_ratio(a, lu, piv) < THRESH
