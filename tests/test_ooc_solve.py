"""Solves on host factors streamed through the device (issue 31 item 3; lapack/_streamed_solve.py,
getrs_ooc.py, potrs_ooc.py, geqrs_ooc.py): lu_solve, cho_solve and an out-of-core lstsq with
configuration solve.place "device", on budgets (device.memory_budget) that hold B whole or cut it
into column blocks. The host backend keeps to the budget as a device does, so every body runs on
the CPU machine too; on the GPU machine ``-m cuda`` runs them on the cuda backend.

Accuracy as LAPACK's testers measure it (backward error and least-squares ratios < 30), the same
x as the host solve to rounding, the bytes the drivers' docstrings count, the choice of the cost
model and its trace, and the failures: a singular factor as scipy's, a budget too small, a task
that fails mid-run.
"""
from __future__ import annotations

import json
import logging
import threading

import numpy as np
import pytest
import scipy.linalg

import hybridla
from hybridla import config
from hybridla.backend import get_backend
from hybridla.lapack import _ooc, _streamed_solve
from hybridla.scheduler.plan import CostModel

from _lapack_checks import (DTYPES, eps_of, least_squares_ratio, random_matrix,
                            solve_backward_error, wide)

THRESH = 30.0
DTYPE_IDS = [np.dtype(d).name for d in DTYPES]
NB = 16
N = 101  # not a multiple of NB


def budget_for(backend, rows, width, dtype, extra=0):
    """A budget whose working store holds `width` columns of B (and the two factor slots)."""
    return get_backend(backend).required_bytes(rows, width + 2 * NB + extra, dtype, NB)


def settings(backend, rows, width, dtype, place="device", extra=0):
    return {"solve.place": place, "lu.nb": NB, "cho.nb": NB, "qr.nb": NB,
            "device.memory_budget": budget_for(backend, rows, width, dtype, extra)}


