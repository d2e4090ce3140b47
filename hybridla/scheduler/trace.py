"""Execution traces: one record per executed task, Chrome JSON export, summary, Gantt chart.

A record is a dict (see docs/INTERNALS.md, "Trace records"):

    {"name": "gemm", "step": 3, "lane": "gpu:update", "start": 0.0123, "end": 0.0150,
     "flops": 1.2e9, "bytes": 0.0}

Times are seconds from the start of the run. Lanes starting with "cpu:" are CPU compute,
"gpu:" GPU compute, "copy:" transfers.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

_GROUP_ORDER = ("cpu", "gpu", "copy")
_PID = 1


def _merge(intervals):
    """Sorted, disjoint list of (start, end) covering the same points as ``intervals``."""
    merged = []
    for start, end in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1][1] = end
        else:
            merged.append([start, end])
    return merged


def interval_union(intervals) -> float:
    """Total length covered by the union of ``(start, end)`` pairs; empty intervals count 0."""
    return sum(end - start for start, end in _merge(intervals))


def _intersection_length(a, b) -> float:
    """Length of the intersection of two merged (sorted, disjoint) interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        # Advance whichever interval ends first: it cannot meet anything further on.
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _lane_key(lane: str):
    """Sort key putting cpu:* before gpu:* before copy:*, with cpu:2 before cpu:10."""
    group, _, rest = lane.partition(":")
    rank = _GROUP_ORDER.index(group) if group in _GROUP_ORDER else len(_GROUP_ORDER)
    return (rank, group, (0, int(rest), "") if rest.isdigit() else (1, 0, rest))


