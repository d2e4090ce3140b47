"""The refinement loops of the mixed-precision solvers (hybridla/lapack/_refine.py), on the host.

A comes from ``general(n, kappa)``; the preconditioner M^-1 is an LU, computed in single, of A
rounded to single ("single") or to half ("half": a half-precision factorization emulated by
rounding the input). Theory (Carson & Higham): classical refinement converges when kappa u_f is
well below 1; GMRES-IR and GMRES far beyond, as long as the preconditioned matrix is usable.
Every solution is checked again in extended precision, independently of the loop's own residual.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.linalg

from hybridla.lapack._refine import METHODS, HostSpace, _Krylov, _Operators, refine

from _conditioned import general, spd, tall

N = 150


# -- helpers ---------------------------------------------------------------------------

class Counted:
    """A callback that counts its calls and the columns it was given."""

    def __init__(self, f):
        self.f, self.calls, self.columns = f, 0, []

    def __call__(self, X):
        self.calls += 1
        self.columns.append(X.shape[1])
        return self.f(X)


def low_precision_solver(a, low):
    """solve_low from scipy's LU, in single, of A rounded to ``low`` ("single" or "half")."""
    single = np.complex64 if np.iscomplexobj(a) else np.float32
    if low == "half":
        def to_half(x):
            return x.astype(np.float16).astype(np.float32)
        a_low = to_half(a.real) + 1j * to_half(a.imag) if np.iscomplexobj(a) else to_half(a)
    else:
        a_low = a
    factors = scipy.linalg.lu_factor(a_low.astype(single))
    return lambda r: scipy.linalg.lu_solve(factors, r.astype(single)).astype(r.dtype)


def problem(n, kappa, dtype, low, k, rng):
    """(apply_a, solve_low, b, anorm, tol): A X = B with kappa(A) = kappa, the caller's default tol."""
    a = general(n, kappa, dtype, rng)
    b = general(n, 1, dtype, rng)[:, :k].copy(order="F")
    tol = np.sqrt(n) * np.finfo(dtype).eps
    apply_a = Counted(lambda x: a @ x)
    solve_low = Counted(low_precision_solver(a, low))
    return a, apply_a, solve_low, b, float(np.linalg.norm(a, np.inf)), tol


def extended_backward_errors(a, x, b, anorm):
    """Per column ||b - A x||_inf / (anorm ||x||_inf) in long double, whatever the working dtype."""
    ext = np.clongdouble if np.iscomplexobj(a) else np.longdouble
    r = b.astype(ext) - a.astype(ext) @ x.astype(ext)
    rnorm = np.abs(r).max(axis=0).astype(np.float64)
    xnorm = np.abs(x).max(axis=0).astype(np.float64)
    return np.where(rnorm == 0, 0.0, rnorm / (anorm * np.where(xnorm == 0, 1, xnorm)))


def check_counters(res, apply_a, solve_low, method, k_active=1):
    """The reported counters are the calls made; for one column they follow from the loop."""
    assert (res.matvecs, res.solves) == (apply_a.calls, solve_low.calls)
    outer = len(res.residuals) - 1
    if method == "classical":
        assert res.inner_iterations == 0
        assert res.matvecs == res.solves == outer + 1
    elif method in ("gmres", "classical-gmres") and k_active == 1:
        # x_0: one solve and one product; each outer step: one residual; each GMRES step: both
        assert res.solves == 1 + res.inner_iterations
        assert res.matvecs == 1 + outer + res.inner_iterations


# -- convergence where theory says so ----------------------------------------------------

CONVERGES = [
    # (dtype, low precision, kappa) per method: classical needs kappa u_f << 1
    *[("classical",) + case for case in [
        (np.float64, "single", 1e5), (np.complex128, "single", 1e5),
        (np.float64, "half", 1e2), (np.float32, "half", 1e2)]],
    *[(method,) + case for method in ("gmres", "classical-gmres") for case in [
        (np.float64, "single", 1e8), (np.complex128, "single", 1e7),
        (np.float64, "half", 1e4), (np.float32, "half", 1e4)]],
]


