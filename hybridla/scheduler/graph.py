"""Tasks recorded by an algorithm, with dependencies derived from what each one reads and writes.

An algorithm never writes a dependency by hand: it says which rectangles of which resources a task
reads and writes ("A" rows r0:r1, columns c0:c1; "piv" entries k0:k1), and `TaskGraph.add` orders
it after every earlier task it conflicts with (read after write, write after read, write after
write). Rectangles rather than whole block columns keep a download of finished rows from waiting
for, or holding up, the updates of the rows below them.

Ordering that is not about memory is declared as such: a task may be the next link of a named
chain (`chain=`: the copies of one stream, one after the other) or follow a chain's latest link
(`after=`), without pretending to read or write a region.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


_BUCKET = 512  # columns per bucket of live accesses (see TaskGraph)


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
        # with, as (r0, r1, c0, c1, task index, is a write), listed in every bucket they touch.
        # Reads of finished blocks stay live for good (nothing writes there again), so one
        # flat list made recording quadratic in the tasks: buckets keep each scan local.
        self._live: dict[str, dict[int, list[tuple]]] = {}
        self._counters: dict[str, int] = {}
        self._chains: dict[str, int] = {}  # chain name -> index of its latest link
        self._write_observers: dict[str, list[Callable]] = {}

    def add(self, name, step, lane, fn, *, reads=(), writes=(), flops=0.0, bytes=0.0,
            chain=None, after=(), enqueues_on=None) -> Task:
        """Record a task; its dependencies are every earlier task it conflicts with, the
        previous link of `chain` (it becomes the chain's latest) and the latest link of each
        chain named in `after`. `enqueues_on`: see Task."""
        reads = tuple(r for r in reads if not r.empty)
        writes = tuple(w for w in writes if not w.empty)
        task = Task(len(self.tasks), name, step, lane, fn, reads, writes, flops, bytes,
                    enqueues_on=enqueues_on)
        accesses = [(r, False) for r in reads] + [(w, True) for w in writes]
        deps = {self._chains[c] for c in (*after, *([chain] if chain else [])) if c in self._chains}
        for region, is_write in accesses:
            r0, r1, c0, c1 = region.r0, region.r1, region.c0, region.c1
            buckets = self._live.get(region.resource)
            if buckets is None:
                continue
            # the hot loop of recording: plain tuple comparisons, no method calls
            for bucket in range(c0 // _BUCKET, (c1 - 1) // _BUCKET + 1):
                for er0, er1, ec0, ec1, index, earlier_write in buckets.get(bucket, ()):
                    if (is_write or earlier_write) and er0 < r1 and r0 < er1 and ec0 < c1 \
                            and c0 < ec1:
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
            entry = (r0, r1, c0, c1, task.index, is_write)
            for bucket in range(c0 // _BUCKET, (c1 - 1) // _BUCKET + 1):
                live = buckets.setdefault(bucket, [])
                if is_write:
                    # A later task that touches a region this write covers conflicts with this
                    # write and so is ordered after everything this write was ordered after:
                    # forget those.
                    live[:] = [e for e in live if not (r0 <= e[0] and e[1] <= r1 and c0 <= e[2]
                                                       and e[3] <= c1)]
                live.append(entry)
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
