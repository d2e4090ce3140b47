"""Tasks recorded by an algorithm, with dependencies derived from what each one reads and writes.

An algorithm never writes a dependency by hand: it says which rectangles of which resources a task
reads and writes ("A" rows r0:r1, columns c0:c1; "piv" entries k0:k1), and `TaskGraph.add` orders
it after every earlier task it conflicts with (read after write, write after read, write after
write). Rectangles rather than whole block columns keep a download of finished rows from waiting
for, or holding up, the updates of the rows below them.

Ordering that is not about memory is declared as such: a task may be the next link of a named
chain (`chain=`: the copies of one stream, one after the other), follow a chain's latest link
(`after=`) or given tasks (`follows=`), without pretending to read or write a region.

`ordered_lanes`: the lanes whose tasks a device run enqueues in the order they were recorded
(scheduler/engine.py), not in the order they become ready on the host. A stream runs its work in
the order it was enqueued, so a task ready early (its inputs enqueued, not yet computed) that
goes ahead of one recorded before it holds that one up behind the wait for its inputs.
"""
from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass, field
from typing import Callable


_BUCKET = 512  # columns per bucket of live accesses (see TaskGraph)
# A bucket's entries are tuples (r1, r0, c0, c1, task index, is a write), sorted as tuples:
# by their end row first, so that a scan stops at the first that ends above a region and an
# access goes in by bisection, with no key function called per entry (the key functions were
# a third of the recording's time: 0.57 s for a worker's 2376 tasks of the distributed LU at
# n = 120000 on the H100 machine's host, perf/RESULTS.md, issue 32, stop 53).
_ABOVE_ALL = float("inf")  # (r, _ABOVE_ALL) sorts after every entry ending at row r


def _uncovered(live, r0, r1, c0, c1) -> list:
    """The live accesses of a bucket as a write of rows r0:r1 x columns c0:c1 leaves them: one
    whose columns it spans loses the rows it covers at either end, and goes once none are
    left; any other stays as it is. (A right-looking factorization rewrites the rows below
    each panel: without this every update since the first stayed live down to row m, and each
    step's download of its final rows scanned them all. A distributed LU worker at n = 65536
    took 0.26-0.42 s to record its 128 steps on the H100's host, most of it those scans; with
    this, 0.07-0.30 s: perf/RESULTS.md, issue 32.)"""
    kept = []
    for entry in live:
        er1, er0, ec0, ec1 = entry[0], entry[1], entry[2], entry[3]
        if ec0 < c0 or c1 < ec1 or er1 <= r0 or r1 <= er0 or (er0 < r0 and r1 < er1):
            kept.append(entry)  # not spanned, apart, or holding the write inside its rows
        elif er0 < r0:
            kept.append((r0,) + entry[1:])  # its rows above r0 stay: er0:r0
        elif r1 < er1:
            kept.append((er1, r1) + entry[2:])  # its rows below r1 stay: r1:er1
    return kept


@dataclass(frozen=True)
class Region:
    resource: str
    r0: int
    r1: int
    c0: int = 0
    c1: int = 1

    @property
    def empty(self) -> bool:
        return self.r1 <= self.r0 or self.c1 <= self.c0


@dataclass
class Task:
    """One unit of work: `fn(lane)` enqueues (GPU, copies) or runs (CPU) it on a lane of `lane` kind.

    lane: "cpu" (a host worker), "gpu:panel" / "gpu:update" (CUDA streams: the critical path and
    the bulk of the update), "copy:h2d" / "copy:d2h" (transfers)."""

    index: int
    name: str
    step: int
    lane: str
    fn: Callable
    reads: tuple
    writes: tuple
    flops: float = 0.0
    bytes: float = 0.0
    deps: list = field(default_factory=list)
    # a CPU task that reaches device data only through work it enqueues on this device lane
    # (gehrd's panel loop): it waits for its inputs on that stream, not on the host, and so
    # enqueues while they are still being computed
    enqueues_on: str | None = None