@pytest.mark.parametrize("method, dtype, low, kappa", CONVERGES,
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_converges(method, dtype, low, kappa, rng):
    a, apply_a, solve_low, b, anorm, tol = problem(N, kappa, dtype, low, 1, rng)
    b_before = b.copy()
    res = refine(apply_a, solve_low, b, anorm=anorm, method=method, tol=tol)

    assert res.converged and res.iterations >= 0, res
    assert res.x.dtype == b.dtype and res.x.shape == b.shape
    np.testing.assert_array_equal(b, b_before)
    # the history: x_0's backward error first, one entry per outer iteration, the last passing
    assert len(res.residuals) == res.iterations + 1
    x0 = solve_low.f(b.copy())
    r0 = b - a @ x0
    assert res.residuals[0] == pytest.approx(
        np.abs(r0).max() / (anorm * np.abs(x0).max()), rel=1e-3)
    assert res.residuals[-1] <= tol
    assert all(r > tol for r in res.residuals[:-1])
    # independently, in extended precision (the loop's own residual carries rounding of order
    # eps ||A|| ||x||, a fraction of tol = sqrt(n) eps)
    assert extended_backward_errors(a, res.x, b, anorm).max() <= 1.25 * tol
    check_counters(res, apply_a, solve_low, method)
    if method != "classical":
        # GMRES-IR needs only a few outer steps, and restarted GMRES few cycles, at these kappa
        assert 1 <= res.iterations <= 5
        assert res.inner_iterations >= res.iterations
        # cycles end on the Arnoldi estimate (GMRES: the stopping test; GMRES-IR: inner_tol)
        # well before max_inner = 50 iterations
        assert res.inner_iterations < 50 * res.iterations


@pytest.mark.parametrize("inner_tol", [1e-4, 1e-1])
@pytest.mark.parametrize("method, dtype", [("classical-gmres", np.float64),
                                           ("classical-gmres", np.complex128),
                                           ("gmres", np.float64), ("gmres", np.float32)])
def test_residual_from_products(method, dtype, inner_tol):
    """With residual_from_products, each outer iteration's residual is r - (A Z) y from the
    correction's own products: the same corrections as with the direct residual (one apply_a
    fewer per outer iteration), and the solution passes the stopping test recomputed in extended
    precision. inner_tol 1e-1 makes classical-gmres take several outer iterations, each
    residual built on the last one."""
    runs = {}
    for from_products in (False, True):
        a, apply_a, solve_low, b, anorm, tol = problem(N, 1e4, dtype, "half", 2,
                                                       np.random.default_rng(11))
        b[:, 1] *= 1e-3
        runs[from_products] = res = refine(apply_a, solve_low, b, anorm=anorm, method=method,
                                           tol=tol, inner_tol=inner_tol,
                                           residual_from_products=from_products)
        assert res.converged, res
        assert (res.matvecs, res.solves) == (apply_a.calls, solve_low.calls)
        be = extended_backward_errors(a, res.x, b, anorm)
        assert be.max() <= 1.25 * tol, be
        # the loop's last backward error is the solution's, to rounding
        assert res.residuals[-1] == pytest.approx(be.max(), rel=0.5)
    direct, derived = runs[False], runs[True]
    assert derived.iterations == direct.iterations >= 1
    if method == "classical-gmres" and inner_tol == 1e-1:
        assert derived.iterations >= 2
    assert derived.inner_iterations == direct.inner_iterations
    assert derived.matvecs == direct.matvecs - derived.iterations
    assert derived.residuals[0] == direct.residuals[0]
    np.testing.assert_allclose(derived.residuals[1:], direct.residuals[1:], rtol=0.5)


@pytest.mark.parametrize("method", ["classical", "classical-gmres"])
def test_fails_beyond_theory(method, rng):
    """Half-like factors at kappa 1e8: kappa u_f ~ 1e5, refinement cannot converge."""
    a, apply_a, solve_low, b, anorm, tol = problem(N, 1e8, np.float64, "half", 1, rng)
    res = refine(apply_a, solve_low, b, anorm=anorm, method=method, tol=tol, max_iter=30)
    assert not res.converged
    assert res.iterations in (-1, -30)
    h = res.residuals
    assert h[-1] > tol
    # divergence ends the loop at the first backward error above x_0's
    assert all(e <= h[0] for e in h[1:-1]), h
    if res.iterations == -1 and len(h) > 1 and h[-1] <= h[0]:
        assert h[-1] > h[-2] / 2 and h[-2] > h[-3] / 2, h
    check_counters(res, apply_a, solve_low, method)


def test_gmres_runs_to_max_iter(rng):
    """Restarted GMRES has no early stop: a hopeless preconditioner uses up max_iter cycles."""
    a, apply_a, solve_low, b, anorm, tol = problem(N, 1e8, np.float64, "half", 1, rng)
    res = refine(apply_a, solve_low, b, anorm=anorm, method="gmres", tol=tol, max_iter=3,
                 max_inner=20)
    assert (res.iterations, res.converged) == (-3, False)
    assert len(res.residuals) == 4
    assert res.inner_iterations == 3 * 20
    check_counters(res, apply_a, solve_low, "gmres")


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_classical_gmres_correction_stops_where_the_test_passes(dtype, rng):
    """A correction of classical-gmres goes no further than the stopping test asks: with an
    inner_tol far below that, it ends where "gmres" ends its cycle (the estimate says x + d
    passes) and one correction is enough."""
    results = {}
    for method, inner_tol in (("gmres", 1e-4), ("classical-gmres", 1e-14)):
        a, apply_a, solve_low, b, anorm, tol = problem(N, 1e4, dtype, "half", 1,
                                                       np.random.default_rng(7))
        results[method] = refine(apply_a, solve_low, b, anorm=anorm, method=method, tol=tol,
                                 inner_tol=inner_tol, max_inner=50)
    gmres, classical = results["gmres"], results["classical-gmres"]
    assert classical.iterations == gmres.iterations == 1
    assert 1 < classical.inner_iterations == gmres.inner_iterations < 50


def test_classical_stops_when_stagnating(rng):
    """An unattainable tol: classical refinement reaches its floor, stalls twice, and gives up."""
    a, apply_a, solve_low, b, anorm, tol = problem(N, 10, np.float64, "single", 1, rng)
    res = refine(apply_a, solve_low, b, anorm=anorm, method="classical", tol=1e-3 * tol,
                 max_iter=30)
    assert (res.iterations, res.converged) == (-1, False)
    h = res.residuals
    # it stops at the first second non-halving in a row, not later
    stalls = [i for i in range(2, len(h)) if h[i] > h[i - 1] / 2 and h[i - 1] > h[i - 2] / 2]
    assert stalls and stalls[0] == len(h) - 1, h
    assert len(h) < 12


@pytest.mark.parametrize("method", ["classical", "gmres", "classical-gmres"])
def test_max_iter_one(method, rng):
    a, apply_a, solve_low, b, anorm, tol = problem(N, 1e6, np.float64, "half", 1, rng)
    res = refine(apply_a, solve_low, b, anorm=anorm, method=method, tol=tol, max_iter=1,
                 max_inner=5)
    assert (res.iterations, res.converged) == (-1, False)
    assert len(res.residuals) <= 2
    assert res.inner_iterations <= 5


# -- "none" ------------------------------------------------------------------------------

def test_none_passes_with_working_precision_factors(rng):
    """float32 working, single factors: x_0 is a working-precision solve and passes."""
    a, apply_a, solve_low, b, anorm, tol = problem(N, 1e2, np.float32, "single", 2, rng)
    res = refine(apply_a, solve_low, b, anorm=anorm, method="none", tol=tol)
    assert (res.iterations, res.converged) == (0, True)
    assert (res.matvecs, res.solves, res.inner_iterations) == (1, 1, 0)
    assert len(res.residuals) == 1 and res.residuals[0] <= tol


def test_none_fails_with_low_precision_factors(rng):
    a, apply_a, solve_low, b, anorm, tol = problem(N, 1e2, np.float64, "single", 1, rng)
    res = refine(apply_a, solve_low, b, anorm=anorm, method="none", tol=tol)
    assert (res.iterations, res.converged) == (-1, False)
    np.testing.assert_array_equal(res.x, solve_low.f(b))
    assert res.residuals[0] > tol


# -- several right-hand sides, odd inputs ------------------------------------------------------

@pytest.mark.parametrize("method", ["classical", "gmres", "classical-gmres"])
def test_several_rhs_with_zero_column(method, rng):
    a, apply_a, solve_low, b, anorm, tol = problem(N, 1e4, np.complex128, "single", 3, rng)
    b[:, 1] = 0
    b[:, 2] *= 1e-3  # a column of another scale converges on its own terms
    res = refine(apply_a, solve_low, b, anorm=anorm, method=method, tol=tol)
    assert res.converged, res
    assert np.all(res.x[:, 1] == 0)
    be = extended_backward_errors(a, res.x, b, anorm)
    assert np.all(be <= 1.25 * tol), be
    check_counters(res, apply_a, solve_low, method, k_active=2)
    # the zero column is never sent; the others travel together
    assert max(apply_a.columns + solve_low.columns) <= 2
    assert apply_a.columns[0] == solve_low.columns[0] == 2
    if method != "classical":
        # lock step: fewer calls than GMRES iterations of both columns
        assert res.matvecs < 1 + len(res.residuals) - 1 + res.inner_iterations


def test_all_zero_rhs():
    a = np.eye(5)
    res = refine(lambda x: a @ x, lambda r: r.copy(), np.zeros((5, 2)), anorm=1.0,
                 method="classical", tol=1e-14)
    assert (res.iterations, res.converged, res.matvecs, res.solves) == (0, True, 0, 0)
    assert np.all(res.x == 0) and res.residuals == [0.0]


def test_one_dimensional_b(rng):
    a, apply_a, solve_low, b, anorm, tol = problem(60, 1e3, np.float64, "single", 1, rng)
    res = refine(apply_a, solve_low, b[:, 0], anorm=anorm, method="classical-gmres", tol=tol)
    assert res.converged and res.x.shape == (60,)
    assert extended_backward_errors(a, res.x[:, None], b, anorm).max() <= 1.25 * tol


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("where", ["solve_low", "apply_a"])
def test_nan_stops(method, where, rng):
    a, apply_a, solve_low, b, anorm, tol = problem(40, 1e2, np.float64, "single", 1, rng)
    def poisoned(x):
        y = (a @ x) if where == "apply_a" else solve_low.f(x)
        y[3] = np.nan
        return y
    ops = dict(apply_a=apply_a, solve_low=solve_low)
    ops[where] = poisoned
    res = refine(ops["apply_a"], ops["solve_low"], b, anorm=anorm, method=method, tol=tol)
    assert (res.iterations, res.converged) == (-1, False)
    assert len(res.residuals) == 1


def test_gmres_without_preconditioner_complex_nonnormal(rng):
    """M = I on a complex non-normal matrix: only GMRES's own Krylov minimisation (and its
    complex Givens rotations) can converge, within n iterations."""
    n = 40
    a = (np.eye(n) + np.triu(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)), 1)
         / np.sqrt(n) + 0.3j * np.eye(n))
    b = rng.standard_normal((n, 1)) + 1j * rng.standard_normal((n, 1))
    anorm = float(np.linalg.norm(a, np.inf))
    tol = np.sqrt(n) * np.finfo(np.float64).eps
    res = refine(lambda x: a @ x, lambda r: r.copy(), b, anorm=anorm, method="gmres", tol=tol,
                 max_inner=n)
    assert res.converged and res.iterations <= 2, res
    assert extended_backward_errors(a, res.x, b, anorm).max() <= 1.25 * tol


