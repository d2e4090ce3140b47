"""The options of the solvers that change what is solved or where the answer goes, each checked
for its effect (an option that is silently ignored must fail here): lu_solve's trans (0, 1, 2 and
"N", "T", "C"), solve's transposed, lstsq's cond, and overwrite_b (False never modifies b; True
lets lu_solve and cho_solve solve in b itself). Host backend; all four dtypes; accuracy in LAPACK's
units: solve_backward_error ||b - op(A) x||_1 / (||A||_1 ||x||_1 n eps) < 30 and scipy's answer as
the reference within kappa n eps (forward_error_ratio < 30).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import hybridla
from _lapack_checks import (DTYPES, eps_of, forward_error_ratio, least_squares_ratio,
                            potrf_ratio, random_matrix, random_orthogonal,
                            solve_backward_error, wide)

THRESH = 30.0
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
HOST = dict(backend="host")


def general(n, dtype, rng):
    """A random nonsymmetric n x n matrix (A^T, A^H and A all differ), column-major."""
    return np.asfortranarray(random_matrix(n, n, dtype, rng))


def hpd(n, dtype, rng):
    x = wide(random_matrix(n, n, dtype, rng))
    a = x @ x.conj().T + n * np.eye(n)
    return np.asfortranarray(((a + a.conj().T) / 2).astype(dtype))


def rhs(n, nrhs, dtype, rng, order="F"):
    b = random_matrix(n, 1 if nrhs is None else nrhs, dtype, rng)
    b = b[:, 0] if nrhs is None else b
    return np.array(b, order=order)


def cond(a):
    return float(np.linalg.cond(wide(a)))


# -- lu_solve(trans) ---------------------------------------------------------------------------

OP = {0: "N", 1: "T", 2: "C", "N": "N", "T": "T", "C": "C"}


def op(a, trans):
    return {"N": a, "T": a.T, "C": a.conj().T}[OP[trans]]


@pytest.mark.parametrize("nrhs", [None, 3], ids=["b1d", "b2d"])
@pytest.mark.parametrize("trans", [0, 1, 2, "N", "T", "C"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_solve_trans_solves_the_transposed_system(dtype, trans, nrhs, rng):
    """trans 1 / "T" solves A^T x = b, 2 / "C" A^H x = b (A^T x = b for real A), 0 / "N" A x = b,
    for every spelling of trans: LAPACK's backward error for op(A) < 30, and scipy's lu_solve with
    the same trans within kappa n eps. A random nonsymmetric A, so that op(A) x = b holds for
    one op only (checked: the other ops' backward errors are far above the threshold)."""
    n = 47
    a = general(n, dtype, rng)
    b = rhs(n, nrhs, dtype, rng)
    lu_piv = hybridla.lu_factor(a, **HOST, nb=16)
    x = hybridla.lu_solve(lu_piv, b, trans=trans, **HOST)
    assert x.shape == b.shape and x.dtype == np.dtype(dtype)
    assert solve_backward_error(op(a, trans), x, b, dtype) < THRESH
    scipy_trans = {"N": 0, "T": 1, "C": 2}[OP[trans]]
    x_ref = scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), b, trans=scipy_trans)
    assert forward_error_ratio(x, x_ref, cond(a), dtype) < THRESH
    real = np.dtype(dtype).kind == "f"  # A^T == A^H: "T" and "C" are the same system
    others = [o for o in "NTC" if o != OP[trans] and not (real and {o, OP[trans]} == {"T", "C"})]
    for other in others:  # a solution of op(A) x = b is not one of the other systems
        assert solve_backward_error(op(a, other), x, b, dtype) > 100 * THRESH, other


# -- solve(transposed) -------------------------------------------------------------------------

