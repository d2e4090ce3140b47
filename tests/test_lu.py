"""LU factorization and solves: accuracy like LAPACK's testers, scipy compatibility, interfaces.

Every test body runs on each available backend (the ``backend`` fixture: "host", and "cuda" where
a GPU is present, marked ``cuda``). The accuracy criterion is LAPACK's: the factorization ratio
||P A - L U||_1 / (max(m, n) ||A||_1 eps) < 30 and the solve backward error
||b - A x||_1 / (||A||_1 ||x||_1 n eps) < 30, eps of the working precision.
Sizes are small and not multiples of nb, so that every run has several blocks and a ragged one.
"""
from __future__ import annotations

import importlib.util
import json
import math
import re
import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hybridla
import hybridla.backend  # noqa: F401  (conftest asks it which backends exist)

from _lapack_checks import (DTYPES, check_pivots, device_kind_of, eps_of, getrf_ratio,
                            is_on_device, matrix_with_condition, norm1, random_matrix,
                            solve_backward_error, to_device, to_host)

THRESH = 30.0  # LAPACK's testers' threshold for the test ratios
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
SHAPES = [(173, 173), (200, 77), (77, 200)]
SHAPE_IDS = ["square", "tall", "wide"]


def fortran_random(m, n, dtype, rng):
    return np.asfortranarray(random_matrix(m, n, dtype, rng))


def scipy_getrf(a):
    """scipy's LAPACK xGETRF on a copy of ``a``: (lu, 0-based piv, info)."""
    getrf = scipy.linalg.lapack.get_lapack_funcs("getrf", dtype=a.dtype)
    lu, piv, info = getrf(np.array(a, order="F", copy=True))
    return lu, piv, info


def diagonal_number_from_warnings(records) -> int:
    """The i of the "Diagonal number i is exactly zero" LinAlgWarning among ``records``."""
    messages = [str(w.message) for w in records
                if issubclass(w.category, scipy.linalg.LinAlgWarning)]
    assert messages, "no LinAlgWarning was issued"
    found = [re.search(r"Diagonal number (\d+)", msg) for msg in messages]
    found = [f for f in found if f]
    assert found, f"no 'Diagonal number i' in the LinAlgWarning(s): {messages}"
    return int(found[0].group(1))


# -- accuracy: dtypes x shapes, engine options -------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_factor_ratio_all_dtypes_and_shapes(backend, dtype, shape, rng):
    m, n = shape
    a = fortran_random(m, n, dtype, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=32)
    assert isinstance(lu, np.ndarray), type(lu)
    assert lu.shape == (m, n)
    assert lu.dtype == np.dtype(dtype), f"lu dtype {lu.dtype} for a {np.dtype(dtype)} input"
    assert isinstance(piv, np.ndarray)
    check_pivots(piv, m, n)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("panel", ["cpu", "gpu", "auto"])
@pytest.mark.parametrize("lookahead", [0, 1, 2])
def test_lu_factor_lookahead_and_panel_placement(backend, lookahead, panel, rng):
    """Every look-ahead depth and panel placement is accepted on every backend, gives an
    accurate factorization and the same pivots as LAPACK (randn: no near-ties in float64)."""
    a = fortran_random(173, 173, np.float64, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=32, lookahead=lookahead, panel=panel)
    assert getrf_ratio(a, lu, piv) < THRESH
    _, piv_ref, _ = scipy_getrf(a)
    np.testing.assert_array_equal(piv, piv_ref)


@pytest.mark.parametrize("nb", ["auto", None])
def test_lu_factor_default_and_auto_block_size(backend, nb, rng):
    a = fortran_random(150, 150, np.float64, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=nb)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("n, nb", [(20, 1), (45, 7), (50, 500), (64, 64), (65, 64)],
                         ids=["nb1", "nb7", "nb_bigger_than_n", "n_eq_nb", "n_eq_nb_plus_1"])
def test_lu_factor_block_size_edge_cases(backend, n, nb, rng):
    a = fortran_random(n, n, np.float64, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=nb)
    assert getrf_ratio(a, lu, piv) < THRESH
    np.testing.assert_array_equal(piv, scipy_getrf(a)[1])


# -- memory layouts ---------------------------------------------------------------------

def test_lu_factor_padded_leading_dimension(backend, rng):
    n = 77
    big = fortran_random(n + 11, n + 5, np.float64, rng)
    big_saved = big.copy(order="K")
    a = big[:n, :n]  # F-ordered, leading dimension n + 11
    assert not a.flags.f_contiguous and not a.flags.c_contiguous
    lu, piv = hybridla.lu_factor(a, overwrite_a=False, backend=backend, nb=16)
    assert getrf_ratio(a, lu, piv) < THRESH
    np.testing.assert_array_equal(piv, scipy_getrf(a)[1])
    assert big.tobytes() == big_saved.tobytes(), "overwrite_a=False modified the parent array"


