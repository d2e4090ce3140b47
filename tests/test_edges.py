"""Edge cases of the QR, Hessenberg, least-squares and mixed-precision families (host backend):
empty inputs give scipy's empty results; boolean arguments are scipy's LAPACK flags; every
argument is checked before any work, and a rejected call leaves a and b as they were; a float32 a
meets a float64 b in float64; lstsq_mixed refuses a rank-deficient a as lstsq does; entries near
overflow (or underflow) are scaled as LAPACK's gels scales them. Bounds are in units of the
dtype's eps."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import hybridla
from _conditioned import general, spd, tall

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
EMPTY = [(0, 0), (0, 3), (3, 0)]
MODES = ["full", "r", "economic", "raw"]
HOST = dict(backend="host")


def eps(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps)


def flat(result):
    """The arrays (and other leaves) of a nested result tuple, in order."""
    if isinstance(result, (tuple, list)):
        return [leaf for part in result for leaf in flat(part)]
    return [result]


def assert_same_results(ours, reference):
    """Same structure, and each array the same shape, dtype and values (NaN-free here)."""
    ours, reference = flat(ours), flat(reference)
    assert len(ours) == len(reference)
    for mine, theirs in zip(ours, reference):
        if theirs is None or np.isscalar(theirs) and not isinstance(theirs, np.generic):
            assert mine == theirs
            continue
        mine, theirs = np.asarray(mine), np.asarray(theirs)
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype, (mine, theirs)
        assert np.array_equal(mine, theirs)


def relative_error(x, reference) -> float:
    """max |x - x_ref| / max |x_ref|, formed without overflow for entries near the largest
    float."""
    top = np.abs(reference).max()
    return float(np.abs(x / top - reference / top).max())


def random(shape, dtype, rng):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


# -- 1. empty inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", EMPTY)
@pytest.mark.parametrize("mode", MODES)
def test_empty_qr_ql_lq_as_scipy(shape, mode, dtype):
    a = np.zeros(shape, dtype)
    assert_same_results(hybridla.qr(a, mode=mode, pivoting=False, **HOST),
                        scipy.linalg.qr(a, mode=mode, pivoting=False))
    # QL is QR of the reversed matrix, LQ the conjugate transpose of QR of a^H: scipy has
    # neither, so their empty results are those of scipy's QR turned around
    reversed_qr = flat(scipy.linalg.qr(a[::-1, ::-1], mode=mode))
    assert_same_results(hybridla.ql(a, mode=mode, **HOST),
                        [x[::-1, ::-1] if x.ndim == 2 else x for x in reversed_qr])
    transposed_qr = flat(scipy.linalg.qr(a.conj().T, mode=mode))
    expected = [np.ascontiguousarray(x.conj().T) for x in transposed_qr]
    if mode == "raw":  # ((factors, tau), L): LAPACK's gelqf storage is m x n, tau k
        factors, tau, triangle = expected
        expected = [factors, tau.conj().T, triangle]
    elif mode != "r":
        expected = expected[::-1]  # (L, Q)
    assert_same_results(flat(hybridla.lq(a, mode=mode, **HOST)), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", EMPTY)
def test_empty_householder_drivers(shape, dtype):
    a = np.zeros(shape, dtype)
    (factors, tau), _ = scipy.linalg.qr(a, mode="raw")
    for function in (hybridla.geqrf, hybridla.geqlf, hybridla.gelqf):
        assert_same_results(function(a, **HOST), (factors, tau))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_dtype", ["same", np.float64])
@pytest.mark.parametrize("shape", EMPTY)
@pytest.mark.parametrize("b_columns", [None, 2, 0], ids=["b1d", "b2d", "b0cols"])
def test_empty_lstsq_as_scipy(shape, b_columns, b_dtype, dtype, rng):
    """x, residues, rank and s as scipy.linalg.lstsq's (s: its empty array)."""
    a = np.zeros(shape, dtype)
    b_dtype = dtype if b_dtype == "same" else b_dtype
    b = random((shape[0],) if b_columns is None else (shape[0], b_columns), b_dtype, rng)
    assert_same_results(hybridla.lstsq(a, b, **HOST), scipy.linalg.lstsq(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_lstsq_b_without_columns(dtype):
    """A b with no columns for a nonempty a: no solution to compute (scipy's gelsd rejects
    it; the natural result is x n x 0, no residues, the rank of a)."""
    a = np.eye(4, 3, dtype=dtype) + np.eye(4, 3, -1, dtype=dtype)
    for a_, m in ((a, 4), (a.T.copy(), 3)):
        x, residues, rank, _ = hybridla.lstsq(a_, np.zeros((m, 0), dtype), **HOST)
        assert x.shape == (a_.shape[1], 0) and x.dtype == dtype
        assert residues.shape == (0,) and rank == 3


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_hessenberg_and_gehrd(dtype):
    a = np.zeros((0, 0), dtype)
    assert_same_results(hybridla.hessenberg(a, **HOST), scipy.linalg.hessenberg(a))
    assert_same_results(hybridla.hessenberg(a, calc_q=True, **HOST),
                        scipy.linalg.hessenberg(a, calc_q=True))
    # scipy's dgehrd refuses n = 0; LAPACK's answer is no factors and no scalars
    assert_same_results(hybridla.gehrd(a, **HOST),
                        (np.zeros((0, 0), dtype), np.zeros(0, dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_mixed_solvers(dtype):
    """solve_mixed as scipy.linalg.solve, lstsq_mixed as scipy.linalg.lstsq's x."""
    a = np.zeros((0, 0), dtype)
    for b in (np.zeros(0, dtype), np.zeros((0, 2), dtype), np.zeros((0, 0), dtype)):
        x, info = hybridla.solve_mixed(a, b, **HOST)
        assert_same_results(x, scipy.linalg.solve(a, b))
        assert info.converged and not info.fell_back
        x, info = hybridla.lstsq_mixed(a, b, **HOST)
        assert_same_results(x, scipy.linalg.lstsq(a, b)[0])
    b = np.ones(3, dtype)
    x, _ = hybridla.lstsq_mixed(np.zeros((3, 0), dtype), b, **HOST)
    assert_same_results(x, scipy.linalg.lstsq(np.zeros((3, 0), dtype), b)[0])


# -- 2. boolean flags -----------------------------------------------------------------------------
def _square(n=4):
    return np.asfortranarray(np.eye(n) * 4 + np.ones((n, n)))


FLAGS = [
    (hybridla.qr, "overwrite_a"), (hybridla.qr, "pivoting"), (hybridla.ql, "overwrite_a"),
    (hybridla.lq, "overwrite_a"), (hybridla.geqrf, "overwrite_a"),
    (hybridla.geqlf, "overwrite_a"), (hybridla.gelqf, "overwrite_a"),
    (hybridla.hessenberg, "calc_q"), (hybridla.hessenberg, "overwrite_a"),
    (hybridla.gehrd, "overwrite_a"),
    (hybridla.lstsq, "overwrite_a"), (hybridla.lstsq, "overwrite_b"),
    (hybridla.solve_mixed, "lower"), (hybridla.solve_mixed, "overwrite_a"),
    (hybridla.solve_mixed, "overwrite_b"), (hybridla.solve_mixed, "fallback"),
    (hybridla.solve_mixed, "equilibrate"),
    (hybridla.lstsq_mixed, "fallback"), (hybridla.lstsq_mixed, "equilibrate"),
]
_TAKES_B = (hybridla.lstsq, hybridla.solve_mixed, hybridla.lstsq_mixed)


@pytest.mark.parametrize("function, flag", FLAGS,
                         ids=[f"{f.__name__}-{flag}" for f, flag in FLAGS])
@pytest.mark.parametrize("n", [4, 2, 0])
@pytest.mark.parametrize("value", ["yes", "False", 2, None, 0.5])
def test_flags_are_scipys(function, flag, n, value):
    """A boolean argument is True, False, 0 or 1: anything else raises ValueError naming it,
    before any work and whatever the size, and leaves a and b as they were."""
    if value is None and flag == "equilibrate":
        pytest.skip("equilibrate=None takes configuration mixed.equilibrate")
    a, b = _square(n), np.arange(1.0, n + 1)
    a0, b0 = a.copy(), b.copy()
    args = (a, b) if function in _TAKES_B else (a,)
    with pytest.raises(ValueError, match=flag):
        function(*args, **{flag: value}, **HOST)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    for accepted in (True, False, 0, 1, np.bool_(True)):
        function(*(x.copy() for x in args), **{flag: accepted}, **HOST)


@pytest.mark.parametrize("check_finite", [0, 1, "", "yes", [], [1]])
def test_check_finite_stays_truthy(check_finite):
    """check_finite is taken for its truth, as scipy takes it (no flag check)."""
    a, b = _square(), np.ones(4)
    hybridla.qr(a, check_finite=check_finite, **HOST)
    hybridla.hessenberg(a, check_finite=check_finite, **HOST)
    hybridla.lstsq(a, b, check_finite=check_finite, **HOST)
    hybridla.solve_mixed(a, b, check_finite=check_finite, **HOST)
    if check_finite:
        a[0, 0] = np.nan
        with pytest.raises(ValueError, match="infs or NaNs"):
            hybridla.qr(a, check_finite=check_finite, **HOST)


# -- 3. every argument checked before any work ----------------------------------------------------
def _bad_calls():
    """(name, call(a, b), error type, message pattern): calls with one bad argument each, on
    arrays the call may overwrite."""
    ow = dict(overwrite_a=True, **HOST)
    return [
        ("hessenberg nb=0 n=2", lambda a, b: hybridla.hessenberg(a[:2, :2], nb=0, **ow),
         ValueError, "nb"),
        ("hessenberg nb=0 n=1", lambda a, b: hybridla.hessenberg(a[:1, :1], nb=0, **ow),
         ValueError, "nb"),
        ("hessenberg nb=0 n=0", lambda a, b: hybridla.hessenberg(a[:0, :0], nb=0, **ow),
         ValueError, "nb"),
        ("hessenberg nb='x' n=2", lambda a, b: hybridla.hessenberg(a[:2, :2], nb="x", **ow),
         ValueError, "nb"),
        ("hessenberg stats", lambda a, b: hybridla.hessenberg(a, stats="x", **ow),
         ValueError, "stats"),
        ("hessenberg non-square", lambda a, b: hybridla.hessenberg(a[:, :3], **ow),
         ValueError, r"\ba\b"),
        ("gehrd lo", lambda a, b: hybridla.gehrd(a, lo=7, **ow), ValueError, "lo"),
        ("gehrd nb", lambda a, b: hybridla.gehrd(a, nb=-1, **ow), ValueError, "nb"),
        ("qr mode", lambda a, b: hybridla.qr(a, mode="thin", **ow), ValueError, "mode"),
        ("qr lwork", lambda a, b: hybridla.qr(a, lwork="big", **ow), ValueError, "lwork"),
        ("qr nb", lambda a, b: hybridla.qr(a, nb=0, **ow), ValueError, "nb"),
        ("ql panel", lambda a, b: hybridla.ql(a, panel="tpu", **ow), ValueError, "panel"),
        ("lq lookahead", lambda a, b: hybridla.lq(a, lookahead=-1, **ow), ValueError,
         "lookahead"),
        ("lstsq cond str", lambda a, b: hybridla.lstsq(a, b, cond="x", overwrite_b=True, **ow),
         ValueError, "cond"),
        ("lstsq cond<0", lambda a, b: hybridla.lstsq(a, b, cond=-1.0, overwrite_b=True, **ow),
         ValueError, "cond"),
        ("lstsq driver", lambda a, b: hybridla.lstsq(a, b, lapack_driver="gelsd", **ow),
         ValueError, "lapack_driver"),
        ("lstsq b rows", lambda a, b: hybridla.lstsq(a, b[:3], overwrite_b=True, **ow),
         ValueError, r"\bb\b.*\ba\b"),
        ("lstsq nb", lambda a, b: hybridla.lstsq(a, b, nb=0, overwrite_b=True, **ow),
         ValueError, "nb"),
        ("solve_mixed lowest", lambda a, b: hybridla.solve_mixed(a, b, lowest="fp8", **ow),
         ValueError, "lowest"),
        ("solve_mixed tol", lambda a, b: hybridla.solve_mixed(a, b, tol="small", **ow),
         ValueError, "tol"),
        ("solve_mixed inner_tol", lambda a, b: hybridla.solve_mixed(a, b, inner_tol="x", **ow),
         ValueError, "inner_tol"),
        ("solve_mixed max_iter", lambda a, b: hybridla.solve_mixed(a, b, max_iter=0, **ow),
         ValueError, "max_iter"),
        ("solve_mixed nb", lambda a, b: hybridla.solve_mixed(a, b, nb=0, **ow),
         ValueError, "nb"),
        ("solve_mixed assume_a", lambda a, b: hybridla.solve_mixed(a, b, assume_a="sym", **ow),
         ValueError, "assume_a"),
        ("solve_mixed b rows", lambda a, b: hybridla.solve_mixed(a, b[:3], **ow),
         ValueError, r"\bb\b.*\ba\b"),
        ("lstsq_mixed refinement",
         lambda a, b: hybridla.lstsq_mixed(a, b, refinement="newton", **HOST),
         ValueError, "refinement"),
        ("lstsq_mixed wide", lambda a, b: hybridla.lstsq_mixed(a[:3], b[:3], **HOST),
         ValueError, r"\ba\b"),
    ]


@pytest.mark.parametrize("case", _bad_calls(), ids=[case[0] for case in _bad_calls()])
def test_rejected_calls_touch_nothing(case):
    """A bad argument is reported before anything is factored or written: a and b (which
    overwrite_a, overwrite_b would let the call overwrite) stay bit-identical; the message
    names the caller's argument."""
    _, call, error, pattern = case
    a = np.asfortranarray(np.eye(5) * 5 + np.arange(25.0).reshape(5, 5) / 25)
    b = np.asfortranarray(np.arange(1.0, 6.0))
    a0, b0 = a.tobytes(), b.tobytes()
    with pytest.raises(error, match=pattern):
        call(a, b)
    assert a.tobytes() == a0 and b.tobytes() == b0


def test_hessenberg_checks_q_plan_before_reducing():
    """The plan of forming Q (configuration "qr.*") is checked before gehrd overwrites a."""
    a = np.asfortranarray(np.arange(36.0).reshape(6, 6) + 6 * np.eye(6))
    a0 = a.tobytes()
    with hybridla.config.set({"qr.nb": 0}), pytest.raises(ValueError, match="nb"):
        hybridla.hessenberg(a, calc_q=True, overwrite_a=True, **HOST)
    assert a.tobytes() == a0


# -- the results of overwrite_a paths are clean ---------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_overwrite_a_results_are_clean(dtype, rng):
    """With overwrite_a the factors may go into a, but the results are scipy's: R and L
    triangular (trapezoidal), H zero below its first subdiagonal."""
    n = 7
    for mode in ("full", "r", "economic"):
        for function, lower in ((hybridla.qr, False), (hybridla.ql, True), (hybridla.lq, True)):
            a = np.asfortranarray(random((n, n), dtype, rng))
            result = function(a, mode=mode, overwrite_a=True, **HOST)
            t = result[0] if function is hybridla.lq else result[-1]
            assert np.array_equal(t, np.tril(t) if lower else np.triu(t))
    a = np.asfortranarray(random((n, n), dtype, rng))
    h, _ = hybridla.hessenberg(a, calc_q=True, overwrite_a=True, **HOST)
    assert not np.tril(h, -2).any()
    h = hybridla.hessenberg(np.asfortranarray(random((n, n), dtype, rng)), overwrite_a=True,
                            **HOST)
    assert not np.tril(h, -2).any()


# -- 4. a float32 a meets a float64 b in float64 --------------------------------------------------
PAIRS = [(np.float32, np.float64), (np.complex64, np.complex128), (np.float32, np.complex128)]


@pytest.mark.parametrize("a_dtype, b_dtype", PAIRS)
def test_float32_a_float64_b_in_float64(a_dtype, b_dtype, rng):
    """lstsq, lstsq_mixed and solve_mixed solve in the common precision (scipy's): x of that
    dtype and accurate to its eps times the condition number, where a float32 solve would be
    some 1e9 times less accurate. The reference is float64 LAPACK on the same (float32) a."""
    common = np.result_type(a_dtype, b_dtype)
    kappa = 100.0
    m, n = 20, 8
    a = tall(m, n, kappa, a_dtype, rng)
    wide_a = a.astype(common)
    x_true = random(n, b_dtype, rng)
    b = (wide_a @ x_true).astype(b_dtype)  # consistent: the forward error is kappa eps
    reference = np.linalg.lstsq(wide_a, b, rcond=None)[0]
    x = hybridla.lstsq(a, b, **HOST)[0]
    assert x.dtype == common
    assert relative_error(x, reference) <= 10 * m * kappa * eps(common)
    x, info = hybridla.lstsq_mixed(a, b, **HOST)
    assert x.dtype == common and info.converged
    # the normal equations' test: kappa^2 eps (lapack/gels_mixed.py)
    assert relative_error(x, reference) <= 10 * m * kappa ** 2 * eps(common)
    for assume_a, matrix in (("gen", general(n, kappa, a_dtype, rng)),
                             ("pos", spd(n, kappa, a_dtype, rng))):
        b = (matrix.astype(common) @ x_true).astype(b_dtype)
        reference = np.linalg.solve(matrix.astype(common), b)
        x, info = hybridla.solve_mixed(matrix, b, assume_a=assume_a, **HOST)
        assert x.dtype == common and info.converged
        assert relative_error(x, reference) <= 10 * n * kappa * eps(common)
        # the fallback solves in the common precision too
        x, info = hybridla.solve_mixed(matrix, b, assume_a=assume_a, refinement="none",
                                       lowest="tf32", **HOST)
        assert info.fell_back and x.dtype == common
        assert relative_error(x, reference) <= 10 * n * kappa * eps(common)


# -- 5. lstsq_mixed and rank deficiency -----------------------------------------------------------
def _rank_deficient(dtype, rng):
    """40 x 10 of rank 5."""
    return np.asfortranarray(random((40, 5), dtype, rng) @ random((5, 10), dtype, rng))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("matrix", ["ones", "rank 5"])
@pytest.mark.parametrize("lowest, nb", [(None, None), ("single", 4), ("half", 4)])
def test_lstsq_mixed_rank_deficient_does_what_lstsq_does(matrix, lowest, nb, dtype, rng):
    """A rank-deficient a made lstsq_mixed report convergence with x of size 1e7 (one of the
    singular normal equations' many solutions). Now R's diagonal test sends it where lstsq
    sends it: with fallback, lstsq's answer (on the host, its rank-revealing gelsy solve), as
    code -3 without."""
    if lowest == "half" and np.dtype(dtype).kind == "c":
        lowest = "tf32"  # no complex half GEMM
    a = np.ones((6, 3), dtype) if matrix == "ones" else _rank_deficient(dtype, rng)
    b = random(a.shape[0], dtype, rng)
    options = dict(lowest=lowest, nb=nb, **HOST)
    x, _, rank, _ = hybridla.lstsq(a, b, **HOST)
    assert rank == (1 if matrix == "ones" else 5)
    x_mixed, info = hybridla.lstsq_mixed(a, b, **options)
    assert info.fell_back
    np.testing.assert_array_equal(x_mixed, x)
    with pytest.raises(hybridla.LinAlgError, match="rank deficient") as caught:
        hybridla.lstsq_mixed(a, b, fallback=False, **options)
    assert caught.value.info.iterations == -3 and not caught.value.info.fell_back


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstsq_mixed_full_rank_still_refines(dtype, rng):
    """The rank test leaves well-conditioned matrices to the refinement (no fallback)."""
    for kappa in (1.0, 1e2):
        a = tall(60, 12, kappa, dtype, rng)
        b = random(60, dtype, rng)
        x, info = hybridla.lstsq_mixed(a, b, nb=4, **HOST)
        assert info.converged and not info.fell_back, info
        reference = np.linalg.lstsq(a.astype(np.complex128 if np.dtype(dtype).kind == "c"
                                              else np.float64), b, rcond=None)[0]
        assert relative_error(x, reference) <= 60 * kappa ** 2 * eps(dtype)


# -- 6. entries near overflow (and underflow) -----------------------------------------------------
def _near_limit(m, n, dtype, rng, low=0.1, high=1.0, scale=None):
    """Entries of modulus between low and high times `scale` (default: a half of the largest
    float of dtype), random signs (phases)."""
    scale = float(np.finfo(np.dtype(dtype)).max) / 2 if scale is None else scale
    modulus = rng.uniform(low, high, (m, n))
    if np.dtype(dtype).kind == "c":
        phase = np.exp(2j * np.pi * rng.uniform(size=(m, n)))
    else:
        phase = rng.choice([-1.0, 1.0], (m, n))
    return np.asfortranarray((modulus * phase * scale).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where", ["near overflow", "near underflow"])
@pytest.mark.parametrize("nb", [None, 2])
def test_lstsq_scales_as_gels(where, nb, dtype, rng):
    """8 x 5 (and its 5 x 8 transpose) with entries ~1e307..1e308 (float32: 1e37..1e38), or
    tiny ones: full rank, and lstsq's x agrees with scipy.linalg.lstsq's (gelsd, which scales
    too) to the condition number times eps. Before, QR's updates overflowed: "rank deficient",
    or NaN with nb=2."""
    scale = None if where == "near overflow" else float(np.finfo(np.dtype(dtype)).tiny) * 1e4
    a = _near_limit(8, 5, dtype, rng, scale=scale)
    kappa = np.linalg.cond(a / np.abs(a).max())
    for matrix in (a, np.asfortranarray(a.T)):
        m = matrix.shape[0]
        for b in (_near_limit(m, 2, dtype, rng, scale=scale), random(m, dtype, rng)):
            if where == "near underflow" and b.ndim == 1:
                continue  # x would overflow
            x, _, rank, _ = hybridla.lstsq(matrix, b, nb=nb, **HOST)
            assert rank == 5
            reference = scipy.linalg.lstsq(matrix, b)[0]
            assert np.all(np.isfinite(x))
            assert relative_error(x, reference) <= 30 * 8 * kappa * eps(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where", ["near overflow", "near underflow"])
def test_lstsq_mixed_out_of_range_falls_back(where, dtype, rng):
    """The normal equations square a's magnitude: a matrix near overflow (its norms' product
    inf) or near underflow (0: x came back 0, "converged") is code -2, lstsq's answer with
    fallback, LinAlgError without."""
    scale = None if where == "near overflow" else float(np.finfo(np.dtype(dtype)).tiny) * 1e4
    a = _near_limit(8, 5, dtype, rng, scale=scale)
    b = _near_limit(8, 1, dtype, rng, scale=scale)[:, 0]
    x, info = hybridla.lstsq_mixed(a, b, **HOST)
    assert info.iterations == -2 and info.fell_back
    assert np.array_equal(x, hybridla.lstsq(a, b, **HOST)[0])
    with pytest.raises(hybridla.LinAlgError, match="range") as caught:
        hybridla.lstsq_mixed(a, b, fallback=False, **HOST)
    assert caught.value.info.iterations == -2


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstsq_mixed_rhs_far_from_a(dtype, rng):
    """A right-hand side far below (or above) a's magnitude: the normal equations' a^H b would
    underflow (x = 0, "converged"); scaled by a power of two first, it does not."""
    tiny = float(np.finfo(np.dtype(dtype)).tiny)
    a = tall(12, 5, 10.0, dtype, rng) * (tiny ** 0.3)
    x_true = random(5, dtype, rng) * (tiny ** 0.4)
    b = a @ x_true  # ~ tiny^0.7: a^H b ~ tiny^1.0, at the edge of underflow
    x, info = hybridla.lstsq_mixed(a, b, **HOST)
    assert info.converged
    assert relative_error(x, x_true) <= 30 * 12 * 100 * eps(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_solve_mixed_near_overflow(assume_a, dtype, rng):
    """A well-conditioned matrix scaled to ~1e307 (float32 ~1e37) with ||a||_inf finite: the
    low-precision solves no longer lose the scaled vectors (they underflowed float32); it
    converges to the working precision's accuracy."""
    n, kappa = 8, 10.0
    unit = (general if assume_a == "gen" else spd)(n, kappa, dtype, rng)
    scale = float(np.finfo(np.dtype(dtype)).max) / (4 * np.abs(unit).sum(axis=1).max())
    a = np.asfortranarray(unit * np.asarray(scale, dtype=unit.real.dtype))
    x_true = random(n, dtype, rng)
    b = (unit @ x_true) * np.asarray(scale * 1e-8, dtype=unit.real.dtype)  # x = 1e-8 x_true
    reference = np.linalg.solve(unit.astype(np.complex128), (unit @ x_true).astype(
        np.complex128)) * 1e-8
    x, info = hybridla.solve_mixed(a, b, assume_a=assume_a, lower=True, **HOST)
    assert info.converged and not info.fell_back, info
    assert relative_error(x, reference) <= 10 * n * kappa * eps(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_mixed_norm_overflow(dtype, rng):
    """||a||_inf itself overflows (a dense first row near the largest float; every column sum
    stays below it). float64: the refinement could not be tested (before: ValueError "anorm
    must be finite"); with fallback the answer is hybridla.solve's, without it a LinAlgError
    saying why. float32: its norms are formed in float64, where they are finite; the answer
    is accurate, from the refinement or the fallback."""
    n = 6
    big = float(np.finfo(np.dtype(dtype)).max)
    real = np.finfo(np.dtype(dtype)).dtype
    unit = np.eye(n) * 0.5
    unit[0, 1:] = 0.35  # row 0 sums to 2.25; every column sum to at most 0.85
    a = np.asfortranarray((unit * big).astype(dtype))
    x_true = random(n, dtype, rng)
    b = ((unit @ x_true) * (big / 8)).astype(dtype)  # x = x_true / 8
    reference = x_true.astype(np.complex128) / 8
    x, info = hybridla.solve_mixed(a, b, **HOST)
    kappa = np.linalg.cond(unit, 1)
    assert relative_error(x, reference) <= 10 * n * kappa * eps(dtype)
    if real == np.float32:
        return
    assert info.iterations == -2 and info.fell_back
    assert np.array_equal(x, hybridla.solve(a, b, **HOST))
    with pytest.raises(hybridla.LinAlgError, match="not finite") as caught:
        hybridla.solve_mixed(a, b, fallback=False, **HOST)
    assert caught.value.info.iterations == -2


def test_cho_solve_takes_lower_as_newer_scipy_returns_it():
    """scipy 1.17's cho_factor on some builds returns `lower` as a 0-d array (seen on the GPU
    machine): cho_solve takes it as its value, as scipy's own cho_solve does; a 1-d array
    stays an error for a 2-D factor."""
    a = _square() @ _square().T + 4 * np.eye(4)
    c, _ = hybridla.cho_factor(a, lower=True, **HOST)
    b = np.arange(1.0, 5.0)
    x = hybridla.cho_solve((c, np.array(True)), b, **HOST)
    np.testing.assert_allclose(a @ x, b)
    with pytest.raises(ValueError, match="lower"):
        hybridla.cho_solve((c, np.array([True, False])), b, **HOST)
