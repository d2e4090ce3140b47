"""perf/mixed.py on the host: its test matrices, the error helpers and the table of a --dry run
(the cuSOLVER and GPU-interface rows need a GPU; a --dry run imports no CUDA module).

The table tests pass before and after hybridla.solve_mixed exists: its rows either say
"skipped: hybridla.solve_mixed not available" or carry a checked result; one test runs them
against a stand-in with solve_mixed's signature."""
import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.linalg

import hybridla
from _lapack_checks import load_perf_script, markdown_rows, unload_perf_script

SKIPPED = "skipped: hybridla.solve_mixed not available"
CUDA_MODULES = ("cupy", "torch")        # hybridla itself never imports these


@pytest.fixture(scope="module")
def mixed():
    module = load_perf_script("mixed")
    yield module
    unload_perf_script(module)


def rows_of(out):
    """(header, {(n, matrix, implementation): cells}) of the printed table."""
    header, cells = markdown_rows(out)
    rows = {(int(c["n"]), c["matrix"], c["implementation"]): c for c in cells}
    return header, rows


# -- test matrices -------------------------------------------------------------------------

def build(mixed, word, n, seed=0):
    factory = mixed.MatrixFactory(n, seed, np)
    return factory.make(mixed.parse_matrix(word))


@pytest.mark.parametrize("kappa", [1.0, 1e4, 1e6])
def test_prescribed_condition_number(mixed, kappa):
    n = 80
    a = build(mixed, f"kappa={kappa:g}", n)
    assert a.shape == (n, n) and a.dtype == np.float64 and a.flags.f_contiguous
    s = np.linalg.svd(a, compute_uv=False)
    assert s[0] == pytest.approx(1, rel=1e-10)
    assert np.linalg.cond(a) == pytest.approx(kappa, rel=1e-6)
    np.testing.assert_allclose(s, mixed.singular_values(n, kappa), rtol=1e-8)
    assert not np.allclose(a, a.T)                 # a general matrix, not a symmetric one


@pytest.mark.parametrize("word,kappa", [("spd-kappa=1e4", 1e4), ("spd-kappa=1e6", 1e6),
                                        ("spd", None)])
def test_spd_matrices(mixed, word, kappa):
    n = 70
    a = build(mixed, word, n)
    assert a.shape == (n, n) and a.dtype == np.float64 and a.flags.f_contiguous
    assert np.array_equal(a, a.T)                  # exactly symmetric
    w = np.linalg.eigvalsh(a)
    assert w.min() > 0
    scipy.linalg.cho_factor(a)                     # positive definite in floating point
    if kappa is not None:
        assert w.max() / w.min() == pytest.approx(kappa, rel=1e-6)
    else:
        assert 1 <= w.min() and w.max() < 6        # G G^T / n + I


def test_randn_and_seeds(mixed):
    a = build(mixed, "randn", 50)
    assert a.shape == (50, 50) and a.dtype == np.float64 and a.flags.f_contiguous
    assert abs(a.mean()) < 0.1 and 0.9 < a.std() < 1.1
    assert np.array_equal(a, build(mixed, "randn", 50))
    assert not np.array_equal(a, build(mixed, "randn", 50, seed=1))


def test_matrix_words_are_validated(mixed):
    assert mixed.parse_matrix("kappa=1e6") == mixed.MatrixSpec("kappa=1e6", "kappa", 1e6)
    assert mixed.parse_matrix("spd-kappa=100").spd
    for bad in ("kappa=0.5", "kappa=x", "hilbert", "spd-kappa="):
        with pytest.raises(Exception):
            mixed.parse_matrix(bad)
    with pytest.raises(SystemExit):
        mixed.parse_args(["--matrices", "randn,nope"])
    opts = mixed.parse_args(["--refinement", "none,gmres", "--lowest", "half"])
    assert mixed.combinations(opts) == [("half", "none"), ("half", "gmres")]
    assert mixed.combinations(mixed.parse_args([])) == list(mixed.DEFAULT_COMBOS)


# -- errors ------------------------------------------------------------------------------

