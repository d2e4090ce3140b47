"""perf/bench.py on the host: its routine table, the backward-error checks and the table it
prints (the GPU rows need a GPU; these cover the host backend's and SciPy's rows)."""
import ctypes

import numpy as np
import pytest
import scipy.linalg

import hybridla
from _lapack_checks import load_perf_script, markdown_rows, unload_perf_script


@pytest.fixture(scope="module")
def bench():
    module = load_perf_script("bench")
    yield module
    unload_perf_script(module)


# -- LAPACK's own geqlf / gelqf (not in scipy.linalg.lapack), through cython_lapack ---------

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}


def _lapack(name):
    from scipy.linalg import cython_lapack
    capsule = cython_lapack.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 8)(
        get_pointer(capsule, get_name(capsule)))


def lapack_raw(kind, a):
    """((factors, tau), None) of LAPACK's xgeqrf ('qr'), xgeqlf ('ql') or xgelqf ('lq')."""
    if kind == "qr":
        return scipy.linalg.qr(a, mode="raw")
    f = np.array(a, order="F", copy=True)
    m, n = f.shape
    tau = np.zeros(min(m, n), dtype=f.dtype)
    lwork = 64 * max(m, n)
    work = np.zeros(lwork, dtype=f.dtype)
    info = ctypes.c_int(0)

    def i(v):
        return ctypes.byref(ctypes.c_int(v))
    _lapack(_PREFIX[f.dtype] + {"ql": "geqlf", "lq": "gelqf"}[kind])(
        i(m), i(n), f.ctypes.data, i(m), tau.ctypes.data, work.ctypes.data, i(lwork),
        ctypes.byref(info))
    assert info.value == 0
    return (f, tau), None


def fake_hybridla(kind, calls):
    """A stand-in for hybridla.geqrf / geqlf / gelqf with their signature, returning LAPACK's
    own factors (so the checks are tested against a reference), recording the backend asked."""
    def fn(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
           panel=None, trace=None):
        assert overwrite_a and not check_finite
        calls.append((kind, backend))
        return lapack_raw(kind, a)[0]
    return fn


# -- the table ----------------------------------------------------------------------------

def rows_of(out):
    """{(n, routine or None, implementation): cells} of the printed table."""
    header, cells = markdown_rows(out)
    return header, {(int(c["n"]), c.get("routine"), c["implementation"]): c for c in cells}


def berr(cells):
    return float(cells["backward error"].lstrip("~"))


def test_getrf_table_keeps_its_columns(bench, capsys):
    assert bench.main(["--sizes", "40", "--repeat", "1", "--baselines", "scipy"]) == 0
    header, rows = rows_of(capsys.readouterr().out)
    assert tuple(header) == bench.COLUMNS
    assert set(rows) == {(40, None, "hybridla CPU iface (host)"),
                         (40, None, "SciPy lu_factor (host)")}
    assert all(berr(c) < 30 for c in rows.values())


