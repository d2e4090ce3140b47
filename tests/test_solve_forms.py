"""solve's host-only forms (issue 29): assume_a "sym"/"symmetric", "her"/"hermitian", "diagonal",
"tridiagonal", "banded", "upper triangular", "lower triangular", against scipy.linalg.solve: the
answer within kappa n eps of scipy's (forward_error_ratio < 30) and a small backward error on the
matrix the form stands for; scipy's LinAlgWarning on ill-conditioning and LinAlgError "Matrix is
singular."; lower, transposed (complex too: scipy refuses, hybridla solves a^T x = b, checked
against scipy's general solve of the explicit a^T) and overwrite_b. Host backend, all four dtypes.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg
from scipy.linalg import LinAlgError, LinAlgWarning

import hybridla
from _lapack_checks import DTYPES, forward_error_ratio, random_matrix, solve_backward_error, wide

THRESH = 30.0
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
HOST = dict(backend="host")
FORMS = ("sym", "symmetric", "her", "hermitian", "diagonal", "tridiagonal", "banded",
         "upper triangular", "lower triangular")
N = 9


def structured(form, n, dtype, lower, rng):
    """(a, m): the array passed, and the dense matrix it stands for under `form` and `lower`
    (sym/her/triangular a hold garbage in the triangle the solver must not read)."""
    x = random_matrix(n, n, dtype, rng) + n * np.eye(n, dtype=dtype)
    complex_ = np.dtype(dtype).kind == "c"
    if form in ("sym", "symmetric", "her", "hermitian"):
        t = np.tril(x) if lower else np.triu(x)
        herm = form in ("her", "hermitian") and complex_
        if herm:
            t[np.diag_indices(n)] = t.diagonal().real
        m = t + (t.conj().T if herm else t.T) - np.diag(t.diagonal())
        return np.asfortranarray(x), m.astype(dtype)
    if form in ("upper triangular", "lower triangular"):
        m = np.tril(x) if form.startswith("lower") else np.triu(x)
        return np.asfortranarray(x), m
    band = {"diagonal": (0, 0), "tridiagonal": (1, 1), "banded": (2, 1)}[form]
    m = np.triu(np.tril(x, band[1]), -band[0])
    return np.asfortranarray(m), m


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("nrhs", [None, 3], ids=["b1d", "b2d"])
@pytest.mark.parametrize("lower", [False, True], ids=["upper", "lower"])
@pytest.mark.parametrize("transposed", [False, True], ids=["N", "T"])
def test_forms_against_scipy(form, dtype, nrhs, lower, transposed):
    rng = np.random.default_rng(29)
    a, m = structured(form, N, dtype, lower, rng)
    b = random_matrix(N, 1 if nrhs is None else nrhs, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    a0, b0 = a.copy(), b.copy()
    x = hybridla.solve(a, b, lower=lower, assume_a=form, transposed=transposed, **HOST)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    assert x.shape == b.shape and x.dtype == np.dtype(dtype)
    op = m.T if transposed else m
    if transposed and np.dtype(dtype).kind == "c":
        with pytest.raises(NotImplementedError):
            scipy.linalg.solve(a, b, lower=lower, assume_a=form, transposed=True)
        ref = scipy.linalg.solve(op, b)
    else:
        ref = scipy.linalg.solve(a, b, lower=lower, assume_a=form, transposed=transposed)
    kappa = np.linalg.cond(wide(op), 1)
    assert forward_error_ratio(x, ref, kappa) < THRESH
    assert solve_backward_error(op, x, b) < THRESH


@pytest.mark.parametrize("form", ["sym", "her", "banded", "upper triangular",
                                  "lower triangular", "tridiagonal"])
@pytest.mark.parametrize("lower", [False, True])
def test_same_lapack_routines_same_answer(form, lower):
    """float64, not transposed: the same LAPACK routines as scipy, bit for bit."""
    rng = np.random.default_rng(5)
    a, _ = structured(form, N, np.float64, lower, rng)
    b = rng.standard_normal((N, 2))
    np.testing.assert_array_equal(
        hybridla.solve(a, b, lower=lower, assume_a=form, **HOST),
        scipy.linalg.solve(a, b, lower=lower, assume_a=form))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("form", FORMS)
def test_ill_conditioned_warns_as_scipy(form, dtype):
    eps = np.finfo(dtype).eps
    a = np.diag([1.0] * (N - 1) + [eps / 10]).astype(dtype)
    b = np.ones(N, dtype)
    for solve, kwargs in ((hybridla.solve, HOST), (scipy.linalg.solve, {})):
        with pytest.warns(LinAlgWarning):
            solve(a, b, assume_a=form, **kwargs)
    good = np.diag(np.arange(1.0, N + 1)).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hybridla.solve(good, b, assume_a=form, **HOST)
        scipy.linalg.solve(good, b, assume_a=form)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n", [1, 4])
def test_singular_raises_as_scipy(form, dtype, n):
    a = np.diag([0.0] + [1.0] * (n - 1)).astype(dtype)
    b = np.ones(n, dtype)
    with pytest.raises(LinAlgError):
        scipy.linalg.solve(a, b, assume_a=form)
    with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
        hybridla.solve(a, b, assume_a=form, **HOST)


@pytest.mark.parametrize("form", FORMS)
def test_common_precision_empty_and_scalar(form):
    a = np.array([[4, 1, 0], [1, 5, 2], [0, 2, 6]], dtype=np.int64)
    b = np.array([1, 2, 3], dtype=np.float32)
    x = hybridla.solve(a, b, assume_a=form, **HOST)
    assert x.dtype == np.float64
    np.testing.assert_allclose(x, scipy.linalg.solve(a, b, assume_a=form), rtol=1e-13)
    x = hybridla.solve(np.eye(2, dtype=np.float32), np.empty((2, 0), np.float32), assume_a=form,
                       **HOST)
    assert x.shape == (2, 0) and x.dtype == np.float32
    np.testing.assert_allclose(hybridla.solve([[2.0]], [3.0], assume_a=form, **HOST), [1.5])


@pytest.mark.parametrize("form", ["sym", "diagonal", "tridiagonal", "banded", "lower triangular"])
def test_overwrite_b_as_scipy(form):
    rng = np.random.default_rng(1)
    a, m = structured(form, N, np.float64, True, rng)
    b = np.asfortranarray(rng.standard_normal((N, 2)))
    b_mine, b_scipy = b.copy(order="F"), b.copy(order="F")
    x = hybridla.solve(a, b_mine, lower=True, assume_a=form, overwrite_b=True, **HOST)
    y = scipy.linalg.solve(a, b_scipy, lower=True, assume_a=form, overwrite_b=True)
    np.testing.assert_allclose(x, y, rtol=1e-12)
    assert np.shares_memory(x, b_mine)


def test_arguments_checked():
    a, b = np.eye(3), np.ones(3)
    with pytest.raises(ValueError, match="assume_a"):
        hybridla.solve(a, b, assume_a="triangular", **HOST)
    with pytest.raises(ValueError, match="lower"):
        hybridla.solve(a, b, assume_a="sym", lower="yes", **HOST)
    with pytest.raises(ValueError, match="rows"):
        hybridla.solve(a, np.ones(4), assume_a="banded", **HOST)
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.solve(a, np.array([1.0, np.nan, 0.0]), assume_a="diagonal", **HOST)
