"""Progress bars: every long routine takes progress=True, and a task counts when its work has
finished (a device task: when its CUDA event completes), not when it is queued
(hybridla/scheduler/progress.py, engine.run)."""
from __future__ import annotations

import sys
import threading
import time
import types

import numpy as np
import pytest

import hybridla
from hybridla.scheduler import Region, TaskGraph, run
from hybridla.scheduler import progress as progress_module


class FakeBar:
    """tqdm as plan.progress_bar uses it, keeping what it was told."""

    bars: list = []

    def __init__(self, total=None, desc=None, **kwargs):
        self.total, self.desc, self.n, self.closed = total, desc, 0, False
        FakeBar.bars.append(self)

    def update(self, n=1):
        assert not self.closed, f"{self.desc}: updated after it was closed"
        self.n += n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True
        return False


@pytest.fixture
def bars(monkeypatch):
    FakeBar.bars = []
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeBar))
    return FakeBar.bars


def _spd(a):
    return a @ a.T + a.shape[0] * np.eye(a.shape[0])


# routine -> (call, the bars it shows, in order: one per engine run)
ROUTINES = {
    "lu_factor": (lambda a, b, **o: hybridla.lu_factor(a, **o), ["getrf"]),
    "cho_factor": (lambda a, b, **o: hybridla.cho_factor(_spd(a), **o), ["potrf"]),
    "cholesky": (lambda a, b, **o: hybridla.cholesky(_spd(a), **o), ["potrf"]),
    "solve": (lambda a, b, **o: hybridla.solve(a, b, **o), ["getrf"]),
    "solve pos": (lambda a, b, **o: hybridla.solve(_spd(a), b, assume_a="pos", **o), ["potrf"]),
    "qr": (lambda a, b, **o: hybridla.qr(a, **o), ["geqrf", "orgqr"]),
    "qr r": (lambda a, b, **o: hybridla.qr(a, mode="r", **o), ["geqrf"]),
    "ql": (lambda a, b, **o: hybridla.ql(a, mode="economic", **o), ["geqlf", "orgql"]),
    "lq": (lambda a, b, **o: hybridla.lq(a, **o), ["gelqf", "orglq"]),
    "geqrf": (lambda a, b, **o: hybridla.geqrf(a, **o), ["geqrf"]),
    "geqlf": (lambda a, b, **o: hybridla.geqlf(a, **o), ["geqlf"]),
    "gelqf": (lambda a, b, **o: hybridla.gelqf(a, **o), ["gelqf"]),
    "lstsq": (lambda a, b, **o: hybridla.lstsq(a, b, **o), ["geqrf", "ormqr"]),
    "lstsq wide": (lambda a, b, **o: hybridla.lstsq(a[:150], b[:150], **o), ["gelqf", "ormlq"]),
    "hessenberg": (lambda a, b, **o: hybridla.hessenberg(a, calc_q=True, **o),
                   ["gehrd", "orgqr"]),
    "gehrd": (lambda a, b, **o: hybridla.gehrd(a, **o), ["gehrd"]),
    "solve_mixed": (lambda a, b, **o: hybridla.solve_mixed(a, b, **o), None),
    "lstsq_mixed": (lambda a, b, **o: hybridla.lstsq_mixed(a, b, **o), None),
}


@pytest.mark.parametrize("routine", list(ROUTINES))
def test_every_long_routine_shows_a_bar_that_completes(routine, backend, bars, rng):
    """progress=True: one bar per engine run, named after the driver, each counting every task
    of its graph by the time it closes; progress=False: none."""
    call, names = ROUTINES[routine]
    a = np.asfortranarray(rng.standard_normal((200, 200)))
    b = rng.standard_normal(200)
    call(a, b, backend=backend, nb=32, progress=True)
    assert bars, f"{routine}: no progress bar"
    for bar in bars:
        assert bar.closed and bar.total > 0 and bar.n == bar.total, \
            (routine, bar.desc, bar.n, bar.total)
    if names is not None:  # (a device run may add runs of its own: the factorization first)
        descs = [bar.desc for bar in bars]
        assert descs == names if backend == "host" else descs[0] == names[0], descs
    bars.clear()
    call(a, b, backend=backend, nb=32)
    assert bars == []


# -- the engine: finished work, not queued work -----------------------------------------------------
class FakeEvent:
    def __init__(self):
        self.done = False

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True


class FakeLane:
    """A stream whose work completes only when the test says so (FakeDevice.complete)."""

    def __init__(self, name):
        self.name, self.events = name, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait_for(self, events):
        pass

    def record(self):
        self.events.append(FakeEvent())
        return self.events[-1]