@pytest.mark.parametrize("method", ["gmres", "classical-gmres"])
@pytest.mark.parametrize("k", [1, 3])
def test_callbacks_returning_their_argument(method, k, rng):
    """The callbacks read views of the Krylov basis. apply_a here is A = I handing back what it
    got (a view of Z = M^-1 V, which Gram-Schmidt would then overwrite, were it not copied), with
    M^-1 = I / 2: one GMRES step gives the exact correction, as with an apply_a that copies."""
    n = 50
    b = rng.standard_normal((n, k))
    tol = np.sqrt(n) * np.finfo(np.float64).eps
    results = [refine(apply_a, lambda r: 0.5 * r, b, anorm=1.0, method=method, tol=tol)
               for apply_a in (lambda x: x, lambda x: x.copy())]
    for result in results:
        assert result.converged and result.iterations == 1, result
        assert np.abs(result.x - b).max() <= tol * np.abs(b).max()
    assert np.array_equal(results[0].x, results[1].x)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_gmres_cycle_minimises_residual(dtype, rng):
    """One cycle of j steps gives the D minimising ||r - A D||_2 over M^-1 K_j(A M^-1, r):
    compared with a least-squares solve over an explicit Krylov basis."""
    n, m = 30, 6
    a = general(n, 10, dtype, rng)
    m_inv = np.linalg.inv(a + 0.02 * general(n, 1, dtype, rng))
    r = general(n, 1, dtype, rng)[:, :2] * np.array([1.0, 1e-4])
    ops = _Operators(lambda x: a @ x, lambda x: m_inv @ x, n, np.dtype(dtype))
    d, _ = _Krylov(HostSpace(ops, n, 2, m, np.dtype(dtype)), 2, m, np.dtype(dtype)).correction(
        ops, r, np.zeros(2))
    assert ops.inner == 2 * m and ops.matvecs == ops.solves == m
    for c in range(2):
        u = [r[:, c]]
        for _ in range(m - 1):
            u.append(a @ (m_inv @ u[-1]))
        z = m_inv @ np.column_stack(u)
        coef = np.linalg.lstsq(a @ z, r[:, c], rcond=None)[0]
        best = np.linalg.norm(r[:, c] - a @ z @ coef)
        got = np.linalg.norm(r[:, c] - a @ d[:, c])
        assert got == pytest.approx(best, rel=1e-6)
        assert got < 0.5 * np.linalg.norm(r[:, c])


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_residual_weights_form_the_residual(dtype, rng):
    """g[j+1] V[:, :j+2] Q^H e_{j+1} is the residual r - A d of the cycle's last step."""
    n, m = 30, 6
    a = general(n, 10, dtype, rng)
    m_inv = np.linalg.inv(a + 0.05 * general(n, 1, dtype, rng))
    r = general(n, 1, dtype, rng)[:, :1]
    ops = _Operators(lambda x: a @ x, lambda x: m_inv @ x, n, np.dtype(dtype))
    krylov = _Krylov(HostSpace(ops, n, 1, m, np.dtype(dtype)), 1, m, np.dtype(dtype))
    d, _ = krylov.correction(ops, r, np.zeros(1))
    q = krylov.residual_weights(0, m - 1)
    formed = krylov.g[0, m] * (krylov.space.V[0, :m + 1].T @ q)
    np.testing.assert_allclose(formed, r[:, 0] - a @ d[:, 0], rtol=0,
                               atol=1e-12 * np.abs(r).max())


