#!/usr/bin/env python3
"""Probe: does a task's host thread wait for the GIL while a distributed worker records its
graph beside the run? A thread makes --calls short calls that release the GIL (libc usleep,
as a ctypes launch releases it, with a little Python between them, as a task's enqueue
does), alone and beside the recording of a distributed Cholesky worker's whole graph (rank 0
of 2, the host backend's store, no data touched), which yields the GIL once per step as
the engine's recording loop does (scheduler/engine._execute_while_recording), then once per
task. Run from the repository root: python3 perf/probes/probe_gil_recording.py
"""
from __future__ import annotations

import argparse
import ctypes
import threading
import time

import numpy as np

from hybridla.backend import get_backend
from hybridla.lapack._dist import AbortingGraph, PanelSlots, WorkerRun
from hybridla.lapack._dist_layout import BlockColumns
from hybridla.lapack.potrf_dist import record_potrf_dist
from hybridla.scheduler import graph as graph_module

_LIBC = ctypes.CDLL(None)


class _NoTransport:  # recording never sends
    def abort(self, reason):
        pass


def record(n, nb):
    ops = get_backend("host")
    from hybridla.scheduler.plan import make_plan
    layout = BlockColumns(n, n, nb, 2)
    plan = make_plan(ops, n, n, np.float64, routine="cho", nb=nb, lookahead=1)
    a = np.empty((n, layout.width(0)), order="F")  # never touched: no memory committed
    run = WorkerRun(ops, plan, _NoTransport(), layout, 0, ops.host_matrix(a, a, nb))
    graph = AbortingGraph(run.transport)
    for _ in record_potrf_dist(graph, run, PanelSlots(ops, n, nb, np.float64, 3)):
        time.sleep(0)  # the engine's yield, once per recorded step


def calls(count, seconds):
    began = time.perf_counter()
    for _ in range(count):
        _LIBC.usleep(5)
        total = 0
        for i in range(20):
            total += i
    seconds.append(time.perf_counter() - began)


def timed(count, n, nb, beside):
    seconds = []
    thread = threading.Thread(target=calls, args=(count, seconds))
    began = time.perf_counter()
    thread.start()
    if beside:
        record(n, nb)
    recording = time.perf_counter() - began
    thread.join()
    return seconds[0], recording


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--nb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    began = time.perf_counter()
    record(opts.n, opts.nb)
    print(f"the recording alone: {(time.perf_counter() - began) * 1e3:.1f} ms")
    for _ in range(opts.repeat):
        alone, _ = timed(opts.calls, opts.n, opts.nb, False)
        beside, recording = timed(opts.calls, opts.n, opts.nb, True)
        print(f"{opts.calls} calls alone {alone * 1e3:.2f} ms, beside the recording "
              f"{beside * 1e3:.2f} ms (the recording {recording * 1e3:.1f} ms)")
    add = graph_module.TaskGraph.add

    def yielding_add(self, *args, **kwargs):
        time.sleep(0)
        return add(self, *args, **kwargs)
    graph_module.TaskGraph.add = yielding_add
    try:
        for _ in range(opts.repeat):
            beside, recording = timed(opts.calls, opts.n, opts.nb, True)
            print(f"{opts.calls} calls beside a recording that yields per task "
                  f"{beside * 1e3:.2f} ms (the recording {recording * 1e3:.1f} ms)")
    finally:
        graph_module.TaskGraph.add = add


if __name__ == "__main__":
    main()
