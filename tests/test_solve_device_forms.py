"""solve's structured forms on device arrays (issue 29 item 4): assume_a "sym", "her", "upper
triangular", "lower triangular", "diagonal", "tridiagonal", "banded" (hybridla/_solve_device.py,
lapack/sytrf.py, trtrs.py, larscl2.py, backend/cuda_ldl.py).

GPU (``-m cuda``): every form, all four dtypes, lower and upper, transposed or not, b 1-D or with
1 or 3 columns, against scipy.linalg.solve as tests/test_solve_forms.py checks the host path (x
within kappa n eps of scipy's, backward error < 30 on the matrix the form stands for; a complex
transposed system against scipy's general solve of a^T); n = 37, and 613 for "sym" / "her" (the
triangle mirrored in blocks of 512); an exactly singular matrix (a singular D for "sym", a zero
diagonal entry for the triangular forms) raising "Matrix is singular." as the host path does;
LinAlgWarning as the host path; the estimates against LAPACK's; inputs left as they were, every
device-array kind, row-major layouts, overwrite_b, empty and 1 x 1 systems.

Host (no GPU): cuda_ldl.py itself against emulated cuBLAS / cuSOLVER (tests/_device_emulation.py:
the bindings' signatures, the libraries' documented semantics, pointers checked), and the whole
device path (_solve_device.solve_form, the drivers, cuda_ldl) on a host backend standing in for
the cuda one, with the same checks as the GPU tests; solve's dispatch of device arrays.
"""
from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
import scipy.linalg
from _device_emulation import (Lane, PointerBackend, PretendDevice, array_of, block_of,
                               load_cuda_ldl)
from _lapack_checks import (DTYPES, forward_error_ratio, is_on_device, random_matrix,
                            solve_backward_error, to_device, to_host, wide)
from scipy.linalg import LinAlgError, LinAlgWarning, get_lapack_funcs
from test_solve_forms import THRESH, structured

import hybridla
from hybridla import _basic
from hybridla._solve_device import solve_form
from hybridla.lapack import lansy, lantr, larscl2, sycon, sytrf, sytrs, trcon, trtrs
from hybridla.lapack.sytrf import symmetrize

DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
FORMS = ("sym", "her", "diagonal", "tridiagonal", "banded", "upper triangular",
         "lower triangular")
N = 37
OPTIONS = dict(nb=None, lookahead=None, panel=None, trace=None)
KIND = "cupy" if importlib.util.find_spec("cupy") else "pycuda"


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _system(form, n, dtype, nrhs, lower, rng):
    a, m = structured(form, n, dtype, lower, rng)
    b = random_matrix(n, 1 if nrhs is None else nrhs, dtype, rng)
    return a, m, (b[:, 0].copy() if nrhs is None else b)


def _check_answer(form, a, m, b, x, lower, transposed):
    """x against scipy's answer (as tests/test_solve_forms.py) and its backward error."""
    assert x.shape == b.shape and x.dtype == b.dtype
    op = m.T if transposed else m
    if transposed and np.dtype(b.dtype).kind == "c":
        ref = scipy.linalg.solve(op, b)  # scipy refuses complex transposed structured solves
    else:
        ref = scipy.linalg.solve(a, b, lower=lower, assume_a=form, transposed=transposed)
    kappa = np.linalg.cond(wide(op), 1)
    assert forward_error_ratio(x, ref, kappa) < THRESH
    assert solve_backward_error(op, x, b) < THRESH


# -- on the GPU ------------------------------------------------------------------------------
def _gpu_solve(a, b, **kwargs):
    x = hybridla.solve(to_device(a, KIND), to_device(b, KIND), backend="cuda", **kwargs)
    assert is_on_device(x, KIND)
    return to_host(x)