def test_cycle_stops_at_the_first_step_passing_in_inf_norm(rng):
    """With `passing`, a cycle ends at the first step whose residual has ||r||_inf <=
    INF_NORM_SHARE passing, even where its 2-norm estimate has not reached stop_at: the
    residuals of every length found by cycles of that many steps."""
    n, m = 60, 12
    a = general(n, 100, np.float64, rng)
    m_inv = np.linalg.inv(a + 0.1 * general(n, 1, np.float64, rng))
    r = general(n, 1, np.float64, rng)[:, :1]

    def cycle(steps, passing=None):
        ops = _Operators(lambda x: a @ x, lambda x: m_inv @ x, n, np.dtype(np.float64))
        krylov = _Krylov(HostSpace(ops, n, 1, steps, np.dtype(np.float64)), 1, steps,
                         np.dtype(np.float64))
        d, _ = krylov.correction(ops, r, np.zeros(1), passing)
        return ops.inner, r[:, 0] - a @ d[:, 0]

    inf_norms = [np.abs(cycle(steps)[1]).max() for steps in range(1, m + 1)]
    two_norms = [np.linalg.norm(cycle(steps)[1]) for steps in range(1, m + 1)]
    share = _Krylov.INF_NORM_SHARE
    target = 4  # stop after 4 steps: the bound halfway between the 4th and the 3rd residual
    bound = np.sqrt(inf_norms[target - 1] * inf_norms[target - 2]) / share
    assert inf_norms[target - 1] <= share * bound < min(inf_norms[:target - 1])
    assert two_norms[target - 1] > share * bound  # the 2-norm alone would go on
    steps, residual = cycle(m, np.array([bound]))
    assert steps == target
    assert np.abs(residual).max() <= share * bound


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_arnoldi_basis_stays_orthonormal(dtype, rng):
    """kappa 1e8 and no preconditioner make the Krylov basis nearly dependent: single-pass
    Gram-Schmidt would lose orthogonality (~1e-9 here); CGS2 keeps it to working precision."""
    n, m = 80, 40
    a = general(n, 1e8, dtype, rng)
    r = general(n, 1, dtype, rng)[:, :1]
    ops = _Operators(lambda x: a @ x, lambda x: x.copy(), n, np.dtype(dtype))
    krylov = _Krylov(HostSpace(ops, n, 1, m, np.dtype(dtype)), 1, m, np.dtype(dtype))
    krylov.correction(ops, r, np.zeros(1))
    assert ops.inner == m
    v = krylov.space.V[0, :m + 1]
    assert np.abs(v.conj() @ v.T - np.eye(m + 1)).max() <= 1e-13


