#!/usr/bin/env python3
"""Probe (issue 32): where a distributed factorization's engine span goes, step by step, read
from a merged trace of perf/distributed.py (lanes "w<rank>/<lane>"). The LU at n = 65536 on
2 GPUs runs 1.68-1.72x our one-GPU call, its update lanes 93-94% busy over the whole span: this
says in which steps the rest is lost. For each stretch of steps (--stretches, as step ranges):
the time per step (from one panel's start to the next's), the owner's panel task, each worker's
update-lane work per step and how busy that lane was over the stretch, and each worker's
update-lane rate (the update tasks' flops over their time, tasks of --min-gflop or more).

    python3 perf/probes/probe_trace_steps.py perf/traces/distributed_lu_cyclic_65536_device_2xh100_3bc8614.json

Reads the trace only: no GPU, no hybridla.
"""
from __future__ import annotations

import argparse
import collections
import json


def lanes_of(path):
    """{lane name: [its complete events]} of a Chrome trace."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lanes = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            lanes[names[(e["pid"], e["tid"])]].append(e)
    return lanes


def busy_within(events, t0, t1):
    """Microseconds of [t0, t1) that the events cover (a lane's events do not overlap)."""
    return sum(max(0.0, min(t1, e["ts"] + e["dur"]) - max(t0, e["ts"])) for e in events)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--stretches", default="0-32,32-64,64-96,96-128",
                        help="step ranges, half-open (default: quarters of 128 steps)")
    parser.add_argument("--min-gflop", type=float, default=100.0)
    opts = parser.parse_args(argv)
    lanes = lanes_of(opts.trace)
    workers = sorted({lane.split("/")[0] for lane in lanes})
    panels = {}  # step -> (start us, duration ms, worker)
    for lane, events in lanes.items():
        if lane.endswith("/gpu:panel"):
            for e in events:
                if e["name"] == "panel":
                    panels[e["args"]["step"]] = (e["ts"], e["dur"] / 1e3, lane.split("/")[0])
    last_end = max(e["ts"] + e["dur"] for events in lanes.values() for e in events)
    origin = min(e["ts"] for events in lanes.values() for e in events)
    print(f"{opts.trace}: {len(panels)} panels, engine span {(last_end - origin) / 1e6:.3f} s")
    print("steps | s | ms/step | panel ms | " +
          " | ".join(f"{w} update ms/step, busy, TFLOP/s" for w in workers))
    for stretch in opts.stretches.split(","):
        first, end = (int(x) for x in stretch.split("-"))
        steps = [s for s in range(first, end) if s in panels]
        if not steps:
            continue
        t0 = panels[steps[0]][0]
        t1 = panels[end][0] if end in panels else last_end
        cells = []
        for w in workers:
            updates = [e for e in lanes[f"{w}/gpu:update"] if first <= e["args"]["step"] < end]
            work = sum(e["dur"] for e in updates) / 1e3 / len(steps)
            big = [e for e in updates if e["args"].get("flops", 0) >= opts.min_gflop * 1e9]
            rate = (sum(e["args"]["flops"] for e in big) / (sum(e["dur"] for e in big) / 1e6)
                    / 1e12) if big else float("nan")
            busy = busy_within(lanes[f"{w}/gpu:update"], t0, t1) / (t1 - t0)
            cells.append(f"{work:.1f}, {busy:.0%}, {rate:.1f}")
        panel_ms = sum(panels[s][1] for s in steps) / len(steps)
        print(f"{first}-{end} | {(t1 - t0) / 1e6:.3f} | {(t1 - t0) / 1e3 / len(steps):.1f} | "
              f"{panel_ms:.2f} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