@pytest.mark.cuda
@pytest.mark.parametrize("transposed", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("lower", [False, True], ids=["upper", "lower"])
@pytest.mark.parametrize("nrhs", [None, 1, 3], ids=["b1d", "nrhs1", "nrhs3"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_forms_against_scipy(cuda_backend, dtype, form, nrhs, lower, transposed, rng):
    a, m, b = _system(form, N, dtype, nrhs, lower, rng)
    a_dev, b_dev = to_device(a, KIND), to_device(b, KIND)
    x_dev = hybridla.solve(a_dev, b_dev, lower=lower, assume_a=form, transposed=transposed,
                           backend=cuda_backend)
    assert is_on_device(x_dev, KIND)
    np.testing.assert_array_equal(to_host(a_dev), a)  # overwrite_a=False: a as it was
    np.testing.assert_array_equal(to_host(b_dev), b)
    _check_answer(form, a, m, b, to_host(x_dev), lower, transposed)


@pytest.mark.cuda
@pytest.mark.parametrize("lower", [False, True], ids=["upper", "lower"])
@pytest.mark.parametrize("form", ["sym", "her"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_symmetric_mirrored_in_blocks(cuda_backend, dtype, form, lower, rng):
    """n = 613: the other triangle is filled in two blocks of columns (512 + 101)."""
    a, m, b = _system(form, 613, dtype, 2, lower, rng)
    _check_answer(form, a, m, b, _gpu_solve(a, b, lower=lower, assume_a=form), lower, False)


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_singular_raises_as_host(cuda_backend, dtype, form, n):
    a = np.diag([0.0] + [1.0] * (n - 1)).astype(dtype)  # sym: D(1, 1) = 0; triangular: a zero
    b = np.ones(n, dtype)
    with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
        hybridla.solve(a, b, assume_a=form, backend="host")
    with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
        _gpu_solve(a, b, assume_a=form)


@pytest.mark.cuda
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_singular_d_and_zero_diagonal_inside(cuda_backend, dtype, lower, rng):
    """A zero row and column 5 of a symmetric matrix: sytrf meets a zero D(k, k); a zero at
    (5, 5) of a triangular one: trtrs's info. Both raise, as the host path."""
    for form in ("sym", "her", "lower triangular", "upper triangular"):
        a, _, b = _system(form, 12, dtype, 2, lower, rng)
        if form in ("sym", "her"):
            a[5, :] = a[:, 5] = 0
        else:
            a[5, 5] = 0
        with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
            hybridla.solve(a, b, lower=lower, assume_a=form, backend="host")
        with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
            _gpu_solve(a, b, lower=lower, assume_a=form)


@pytest.mark.cuda
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_ill_conditioned_warns_as_host(cuda_backend, dtype, form):
    a = np.diag([1.0] * (N - 1) + [_eps(dtype) / 10]).astype(dtype)
    b = np.ones(N, dtype)
    with pytest.warns(LinAlgWarning, match="Ill-conditioned"):
        _gpu_solve(a, b, assume_a=form)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _gpu_solve(np.diag(np.arange(1.0, N + 1)).astype(dtype), b, assume_a=form)


@pytest.mark.cuda
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gpu_estimates_against_lapack(cuda_backend, dtype, form, rng):
    """rcond from the device path against the host's (LAPACK sycon / hecon / trcon / ...):
    both estimate the same number; "her" is estimated from an LU there (gecon)."""
    a, _, b = _system(form, N, dtype, 2, True, rng)
    canonical = _basic._ASSUME[form]
    ops = hybridla.backend.get_backend("cuda")
    with ops.call():
        _, rcond, _ = solve_form(ops, canonical, to_device(a, KIND), to_device(b, KIND), True,
                                 False, False, False, "cuda", OPTIONS)
    _, expected, _ = _basic._solve_structured(canonical, a, b, True, False, False, False)
    assert expected / 3 <= rcond <= 3 * expected


@pytest.mark.cuda
@pytest.mark.parametrize("form", ["sym", "her", "lower triangular", "diagonal", "banded"])
def test_gpu_device_kinds_layouts_and_overwrite(device_kind, form, rng):
    a, m, b = _system(form, 20, np.complex128, 3, True, rng)
    # row-major a and b (C order on the device): the column-major copies the backend makes
    a_dev = to_device(a, device_kind)
    b_c = to_device(np.ascontiguousarray(b), device_kind)
    if device_kind == "cupy":
        import cupy
        a_dev, b_c = cupy.ascontiguousarray(a_dev), cupy.ascontiguousarray(b_c)
    elif device_kind == "torch":
        a_dev, b_c = a_dev.contiguous(), b_c.contiguous()
    x = hybridla.solve(a_dev, b_c, lower=True, assume_a=form)
    assert is_on_device(x, device_kind)
    _check_answer(form, a, m, b, to_host(x), True, False)
    # overwrite_b with a column-major b: x is b
    b_dev = to_device(b, device_kind)
    x = hybridla.solve(to_device(a, device_kind), b_dev, lower=True, assume_a=form,
                       overwrite_b=True)
    _check_answer(form, a, m, b, to_host(b_dev), True, False)
    _check_answer(form, a, m, b, to_host(x), True, False)
    # overwrite_a: a may hold anything afterwards, the answer is the same
    x = hybridla.solve(to_device(a, device_kind), to_device(b, device_kind), lower=True,
                       assume_a=form, overwrite_a=True)
    _check_answer(form, a, m, b, to_host(x), True, False)


@pytest.mark.cuda
@pytest.mark.parametrize("form", FORMS)
def test_gpu_empty_and_scalar(cuda_backend, form):
    if KIND == "cupy":  # (a PyCUDA GPUArray of no elements has no device pointer to offer)
        # check_finite=False: the finiteness kernel is not for empty device arrays
        x = _gpu_solve(np.eye(2), np.empty((2, 0)), assume_a=form, check_finite=False)
        assert x.shape == (2, 0) and x.dtype == np.float64
        x = _gpu_solve(np.zeros((0, 0), np.float32), np.zeros(0, np.float32), assume_a=form,
                       check_finite=False)
        assert x.shape == (0,) and x.dtype == np.float32
    np.testing.assert_allclose(_gpu_solve(np.array([[2.0]]), np.array([3.0]), assume_a=form),
                               [1.5])


# -- cuda_ldl.py against emulated cuBLAS / cuSOLVER (no GPU) -------------------------------------
@pytest.fixture
def cuda_ldl(monkeypatch):
    return load_cuda_ldl(monkeypatch)


def _garbage_other_triangle(n, dtype, rng):
    return np.asfortranarray(random_matrix(n, n, dtype, rng))


@pytest.mark.parametrize("n", [1, 2, 511, 512, 513, 1100])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("conjugate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
def test_mirror_triangle_emulated(cuda_ldl, n, uplo, conjugate, dtype, rng):
    a = _garbage_other_triangle(n, dtype, rng)
    padded = np.zeros((n + 5, n), dtype, order="F")  # a leading dimension above n
    padded[:n] = a
    k = min(n, cuda_ldl.MIRROR_BLOCK)
    scratch = np.zeros((k, k), dtype, order="F")
    cuda_ldl.mirror_triangle(PointerBackend(), Lane(), uplo, block_of(padded[:n]),
                             block_of(scratch), conjugate)
    t = np.tril(a) if uplo == "L" else np.triu(a)
    other = t.conj().T if conjugate else t.T
    np.testing.assert_array_equal(padded[:n], t + other - np.diag(np.diagonal(other)))
    np.testing.assert_array_equal(padded[n:], 0)  # nothing written below the matrix


def test_real_diagonal_transpose_diagonals_and_scale_rows_emulated(cuda_ldl, rng):
    ops = PointerBackend()
    a = np.asfortranarray(random_matrix(9, 9, np.complex64, rng))
    padded = np.zeros((12, 9), np.complex64, order="F")
    padded[:9] = a
    cuda_ldl.real_diagonal(ops, Lane(), block_of(padded[:9]))
    np.testing.assert_array_equal(padded[:9], a - 1j * np.diag(np.diagonal(a).imag))
    for k in (-2, -1, 0, 1, 3):
        np.testing.assert_array_equal(array_of(cuda_ldl.diagonal(block_of(padded[:9]), k))[0],
                                      np.diagonal(padded[:9], k))
    t = np.zeros((9, 7), np.complex64, order="F")
    cuda_ldl.transpose(ops, Lane(), block_of(padded[:7, :9]), block_of(t))
    np.testing.assert_array_equal(t, padded[:7, :9].T)
    r = np.arange(1, 10, dtype=np.complex64)[:, None]
    b = np.asfortranarray(random_matrix(9, 4, np.complex64, rng))
    out = np.zeros((9, 4), np.complex64, order="F")
    cuda_ldl.scale_rows(ops, Lane(), block_of(np.asfortranarray(r)), block_of(b), block_of(out))
    np.testing.assert_array_equal(out, r * b)
    with pytest.raises(AssertionError, match="in place"):
        cuda_ldl.scale_rows(ops, Lane(), block_of(np.asfortranarray(r)), block_of(b), block_of(b))


# -- the drivers on a host backend standing in for the cuda one (no GPU) -------------------------
@pytest.fixture
def pretend(cuda_ldl):
    return PretendDevice(cuda_ldl)


def _pretend_solve(ops, form, a, b, lower=False, transposed=False, overwrite_a=False,
                   overwrite_b=False):
    """solve's device branch (_basic.solve after validation) on the pretend device."""
    x, rcond, warn_below = solve_form(ops, _basic._ASSUME[form], a, b, lower, transposed,
                                      overwrite_a, overwrite_b, "host", OPTIONS)
    _basic._check_condition(rcond, a, True, warn_below)
    return x


@pytest.mark.parametrize("transposed", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("lower", [False, True], ids=["upper", "lower"])
@pytest.mark.parametrize("nrhs", [None, 1, 3], ids=["b1d", "nrhs1", "nrhs3"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_path_against_scipy(pretend, dtype, form, nrhs, lower, transposed, rng):
    a, m, b = _system(form, N, dtype, nrhs, lower, rng)
    a0, b0 = a.copy(), b.copy()
    x = _pretend_solve(pretend, form, a, b, lower, transposed)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    _check_answer(form, a, m, b, x, lower, transposed)


@pytest.mark.parametrize("lower", [False, True], ids=["upper", "lower"])
@pytest.mark.parametrize("form", ["sym", "her"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_path_mirrors_in_blocks(pretend, dtype, form, lower, rng):
    a, m, b = _system(form, 613, dtype, 2, lower, rng)
    _check_answer(form, a, m, b, _pretend_solve(pretend, form, a, b, lower), lower, False)


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_path_singular_raises(pretend, dtype, form, n):
    a = np.asfortranarray(np.diag([0.0] + [1.0] * (n - 1)).astype(dtype))
    with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
        _pretend_solve(pretend, form, a, np.ones(n, dtype))


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_path_singular_inside(pretend, dtype, lower, rng):
    for form in ("sym", "her", "lower triangular", "upper triangular"):
        a, _, b = _system(form, 12, dtype, 2, lower, rng)
        if form in ("sym", "her"):
            a[5, :] = a[:, 5] = 0
        else:
            a[5, 5] = 0
        b0 = b.copy(order="F")
        with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
            _pretend_solve(pretend, form, a, b, lower, overwrite_b=True)
        np.testing.assert_array_equal(b, b0)  # nothing solved into b


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_path_warns_as_host(pretend, dtype, form):
    a = np.diag([1.0] * (N - 1) + [_eps(dtype) / 10]).astype(dtype, order="F")
    with pytest.warns(LinAlgWarning, match="Ill-conditioned"):
        _pretend_solve(pretend, form, a, np.ones(N, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _pretend_solve(pretend, form, np.diag(np.arange(1.0, N + 1)).astype(dtype, order="F"),
                       np.ones(N, dtype))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_path_estimates_against_lapack(pretend, dtype, form, rng):
    """The emulated sytrf is LAPACK's, so a real "sym" estimate retraces LAPACK's sycon (and
    trcon, the diagonal's, the host-run forms' are LAPACK's own numbers); a complex "sym" takes
    the adjoint conj(A^-1 conj(x)) where csycon applies A^-1 twice, "her" an LU (gecon)."""
    a, _, b = _system(form, N, dtype, 2, True, rng)
    canonical = _basic._ASSUME[form]
    for transposed in (False, True):
        _, rcond, _ = solve_form(pretend, canonical, a, b, True, transposed, False, False, "host",
                                 OPTIONS)
        _, expected, _ = _basic._solve_structured(canonical, a, b, True, transposed, False,
                                                  False)
        if canonical == "her" or (canonical == "sym" and np.dtype(dtype).kind == "c"):
            assert expected / 3 <= rcond <= 3 * expected
        else:
            assert rcond == pytest.approx(expected, rel=1e-5 if dtype in (np.float32,
                                                                          np.complex64) else 1e-9)


@pytest.mark.parametrize("form", ["sym", "her", "diagonal", "banded", "upper triangular"])
def test_device_path_layouts_and_overwrite(pretend, form, rng):
    a, m, b = _system(form, 20, np.complex128, 3, True, rng)
    x = _pretend_solve(pretend, form, np.ascontiguousarray(a), np.ascontiguousarray(b), True)
    _check_answer(form, a, m, b, x, True, False)
    b_f = b.copy(order="F")
    x = _pretend_solve(pretend, form, a.copy(order="F"), b_f, True, overwrite_b=True)
    assert np.shares_memory(x, b_f)
    _check_answer(form, a, m, b, x, True, False)
    b_c = np.array(b, order="C")  # row-major under overwrite_b: x written back into b
    x = _pretend_solve(pretend, form, a.copy(order="F"), b_c, True, overwrite_b=True)
    _check_answer(form, a, m, b, x, True, False)
    if form != "her":  # "her" solves with lu_solve, here the host's (a copy for a C-ordered b)
        _check_answer(form, a, m, b, b_c, True, False)
    a_f = a.copy(order="F")  # overwrite_a: factored in place, same answer
    x = _pretend_solve(pretend, form, a_f, b.copy(), True, overwrite_a=True)
    _check_answer(form, a, m, b, x, True, False)


@pytest.mark.parametrize("form", FORMS)
def test_device_path_empty_and_scalar(pretend, form):
    x = _pretend_solve(pretend, form, np.eye(2), np.empty((2, 0)))
    assert x.shape == (2, 0)
    x = _pretend_solve(pretend, form, np.zeros((0, 0), np.float32), np.zeros(0, np.float32))
    assert x.shape == (0,) and x.dtype == np.float32
    x = _pretend_solve(pretend, form, np.array([[2.0 + 1j]]), np.array([3.0 + 0j]))
    np.testing.assert_allclose(x, [3.0 / (2.0 + 1j)])  # scipy's scalar path, every form


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sytrf_sytrs_lansy_drivers(pretend, dtype, uplo, rng):
    n = 30
    a = _garbage_other_triangle(n, dtype, rng)
    A = pretend.wrap(a.copy(order="F"))
    anorm = lansy(pretend, A, uplo)
    assert anorm == pytest.approx(_basic._symmetric_norm(a, uplo == "L"), rel=10 * _eps(dtype))
    full = np.tril(a) + np.tril(a, -1).T if uplo == "L" else np.triu(a) + np.triu(a, 1).T
    np.testing.assert_array_equal(A.a, full)  # the other triangle filled in
    ipiv, info = sytrf(pretend, A, uplo)
    ldu, expected, status = get_lapack_funcs(("sytrf",), dtype=dtype)[0](full, lower=uplo == "L")
    assert info == status == 0 and ipiv.dtype == np.int32
    np.testing.assert_array_equal(ipiv, expected)
    b = np.asfortranarray(random_matrix(n, 4, dtype, rng))
    B = pretend.wrap(b.copy(order="F"))
    sytrs(pretend, A, B, uplo)
    assert solve_backward_error(full, B.a, b) < THRESH
    code = {"L": 0, "U": 1}[uplo]  # cublasFillMode_t
    assert pretend.ldl.module.cusolverDn.calls == [("sytrf", code), ("xsytrs", code, 4)]
    rcond = sycon(pretend, A, anorm, uplo)
    assert 0 < rcond <= 1


def test_hermitian_symmetrize_makes_the_diagonal_real(pretend, rng):
    a = _garbage_other_triangle(7, np.complex128, rng)
    A = pretend.wrap(a.copy(order="F"))
    symmetrize(pretend, A, "U", hermitian=True)
    t = np.triu(a, 1)
    np.testing.assert_array_equal(A.a, t + t.conj().T + np.diag(np.diagonal(a).real))


@pytest.mark.parametrize("norm", ["1", "I"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_trtrs_lantr_trcon_drivers(pretend, dtype, uplo, norm, rng):
    n = 25
    a = _garbage_other_triangle(n, dtype, rng) + 4 * np.eye(n, dtype=dtype)
    T = pretend.wrap(np.asfortranarray(a))
    anorm = lantr(pretend, T, uplo, norm)
    assert anorm == pytest.approx(get_lapack_funcs(("lantr",), dtype=dtype)[0](norm, a, uplo=uplo),
                                  rel=10 * _eps(dtype))
    expected, info = get_lapack_funcs(("trcon",), dtype=dtype)[0](a, norm=norm, uplo=uplo)
    assert trcon(pretend, T, anorm, uplo, norm) == pytest.approx(expected, rel=1e-4)
    b = np.asfortranarray(random_matrix(n, 2, dtype, rng))
    B = pretend.wrap(b.copy(order="F"))
    assert trtrs(pretend, T, B, uplo, "C") == 0
    t = np.tril(a) if uplo == "L" else np.triu(a)
    assert solve_backward_error(t.conj().T, B.a, b) < THRESH
    a[7, 7] = 0
    B = pretend.wrap(b.copy(order="F"))
    assert trtrs(pretend, pretend.wrap(np.asfortranarray(a)), B, uplo) == 8  # LAPACK's info
    np.testing.assert_array_equal(B.a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_larscl2(pretend, dtype, rng):
    d = (random_matrix(6, 1, dtype, rng)[:, 0] + 3).astype(dtype)
    b = np.asfortranarray(random_matrix(6, 3, dtype, rng))
    B = pretend.wrap(b.copy(order="F"))
    larscl2(pretend, d, B)  # by the reciprocals: one rounding more than the quotient
    np.testing.assert_allclose(B.a, b / d[:, None], rtol=4 * _eps(dtype))
    tiny = np.finfo(dtype).tiny
    for k, divisor in ((2, tiny / 4), (4, 2 / tiny)):  # 1 / d overflows, or is subnormal:
        d[k] = divisor                                  # the quotient is taken on the host
        B = pretend.wrap(b.copy(order="F"))
        with np.errstate(over="ignore"):
            larscl2(pretend, d, B)
            np.testing.assert_array_equal(B.a, b / d[:, None])


# -- solve's dispatch --------------------------------------------------------------------------
class _FakeDeviceArray:
    def __init__(self, dtype=np.float64):
        self.__cuda_array_interface__ = {"shape": (2, 2), "typestr": np.dtype(dtype).str,
                                         "data": (0, False), "version": 3}


@pytest.mark.parametrize("assume_a", ["sym", "symmetric", "her", "hermitian", "diagonal",
                                      "tridiagonal", "banded", "upper triangular",
                                      "lower triangular"])
def test_solve_sends_device_arrays_to_solve_form(monkeypatch, assume_a):
    calls = []
    monkeypatch.setattr(_basic, "_system", lambda a, b, check_finite, backend, ow: (a, b, ow))
    monkeypatch.setattr(_basic, "_device_backend", lambda name, backend: "ops")

    def solve_form_(ops, form, a, b, *args):
        calls.append((ops, form, args))
        return "x", rcond, 1.0
    monkeypatch.setattr(_basic, "solve_form", solve_form_)
    a, b = _FakeDeviceArray(), _FakeDeviceArray()
    rcond = 0.5
    assert _basic.solve(a, b, assume_a=assume_a, lower=True, transposed=True, nb=8) == "x"
    ops, form, args = calls[0]
    assert ops == "ops" and form == _basic._ASSUME[assume_a]
    assert args[:4] == (True, True, False, False) and args[5]["nb"] == 8
    rcond = 1e-20
    with pytest.warns(LinAlgWarning, match="Ill-conditioned"):
        _basic.solve(a, b, assume_a=assume_a)
    rcond = 0.0
    with pytest.raises(LinAlgError, match="^Matrix is singular.$"):
        _basic.solve(a, b, assume_a=assume_a)
    assert set(_basic._DEVICE_FORMS) == set(_basic._ASSUME.values())
