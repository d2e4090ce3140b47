#!/usr/bin/env python3
"""Probe (issue 32): where a distributed LU worker's recording time goes. On 2 x H100 at
n = 120000 each GPU worker recorded the whole graph of its streamed part for 0.39-0.43 s before
its engine started (perf/RESULTS.md, issue 32, stop 51); the same graph recorded over a stub
store on the CPU machine takes 0.13 s. This records one rank's graph of getrf_dist (no engine,
no transport, no other worker: the graph only) on the given backend, timed (the panel slots
made ahead, PanelSlots.run_ahead, timed apart), then once more under cProfile, and prints the
functions that took the time.

    python3 perf/probes/probe_dist_recording.py                      # cuda, n 120000, nb 512
    python3 perf/probes/probe_dist_recording.py --backend host --n 8192 --nb 64
    python3 perf/probes/probe_dist_recording.py --between none,trim,free --no-profile

--between says what the device memory pools hold before each timed recording: the store's
windows (their pivots, infos, moves) allocate 2,429 small blocks at n = 120000, a cuMemAlloc
each where the pool has none cached (a worker's next call, after its pool was trimmed, until
stop 54 with the small blocks too).

The part is left unwritten (np.empty: recording reads no data), so no host memory is touched.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from hybridla.backend import get_backend  # noqa: E402
from hybridla.backend.host.transfers import ColumnBlocks  # noqa: E402
from hybridla.lapack import _dist  # noqa: E402
from hybridla.lapack.getrf_dist import record_getrf_dist  # noqa: E402
from hybridla.scheduler.plan import make_plan  # noqa: E402


class _NoTransport:
    """Recording calls nothing of the transport's; its lambdas run only when tasks do."""

    def abort(self, message):
        pass


def record_once(ops, plan, layout, part, profile=None):
    """Record rank 0's graph of getrf_dist on `part` (ColumnBlocks); returns (seconds, tasks)."""
    m = layout.m
    home = np.empty(part.shape, part.dtype, order="F")
    A = ops.host_matrix(part, home, plan.nb, settings=plan.device_settings) \
        if ops.has_device else ops.host_matrix(part.stacked(), None, plan.nb)
    slots = _dist.PanelSlots(ops, m, plan.nb, part.dtype, plan.lookahead + 2,
                             plan.device_settings)
    made_ahead = slots.run_ahead
    slots_s = []

    def run_ahead(steps):  # timed apart
        start = time.perf_counter()
        made_ahead(steps)
        slots_s.append(time.perf_counter() - start)
    slots.run_ahead = run_ahead
    try:
        run = _dist.WorkerRun(ops, plan, _NoTransport(), layout, 0, A)
        graph = _dist.AbortingGraph(_NoTransport())
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        for _ in record_getrf_dist(graph, run, slots):
            pass
        if profile is not None:
            profile.disable()
        seconds = time.perf_counter() - start
        print(f"  of which the {slots.count} panel slots: {sum(slots_s):.3f} s")
        return seconds, len(graph.tasks)
    finally:
        slots.close()
        A.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--n", type=int, default=120000)
    parser.add_argument("--nb", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--between", default="none",
                        help="before each recording, the device memory pools: none (as the "
                             "last recording left them), trim (to device.pool_max_bytes, as a "
                             "call's end does), free (every cached block back to the driver); "
                             "comma-separated")
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    opts = parser.parse_args(argv)
    ops = get_backend(opts.backend)
    n, nb = opts.n, opts.nb
    layout = _dist.BlockColumns(n, n, nb, opts.workers)
    plan = make_plan(ops, n, n, np.float64, routine="lu", nb=nb, lookahead=1)
    # rank 0's block columns, C-ordered as a dask array's chunks are
    part = ColumnBlocks([np.empty((n, layout.block_width(j))) for j in layout.owned(0)])
    record_once(ops, plan, layout, part)  # warm: the backend's first stores and handles
    for between in opts.between.split(","):
        for _ in range(2):
            if between == "trim":  # what the end of a call does (backend.call)
                ops.trim_cached(plan.device_settings.pool_max_bytes)
            elif between == "free":  # every cached block back to the driver
                ops.free_cached()
            seconds, tasks = record_once(ops, plan, layout, part)
            print(f"recorded {tasks} tasks in {seconds:.3f} s ({opts.backend}, n {n}, nb {nb}; "
                  f"the device memory pools before it: {between})")
    if not opts.profile:
        return
    profile = cProfile.Profile()
    seconds, _ = record_once(ops, plan, layout, part, profile)
    print(f"under cProfile: {seconds:.3f} s")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(20)
    stats.sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