class FakeDevice:
    """A backend with a device whose work finishes when the test says (or at synchronize)."""

    name = device_name = "fake device"
    has_device = True

    def __init__(self):
        self.lanes = {}
        self.context = types.SimpleNamespace(push=lambda: None, pop=lambda: None)

    def lane(self, name):
        if name.startswith("cpu"):
            from hybridla.backend.host import HostLane
            return HostLane(name)
        return self.lanes.setdefault(name, FakeLane(name))

    def begin_run(self, workers, settings=None):
        pass

    def end_run(self):
        pass

    def synchronize(self):
        for lane in self.lanes.values():
            for event in lane.events:
                event.done = True

    @staticmethod
    def host_wait(events):
        for event in events:
            event.synchronize()


def _wait_until(condition, timeout=10.0):
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_device_tasks_count_when_their_events_complete_not_when_queued(monkeypatch):
    monkeypatch.setattr(progress_module, "POLL_INTERVAL", 0.01)
    device, graph, reported = FakeDevice(), TaskGraph(), []
    ends, queued = {}, threading.Event()

    def enqueue(k):
        def fn(lane):  # the event recorded next closes this task's work
            ends[k] = len(lane.events)
            if k == 2:
                queued.set()
        return fn

    def check(lane):
        assert queued.wait(10)
        time.sleep(0.1)  # ten polls: the three device tasks are queued, none has finished
        assert reported == []
        update = device.lanes["gpu:update"]
        for event in update.events[:ends[0] + 1]:  # the device finishes gemm0's work
            event.done = True
        _wait_until(lambda: reported == ["gemm0"])
        time.sleep(0.05)
        assert reported == ["gemm0"]  # gemm1 and gemm2 still run
    for k in range(3):  # a chain: queued in this order on one stream
        graph.add(f"gemm{k}", k, "gpu:update", enqueue(k), reads=[Region("A", 0, 1, 0, 1)],
                  writes=[Region("A", 0, 1, 0, 1)])
    graph.add("check", 0, "cpu", check, writes=[Region("B", 0, 1, 0, 1)])
    run(graph, device, workers=2, progress=lambda task: reported.append(task.name))
    # the CPU task when it returned, the rest once the run synchronized the device
    assert reported[:2] == ["gemm0", "check"] and sorted(reported[2:]) == ["gemm1", "gemm2"]


def test_host_tasks_count_as_they_return():
    graph, reported = TaskGraph(), []
    for k in range(5):
        graph.add(f"t{k}", k, "cpu", lambda lane, k=k: reported.append(("ran", k)),
                  reads=[Region("A", 0, 1, 0, 1)], writes=[Region("A", 0, 1, 0, 1)])
    run(graph, hybridla.backend.get_backend("host"), workers=2,
        progress=lambda task: reported.append(("done", task.step)))
    assert reported == [item for k in range(5) for item in (("ran", k), ("done", k))]


def test_a_failed_run_stops_the_watcher_and_reports_no_unfinished_work():
    device, graph, reported = FakeDevice(), TaskGraph(), []

    def boom(lane):
        raise RuntimeError("task failed")
    graph.add("queued", 0, "gpu:update", lambda lane: None, writes=[Region("A", 0, 1, 0, 1)])
    graph.add("boom", 0, "cpu", boom, writes=[Region("B", 0, 1, 0, 1)])
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(RuntimeError, match="task failed"):
        run(graph, device, workers=2, progress=lambda task: reported.append(task.name))
    assert "boom" not in reported
    assert "hybridla-progress" not in {t.name for t in threading.enumerate()} - before


@pytest.mark.cuda
def test_on_the_gpu_a_task_is_reported_only_once_its_event_has_completed(cuda_backend, bars,
                                                                          monkeypatch, rng):
    """The real device: whenever the bar advances for a GPU task, the event recorded after
    its work has completed (cuEventQuery), whichever thread reports it."""
    seen, late = {}, []
    done, call = progress_module.FinishedWork.done, progress_module.FinishedWork._call

    def remember(self, task, event):
        seen[id(task)] = event
        done(self, task, event)

    def check(self, task):
        event = seen.get(id(task))
        if event is not None and not event.query():
            late.append(task.name)
        call(self, task)
    monkeypatch.setattr(progress_module.FinishedWork, "done", remember)
    monkeypatch.setattr(progress_module.FinishedWork, "_call", check)
    a = np.asfortranarray(rng.standard_normal((4096, 4096)))
    hybridla.lu_factor(a, backend="cuda", nb=256, progress=True)
    hybridla.qr(a[:, :2048], mode="economic", backend="cuda", nb=256, progress=True)
    assert late == [] and any(event is not None for event in seen.values())
    assert bars and all(bar.n == bar.total for bar in bars)
