"""The `hybridla` command on the host backend: the README's main job and its siblings."""
import argparse
import json

import numpy as np
import pytest

import hybridla
from hybridla.cli import getrf_ratio, main, make_parser


def test_demo_prints_a_table_and_writes_a_trace(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["demo", "--n", "300", "--backend", "host", "--nb", "64"])
    out = capsys.readouterr().out
    assert "hybridla" in out and "scipy" in out and "TFLOP/s" in out
    # the process's first call in a row of its own, then the call the trace is of
    table = out[out.index("implementation"):].splitlines()[1:]
    rows = [line.split() for line in table if line.startswith("hybridla")]
    assert [row[:2] for row in rows[:2]] == [["hybridla,", "1st"], ["hybridla", "host"]]
    assert all(float(row[-2]) < 30 for row in rows[:2])  # LAPACK's ratio of both calls
    trace = json.loads((tmp_path / "hybridla-demo.trace.json").read_text())
    assert any(e.get("name") == "panel" for e in trace["traceEvents"])
    assert (tmp_path / "hybridla-demo.trace.png").stat().st_size > 0


def test_factor_saves_factors_matching_scipy(tmp_path, capsys):
    import scipy.linalg
    a = np.random.default_rng(5).standard_normal((120, 120))
    np.save(tmp_path / "a.npy", a)
    main(["factor", str(tmp_path / "a.npy"), "--backend", "host", "--nb", "32",
          "--output", str(tmp_path / "f.npz"), "--trace", str(tmp_path / "t.json")])
    saved = np.load(tmp_path / "f.npz")
    lu, piv = scipy.linalg.lu_factor(a)
    assert np.array_equal(saved["piv"], piv)
    assert np.allclose(saved["lu"], lu, atol=1e-12)
    main(["trace", str(tmp_path / "t.json")])
    assert "gpu idle" in capsys.readouterr().out
    assert (tmp_path / "t.png").exists()


def test_factor_rejects_a_file_that_is_not_a_matrix(tmp_path, capsys):
    np.save(tmp_path / "v.npy", np.ones(5))
    with pytest.raises(SystemExit) as exit_:
        main(["factor", str(tmp_path / "v.npy")])
    assert exit_.value.code == 2
    assert "not a matrix" in capsys.readouterr().err


def test_the_demo_ratio_detects_a_wrong_factorization():
    a = np.random.default_rng(6).standard_normal((50, 50))
    import scipy.linalg
    lu, piv = scipy.linalg.lu_factor(a)
    assert getrf_ratio(a, lu, piv) < 30
    lu[10, 20] += 1.0
    assert getrf_ratio(a, lu, piv) > 30


# -- the table and what factor says about its plan --------------------------------------------

def test_demo_table_has_a_ratio_and_a_speedup_column(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["demo", "--n", "200", "--backend", "host", "--nb", "32", "--no-progress"])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("implementation"))
    assert header.split()[-3:] == ["LU", "ratio", "speedup"]  # two columns, two names
    assert "ratio vs scipy" not in out
    scipy_row = next(line for line in out.splitlines() if line.startswith("scipy"))
    assert float(scipy_row.split()[-1]) == 1.0  # scipy's speedup over itself
    assert "speedup: scipy.linalg.lu_factor's time / the row's time" in out