def test_lu_factor_row_strided_view(backend, rng):
    n = 77
    big = fortran_random(2 * n, n, np.float64, rng)
    big_saved = big.copy(order="K")
    a = big[::2, :]
    lu, piv = hybridla.lu_factor(a, overwrite_a=False, backend=backend, nb=16)
    assert getrf_ratio(a, lu, piv) < THRESH
    np.testing.assert_array_equal(piv, scipy_getrf(a)[1])
    assert big.tobytes() == big_saved.tobytes(), "overwrite_a=False modified the parent array"


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_lu_factor_c_order_input(backend, dtype, rng):
    a = np.ascontiguousarray(random_matrix(90, 90, dtype, rng))
    saved = a.copy()
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=16)
    assert lu.dtype == np.dtype(dtype)
    assert getrf_ratio(a, lu, piv) < THRESH
    assert a.tobytes() == saved.tobytes()


def test_lu_factor_overwrite_true_on_view_is_correct_and_stays_inside_view(backend, rng):
    n = 70
    big = fortran_random(n + 9, n + 4, np.float64, rng)
    big_saved = big.copy(order="K")
    a = big[:n, :n]
    lu, piv = hybridla.lu_factor(a, overwrite_a=True, backend=backend, nb=16)
    assert getrf_ratio(big_saved[:n, :n], lu, piv) < THRESH
    # Whatever happened to the view, nothing outside it may change.
    outside = np.ones(big.shape, dtype=bool)
    outside[:n, :n] = False
    np.testing.assert_array_equal(big[outside], big_saved[outside])


# -- agreement with scipy / LAPACK ------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_lu_factor_matches_scipy(backend, dtype, shape, rng):
    """Same pivots as scipy.linalg.lu_factor (complex: LAPACK's izamax picks by |Re| + |Im|)
    and the same factors up to rounding."""
    m, n = shape
    a = fortran_random(m, n, dtype, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=32)
    if m == n:
        lu_ref, piv_ref = scipy.linalg.lu_factor(a)
    else:
        lu_ref, piv_ref, _ = scipy_getrf(a)
    np.testing.assert_array_equal(piv, piv_ref)
    assert piv.dtype == piv_ref.dtype == np.int32
    diff = norm1(lu.astype(lu_ref.dtype) - lu_ref)
    assert diff <= 1e3 * eps_of(dtype) * norm1(lu_ref), \
        f"||lu - lu_scipy||_1 = {diff:.3e}, ||lu_scipy||_1 = {norm1(lu_ref):.3e}"


# -- singular matrices ------------------------------------------------------------------

def zero_column_matrix(dtype, rng, n=100, col=37):
    a = fortran_random(n, n, dtype, rng)
    a[:, col] = 0
    return a


def equal_rows_matrix(rng, n=100, rows=(20, 57)):
    """Rows 20 and 57 equal and holding the largest entry of column 0: the first step pivots on
    one of them and turns the other into an exactly zero row (multiplier exactly 1), which stays
    zero to the end, so U(n-1, n-1) == 0 exactly in every blocking and every summation order."""
    a = fortran_random(n, n, np.float64, rng)
    a[rows[1], :] = a[rows[0], :]
    a[list(rows), 0] = 10.0
    return a


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_factor_zero_column_warns_with_lapack_info(backend, dtype, rng):
    a = zero_column_matrix(dtype, rng)
    _, _, info_ref = scipy_getrf(a)
    assert info_ref == 38  # the construction, checked against LAPACK itself
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=16)
    assert diagonal_number_from_warnings(records) == info_ref
    assert getrf_ratio(a, lu, piv) < THRESH  # P A = L U holds for singular A too
    assert lu[37, 37] == 0


def test_lu_factor_equal_rows_warns_with_lapack_info(backend, rng):
    a = equal_rows_matrix(rng)
    _, _, info_ref = scipy_getrf(a)
    assert info_ref == 100
    with pytest.warns(scipy.linalg.LinAlgWarning, match="Diagonal number") as records:
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=16)
    assert diagonal_number_from_warnings(records) == info_ref
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("which", ["zero_column", "equal_rows"])
def test_driver_getrf_info_matches_lapack(backend, which, rng):
    a = zero_column_matrix(np.float64, rng) if which == "zero_column" else equal_rows_matrix(rng)
    _, _, info_ref = scipy.linalg.lapack.dgetrf(a)
    lu, piv, info = driver_getrf(a, backend=backend, nb=16)
    assert int(info) == info_ref
    assert getrf_ratio(a, to_host(lu), piv) < THRESH