def test_potrf_and_getrf_in_one_run(bench, capsys, tmp_path):
    bench.main(["--routine", "potrf,getrf", "--sizes", "67", "40", "--repeat", "1",
                "--baselines", "scipy", "--nb", "16", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    header, rows = rows_of(out)
    assert header[:3] == ["n", "routine", "implementation"] and "vs our geqrf" not in header
    expected = {(n, r, impl) for n in (40, 67) for r, impl in
                [("getrf", "hybridla CPU iface (host)"), ("getrf", "SciPy lu_factor (host)"),
                 ("potrf", "hybridla CPU iface (host)"), ("potrf", "SciPy cho_factor (host)")]}
    assert set(rows) == expected
    assert all(berr(c) < 30 for c in rows.values()), rows
    assert out.index("| 40 | getrf") < out.index("| 40 | potrf") < out.index("| 67 | getrf")
    assert {p.name for p in tmp_path.glob("*.json")} >= {"getrf_cpu_67.json",
                                                           "potrf_cpu_67.json"}


@pytest.mark.parametrize("dense_max", [8191, 10])     # dense check; random-vector estimate
def test_qr_family_against_our_geqrf(bench, capsys, monkeypatch, dense_max):
    calls = []
    for kind, name in (("qr", "geqrf"), ("ql", "geqlf"), ("lq", "gelqf")):
        monkeypatch.setattr(hybridla, name, fake_hybridla(kind, calls), raising=False)
    monkeypatch.setattr(bench, "DENSE_CHECK_MAX_HOST", dense_max)
    bench.main(["--routine", "gelqf,geqrf,geqlf", "--sizes", "50", "--repeat", "1",
                "--baselines", "scipy", "--dtype", "complex128"])
    header, rows = rows_of(capsys.readouterr().out)
    assert header[-2:] == ["vs our geqrf", "note"]
    cpu = "hybridla CPU iface (host)"
    assert list(rows) == [(50, "geqrf", cpu), (50, "geqrf", "SciPy qr (host)"),
                          (50, "geqlf", cpu), (50, "gelqf", cpu)]   # SciPy's geqrf once
    assert {c[1] for c in calls} == {"host"}
    for cells in rows.values():
        assert cells["backward error"].startswith("~") == (dense_max < 50)
        assert berr(cells) < 30, cells
    assert rows[(50, "geqrf", cpu)]["vs our geqrf"] == "–"
    for r in ("geqlf", "gelqf"):
        assert rows[(50, r, cpu)]["vs our geqrf"].endswith("x")


def test_geqlf_alone_times_scipys_geqrf_and_skips_what_is_missing(bench, capsys, monkeypatch):
    monkeypatch.delattr(hybridla, "geqlf", raising=False)
    bench.main(["--routine", "geqlf", "--sizes", "30", "--repeat", "1", "--baselines", "scipy"])
    header, rows = rows_of(capsys.readouterr().out)
    assert set(rows) == {(30, None, "hybridla CPU iface"), (30, None, "SciPy geqrf (host)")}
    assert rows[(30, None, "hybridla CPU iface")]["note"] == "skipped: hybridla.geqlf not available"
    assert berr(rows[(30, None, "SciPy geqrf (host)")]) < 30


# -- the checks ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("kind", ["qr", "ql", "lq"])
def test_qr_checks_pass_lapack_and_catch_a_wrong_factor(bench, monkeypatch, kind, dtype):
    n = 60
    opts = bench.parse_args(["--sizes", str(n), "--dtype", dtype])
    case = bench.Case(n, np.dtype(dtype), opts, 0)
    (f, tau), _ = lapack_raw(kind, case.a)
    wrong_f = f.copy()
    i, j = (40, 45) if kind == "qr" else (45, 40)      # inside the triangular factor
    wrong_f[i, j] *= 1.5
    wrong_tau = tau.copy()
    wrong_tau[3] *= 1.5
    for dense_max in (8191, 10):
        monkeypatch.setattr(bench, "DENSE_CHECK_MAX_HOST", dense_max)
        assert bench.qr_error(kind, case, (f, tau))[0] < 30
        assert bench.qr_error(kind, case, (wrong_f, tau))[0] > 100
    monkeypatch.setattr(bench, "DENSE_CHECK_MAX_HOST", 8191)
    assert bench.qr_error(kind, case, (f, wrong_tau))[0] > 100   # only the dense check sees tau


def test_potrf_check_and_spd_matrix(bench, monkeypatch):
    n = 70
    opts = bench.parse_args(["--sizes", str(n), "--dtype", "complex128"])
    case = bench.Case(n, np.dtype("complex128"), opts, 0, kind="spd")
    assert np.array_equal(case.a, case.a.conj().T)
    c = scipy.linalg.cho_factor(case.a, lower=True)[0]
    wrong = c.copy()
    wrong[50, 20] *= 1.5
    for dense_max in (8191, 10):
        monkeypatch.setattr(bench, "DENSE_CHECK_MAX_HOST", dense_max)
        value, estimated = bench.potrf_error(case, (c,))
        assert value < 30 and estimated == (dense_max < n)
        assert bench.potrf_error(case, (wrong,))[0] > 100


def test_routine_list_is_validated(bench):
    assert bench.parse_args(["--routine", "gelqf,geqrf"]).routines == ["geqrf", "gelqf"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--routine", "getrf,gesvd"])
