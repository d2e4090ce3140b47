"""hybridla info / show_config, configuration sources and unknown keys, the warning of a GPU
that cannot be used, the library's logger, and the packaging's declared floors."""
import ast
import importlib.metadata
import logging
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import hybridla
import hybridla.backend as backends
from hybridla import config
from hybridla.config import UnknownConfigKeyWarning

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_config(monkeypatch):
    """Re-read files and environment after the test (which may change either)."""
    yield monkeypatch
    monkeypatch.undo()
    config.refresh()


def _unknown_key_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, UnknownConfigKeyWarning)]


# -- show_config / info ----------------------------------------------------------------------

def test_show_config_text_names_versions_backends_and_configuration():
    text = hybridla.show_config("text")
    lines = text.splitlines()
    assert lines[0] == f"hybridla {hybridla.__version__}"
    assert f"  numpy           {np.__version__}" in lines
    assert any(re.match(r"  dask +\d{4}\.", line) for line in lines)
    for name in ("scipy", "donfig", "pyyaml", "threadpoolctl", "pycuda", "nvmath-python"):
        assert any(line.startswith(f"  {name} ") for line in lines), name
    assert any(line.startswith("  host   available") for line in lines)
    cuda = next(line for line in lines if line.startswith("  cuda   "))
    if "cuda" in hybridla.available_backends():
        assert cuda == "  cuda   available" and "  auto   -> cuda" in lines
    else:
        assert f"not available: {backends._cuda_unavailable_reason()}" in cuda
        assert "  auto   -> host" in lines
    # the host backend's device and its tuning entry (with its provenance)
    assert "device of the host backend: host" in lines
    table = config.device_table("host")
    assert f"    nb_small: {table['nb_small']}" in lines
    assert any(line.startswith("    provenance: ") for line in lines)
    # every configuration key, with its value and source
    for key in config.KNOWN_KEYS - {"tuning"}:
        assert any(re.match(rf"  {re.escape(key)} +\S", line) for line in lines), key


def test_show_config_prints_the_text_and_dicts_hold_the_same(capsys):
    assert hybridla.show_config() is None
    assert capsys.readouterr().out.rstrip("\n") == hybridla.show_config("text")
    info = hybridla.show_config("dicts")
    assert info["hybridla"] == hybridla.__version__
    assert info["dependencies"]["numpy"] == np.__version__
    assert info["backends"]["host"]["available"] is True
    with pytest.raises(ValueError, match="mode"):
        hybridla.show_config("yaml")


def test_sources_name_the_layer_of_each_value(fresh_config, tmp_path):
    (tmp_path / "tuning.yaml").write_text(yaml.safe_dump(
        {"scheduler": {"workers": 3}, "tuning": {"mygpu": {"nb_small": 96}}}))
    fresh_config.setenv("HYBRIDLA_LU__LOOKAHEAD", "2")
    config.config.refresh(paths=[str(tmp_path)])
    with config.set({"lu.nb": 77}):
        sources = config.sources()
        text = hybridla.show_config("text")
    assert sources["lu.nb"] == (77, "config.set")
    assert sources["lu.lookahead"] == (2, "environment HYBRIDLA_LU__LOOKAHEAD")
    assert sources["scheduler.workers"] == (3, f"file {tmp_path / 'tuning.yaml'}")
    assert sources["tuning"][1] == f"file {tmp_path / 'tuning.yaml'}"
    assert sources["cho.nb"] == ("auto", "default")
    assert re.search(r"^  lu\.nb +77 +config\.set$", text, re.M)
    assert re.search(r"^  lu\.lookahead +2 +environment HYBRIDLA_LU__LOOKAHEAD$", text, re.M)
    assert re.search(rf"^  scheduler\.workers +3 +file {re.escape(str(tmp_path))}", text, re.M)
    assert re.search(r"^  cho\.nb +auto +default$", text, re.M)
    assert f"files read: {tmp_path / 'tuning.yaml'}" in text
    # outside the context the value is the environment's again
    assert config.sources()["lu.nb"] == ("auto", "default")


# -- unknown keys warn ---------------------------------------------------------------------------

def test_config_set_warns_about_unknown_keys_only():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with config.set({"lu.nbb": 3}):
            pass
        with config.set(scheduler__worker=2):
            pass
        with config.set({"lu": {"lookahed": 1}}):
            pass
        found = _unknown_key_warnings(record)
    assert len(found) == 3
    assert "'lu.nbb'" in found[0] and "did you mean 'lu.nb'?" in found[0]
    assert "'scheduler.worker'" in found[1] and "'scheduler.workers'" in found[1]
    assert "'lu.lookahed'" in found[2] and "'lu.lookahead'" in found[2]
    assert record[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with config.set({"lu.nb": 16, "cho.tail": 0, "device.panel-sms": 0,
                         "tuning.host.cho_tail": 8, "tuning": {"new gpu": {"nb_small": 1}}}):
            pass
    assert _unknown_key_warnings(record) == []


def test_unknown_keys_in_the_environment_and_files_warn_when_read(fresh_config, tmp_path):
    (tmp_path / "tuning.yaml").write_text(yaml.safe_dump(
        {"lu": {"nbb": 1, "nb": 64}, "tuning": {"any device": {"free_form": 1}}}))
    fresh_config.setenv("HYBRIDLA_LU__NBB", "3")
    fresh_config.setenv("HYBRIDLA_CHO__TAIL", "0")
    fresh_config.setenv("HYBRIDLA_CONFIG_DIR", str(tmp_path))  # locates files: not a key
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        config.config.refresh(paths=[str(tmp_path)])
        found = _unknown_key_warnings(record)
    assert len(found) == 2, found
    assert "'lu.nbb' in " + str(tmp_path / "tuning.yaml") in found[0]
    assert "'HYBRIDLA_LU__NBB' in the environment" in found[1]
    assert "did you mean 'lu.nb'?" in found[1]
    assert "config_dir" not in config.config.config


def _config_reads():
    """The keys the package reads: the first argument of every call of a function named `get`
    or `_config_get` (config.get, cfg.get, _config.get, ...): strings, and f-strings as patterns
    with each {...} an identifier (f"{routine}.nb" reads lu.nb, cho.nb, ...)."""
    literals, patterns = set(), set()
    for path in (ROOT / "hybridla").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args and getattr(
                    node.func, "attr", getattr(node.func, "id", None)) in ("get", "_config_get")):
                continue
            key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                literals.add(key.value)
            elif isinstance(key, ast.JoinedStr):
                patterns.add("".join(
                    re.escape(part.value) if isinstance(part, ast.Constant) else r"[a-z_]+"
                    for part in key.values))
    return literals, patterns