def metadata(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["metadata"]


def uploaded(path):
    """Bytes of the run's uploads (the DMAs), from its trace file."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return sum(e["args"]["bytes"] for e in events if e.get("ph") == "X" and e["name"] == "upload")


def hpd_matrix(n, dtype, rng):
    x = wide(random_matrix(n, n, dtype, rng))
    return np.asfortranarray(((x @ x.conj().T + n * np.eye(n))).astype(dtype))


def close_to(x, reference, dtype, factor=1e3):
    scale = max(np.abs(wide(reference)).max(), 1.0)
    return np.abs(wide(x) - wide(reference)).max() <= factor * eps_of(dtype) * scale


# -- lu_solve ------------------------------------------------------------------------------------

@pytest.mark.parametrize("nrhs", [1, 7], ids=["k1", "k7"])
@pytest.mark.parametrize("trans", [0, 1, 2], ids=["N", "T", "C"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lu_solve_streamed(backend, dtype, trans, nrhs, rng, tmp_path):
    """B whole (k = 1) or in column blocks of 3 (k = 7): the backward error of op(A) x = b, the
    same x as the host solve, the user's b untouched."""
    a = random_matrix(N, N, dtype, rng)
    b = random_matrix(N, nrhs, dtype, rng)[:, 0] if nrhs == 1 else random_matrix(N, nrhs,
                                                                                    dtype, rng)
    saved = b.copy()
    lu, piv = scipy.linalg.lu_factor(a)
    trace = tmp_path / "getrs.json"
    with config.set(settings(backend, N, min(nrhs, 3), dtype)):
        x = hybridla.lu_solve((lu, piv), b, trans=trans, backend=backend, trace=trace)
    with config.set({"solve.place": "host"}):
        x_host = hybridla.lu_solve((lu, piv), b, trans=trans, backend=backend)
    op = {0: a, 1: a.T, 2: a.conj().T}[trans]
    assert x.shape == b.shape and x.dtype == np.dtype(dtype)
    assert solve_backward_error(op, x, b) < THRESH
    assert close_to(x, x_host, dtype)
    assert close_to(x, scipy.linalg.lu_solve((lu, piv), b, trans=trans), dtype)
    assert b.tobytes() == saved.tobytes()
    md = metadata(trace)
    assert md["solve_place"] == "device"
    assert md["streamed_solve"]["rhs_blocks"] == -(-nrhs // 3)


@pytest.mark.parametrize("trans", [0, 1], ids=["N", "T"])
def test_lu_solve_moves_the_bytes_its_docstring_counts(backend, trans, rng, tmp_path):
    """b up once; per column block of b, L's and U's block columns once each: n^2 + sum kb^2."""
    a, b = rng.standard_normal((N, N)), rng.standard_normal((N, 7))
    trace = tmp_path / "getrs.json"
    with config.set(settings(backend, N, 3, np.float64)):
        hybridla.lu_solve(scipy.linalg.lu_factor(a), b, trans=trans, backend=backend,
                          trace=trace)
    blocks = -(-7 // 3)
    diagonal = sum(min(NB, N - k0) ** 2 for k0 in range(0, N, NB))
    assert uploaded(trace) == 8.0 * (N * 7 + blocks * (N * N + diagonal))


def test_lu_solve_overwrite_b_solves_in_place(backend, rng):
    a = rng.standard_normal((N, N))
    b = np.asfortranarray(rng.standard_normal((N, 4)))
    reference = scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), b)
    with config.set(settings(backend, N, 4, np.float64)):
        x = hybridla.lu_solve(scipy.linalg.lu_factor(a), b, overwrite_b=True, backend=backend)
    assert np.shares_memory(x, b)
    assert close_to(x, reference, np.float64)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_lu_solve_singular_factor_as_scipy(backend, rng):
    """An exactly zero U(i, i) is not checked (LAPACK getrs): no error, infs or NaNs in x
    from row i up, as scipy's."""
    a = rng.standard_normal((N, N))
    a[:, 40] = 0
    with pytest.warns(scipy.linalg.LinAlgWarning):
        lu, piv = scipy.linalg.lu_factor(a)
    b = rng.standard_normal(N)
    reference = scipy.linalg.lu_solve((lu, piv), b)
    with config.set(settings(backend, N, 1, np.float64)):
        x = hybridla.lu_solve((lu, piv), b, backend=backend)
    assert not np.isfinite(reference).all()
    np.testing.assert_array_equal(np.isfinite(x), np.isfinite(reference))
    np.testing.assert_allclose(x[41:], reference[41:], rtol=1e-10)


# -- cho_solve -----------------------------------------------------------------------------------

@pytest.mark.parametrize("nrhs", [1, 5], ids=["k1", "k5"])
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cho_solve_streamed(backend, dtype, lower, nrhs, rng, tmp_path):
    a = hpd_matrix(N, dtype, rng)
    b = random_matrix(N, nrhs, dtype, rng)
    saved = b.copy()
    factor = scipy.linalg.cho_factor(a, lower=lower)
    trace = tmp_path / "potrs.json"
    with config.set(settings(backend, N, 2, dtype)):
        x = hybridla.cho_solve(factor, b, backend=backend, trace=trace)
    with config.set({"solve.place": "host"}):
        x_host = hybridla.cho_solve(factor, b, backend=backend)
    assert x.dtype == np.dtype(dtype)
    assert solve_backward_error(a, x, b) < THRESH
    assert close_to(x, x_host, dtype)
    assert close_to(x, scipy.linalg.cho_solve(factor, b), dtype)
    assert b.tobytes() == saved.tobytes()
    assert metadata(trace)["solve_place"] == "device"
    # the triangle once per triangular solve, per column block of b
    diagonal = sum(min(NB, N - k0) ** 2 for k0 in range(0, N, NB))
    blocks = -(-nrhs // 2)
    assert uploaded(trace) == np.dtype(dtype).itemsize * (N * nrhs + blocks * (N * N + diagonal))


# -- lstsq out of core ---------------------------------------------------------------------------

M, NQ = 300, 230  # lstsq's tall a: QR's out-of-core store takes 6 NB columns of workspaces


def lstsq_settings(backend, shape, dtype, place="device"):
    """A budget that factors `shape` out of core in wide columns of 2 NB (the streamed solve's
    store, m x (k + 4 NB + 1), fits it)."""
    ops = get_backend(backend)
    routine = "geqrf" if shape[0] >= shape[1] else "gelqf"
    budget = _ooc.budget_for_width(ops, routine, shape, dtype, NB, 2 * NB)
    return {"solve.place": place, "qr.nb": NB, "device.memory_budget": budget}


@pytest.mark.parametrize("nrhs", [1, 3], ids=["k1", "k3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_lstsq_out_of_core_streamed(backend, dtype, nrhs, rng, tmp_path):
    m, n = M, NQ
    a, b = random_matrix(m, n, dtype, rng), random_matrix(m, nrhs, dtype, rng)
    b = b[:, 0] if nrhs == 1 else b
    saved = b.copy()
    trace = tmp_path / "gels.json"
    with config.set(lstsq_settings(backend, a.shape, dtype)):
        x, residues, rank, _ = hybridla.lstsq(a, b, backend=backend, trace=trace)
    with config.set(lstsq_settings(backend, a.shape, dtype, place="host")):
        x_host, residues_host, _, _ = hybridla.lstsq(a, b, backend=backend)
    x_ref, residues_ref, _, _ = scipy.linalg.lstsq(a, b)
    assert rank == n and x.shape == x_ref.shape
    assert least_squares_ratio(a, x, b) < THRESH
    assert close_to(x, x_host, dtype) and close_to(x, x_ref, dtype, 1e4)
    np.testing.assert_allclose(residues, residues_host, rtol=1e3 * eps_of(dtype))
    np.testing.assert_allclose(residues, residues_ref, rtol=1e4 * eps_of(dtype))
    assert b.tobytes() == saved.tobytes()
    md = metadata(trace)
    assert md["out_of_core"]["wide_columns"] > 1  # the factorization's, then the solve's
    assert md["solve_place"] == "device" and md["solve"] == "gels"


def test_lstsq_moves_the_bytes_its_docstring_counts(backend, rng, tmp_path):
    """The solve's uploads: b once, the reflectors' block columns (rows k0:m) and R's (rows
    0:k1) once each: m n + sum kb^2, after the factorization's."""
    (m, n), nrhs = (M, NQ), 2
    a, b = rng.standard_normal((m, n)), rng.standard_normal((m, nrhs))
    with config.set(lstsq_settings(backend, a.shape, np.float64, place="host")):
        hybridla.lstsq(a, b, backend=backend, trace=tmp_path / "host.json")
    with config.set(lstsq_settings(backend, a.shape, np.float64)):
        hybridla.lstsq(a, b, backend=backend, trace=tmp_path / "device.json")
    diagonal = sum(min(NB, n - k0) ** 2 for k0 in range(0, n, NB))
    solve = uploaded(tmp_path / "device.json") - uploaded(tmp_path / "host.json")
    assert solve == 8.0 * (m * nrhs + m * n + diagonal)


def test_lstsq_rank_deficient_and_wide_keep_their_solves(backend, rng):
    """A rank-deficient a fails the rank test before anything streams and is solved by gelsy;
    M < N is solved on the host, as before."""
    m, n = M, NQ
    a = rng.standard_normal((m, n))
    a[:, 30] = a[:, 10]
    b = rng.standard_normal(m)
    with config.set(lstsq_settings(backend, a.shape, np.float64)):
        x, residues, rank, _ = hybridla.lstsq(a, b, backend=backend)
    x_ref, _, rank_ref, _ = scipy.linalg.lstsq(a, b, lapack_driver="gelsy")
    assert rank == rank_ref == n - 1 and residues.shape == (0,)
    assert least_squares_ratio(a, x, b) < THRESH
    wide_a = np.asfortranarray(a.T[:, :m])
    wide_a[:, 30] = rng.standard_normal(n)  # full rank again
    with config.set(lstsq_settings(backend, wide_a.shape, np.float64)):
        x, _, rank, _ = hybridla.lstsq(wide_a, b[:n], backend=backend)
    assert rank == n
    assert close_to(x, scipy.linalg.lstsq(wide_a, b[:n])[0], np.float64, 1e4)


# -- the choice, the configuration, the failures -------------------------------------------------

def test_cost_model_reads_the_factors_where_the_link_or_the_host_is_faster(caplog):
    """On the H100's table: one right-hand side is bound by bandwidth, and LAPACK's solve reads
    its factors at 10 GB/s against the staged link's 40 (measured: 0.875 s on the host, 0.359
    s streamed at n = 32768), 256 by flops (the GPU's); a small solve stays on the host, where
    the graph's tasks and copies cost more than the solve."""
    model = CostModel(config.device_table("NVIDIA H100 80GB HBM3"), np.float64)
    with caplog.at_level(logging.DEBUG, logger="hybridla"):
        assert model.solve_place("getrs", 32768, 32768, 1, 768) == "device"
        assert model.solve_place("getrs", 32768, 32768, 256, 768) == "device"
        assert model.solve_place("potrs", 1000, 1000, 1, 256) == "host"
    assert any("-> device (cost model" in r.getMessage() for r in caplog.records)
    seconds = model.solve_seconds("gels", 65536, 32768, 256, 768)
    assert seconds["device"] < seconds["host"]


def test_auto_solves_on_the_host_on_the_host_backend(rng, tmp_path):
    """The host backend has no link to save: "auto" is the host solve, with a budget too, and
    its trace says so; "host" forced likewise."""
    a, b = rng.standard_normal((N, N)), rng.standard_normal(N)
    trace = tmp_path / "getrs.json"
    for place in ("auto", "host"):
        with config.set({**settings("host", N, 1, np.float64, place=place)}):
            x = hybridla.lu_solve(scipy.linalg.lu_factor(a), b, backend="host", trace=trace)
        assert metadata(trace)["solve_place"] == "host"
        assert close_to(x, scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), b), np.float64)


def test_bad_place_and_small_budget_are_refused_before_any_work(backend, rng):
    a, b = rng.standard_normal((N, N)), np.asfortranarray(rng.standard_normal((N, 2)))
    saved = b.copy()
    factors = scipy.linalg.lu_factor(a)
    with config.set({"solve.place": "sometimes"}), \
            pytest.raises(ValueError, match=r"solve\.place must be one of .*'sometimes'"):
        hybridla.lu_solve(factors, b, overwrite_b=True, backend=backend)
    with config.set({"solve.place": "device", "lu.nb": NB, "device.memory_budget": 1000}), \
            pytest.raises(MemoryError, match="over the budget of 1000 bytes"):
        hybridla.lu_solve(factors, b, overwrite_b=True, backend=backend)
    assert b.tobytes() == saved.tobytes()


def test_failure_mid_run_leaves_b_and_no_memory(backend, monkeypatch, rng):
    """A block column's task that fails (the 5th) fails the call; b is untouched with
    overwrite_b=False, the working store is freed, and the next call works."""
    original, lock, calls = _streamed_solve._solve_block_column, threading.Lock(), [0]

    def failing(*args, **kwargs):
        with lock:
            calls[0] += 1
            if calls[0] == 5:
                raise RuntimeError("injected")
        return original(*args, **kwargs)

    monkeypatch.setattr(_streamed_solve, "_solve_block_column", failing)
    a = hpd_matrix(N, np.float64, rng)
    b = rng.standard_normal((N, 3))
    saved = b.copy()
    ops = get_backend(backend)
    before = ops.allocated_bytes()
    factor = scipy.linalg.cho_factor(a)
    with config.set(settings(backend, N, 3, np.float64)), \
            pytest.raises(RuntimeError, match="injected"):
        hybridla.cho_solve(factor, b, backend=backend)
    assert calls[0] >= 5
    assert b.tobytes() == saved.tobytes()
    assert ops.allocated_bytes() == before
    with config.set(settings(backend, N, 3, np.float64)):
        x = hybridla.cho_solve(factor, b, backend=backend)
    assert solve_backward_error(a, x, b) < THRESH
