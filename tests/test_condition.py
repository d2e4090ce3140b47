"""gecon / pocon (hybridla/lapack/gecon.py): reciprocal condition numbers from LU and Cholesky
factors, on the host backend.

- the LAPACK path (the host backend's default) is scipy's own gecon / pocon on the same array;
- the Hager-Higham estimator (a device backend's path; here forced with estimate=True, its
  products two triangular solves on a workspace column of the factors' store) follows LAPACK xLACN2 step by step,
  and its estimate of ||A^-1|| is a lower bound within a factor of 3 of the true value;
- LAPACK 3.12's conventions: n = 0 -> 1, anorm 0 or inf -> 0, NaN -> NaN, singular -> 0.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _conditioned import general, spd
from scipy.linalg import LinAlgError, LinAlgWarning, get_lapack_funcs, solve_triangular

import hybridla
from hybridla.backend import get_backend
from hybridla.backend.host import HostBackend
from hybridla.lapack import gecon, pocon
from hybridla.lapack.gecon import ITMAX, _estimate, norm1

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
OPS = get_backend("host")
KINDS = ["gen-1", "gen-I", "pos-L", "pos-U"]  # gecon with norm "1" / "I"; pocon with uplo


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _factor(a, kind):
    """(the store of a's factors, rcond as a function of (anorm, estimate), ||a|| in that norm)."""
    if kind.startswith("gen"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LinAlgWarning)  # exactly singular: U(i, i) = 0
            lu, piv = hybridla.lu_factor(a, backend="host")
        F, norm = OPS.wrap(np.asfortranarray(lu), piv), kind[-1]
        return F, lambda anorm, est=None: gecon(OPS, F, anorm, norm, estimate=est), \
            np.linalg.norm(a, 1 if norm == "1" else np.inf)
    uplo = kind[-1]
    c, _ = hybridla.cho_factor(a, lower=uplo == "L", backend="host")
    F = OPS.wrap(np.asfortranarray(c))
    return F, lambda anorm, est=None: pocon(OPS, F, anorm, uplo, estimate=est), \
        np.linalg.norm(a, 1)


def _matrix(kind, n, kappa, dtype, rng):
    if n == 1:  # a 1 x 1 matrix has condition number 1
        a = np.full((1, 1), 2.5, dtype=dtype)
        return a if kind.startswith("pos") else -a
    return general(n, kappa, dtype, rng) if kind.startswith("gen") else spd(n, kappa, dtype, rng)


# -- the LAPACK path ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 37, 100])
def test_host_backend_is_lapack(dtype, kind, n, rng):
    a = _matrix(kind, n, 1e3, dtype, rng)
    F, rcond, anorm = _factor(a, kind)
    if kind.startswith("gen"):
        expected, info = get_lapack_funcs(("gecon",), dtype=dtype)[0](F.a, anorm, norm=kind[-1])
    else:
        expected, info = get_lapack_funcs(("pocon",), dtype=dtype)[0](F.a, anorm, uplo=kind[-1])
    assert info == 0
    assert rcond(anorm) == expected  # the same routine on the same array: bit for bit
    assert isinstance(rcond(anorm), float)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm1(dtype, rng):
    a = general(23, 10.0, dtype, rng)[:, :17]
    assert norm1(a) == pytest.approx(np.linalg.norm(a, 1), rel=10 * _eps(dtype))
    assert norm1(np.ascontiguousarray(a)) == pytest.approx(norm1(a), rel=10 * _eps(dtype))
    assert norm1(np.zeros((0, 0), dtype)) == 0.0


# -- the estimator --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kappa", [1e2, 1e6, 1e12])
@pytest.mark.parametrize("n", [1, 2, 37, 100])
@pytest.mark.parametrize("kind", KINDS)
def test_estimate_is_a_lower_bound_within_3(dtype, kappa, n, kind, rng):
    a = _matrix(kind, n, kappa, dtype, rng)
    if n > 1 and kappa * _eps(dtype) >= 1:  # singular to working precision: the estimate must say so
        try:
            _, rcond, anorm = _factor(a, kind)
        except LinAlgError:  # not positive definite in float32 any more: nothing to estimate
            assert kind.startswith("pos")
            return
        assert rcond(anorm, True) < _eps(dtype)
        return
    _, rcond, anorm = _factor(a, kind)
    estimate = rcond(anorm, True)
    true = 1 / np.linalg.cond(a.astype(np.complex128), 1 if kind != "gen-I" else np.inf)
    # ||A^-1|| estimate <= ||A^-1||, up to the factors' and solves' rounding (about kappa eps)
    assert estimate >= true / (1 + kappa * _eps(dtype) + 10 * n * _eps(dtype))
    assert estimate <= 3 * true


def _lapack_operator(F, kind):
    """LAPACK gecon's / pocon's own operator (its products without getrs' row interchanges:
    U^-1 L^-1 = A^-1 P^T, whose 1-norm is ||A^-1||_1), in float64 / complex128."""
    a = F.a.astype(np.complex128 if np.iscomplexobj(F.a) else np.float64)
    if kind == "gen":
        def solve(x, trans):
            if trans == "N":
                y = solve_triangular(a, x, lower=True, unit_diagonal=True)
                return solve_triangular(a, y, lower=False)
            y = solve_triangular(a, x, lower=False, trans="C")
            return solve_triangular(a, y, lower=True, unit_diagonal=True, trans="C")
        return solve
    lower = kind == "pos-L"
    first, second = ("N", "C") if lower else ("C", "N")
    return lambda x, trans: solve_triangular(
        a, solve_triangular(a, x, lower=lower, trans=first), lower=lower, trans=second)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("n", [2, 3, 37, 100])
@pytest.mark.parametrize("kind", ["gen", "pos-L", "pos-U"])
def test_estimator_is_lapacks_lacn2(dtype, n, kind, rng):
    """With LAPACK's own operator, _estimate retraces xLACN2: the same estimate (to rounding)."""
    a = _matrix("gen-1" if kind == "gen" else kind, n, 1e4, dtype, rng)
    F, rcond, anorm = _factor(a, "gen-1" if kind == "gen" else kind)
    calls = []

    def solve(x, trans):
        calls.append(trans)
        return _lapack_operator(F, kind)(x, trans)
    ours = _estimate(solve, n, dtype)
    assert ours == pytest.approx(1 / (rcond(anorm) * anorm), rel=1e-9)
    # at most ITMAX iterations: x0, then e_j and its sign vector each time, and b at the end
    assert len(calls) <= 2 * ITMAX and calls[0] == "N" and calls[-1] == "N"


def test_estimate_of_a_diagonal_is_exact():
    d = np.array([3.0, -0.5, 2.0, 1e-3, 7.0])
    assert _estimate(lambda x, trans: x / d, 5, np.float64) == pytest.approx(1e3)


# -- singular matrices and LAPACK's conventions ----------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimate", [False, True])
def test_singular(dtype, estimate, rng):
    a = general(30, 10.0, dtype, rng)
    a[:, 7] = 0  # exactly singular: U(7, 7) = 0
    _, rcond, anorm = _factor(a, "gen-1")
    assert rcond(anorm, estimate) == 0.0
    b = general(30, 1e30, np.float64, rng).astype(dtype)  # singular to working precision
    _, rcond, anorm = _factor(b, "gen-1")
    assert rcond(anorm, estimate) < _eps(dtype)
    c = np.tril(general(30, 10.0, dtype, rng))  # a Cholesky factor with a zero on its diagonal
    c[11, 11] = 0
    C = OPS.wrap(np.asfortranarray(c))
    assert pocon(OPS, C, 1.0, "L", estimate=estimate) == 0.0


@pytest.mark.parametrize("estimate", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_quick_returns(dtype, estimate, rng):
    empty = OPS.wrap(np.zeros((0, 0), dtype=dtype, order="F"), np.zeros(0, np.int32))
    assert gecon(OPS, empty, 1.0, estimate=estimate) == 1.0  # LAPACK: n = 0 gives 1
    assert pocon(OPS, empty, 0.0, estimate=estimate) == 1.0
    F, rcond, _ = _factor(general(5, 10.0, dtype, rng), "gen-1")
    C, rcond_po, _ = _factor(spd(5, 10.0, dtype, rng), "pos-L")
    for r in (rcond, rcond_po):
        assert r(0.0, estimate) == 0.0
        assert r(math.inf, estimate) == 0.0  # LAPACK 3.12: an infinite anorm gives 0
        assert math.isnan(r(math.nan, estimate))  # and a NaN one propagates
        with pytest.raises(ValueError, match="anorm"):
            r(-1.0, estimate)
    with pytest.raises(ValueError, match="norm"):
        gecon(OPS, F, 1.0, "F", estimate=estimate)
    with pytest.raises(ValueError, match="uplo"):
        pocon(OPS, C, 1.0, "X", estimate=estimate)


# -- the device path's plumbing, on a host backend that says it has a device -------------------------
class _PretendDevice(HostBackend):
    """The host's operations with has_device = True, checking the calls the cuda backend's
    from_host / to_host would refuse, and that the vector's store is closed."""
    has_device = True

    def __init__(self):
        super().__init__()
        self.copies, self.stores = [], []

    def from_host(self, lane, x, B):
        assert x.shape == B.shape and x.flags.f_contiguous and lane.name == "gpu:update"
        self.copies.append("up")
        super().from_host(lane, x, B)

    def to_host(self, lane, B, out=None):
        assert lane.name == "gpu:update"
        self.copies.append("down")
        return super().to_host(lane, B, out)

    def wrap(self, a, pivots=None, tau=None):
        store = super().wrap(a, pivots, tau)
        if pivots is None:
            closed = []
            store.close = lambda: closed.append(True)
            self.stores.append(closed)
        return store


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_device_backend_runs_the_estimator(kind, dtype, rng):
    a = _matrix(kind, 40, 1e3, dtype, rng)
    F, rcond, anorm = _factor(a, kind)
    device = _PretendDevice()
    if kind.startswith("gen"):
        F = device.wrap(F.a, F.pivots)
        ours = gecon(device, F, anorm, kind[-1])
    else:
        ours = pocon(device, F, anorm, kind[-1])
    assert ours == pytest.approx(rcond(anorm, True), rel=10 * _eps(dtype))
    assert 4 <= len(device.copies) <= 4 * ITMAX
    assert device.copies == ["up", "down"] * (len(device.copies) // 2)
    assert device.stores == []  # no store of its own: a workspace column of the factors'