def driver_getrf(a, *, backend, nb):
    """hybridla.lapack.getrf on a copy of ``a`` (docs/INTERNALS.md: the driver factors a tile
    store in place and returns (piv, info, trace)); the store comes from the backend, the plan
    from hybridla.scheduler.plan.make_plan. The one place that knows how the driver layer is
    called: adjust it here if that contract changes."""
    import hybridla.lapack
    from hybridla.scheduler.plan import make_plan
    ops = hybridla.backend.get_backend(backend)
    plan = make_plan(ops, a.shape[0], a.shape[1], a.dtype, nb=nb)
    work = np.array(a, order="F", copy=True)
    A = ops.host_matrix(work, work, plan.nb)
    try:
        piv, info, _ = hybridla.lapack.getrf(A, plan)
    finally:
        A.close()
    return work, piv, info


@pytest.mark.parametrize("which", ["zero_column", "equal_rows"])
def test_solve_singular_raises_linalgerror(backend, which, rng):
    a = zero_column_matrix(np.float64, rng) if which == "zero_column" else equal_rows_matrix(rng)
    b = rng.standard_normal(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
        with pytest.raises(scipy.linalg.LinAlgError, match="(?i)singular"):
            hybridla.solve(a, b, backend=backend, nb=16)
    assert hybridla.LinAlgError is scipy.linalg.LinAlgError
    assert hybridla.LinAlgWarning is scipy.linalg.LinAlgWarning


@pytest.mark.parametrize("nb", [16, 32])
@pytest.mark.parametrize("construction", ["zero_leading_block", "block_permutation"])
def test_singular_leading_block_needs_pivoting_across_blocks(backend, construction, nb, rng):
    """A well-conditioned matrix whose leading nb x nb block is exactly singular (zero): pivots
    must come from below the diagonal block, across block rows."""
    n = 2 * nb + 5
    if construction == "zero_leading_block":
        a = rng.standard_normal((n, n))
    else:
        # [[0, I], [I, 0]] (a permutation matrix) plus small noise outside the leading block.
        h = n - nb
        a = np.zeros((n, n))
        a[:h, nb:] = np.eye(h)
        a[h:, :nb] = np.eye(nb)
        a += 1e-3 * rng.standard_normal((n, n))
    a[:nb, :nb] = 0.0
    a = np.asfortranarray(a)
    assert np.linalg.cond(a) < 1e4  # well-conditioned indeed
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=nb)
    assert getrf_ratio(a, lu, piv) < THRESH
    assert np.all(np.abs(np.diagonal(lu)) > 0)
    b = rng.standard_normal((n, 2))
    x = hybridla.solve(a, b, backend=backend, nb=nb)
    assert solve_backward_error(a, x, b) < THRESH


def test_lu_factor_prescribed_condition_1e6(backend, rng):
    a = matrix_with_condition(150, 150, 1e6, np.float64, rng)
    assert 1e5 < np.linalg.cond(a) < 1e7
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=32)
    assert getrf_ratio(a, lu, piv) < THRESH
    b = rng.standard_normal(150)
    x = hybridla.lu_solve((lu, piv), b, backend=backend)
    assert solve_backward_error(a, x, b) < THRESH


# -- solves -----------------------------------------------------------------------------

def op(a, trans):
    return {0: a, 1: a.T, 2: a.conj().T}[trans]


@pytest.mark.parametrize("nrhs", [None, 1, 5], ids=["b1d", "b2d_1col", "b2d_5col"])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_solve_backward_error(backend, dtype, trans, nrhs, rng):
    n = 67
    a = fortran_random(n, n, dtype, rng)
    b = random_matrix(n, 1 if nrhs is None else nrhs, dtype, rng)
    if nrhs is None:
        b = b[:, 0].copy()
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=16)
    x = hybridla.lu_solve((lu, piv), b, trans=trans, backend=backend)
    assert isinstance(x, np.ndarray)
    assert x.shape == b.shape, f"x shape {x.shape} for b shape {b.shape}"
    assert x.dtype == np.dtype(dtype)
    assert solve_backward_error(op(a, trans), x, b, dtype=dtype) < THRESH