class Trace:
    """Thread-safe collection of task records from one run."""

    def __init__(self, records=None):
        self._lock = threading.Lock()
        self._records = [dict(r) for r in records] if records else []
        self._later = []  # add_later's callables, not yet called

    @staticmethod
    def _record(name, lane, start, end, step=None, flops=0.0, bytes=0.0):  # noqa: A002
        return {"name": str(name), "step": None if step is None else int(step),
                "lane": str(lane), "start": float(start), "end": float(end),
                "flops": float(flops), "bytes": float(bytes)}

    def add(self, name, lane, start, end, *, step=None, flops=0.0, bytes=0.0):  # noqa: A002
        """Record one executed task; safe to call from any worker thread."""
        record = self._record(name, lane, start, end, step, flops, bytes)
        with self._lock:
            self._records.append(record)

    def add_later(self, records) -> None:
        """Records that cost something to make, made when the trace is first read: `records()`
        returns an iterable of `add`'s arguments as tuples (name, lane, start, end, step, flops,
        bytes). The engine's GPU tasks: reading their hundreds of event pairs took 0.8 ms of a
        mixed solve's host time between its factorization and its refinement (H100, n =
        32768), where nobody reads the trace unless asked to."""
        with self._lock:
            self._later.append(records)

    def _settled(self) -> list:
        """The records, add_later's included (the caller holds the lock)."""
        while self._later:
            self._records.extend(self._record(*r) for r in self._later.pop(0)())
        return self._records

    @property
    def records(self) -> list:
        """Copy of the records, sorted by start time."""
        with self._lock:
            snapshot = list(self._settled())
        return sorted(snapshot, key=lambda r: (r["start"], _lane_key(r["lane"])))

    def __len__(self):
        with self._lock:
            return len(self._settled())

    def lanes(self) -> list:
        """Lane names in display order: cpu:*, gpu:*, copy:*, anything else."""
        return sorted({r["lane"] for r in self.records}, key=_lane_key)

    # -- Chrome trace event format ------------------------------------------------------

    def to_chrome(self, path) -> None:
        """Write a Chrome trace event JSON (opens in Perfetto and chrome://tracing)."""
        lanes = self.lanes()
        tids = {lane: i + 1 for i, lane in enumerate(lanes)}
        events = [{"ph": "M", "pid": _PID, "tid": 0, "name": "process_name",
                   "args": {"name": "hybridla"}}]
        for i, lane in enumerate(lanes):
            events.append({"ph": "M", "pid": _PID, "tid": tids[lane], "name": "thread_name",
                           "args": {"name": lane}})
            events.append({"ph": "M", "pid": _PID, "tid": tids[lane],
                           "name": "thread_sort_index", "args": {"sort_index": i}})
        for r in self.records:
            # ts/dur are what viewers use; the exact seconds ride along in args so that a
            # load() gives back bit-identical times despite the microsecond rescaling.
            args = {"flops": r["flops"], "bytes": r["bytes"],
                    "start_s": r["start"], "end_s": r["end"]}
            if r["step"] is not None:
                args["step"] = r["step"]
            events.append({"ph": "X", "pid": _PID, "tid": tids[r["lane"]], "name": r["name"],
                           "cat": r["lane"].partition(":")[0], "ts": r["start"] * 1e6,
                           "dur": (r["end"] - r["start"]) * 1e6, "args": args})
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)

    @classmethod
    def load(cls, path) -> "Trace":
        """Read a Chrome trace JSON (as written by to_chrome) back into a Trace."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        # The format allows a bare event array as well as the {"traceEvents": [...]} object.
        events = data["traceEvents"] if isinstance(data, dict) else data
        names = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
        trace = cls()
        for e in events:
            if e.get("ph") != "X":
                continue
            args = e.get("args", {})
            start = args.get("start_s", e["ts"] / 1e6)
            end = args.get("end_s", (e["ts"] + e.get("dur", 0.0)) / 1e6)
            lane = names.get((e.get("pid"), e.get("tid")), str(e.get("tid")))
            trace.add(e["name"], lane, start, end, step=args.get("step"),
                      flops=args.get("flops", 0.0), bytes=args.get("bytes", 0.0))
        return trace

    # -- analysis -----------------------------------------------------------------------

    def summary(self) -> dict:
        """Wall time, per-lane busy time, GPU idle, CPU/GPU overlap, copy time, TFLOP/s."""
        records = self.records
        by_lane = {}
        for r in records:
            by_lane.setdefault(r["lane"], []).append((r["start"], r["end"]))

        def merged(prefix):
            return _merge(iv for lane, ivs in by_lane.items() if lane.startswith(prefix)
                          for iv in ivs)

        wall = (max(r["end"] for r in records) - min(r["start"] for r in records)
                if records else 0.0)
        cpu, gpu = merged("cpu:"), merged("gpu:")
        gpu_busy = sum(e - s for s, e in gpu)
        # A run without GPU lanes reports the GPU idle for the whole wall time, by definition.
        gpu_idle = max(wall - gpu_busy, 0.0)
        flops = sum(r["flops"] for r in records)
        return {
            "tasks": len(records),
            "wall": wall,
            "lanes": {lane: interval_union(by_lane[lane]) for lane in sorted(by_lane, key=_lane_key)},
            "cpu_busy": sum(e - s for s, e in cpu),
            "gpu_busy": gpu_busy,
            "gpu_idle": gpu_idle,
            "gpu_idle_fraction": gpu_idle / wall if wall > 0 else 0.0,
            "overlap": _intersection_length(cpu, gpu),
            "copy_busy": {lane.partition(":")[2]: interval_union(ivs)
                          for lane, ivs in sorted(by_lane.items()) if lane.startswith("copy:")},
            "flops": flops,
            "tflops": flops / wall / 1e12 if wall > 0 else 0.0,
        }

    def format_summary(self) -> str:
        """The summary as a plain-text table (times in ms)."""
        s = self.summary()
        wall = s["wall"]

        def pct(x):
            return f"{100.0 * x / wall:5.1f}%" if wall > 0 else "    -"

        lines = [
            f"tasks            {s['tasks']:>10d}",
            f"wall             {wall * 1e3:10.3f} ms",
            f"flops            {s['flops']:10.3e}    {s['tflops']:.3f} TFLOP/s",
            f"cpu busy         {s['cpu_busy'] * 1e3:10.3f} ms  {pct(s['cpu_busy'])}",
            f"gpu busy         {s['gpu_busy'] * 1e3:10.3f} ms  {pct(s['gpu_busy'])}",
            f"gpu idle         {s['gpu_idle'] * 1e3:10.3f} ms  {pct(s['gpu_idle'])}",
            f"cpu/gpu overlap  {s['overlap'] * 1e3:10.3f} ms  {pct(s['overlap'])}",
        ]
        lines += [f"copy {d:<11} {t * 1e3:10.3f} ms  {pct(t)}" for d, t in s["copy_busy"].items()]
        lines += ["", f"{'lane':<16} {'busy ms':>10}  {'util':>6}"]
        lines += [f"{lane:<16} {t * 1e3:10.3f}  {pct(t)}" for lane, t in s["lanes"].items()]
        return "\n".join(lines)

    def gantt(self, path) -> None:
        """Draw a Gantt chart, one row per lane; PNG, or SVG when ``path`` ends in .svg."""
        # Figure + Agg canvas directly instead of pyplot: no global backend switch, so a
        # caller's interactive matplotlib session is left alone, and no display is needed.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        import matplotlib

        records, lanes, s = self.records, self.lanes(), self.summary()
        names = sorted({r["name"] for r in records})
        cmap = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
        colors = {n: cmap(i % cmap.N) for i, n in enumerate(names)}
        t0 = min((r["start"] for r in records), default=0.0)
        row = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}  # first lane on top

        fig = Figure(figsize=(12, 1.5 + 0.45 * max(len(lanes), 1)))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for r in records:
            ax.broken_barh([((r["start"] - t0) * 1e3, (r["end"] - r["start"]) * 1e3)],
                           (row[r["lane"]] - 0.4, 0.8), facecolors=colors[r["name"]],
                           edgecolors="black", linewidth=0.3)
        ax.set_yticks(range(len(lanes)), list(reversed(lanes)))
        ax.set_ylim(-0.6, max(len(lanes), 1) - 0.4)
        ax.set_xlabel("time (ms)")
        ax.grid(axis="x", alpha=0.3)
        title = f"wall {s['wall'] * 1e3:.3f} ms"
        if any(lane.startswith("gpu:") for lane in lanes):
            title += f"   GPU idle {100.0 * s['gpu_idle_fraction']:.1f}%"
        ax.set_title(title + f"   {s['tflops']:.3f} TFLOP/s")
        if names:
            ax.legend(handles=[Patch(facecolor=colors[n], label=n) for n in names],
                      loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        fig.tight_layout()
        fig.savefig(path, dpi=120)


def render(path, out_png=None) -> str:
    """Load a trace JSON, write its Gantt chart (default: ``path`` with .png), return the summary."""
    trace = Trace.load(path)
    trace.gantt(out_png if out_png is not None else Path(path).with_suffix(".png"))
    return trace.format_summary()
