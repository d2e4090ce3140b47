"""Dependencies derived from read/write sets (hybridla/scheduler/graph.py) and their execution."""
import threading
import time

import numpy as np
import pytest

from hybridla.backend import get_backend
from hybridla.scheduler import Region, TaskGraph, engine, run


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


@pytest.mark.parametrize("seed", range(40))
def test_every_conflicting_pair_is_ordered(seed):
    """Random reads and writes of rectangles across several column buckets, some rows
    rewritten again and again as a right-looking factorization does: every later task that
    conflicts with an earlier one (overlapping, one of them writing) comes after it, directly
    or through others, whatever the graph forgot of the earlier accesses; and no task waits
    for a later one."""
    import random
    rng = random.Random(seed)
    g, accesses = TaskGraph(), []

    def rectangle():
        r0, c0 = rng.randrange(40), rng.randrange(1500)
        return A(r0, rng.randrange(r0 + 1, 41), c0, rng.randrange(c0 + 1, 1600))

    for i in range(70):
        if rng.random() < 0.3:  # rows r0:40 of a wide span, as an update of the trailing rows
            r0, c0 = rng.randrange(40), rng.randrange(600)
            regions = [A(r0, 40, c0, rng.randrange(c0 + 400, 1600))]
        else:
            regions = [rectangle() for _ in range(rng.randrange(1, 3))]
        writes = [x for x in regions if rng.random() < 0.5]
        reads = [x for x in regions if x not in writes]
        g.add(f"t{i}", 0, "cpu", noop, reads=reads, writes=writes)
        accesses.append([(x, False) for x in reads] + [(x, True) for x in writes])
    before = []  # each task's ancestors
    for task in g.tasks:
        assert all(d < task.index for d in task.deps)
        ancestors = set(task.deps)
        for d in task.deps:
            ancestors |= before[d]
        before.append(ancestors)

    def overlap(x, y):
        return x.r0 < y.r1 and y.r0 < x.r1 and x.c0 < y.c1 and y.c0 < x.c1

    for j in range(len(accesses)):
        for i in range(j):
            if any((wi or wj) and overlap(x, y) for x, wi in accesses[i] for y, wj in accesses[j]):
                assert i in before[j], (seed, i, j)


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



def _chain_recording(graph, steps, ran, on_record=lambda step: None):
    """Records one step per item: a chain task through one region and a side task; each chain
    task calls ran(step) when it runs."""
    for k in range(steps):
        on_record(k)
        graph.add(f"chain{k}", k, "cpu", lambda lane, k=k: ran(k), reads=[A(0, 1, 0, 1)],
                  writes=[A(0, 1, 0, 1)])
        graph.add(f"side{k}", k, "cpu", noop, reads=[A(0, 1, 0, 1)],
                  writes=[A(k + 1, k + 2, 5, 6)])
        yield k


def test_the_head_runs_while_the_rest_is_recorded_and_the_rest_after_it():
    """Given the recording, the first head_steps steps run while later ones are still being
    recorded (step 3 is recorded only once step 0 has run: without the overlap this times out),
    and every task runs once, the chain in order, across the head and the rest."""
    graph, order, head_ran = TaskGraph(), [], threading.Event()

    def ran(k):
        order.append(k)
        head_ran.set()

    def on_record(k):
        if k == 3:
            assert head_ran.wait(timeout=30), "the head did not start while the rest was recorded"
    trace = run(graph, get_backend("host"), workers=3,
                recording=_chain_recording(graph, 12, ran, on_record), head_steps=2)
    assert order == list(range(12)) and len(trace.records) == 24


def test_steps_recorded_after_the_head_run_before_the_recording_ends():
    """With segments, each stretch recorded while the one before it runs is handed out once
    that one has returned: step 4's chain task (past the head of 2 steps) runs before step 9
    is recorded (with the rest started only after the whole recording, this times out)."""
    graph, order, past_head = TaskGraph(), [], threading.Event()

    def ran(k):
        order.append(k)
        if k == 4:
            past_head.set()

    def on_record(k):
        if k == 5:
            # The head's segment has returned before step 5 is recorded, so steps 2-5 go out as
            # the next segment. Without this wait, a loaded machine can record every step before
            # the head's thread reports back (CI did once), and nothing is there to hand out.
            # The runner is one thread, first in first out: this no-op runs after the head.
            engine._workers.runner().submit(lambda: None).result(timeout=30)
        if k == 9:
            assert past_head.wait(timeout=30), "no step past the head ran during the recording"
    trace = run(graph, get_backend("host"), workers=3,
                recording=_chain_recording(graph, 12, ran, on_record), head_steps=2,
                segments=True)
    assert order == list(range(12)) and len(trace.records) == 24


