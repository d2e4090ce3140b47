"""perf/bench.py on the host: its routine table, the backward-error checks and the table it
prints (the GPU rows need a GPU; these cover the host backend's and SciPy's rows)."""
import ctypes
import re

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


@pytest.fixture(autouse=True)
def fixed_commit(monkeypatch):
    """No git process in the tests: the header's commit is this."""
    from hybridla.bench import report
    monkeypatch.setattr(report, "git_commit", lambda: "abc1234")


CPU = "hybridla CPU iface (host)"
CPU_TUNED = "hybridla CPU iface (host) tuned (overwrite_a=True, check_finite=False)"


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
        assert overwrite_a != check_finite      # the library's defaults, or both tuned
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
    out = capsys.readouterr().out
    header, rows = rows_of(out)
    assert tuple(header) == bench.COLUMNS
    assert list(rows) == [(40, None, CPU), (40, None, CPU_TUNED),
                          (40, None, "SciPy lu_factor (host)")]   # the headline first
    assert all(berr(c) < 30 for c in rows.values())
    title = next(line for line in out.splitlines() if line.startswith("### "))
    assert " UTC; device: " in title and "commit abc1234" in title and "baseline: " in title


def test_potrf_and_getrf_in_one_run(bench, capsys, tmp_path):
    bench.main(["--routine", "potrf,getrf", "--sizes", "67", "40", "--repeat", "1",
                "--baselines", "scipy", "--nb", "16", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    header, rows = rows_of(out)
    assert header[:3] == ["n", "routine", "implementation"] and "vs our geqrf" not in header
    expected = {(n, r, impl) for n in (40, 67) for r, impl in
                [("getrf", CPU), ("getrf", CPU_TUNED), ("getrf", "SciPy lu_factor (host)"),
                 ("potrf", CPU), ("potrf", CPU_TUNED), ("potrf", "SciPy cho_factor (host)")]}
    assert set(rows) == expected
    assert all(berr(c) < 30 for c in rows.values()), rows
    assert out.index("| 40 | getrf") < out.index("| 40 | potrf") < out.index("| 67 | getrf")
    assert {p.name for p in tmp_path.glob("*.json")} >= {
        "getrf_cpu_67.json", "potrf_cpu_67.json", "getrf_cpu-tuned_67.json"}


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
    cpu = CPU
    assert list(rows) == [(50, "geqrf", cpu), (50, "geqrf", CPU_TUNED),
                          (50, "geqrf", "SciPy qr (host)"), (50, "geqlf", cpu),
                          (50, "geqlf", CPU_TUNED), (50, "gelqf", cpu),
                          (50, "gelqf", CPU_TUNED)]   # SciPy's geqrf once
    assert {c[1] for c in calls} == {"host"}
    for cells in rows.values():
        assert cells["backward error"].startswith("~") == (dense_max < 50)
        assert berr(cells) < 30, cells
    assert rows[(50, "geqrf", cpu)]["vs our geqrf"] == "–"
    for r in ("geqlf", "gelqf"):
        assert rows[(50, r, cpu)]["vs our geqrf"].endswith(("x", "x (parity)"))


def test_geqlf_alone_times_scipys_geqrf_and_skips_what_is_missing(bench, capsys, monkeypatch):
    monkeypatch.delattr(hybridla, "geqlf", raising=False)
    bench.main(["--routine", "geqlf", "--sizes", "30", "--repeat", "1", "--baselines", "scipy",
                "--interfaces", "cpu"])
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


# -- alternation, statistics, parity and the headline rows ---------------------------------

def fake_clock(monkeypatch, durations):
    """harness's clock advancing by the next of `durations` inside each timed call."""
    from types import SimpleNamespace

    from hybridla.bench import harness
    now = [0.0]
    monkeypatch.setattr(harness, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    steps = iter(durations)

    def tick():
        now[0] += next(steps)
    return tick


def test_alternate_runs_round_robin_with_median_spread_and_failures(monkeypatch):
    from hybridla.bench import harness, report
    calls = []
    tick = fake_clock(monkeypatch, [9.0, 9.0, 9.0,            # the warm-up round
                                    3.0, 1.0, 5.0,  1.0, 2.0,  2.0, 4.0])
    finished = []

    def contender(name, fail_at=None):
        def fn(state, last):
            calls.append((name, state, last))
            if fail_at is not None and len([c for c in calls if c[0] == name]) == fail_at:
                raise ValueError("boom")
            tick()
            return f"{name} result {len(calls)}"
        return harness.Contender(name, fn, setup=lambda: f"{name} input",
                                 meta=lambda result: result.split()[-1],
                                 finish=lambda result: finished.append(result) or "checked")
    m = harness.alternate([contender("hyb"), contender("base"), contender("bad", fail_at=3)],
                          3, warmup=1)
    assert [c[0] for c in calls] == ["hyb", "base", "bad"] * 3 + ["hyb", "base"]
    assert [c[2] for c in calls] == [False] * 9 + [True] * 2
    assert all(c[1] == f"{c[0]} input" for c in calls)
    assert m["hyb"].times == [3.0, 1.0, 2.0] and m["hyb"].seconds == 2.0
    assert m["base"].times == [1.0, 2.0, 4.0] and m["base"].seconds == 2.0
    assert m["hyb"].spread == (1.0, 3.0) and report.spread_cell(m["base"]) == "1-4"
    assert m["hyb"].meta == "10"           # the median repetition's (the 3rd round's)
    assert m["hyb"].result == "checked" and finished == ["hyb result 10", "base result 11"]
    assert m["bad"].seconds is None and m["bad"].error == "ValueError: boom"
    assert report.compare(m["base"], m["bad"]) == "n/a"


@pytest.mark.parametrize("base_times,this_times,cell", [
    ([2.0, 2.1, 2.2], [1.0, 1.1, 1.2], "1.91x"),             # apart: faster
    ([1.0, 1.05, 1.3], [0.95, 1.0, 1.1], "1.05x (parity)"),  # overlapping spreads
    ([1.0, 1.0, 1.0], [2.0, 2.0, 2.1], "0.50x"),             # apart: slower
])
def test_ratio_is_parity_where_the_spreads_overlap(base_times, this_times, cell):
    from statistics import median

    from hybridla.bench import harness, report
    base = harness.Measurement(median(base_times), None, base_times)
    this = harness.Measurement(median(this_times), None, this_times)
    assert report.compare(base, this) == cell
    assert report.compare(None, this) == "–"


def test_defaults_row_is_the_headline_and_tuned_rows_pass_their_options(bench, capsys,
                                                                        monkeypatch):
    """The defaults row passes neither overwrite_a nor check_finite; the tuned row both; the
    two alternate; each row has its spread; a summary line follows the table."""
    seen = []
    real = hybridla.lu_factor

    def lu_factor(a, **kw):
        seen.append((kw.get("overwrite_a"), kw.get("check_finite"), kw.get("backend")))
        return real(a, **kw)
    monkeypatch.setattr(hybridla, "lu_factor", lu_factor)
    assert bench.main(["--sizes", "36", "--repeat", "2", "--baselines", "none"]) == 0
    out = capsys.readouterr().out
    assert seen == [(None, None, "host"), (True, False, "host")] * 3    # 1 warm-up + 2
    header, rows = rows_of(out)
    assert list(rows) == [(36, None, CPU), (36, None, CPU_TUNED)]
    summary = [line for line in out.splitlines() if line.startswith("- summary")]
    assert len(summary) == 1 and CPU in summary[0] and "commit abc1234" in summary[0]
    for cells in rows.values():
        low, high = (float(v) for v in re.split(r"(?<!e)-", cells["spread (s)"]))  # "4.2e-05-5e-05"
        assert low <= float(cells["time (s)"]) <= high


def test_interface_and_baseline_words(bench):
    opts = bench.parse_args([])
    assert opts.repeat >= 5
    assert opts.interfaces == ["gpu", "cpu", "gpu-tuned", "cpu-tuned"]
    impls = bench.IMPLEMENTATIONS
    assert list(impls)[:4] == ["hybridla-gpu", "hybridla-gpu-tuned", "hybridla-cpu",
                               "hybridla-cpu-tuned"]
    for word in ("cusolver-device", "cusolver-pinned", "cusolver-pageable"):
        assert word in bench.parse_args(["--baselines", word]).baselines
    assert bench.HEADLINES == {"hybridla-gpu": "cusolver", "hybridla-cpu": "cusolver-pinned"}
    assert "pinned" in bench.COLUMNS[-2] and "(device)" in bench.COLUMNS[-3]