@pytest.mark.parametrize("nrhs", [None, 3], ids=["b1d", "b2d"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_solve_backward_error(backend, dtype, nrhs, rng):
    n = 83
    a = fortran_random(n, n, dtype, rng)
    b = random_matrix(n, 1 if nrhs is None else nrhs, dtype, rng)
    if nrhs is None:
        b = b[:, 0].copy()
    x = hybridla.solve(a, b, backend=backend, nb=16)
    x_ref = scipy.linalg.solve(a, b)
    assert x.shape == x_ref.shape == b.shape  # 1-D b gives 1-D x, like scipy
    assert x.dtype == x_ref.dtype
    assert solve_backward_error(a, x, b, dtype=dtype) < THRESH


def test_lu_solve_overwrite_b_false_leaves_b_untouched(backend, rng):
    a = fortran_random(50, 50, np.float64, rng)
    b = np.asfortranarray(rng.standard_normal((50, 4)))
    saved = b.copy()
    lu_piv = hybridla.lu_factor(a, backend=backend, nb=16)
    x = hybridla.lu_solve(lu_piv, b, overwrite_b=False, backend=backend)
    assert b.tobytes() == saved.tobytes()
    assert solve_backward_error(a, x, b) < THRESH


def test_solve_overwrite_false_leaves_inputs_untouched(backend, rng):
    a = fortran_random(50, 50, np.float64, rng)
    b = np.asfortranarray(rng.standard_normal((50, 4)))
    a_saved, b_saved = a.copy(), b.copy()
    x = hybridla.solve(a, b, overwrite_a=False, overwrite_b=False, backend=backend, nb=16)
    assert a.tobytes() == a_saved.tobytes()
    assert b.tobytes() == b_saved.tobytes()
    assert solve_backward_error(a, x, b) < THRESH


# -- overwrite_a ------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_factor_overwrite_false_leaves_input_untouched(backend, dtype, order, rng):
    a = np.array(random_matrix(97, 97, dtype, rng), order=order)
    saved = a.copy(order="K")
    lu, piv = hybridla.lu_factor(a, overwrite_a=False, backend=backend, nb=16)
    assert a.tobytes() == saved.tobytes(), "overwrite_a=False modified the input"
    assert a.flags.f_contiguous == saved.flags.f_contiguous
    assert not np.shares_memory(lu, a)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_factor_overwrite_true_factors_in_place(backend, dtype, rng):
    """An F-contiguous array of the working dtype is factored in place (CPU interface of every
    backend, the cuda one included: the result goes back into the user's array)."""
    a = fortran_random(97, 97, dtype, rng)
    saved = a.copy(order="F")
    lu, piv = hybridla.lu_factor(a, overwrite_a=True, backend=backend, nb=16)
    assert np.shares_memory(lu, a), "overwrite_a=True on an F-contiguous array made a copy"
    assert getrf_ratio(saved, lu, piv) < THRESH
    np.testing.assert_array_equal(lu, a)


# -- input conversion, empty ------------------------------------------------------------

@pytest.mark.parametrize("int_dtype", [np.int32, np.int64])
def test_lu_factor_integer_input_cast_to_float64(backend, int_dtype, rng):
    a = rng.integers(-9, 10, size=(60, 60)).astype(int_dtype)
    saved = a.copy()
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=16)
    lu_ref, _ = scipy.linalg.lu_factor(a)
    assert lu.dtype == lu_ref.dtype == np.float64
    assert getrf_ratio(a, lu, piv) < THRESH
    np.testing.assert_array_equal(a, saved)


def test_lu_factor_empty_matrix_like_scipy(backend):
    a = np.empty((0, 0))
    lu, piv = hybridla.lu_factor(a, backend=backend)
    lu_ref, piv_ref = scipy.linalg.lu_factor(a)
    assert lu.shape == lu_ref.shape == (0, 0)
    assert lu.dtype == lu_ref.dtype
    assert piv.shape == piv_ref.shape == (0,)
    assert piv.dtype == piv_ref.dtype == np.int32


# -- property test ----------------------------------------------------------------------

@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=st.integers(1, 40), n=st.integers(1, 40), nb=st.sampled_from([2, 3, 5, 8]),
       lookahead=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2**32 - 1))
def test_lu_factor_property_random_shapes(backend, m, n, nb, lookahead, seed):
    a = np.asfortranarray(np.random.default_rng(seed).standard_normal((m, n)))
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=nb, lookahead=lookahead)
    assert getrf_ratio(a, lu, piv) < THRESH
    np.testing.assert_array_equal(piv, scipy_getrf(a)[1])


# -- trace ------------------------------------------------------------------------------

def test_lu_factor_writes_chrome_trace(backend, tmp_path, rng):
    n, nb = 100, 32
    steps = math.ceil(n / nb)
    a = fortran_random(n, n, np.float64, rng)
    path = tmp_path / "t.json"
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=nb, trace=path)
    assert getrf_ratio(a, lu, piv) < THRESH
    data = json.loads(path.read_text())
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    assert len(events) >= steps
    step_of = [e.get("args", {}).get("step") for e in events]
    assert len({s for s in step_of if s is not None}) >= steps, \
        f"events carry steps {sorted({s for s in step_of if s is not None})}, want {steps}"
    panel_steps = {s for e, s in zip(events, step_of) if "panel" in e["name"].lower()}
    assert panel_steps, f"no event named like 'panel' among {sorted({e['name'] for e in events})}"
    assert len(panel_steps) >= steps, f"panel events for steps {panel_steps}, want {steps}"
    assert all(e["dur"] >= 0 for e in events)


