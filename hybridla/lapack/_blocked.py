"""The skeleton every blocked right-looking factorization shares (getrf, potrf, geqrf): the
steps over the panels, the trailing update of each step cut into the look-ahead block columns
and the rest, the finished blocks sent home, and LAPACK's info from the panels' infos. Each
driver keeps only its math: which panel, which update, which blocks are final.

Where the matrix is host-resident (the CPU interface on a device backend), the tile store's
transfer plan (scheduler/transfers.py) brings the block columns up as they are first needed
and sends the finished blocks home while the factorization goes on."""
from __future__ import annotations

from ..scheduler import TaskGraph, run
from ..scheduler.plan import progress_bar
from ..scheduler.transfers import TransferPlan, panel_round_trip, steps_hidden_by_upload


class BlockedSteps:
    """The steps k = 0, 1, ... of a blocked factorization over `k_end` pivot columns in blocks
    of plan.nb, with the matrix's transfers (a streamed store only). `step_update_flops(k0,
    k1)` is the flops of a step's whole trailing update (the cost model decides from it how
    many steps to cut into upload-sized groups while the matrix arrives); `blocks` the order
    in which the matrix goes up (TransferPlan.bring_up)."""

    def __init__(self, graph, A, plan, k_end, step_update_flops, blocks=None):
        self.graph, self.A, self.plan, self.k_end = graph, A, plan, k_end
        self.transfers = TransferPlan(graph, A, plan)
        self.upload_group = self.transfers.bring_up(blocks) if A.streamed else None
        self.split_steps = self.transfers.steps_hidden_by_upload(step_update_flops) \
            if A.streamed else 0
        if plan.arriving and not A.streamed:
            # its block columns come up in order, by copies recorded elsewhere
            self.upload_group = plan.upload_group
            self.split_steps = steps_hidden_by_upload(A, plan, plan.arriving,
                                                      step_update_flops)
        # the flops of the last step's trailing update past the look-ahead: how long the GPU
        # stays busy while the next panel is factored (the cost model's panel placement)
        self.previous_update_flops = 0.0

    def __iter__(self):
        """(step, k0, k1): the step's panel columns k0:k1."""
        for step, k0 in enumerate(range(0, self.k_end, self.plan.nb)):
            yield step, k0, min(k0 + self.plan.nb, self.k_end)

    def update_trailing(self, step, k1, n, record_update, rest_after_lookahead=False):
        """The trailing block columns k1:n of this step: the next plan.lookahead block
        columns one task each on the panel lane (so the next panel can start as soon as its
        own column is updated), then the rest on the update lane, cut by trailing_chunks.
        `record_update(c0, c1, lane)` records one and returns its task. Returns the tasks of
        the rest, on the update lane. `rest_after_lookahead`: the rest starts once the
        look-ahead columns are done, which then run alone (record_update is called with
        follows=, the look-ahead columns' tasks, for the rest)."""
        nb, ops = self.plan.nb, self.plan.backend
        right = list(range(k1, n, nb))
        lookahead_columns, rest = right[:self.plan.lookahead], right[self.plan.lookahead:]
        lookahead = [record_update(c0, min(c0 + nb, n), "gpu:panel") for c0 in lookahead_columns]
        after = {"follows": lookahead} if rest_after_lookahead and lookahead else {}
        self.previous_update_flops = 0.0
        tasks = []
        for c0, c1 in trailing_chunks(rest, n, nb, ops, self.plan, self.upload_group,
                                      uploading=step < self.split_steps):
            tasks.append(record_update(c0, c1, "gpu:update", **after))
            self.previous_update_flops += tasks[-1].flops
        return tasks

    def send_home(self, step, r0, r1, c0, c1):
        """Block (r0:r1, c0:c1) is final after this step: a streamed store sends it home."""
        if self.A.streamed:
            self.transfers.send_home(step, r0, r1, c0, c1)

    def cpu_panel(self, step, factor, panel, results, flops):
        """A panel factored on the CPU by `factor(lane)`, travelling through a pinned buffer
        on a device backend (TransferPlan's panel_round_trip)."""
        panel_round_trip(self.graph, self.A, self.plan, step, factor, panel, results, flops)


def upload_all(A, plan):
    """Bring the whole streamed store A up now, complete on return: for a matrix that a run
    reads again and again (the mixed solvers' A and its rounded copy), not streamed by steps."""
    graph = TaskGraph()
    TransferPlan(graph, A, plan).bring_up()
    run(graph, plan.backend, workers=plan.workers, settings=plan.device_settings)
    plan.backend.synchronize()  # the caller's next graph reads A from any lane


def run_graph(graph, plan, name, trace=None):
    """Run a graph recorded whole, with the plan's workers, device settings and progress bar
    (named `name`, over the graph's tasks as their work finishes); returns the trace."""
    with progress_bar(plan, len(graph), name) as progress:
        return run(graph, plan.backend, workers=plan.workers, trace=trace, progress=progress,
                   settings=plan.device_settings)


def run_recording(graph, steps, A, plan, trace, name):
    """Run the graph that `steps` records into `graph`, one step per item; returns the trace.
    A matrix already on the device starts on its first plan.head_steps steps while the rest are
    recorded (recording and ordering the whole graph first left the GPU idle for milliseconds).
    A streamed one is recorded whole first: the head of its graph is the upload chain, which the
    rest must not wait for; so is one with a progress bar, whose total is the graph's size.
    Its bring-up (recorded with the first step) starts meanwhile, from a thread of its own
    (transfers.UploadsAhead), and the graph's copies take over where that thread has got to."""
    head_steps = 0 if A.streamed or plan.progress else plan.head_steps
    recording = iter(steps)
    ahead = None
    if A.streamed:
        next(recording, None)
        ahead = graph.uploads_ahead
    if ahead is not None:
        ahead.start()
    try:
        if plan.progress:
            for _ in recording:  # the bar's total is the graph's size
                pass
        with progress_bar(plan, len(graph), name) as progress:
            trace = run(graph, plan.backend, workers=plan.workers, trace=trace,
                        progress=progress, recording=recording, head_steps=head_steps,
                        segments=plan.record_segments, settings=plan.device_settings)
    finally:
        if ahead is not None:
            ahead.finish()
    if ahead is not None:
        ahead.add_to(trace)
    return trace


def first_failure(step_info, nb) -> int:
    """LAPACK's info from the panels' infos: the first failing step's, made global (1-based)."""
    for step, info in enumerate(step_info):
        if info > 0:
            return step * nb + int(info)
    return 0


def trailing_chunks(rest, n, nb, ops, plan, upload_group, uploading):
    """The trailing columns past the look-ahead as (c0, c1) ranges, one update task each: as
    many as the backend runs at once (`update_tasks`: one GEMM fills a GPU; the host backend
    wants one per worker), or groups of `upload_group` block columns while the matrix is still
    arriving from the host, so that the update follows the uploads instead of waiting for the
    last one."""
    if not rest:
        return []
    group = upload_group if uploading else -(-len(rest) // ops.update_tasks(plan.workers))
    return [(rest[i], min(rest[min(i + group, len(rest)) - 1] + nb, n))
            for i in range(0, len(rest), group)]