def test_backward_error_known_case(mixed):
    a = np.diag([2.0, 4.0])
    x = np.array([1.0, 1.0])
    b = np.array([2.0, 5.0])                      # r = b - A x = (0, 1)
    assert mixed.inf_norm(a) == 4
    assert mixed.backward_error(a, x, b) == pytest.approx(1 / (4 * 1))
    assert mixed.backward_error(a, x, a @ x) == 0
    # several right-hand sides: the worst column
    x2 = np.array([[1.0, 2.0], [1.0, 0.0]])
    b2 = np.array([[2.0, 4.0], [5.0, 0.0]])       # second column exact
    assert mixed.backward_error(a, x2, b2) == pytest.approx(0.25)
    assert mixed.forward_error(np.array([1.0, 1.5]), np.array([1.0, 2.0])) == 0.25
    n = 100
    assert mixed.passes_stopping_test(0.9 * np.sqrt(n) * mixed.EPS, n)
    assert not mixed.passes_stopping_test(1.1 * np.sqrt(n) * mixed.EPS, n)


def test_problem_checks_a_solution(mixed):
    factory = mixed.MatrixFactory(60, 0, np)
    prob = mixed.Problem(mixed.parse_matrix("kappa=1e3"), 60, 2, 0, factory)
    x = scipy.linalg.solve(prob.a, prob.b)
    berr, ferr = prob.check(x)
    assert berr < np.sqrt(60) * mixed.EPS and ferr < 1e-10
    assert prob.check(x * (1 + 1e-6))[0] > 1e-8


# -- the table of a --dry run -------------------------------------------------------------

def expected_rows(mixed, n, matrices, combos, solve_mixed_name="hybridla solve_mixed"):
    rows = set()
    for m in matrices:
        assumes = ("gen", "pos") if m.startswith("spd") else ("gen",)
        for assume in assumes:
            rows.add((n, m, f"hybridla solve FP64 {assume} CPU iface (host)"))
            rows.add((n, m, f"{solve_mixed_name} defaults {assume} CPU iface (host)"))
            for lowest, refinement in combos:
                rows.add((n, m, f"{solve_mixed_name} {lowest} {refinement} {assume} "
                                f"CPU iface (host) tuned"))
    return rows


@pytest.fixture(autouse=True)
def fixed_commit(monkeypatch):
    """No git process in the tests: the header's commit is this."""
    from hybridla.bench import report
    monkeypatch.setattr(report, "git_commit", lambda: "abc1234")