@pytest.mark.parametrize("nrhs", [None, 2], ids=["b1d", "b2d"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_solve_transposed_solves_a_transpose_x_equals_b(dtype, nrhs, rng):
    """transposed=True solves a^T x = b (scipy's meaning; scipy itself refuses complex a, for
    which the answer is checked against scipy's solve of a.T), False a x = b."""
    n = 53
    a = general(n, dtype, rng)
    b = rhs(n, nrhs, dtype, rng)
    x = hybridla.solve(a, b, transposed=True, **HOST, nb=16)
    assert x.shape == b.shape and x.dtype == np.dtype(dtype)
    assert solve_backward_error(a.T, x, b, dtype) < THRESH
    assert solve_backward_error(a, x, b, dtype) > 100 * THRESH  # not a x = b
    x_ref = scipy.linalg.solve(np.ascontiguousarray(a.T), b)
    assert forward_error_ratio(x, x_ref, cond(a), dtype) < THRESH
    x = hybridla.solve(a, b, transposed=False, **HOST, nb=16)
    assert solve_backward_error(a, x, b, dtype) < THRESH


@pytest.mark.parametrize("dtype", [
    np.float32, np.float64, np.complex64, np.complex128,
], ids=DTYPE_IDS)
def test_solve_pos_transposed_solves_a_transpose_or_refuses(dtype, rng):
    """assume_a="pos" with transposed=True: a^T x = b, which for real symmetric a is a x = b but
    for complex Hermitian a is conj(a) x = b. Either that system is solved, or the call is
    refused as scipy refuses it (NotImplementedError / ValueError); never a x = b silently."""
    n = 40
    a = hpd(n, dtype, rng)
    b = rhs(n, None, dtype, rng)
    try:
        x = hybridla.solve(a, b, assume_a="pos", transposed=True, **HOST, nb=16)
    except (NotImplementedError, ValueError) as exc:
        assert not isinstance(exc, scipy.linalg.LinAlgError)
        return
    assert solve_backward_error(a.T, x, b, dtype) < THRESH


# -- lstsq(cond) -------------------------------------------------------------------------------

def graded(m, n, smallest, dtype, rng):
    """m x n with orthogonal columns (m >= n) or rows (m < n) of 2-norm 1 but the last, of 2-norm
    `smallest`: its QR's |R(i, i)| (LQ's |L(i, i)|) are those norms, to rounding (about
    max(m, n) eps absolute)."""
    k = min(m, n)
    u = random_orthogonal(max(m, n), k, dtype, rng)
    a = u * np.r_[np.ones(k - 1), smallest]
    return np.asfortranarray((a if m >= n else a.conj().T).astype(dtype))


@pytest.mark.parametrize("shape", [(60, 20), (20, 60)], ids=["tall", "wide"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_cond_is_the_rank_threshold(dtype, shape, rng):
    """lstsq's documented test: gelsy (host) when some |T(i, i)| <= cond max_j |T(j, j)|, with
    cond's default max(m, n) eps. The matrix's |T(k, k)| / max is 1e3 eps, the others 1: the default
    and cond = 1e2 eps solve (LAPACK's least-squares ratios < 30), cond = 1e4 eps raises naming
    T(k, k), and a matrix of ratio 2 eps that the default rejects is solved with cond = 0."""
    m, n = shape
    k = min(m, n)
    eps = eps_of(dtype)
    a = graded(m, n, 1e3 * eps, dtype, rng)
    b = rhs(m, 2, dtype, rng)
    saved = b.copy()
    for c in (None, 1e2 * eps):
        x, _, rank, _ = hybridla.lstsq(a, b, cond=c, **HOST, nb=8)
        assert rank == k and x.shape == (n, 2)
        if m >= n:
            assert least_squares_ratio(a, x, b, dtype) < THRESH
        else:
            assert solve_backward_error(a, x, b, dtype) < THRESH
    # a host a that fails the test is solved by gelsy (pivoted QR), cond its rcond: rank k - 1
    x, residues, rank, _ = hybridla.lstsq(a, b, cond=1e4 * eps, **HOST, nb=8)
    assert rank == k - 1 and residues.size == 0 and np.all(np.isfinite(x))
    np.testing.assert_array_equal(b, saved)
    # the other way: below the default threshold, accepted with cond = 0 (no |T(i, i)| is 0)
    a = graded(m, n, 2 * eps, dtype, rng)
    assert hybridla.lstsq(a, b, **HOST, nb=8)[2] == k - 1  # gelsy's rank
    x, _, rank, _ = hybridla.lstsq(a, b, cond=0, **HOST, nb=8)
    assert rank == k and x.shape == (n, 2) and np.all(np.isfinite(x))


# -- overwrite_b -------------------------------------------------------------------------------

def _solvers(n, dtype, rng):
    """name -> f(b, overwrite_b) for the host solves that take overwrite_b, and the matrix each
    solves with."""
    a, s = general(n, dtype, rng), hpd(n, dtype, rng)
    lu_piv = hybridla.lu_factor(a, **HOST, nb=16)
    c_low = hybridla.cho_factor(s, lower=True, **HOST, nb=16)
    c_up = hybridla.cho_factor(s, lower=False, **HOST, nb=16)
    tall = np.asfortranarray(random_matrix(n, n - 9, dtype, rng))
    return {
        "lu_solve": (a, lambda b, ow: hybridla.lu_solve(lu_piv, b, overwrite_b=ow, **HOST)),
        "lu_solve-T": (a.T, lambda b, ow: hybridla.lu_solve(lu_piv, b, trans=1, overwrite_b=ow,
                                                            **HOST)),
        "cho_solve-lower": (s, lambda b, ow: hybridla.cho_solve(c_low, b, overwrite_b=ow,
                                                                **HOST)),
        "cho_solve-upper": (s, lambda b, ow: hybridla.cho_solve(c_up, b, overwrite_b=ow, **HOST)),
        "solve": (a, lambda b, ow: hybridla.solve(a, b, overwrite_b=ow, **HOST, nb=16)),
        "solve-pos": (s, lambda b, ow: hybridla.solve(s, b, assume_a="pos", overwrite_b=ow,
                                                      **HOST, nb=16)),
        "lstsq": (tall, lambda b, ow: hybridla.lstsq(tall, b, overwrite_b=ow, **HOST, nb=8)[0]),
    }


SOLVERS = ["lu_solve", "lu_solve-T", "cho_solve-lower", "cho_solve-upper", "solve", "solve-pos",
           "lstsq"]


@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("nrhs", [None, 3], ids=["b1d", "b2d"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_overwrite_b_false_never_modifies_b(dtype, nrhs, order, rng):
    """overwrite_b=False (scipy's one guarantee about b): b keeps its contents, even where b is
    F-ordered in the working dtype and could hold the solution; x is a new array."""
    n = 41
    solvers = _solvers(n, dtype, rng)
    for name in SOLVERS:
        a, solve = solvers[name]
        b = rhs(n, nrhs, dtype, rng, order=order)
        saved = b.copy(order="K")
        x = solve(b, False)
        assert b.tobytes() == saved.tobytes(), f"{name}(overwrite_b=False) modified b"
        assert b.flags.f_contiguous == saved.flags.f_contiguous
        assert not np.shares_memory(x, b), name
        if name == "lstsq":
            assert least_squares_ratio(a, x, b, dtype) < THRESH
        else:
            assert solve_backward_error(a, x, b, dtype) < THRESH, name
    a, _ = solvers["lu_solve"]
    b = rhs(n, nrhs, dtype, rng, order="F")
    saved = b.copy()
    hybridla.lu_solve(hybridla.lu_factor(a, **HOST), b, **HOST)  # the default is False
    assert b.tobytes() == saved.tobytes()


@pytest.mark.parametrize("nrhs", [None, 1, 3], ids=["b1d", "b2d_1col", "b2d"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_overwrite_b_true_solves_in_b(dtype, nrhs, rng):
    """overwrite_b=True with an F-contiguous, writeable b of the working dtype: lu_solve and
    cho_solve solve in b itself (as LAPACK's getrs / potrs do; scipy's lu_solve and cho_solve
    do too): x shares b's memory, b holds the solution, which is LAPACK-accurate."""
    n = 41
    solvers = _solvers(n, dtype, rng)
    for name in ("lu_solve", "lu_solve-T", "cho_solve-lower", "cho_solve-upper"):
        a, solve = solvers[name]
        b = rhs(n, nrhs, dtype, rng, order="F")
        saved = b.copy()
        x = solve(b, True)
        assert x.shape == b.shape and x.dtype == b.dtype
        assert np.shares_memory(x, b), f"{name}(overwrite_b=True) made a copy of b"
        np.testing.assert_array_equal(b, x)
        assert solve_backward_error(a, x, saved, dtype) < THRESH, name


def test_overwrite_b_true_copies_what_it_cannot_use(rng):
    """overwrite_b=True with a b that cannot hold the solution (C-ordered with several columns,
    another dtype, read-only): a correct answer in a new array, b's memory not reused."""
    n = 41
    solvers = _solvers(n, np.float64, rng)
    a, solve = solvers["lu_solve"]
    cases = [rhs(n, 3, np.float64, rng, order="C"), rhs(n, 3, np.float32, rng, order="F")]
    readonly = rhs(n, 3, np.float64, rng, order="F")
    readonly.flags.writeable = False
    cases.append(readonly)
    for b in cases:
        saved = b.copy(order="K")
        x = solve(b, True)
        assert not np.shares_memory(x, b)
        assert x.dtype == np.float64
        assert solve_backward_error(a, x, saved, np.float64) < THRESH
    np.testing.assert_array_equal(readonly, saved)


def test_cholesky_factors_used_above_are_accurate(rng):
    """The factors the overwrite_b tests solve with (a sanity check of the fixture)."""
    s = hpd(41, np.complex128, rng)
    for lower in (True, False):
        c, _ = hybridla.cho_factor(s, lower=lower, **HOST, nb=16)
        assert potrf_ratio(s, c, lower) < THRESH