def test_every_default_key_is_read_somewhere():
    """A key in defaults.yaml that no code names (cpu.panel_threads, device.id were such) is a
    setting that does nothing: each must appear as a string, or match an f-string such as
    f"{routine}.nb", in the package."""
    literals, patterns = _config_reads()
    unread = [key for key in sorted(config.KNOWN_KEYS - {"tuning"})
              if key not in literals and not any(re.fullmatch(p, key) for p in patterns)]
    assert unread == []
    assert "cpu.panel_threads" not in config.KNOWN_KEYS and "device.id" not in config.KNOWN_KEYS


# -- a GPU that cannot be used: one warning ------------------------------------------------------

@pytest.fixture
def unusable_gpu(monkeypatch):
    monkeypatch.setattr(backends, "_cuda_unavailable_reason",
                        lambda: "PyCUDA / nvmath-python not importable (ModuleNotFoundError)")
    monkeypatch.setattr(backends, "gpu_present", lambda: "/dev/nvidia0")
    monkeypatch.setattr(backends, "_warned", False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return monkeypatch


def test_a_gpu_that_cannot_be_used_warns_once(unusable_gpu):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert backends.resolve_name("auto") == "host"
        assert backends.resolve_name(None) == "host"
        hybridla.lu_factor(np.eye(8) + 1, backend="auto")
    found = [w for w in record if issubclass(w.category, RuntimeWarning)]
    assert len(found) == 1
    message = str(found[0].message)
    assert "/dev/nvidia0" in message and "not importable" in message
    assert 'pip install "hybridla[cuda]"' in message and "HYBRIDLA_BACKEND=host" in message


@pytest.mark.parametrize("case", ["host asked for", "no gpu", "gpus hidden"])
def test_no_warning_without_a_gpu_or_when_the_cpu_is_asked_for(unusable_gpu, case):
    name = "host" if case == "host asked for" else "auto"
    if case == "no gpu":
        unusable_gpu.setattr(backends, "gpu_present", lambda: None)
    if case == "gpus hidden":
        unusable_gpu.setenv("CUDA_VISIBLE_DEVICES", "")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert backends.resolve_name(name) == "host"
    assert [w for w in record if issubclass(w.category, RuntimeWarning)] == []


# -- logging -------------------------------------------------------------------------------------

def test_the_backend_and_the_plan_are_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="hybridla"):
        hybridla.lu_factor(np.eye(50) + 1, backend="host", nb=16, lookahead=2)
        backends.resolve_name("auto")
    plans = [r.getMessage() for r in caplog.records if r.name == "hybridla.plan"]
    assert plans and plans[0].startswith("plan lu 50x50 float64 on host")
    assert "nb 16, lookahead 2" in plans[0] and "host transfer none" in plans[0]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "hybridla.plan")
    assert any(r.name == "hybridla.backend" and "backend 'auto' -> " in r.getMessage()
               for r in caplog.records)


def test_importing_and_running_configures_no_logging():
    code = textwrap.dedent("""
        import logging, numpy as np, hybridla
        hybridla.lu_factor(np.eye(20) + 1)
        log = logging.getLogger("hybridla")
        print(len(logging.getLogger().handlers), [type(h).__name__ for h in log.handlers],
              log.level, log.propagate)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.split() == ["0", "['NullHandler']", "0", "True"]


# -- packaging -----------------------------------------------------------------------------------

def test_the_ci_minimum_versions_are_the_declared_floors():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", d).groups()
                  for d in project["dependencies"])
    pins = dict(line.split("==") for line in (ROOT / ".ci" / "minimum-versions.txt")
                .read_text().splitlines() if line and not line.startswith("#"))
    from packaging.version import Version
    assert {k.lower(): Version(v) for k, v in floors.items()} == \
        {k.lower(): Version(v) for k, v in pins.items()}
    assert "pyyaml" in floors and "dask" in floors
    assert tuple(int(x) for x in floors["dask"].split(".")[:2]) >= (2025, 1)  # dask.task_spec


def test_typed_marker_and_license_ship():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["hybridla"]
    assert (ROOT / "hybridla" / "py.typed").exists()
    assert pyproject["project"]["license"] == "BSD-3-Clause"
    license_text = (ROOT / "LICENSE").read_text()
    assert "Copyright (c) 2026, the hybridla developers" in license_text
    assert "Redistribution and use in source and binary forms" in license_text
    # one source for the version: hybridla/_version.py, which the package metadata reads
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "hybridla._version.__version__"}
    assert importlib.metadata.version("hybridla") == hybridla.__version__
