"""solve_mixed and lstsq_mixed with the working-precision matrix kept on the host (issue 31,
item 4; lapack/_mixed.HostResidentMatrix): only the low-precision copy goes where the backend
computes and is factored in core; the refinement's products with A run on the host against
the user's array (lapack/_mixed_operators.HostOperator). The memory budget
(device.memory_budget) is set between what the low-precision copy needs and what it needs
with the working-precision matrix beside it, so that ooc="auto" keeps A on the host; the host
backend keeps to the budget as a device does, so every body runs on the CPU machine too.

Accuracy as test_mixed.py's: MAGMA's and cuSOLVER's stopping test recomputed in double
precision (backward_ratio <= 1), and as many refinement iterations as in core, within 1.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy.linalg import LinAlgError

import hybridla
from hybridla.backend import get_backend
from hybridla.lapack._mixed import (LOW_DTYPE, check_options, rounded_copy,
                                    solve_workspace_bytes)
from hybridla.lapack._mixed_operators import HostOperator, host_product
from hybridla.scheduler.plan import make_plan
from _conditioned import general, spd, tall
from _lapack_checks import (load_perf_script, random_matrix, solve_backward_error,
                            unload_perf_script)
from _mixed_checks import assert_least_squares_accurate, backward_ratio

N, NB = 150, 32  # N not a multiple of NB
DTYPES = [np.float64, np.complex128, np.float32, np.complex64]
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]


def host_budget(backend, m, n, dtype, nb=NB, nrhs=2):
    """A budget where the low-precision copy of an m x n `dtype` matrix (with its workspaces
    and everything an LU's solve of nrhs right-hand sides keeps beside it, at the default
    options: the Cholesky's and the QR's differ by less than the half of A) fits with half
    of the working-precision matrix, but not the whole of it."""
    low = get_backend(backend).required_bytes(m, n, LOW_DTYPE[np.dtype(dtype)], nb)
    lowest = "tf32" if np.dtype(dtype).kind == "c" else "half-x3"
    options = check_options(dtype, lowest, "classical-gmres", None, 30, "auto", 50, True)
    solve = solve_workspace_bytes(m, n, dtype, nb, nrhs, options)
    return (low + solve + m * n * np.dtype(dtype).itemsize // 2) * 100 // 99


def matrix(assume_a, kappa, dtype, rng):
    return (spd if assume_a == "pos" else general)(N, kappa, dtype, rng)


def assert_as_in_core(a, b, x, info, in_core, dtype):
    assert info.a_on_host and not in_core.a_on_host
    assert in_core.converged and not in_core.fell_back, in_core
    assert info.converged and not info.fell_back, info
    assert backward_ratio(a, x, b, dtype) <= 1.0
    assert abs(info.iterations - in_core.iterations) <= 1, (info, in_core)
    assert info.residuals[-1] <= np.sqrt(N) * float(np.finfo(dtype).eps)


@pytest.mark.parametrize("assume_a", ["gen", "pos"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_kept_on_the_host_is_as_accurate_as_in_core(backend, dtype, assume_a, rng):
    a = matrix(assume_a, 1e4, dtype, rng)
    b = random_matrix(N, 2, dtype, rng)
    kwargs = dict(assume_a=assume_a, backend=backend, nb=NB)
    x_in, in_core = hybridla.solve_mixed(a, b, **kwargs)
    budget = host_budget(backend, N, N, dtype)
    with hybridla.config.set({"device.memory_budget": budget}):
        x, info = hybridla.solve_mixed(a, b, **kwargs)  # ooc "auto"
    assert x.shape == b.shape and x.dtype == x_in.dtype
    assert_as_in_core(a, b, x, info, in_core, dtype)


@pytest.mark.parametrize("refinement", ["classical-gmres", "gmres", "classical"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_always_forces_a_on_the_host_for_every_refinement(backend, dtype, refinement, rng):
    a = general(N, 1e2, dtype, rng)
    b = random_matrix(N, 1, dtype, rng)[:, 0]
    kwargs = dict(refinement=refinement, backend=backend, nb=NB)
    _, in_core = hybridla.solve_mixed(a, b, ooc="never", **kwargs)
    x, info = hybridla.solve_mixed(a, b, ooc="always", **kwargs)
    assert x.shape == b.shape
    assert_as_in_core(a, b, x, info, in_core, dtype)
    with hybridla.config.set({"device.ooc": "always"}):  # the configuration's mode too
        assert hybridla.solve_mixed(a, b, **kwargs)[1].a_on_host


@pytest.mark.parametrize("lower", [True, False])
def test_pos_reads_one_triangle_of_a_row_major_narrower_array(backend, lower, rng):
    """A float32, row-major `a` with float64 b (the work in float64): the products read it
    a block column at a time, widened, and only its `lower` (or upper) triangle."""
    a = spd(N, 1e3, np.float32, rng)
    b = random_matrix(N, 1, np.float64, rng)
    junk = np.triu(np.full((N, N), 1e3, np.float32), 1)
    given = np.ascontiguousarray(np.tril(a) + junk if lower else np.triu(a) + junk.T)
    kept = given.copy()
    _, in_core = hybridla.solve_mixed(a, b, assume_a="pos", backend=backend, nb=NB)
    x, info = hybridla.solve_mixed(given, b, assume_a="pos", lower=lower, backend=backend,
                                   nb=NB, ooc="always")
    assert x.dtype == np.float64 and np.array_equal(given, kept)
    assert_as_in_core(a.astype(np.float64), b, x, info, in_core, np.float64)


def test_cholesky_shift_retried_with_a_on_the_host(backend, rng):
    """A Cholesky that breaks down in half precision is retried on a copy made again from the
    host array (HostResidentMatrix.narrow_into): the same shift as in core."""
    a = spd(N, 1e6, np.float64, rng)
    b = random_matrix(N, 1, np.float64, rng)[:, 0]
    kwargs = dict(assume_a="pos", lowest="half", backend=backend, nb=NB)
    _, in_core = hybridla.solve_mixed(a, b, ooc="never", **kwargs)
    x, info = hybridla.solve_mixed(a, b, ooc="always", **kwargs)
    assert info.a_on_host and info.shift == in_core.shift
    assert info.fell_back == in_core.fell_back
    if info.fell_back:
        assert solve_backward_error(a, x, b) < 30
    else:
        assert_as_in_core(a, b, x, info, in_core, np.float64)


def test_lstsq_mixed_with_a_on_the_host(backend, rng):
    a = tall(230, N, 1e3, np.float64, rng)
    b = random_matrix(230, 2, np.float64, rng)
    _, in_core = hybridla.lstsq_mixed(a, b, backend=backend, nb=NB, ooc="never")
    with hybridla.config.set({"device.memory_budget": host_budget(backend, 230, N,
                                                                  np.float64)}):
        x, info = hybridla.lstsq_mixed(a, b, backend=backend, nb=NB)
    assert info.a_on_host and info.converged and not info.fell_back, info
    assert abs(info.iterations - in_core.iterations) <= 1
    assert_least_squares_accurate(a, x, b, 1e3)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
def test_the_columns_that_fit_are_kept_where_the_backend_computes(backend, dtype, rng):
    """With room beside the low-precision copy, A's last columns go up in the working
    precision and stay (info.kept_columns), rounded there into the copy: the same answer as
    with A wholly on the host (ooc "always" keeps none), as accurate; `a` not written."""
    a = general(N, 1e3, dtype, rng)
    b = random_matrix(N, 2, dtype, rng)
    given = a.copy()
    x_all, on_host = hybridla.solve_mixed(a, b, backend=backend, nb=NB, ooc="always")
    with hybridla.config.set({"device.memory_budget": host_budget(backend, N, N, dtype)}):
        x, info = hybridla.solve_mixed(a, b, backend=backend, nb=NB)
    assert on_host.a_on_host and on_host.kept_columns == 0
    assert info.a_on_host and 0 < info.kept_columns < N, info
    assert info.converged and not info.fell_back and np.array_equal(a, given)
    assert backward_ratio(a, x, b, dtype) <= 1.0
    assert info.iterations == on_host.iterations, (info, on_host)
    # the rounded copy is the same wherever it was rounded: the same first backward error,
    # but for the residual's own rounding (its sums in another order: N eps in these units)
    assert abs(info.residuals[0] - on_host.residuals[0]) <= N * float(np.finfo(dtype).eps)


@pytest.mark.parametrize("trans", ["N", "C"])
def test_products_split_between_host_and_kept_columns(backend, trans, rng):
    """HostOperator with kept columns (A = [A_host, A_kept]) against a dense product: the
    host block columns and the kept store's share, for both ops, any split."""
    ops = get_backend(backend)
    m, n = 41, 29
    a = random_matrix(m, n, np.float64, rng)
    X = random_matrix(m if trans == "C" else n, 3, np.float64, rng)
    want = (a if trans == "N" else a.T) @ X
    for kept_columns in (1, 7, n):
        plan = make_plan(ops, m, kept_columns, np.float64, nb=NB)
        kept = rounded_copy(ops, a[:, n - kept_columns:], plan, np.float64)
        try:
            got = HostOperator(ops, a, np.float64, kept, 8, kept=kept).product(X, trans)
        finally:
            kept.close()
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())


