"""Execution traces: one record per executed task, Chrome JSON export, summary, Gantt chart.

A record is a dict (see docs/INTERNALS.md, "Trace records"):

    {"name": "gemm", "step": 3, "lane": "gpu:update", "start": 0.0123, "end": 0.0150,
     "flops": 1.2e9, "bytes": 0.0}

Times are seconds from the start of the run. Lanes starting with "cpu:" are CPU compute,
"gpu:" GPU compute, "copy:" transfers, "comm:" collectives between workers; "call:<lane>" the
host's calls that enqueued that lane's work, where they took long (scheduler/engine.py), which
are neither CPU nor GPU work.

A trace also carries the run's metadata (`Trace.metadata`, written as the Chrome JSON's top-level
"metadata" object and as the process's label): routine, shape, dtype, block size, look-ahead,
panel setting, backend and device (`run_metadata(plan, ...)` makes them from a plan), and, added
when written, hybridla's version, the date and where the panels actually ran.
"""

from __future__ import annotations

import datetime
import json
import textwrap
import threading
import time
import zlib
from pathlib import Path

_GROUP_ORDER = ("cpu", "gpu", "copy")
_PID = 1

# One colour per task kind, the same in every chart (matplotlib's named colours); other kinds
# get one of tab20's by a hash of their name, also the same in every chart.
TASK_COLORS = {
    "panel": "tab:red", "update": "tab:blue", "trsm": "tab:orange", "swap_left": "tab:olive",
    "larft": "tab:pink", "round": "tab:brown", "tail": "tab:purple", "top": "tab:cyan",
    "identity": "lightgray", "stage": "yellowgreen", "upload": "tab:green", "pin": "darkgreen",
    "download": "tab:gray", "unstage": "silver", "panel_d2h": "gold", "panel_h2d": "khaki",
    # out of core (lapack/_ooc.py), the distributed drivers' collectives (lapack/_dist.py)
    "left_update": "darkorange", "laswp": "rosybrown", "laswp_home": "sienna",
    "pivots": "lightcoral", "bcast": "mediumpurple", "reduce": "plum",
}
# the metadata keys, in the order the chart's title and the process label show them
METADATA_KEYS = ("routine", "shape", "dtype", "nb", "lookahead", "panel", "panels", "backend",
                 "device", "hybridla", "date")


def task_color(name: str):
    """The colour of a task kind: TASK_COLORS, else one of tab20's chosen by the name's hash."""
    if name in TASK_COLORS:
        return TASK_COLORS[name]
    import matplotlib
    cmap = matplotlib.colormaps["tab20"]
    return cmap(zlib.crc32(name.encode()) % cmap.N)


class Phases:
    """The seconds of a call's stretches, each ended by `mark(name)`, in order (`seconds`). A
    library call's trace carries them in its metadata ("call_phases": the checks and plan, the
    store, the run, closing the store, the wait for the finiteness check beside the run), a
    distributed worker's in its task's ("work_phases"): the wall time outside a trace's span
    was otherwise unaccounted for (perf/RESULTS.md, issue 34)."""

    def __init__(self):
        self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 6)
        self._last = now


def run_metadata(plan, routine: str, shape, dtype) -> dict:
    """The metadata of a run from its plan: what a trace of it should say about it. To be
    passed as ``to_chrome(path, metadata=run_metadata(plan, "getrf", (m, n), dtype))``."""
    backend = getattr(plan, "backend", None)
    return {"routine": routine, "shape": [int(x) for x in shape], "dtype": str(dtype),
            "nb": int(plan.nb), "lookahead": int(plan.lookahead), "panel": str(plan.panel),
            "backend": getattr(backend, "name", None),
            "device": getattr(backend, "device_name", None)}