# -- GPU interface ----------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_gpu_lu_factor_returns_device_array_of_input_kind(device_kind, dtype, rng):
    a = fortran_random(150, 150, dtype, rng)
    a_dev = to_device(a, device_kind)
    lu_dev, piv = hybridla.lu_factor(a_dev, backend="cuda", nb=32)
    assert is_on_device(lu_dev, device_kind), \
        f"lu is {type(lu_dev)} ({device_kind_of(lu_dev)}), expected a {device_kind} device array"
    assert is_on_device(piv, device_kind), "the GPU interface's pivots stay on the device"
    lu, piv = to_host(lu_dev), to_host(piv)
    assert lu.shape == a.shape and lu.dtype == np.dtype(dtype) and piv.dtype == np.int32
    assert getrf_ratio(a, lu, piv) < THRESH
    _, piv_cpu = hybridla.lu_factor(a, backend="cuda", nb=32)
    np.testing.assert_array_equal(piv, piv_cpu)


@pytest.mark.cuda
@pytest.mark.parametrize("routine", ["lu", "cholesky", "qr"])
def test_gpu_factors_identical_whatever_part_runs_while_recording(cuda_backend, routine, rng):
    """A matrix on the device starts on its first steps while the rest of the graph is being
    recorded (scheduler.head_steps), and with scheduler.record_segments on each stretch
    recorded meanwhile too: the factors are bit for bit those of recording it all first, for
    any head, panel placement and look-ahead."""
    a = fortran_random(203, 203, np.float64, rng)
    a = a @ a.T + 203 * np.eye(203) if routine == "cholesky" else a

    def factor(head_steps, panel, lookahead, segments=False):
        options = dict(backend=cuda_backend, nb=16, panel=panel, lookahead=lookahead)
        with hybridla.config.set({"scheduler.head_steps": head_steps,
                                  "scheduler.record_segments": segments}):
            a_dev = to_device(a, "cupy" if importlib.util.find_spec("cupy") else "pycuda")
            if routine == "lu":
                lu, piv = hybridla.lu_factor(a_dev, overwrite_a=True, **options)
                return to_host(lu), to_host(piv)
            if routine == "cholesky":
                c, lower = hybridla.cho_factor(a_dev, lower=True, **options)
                return np.tril(to_host(c)), lower
            factors, tau = hybridla.geqrf(a_dev, overwrite_a=True, **options)
            return to_host(factors), to_host(tau)
    for panel, lookahead in [("gpu", 1), ("cpu", 2), ("auto", 0)]:
        first = factor(0, panel, lookahead)
        for head_steps, segments in [(1, False), (2, False), (5, False), (100, False),
                                     (1, True), (2, True)]:
            again = factor(head_steps, panel, lookahead, segments)
            for x, y in zip(first, again):
                np.testing.assert_array_equal(
                    x, y, err_msg=f"{routine} head_steps={head_steps} segments={segments}")