class TaskGraph:
    def __init__(self):
        self.tasks: list[Task] = []
        # per resource, per bucket of _BUCKET columns: the accesses a new task may conflict
        # with, as (r1, r0, c0, c1, task index, is a write), their part in each bucket they
        # touch, sorted (by r1 first).
        # Reads of finished blocks stay live for good (nothing writes there again), so one
        # flat list made recording quadratic in the tasks: buckets keep each scan local.
        self._live: dict[str, dict[int, list[tuple]]] = {}
        self._counters: dict[str, int] = {}
        self._chains: dict[str, int] = {}  # chain name -> index of its latest link
        self._write_observers: dict[str, list[Callable]] = {}
        self.ordered_lanes: tuple[str, ...] = ()  # module docstring
        # a streamed store's bring-up, which may start while the rest is recorded
        # (transfers.UploadsAhead, _blocked.run_recording)
        self.uploads_ahead = None

    def add(self, name, step, lane, fn, *, reads=(), writes=(), flops=0.0, bytes=0.0,
            chain=None, after=(), follows=(), enqueues_on=None) -> Task:
        """Record a task; its dependencies are every earlier task it conflicts with, the
        previous link of `chain` (it becomes the chain's latest), the latest link of each
        chain named in `after` and the tasks `follows`. `enqueues_on`: see Task."""
        reads = tuple(r for r in reads if not r.empty)
        writes = tuple(w for w in writes if not w.empty)
        task = Task(len(self.tasks), name, step, lane, fn, reads, writes, flops, bytes,
                    enqueues_on=enqueues_on)
        accesses = [(r, False) for r in reads] + [(w, True) for w in writes]
        deps = {self._chains[c] for c in (*after, *([chain] if chain else [])) if c in self._chains}
        deps.update(t.index for t in follows)
        for region, is_write in accesses:
            r0, r1, c0, c1 = region.r0, region.r1, region.c0, region.c1
            buckets = self._live.get(region.resource)
            if buckets is None:
                continue
            # the hot loop of recording: plain tuple comparisons, no method calls; a bucket is
            # sorted by its accesses' end row, so the scan ends at the first that ends above r0
            for bucket in range(c0 // _BUCKET, (c1 - 1) // _BUCKET + 1):
                for er1, er0, ec0, ec1, index, earlier_write in reversed(buckets.get(bucket, ())):
                    if er1 <= r0:
                        break
                    if (is_write or earlier_write) and er0 < r1 and ec0 < c1 and c0 < ec1:
                        deps.add(index)
        # an edge implied by another (d is already a dependency of one of the others) only costs
        # the scheduler time: keep the direct ones
        implied = set()
        for d in deps:
            implied.update(self.tasks[d].deps)
        task.deps = sorted(deps - implied)
        for region, is_write in accesses:
            buckets = self._live.setdefault(region.resource, {})
            r0, r1, c0, c1 = region.r0, region.r1, region.c0, region.c1
            for bucket in range(c0 // _BUCKET, (c1 - 1) // _BUCKET + 1):
                live = buckets.setdefault(bucket, [])
                # each bucket keeps the access's part in its own columns
                entry = (r1, r0, max(c0, bucket * _BUCKET), min(c1, (bucket + 1) * _BUCKET),
                         task.index, is_write)
                if not is_write:
                    insort(live, entry)
                    continue
                # A later task that touches what this write covers conflicts with this write,
                # and so is ordered after everything this write was ordered after: of an
                # earlier access whose columns it spans, only the rows outside it stay live.
                # The accesses that end above r0 are untouched, and stay where they are.
                below = bisect_right(live, (r0, _ABOVE_ALL))
                tail = _uncovered(live[below:], r0, r1, entry[2], entry[3])
                tail.append(entry)
                tail.sort()  # every end row in it is r0 or more: it stays after the rest
                live[below:] = tail
        if chain:
            self._chains[chain] = task.index
        self.tasks.append(task)
        for region in writes:
            for observer in self._write_observers.get(region.resource, ()):
                observer(task, region)
        return task

    def on_write(self, resource: str, observer: Callable) -> None:
        """Call observer(task, region) for every region of `resource` a task recorded from now
        on writes (the transfer plan keeps the tiles' residency with it)."""
        self._write_observers.setdefault(resource, []).append(observer)

    def counter(self, name) -> int:
        """0, 1, 2, ... on successive calls with the same name: e.g. which of a few buffers the
        next transfer takes, round robin, in recording order."""
        value = self._counters.get(name, 0)
        self._counters[name] = value + 1
        return value

    def __len__(self):
        return len(self.tasks)


class WindowGraph:
    """A TaskGraph as a recorder sees it that works on a window of a larger store (out-of-core's
    wide column, factored in-core: lapack/_ooc.py): its "A" regions are moved by the window's
    offset (`r0`, `c0`) onto `resource`, the larger store's; its own results ("piv", "tau") get
    the window's `prefix`, so that each window's are apart; every other resource (workspaces,
    panel buffers) keeps its name, since the window shares the larger store's and the graph
    must order their reuse. Steps are moved by `step0` (the trace numbers steps of the whole
    matrix)."""

    OWN = ("piv", "tau")

    def __init__(self, graph: TaskGraph, resource: str, r0: int, c0: int, prefix: str,
                 step0: int = 0):
        self.graph, self.resource, self.r0, self.c0 = graph, resource, r0, c0
        self.prefix, self.step0 = prefix, step0

    def region(self, region: Region) -> Region:
        """The window's region as the larger graph knows it."""
        if region.resource == "A":
            return Region(self.resource, region.r0 + self.r0, region.r1 + self.r0,
                          region.c0 + self.c0, region.c1 + self.c0)
        if region.resource in self.OWN:
            return Region(self.prefix + region.resource, region.r0, region.r1, region.c0,
                          region.c1)
        return region

    def add(self, name, step, lane, fn, *, reads=(), writes=(), flops=0.0, bytes=0.0,
            chain=None, after=(), enqueues_on=None) -> Task:
        return self.graph.add(name, step + self.step0, lane, fn,
                              reads=[self.region(r) for r in reads],
                              writes=[self.region(w) for w in writes], flops=flops,
                              bytes=bytes, chain=chain and self.prefix + chain,
                              after=[self.prefix + c for c in after], enqueues_on=enqueues_on)

    def counter(self, name) -> int:
        return self.graph.counter(self.prefix + name)

    def __len__(self):
        return len(self.graph)