def test_infs_in_a_kept_on_the_host_are_found_beside_the_factorization(backend, rng):
    """check_finite for a host-resident `a` runs while the copy is factored, and is read
    before any answer or fallback: ValueError naming `a`, `a` untouched; with
    check_finite=False the solve meets the infinity itself (code -2, the rounded copy
    overflows)."""
    a = general(N, 10, np.float64, rng)
    a[N - 3, 5] = np.inf
    given = a.copy()
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB, ooc="always")
    with hybridla.config.set({"device.memory_budget": host_budget(backend, N, N,
                                                                  np.float64, nrhs=1)}), \
            pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB)
    assert np.array_equal(a, given, equal_nan=True)
    with pytest.raises(LinAlgError, match="overflows.*code -2"):
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB, ooc="always",
                             check_finite=False, fallback=False)


def test_auto_inner_tol_runs_each_correction_to_the_stopping_test_on_the_host(backend, rng,
                                                                              monkeypatch):
    """inner_tol "auto" (the default): 1e-8 for products where the backend computes, and
    only the stopping test's estimate where they run on the host; a given one is used as
    given."""
    from hybridla.lapack import _mixed_operators
    seen = []
    real_refine = _mixed_operators.refine

    def spy(*args, **kwargs):
        seen.append(kwargs["inner_tol"])
        return real_refine(*args, **kwargs)
    monkeypatch.setattr(_mixed_operators, "refine", spy)
    a = general(N, 10, np.float64, rng)
    for ooc, inner_tol in (("never", None), ("always", None), ("always", 1e-6)):
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB, ooc=ooc,
                             inner_tol=inner_tol)
    assert seen == [1e-8, np.finfo(np.float64).tiny, 1e-6]