@pytest.mark.parametrize("routine", ["lu", "cholesky", "qr"])
def test_host_factors_identical_with_recorded_stretches_run_early(routine, rng):
    """scheduler.record_segments on the host backend: the factors are bit for bit those of
    the head-then-rest order."""
    a = fortran_random(203, 203, np.float64, rng)
    a = a @ a.T + 203 * np.eye(203) if routine == "cholesky" else a

    def factor(segments):
        with hybridla.config.set({"scheduler.record_segments": segments,
                                  "scheduler.head_steps": 1}):
            if routine == "lu":
                return hybridla.lu_factor(a, backend="host", nb=16)
            if routine == "cholesky":
                return np.tril(hybridla.cho_factor(a, lower=True, backend="host", nb=16)[0]),
            return hybridla.geqrf(a, backend="host", nb=16)
    for x, y in zip(factor(False), factor(True)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.cuda
def test_gpu_lu_factor_overwrite_false_leaves_device_input_untouched(device_kind, rng):
    a = fortran_random(120, 120, np.float64, rng)
    a_dev = to_device(a, device_kind)
    lu_dev, piv = hybridla.lu_factor(a_dev, overwrite_a=False, backend="cuda", nb=32)
    assert to_host(a_dev).tobytes() == a.tobytes(), "overwrite_a=False modified the device input"
    assert getrf_ratio(a, to_host(lu_dev), to_host(piv)) < THRESH


@pytest.mark.cuda
@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("nrhs", [None, 3], ids=["b1d", "b2d"])
def test_gpu_lu_solve_device_in_device_out(device_kind, nrhs, trans, rng):
    n = 130
    a = fortran_random(n, n, np.float64, rng)
    b = rng.standard_normal(n if nrhs is None else (n, nrhs))
    lu_dev, piv = hybridla.lu_factor(to_device(a, device_kind), backend="cuda", nb=32)
    x_dev = hybridla.lu_solve((lu_dev, piv), to_device(b, device_kind), trans=trans,
                              backend="cuda")
    assert is_on_device(x_dev, device_kind), f"x is {type(x_dev)}, expected {device_kind}"
    x = to_host(x_dev)
    assert x.shape == b.shape
    assert solve_backward_error(op(a, trans), x, b) < THRESH


@pytest.mark.cuda
def test_gpu_solve_device_in_device_out(device_kind, rng):
    n = 130
    a = fortran_random(n, n, np.float64, rng)
    b = rng.standard_normal((n, 2))
    x_dev = hybridla.solve(to_device(a, device_kind), to_device(b, device_kind),
                           backend="cuda", nb=32)
    assert is_on_device(x_dev, device_kind), f"x is {type(x_dev)}, expected {device_kind}"
    assert solve_backward_error(a, to_host(x_dev), b) < THRESH


@pytest.mark.cuda
@pytest.mark.parametrize("transfer", ["staged", "register"])
@pytest.mark.parametrize("overwrite", [True, False])
def test_cpu_interface_pinned_streaming(overwrite, transfer):
    """A host matrix large enough to be pinned (device.pin_min_bytes) is pinned in pieces while
    it uploads and its factors stream back: the result must be LAPACK-accurate and the input
    untouched unless overwritten."""
    if "cuda" not in hybridla.backend.available_backends():
        pytest.skip("needs the cuda backend")
    n = 2944  # 69 MB in float64: over the 64 MiB pinning threshold
    a = np.asfortranarray(np.random.default_rng(7).standard_normal((n, n)))
    saved = a.copy(order="F")
    with hybridla.config.set({"device.host_transfer": transfer}):
        lu, piv = hybridla.lu_factor(a, overwrite_a=overwrite, backend="cuda", nb=256)
    _, ref_piv = scipy.linalg.lu_factor(saved)
    assert (piv == ref_piv).all()
    assert getrf_ratio(saved, lu, piv) < THRESH
    assert np.shares_memory(lu, a) == overwrite
    if not overwrite:
        assert np.array_equal(a, saved)
    assert hybridla.backend.get_backend("cuda").allocated_bytes() == 0


# -- recursive panels (lu.panel_leaf) -----------------------------------------------------------

@pytest.mark.parametrize("panel", ["gpu", "auto"])
@pytest.mark.parametrize("shape", [(150, 150), (181, 97), (97, 181)], ids=str)
def test_recursive_panel_matches_scipy(backend, panel, shape, rng):
    """Panels of 64 factored by recursive halving to leaves of 8 (panel/lu.py): the same pivots
    as LAPACK's getrf on matrices without ties, and LAPACK's ratio."""
    a = fortran_random(*shape, np.float64, rng)
    with hybridla.config.set({"lu.panel_leaf": 8}):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=64, panel=panel)
    lu_ref, piv_ref, _ = scipy_getrf(a)
    np.testing.assert_array_equal(piv, piv_ref)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("which", ["zero_column", "equal_rows"])
def test_recursive_panel_info_matches_lapack(backend, which, rng):
    a = zero_column_matrix(np.float64, rng) if which == "zero_column" else equal_rows_matrix(rng)
    _, _, info_ref = scipy.linalg.lapack.dgetrf(a)
    with hybridla.config.set({"lu.panel_leaf": 8}):
        lu, piv, info = driver_getrf(a, backend=backend, nb=48)
    assert int(info) == info_ref
    assert getrf_ratio(a, to_host(lu), piv) < THRESH


# -- tall panels: the GPU's fused panel kernel (cuda/getrf_panel.cu) across many blocks -----------
# On the cuda backend a panel of at most 256 columns whose rows fit in the SMs' shared memory is
# factored by one cooperative launch, its rows spread over up to one block per SM; taller panels
# fall back to cuSOLVER. These shapes span many blocks (and, at 70000 rows, several rows per
# thread), so the cross-block pivot search and row interchanges are exercised.

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tall_panels_match_lapack(backend, dtype, rng):
    a = fortran_random(20000, 96, dtype, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=64)
    _, piv_ref, _ = scipy_getrf(a)
    if np.dtype(dtype) in (np.float64, np.complex128):  # no near-ties at this precision
        np.testing.assert_array_equal(piv, piv_ref)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_very_tall_panels(backend, dtype, rng):
    """Several rows per thread (float64), and a share too large for shared memory (complex128:
    the cuSOLVER fallback)."""
    a = fortran_random(70000, 48, dtype, rng)
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=48)
    _, piv_ref, _ = scipy_getrf(a)
    np.testing.assert_array_equal(piv, piv_ref)
    assert getrf_ratio(a, lu, piv) < THRESH


