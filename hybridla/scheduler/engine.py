"""Execute a TaskGraph on a backend through Dask's threaded scheduler.

Dask orders the host side: a task starts once the tasks it depends on have *started their device
work* (GPU and copy tasks only enqueue and return) or *finished* (CPU tasks). CUDA events order
the device side: a device task first makes its stream wait for the events its dependencies
recorded. A CPU task that depends on device work waits for those events on the host — the only
host waits inside a factorization, and each one is for data the CPU is about to read.

Who runs the tasks: on the host backend, the `workers` threads, in Dask's priority order. On a
device backend the CPU tasks get the `workers` threads and each device lane a thread of its own,
which enqueues the lane's tasks in the order they become ready, or, for the graph's
`ordered_lanes`, in the order they were recorded (graph.py says why). An enqueue can block: CUDA's
queue of a stream is finite, and the host runs far ahead of a stream that waits (for a panel
from another GPU, say), as can an NCCL call. With one pool for both, blocked enqueues could hold
every thread, and the CPU's copies stopped with them: for 0.23-0.51 s in the distributed LU at
n = 65536 on 2 GPUs, and not at all with a thread per lane (perf/RESULTS.md, issue 32, stop
44). A blocked enqueue now holds only its own lane, whose stream is full anyway. A
device task's call that takes longer than `SLOW_CALL_S`, and every collective's, shows in the
trace on a host lane of its own ("call:gpu:update"; trace.py counts it as neither CPU nor GPU
work).

A task that raises marks the run failed; tasks not yet started then skip, and `run` waits for
those in flight before re-raising, so the caller can free device memory safely.

Recording a whole factorization's graph and letting Dask order it takes milliseconds of host
time, in which the GPU would have nothing to do. Given the recording itself (an iterator that
adds one step's tasks per item), `run` starts the first `head_steps` steps on the workers and
records the rest meanwhile, handing each stretch recorded to the workers once the one before
it has been handed out: the tasks are recorded in order and depend only on earlier ones, so a
segment is complete once recorded, and needs from the segments before it only what they leave
behind (their events; their host side has returned).
"""
from __future__ import annotations

import functools

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import dask.local
import dask.threaded
from dask.task_spec import Task as DaskTask, TaskRef

from .progress import FinishedWork
from .trace import Trace

# a device task's call (its enqueue) this long or longer shows in the trace (module docstring)
SLOW_CALL_S = 2e-3


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
        self.progress: FinishedWork | None = None  # reports tasks as their work finishes
        self.started = threading.Event()  # a task has started (or there was none to start)

    def cpu_lane_name(self) -> str:
        ident = threading.get_ident()
        with self.idle:
            return self.worker_names.setdefault(ident, f"cpu:{len(self.worker_names)}")

    def execute(self, index, *_dependencies):
        self.started.set()
        with self.idle:  # counted before the check: a failure's wait_for_in_flight sees it
            self.in_flight += 1
        try:
            if self.failure is not None:
                return None  # a task failed: the rest of the graph is skipped
            self._execute(self.graph.tasks[index])
            if self.progress is not None:  # now (CPU work) or once its device event completes
                self.progress.done(self.graph.tasks[index], self.events.get(index))
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
        if _on_device(self.backend, task):
            lane = self.backend.lane(task.lane)
            with lane:
                lane.wait_for(waits)
                start = lane.record()
                t0 = time.perf_counter()
                task.fn(lane)
                t1 = time.perf_counter()
                end = lane.record()
            self.events[task.index] = end
            self.device_timings.append((task, task.lane, start, end))
            if task.lane.startswith("comm:") or t1 - t0 >= SLOW_CALL_S:
                # the call itself (not its device work) on a lane of its own: a call that does
                # not return at once holds its lane's host thread (CUDA's queue of the stream
                # full; NCCL's of operations)
                self.trace.add(task.name, f"call:{task.lane}", t0 - self.origin_time,
                               t1 - self.origin_time, step=task.step)
        else:
            if any(w is not None for w in waits):
                if task.enqueues_on is not None:  # the device orders it after its inputs
                    with self.backend.lane(task.enqueues_on) as lane:
                        lane.wait_for(waits)
                else:  # the CPU is about to read what the device wrote
                    self.backend.host_wait(waits)
            # a collective between workers keeps its own lane in the trace ("comm:bcast"),
            # whichever thread runs it
            lane_name = task.lane if task.lane.startswith("comm:") else self.cpu_lane_name()
            t0 = time.perf_counter()
            task.fn(self.backend.lane(lane_name))
            t1 = time.perf_counter()
            self.events[task.index] = None
            self.trace.add(task.name, lane_name, t0 - self.origin_time, t1 - self.origin_time,
                           step=task.step, flops=task.flops, bytes=task.bytes)

    def wait_for_in_flight(self):
        with self.idle:
            self.idle.wait_for(lambda: self.in_flight == 0)