def test_a_pass_over_a_on_the_host_per_gmres_step(backend, rng, monkeypatch):
    """A kept on the host: the first residual, then one product per GMRES step; the residual
    after each correction comes from its products (refine's residual_from_products), not
    from another pass over A. Where the backend computes, each correction ends with one."""
    from hybridla.lapack import _mixed_operators
    passes = {"host": 0, "working": 0}
    # every product of HostOperator goes through `product`; WorkingOperator's Krylov steps
    # through `apply`, its residuals through `product`
    for name, cls, method in (("host", _mixed_operators.HostOperator, "product"),
                              ("working", _mixed_operators.WorkingOperator, "product"),
                              ("working", _mixed_operators.WorkingOperator, "apply")):
        def counted(self, *args, _method=getattr(cls, method), _name=name, **kwargs):
            passes[_name] += 1
            return _method(self, *args, **kwargs)
        monkeypatch.setattr(cls, method, counted)
    a = general(N, 1e4, np.float64, rng)
    b = rng.standard_normal(N)
    for ooc, where in (("always", "host"), ("never", "working")):
        x, info = hybridla.solve_mixed(a, b, backend=backend, nb=NB, ooc=ooc)
        assert info.converged and info.iterations >= 1 and info.a_on_host == (where == "host")
        outer_residuals = 0 if where == "host" else info.iterations
        assert passes[where] == 1 + info.inner_iterations + outer_residuals
        assert np.abs(b - a @ x).max() <= np.sqrt(N) * np.finfo(np.float64).eps * \
            np.abs(a).sum(axis=1).max() * np.abs(x).max()