def test_tall_recursive_panels_with_kernel_leaves(backend, rng):
    a = fortran_random(9000, 300, np.float64, rng)
    with hybridla.config.set({"lu.panel_leaf": 32}):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=128)
    _, piv_ref, _ = scipy_getrf(a)
    np.testing.assert_array_equal(piv, piv_ref)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("leaf", [0, 16])
def test_tall_singular_panel_info_matches_lapack(backend, leaf, rng):
    """A zero column inside a many-block panel: LAPACK's info, and the factorization goes on."""
    a = fortran_random(5000, 200, np.float64, rng)
    a[:, 70] = 0
    _, _, info_ref = scipy.linalg.lapack.dgetrf(a)
    assert info_ref == 71
    with hybridla.config.set({"lu.panel_leaf": leaf}):
        lu, piv, info = driver_getrf(a, backend=backend, nb=128)
    assert int(info) == info_ref
    assert getrf_ratio(a, to_host(lu), piv) < THRESH


# -- partial-pivoting leaves on a thread-block cluster (cuda/getrf_leaf_cluster.cu) ---------------
# On an sm_90 device a float32 leaf of at most 16 columns and 32768 rows is factored by one
# cluster of 16 blocks, each holding up to 2048 rows in registers, the leaf's interchanges
# applied to the whole panel; elsewhere (and on the host) getrf and laswp. The heights put the
# rows in one block, in several, and in all 16 (the last one full).

def _leaves_only_on_the_cluster(backend, monkeypatch):
    """On a device with the cluster kernel, make any other way of factoring a leaf fail, so
    that a test of the kernel cannot pass through the fallback."""
    if backend != "cuda" or not hybridla.backend.get_backend("cuda").leaf_cluster:
        return
    def no_fallback(*args, **kwargs):
        raise AssertionError("a float32 leaf of at most 16 columns left the cluster kernel")
    monkeypatch.setattr(hybridla.backend.get_backend("cuda"), "getrf_panel", no_fallback)


@pytest.mark.parametrize("shape, nb, leaf", [((1500, 40), 40, 16), ((20000, 96), 96, 16),
                                             ((32768, 48), 48, 16), ((181, 97), 64, 8)], ids=str)
def test_cluster_leaves_match_lapack(backend, shape, nb, leaf, monkeypatch, rng):
    """LAPACK's pivots (sgetrf's, on random matrices: no near-ties), and its ratio."""
    _leaves_only_on_the_cluster(backend, monkeypatch)
    a = fortran_random(*shape, np.float32, rng)
    with hybridla.config.set({"lu.panel_leaf": leaf}):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=nb)
    _, piv_ref, _ = scipy_getrf(a)
    np.testing.assert_array_equal(piv, piv_ref)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.parametrize("m", [3000, 20000])
def test_cluster_leaves_break_ties_as_lapack(backend, m, monkeypatch, rng):
    """One nonzero per row, +-1 or +-2 in a random column: each column's largest magnitude is
    held by many rows, in several blocks, and every multiplier is exact (0, +-1/2 or +-1), so
    LAPACK's choice is the only right one: the first such row in the order the interchanges so
    far have left (not the matrix's original order)."""
    _leaves_only_on_the_cluster(backend, monkeypatch)
    a = np.zeros((m, 32), np.float32, order="F")
    a[np.arange(m), rng.integers(0, 32, m)] = rng.choice(np.array([-2, -1, 1, 2], np.float32), m)
    with hybridla.config.set({"lu.panel_leaf": 16}):  # a panel of two leaves
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=32)
    lu_ref, piv_ref, _ = scipy_getrf(a)
    assert np.any(piv_ref[1:] != np.arange(1, 32))  # interchanges after the first
    np.testing.assert_array_equal(piv, piv_ref)
    np.testing.assert_array_equal(lu, lu_ref)


def test_cluster_leaves_zero_column(backend, monkeypatch, rng):
    """A zero column inside a leaf: LAPACK's info, no interchange there, the column unscaled."""
    _leaves_only_on_the_cluster(backend, monkeypatch)
    a = fortran_random(5000, 64, np.float32, rng)
    a[:, 21] = 0
    lu_ref, piv_ref, info_ref = scipy.linalg.lapack.sgetrf(a)
    assert info_ref == 22
    with hybridla.config.set({"lu.panel_leaf": 16}):
        lu, piv, info = driver_getrf(a, backend=backend, nb=64)
    assert int(info) == info_ref
    np.testing.assert_array_equal(piv, piv_ref)
    assert np.all(np.isfinite(to_host(lu)))
    assert getrf_ratio(a, to_host(lu), piv) < THRESH