def run(graph, backend, *, workers: int = 4, trace: Trace | None = None, progress=None,
        recording=None, head_steps: int = 0, segments: bool = False, settings=None) -> Trace:
    """Execute every task of `graph`; return the trace. Raises the first task failure after all
    running tasks have returned and the device is idle. `progress(task)`, if given, is called
    once per task when its work has finished, not when it is queued: a CPU task when it
    returns, a device task when the event recorded after its work completes (the progress
    bars; progress.py). `recording`, if given, is the iterator that records `graph` step by
    step: its first `head_steps` steps run while it records the rest; with `segments`, each
    stretch recorded meanwhile runs too, once the one before it has been handed out
    (_execute_while_recording).
    `settings`: the plan's DeviceSettings, for the backend's run (None: its defaults)."""
    trace = trace if trace is not None else Trace()
    state = _Run(graph, backend, trace)
    state.progress = None if progress is None else FinishedWork(progress, backend)
    if recording is not None and head_steps <= 0:
        began = time.perf_counter()
        for _ in recording:
            pass
        trace.recording_s = time.perf_counter() - began
        recording = None
    backend.begin_run(workers, settings)
    try:
        return _run(state, graph, backend, workers, trace, recording, head_steps, segments)
    finally:
        if state.progress is not None:
            state.progress.close()
        backend.end_run()


def _on_device(backend, task) -> bool:
    """Whether `task` enqueues on a device lane (else it is CPU work, a thread's own)."""
    return backend.has_device and not task.lane.startswith("cpu")


class _Workers(threading.local):
    """Per calling thread: the Dask worker pools (by size) and the device lanes' threads (by
    lane), shared by a run's head and rest so that one worker keeps one trace lane, and the
    thread that runs the head meanwhile."""

    def __init__(self):
        self.pools = {}
        self.lane_threads = {}
        self.head_runner = None

    def pool(self, workers):
        if workers not in self.pools:
            self.pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="hybridla")
        return self.pools[workers]

    def runner(self):
        if self.head_runner is None:
            self.head_runner = ThreadPoolExecutor(1, thread_name_prefix="hybridla-head")
        return self.head_runner


_workers = _Workers()


class _Dispatch:
    """Where a run's tasks run (module docstring): `pool`, the `workers` threads, for all of
    them on the host backend; on a device backend for the CPU tasks only, each device lane's
    tasks going to its thread of `lane_threads` (made here on a lane's first task)."""

    def __init__(self, graph, backend, pool, lane_threads):
        self.graph, self.backend, self.pool = graph, backend, pool
        self.lane_threads = lane_threads

    def get(self, dsk):
        if not self.backend.has_device:
            dask.threaded.get(dsk, list(dsk), pool=self.pool)
            return
        # every ready task is handed over at once (as many in flight as there are tasks): a
        # device lane's thread takes its own in turn, the pool the CPU tasks as its threads free
        dask.local.get_async(self._submit, max(len(dsk), 1), dsk, list(dsk), chunksize=1)

    def _submit(self, fn, batch):
        (key, *_), = batch  # chunksize 1: one task a call
        task = self.graph.tasks[key[1]]
        if not _on_device(self.backend, task):
            return self.pool.submit(fn, batch)
        if task.lane not in self.lane_threads:
            self.lane_threads[task.lane] = ThreadPoolExecutor(
                1, thread_name_prefix=f"hybridla-{task.lane}")
        return self.lane_threads[task.lane].submit(fn, batch)