@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("head_steps", [0, 1, 5, 50])
def test_any_head_runs_every_task_once_in_order(head_steps, segments):
    graph, order = TaskGraph(), []
    trace = run(graph, get_backend("host"), workers=2,
                recording=_chain_recording(graph, 8, order.append), head_steps=head_steps,
                segments=segments)
    assert order == list(range(8)) and len(trace.records) == 16



def test_a_failing_head_task_stops_the_rest():
    def boom(lane):
        raise RuntimeError("task failed")
    graph, order = TaskGraph(), []
    steps = _chain_recording(graph, 6, order.append)
    next(steps)  # step 0, then a failing task that the later chain tasks depend on
    graph.add("boom", 0, "cpu", boom, reads=[A(0, 1, 0, 1)], writes=[A(0, 1, 0, 1)])
    with pytest.raises(RuntimeError, match="task failed"):
        run(graph, get_backend("host"), workers=2, recording=steps, head_steps=1)
    assert order == [0]


def test_a_failing_recording_surfaces_once_the_head_has_returned():
    """A recording that raises (a bug in an algorithm) while the head runs: the error surfaces,
    and only after every head task that started has returned (the caller frees memory next)."""
    started, finished = [], []

    def slow(k):
        started.append(k)
        time.sleep(0.05)
        finished.append(k)

    def broken(k):
        if k == 3:
            raise ValueError("recording broke")
    graph = TaskGraph()
    with pytest.raises(ValueError, match="recording broke"):
        run(graph, get_backend("host"), workers=2,
            recording=_chain_recording(graph, 6, slow, broken), head_steps=2)
    assert started == finished and set(started) <= {0, 1}


class _Event:
    """What a pretend device's lane records: a token (a CUDA event on the cuda backend)."""

    def time_since(self, other):
        return 0.0


class _PretendDeviceLane:
    def __init__(self, name, waits):
        self.name, self._waits = name, waits

    def wait_for(self, events):
        events = [e for e in events if e is not None]
        if events:
            self._waits.append(("on the stream of " + self.name, events))

    def record(self):
        return _Event()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _PretendDevice(type(get_backend("host"))):
    """The host backend claiming a device: its lanes record events and log every wait for
    them, on a stream or on the host."""

    has_device = True

    def __init__(self):
        super().__init__()
        self.waits = []
        self.context = type("Context", (), {"push": staticmethod(lambda: None),
                                            "pop": staticmethod(lambda: None)})

    def lane(self, name):
        return self.lanes.setdefault(name, _PretendDeviceLane(name, self.waits))

    def host_wait(self, events):
        events = [e for e in events if e is not None]
        if events:
            self.waits.append(("on the host", events))


def test_a_cpu_task_that_enqueues_on_a_lane_waits_for_its_inputs_there_not_on_the_host():
    """Task.enqueues_on (gehrd's panel loop): the CPU task's device inputs are waited for on
    the named lane's stream, so that it enqueues while they are computed; a CPU task without
    it waits on the host, as it reads what the device wrote."""
    backend = _PretendDevice()
    g = TaskGraph()
    g.add("update", 0, "gpu:update", noop, writes=[A(0, 4, 0, 4)])
    g.add("panel", 1, "cpu", noop, reads=[A(0, 4, 0, 4)], writes=[A(0, 4, 4, 5)],
          enqueues_on="gpu:panel")
    g.add("host reads", 2, "cpu", noop, reads=[A(0, 4, 0, 4)])
    run(g, backend, workers=2)
    assert sorted(where for where, events in backend.waits) == [
        "on the host", "on the stream of gpu:panel"]
    assert all(len(events) == 1 for where, events in backend.waits)


def test_device_enqueues_that_block_hold_their_own_lanes_not_the_cpu_tasks():
    """On a device backend each device lane enqueues on a thread of its own (engine.py): an
    enqueue that blocks (CUDA's queue of a stream full while the stream waits) holds its lane
    only, and the CPU tasks (the staging copies) run on. Here six enqueues on three lanes block
    until the last of a chain of CPU tasks releases them; with the two workers shared by
    every task they held both, and the chain never got to run."""
    backend = _PretendDevice()
    released, seen = threading.Event(), []

    def blocked(lane):
        seen.append(released.wait(5.0))

    g = TaskGraph()
    for i, lane in enumerate(("gpu:update", "gpu:panel", "copy:h2d") * 2):
        g.add("enqueue", 0, lane, blocked, writes=[A(i, i + 1, 0, 1)])
    for i in range(8):
        g.add("stage", i, "cpu", noop, writes=[A(i, i + 1, 1, 2)], chain="stage")
    g.add("release", 8, "cpu", lambda lane: released.set(), chain="stage")
    run(g, backend, workers=2)
    assert seen == [True] * 6


