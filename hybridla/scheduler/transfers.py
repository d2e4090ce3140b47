"""The tile store's transfer plan: every movement of a host-resident matrix through the device.

An algorithm says which tiles it needs and when they are final; the transfer plan records the
copies as tasks, in one place, and keeps the store's residency (backend/residency.py) with
them: a bring-up makes the device copy valid, a task that writes "A" on the device makes that
copy the only valid one (dirty), a send-home makes the home current again. At the end of a run
the home holds every tile (`A.residency.home_is_current()`).

Two ways up and down (`A.staged`, chosen by the store from the run's DeviceSettings):
- staged: a CPU task copies a block into a pinned slot and the DMA follows (down: DMA into a
  slot, then a CPU task copies it out). The host copies form one chain each way, each copy
  on several threads of its own, so that the engine's workers stay free to enqueue GPU work.
- pinned in place: the host array is pinned in pieces, one after the other on a CPU worker;
  each upload waits only for the pieces it lies in.
A CPU panel on a device backend travels down to a pinned buffer and back on copy lanes of its
own (`panel_round_trip`), so that it never queues behind the bulk transfers.

Out-of-core (a matrix larger than the device budget) adds a policy here: before a bring-up
that would exceed the budget, drop clean device tiles and send dirty ones home first; the
algorithms do not change.
"""
from __future__ import annotations

import functools
import threading
import time

from ..backend.pinning import pieces_touched
from ..backend.residency import DEVICE
from .graph import Region

# the chains that order the copies (not memory: declared as ordering, graph.py)
_UPLOADS, _DOWNLOADS = "copy:h2d", "copy:d2h"
_STAGING, _UNSTAGING, _PINNING = "stage", "unstage", "pin"


def _written(residency, task, region):
    # every write of the matrix but an upload's (a copy of home: bring_up counts it) leaves the
    # device the only valid copy: the updates, and a CPU panel's way back up
    if task.lane != "copy:h2d":
        residency.written(DEVICE, region.r0, region.r1, region.c0, region.c1)


