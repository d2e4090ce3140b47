#!/usr/bin/env python3
"""Where a run's time went, task by task, from its Chrome trace (config `trace`, or the CLI's
--trace): per lane and task name, the count and the time in them (GPU tasks are timed by events
on their streams), and the lanes' busy time against the run's wall time. The tasks of the
critical path (the "gpu:panel" lane of an LU) show how much of the wall time they fill.

    python3 perf/trace_tasks.py TRACE.json [TRACE.json ...]
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from hybridla.scheduler.trace import Trace


def table(path: str) -> str:
    trace = Trace.load(path)
    summary = trace.summary()
    per_task = defaultdict(lambda: [0, 0.0])
    for r in trace.records:
        entry = per_task[(r["lane"], r["name"])]
        entry[0] += 1
        entry[1] += r["end"] - r["start"]
    lines = [f"{path}: wall {summary['wall'] * 1e3:.1f} ms, GPU idle "
             f"{summary['gpu_idle'] * 1e3:.1f} ms", "",
             "| lane | task | count | time (ms) | of the wall |", "|---|---|---:|---:|---:|"]
    for (lane, name), (count, seconds) in sorted(per_task.items(),
                                                 key=lambda item: (item[0][0], -item[1][1])):
        lines.append(f"| {lane} | {name} | {count} | {seconds * 1e3:.1f} | "
                     f"{100 * seconds / summary['wall']:.0f}% |")
    for lane, busy in summary["lanes"].items():
        lines.append(f"| {lane} | (busy) | | {busy * 1e3:.1f} | "
                     f"{100 * busy / summary['wall']:.0f}% |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    for path in p.parse_args().traces:
        print(table(path), "\n")


if __name__ == "__main__":
    main()