def test_dry_run_prints_one_row_per_implementation(mixed, capsys, tmp_path):
    out_file = tmp_path / "mixed.md"
    before = {m for m in sys.modules if m.split(".")[0] in CUDA_MODULES}
    assert mixed.main(["--dry", "--sizes", "48", "--matrices", "randn,kappa=1e3,spd-kappa=1e3",
                       "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert {m for m in sys.modules if m.split(".")[0] in CUDA_MODULES} == before
    # every CUDA module perf/mixed.py uses goes through bench's lazy importer: none was tried
    assert not [m for m in mixed._bench._MODULES
                if m.split(".")[0] in ("cupy", "nvmath", "torch", "pycuda")]
    header, rows = rows_of(out)
    assert tuple(header) == mixed.COLUMNS
    matrices = ("randn", "kappa=1e3", "spd-kappa=1e3")
    assert set(rows) == expected_rows(mixed, 48, matrices, mixed.DEFAULT_COMBOS)
    has_mixed = hasattr(hybridla, "solve_mixed")
    for key, cells in rows.items():
        if "solve_mixed" in key[2] and not has_mixed:
            assert cells["note"] == SKIPPED and cells["time (s)"] == "n/a"
        elif "FP64" in key[2]:
            assert float(cells["backward error"]) < 1e-15 and cells["passes"] == "yes"
        else:                    # solve_mixed exists: a result, or the reason it has none
            assert cells["backward error"] != "n/a" or cells["note"], cells
    text = out_file.read_text()
    assert "### solve_mixed float64" in text and "`perf/mixed.py --dry" in text
    assert "commit abc1234" in text and " UTC; device: " in text and "baseline: " in text
    assert text.count("\n| 48 |") == len(rows)
    # the headline (defaults) row is each matrix's first row
    firsts = {}
    for key in rows:
        firsts.setdefault(key[1], key[2])
    assert all(" defaults gen " in label for label in firsts.values()), firsts


def test_rows_with_a_solve_mixed_stand_in(mixed, capsys, monkeypatch):
    """A stand-in with solve_mixed's signature (scipy's solve and an info object): the
    iterations, fall-back, time split, checks and ratio cells are filled from it."""
    calls = []

    def solve_mixed(a, b, assume_a="gen", lower=False, *, lowest="half",
                    refinement="classical-gmres", tol=None, max_iter=30, inner_tol=1e-4,
                    max_inner=50, fallback=True, equilibrate=True, overwrite_a=False,
                    overwrite_b=False, check_finite=True, backend=None, nb=None):
        assert isinstance(a, np.ndarray) and not overwrite_a
        calls.append((assume_a, lowest, refinement, backend, check_finite))
        x = scipy.linalg.solve(a, b, assume_a=assume_a, lower=lower)
        info = SimpleNamespace(iterations=2, residuals=[1e-3, 1e-9, 1e-17], fell_back=False,
                               seconds={"convert": 0.001, "factor": 0.002, "refine": 0.003,
                                        "total": 0.006},
                               inner_iterations=7, lowest=lowest, refinement=refinement)
        return x, info

    monkeypatch.setattr(hybridla, "solve_mixed", solve_mixed, raising=False)
    mixed.main(["--dry", "--sizes", "40", "--matrices", "spd-kappa=1e4", "--lowest",
                "half,tf32", "--refinement", "gmres"])
    header, rows = rows_of(capsys.readouterr().out)
    combos = [("half", "gmres"), ("tf32", "gmres")]
    assert set(rows) == expected_rows(mixed, 40, ("spd-kappa=1e4",), combos)
    # tuned rows: what they ask, check_finite=False; the defaults rows: nothing but assume_a
    # and the backend (the stand-in's own defaults: half, classical-gmres, check_finite=True)
    assert sorted(set(calls)) == sorted(
        {(a, lo, r, "host", False) for a in ("gen", "pos") for lo, r in combos}
        | {(a, "half", "classical-gmres", "host", True) for a in ("gen", "pos")})
    for key, cells in rows.items():
        assert cells["passes"] == "yes", cells
        assert cells["seed"] == "0"
        if "solve_mixed" in key[2]:
            assert cells["iterations"] == "2 (7 inner)" and cells["fell back"] == "no"
            assert (cells["convert (s)"], cells["factor (s)"], cells["refine (s)"]) == (
                "0.001", "0.002", "0.003")
            assert cells["vs our FP64"].endswith(("x", "x (parity)"))
            assert cells[mixed.FP64_COLUMN] == "–" and cells[mixed.IRS_COLUMN] == "–"
            assert cells["note"] == ""
        else:
            assert cells["vs our FP64"] == "–"


# -- the alternation, rows and references (fakes: no GPU) ------------------------------------

def test_runs_alternate_over_seeds_with_median_and_spread(mixed, capsys, monkeypatch):
    """Every round runs each implementation once, in table order; each (n, seed, matrix) has
    its rows; the spread cell is fastest-slowest of --repeat times."""
    order = []
    real_solve = hybridla.solve

    def solve(a, b, **kw):
        order.append(kw["assume_a"])
        return real_solve(a, b, **kw)

    def solve_mixed(a, b, assume_a="gen", **kw):
        order.append("mixed-" + kw.get("lowest", "defaults"))
        return scipy.linalg.solve(a, b), SimpleNamespace(iterations=1, fell_back=False)

    monkeypatch.setattr(hybridla, "solve", solve)
    monkeypatch.setattr(hybridla, "solve_mixed", solve_mixed, raising=False)
    assert mixed.main(["--dry", "--sizes", "32", "--seeds", "0,1", "--matrices", "randn",
                       "--lowest", "half", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    _, cells = markdown_rows(out)
    assert [(c["seed"], c["implementation"]) for c in cells] == [
        (seed, label) for seed in ("0", "1") for label in (
            "hybridla solve_mixed defaults gen CPU iface (host)",
            "hybridla solve FP64 gen CPU iface (host)",
            "hybridla solve_mixed half classical-gmres gen CPU iface (host) tuned")]
    # one warm-up round (first matrix only), then 3 rounds per matrix, alternating
    assert order == ["mixed-defaults", "gen", "mixed-half"] * (1 + 3 + 3)
    for c in cells:
        low, high = (float(v) for v in re.split(r"(?<!e)-", c["spread (s)"]))  # "4.2e-05-5e-05"
        assert low <= float(c["time (s)"]) <= high


def _row(mixed, key, irs, seconds, converged, times=None):
    impl = mixed.Impl(key, key, None, irs=irs)
    from hybridla.bench import harness
    m = harness.Measurement(seconds, None, times or [seconds])
    return mixed.Row(impl, m, mixed.Outcome(converged=converged))


def test_best_converged_irs_is_the_fastest_that_converged(mixed):
    rows = {r.impl.key: r for r in [
        _row(mixed, "irs-fp16", True, 0.5, False),       # fastest, but fell back
        _row(mixed, "irs-tf32", True, 0.9, True),
        _row(mixed, "irs-fp32", True, 0.7, True),
        _row(mixed, "cusolver-fp64-gen", False, 0.6, None)]}
    assert mixed.best_converged_irs(rows).impl.key == "irs-fp32"
    rows["irs-fp32"].outcome.converged = False
    rows["irs-tf32"].outcome.converged = False
    assert mixed.best_converged_irs(rows) is None


def test_ratio_columns_name_their_references_and_say_parity(mixed):
    """A GPU gen solve_mixed row: vs cuSOLVER FP64 (getrf+getrs), vs the best converged IRS
    row (parity where the spreads overlap), vs our FP64."""
    from hybridla.bench import harness
    factory = mixed.MatrixFactory(20, 0, np)
    prob = mixed.Problem(mixed.parse_matrix("randn"), 20, 1, 0, factory)
    head = mixed.Impl("mixed-gpu-gen-defaults", "head", None, mixed=True, headline=True)
    rows = {
        "mixed-gpu-gen-defaults": mixed.Row(head, harness.Measurement(0.5, None, [0.45, 0.55])),
        "cusolver-fp64-gen": _row(mixed, "cusolver-fp64-gen", False, 1.0, None, [0.9, 1.1]),
        "irs-fp32": _row(mixed, "irs-fp32", True, 0.52, True, [0.5, 0.6]),
        "fp64-gpu-gen": _row(mixed, "fp64-gpu-gen", False, 2.0, None, [2.0, 2.1]),
    }
    best = mixed.best_converged_irs(rows)
    line = mixed.Table.row(prob, rows["mixed-gpu-gen-defaults"], rows, best)
    cells = dict(zip(mixed.COLUMNS, (c.strip() for c in line.strip("|").split("|"))))
    assert cells[mixed.FP64_COLUMN] == "2.00x"
    assert cells[mixed.IRS_COLUMN] == "1.04x (parity)"
    assert cells["vs our FP64"] == "4.00x"
    env = mixed.Env(None, "host", mixed.parse_args(["--dry"]))
    said = mixed.summary_lines(prob, rows, best, env)
    assert len(said) == 2 and "2.00x" in said[0] and "1.04x (parity)" in said[1]
    assert all("baseline: " in s and "commit abc1234" in s for s in said)


def test_defaults_sizes_seeds_and_irs_rows(mixed):
    opts = mixed.parse_args([])
    assert opts.sizes == [8192, 16384, 32768] and opts.seeds == [0, 1] and opts.repeat >= 5
    assert {"irs-fp16", "irs-bf16", "irs-tf32", "irs-fp32", "cusolver-getrf",
            "cusolver-pinned"} <= set(opts.baselines)
    assert "cusolver-dh" not in opts.baselines           # the simple API: on request only
    assert mixed.parse_args(["--seed", "3"]).seeds == [3]
    assert mixed.combinations(mixed.parse_args(["--lowest", "none"])) == []


def test_irs_rows_say_why_when_the_binding_lacks_a_function(mixed, monkeypatch):
    """A binding without IRSXgesv: the IRS rows print "n/a (reason)", nothing crashes."""
    from hybridla.bench import baselines
    fake = SimpleNamespace(irs_params_create=lambda: 1)     # everything else missing
    monkeypatch.setattr(baselines, "cusolver", lambda: fake)
    reason = baselines.irs_unavailable()
    assert reason.startswith("nvmath.bindings.cusolverDn has no") and "irs_xgesv" in reason
    with pytest.raises(RuntimeError, match="irs_xgesv"):
        baselines.IrsGesv("FP16", 10, 1)
    env = mixed.Env(object(), "cuda", mixed.parse_args(["--interfaces", "none",
                                                        "--baselines", "irs-fp16,irs-fp32"]))
    monkeypatch.setattr(mixed, "_cusolver_reason", lambda env: None)
    impls = mixed.select_implementations(env)
    assert [i.key for i in impls] == ["irs-fp16", "irs-fp32"]
    assert all(i.skipped == f"n/a ({reason})" for i in impls)