def test_never_raises_the_clear_memory_error(backend, rng):
    a = general(N, 10, np.float64, rng)
    budget = host_budget(backend, N, N, np.float64, nrhs=1)
    with hybridla.config.set({"device.memory_budget": budget}), \
            pytest.raises(MemoryError) as caught:
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB, ooc="never")
    message = str(caught.value)
    assert f"{N} x {N}" in message and str(budget) in message and "ooc='never'" in message
    assert "on the host" in message


@pytest.mark.parametrize("ooc", ["auto", "always"])
def test_low_precision_copy_over_the_budget_raises(backend, ooc, rng):
    a = general(N, 10, np.float64, rng)
    with hybridla.config.set({"device.memory_budget": 1000}), \
            pytest.raises(MemoryError, match="over the budget of 1000 bytes.*low-precision"):
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB, ooc=ooc)


def test_the_choice_is_logged_at_info(backend, rng, caplog):
    a = general(N, 10, np.float64, rng)
    with caplog.at_level(logging.INFO, logger="hybridla"):
        hybridla.solve_mixed(a, np.ones(N), backend=backend, nb=NB, ooc="always")
    assert any("stays on the host" in r.getMessage() and r.name.startswith("hybridla")
               for r in caplog.records)


def test_bad_ooc_is_named(backend, rng):
    with pytest.raises(ValueError, match="ooc must be one of"):
        hybridla.solve_mixed(np.eye(3), np.ones(3), backend=backend, ooc="sometimes")


@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("uplo", [None, "L", "U"])
@pytest.mark.parametrize("trans", ["N", "C"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_host_product_is_the_product(dtype, trans, uplo, order, rng):
    """host_product against a dense product in double precision: every block width, both
    layouts, a narrower stored dtype, and for `uplo` only that triangle read (the other
    one is NaN)."""
    m, n = (37, 37) if uplo else (41, 29)
    a = random_matrix(m, n, dtype, rng)
    inside = np.ones((m, n), bool) if uplo is None else \
        np.tril(np.ones((n, n), bool)) if uplo == "L" else np.triu(np.ones((n, n), bool))
    X = random_matrix(m if trans == "C" and uplo is None else n, 3, dtype, rng)
    narrow = np.complex64 if np.dtype(dtype).kind == "c" else np.float32
    for stored in (a, a.astype(narrow)):
        source = np.asarray(np.where(inside, stored, np.nan), order=order)
        # the matrix `source` stands for, in `dtype`: for `uplo`, its triangle's completion
        full = np.where(inside, stored, 0).astype(dtype)
        if uplo:
            full = full + np.conj(full.T) - np.diag(full.diagonal())
            full[np.diag_indices(n)] = full.diagonal().real
        want = (full if trans == "N" or uplo else full.conj().T) @ X
        for width in (1, 5, 16, n, n + 3):
            got = host_product(source, X, trans, uplo, np.dtype(dtype), width)
            assert got.dtype == dtype and got.flags.f_contiguous
            np.testing.assert_allclose(got, want, rtol=0, atol=100 * n * float(
                np.finfo(dtype).eps) * np.abs(want).max())


def test_perf_script_runs_both_paths(capsys):
    """perf/mixed_ooc.py at a small order on the host backend, with a budget that keeps A on
    the host: both rows, A's products on the host, the stopping test passed, the ratio."""
    script = load_perf_script("mixed_ooc")
    try:
        with hybridla.config.set({"backend": "host"}):
            budget = host_budget("host", 300, 300, np.float64, nb=32, nrhs=1)
            script.main(["--sizes", "300", "--budget-gib", str(budget / 2 ** 30),
                         "--warmup-n", "100", "--nb", "32"])
    finally:
        unload_perf_script(script)
    out = capsys.readouterr().out
    mixed_row = next(line for line in out.splitlines() if "| solve_mixed |" in line)
    assert "| host |" in mixed_row and float(mixed_row.split("|")[-2]) <= 1.0
    assert "| lu_factor + lu_solve |" in out and "lu_factor + lu_solve / solve_mixed" in out
