"""Dependencies derived from read/write sets (hybridla/scheduler/graph.py) and their execution."""
import threading

import pytest

from hybridla.backend import get_backend
from hybridla.scheduler import Region, TaskGraph, run


def A(r0, r1, c0, c1):
    return Region("A", r0, r1, c0, c1)


def noop(lane):
    pass


def test_read_after_write_write_after_read_and_write_after_write():
    g = TaskGraph()
    w = g.add("write", 0, "gpu:update", noop, writes=[A(0, 10, 0, 10)])
    r = g.add("read", 0, "gpu:update", noop, reads=[A(0, 5, 0, 5)])
    w2 = g.add("overwrite", 0, "gpu:update", noop, writes=[A(0, 5, 0, 5)])
    assert r.deps == [w.index]                  # RAW
    assert w2.deps == [r.index]                 # WAR (and WAW on w, implied through r)


def test_disjoint_rectangles_do_not_wait_for_each_other():
    g = TaskGraph()
    g.add("rows above", 0, "gpu:update", noop, writes=[A(0, 4, 0, 10)])
    below = g.add("rows below", 0, "gpu:update", noop, writes=[A(4, 10, 0, 10)])
    download = g.add("download rows above", 0, "copy:d2h", noop, reads=[A(0, 4, 0, 10)])
    assert below.deps == [] and download.deps == [0]


def test_reads_do_not_order_reads_and_other_resources_are_separate():
    g = TaskGraph()
    g.add("r1", 0, "cpu", noop, reads=[A(0, 4, 0, 4)])
    r2 = g.add("r2", 0, "cpu", noop, reads=[A(0, 4, 0, 4)])
    p = g.add("pivots", 0, "cpu", noop, writes=[Region("piv", 0, 4)])
    assert r2.deps == [] and p.deps == []


def test_implied_edges_are_dropped():
    g = TaskGraph()
    a = g.add("a", 0, "cpu", noop, writes=[A(0, 4, 0, 4)])
    b = g.add("b", 0, "cpu", noop, reads=[A(0, 4, 0, 4)], writes=[A(4, 8, 0, 4)])
    c = g.add("c", 0, "cpu", noop, reads=[A(0, 8, 0, 4)])
    assert b.deps == [a.index] and c.deps == [b.index]  # c after a through b


def test_run_respects_dependencies_and_reraises_failures():
    order, lock = [], threading.Lock()

    def step(name):
        def fn(lane):
            with lock:
                order.append(name)
        return fn
    g = TaskGraph()
    for k in range(20):  # a chain through one region, with independent side tasks
        g.add(f"chain{k}", k, "cpu", step(("chain", k)), reads=[A(0, 1, 0, 1)],
              writes=[A(0, 1, 0, 1)])
        g.add(f"side{k}", k, "cpu", step(("side", k)), writes=[A(k + 1, k + 2, 5, 6)])
    trace = run(g, get_backend("host"), workers=4)
    chain = [k for kind, k in order if kind == "chain"]
    assert chain == list(range(20)) and len(order) == 40 and len(trace.records) == 40

    def boom(lane):
        raise RuntimeError("task failed")
    g = TaskGraph()
    g.add("ok", 0, "cpu", noop, writes=[A(0, 1, 0, 1)])
    g.add("boom", 0, "cpu", boom, reads=[A(0, 1, 0, 1)], writes=[A(0, 1, 0, 1)])
    after = g.add("after", 0, "cpu", step(("after", 0)), reads=[A(0, 1, 0, 1)])
    order.clear()
    with pytest.raises(RuntimeError, match="task failed"):
        run(g, get_backend("host"), workers=2)
    assert ("after", 0) not in order and after.deps