# -- arguments ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [
    ("method", "lu"), ("method", None), ("max_iter", 0), ("max_iter", 2.5), ("max_iter", True),
    ("max_inner", 0), ("inner_tol", 0.0), ("inner_tol", 1.0), ("inner_tol", -1e-3),
    ("tol", 0.0), ("tol", -1.0), ("tol", float("nan")), ("anorm", float("nan")), ("anorm", -1.0),
])
def test_bad_arguments(name, value):
    kwargs = dict(anorm=1.0, method="classical", tol=1e-12)
    kwargs[name] = value
    with pytest.raises(ValueError) as excinfo:
        refine(lambda x: x, lambda x: x, np.ones((4, 1)), **kwargs)
    message = str(excinfo.value)
    assert re.search(rf"\b{name}\b", message), message
    if name == "method":
        assert all(m in message for m in METHODS), message


def test_bad_b():
    with pytest.raises(ValueError, match=r"\bb\b.*int64"):
        refine(lambda x: x, lambda x: x, np.ones((4, 1), dtype=np.int64), anorm=1.0,
               method="classical", tol=1e-12)


def test_callback_wrong_shape():
    with pytest.raises(ValueError, match="solve_low"):
        refine(lambda x: x, lambda x: x[:, 0], np.ones((4, 2)), anorm=1.0, method="classical",
               tol=1e-12)


# -- the generators --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_conditioned_generators(dtype, rng):
    kappa = 1e3
    rtol = 1e-3 if dtype == np.float32 else 1e-8
    a = general(37, kappa, dtype, rng)
    assert a.dtype == dtype and a.flags.f_contiguous
    assert np.linalg.cond(a.astype(np.complex128)) == pytest.approx(kappa, rel=rtol)
    h = spd(37, kappa, dtype, rng)
    np.testing.assert_array_equal(h, h.conj().T)
    w = np.linalg.eigvalsh(h.astype(np.complex128))
    assert w.min() > 0 and w.max() / w.min() == pytest.approx(kappa, rel=rtol)
    t = tall(53, 37, kappa, dtype, rng)
    s = np.linalg.svd(t.astype(np.complex128), compute_uv=False)
    assert t.shape == (53, 37) and s[0] / s[-1] == pytest.approx(kappa, rel=rtol)
    with pytest.raises(ValueError, match="m >= n"):
        tall(3, 4, 10, dtype, rng)