def test_factor_reports_the_plan_and_writes_it_into_the_trace(tmp_path, capsys):
    a = np.random.default_rng(7).standard_normal((100, 90)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    trace = tmp_path / "t.json"
    main(["factor", str(tmp_path / "a.npy"), "--backend", "host", "--nb", "32",
          "--lookahead", "2", "--trace", str(trace)])
    out = capsys.readouterr().out
    assert "plan: nb 32, look-ahead 2, panel" in out
    assert "panels ran on: cpu 3" in out  # 90 columns in panels of 32
    md = json.loads(trace.read_text())["metadata"]
    assert {k: md[k] for k in ("routine", "shape", "dtype", "nb", "lookahead", "backend")} == \
        {"routine": "getrf", "shape": [100, 90], "dtype": "float32", "nb": 32, "lookahead": 2,
         "backend": "host"}
    assert md["panels"] == {"cpu": 3} and md["hybridla"] == hybridla.__version__
    assert md["date"].endswith("UTC")
    assert "nb 32, look-ahead 2" in out  # the rendered summary names the run


def test_factor_quiet_prints_nothing_and_still_saves(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.random.default_rng(8).standard_normal((40, 40)))
    main(["factor", str(tmp_path / "a.npy"), "--backend", "host", "--quiet",
          "--output", str(tmp_path / "f")])
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert set(np.load(tmp_path / "f.npz").files) == {"lu", "piv"}  # np.savez's .npz added


# -- errors: one line on stderr, exit status 2 for usage ---------------------------------------

def _write_inputs(tmp_path):
    np.save(tmp_path / "a.npy", np.eye(4))
    np.save(tmp_path / "v.npy", np.ones(4))
    np.save(tmp_path / "e.npy", np.ones((0, 3)))
    np.save(tmp_path / "s.npy", np.array([["a", "b"], ["c", "d"]]))
    np.save(tmp_path / "o.npy", np.array([[1, None]], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "z.npz", x=np.eye(2), y=np.ones(2))
    (tmp_path / "t.txt").write_text("1 2\n3 4\n")
    (tmp_path / "d").mkdir()


@pytest.mark.parametrize("argv, expected", [
    (["factor", "missing.npy"], "missing.npy: no such file"),
    (["factor", "d"], "is a directory"),
    (["factor", "z.npz"], "is an .npz archive (arrays: x, y)"),
    (["factor", "t.txt"], "is not a .npy file"),
    (["factor", "o.npy"], "holds Python objects"),
    (["factor", "v.npy"], "1-D array of shape (4,), not a matrix"),
    (["factor", "e.npy"], "empty 0 x 3 matrix"),
    (["factor", "s.npy"], "dtype <U1, not numbers"),
    (["factor", "a.npy", "--nb", "0"], "argument --nb: expected a positive integer or 'auto'"),
    (["factor", "a.npy", "--nb", "big"], "argument --nb: expected a positive integer or 'auto'"),
    (["factor", "a.npy", "--lookahead", "-1"], "argument --lookahead: must be >= 0"),
    (["factor", "a.npy", "--panel", "disk"], "argument --panel: invalid choice"),
    (["factor", "a.npy", "--output", "nodir/f.npz"], "--output nodir/f.npz: directory nodir"),
    (["factor", "a.npy", "--output", "d"], "--output d: is a directory"),
    (["factor", "a.npy", "--trace", "nodir/t.json"], "--trace nodir/t.json: directory nodir"),
    (["demo", "--n", "0"], "argument --n: must be >= 1"),
    (["demo", "--n", "50", "--trace", "d"], "--trace d: is a directory"),
    (["trace", "missing.json"], "missing.json: no such file"),
    (["trace", "t.txt"], "t.txt: not a Chrome trace JSON"),
    (["info", "--bogus"], "unrecognized arguments: --bogus"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_errors_are_one_line_with_exit_status_2(tmp_path, monkeypatch, capsys, argv, expected):
    _write_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv + (["--backend", "host"] if argv[0] in ("factor", "demo") else []))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err and err.startswith("hybridla"), err


def test_a_configured_bad_value_is_one_line_too(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.eye(4))
    with hybridla.config.set({"lu.lookahead": -3}), pytest.raises(SystemExit) as exit_:
        main(["factor", str(tmp_path / "a.npy"), "--backend", "host"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lookahead" in err


def test_unavailable_cuda_backend_is_a_usage_error(tmp_path, capsys):
    if "cuda" in hybridla.available_backends():
        pytest.skip("the cuda backend is available here")
    np.save(tmp_path / "a.npy", np.eye(4))
    with pytest.raises(SystemExit) as exit_:
        main(["factor", str(tmp_path / "a.npy"), "--backend", "cuda"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "backend='cuda' is not available" in err
    assert "hybridla[cuda]" in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"hybridla {hybridla.__version__}"


def test_every_option_has_help():
    parser = make_parser()
    commands = parser.commands
    assert {"demo", "factor", "trace", "info", "bench", "tune"} <= set(commands)
    for name, sub in [("hybridla", parser), *commands.items()]:
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
    helps = {a.dest: a.help for a in parser._subparsers._group_actions[0]._choices_actions}
    assert all(helps.get(name) for name in commands), helps


def test_verbose_logs_the_plan_to_stderr_and_leaves_the_logger_as_it_was(tmp_path, capsys):
    import logging
    np.save(tmp_path / "a.npy", np.eye(40) + 1)
    log = logging.getLogger("hybridla")
    before = (list(log.handlers), log.level)
    main(["-vv", "factor", str(tmp_path / "a.npy"), "--backend", "host", "--nb", "16", "-q"])
    err = capsys.readouterr().err
    assert "hybridla.plan: DEBUG: plan lu 40x40 float64 on host" in err and "nb 16" in err
    assert (list(log.handlers), log.level) == before


# -- bench and info ------------------------------------------------------------------------------

def test_bench_help_shows_the_benchmark_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hybridla bench")
    assert "--routine" in out and "--sizes" in out and "--baselines" in out


def test_bench_runs_the_host_comparison_from_the_package(capsys):
    """hybridla bench is hybridla.bench's runner (no perf/ needed): the table of perf/bench.py,
    named by the command that made it."""
    from _lapack_checks import markdown_rows
    main(["bench", "--sizes", "48", "--repeat", "1", "--interfaces", "cpu",
          "--baselines", "scipy"])
    out = capsys.readouterr().out
    assert "`hybridla bench --sizes 48 --repeat 1 --interfaces cpu --baselines scipy`" in out
    header, rows = markdown_rows(out)
    assert header[:5] == ["n", "implementation", "time (s)", "TFLOP/s", "backward error"]
    assert {r["implementation"] for r in rows} == {"hybridla CPU iface (host)",
                                                   "SciPy lu_factor (host)"}
    # (a "~" marks a random-vector estimate: tests/test_bench.py moves that switch)
    assert all(r["n"] == "48" and float(r["backward error"].lstrip("~")) < 30 for r in rows)


def test_bench_without_a_gpu_runs_small_and_says_why_in_one_line(capsys, monkeypatch):
    if "cuda" in hybridla.available_backends():
        pytest.skip("the cuda backend is available here")
    from hybridla.bench import harness, runner
    if harness.no_gpu_reason() is None:
        pytest.skip("CuPy sees a GPU here")
    monkeypatch.setattr(runner, "SMALL_SIZES", (40,))      # the default without a GPU
    main(["bench", "--repeat", "1"])
    captured = capsys.readouterr()
    assert "| 40 | hybridla CPU iface (host) |" in captured.out
    assert "| 40 | SciPy lu_factor (host) |" in captured.out
    said = [line for line in captured.err.splitlines() if "cuSOLVER" in line]
    assert len(said) == 1 and "the cuSOLVER baseline needs the cuda backend" in said[0]


def test_bench_harness_clock_keeps_the_median_repetitions_meta(monkeypatch):
    """harness.measure on a fake clock: setup untimed, the median's meta, best_of the least."""
    from types import SimpleNamespace

    from hybridla.bench import harness
    now = [0.0]
    monkeypatch.setattr(harness, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    durations = iter([5.0, 3.0, 1.0, 2.0])    # a warm-up, then three timed repetitions
    calls = []

    def fn(state, last):
        now[0] += next(durations)
        calls.append((state, last))
        return len(calls), f"meta {len(calls)}"

    def setup():
        now[0] += 100.0                        # outside the clock
        return "fresh"
    m = harness.measure(fn, setup, 3, warmup=1, meta=lambda r: r[1])
    assert calls == [("fresh", False)] * 3 + [("fresh", True)]
    assert m.times == [3.0, 1.0, 2.0] and m.seconds == 2.0 and m.meta == "meta 4"
    assert m.result == (4, "meta 4")
    steps = iter([4.0, 0.5, 2.0])

    def call():
        now[0] += next(steps)
    assert harness.best_of(3, call, sync=None) == 0.5


def test_bench_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--sizes", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hybridla bench: error: argument --sizes")


def test_info_prints_show_config(capsys):
    main(["info"])
    out = capsys.readouterr().out
    assert out.rstrip("\n") == hybridla.show_config("text")
    main(["info", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["hybridla"] == hybridla.__version__
    assert data["config"]["lu.nb"]["source"] in ("default", "config.set") or \
        data["config"]["lu.nb"]["source"].startswith(("file", "environment"))