class TransferPlan:
    """The copies of a streamed store A for one recorded graph, with the plan's settings."""

    def __init__(self, graph, A, plan):
        self.graph, self.A, self.plan = graph, A, plan
        self.piece_starts = [0]
        self._down_slots = {}  # copy lane -> the down slots it has to itself (reserve_down_slots)
        if A.streamed:
            # the store's residency, not this plan: an observer holding the plan (which holds
            # the graph) made the graph a reference cycle, its tasks and the store's windows
            # left for Python's next full collection after the call (44,000 objects in a
            # distributed LU worker at n = 120000: perf/RESULTS.md, issue 32, stop 54)
            graph.on_write("A", functools.partial(_written, A.residency))

    def bring_up(self, blocks=None) -> int:
        """Upload the matrix block by block in the order the algorithm first needs them:
        `blocks`, rectangles (r0, r1, c0, c1); the block columns left to right by default (QL
        takes them right to left, LQ takes block rows). Returns how many blocks the trailing
        update takes at once while the matrix arrives: when staged, plan.upload_group or, where
        a slot holds more block columns than that, a slot's (they arrive a slot at a time), a
        piece's when pinned (they arrive as their piece is)."""
        graph, A, plan = self.graph, self.A, self.plan
        m, n, nb = A.m, A.n, plan.nb
        if A.staged:
            # staged, block columns go up as many at once as a slot holds (small ones cost
            # their copy's fixed cost each otherwise)
            group = max(1, A.slot_elements // max(m * nb, 1)) if blocks is None else 1
            if blocks is None:
                blocks = [(0, m, c0, min(c0 + group * nb, n)) for c0 in range(0, n, group * nb)]
            ahead = UploadsAhead(A, plan.backend, [(index % A.up_slots, *block)
                                                   for index, block in enumerate(blocks)])
            for index, (slot, r0, r1, c0, c1) in enumerate(ahead.blocks):
                block = dict(index=index, slot=slot, r0=r0, r1=r1, c0=c0, c1=c1)
                self._staged_up(-1, slot, r0, r1, c0, c1,
                                functools.partial(ahead.stage_block, **block),
                                upload=functools.partial(ahead.upload_staged, **block))
                A.residency.arrived(DEVICE, r0, r1, c0, c1)
            graph.uploads_ahead = ahead
            return max(plan.upload_group, group)
        if blocks is None:
            blocks = [(0, m, c0, min(c0 + nb, n)) for c0 in range(0, n, nb)]
        self.piece_starts = A.plan_pin_pieces(plan.pin_pieces) if A.pin else [0]
        for piece in range(len(self.piece_starts) if A.pin else 0):
            graph.add("pin", -1, "cpu", lambda lane, piece=piece: A.pin_piece(piece),
                      writes=[Region("pinned", piece, piece + 1)], chain=_PINNING)
        for r0, r1, c0, c1 in blocks:
            first = pieces_touched(c0 // nb, self.piece_starts)[0]
            last = pieces_touched((c1 - 1) // nb, self.piece_starts)[1]
            graph.add("upload", -1, "copy:h2d",
                      functools.partial(A.upload_block, r0=r0, r1=r1, c0=c0, c1=c1),
                      reads=[Region("pinned", first, last + 1)],
                      writes=[Region("A", r0, r1, c0, c1)], chain=_UPLOADS,
                      bytes=(r1 - r0) * (c1 - c0) * A.dtype.itemsize)
            A.residency.arrived(DEVICE, r0, r1, c0, c1)
        return max(1, len(blocks) // len(self.piece_starts))

    def send_home(self, step, r0, r1, c0, c1):
        """A block that is final now goes back to the host matrix while the factorization goes
        on. Staged, it goes in pieces that fit a slot: DMA into the slot, then a CPU task
        copies it out (one chain of those, on several threads each: run side by side they
        took every engine worker and held up the GPU work: perf/RESULTS.md, "Traces and
        overlap (CPU interface, n = 32768)")."""
        graph, A = self.graph, self.A
        if not A.staged:
            graph.add("download", step, "copy:d2h",
                      functools.partial(A.download_block, r0=r0, r1=r1, c0=c0, c1=c1),
                      reads=[Region("A", r0, r1, c0, c1)], chain=_DOWNLOADS, after=[_PINNING],
                      bytes=(r1 - r0) * (c1 - c0) * A.dtype.itemsize)
        else:
            self._staged_down(step, r0, r1, c0, c1, lambda slot, j0, j1: functools.partial(
                A.unstage_block, slot=slot, r0=r0, r1=r1, c0=j0, c1=j1))
        A.residency.arrived(A.residency.home, r0, r1, c0, c1)

    def upload(self, step, source, r0, r1, c0, c1, reads=()):
        """Rows r0:r1 x columns c0:c1 of the store := the host array `source` (of that shape),
        staged through the next up slot in turn: the copies of a store whose contents come from
        a host matrix that is not its home (out-of-core's working store: lapack/_ooc.py, which
        cuts them to fit a slot). `reads`: the host regions the copy reads, so that it follows
        the tasks that write them."""
        slot = self.graph.counter("stage-up") % self.A.up_slots
        self._staged_up(step, slot, r0, r1, c0, c1, functools.partial(
            self.A.stage_array, slot=slot, source=source), reads)

    def download(self, step, r0, r1, c0, c1, target, writes=(), lane=_DOWNLOADS):
        """The host array `target` (of the rectangle's shape) := rows r0:r1 x columns c0:c1 of
        the store, staged through the down slots in pieces that fit one; `writes`: the host
        regions it writes, so that their later readers follow it. `lane`: another copy lane
        than the downloads', with chains of its own, for a copy that must not queue behind
        them (a streaming slot that waits for it to be read)."""
        self._staged_down(step, r0, r1, c0, c1, lambda slot, j0, j1: functools.partial(
            self.A.unstage_array, slot=slot, target=target[:, j0 - c0:j1 - c0]), writes, lane)

    def pin(self, step, pieces, only=None):
        """Pin a host array in place, piece by piece in order (backend/pinning.PinnedPieces;
        `only`: those pieces), one CPU task each on the pinning chain: a direct copy
        (upload_direct, download_direct) that lies in piece p reads Region("pinned", p, p + 1),
        so it waits for that piece only. The store unpins them when it closes."""
        for index in range(len(pieces.ranges)) if only is None else only:
            lo, hi = pieces.ranges[index]
            self.graph.add("pin", step, "cpu",
                           lambda lane, lo=lo, hi=hi: self.A.pin_host(lo, hi),
                           writes=[Region("pinned", index, index + 1)], chain=_PINNING)

    def upload_direct(self, step, source, r0, r1, c0, c1, reads=()):
        """Rows r0:r1 x columns c0:c1 of the store := the host view `source`, one DMA straight
        from it (no staging copy: it lies in a pinned piece, which `reads` names with the host
        region, so that the copy follows both the pinning and the tasks that write it)."""
        self.graph.add("upload", step, "copy:h2d",
                       functools.partial(self.A.upload_array, source=source, r0=r0, r1=r1, c0=c0,
                                         c1=c1),
                       reads=reads, writes=[Region("A", r0, r1, c0, c1)], chain=_UPLOADS,
                       bytes=(r1 - r0) * (c1 - c0) * self.A.dtype.itemsize)

    def download_direct(self, step, r0, r1, c0, c1, target, reads=(), writes=()):
        """The host view `target` := rows r0:r1 x columns c0:c1 of the store, one DMA straight
        into it (see upload_direct; `writes`: the host region, for its later readers)."""
        self.graph.add("download", step, "copy:d2h",
                       functools.partial(self.A.download_array, r0=r0, r1=r1, c0=c0, c1=c1,
                                         target=target),
                       reads=[Region("A", r0, r1, c0, c1), *reads], writes=writes,
                       chain=_DOWNLOADS, bytes=(r1 - r0) * (c1 - c0) * self.A.dtype.itemsize)

    def _staged_up(self, step, slot, r0, r1, c0, c1, stage, reads=(), upload=None):
        """A CPU task of the staging chain fills pinned slot `slot` (`stage(lane)`), and the DMA
        of the copy chain takes it to the store's rectangle (`upload(lane)`, by default the
        store's upload_staged); a slot is filled again once its DMA has read it (the graph's
        write-after-read)."""
        buffer = Region("stage-up", slot, slot + 1)  # the pinned slot's memory
        nbytes = (r1 - r0) * (c1 - c0) * self.A.dtype.itemsize
        if upload is None:
            upload = functools.partial(self.A.upload_staged, slot=slot, r0=r0, r1=r1, c0=c0,
                                       c1=c1)
        self.graph.add("stage", step, "cpu", stage, reads=reads, writes=[buffer],
                       chain=_STAGING, bytes=nbytes)
        self.graph.add("upload", step, "copy:h2d", upload, reads=[buffer],
                       writes=[Region("A", r0, r1, c0, c1)], chain=_UPLOADS, bytes=nbytes)

    def reserve_down_slots(self, lane, count):
        """Give copy lane `lane` the last `count` down slots to itself, and the downloads' lane
        the others, before either records a copy: a slot shared in turn made a download of one
        lane wait for the other's copy before it (a stream of block columns waited for the way
        home of a wide column)."""
        count = min(count, self.A.down_slots - 1)
        if count > 0:
            self._down_slots[_DOWNLOADS] = list(range(self.A.down_slots - count))
            self._down_slots[lane] = list(range(self.A.down_slots - count, self.A.down_slots))

    def _staged_down(self, step, r0, r1, c0, c1, unstage, writes=(), lane=_DOWNLOADS):
        """The rectangle down in pieces that fit a slot: the DMA into the next down slot in turn
        (the copy chain of `lane`), then a CPU task of its unstaging chain,
        `unstage(slot, j0, j1)`'s, copies the piece out."""
        graph, A = self.graph, self.A
        unstaging = _UNSTAGING if lane == _DOWNLOADS else f"{_UNSTAGING}:{lane}"
        width = max(1, A.slot_elements // max(r1 - r0, 1))
        for j0 in range(c0, c1, width):
            j1 = min(j0 + width, c1)
            slots = self._down_slots.get(lane) or range(A.down_slots)
            slot = slots[graph.counter(f"stage-down:{lane}") % len(slots)]
            buffer = Region("stage-down", slot, slot + 1)  # the pinned slot's memory
            nbytes = (r1 - r0) * (j1 - j0) * A.dtype.itemsize
            graph.add("download", step, lane,
                      functools.partial(A.download_staged, slot=slot, r0=r0, r1=r1, c0=j0, c1=j1),
                      reads=[Region("A", r0, r1, j0, j1)], writes=[buffer], chain=lane,
                      bytes=nbytes)
            graph.add("unstage", step, "cpu", unstage(slot, j0, j1), reads=[buffer],
                      writes=[buffer, *writes], chain=unstaging, bytes=nbytes)

    def steps_hidden_by_upload(self, step_update_flops) -> int:
        """How many steps' trailing updates to cut into upload-sized column groups, so that the
        GPU updates the block columns that have arrived while the rest are still on their way:
        the steps whose updates (`step_update_flops(k0, k1)`) fit in the time the upload
        takes, by the cost model."""
        return steps_hidden_by_upload(self.A, self.plan, self.A.transfer, step_update_flops)


class UploadsAhead:
    """A streamed store's bring-up, started before its graph runs. A streamed graph is recorded
    whole before its engine starts (_blocked.run_recording says why), and the engine orders it
    before its first task: 0.43 s and 0.10 s of each worker's run at n = 120000 on 2 x H100 in
    which nothing moved (perf/RESULTS.md, issue 32, stop 51).

    `start` makes the bring-up's copies from a host thread of its own, block by block in the
    bring-up's order (`blocks`: (slot, r0, r1, c0, c1)), each as its tasks would: staged into
    its slot once the slot's last DMA has read it, then the DMA on the "copy:h2d" lane. The
    graph's stage and upload tasks of block `index` are its `stage_block` and `upload_staged`
    (the store's, with the block's index): a block the thread took is waited for and left
    alone (the upload task's event, recorded on the same stream after the thread's DMA, orders
    the block's readers after it; the next stage into its slot waits for that event); any
    other block is the graph's, and the thread stops short of the first such. Never started,
    every block is the graph's. `finish` stops the thread and waits for it; `add_to` puts its
    host copies in the run's trace (lane "cpu:ahead", before the run's time 0 for those made
    while the graph was recorded)."""

    def __init__(self, A, backend, blocks):
        self.A, self.backend, self.blocks = A, backend, blocks
        self._lock = threading.Lock()
        self._taken = {}  # block index -> set once the thread's DMA is enqueued; None: the graph's
        self._stopping = False
        self._thread = None
        self._failure = None  # (block index, the exception) of the block the thread failed
        self._copies: list = []  # (wall time a block's host copy began, ended, its bytes)

    @property
    def count(self) -> int:
        """The blocks the thread moved."""
        return len(self._copies)

    def start(self):
        if self._thread is None and self.blocks:
            self._thread = threading.Thread(target=self._bring_up, name="hybridla-uploads-ahead",
                                            daemon=True)
            self._thread.start()

    def finish(self):
        with self._lock:
            self._stopping = True
        if self._thread is not None:
            self._thread.join()

    def add_to(self, trace):
        if trace.wall_origin is None:
            return
        for began, ended, nbytes in self._copies:
            trace.add("stage", "cpu:ahead", began - trace.wall_origin,
                      ended - trace.wall_origin, step=-1, bytes=nbytes)

    def stage_block(self, lane, index, slot, r0, r1, c0, c1):
        if not self._taken_ahead(index):
            self.A.stage_block(lane, slot, r0, r1, c0, c1)

    def upload_staged(self, lane, index, slot, r0, r1, c0, c1):
        if not self._taken_ahead(index):
            self.A.upload_staged(lane, slot, r0, r1, c0, c1)

    def _taken_ahead(self, index) -> bool:
        """Whether the thread took block `index` (once it has enqueued the block's DMA); else
        the block is the graph's from now on."""
        with self._lock:
            done = self._taken.setdefault(index, None)
        if done is None:
            return False
        done.wait()
        if self._failure is not None and self._failure[0] == index:
            failure = self._failure[1]
            raise RuntimeError(f"the upload of block {index} ahead of the graph failed: "
                               f"{failure}") from failure
        return True

    def _bring_up(self):
        A, lane = self.A, self.backend.lane("copy:h2d")
        last_dma: dict = {}  # slot -> the event of its last DMA
        for index, (slot, r0, r1, c0, c1) in enumerate(self.blocks):
            with self._lock:
                if self._stopping or index in self._taken:
                    return
                done = self._taken[index] = threading.Event()
            try:
                with lane:  # the slot is free once its last DMA has read it
                    self.backend.host_wait([last_dma.get(slot)])
                began = time.time()
                A.stage_block(lane, slot, r0, r1, c0, c1)
                ended = time.time()
                with lane:
                    A.upload_staged(lane, slot, r0, r1, c0, c1)
                    last_dma[slot] = lane.record()
                self._copies.append((began, ended, (r1 - r0) * (c1 - c0) * A.dtype.itemsize))
            except BaseException as exc:  # raised by the graph's tasks of the block
                self._failure = (index, exc)
                return
            finally:
                done.set()


def steps_hidden_by_upload(A, plan, transfer, step_update_flops) -> int:
    """TransferPlan.steps_hidden_by_upload for the store A's whole upload, `transfer` as
    the store's ("staged", "register", "pageable")."""
    upload = plan.cost.upload_seconds(A.m * A.n * A.dtype.itemsize, transfer)
    elapsed, steps = 0.0, 0
    for k0 in range(0, min(A.m, A.n), plan.nb):
        if elapsed >= upload:
            break
        k1 = min(k0 + plan.nb, min(A.m, A.n))
        elapsed += plan.cost.gpu_update(step_update_flops(k0, k1))
        steps += 1
    return steps


def panel_round_trip(graph, A, plan, step, factor, panel, results, flops):
    """A panel factored on the CPU by `factor(lane)`: in place on the host backend; on a device
    backend it travels down to a pinned buffer and back up, on its own copy lanes. What travels
    is the rectangle of the region `panel`: rows k0:m of the step's columns for LU and
    Cholesky, another rectangle for the QL and LQ panels (which end above the last row: their
    `r1` is passed on). `results` are the other regions it writes (pivots, tau: the store
    sends them up with the panel)."""
    if not plan.backend.has_device:
        graph.add("panel", step, "cpu", factor, writes=[panel, *results], flops=flops)
        return
    buffer = Region(f"pinned-panel-{step % 2}", 0, 1)  # the step's pinned buffer (two, in turn)
    rectangle = dict(step=step, r0=panel.r0, c0=panel.c0, c1=panel.c1)
    if panel.r1 != A.m:
        rectangle["r1"] = panel.r1
    nbytes = (panel.r1 - panel.r0) * (panel.c1 - panel.c0) * A.dtype.itemsize
    graph.add("panel_d2h", step, "copy:panel-d2h", functools.partial(A.panel_to_host, **rectangle),
              reads=[panel], writes=[buffer], bytes=nbytes)
    graph.add("panel", step, "cpu", factor, reads=[buffer], writes=[buffer, *results],
              flops=flops)
    graph.add("panel_h2d", step, "copy:panel-h2d",
              functools.partial(A.panel_to_device, **rectangle),
              reads=[buffer], writes=[panel, *results], bytes=nbytes)
