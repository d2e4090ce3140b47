"""The `hybridla` command on the host backend: the README's main job and its siblings."""
import json

import numpy as np
import pytest

from hybridla.cli import getrf_ratio, main


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


def test_factor_rejects_a_file_that_is_not_a_matrix(tmp_path):
    np.save(tmp_path / "v.npy", np.ones(5))
    with pytest.raises(SystemExit, match="not a matrix"):
        main(["factor", str(tmp_path / "v.npy")])


def test_the_demo_ratio_detects_a_wrong_factorization():
    a = np.random.default_rng(6).standard_normal((50, 50))
    import scipy.linalg
    lu, piv = scipy.linalg.lu_factor(a)
    assert getrf_ratio(a, lu, piv) < 30
    lu[10, 20] += 1.0
    assert getrf_ratio(a, lu, piv) > 30
