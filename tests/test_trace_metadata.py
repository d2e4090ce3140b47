"""A trace's metadata (Chrome JSON, process label, Gantt title) and the chart's colours, minimum
widths and shaded stretches without tasks."""
import json

import matplotlib.colors
import numpy as np

import hybridla
from hybridla.scheduler.plan import make_plan
from hybridla.scheduler.trace import (TASK_COLORS, Trace, describe, render, run_metadata,
                                      task_color)
from hybridla.backend import get_backend


def small_trace(metadata=None):
    t = Trace(metadata=metadata)
    t.add("panel", "cpu:0", 0.0, 0.002, step=0, flops=1e6)
    t.add("update", "gpu:update", 0.002, 0.010, step=0, flops=1e9)
    t.add("panel", "gpu:panel", 0.010, 0.0100001, step=1)  # 0.1 us: too short to see
    t.add("update", "gpu:update", 0.020, 0.030, step=1)     # after 10 ms with no task
    t.add("upload", "copy:h2d", 0.0, 0.001, bytes=1e6)
    return t


def test_run_metadata_goes_into_the_json_and_comes_back(tmp_path):
    plan = make_plan(get_backend("host"), 300, 200, np.float32, routine="lu", nb=48, lookahead=2)
    md = run_metadata(plan, "getrf", (300, 200), np.dtype(np.float32))
    assert md == {"routine": "getrf", "shape": [300, 200], "dtype": "float32", "nb": 48,
                  "lookahead": 2, "panel": "auto", "backend": "host", "device": "host"}
    path = tmp_path / "run.json"
    small_trace().to_chrome(path, metadata=md)
    data = json.loads(path.read_text())
    written = data["metadata"]
    assert {k: written[k] for k in md} == md
    assert written["panels"] == {"cpu": 1, "gpu": 1}  # where the "panel" tasks ran
    assert written["hybridla"] == hybridla.__version__ and written["date"].endswith(" UTC")
    labels = [e for e in data["traceEvents"] if e.get("name") == "process_labels"]
    assert labels[0]["args"]["labels"].startswith(
        "getrf 300 x 200 float32, nb 48, look-ahead 2, panel auto (cpu 1, gpu 1), host")
    assert Trace.load(path).metadata == written
    assert render(path).startswith("run              getrf 300 x 200 float32, nb 48")


def test_metadata_given_wins_over_what_is_derived():
    t = small_trace({"nb": 8, "date": "then"})
    md = t.full_metadata({"nb": 16})
    assert md["nb"] == 16 and md["date"] == "then" and md["panels"] == {"cpu": 1, "gpu": 1}
    assert describe({"panels": {"cpu": 3}}) == "panels cpu 3"
    assert describe({"note": "x"}) == "note x"


def test_one_colour_per_task_kind_in_every_chart():
    assert task_color("panel") == TASK_COLORS["panel"]
    assert task_color("my_new_task") == task_color("my_new_task")
    charts = (small_trace(), Trace([{"name": "update", "lane": "cpu:0", "start": 0.0,
                                     "end": 1.0, "step": 0, "flops": 0.0, "bytes": 0.0}]))
    for trace in charts:  # "update" is the third kind in one, the only one in the other
        legend = trace.gantt_figure().axes[0].get_legend()
        colors = {text.get_text(): handle.get_facecolor()
                  for text, handle in zip(legend.get_texts(), legend.legend_handles)}
        assert matplotlib.colors.same_color(colors["update"], TASK_COLORS["update"])
    assert len(TASK_COLORS) == len(set(TASK_COLORS.values()))  # distinct kinds, distinct colours


def test_short_tasks_keep_a_minimum_width_and_idle_stretches_are_shaded():
    t = small_trace({"routine": "getrf", "nb": 32})
    assert t.idle_gaps() == [(0.0100001, 0.020)]
    ax = t.gantt_figure().axes[0]
    widths = [path.get_extents().width for bars in ax.collections for path in bars.get_paths()]
    wall_ms = 30.0
    assert min(widths) >= wall_ms / 750 * 0.99  # the 0.1 us panel too
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "no task running\n(host: recording, waits)" in labels
    assert any(text.get_text().startswith("no task") for text in ax.texts)
    assert ax.get_title().startswith("getrf, nb 32, panels cpu 1, gpu 1, hybridla ")
    assert "wall 30.000 ms" in ax.get_title()
    # a trace without gaps shades nothing
    busy = Trace()
    busy.add("update", "cpu:0", 0.0, 1.0)
    busy.add("panel", "cpu:1", 0.5, 2.0)
    assert busy.idle_gaps() == []
    labels = [text.get_text() for text in busy.gantt_figure().axes[0].get_legend().get_texts()]
    assert labels == ["panel", "update"]


def test_a_calls_trace_says_where_its_time_went_outside_the_run(tmp_path):
    """The call's stretches, in order, in the trace's metadata: together they are the call's
    time but for its start, and the run's stretch is at least the trace's span."""
    import time

    a = np.asfortranarray(np.random.default_rng(3).standard_normal((400, 400)))
    path = tmp_path / "lu.json"
    start = time.perf_counter()
    hybridla.lu_factor(a, backend="host", nb=64, trace=str(path))
    wall = time.perf_counter() - start
    data = json.loads(path.read_text())
    phases = data["metadata"]["call_phases"]
    assert list(phases) == ["checks_and_plan_s", "store_s", "run_s", "close_s",
                            "finite_check_wait_s"]
    assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= wall
    spans = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    span = (max(e["ts"] + e["dur"] for e in spans) - min(e["ts"] for e in spans)) / 1e6
    assert phases["run_s"] >= span
