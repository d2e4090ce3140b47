"""What the distributed drivers share: the layout of the matrix over the workers, the worker's
view of a run (its rank, local store, transport, plan), the panel broadcast, and a graph whose
failing task aborts the transport.

Layout: 1-D block columns (lapack/_dist_layout.py says why, by the bytes each step moves).
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..scheduler import Region, TaskGraph
from ..scheduler.transport import connected
from ._dist_layout import BlockColumns
from ._dist_parts import arriving_part, device_part, host_part


@dataclass
class WorkerRun:
    """One worker's share of a distributed run: the backend `ops`, the `plan` (the same nb and
    look-ahead on every rank), the `transport` to the others, the `layout`, and its `rank`;
    `A` its local store (m x layout.width(rank)). `results`: what the driver reports back
    (per-step infos, pivots, tau of the panels this rank factored)."""

    ops: Any
    plan: Any
    transport: Any
    layout: BlockColumns
    rank: int
    A: Any
    results: dict = field(default_factory=dict)
    panels: dict = field(default_factory=dict)  # step -> (k0, the window it was factored in)
    output: Any = None  # the store whose columns go back (None: A; orgqr_dist's Q)
    device_like: Any = None  # a device part's array: another output is made of its kind
    output_array: Any = None  # that output's array, where the store works in it
    # a device part's block columns still to be copied into A, [(block, first local column)]
    # (_dist_parts.arriving_part): the first tasks of the run's graph (record_arrivals)
    arrivals: list = field(default_factory=list)

    def new_output(self, m, n):
        """The store of another output (orgqr_dist's Q), m x n, made run.output: for a device
        part over a new array of the part's kind, which goes back as it is (no copy)."""
        ops, plan = self.ops, self.plan
        if self.device_like is None:
            self.output = ops.matrix(m, n, self.A.dtype, plan.nb, plan.device_settings)
        else:
            array = ops.empty((m, n), self.A.dtype, like=self.device_like, pooled=True)
            self.output, self.output_array, _ = ops.device_matrix(
                array, plan.nb, True, settings=plan.device_settings)
        return self.output

    def panel(self, step, k0, k1, lk, rows, owner):
        """Step's panel, rows k0:`rows` of its columns (at lk here): (the window of run.A this
        rank factors it in, kept for panel_results, or None where another rank owns it; its
        region of "A" on the owner)."""
        region = Region("A", k0, rows, lk, lk + k1 - k0)
        if owner != self.rank:
            return None, region
        window = self.ops.window(self.A, k0, rows, lk, lk + k1 - k0)
        self.panels[step] = (k0, window)
        return window, region

    @property
    def width(self) -> int:
        return self.layout.width(self.rank)

    def steps(self, k_end):
        """(step, k0, k1, owner, lk): the steps over k_end pivot columns; lk is where this
        rank's columns of the panel's block (if it owns it) and of the blocks after it start."""
        nb = self.plan.nb
        for step, k0 in enumerate(range(0, k_end, nb)):
            yield step, k0, min(k0 + nb, k_end), self.layout.owner(step), \
                self.layout.local_start(self.rank, step)


# a test hook: {(rank, step, where, routine): exception} raised by that rank at that step,
# `where` "panel" (its panel task of step `step`) or "recording" (its recording, once it has
# recorded `step` steps: the last step's count is after the whole graph), `routine` the
# driver's name ("getrf", "orgqr", ...) or None for any; set in a worker process through
# Client.run (tests/test_distributed.py)
FAULTS: dict = {}


def set_fault(rank: int, step: int, message: str, where: str = "panel",
              routine: str | None = None) -> None:
    """The test hook: that rank's panel task of that step, or its recording once it has
    recorded `step` steps (`where` "recording"), in `routine`'s run (None: any), raises
    RuntimeError(message) (call it in the worker processes, through Client.run)."""
    if where not in ("panel", "recording"):
        raise ValueError(f"where must be 'panel' or 'recording', got {where!r}")
    FAULTS[(rank, step, where, routine)] = RuntimeError(message)


def clear_faults() -> None:
    FAULTS.clear()


def fault_point(rank: int, step: int, where: str = "panel", routine: str | None = None) -> None:
    fault = FAULTS.get((rank, step, where, None))
    if fault is None and routine is not None:
        fault = FAULTS.get((rank, step, where, routine))
    if fault is not None:
        raise fault


# The panel lane's tasks wait for panels from other processes, which the host cannot see
# coming: left to the order in which they became ready, the QR's next owner enqueued the larft
# of step k + 1 (waiting for its broadcast) before its look-ahead column of step k, which then
# waited for the other rank's panel too: 55-60 of 128 steps out of order in the trace at
# n = 65536 on 2 GPUs (perf/RESULTS.md, issue 32, stop 51). (A module constant: a probe may
# set it on the workers.)
ORDERED_LANES = ("gpu:panel",)

# The lane of a device part's arrivals (record_arrivals), in the order recorded: the block
# columns in the order the steps first need them, as Dask would not order tasks that are all
# ready at once.
ARRIVALS_LANE = "copy:d2d"


class AbortingGraph(TaskGraph):
    """A TaskGraph whose tasks abort the transport when they fail, at once, before the engine
    has waited for the tasks in flight: a peer (or this rank's own comm task) blocked in a
    collective for data this rank will never send is woken, and every worker's run ends."""

    def __init__(self, transport):
        super().__init__()
        self.transport = transport
        self.ordered_lanes = ORDERED_LANES + (ARRIVALS_LANE,)

    def add(self, name, step, lane, fn, **kwargs):
        return super().add(name, step, lane,
                           functools.partial(_aborting, fn=fn, transport=self.transport,
                                             where=f"{name} of step {step}"), **kwargs)


def _aborting(lane, fn, transport, where):
    try:
        fn(lane)
    except BaseException as exc:
        transport.abort(f"{where} failed: {exc.__class__.__name__}: {exc}")
        raise


class PanelSlots:
    """The buffers a step's panel arrives in, `count` of them in turn (a step reuses its
    slot once the updates that read the slot's previous panel have run: the graph's
    write-after-read on Region(name(slot))). Each is a store of its own (m x nb), so that
    its pivots and tau travel with it."""

    def __init__(self, ops, m, nb, dtype, count, settings=None):
        self.ops, self._shape, self._settings = ops, (m, nb, np.dtype(dtype)), settings
        self.count = count
        self.stores = [ops.matrix(m, nb, dtype, nb, settings) for _ in range(count)]

    def run_ahead(self, steps):
        """`steps` slots more (where a device has room: half its free memory at most), made
        before the first step is recorded. While a streamed part arrives, a step's slot is
        free again only once the updates of the last block columns to arrive have read it;
        with lookahead + 2 slots the panels waited for the whole upload (the LU at n = 65536
        on 2 GPUs broadcast step 4 at 0.87 s, when the uploads ended, its update lanes a
        third busy until then; perf/RESULTS.md, issue 32). With a slot for each step whose
        update the upload cuts (BlockedSteps.split_steps), the panels run ahead, and the
        update lane has those steps' updates of the columns already there to do."""
        m, nb, dtype = self._shape
        if self.ops.has_device:
            room = int(0.5 * self.ops.free_memory()) // max(m * nb * dtype.itemsize, 1)
            steps = min(steps, room)
        self.stores += [self.ops.matrix(m, nb, dtype, nb, self._settings)
                        for _ in range(max(steps, 0))]
        self.count = len(self.stores)

    def slot(self, step) -> int:
        return step % self.count

    @staticmethod
    def name(slot) -> str:
        return f"panel slot {slot}"

    def region(self, step) -> Region:
        return Region(self.name(self.slot(step)), 0, 1)

    def store(self, step):
        return self.stores[self.slot(step)]

    def close(self):
        for store in self.stores:
            store.close()


def record_broadcast(graph, run, step, owner, send, recv, reads, slots, then=None):
    """The task that brings step's panel from its owner to every rank: `send(lane)` the
    owner's buffers (its panel where it was factored), `recv(lane)` this rank's (the step's
    slot); chained, so that every rank calls its collectives in the same order. `then(lane)`,
    if given, follows the broadcast on its lane (the LU's row moves made of the pivots)."""
    transport = run.transport

    def broadcast(lane):
        transport.broadcast(lane, send(lane) if run.rank == owner else [], recv(lane), owner)
        if then is not None:
            then(lane)

    return graph.add("bcast", step, "comm:bcast", broadcast,
                     reads=reads if run.rank == owner else (), writes=[slots.region(step)],
                     chain="comm", bytes=0.0)


def factor_distributed(run, record, name, **results):
    """One rank's share of a distributed factorization (getrf_dist, potrf_dist, geqrf_dist):
    a graph whose failing task aborts every peer, the panel slots, `record(graph, run,
    slots)`'s recording run on the engine, then the results of the panels this rank
    factored (panel_results's `results`: pivots, tau). Returns the trace."""
    graph = AbortingGraph(run.transport)
    slots = PanelSlots(run.ops, run.layout.m, run.plan.nb, run.A.dtype, run.plan.lookahead + 2,
                       run.plan.device_settings)
    try:
        trace = run_graph_of(run, graph, record(graph, run, slots), name)
    finally:
        slots.close()
    panel_results(run, **results)
    return trace


def record_panel(graph, run, step, panel, factor, writes, flops):
    """The owner's panel task of `step`: `factor(lane, ops, panel)`, on the panel lane where
    the backend has a device, after the fault point of the tests' failure injection."""
    graph.add("panel", step, "gpu:panel" if run.ops.has_device else "cpu",
              functools.partial(_panel_task, factor=factor, ops=run.ops, panel=panel,
                                rank=run.rank, step=step),
              writes=writes, flops=flops)


def _panel_task(lane, factor, ops, panel, rank, step):
    fault_point(rank, step)
    factor(lane, ops, panel)


def run_graph_of(run, graph, recording, name):
    """Run the recorded graph on this worker's engine (the steps start while the rest are
    recorded), its part's arrivals first; returns the trace."""
    from ._blocked import run_recording
    record_arrivals(graph, run)
    return run_recording(graph, _aborting_recording(recording, run, name), run.A, run.plan,
                         None, name)


def record_arrivals(graph, run):
    """The copies of a device part's block columns into run.A (run.arrivals, taken), in
    order on a copy lane of their own: the tasks that read or write a block column wait for
    its copy (their regions of "A"), and the plan's `arriving` cuts the first steps' updates
    into groups that follow the copies (BlockedSteps)."""
    A = run.A
    for block, c0 in run.arrivals:
        width = int(block.shape[1])
        graph.add("arrive", -1, ARRIVALS_LANE,
                  functools.partial(run.ops.arrive_columns, A=A, block=block, c0=c0),
                  writes=[Region("A", 0, A.m, c0, c0 + width)],
                  bytes=float(A.m * width * A.dtype.itemsize))
    run.arrivals = []


def _aborting_recording(steps, run, name):
    """`steps` (the recording, one step per item), aborting the transport at once when the
    recording fails, as a failing task does (AbortingGraph). Otherwise the engine first waits
    for this rank's tasks in flight and its device, while a peer waits in a collective for a
    step this rank will never record. (A QR check's recording that was refused its workspace
    on one GPU, out of memory, was followed by a hang, its cause not found: perf/RESULTS.md,
    issue 32, stop 56.)"""
    step, recorded = None, 0
    try:
        for recorded, step in enumerate(steps, 1):
            yield step
            fault_point(run.rank, recorded, "recording", name)
    except GeneratorExit:  # closed by its consumer: not a failure
        raise
    except BaseException as exc:
        run.transport.abort(f"{name}'s recording after {recorded} steps (the last {step}) "
                            f"failed: {exc.__class__.__name__}: {exc}")
        raise


def panel_results(run, pivots=False, tau=False):
    """run.results from the panels this rank factored, each a window of run.A with results of
    its own (a host wait, once, after the run): "infos" {step: the panel's info made global,
    k0 + info, or 0}; with `pivots`, "pivots" {step: global rows}; with `tau`, "tau" {step:
    the panel's scalars}. The client merges the ranks' (scheduler/cluster.py)."""
    infos, rows, scalars = {}, {}, {}
    for step, (k0, window) in run.panels.items():
        if tau:
            values, info = window.finish_tau()
            scalars[step] = np.array(values[:window.n])
        else:
            values, info = window.finish()
            if pivots:
                rows[step] = np.asarray(values[:window.n], dtype=np.int32) + k0
        infos[step] = k0 + int(info[0]) if info[0] > 0 else 0
    run.results.update(infos=infos, **({"pivots": rows} if pivots else {}),
                       **({"tau": scalars} if tau else {}))


def _engine_margins(phases, trace, began, ended):
    """How much of the driver's run lay outside its engine's trace, in `phases.seconds`
    (not stretches of their own: parts of run_s): "before_engine_s", from the driver's start
    to the engine's time 0 (the slots, the graph recorded whole for a streamed part; of it
    "recording_s", the recording), and
    "after_engine_s", from its last task's end to the driver's return (the panels' results)."""
    records = trace.records
    if trace.wall_origin is None or not records:
        return
    last_end = max(record["end"] for record in records)
    phases.seconds["before_engine_s"] = round(trace.wall_origin - began, 6)
    if trace.recording_s is not None:  # the part of it spent recording the graph
        phases.seconds["recording_s"] = round(trace.recording_s, 6)
    phases.seconds["after_engine_s"] = round(ended - trace.wall_origin - last_end, 6)


class StaleResolution(RuntimeError):
    """The first worker resolves the call's nb and look-ahead otherwise than the client's
    cached resolution (its configuration changed since): the client calls again, resolving
    anew (_dist_common._resolving)."""


def table_routine(routine, device):
    """The device table's name for the entries of a distributed `routine` whose parts are on
    the workers' GPUs (`device`: a dask array of device chunks): their own block size where
    the table has one ("dist_device_lu_nb_large"), else the one-GPU call's; None (the one-GPU
    call's) for host-resident parts. Each worker updates its share of the trailing matrix, whose
    GEMMs can want a longer k than one GPU's: the 65536 LU of device chunks on 2 x H100 ran
    1.6% faster at nb 1024 than at the one-GPU call's 768 (its own best), the Cholesky and the
    QR no faster; the host-resident 120000 LU ran at 69.1 TFLOP/s at 1024 against 73.5 at
    768 (perf/RESULTS.md, issue 32, stops 56 and 58)."""
    return f"dist_device_{routine}" if device else None


def check_resolution(ops, job, rank):
    """On rank 0, where the client used a cached resolution (job["resolved_from"]: the
    call's own nb and look-ahead): resolve them here as _dist_common._resolve_plan does,
    and raise StaleResolution where that is not what the job was laid out with."""
    given = job.get("resolved_from")
    if given is None or rank != 0:
        return
    from ..scheduler.plan import make_plan
    m, n = job["shape"]
    plan = make_plan(ops, m, n, np.dtype(job["dtype"]), routine=job["routine"], nb=given[0],
                     lookahead=given[1],
                     table_routine=table_routine(job["routine"], job.get("device", False)))
    if (plan.nb, plan.lookahead) != (job["nb"], job["lookahead"]):
        raise StaleResolution(f"nb and look-ahead resolve to {(plan.nb, plan.lookahead)} on "
                              f"the first worker, not {(job['nb'], job['lookahead'])}")


def on_worker(driver, ops, transport, rank, local, job, all_finite=None):
    """One worker's whole share of a distributed call (the long-lived task's body,
    scheduler/cluster.py): its local matrix `local` (host, m x its columns; or the list of its
    block columns as Dask holds them, scheduler/cluster.place) as a host-resident store,
    streamed up while the driver's first steps run and its final blocks sent home while the
    rest goes on (the drivers' send_home, as the CPU interface's), `driver(run)` on it.
    `job`: what every rank was given alike (shape, dtype, the resolved nb and look-ahead,
    check_finite, and the driver's own arguments); `all_finite(array)`: the user layer's
    finiteness test for check_finite (default: NumPy's, entry by entry).
    A device worker given block columns that its staging would copy anyway streams them from
    where they lie, the factors going to a new array, and checks them on the GPU as they
    arrive (all_finite only where a column's sum is not finite); any other list is stacked
    first. A device part (job["device"]: Dask holds its block columns on this worker's GPU,
    CuPy chunks) is copied into a device store of its own, first (device_part) or, where the
    call asks (job["arrive"]), by the run's first tasks while its first steps go on, checked
    on the GPU as it arrives (_dist_parts.arriving_part), and the factors stay there, an
    array of the chunks' kind: nothing crosses the host, as in the GPU interface.
    Returns {"local", "results", "trace", "wall_origin", "work_phases"} ("trace": the run's
    records, empty unless job["traced"], default true): work_phases the
    seconds of its stretches (scheduler.trace.Phases), outside the driver's trace and in it."""
    import dataclasses

    from ..scheduler.plan import make_plan
    from ..scheduler.trace import Phases

    phases = Phases()
    m, n = job["shape"]
    dtype = np.dtype(job["dtype"])
    layout = job["layout"]
    check_resolution(ops, job, rank)
    plan = make_plan(ops, m, n, dtype, routine=job["routine"], nb=job["nb"],
                     lookahead=job["lookahead"], panel=job.get("panel"))
    # the workers of one machine stage their parts at once, sharing its memory
    stagers = job.get("stagers", [1] * (rank + 1))[rank]
    plan = dataclasses.replace(plan, trace_path=None, progress=False,
                               cost=plan.cost.sharing_host(stagers))
    finite = all_finite or (lambda array: bool(np.isfinite(array).all()))
    checked, checking, arrivals = [], False, []
    arriving = arriving_part(ops, plan, job, local) if job.get("device") else None
    if arriving is not None:  # copied in by the run's first tasks
        A, home, arrivals = arriving
        plan = dataclasses.replace(plan, arriving="device")
        checking = job["check_finite"]
        checked = [block for block, _ in arrivals]
        finite = lambda block: not ops.has_nonfinite(block)  # noqa: E731 - where it lies
    elif job.get("device"):
        A, home = device_part(ops, plan, job, local, rank, transport, phases)
    else:
        A, home, source, checking = host_part(ops, plan, job, rank, local, finite, phases)
        checked = source.blocks if checking else []
    phases.mark("store_s")
    transport = connected(transport)  # connecting since the task began (scheduler/cluster)
    phases.mark("connected_s")
    if checking:  # streamed from Dask's blocks, or copied in from its device chunks
        # The column sums of |a_ij| the store makes of each block as it arrives (one more read
        # on the GPU) are finite where every entry is: the check costs no host memory traffic,
        # which the staging copies need (a check by host threads beside the run slowed them).
        # A sum that is not is checked entry by entry.
        A.track_one_norm(arriving=bool(arrivals))
        phases.mark("one_norm_s")
    run = WorkerRun(ops, plan, transport, layout, rank, A,
                    device_like=home if job.get("device") else None, arrivals=arrivals)
    try:
        try:
            began = time.time()
            trace = driver(run, **job.get("arguments", {}))
        except BaseException:
            if checking and not all(finite(block) for block in checked):
                raise ValueError(f"{job['name']} must not contain infs or NaNs "
                                 f"(check_finite=True)") from None  # the input's fault
            raise
        if run.arrivals:
            raise RuntimeError(f"{job['routine']}: the driver never copied in its part "
                               f"(run_graph_of records the copies)")
        phases.mark("run_s")
        if job.get("traced", True):  # reading the records settles the GPU tasks' events
            _engine_margins(phases, trace, began, time.time())
            # apart from the finiteness check after it, which a traced call's 0.05-0.10 s of
            # reading them showed as its own at n = 120000 (perf/RESULTS.md, issue 32, stop 54)
            phases.mark("records_s")
        if checking:
            if not np.isfinite(A.one_norm()) and not all(finite(block) for block in checked):
                raise ValueError(f"{job['name']} must not contain infs or NaNs "
                                 f"(check_finite=True)")
            phases.mark("finite_check_s")
        if getattr(A, "streamed", False) and not A.residency.home_is_current():
            raise RuntimeError(f"{job['routine']}: the driver left blocks of rank {rank}'s "
                               f"part on the device ({A.residency})")
        result = home
        if run.output is not None:  # another output (orgqr's Q) gets an array of its own
            result = run.output_array if run.output_array is not None else \
                _output(ops, run.output, dtype)
        phases.mark("output_s")
    finally:
        if run.output is not None:
            run.output.close()
        A.close()
    phases.mark("close_s")
    # the records only where the client writes a trace: 1,600 of them per worker at n = 65536
    return {"local": result, "results": run.results,
            "trace": trace.records if job.get("traced", True) else [],
            "wall_origin": trace.wall_origin, "work_phases": phases.seconds}


def _output(ops, out, dtype):
    """The store `out`'s m x n as a new host array."""
    result = np.empty((out.m, out.n), dtype=dtype, order="F")
    if result.size:
        lane = ops.lane("gpu:update")
        with lane:
            ops.to_host(lane, out.block(0, out.m, 0, out.n), out=result)
    return result
