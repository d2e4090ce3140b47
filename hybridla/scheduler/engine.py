"""Execute a TaskGraph on a backend through Dask's threaded scheduler.

Dask orders the host side: a task starts once the tasks it depends on have *started their device
work* (GPU and copy tasks only enqueue and return) or *finished* (CPU tasks). CUDA events order
the device side: a device task first makes its stream wait for the events its dependencies
recorded. A CPU task that depends on device work waits for those events on the host — the only
host waits inside a factorization, and each one is for data the CPU is about to read.

A task that raises marks the run failed; tasks not yet started then skip, and `run` waits for
those in flight before re-raising, so the caller can free device memory safely.
"""
from __future__ import annotations

import threading
import time

import dask.threaded
from dask.task_spec import Task as DaskTask, TaskRef

from .trace import Trace


class _Run:
    def __init__(self, graph, backend, trace):
        self.graph, self.backend, self.trace = graph, backend, trace
        self.events = {}          # task index -> the event its device work recorded (or None)
        self.device_timings = []  # (task, lane name, start event, end event)
        self.failure = None
        self.in_flight = 0
        self.idle = threading.Condition()
        self.worker_names = {}
        self.origin_time = None
        self.origin_event = None
        self.progress = None

    def cpu_lane_name(self) -> str:
        ident = threading.get_ident()
        with self.idle:
            return self.worker_names.setdefault(ident, f"cpu:{len(self.worker_names)}")

    def execute(self, index, *_dependencies):
        if self.failure is not None:
            return None  # a task failed: the rest of the graph is skipped
        with self.idle:
            self.in_flight += 1
        try:
            self._execute(self.graph.tasks[index])
            if self.progress is not None:
                self.progress(self.graph.tasks[index])
        except BaseException as exc:
            self.failure = self.failure or exc
            raise
        finally:
            with self.idle:
                self.in_flight -= 1
                self.idle.notify_all()
        return None

    def _execute(self, task):
        waits = [self.events.get(d) for d in task.deps]
        on_device = self.backend.has_device and not task.lane.startswith("cpu")
        if on_device:
            lane = self.backend.lane(task.lane)
            with lane:
                lane.wait_for(waits)
                start = lane.record()
                task.fn(lane)
                end = lane.record()
            self.events[task.index] = end
            self.device_timings.append((task, task.lane, start, end))
        else:
            if any(w is not None for w in waits):
                self.backend.host_wait(waits)  # the CPU is about to read what the device wrote
            lane_name = self.cpu_lane_name()
            t0 = time.perf_counter()
            task.fn(self.backend.lane(lane_name))
            t1 = time.perf_counter()
            self.events[task.index] = None
            self.trace.add(task.name, lane_name, t0 - self.origin_time, t1 - self.origin_time,
                           step=task.step, flops=task.flops, bytes=task.bytes)

    def wait_for_in_flight(self):
        with self.idle:
            self.idle.wait_for(lambda: self.in_flight == 0)


def run(graph, backend, *, workers: int = 4, trace: Trace | None = None, progress=None) -> Trace:
    """Execute every task of `graph`; return the trace. Raises the first task failure after all
    running tasks have returned and the device is idle. `progress(task)`, if given, is called as
    each task is done (the CLI's progress bar)."""
    trace = trace if trace is not None else Trace()
    state = _Run(graph, backend, trace)
    state.progress = progress
    backend.begin_run(workers)
    try:
        return _run(state, graph, backend, workers, trace)
    finally:
        backend.end_run()


def _run(state, graph, backend, workers, trace):
    if backend.has_device:
        backend.synchronize()  # a clean origin for the device clock (not inside the run)
        origin_lane = backend.lane("gpu:update")
        with origin_lane:
            state.origin_event = origin_lane.record()
    state.origin_time = time.perf_counter()
    # task-spec objects directly: Dask's conversion of legacy tuples costs more than running them
    dsk = {("task", t.index): DaskTask(("task", t.index), state.execute, t.index,
                                       *[TaskRef(("task", d)) for d in t.deps])
           for t in graph.tasks}
    try:
        if dsk:
            dask.threaded.get(dsk, list(dsk), num_workers=workers)
    except BaseException:
        state.wait_for_in_flight()
        backend.synchronize()  # nothing may still write to memory the caller is about to free
        raise
    if backend.has_device:
        backend.synchronize()  # device times are read from events, which must have completed
        backend.context.push()
        try:
            for task, lane, start, end in state.device_timings:
                trace.add(task.name, lane, start.time_since(state.origin_event) / 1e3,
                          end.time_since(state.origin_event) / 1e3, step=task.step,
                          flops=task.flops, bytes=task.bytes)
        finally:
            backend.context.pop()
    return trace