# -- tournament pivoting for the leaves of recursive panels (lu.panel_pivoting) -----------------
# cuda/tslu.cu and backend/tournament.factor_panel_tournament walk the same tree (chunks of 256
# rows, fan 8), so on matrices without near-ties they choose the same pivots: the host's is the
# reference for the kernel's. The heights below give one node (partial pivoting), two levels and
# three.

TOURNAMENT = {"lu.panel_leaf": 32, "lu.panel_pivoting": "tournament"}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("m", [200, 2049, 20000])
def test_tournament_panel_ratio(dtype, m, rng):
    from hybridla.backend.tournament import factor_panel_tournament
    a = fortran_random(m, 32, dtype, rng)
    lu = a.copy(order="F")
    piv = factor_panel_tournament(lu)
    check_pivots(piv, m, 32)
    assert getrf_ratio(a, lu, piv) < THRESH
    if m <= 256:  # one node: partial pivoting, LAPACK's getrf
        _, piv_ref, _ = scipy_getrf(a)
        np.testing.assert_array_equal(piv, piv_ref)


def test_tournament_interchanges_bring_the_chosen_rows_up():
    from hybridla.backend.tournament import interchanges_bringing_to_top
    chosen = [5, 0, 9, 1, 7]  # a row from the top moved down, then chosen from there
    order = np.arange(12)
    for j, p in enumerate(interchanges_bringing_to_top(chosen)):
        order[j], order[p] = order[p], order[j]
    np.testing.assert_array_equal(order[:5], chosen)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tournament_lu_ratio(backend, dtype, rng):
    a = fortran_random(2600, 600, dtype, rng)
    with hybridla.config.set(TOURNAMENT):
        lu, piv = hybridla.lu_factor(a, backend=backend, nb=256)
    check_pivots(piv, *a.shape)
    assert getrf_ratio(a, lu, piv) < THRESH


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
@pytest.mark.parametrize("leaf", [32, 16])
def test_tournament_kernel_chooses_the_host_trees_pivots(cuda_backend, dtype, leaf, rng):
    a = fortran_random(20000, 160, dtype, rng)
    results = {}
    for name in ("host", cuda_backend):
        with hybridla.config.set({**TOURNAMENT, "lu.panel_leaf": leaf}):
            results[name] = hybridla.lu_factor(a, backend=name, nb=160, panel="gpu")
    np.testing.assert_array_equal(results[cuda_backend][1], results["host"][1])
    assert getrf_ratio(a, *results[cuda_backend]) < THRESH


def test_tournament_zero_column_info_as_lapack(backend, rng):
    a = fortran_random(3000, 200, np.float64, rng)
    a[:, 70] = 0
    with hybridla.config.set(TOURNAMENT):
        lu, piv, info = driver_getrf(a, backend=backend, nb=128)
    assert int(info) == 71
    lu = to_host(lu)
    assert np.isfinite(lu).all()  # L's column 70 left unscaled (zero), as getf2 leaves it
    assert getrf_ratio(a, lu, piv) < THRESH


def test_tournament_options_are_checked(rng):
    a = fortran_random(64, 64, np.float64, rng)
    with hybridla.config.set({"lu.panel_pivoting": "rook"}), \
            pytest.raises(ValueError, match="lu.panel_pivoting must be one of"):
        hybridla.lu_factor(a, backend="host")
    with hybridla.config.set({"lu.panel_pivoting": "tournament", "lu.panel_leaf": 0}), \
            pytest.raises(ValueError, match="needs lu.panel_leaf from 1 to 32"):
        hybridla.lu_factor(a, backend="host")


def test_progress_bar_counts_every_task_of_the_whole_graph(backend, rng, capsys, tmp_path):
    """With a progress bar the graph is recorded whole before it runs (the bar's total is its
    size, every task the trace records); the factors are the same as without one."""
    from hybridla.scheduler.trace import Trace

    a = np.asfortranarray(rng.standard_normal((300, 300)))
    path = tmp_path / "run.json"
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=32, progress=True, trace=str(path))
    _, ref_piv = scipy.linalg.lu_factor(a)
    assert (piv == ref_piv).all()
    assert getrf_ratio(a, lu, piv) < THRESH
    totals = {int(total) for total in re.findall(r"\d+/(\d+) \[", capsys.readouterr().err)}
    assert totals == {Trace.load(path).summary()["tasks"]}
