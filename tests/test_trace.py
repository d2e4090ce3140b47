import json
import threading

import pytest

from hybridla.scheduler.trace import Trace, interval_union, render


@pytest.mark.parametrize("intervals, expected", [
    ([], 0.0),
    ([(0, 1), (2, 3)], 2.0),            # disjoint
    ([(0, 2), (1, 3)], 3.0),            # overlapping
    ([(0, 10), (2, 3), (4, 5)], 10.0),  # nested
    ([(5, 6), (0, 2), (1, 4)], 5.0),    # unsorted input
    ([(0, 1), (1, 2)], 2.0),            # touching
    ([(1, 1), (3, 3)], 0.0),            # empty intervals
])
def test_interval_union(intervals, expected):
    assert interval_union(intervals) == pytest.approx(expected)


def hand_trace():
    t = Trace()
    t.add("getrf", "cpu:0", 0.0, 2.0, step=0, flops=1e12)
    t.add("gemm", "gpu:update", 1.0, 4.0, step=0, flops=4e12)
    t.add("trsm", "gpu:update", 5.0, 6.0, step=1, flops=1e12)
    t.add("h2d", "copy:h2d", 0.5, 1.0, bytes=1e6)
    t.add("d2h", "copy:d2h", 4.0, 4.5, bytes=2e6)
    return t


def test_summary_hand_built():
    s = hand_trace().summary()
    assert s["tasks"] == 5
    assert s["wall"] == pytest.approx(6.0)
    assert s["gpu_busy"] == pytest.approx(4.0)
    assert s["gpu_idle"] == pytest.approx(2.0)
    assert s["gpu_idle_fraction"] == pytest.approx(2.0 / 6.0)
    assert s["cpu_busy"] == pytest.approx(2.0)
    assert s["overlap"] == pytest.approx(1.0)
    assert s["copy_busy"] == {"d2h": pytest.approx(0.5), "h2d": pytest.approx(0.5)}
    assert s["lanes"]["gpu:update"] == pytest.approx(4.0)
    assert s["flops"] == pytest.approx(6e12)
    assert s["tflops"] == pytest.approx(1.0)


def test_summary_no_double_counting_and_multi_lane_union():
    t = Trace()
    t.add("a", "cpu:0", 0.0, 3.0)
    t.add("b", "cpu:0", 1.0, 2.0)      # nested in the same lane
    t.add("c", "gpu:panel", 2.0, 5.0)
    t.add("d", "gpu:update", 4.0, 6.0)  # overlaps the other GPU stream
    t.add("e", "cpu:1", 5.5, 7.0)
    s = t.summary()
    assert s["lanes"]["cpu:0"] == pytest.approx(3.0)
    assert s["gpu_busy"] == pytest.approx(4.0)           # [2, 6]
    assert s["cpu_busy"] == pytest.approx(4.5)           # [0, 3] + [5.5, 7]
    assert s["overlap"] == pytest.approx(1.0 + 0.5)      # [2, 3] + [5.5, 6]
    assert s["gpu_idle"] == pytest.approx(3.0)
    assert list(s["lanes"]) == ["cpu:0", "cpu:1", "gpu:panel", "gpu:update"]


def test_the_hosts_calls_are_neither_cpu_nor_gpu_work():
    """"call:<lane>" records (a device task's enqueue that took long, scheduler/engine.py) are
    host time: the GPU's busy and idle time and the CPU's come from the other lanes alone."""
    t = Trace()
    t.add("update", "gpu:update", 0.0, 1.0)
    t.add("update", "call:gpu:update", 1.0, 4.0)  # blocked while the stream drained
    t.add("stage", "cpu:0", 3.0, 4.0)
    s = t.summary()
    assert s["gpu_busy"] == pytest.approx(1.0) and s["gpu_idle"] == pytest.approx(3.0)
    assert s["cpu_busy"] == pytest.approx(1.0) and s["lanes"]["call:gpu:update"] == 3.0
    # nor tasks: a run's count of them does not depend on which enqueues blocked
    assert s["tasks"] == 2


def test_empty_trace_summary():
    s = Trace().summary()
    assert s["tasks"] == 0 and s["wall"] == 0.0 and s["tflops"] == 0.0
    assert isinstance(Trace().format_summary(), str)


def test_records_sorted_by_start():
    t = Trace()
    t.add("b", "cpu:0", 2.0, 3.0)
    t.add("a", "gpu:update", 0.5, 1.0)
    assert [r["name"] for r in t.records] == ["a", "b"]


def test_records_added_later_are_made_once_at_the_first_read():
    t = Trace()
    calls = []

    def later():
        calls.append(1)
        return [("gemm", "gpu:update", 1.0, 2.0, 3, 5e9, 0.0)]

    t.add_later(later)
    t.add("panel", "cpu:0", 0.0, 1.5)
    assert not calls
    assert len(t) == 2 and calls == [1]
    records = t.records
    assert [r["name"] for r in records] == ["panel", "gemm"] and calls == [1]
    assert records[1]["step"] == 3 and records[1]["flops"] == 5e9
    assert t.summary()["tasks"] == 2


def test_chrome_round_trip(tmp_path):
    t = hand_trace()
    t.add("odd", "cpu:0", 0.1 + 0.2, 1 / 3)  # times not exact in microseconds
    path = tmp_path / "run.json"
    t.to_chrome(path)
    loaded = Trace.load(path)
    keys = ("name", "lane", "start", "end", "step", "flops", "bytes")
    assert [{k: r[k] for k in keys} for r in loaded.records] == \
           [{k: r[k] for k in keys} for r in t.records]


def test_chrome_json_format(tmp_path):
    path = tmp_path / "run.json"
    hand_trace().to_chrome(path)
    events = json.loads(path.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 5
    gemm = next(e for e in complete if e["name"] == "gemm")
    assert gemm["ts"] == pytest.approx(1e6) and gemm["dur"] == pytest.approx(3e6)
    assert gemm["args"]["step"] == 0 and gemm["args"]["flops"] == 4e12
    assert len({e["pid"] for e in events}) == 1
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(names.values()) == {"cpu:0", "gpu:update", "copy:h2d", "copy:d2h"}
    assert names[gemm["tid"]] == "gpu:update"
    order = {names[e["tid"]]: e["args"]["sort_index"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_sort_index"}
    ranked = sorted(order, key=order.get)
    assert ranked[0] == "cpu:0" and ranked[1] == "gpu:update"
    assert set(ranked[2:]) == {"copy:h2d", "copy:d2h"}


def test_gantt_png(tmp_path):
    path = tmp_path / "g.png"
    hand_trace().gantt(path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000


def test_gantt_svg(tmp_path):
    path = tmp_path / "g.svg"
    hand_trace().gantt(path)
    assert b"<svg" in path.read_bytes()


def test_render(tmp_path):
    path = tmp_path / "run.json"
    hand_trace().to_chrome(path)
    text = render(path)
    assert (tmp_path / "run.png").stat().st_size > 0
    assert "wall" in text and "gpu:update" in text
    other = tmp_path / "other.png"
    render(path, out_png=other)
    assert other.stat().st_size > 0


def test_add_thread_safe():
    t = Trace()
    n_threads, per_thread = 8, 1000
    barrier = threading.Barrier(n_threads)

    def work(k):
        barrier.wait()
        for i in range(per_thread):
            t.add("task", f"cpu:{k}", i, i + 0.5, step=i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(t.records) == n_threads * per_thread
    assert t.summary()["lanes"]["cpu:3"] == pytest.approx(per_thread * 0.5)