def _execute(state, tasks, dispatch):
    """Run `tasks` (a contiguous slice of the graph) through Dask; their dependencies on tasks
    before the slice are left out: those have run, and their events are in `state`."""
    if not tasks:
        return
    first = tasks[0].index
    on_lane = _lane_predecessors(state.graph, tasks) if dispatch.backend.has_device else {}
    execute = state.execute  # one bound method for all (each lookup makes another object)
    dsk = {("task", t.index): DaskTask(("task", t.index), execute, t.index,
                                       *[TaskRef(("task", d))
                                         for d in sorted({*t.deps, *on_lane.get(t.index, ())})
                                         if d >= first])
           for t in tasks}
    dispatch.get(dsk)


def _lane_predecessors(graph, tasks) -> dict:
    """task index -> (the task recorded before it on its lane,), for the lanes of
    graph.ordered_lanes: a task of such a lane is handed to the lane's thread only once that
    one has been, so the lane's stream gets them in the order they were recorded."""
    previous, predecessors = {}, {}
    for task in tasks:
        if task.lane in graph.ordered_lanes:
            if task.lane in previous:
                predecessors[task.index] = (previous[task.lane],)
            previous[task.lane] = task.index
    return predecessors


def _execute_head(state, tasks, dispatch):
    try:
        _execute(state, tasks, dispatch)
    finally:
        state.started.set()


def _execute_while_recording(state, graph, recording, head_steps, dispatch, segments):
    """Run the graph as it is recorded: the first `head_steps` steps, then (with `segments`),
    each time the segment running has been handed out, every step recorded meanwhile; the
    rest once the whole graph is recorded. A segment starts only once the one before it has
    returned on the host (its tasks enqueued or done): its tasks' dependencies on earlier
    segments are then met (their events recorded). With the head only, the GPUs waited for the
    recording: 210-280 ms of the distributed Cholesky's 1.38-1.46 s engine span at n = 65536
    on 2 GPUs (perf/RESULTS.md, issue 32, stop 48); with segments its engine ran 1.19 s against
    1.23 s (stop 49), the one-GPU Cholesky and LU unchanged (scheduler.record_segments, on by
    default)."""
    for _ in itertools.islice(recording, head_steps):
        pass
    done = len(graph.tasks)
    running = _workers.runner().submit(_execute_head, state, graph.tasks[:done], dispatch)
    try:
        # The head starts before recording goes on, and each recorded step yields the GIL
        # (sleep(0)) so that the workers enqueue what is ready. The switch interval is left alone:
        # it is process-wide, and a call leaves no trace on the process (nor races another
        # call's restore of it).
        state.started.wait()
        for _ in recording:
            time.sleep(0)
            if segments and running.done() and len(graph.tasks) > done:
                running.result()  # a failed segment raises here
                running = _workers.runner().submit(_execute, state,
                                                   graph.tasks[done:], dispatch)
                done = len(graph.tasks)
    except BaseException as exc:
        state.failure = state.failure or exc  # the running segment's tasks not yet started skip
        raise
    finally:
        wait([running])  # the segment's tasks have returned before we go on, or raise
    running.result()
    _execute(state, graph.tasks[done:], dispatch)


def _run(state, graph, backend, workers, trace, recording, head_steps, segments):
    if backend.has_device:
        backend.synchronize()  # a clean origin for the device clock (not inside the run)
        origin_lane = backend.lane("gpu:update")
        with origin_lane:
            state.origin_event = origin_lane.record()
    state.origin_time = time.perf_counter()
    # the origin on the wall clock: traces of runs in other processes line up by it
    trace.wall_origin = time.time()
    dispatch = _Dispatch(graph, backend, _workers.pool(workers), _workers.lane_threads)
    try:
        if recording is None:
            _execute(state, graph.tasks, dispatch)
        else:
            _execute_while_recording(state, graph, recording, head_steps, dispatch, segments)
    except BaseException:
        state.wait_for_in_flight()
        backend.synchronize()  # nothing may still write to memory the caller is about to free
        raise
    if backend.has_device:
        backend.synchronize()  # device times are read from events, which must have completed
        trace.add_later(functools.partial(_device_records, backend, state))
    if state.progress is not None:
        state.progress.finish()  # the device is idle: every task's work has finished
    return trace


def _device_records(backend, state):
    """The GPU tasks' trace records, from their events (Trace.add_later: when first read)."""
    backend.context.push()
    try:
        return [(task.name, lane, start.time_since(state.origin_event) / 1e3,
                 end.time_since(state.origin_event) / 1e3, task.step, task.flops, task.bytes)
                for task, lane, start, end in state.device_timings]
    finally:
        backend.context.pop()
