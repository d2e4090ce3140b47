"""Output dtypes: every public function returns, for float32, float64, complex64, complex128 and
integer input, the dtypes scipy.linalg (or scipy.linalg.lapack, for the LAPACK-level functions)
returns for the same input: LAPACK's precision of the input (integers -> float64), residues real.
ql, lq, geqlf and gelqf, which scipy lacks, follow qr's and ?geqrf's rule. Host backend, small
matrices: this file checks types, the accuracy tests are elsewhere.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack

import hybridla
from _lapack_checks import random_matrix, wide

INPUT_DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int64, np.int32]
INPUT_IDS = [np.dtype(d).name for d in INPUT_DTYPES]
HOST = dict(backend="host")


def inputs(dtype, rng):
    """Test matrices of ``dtype``: a (7 x 7, nonsingular), spd (7 x 7, Hermitian positive
    definite), tall (9 x 4), wide (4 x 9), and right-hand sides for each (2 columns and 1-D).
    Integer matrices hold small integers, diagonally dominant where they must be nonsingular."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        g = rng.integers(-3, 4, size=(9, 9))
        a = g[:7, :7] + 25 * np.eye(7, dtype=int)
        spd = g[:7, :7] @ g[:7, :7].T + 25 * np.eye(7, dtype=int)
        tall = g[:9, :4] + 10 * np.eye(9, 4, dtype=int)
        wide_ = g[:4, :9] + 10 * np.eye(4, 9, dtype=int)
        rhs = {rows: rng.integers(-3, 4, size=(rows, 2)) for rows in (4, 7, 9)}
        cast = lambda x: np.asarray(x).astype(dtype)  # noqa: E731
    else:
        g = wide(random_matrix(9, 9, dtype, rng))
        a = g[:7, :7] + 10 * np.eye(7)
        spd = g[:7, :7] @ g[:7, :7].conj().T + 7 * np.eye(7)
        spd = (spd + spd.conj().T) / 2
        tall, wide_ = g[:9, :4], g[:4, :9]
        rhs = {rows: wide(random_matrix(rows, 2, dtype, rng)) for rows in (4, 7, 9)}
        cast = lambda x: np.asarray(x).astype(dtype)  # noqa: E731
    m = dict(a=cast(a), spd=cast(spd), tall=cast(tall), wide=cast(wide_))
    for rows, b in rhs.items():
        m[f"b{rows}"] = cast(b)
        m[f"v{rows}"] = cast(b[:, 0])
    assert all(x.dtype == dtype for x in m.values())
    return m


def lapack_geqrf(a):
    (geqrf,) = scipy.linalg.lapack.get_lapack_funcs(("geqrf",), (a,))
    return geqrf(a)[:2]


def lapack_gehrd(a):
    (gehrd,) = scipy.linalg.lapack.get_lapack_funcs(("gehrd",), (a,))
    return gehrd(a)[:2]


def raw(result):
    """((factors, tau), triangle) -> (factors, tau, triangle)."""
    (factors, tau), triangle = result
    return factors, tau, triangle