def test_a_failing_device_task_stops_the_tasks_queued_on_every_lane():
    """On a device backend the tasks that depend on a failed one, queued on the lanes' own
    threads, are skipped, during the run and after it has raised."""
    backend, ran = _PretendDevice(), []

    def boom(lane):
        raise RuntimeError("task failed")
    g = TaskGraph()
    g.add("boom", 0, "gpu:update", boom, writes=[A(0, 1, 0, 1)])
    for i, lane in enumerate(("gpu:update", "gpu:panel", "copy:d2h", "cpu")):
        g.add("after", 1, lane, lambda lane, i=i: ran.append(i), reads=[A(0, 1, 0, 1)],
              writes=[A(i + 1, i + 2, 0, 1)])
    with pytest.raises(RuntimeError, match="task failed"):
        run(g, backend, workers=2)
    time.sleep(0.1)
    assert ran == []


def test_a_device_tasks_slow_call_leaves_a_record_on_its_call_lane():
    """A device task whose call (its enqueue) takes SLOW_CALL_S or more shows on the host lane
    "call:<lane>" beside its device record; a quick one does not."""
    from hybridla.scheduler.engine import SLOW_CALL_S

    backend = _PretendDevice()
    g = TaskGraph()
    g.add("slow", 0, "gpu:update", lambda lane: time.sleep(2 * SLOW_CALL_S),
          writes=[A(0, 1, 0, 1)])
    g.add("quick", 0, "gpu:panel", noop, writes=[A(1, 2, 0, 1)])
    trace = run(g, backend, workers=2)
    calls = [(r["name"], r["lane"]) for r in trace.records if r["lane"].startswith("call:")]
    assert calls == [("slow", "call:gpu:update")]


def test_record_segments_from_the_configuration():
    """scheduler.record_segments reaches the plan (on by default; an environment variable's
    "true" and "false" read as booleans) and anything else is refused by name."""
    import hybridla
    from hybridla.scheduler.plan import make_plan
    host = get_backend("host")
    assert make_plan(host, 10, 10, np.float64, routine="lu").record_segments is True
    for value, expected in [(True, True), (1, True), ("true", True), ("True", True),
                            (False, False), (0, False), ("false", False), ("FALSE", False)]:
        with hybridla.config.set({"scheduler.record_segments": value}):
            assert make_plan(host, 10, 10, np.float64,
                             routine="lu").record_segments is expected
    with hybridla.config.set({"scheduler.record_segments": "sometimes"}):
        with pytest.raises(ValueError, match="scheduler.record_segments"):
            make_plan(host, 10, 10, np.float64, routine="lu")


def test_follows_orders_a_task_after_given_tasks_without_a_region():
    """`follows=`: a dependency on named tasks though the regions are apart."""
    g = TaskGraph()
    first = g.add("update", 0, "gpu:update", noop, writes=[A(0, 4, 4, 8)])
    g.add("other", 0, "gpu:update", noop, writes=[A(0, 4, 8, 12)])
    left = g.add("swap_left", 0, "gpu:update", noop, writes=[A(0, 4, 0, 4)])
    after = g.add("swap_left", 0, "gpu:update", noop, writes=[A(0, 4, 12, 16)],
                  follows=[first])
    assert left.deps == [] and after.deps == [first.index]


@pytest.mark.parametrize("ordered", [True, False])
def test_an_ordered_lane_enqueues_in_recorded_order(ordered):
    """graph.ordered_lanes on a device backend: a lane's task ready on the host early (its
    inputs enqueued) is handed to the lane's thread only after the task recorded before it
    there, which here waits for a slow CPU task. A lane not ordered takes them as they become
    ready, the later one first (what let the distributed QR's larft of the next step go ahead
    of its look-ahead column)."""
    backend = _PretendDevice()
    enqueued = []
    g = TaskGraph()
    if ordered:
        g.ordered_lanes = ("gpu:panel",)
    g.add("slow cpu", 0, "cpu", lambda lane: time.sleep(0.3), writes=[A(0, 1, 0, 1)])
    g.add("look-ahead column", 0, "gpu:panel", lambda lane: enqueued.append("column"),
          reads=[A(0, 1, 0, 1)], writes=[A(0, 1, 1, 2)])
    g.add("larft of the next step", 1, "gpu:panel", lambda lane: enqueued.append("larft"),
          writes=[A(0, 1, 2, 3)])
    run(g, backend, workers=2)
    assert enqueued == (["column", "larft"] if ordered else ["larft", "column"])
