"""Checks of the LAWN 41 flop counts in perf/flops.py."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "perf" / "flops.py"
_spec = importlib.util.spec_from_file_location("hybridla_perf_flops", _PATH)
flops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(flops)


def test_getrf_small_exact():
    # LAWN 41, m = n: muls n^3/3 + 2n/3, adds n^3/3 - n^2/2 + n/6.
    # n = 1: 1 mul (the pivot reciprocal), 0 adds.
    assert flops.fmuls_getrf(1, 1) == pytest.approx(1.0)
    assert flops.fadds_getrf(1, 1) == pytest.approx(0.0, abs=1e-12)
    # n = 3: muls 9 + 2 = 11, adds 9 - 4.5 + 0.5 = 5.
    assert flops.getrf_flops(3, 3, np.float64) == pytest.approx(16.0)
    # Total for a square real matrix is 2/3 n^3 - n^2/2 + 5n/6.
    n = 1000
    assert flops.getrf_flops(n, n, np.float64) == pytest.approx(
        2 * n**3 / 3 - n**2 / 2 + 5 * n / 6, rel=1e-14)


@pytest.mark.parametrize("n", [16384, 32768, 49152])
def test_getrf_leading_term(n):
    assert flops.getrf_flops(n, n, np.float64) == pytest.approx(2 * n**3 / 3, rel=1e-3)
    assert flops.getrf_flops(n, n, np.float32) == flops.getrf_flops(n, n, np.float64)


def test_getrf_rectangular():
    # m >= n: m n^2 - n^3/3 - n^2/2 + 5n/6 (real).
    m, n = 3000, 1000
    assert flops.getrf_flops(m, n) == pytest.approx(m * n**2 - n**3 / 3 - n**2 / 2 + 5 * n / 6)
    # the m < n branch is the m >= n one with the roles swapped, up to lower-order terms
    assert flops.getrf_flops(n, m) == pytest.approx(flops.getrf_flops(m, n), rel=2e-3)


@pytest.mark.parametrize("cdt, rdt", [(np.complex128, np.float64), (np.complex64, np.float32)])
def test_complex_is_about_four_times_real(cdt, rdt):
    n = 20000
    for f in (lambda d: flops.getrf_flops(n, n, d), lambda d: flops.potrf_flops(n, d),
              lambda d: flops.geqrf_flops(n, n, d), lambda d: flops.gehrd_flops(n, d),
              lambda d: flops.getrs_flops(n, 100, d)):
        assert f(cdt) / f(rdt) == pytest.approx(4.0, rel=1e-3)
    # exactly 6 muls + 2 adds
    assert flops.getrf_flops(n, n, cdt) == pytest.approx(
        6 * flops.fmuls_getrf(n, n) + 2 * flops.fadds_getrf(n, n))


def test_other_routines_leading_terms():
    n = 30000
    assert flops.potrf_flops(n) == pytest.approx(n**3 / 3, rel=1e-3)
    assert flops.geqrf_flops(n, n) == pytest.approx(4 * n**3 / 3, rel=1e-3)
    assert flops.gehrd_flops(n) == pytest.approx(10 * n**3 / 3, rel=1e-3)
    assert flops.getrs_flops(n, 7) == pytest.approx(2 * n**2 * 7, rel=1e-3)
    # exact lower-order terms
    assert flops.potrf_flops(10) == pytest.approx(1000 / 3 + 50 + 10 / 6)
    assert flops.getrs_flops(10, 3) == pytest.approx(2 * 100 * 3 - 10 * 3)
    assert flops.gehrd_flops(10) == pytest.approx(10000 / 3 - 50 - 110 / 6 - 21)
    # geqrf: both branches agree at m == n, tall: 2 m n^2 - 2/3 n^3 + lower order
    assert flops.fmuls_geqrf(500, 500) == pytest.approx(flops.fmuls_geqrf(500.0 + 1e-9, 500))
    m, nn = 40000, 2000
    assert flops.geqrf_flops(m, nn) == pytest.approx(2 * m * nn**2 - 2 * nn**3 / 3, rel=1e-3)


def test_geqlf_and_gelqf():
    # LAWN 41 counts QL as QR and LQ as RQ: the same leading terms as geqrf.
    n = 10
    assert flops.geqlf_flops(n, n) == flops.geqrf_flops(n, n)
    assert flops.geqrf_flops(n, n) == pytest.approx(4 * n**3 / 3 + 2 * n**2 + 14 * n / 3)
    assert flops.gelqf_flops(n, n) == pytest.approx(4 * n**3 / 3 + 2 * n**2 + 17 * n / 3)
    assert flops.fmuls_gelqf(500, 500) == pytest.approx(flops.fmuls_gelqf(500.0 + 1e-9, 500))
    assert flops.fadds_gelqf(500, 500) == pytest.approx(flops.fadds_gelqf(500.0 + 1e-9, 500))
    m, nn = 40000, 2000
    for f in (flops.geqlf_flops, flops.gelqf_flops):
        assert f(m, nn) == pytest.approx(2 * m * nn**2 - 2 * nn**3 / 3, rel=1e-3)
        assert f(nn, m) == pytest.approx(2 * m * nn**2 - 2 * nn**3 / 3, rel=1e-3)
        assert f(3000, 3000, np.complex128) / f(3000, 3000) == pytest.approx(4.0, rel=1e-3)