# name -> (ours(m), scipy's(m)), each returning a tuple of arrays whose dtypes must agree
CASES = {
    "lu_factor": (lambda m: hybridla.lu_factor(m["a"], **HOST),
                  lambda m: scipy.linalg.lu_factor(m["a"])),
    "lu_solve": (lambda m: (hybridla.lu_solve(hybridla.lu_factor(m["a"], **HOST), m["b7"], **HOST),
                            hybridla.lu_solve(hybridla.lu_factor(m["a"], **HOST), m["v7"],
                                              trans=1, **HOST)),
                 lambda m: (scipy.linalg.lu_solve(scipy.linalg.lu_factor(m["a"]), m["b7"]),
                            scipy.linalg.lu_solve(scipy.linalg.lu_factor(m["a"]), m["v7"],
                                                  trans=1))),
    "solve": (lambda m: (hybridla.solve(m["a"], m["b7"], **HOST),
                         hybridla.solve(m["a"], m["v7"], **HOST),
                         hybridla.solve(m["spd"], m["b7"], assume_a="pos", **HOST)),
              lambda m: (scipy.linalg.solve(m["a"], m["b7"]),
                         scipy.linalg.solve(m["a"], m["v7"]),
                         scipy.linalg.solve(m["spd"], m["b7"], assume_a="pos"))),
    "cho_factor": (lambda m: hybridla.cho_factor(m["spd"], **HOST)[:1],
                   lambda m: scipy.linalg.cho_factor(m["spd"])[:1]),
    "cho_solve": (lambda m: (hybridla.cho_solve(hybridla.cho_factor(m["spd"], **HOST), m["b7"],
                                                **HOST),
                             hybridla.cho_solve(hybridla.cho_factor(m["spd"], lower=True, **HOST),
                                                m["v7"], **HOST)),
                  lambda m: (scipy.linalg.cho_solve(scipy.linalg.cho_factor(m["spd"]), m["b7"]),
                             scipy.linalg.cho_solve(scipy.linalg.cho_factor(m["spd"], lower=True),
                                                    m["v7"]))),
    "cholesky": (lambda m: (hybridla.cholesky(m["spd"], **HOST),
                            hybridla.cholesky(m["spd"], lower=True, **HOST)),
                 lambda m: (scipy.linalg.cholesky(m["spd"]),
                            scipy.linalg.cholesky(m["spd"], lower=True))),
    "lstsq": (lambda m: (*hybridla.lstsq(m["tall"], m["b9"], **HOST)[:2],
                         *hybridla.lstsq(m["tall"], m["v9"], **HOST)[:2],
                         *hybridla.lstsq(m["a"], m["b7"], **HOST)[:2],
                         *hybridla.lstsq(m["wide"], m["b4"], **HOST)[:2]),
              lambda m: (*scipy.linalg.lstsq(m["tall"], m["b9"])[:2],
                         *scipy.linalg.lstsq(m["tall"], m["v9"])[:2],
                         *scipy.linalg.lstsq(m["a"], m["b7"])[:2],
                         *scipy.linalg.lstsq(m["wide"], m["b4"])[:2])),
    "hessenberg": (lambda m: (hybridla.hessenberg(m["a"], **HOST),
                              *hybridla.hessenberg(m["a"], calc_q=True, **HOST)),
                   lambda m: (scipy.linalg.hessenberg(m["a"]),
                              *scipy.linalg.hessenberg(m["a"], calc_q=True))),
    "geqrf": (lambda m: (*hybridla.geqrf(m["tall"], **HOST), *hybridla.geqrf(m["wide"], **HOST)),
              lambda m: (*lapack_geqrf(m["tall"]), *lapack_geqrf(m["wide"]))),
    "geqlf": (lambda m: (*hybridla.geqlf(m["tall"], **HOST), *hybridla.geqlf(m["wide"], **HOST)),
              lambda m: (*lapack_geqrf(m["tall"]), *lapack_geqrf(m["wide"]))),
    "gelqf": (lambda m: (*hybridla.gelqf(m["tall"], **HOST), *hybridla.gelqf(m["wide"], **HOST)),
              lambda m: (*lapack_geqrf(m["tall"]), *lapack_geqrf(m["wide"]))),
    "gehrd": (lambda m: hybridla.gehrd(m["a"], **HOST),
              lambda m: lapack_gehrd(m["a"])),
    "solve_mixed": (lambda m: (hybridla.solve_mixed(m["a"], m["b7"], **HOST)[0],
                               hybridla.solve_mixed(m["a"], m["v7"], **HOST)[0],
                               hybridla.solve_mixed(m["spd"], m["b7"], assume_a="pos",
                                                    **HOST)[0]),
                    lambda m: (scipy.linalg.solve(m["a"], m["b7"]),
                               scipy.linalg.solve(m["a"], m["v7"]),
                               scipy.linalg.solve(m["spd"], m["b7"], assume_a="pos"))),
    "lstsq_mixed": (lambda m: (hybridla.lstsq_mixed(m["tall"], m["b9"], **HOST)[0],
                               hybridla.lstsq_mixed(m["tall"], m["v9"], **HOST)[0]),
                    lambda m: (scipy.linalg.lstsq(m["tall"], m["b9"])[0],
                               scipy.linalg.lstsq(m["tall"], m["v9"])[0])),
}
for _name, _fn in (("qr", hybridla.qr), ("ql", hybridla.ql), ("lq", hybridla.lq)):
    for _mode in ("full", "economic", "r", "raw"):
        CASES[f"{_name}-{_mode}"] = (
            lambda m, fn=_fn, mode=_mode: tuple(
                x for shape in ("tall", "wide", "a")
                for x in (raw if mode == "raw" else tuple)(fn(m[shape], mode=mode, **HOST))),
            lambda m, mode=_mode: tuple(
                x for shape in ("tall", "wide", "a")
                for x in (raw if mode == "raw" else tuple)(scipy.linalg.qr(m[shape], mode=mode))))


def as_tuple(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=INPUT_IDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_output_dtypes_are_scipys(name, dtype, rng):
    ours_fn, scipy_fn = CASES[name]
    m = inputs(dtype, rng)
    saved = {key: value.copy() for key, value in m.items()}
    ours, theirs = as_tuple(ours_fn(m)), as_tuple(scipy_fn(m))
    assert len(ours) == len(theirs)
    for i, (x, y) in enumerate(zip(ours, theirs)):
        # a NumPy array where scipy returns one; a NumPy scalar where scipy does (lstsq's
        # residues for 1-D b)
        assert isinstance(x, np.ndarray) == isinstance(y, np.ndarray), \
            f"output {i}: {type(x)}, scipy's {type(y)}"
        assert isinstance(x, (np.ndarray, np.generic)), f"output {i}: {type(x)}"
        assert x.dtype == y.dtype, \
            f"{name}({np.dtype(dtype).name}) output {i}: dtype {x.dtype}, scipy's {y.dtype}"
        if not name.startswith("lq-"):  # A = L Q: L and Q are shaped otherwise than Q and R
            assert x.shape == np.shape(y), f"output {i}: shape {x.shape}, scipy's {np.shape(y)}"
    for key, value in m.items():  # nothing was overwritten (no overwrite_* was passed)
        np.testing.assert_array_equal(value, saved[key], err_msg=key)