def describe(metadata: dict) -> str:
    """One line of a run's metadata: "getrf 2048 x 2048 float64, nb 64, look-ahead 1, ..."."""
    md = metadata or {}
    parts = []
    head = " ".join(str(x) for x in (md.get("routine"),
                                     " x ".join(str(d) for d in md["shape"]) if md.get("shape")
                                     else None, md.get("dtype")) if x)
    if head:
        parts.append(head)
    if md.get("nb") is not None:
        parts.append(f"nb {md['nb']}")
    if md.get("lookahead") is not None:
        parts.append(f"look-ahead {md['lookahead']}")
    placed = ", ".join(f"{k} {v}" for k, v in (md.get("panels") or {}).items())
    if md.get("panel") is not None:
        parts.append(f"panel {md['panel']}" + (f" ({placed})" if placed else ""))
    elif placed:
        parts.append(f"panels {placed}")
    where = " ".join(str(x) for x in (md.get("backend"), f"({md['device']})" if md.get("device")
                                      and md.get("device") != md.get("backend") else None) if x)
    if where:
        parts.append(where)
    if md.get("hybridla"):
        parts.append(f"hybridla {md['hybridla']}")
    if md.get("date"):
        parts.append(str(md["date"]))
    parts += [f"{k} {v}" for k, v in md.items() if k not in METADATA_KEYS]
    return ", ".join(parts)


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

    def __init__(self, records=None, metadata=None):
        self._lock = threading.Lock()
        self._records = [dict(r) for r in records] if records else []
        self._later = []  # add_later's callables, not yet called
        self.metadata = dict(metadata or {})  # the run's: see the module's docstring
        self.wall_origin: float | None = None  # time.time() at the run's time 0 (engine.run)
        # seconds engine.run spent recording a graph whole before its time 0 (None: it did not)
        self.recording_s: float | None = None

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
        bytes). The engine's GPU tasks: reading their hundreds of event pairs took host time
        between a mixed solve's factorization and its refinement, where nobody reads the trace
        unless asked to (perf/RESULTS.md, "Scales on the device, GMRES stopped on the
        inf-norm")."""
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

    def panel_places(self) -> dict:
        """How many "panel" tasks ran on the CPU and on the GPU: {"cpu": 12, "gpu": 3}."""
        places: dict[str, int] = {}
        for r in self.records:
            if r["name"] == "panel":
                group = r["lane"].partition(":")[0]
                places[group] = places.get(group, 0) + 1
        return dict(sorted(places.items()))

    def full_metadata(self, metadata=None) -> dict:
        """self.metadata with `metadata` over it, and what the records and the process say:
        where the panels ran, hybridla's version, the date (each unless already given)."""
        from .._version import __version__
        md = {**self.metadata, **(metadata or {})}
        places = self.panel_places()
        if places:
            md.setdefault("panels", places)
        md.setdefault("hybridla", __version__)
        md.setdefault("date", datetime.datetime.now(datetime.timezone.utc)
                      .strftime("%Y-%m-%d %H:%M:%S UTC"))
        return {k: md[k] for k in (*[k for k in METADATA_KEYS if k in md],
                                   *[k for k in md if k not in METADATA_KEYS])}

    def to_chrome(self, path, metadata=None) -> None:
        """Write a Chrome trace event JSON (opens in Perfetto and chrome://tracing), with the
        run's metadata (self.metadata, updated by `metadata`; see full_metadata) as its top-level
        "metadata" object and the process's label."""
        lanes = self.lanes()
        tids = {lane: i + 1 for i, lane in enumerate(lanes)}
        md = self.full_metadata(metadata)
        events = [{"ph": "M", "pid": _PID, "tid": 0, "name": "process_name",
                   "args": {"name": "hybridla"}},
                  {"ph": "M", "pid": _PID, "tid": 0, "name": "process_labels",
                   "args": {"labels": describe(md)}}]
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
            json.dump({"traceEvents": events, "displayTimeUnit": "ms", "metadata": md}, f)

    @classmethod
    def load(cls, path) -> "Trace":
        """Read a Chrome trace JSON (as written by to_chrome) back into a Trace."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        # The format allows a bare event array as well as the {"traceEvents": [...]} object.
        events = data["traceEvents"] if isinstance(data, dict) else data
        names = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
        metadata = data.get("metadata") if isinstance(data, dict) else None
        trace = cls(metadata=metadata if isinstance(metadata, dict) else None)
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
        by_lane: dict[str, list] = {}
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
            # a "call:<lane>" record is a task's blocking enqueue, not a task: counted, the
            # total varied with the host's timing
            "tasks": sum(1 for r in records if not r["lane"].startswith("call:")),
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
        phases = (self.metadata or {}).get("call_phases")
        if phases:  # the library call around the run (the user layer's marks)
            lines += ["", "call, around the run:"]
            lines += [f"  {name.removesuffix('_s').replace('_', ' '):<19} {t * 1e3:10.3f} ms"
                      for name, t in phases.items()]
        return "\n".join(lines)

    def idle_gaps(self, min_fraction=0.01) -> list:
        """(start, end) of the stretches where no task of any lane runs, each at least
        `min_fraction` of the wall time: host work between tasks (recording the rest of the
        graph, a wait, Python), as the Gantt chart shows them."""
        merged = _merge((r["start"], r["end"]) for r in self.records)
        if len(merged) < 2:
            return []
        wall = merged[-1][1] - merged[0][0]
        return [(a[1], b[0]) for a, b in zip(merged, merged[1:])
                if b[0] - a[1] >= min_fraction * wall]

    def gantt(self, path) -> None:
        """Draw a Gantt chart, one row per lane; PNG, or SVG when ``path`` ends in .svg. The
        title says what ran (the metadata) and how well; each task kind has its colour
        (`task_color`, the same in every chart) and the legend names them; a task too short
        to see is drawn a minimum width wide; the stretches where no task runs are shaded."""
        self.gantt_figure().savefig(path, dpi=120)

    def gantt_figure(self):
        """The Gantt chart as a matplotlib Figure (what `gantt` saves)."""
        # Figure + Agg canvas directly instead of pyplot: no global backend switch, so a
        # caller's interactive matplotlib session is left alone, and no display is needed.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch

        records, lanes, s = self.records, self.lanes(), self.summary()
        names = sorted({r["name"] for r in records})
        colors = {n: task_color(n) for n in names}
        t0 = min((r["start"] for r in records), default=0.0)
        row = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}  # first lane on top
        # about 1.5 pixels of the plot's ~1100: a 10 us task of a 1 s run stays visible
        min_width = s["wall"] * 1e3 / 750

        fig = Figure(figsize=(12, 1.9 + 0.45 * max(len(lanes), 1)))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for r in records:
            ax.broken_barh([((r["start"] - t0) * 1e3,
                             max((r["end"] - r["start"]) * 1e3, min_width))],
                           (row[r["lane"]] - 0.4, 0.8), facecolors=colors[r["name"]],
                           edgecolors="black", linewidth=0.3)
        handles = [Patch(facecolor=colors[n], edgecolor="black", linewidth=0.3, label=n)
                   for n in names]
        gaps = self.idle_gaps()
        for start, end in gaps:
            ax.axvspan((start - t0) * 1e3, (end - t0) * 1e3, facecolor="0.92", hatch="//",
                       edgecolor="0.75", linewidth=0, zorder=0)
            if end - start >= 0.04 * s["wall"]:
                ax.text((start + end - 2 * t0) / 2 * 1e3, len(lanes) - 0.45,
                        f"no task\n{(end - start) * 1e3:.3g} ms", ha="center", va="top",
                        fontsize="x-small", color="0.3")
        if gaps:
            handles.append(Patch(facecolor="0.92", hatch="//", edgecolor="0.75",
                                 label="no task running\n(host: recording, waits)"))
        ax.set_yticks(range(len(lanes)), list(reversed(lanes)))
        ax.set_ylim(-0.6, max(len(lanes), 1) - 0.4)
        ax.set_xlabel("time (ms)")
        ax.grid(axis="x", alpha=0.3)
        title = f"wall {s['wall'] * 1e3:.3f} ms"
        if any(lane.startswith("gpu:") for lane in lanes):
            title += f"   GPU idle {100.0 * s['gpu_idle_fraction']:.1f}%"
        title += f"   {s['tflops']:.3f} TFLOP/s"
        about = textwrap.fill(describe(self.full_metadata()), 150)
        ax.set_title(f"{about}\n{title}" if about else title, fontsize="medium")
        if handles:
            ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                      fontsize="small", title="task", title_fontsize="small")
        fig.tight_layout()
        return fig


def render(path, out_png=None) -> str:
    """Load a trace JSON, write its Gantt chart (default: ``path`` with .png), return the summary."""
    trace = Trace.load(path)
    trace.gantt(out_png if out_png is not None else Path(path).with_suffix(".png"))
    about = describe(trace.metadata)
    return (f"run              {about}\n" if about else "") + trace.format_summary()
