"""The tile store's transfer plan and residency (scheduler/transfers.py, backend/residency.py),
and ordering declared as chains (scheduler/graph.py): recorded graphs, nothing runs."""
import dataclasses
import threading

import numpy as np
import pytest
from _lapack_checks import StagedStoreStub, StreamedStoreStub, assert_downloads_cover_once

import hybridla
from hybridla.backend.residency import DEVICE, HOST, Residency
from hybridla.scheduler import Region, TaskGraph, run
from hybridla.scheduler.plan import make_plan

SHAPES = [(37, 37), (45, 29), (29, 45)]


def _plan(m, n, routine, **kw):
    plan = make_plan(hybridla.backend.get_backend("host"), m, n, np.float64, routine=routine,
                     nb=8, lookahead=1)
    return dataclasses.replace(plan, **kw)


def _record(recorder, graph):
    for _ in recorder:
        pass
    return graph


@pytest.mark.parametrize("staged", [False, True], ids=["pageable", "staged"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_streamed_getrf_sends_every_tile_home_after_its_last_write(shape, staged):
    from hybridla.lapack.getrf import record_getrf
    m, n = shape
    A = StagedStoreStub(m, n, 8) if staged else StreamedStoreStub(m, n)
    graph = TaskGraph()
    _record(record_getrf(graph, A, _plan(m, n, "lu", panel="gpu")), graph)
    assert_downloads_cover_once(graph, m, n, A)


@pytest.mark.parametrize("staged", [False, True], ids=["pageable", "staged"])
def test_a_streamed_graph_goes_with_its_last_reference_not_at_a_collection(staged):
    """Recording a streamed store's graph makes no reference cycle: the graph, its tasks and
    what their closures hold are freed once the caller lets go, not at Python's next full
    collection, whose time grows with everything in the process (a distributed LU worker
    left 44,000 objects per call for it; 0.2-0.35 s a collection there)."""
    import gc
    import weakref
    from hybridla.lapack.getrf import record_getrf
    m, n = 37, 29
    A = StagedStoreStub(m, n, 8) if staged else StreamedStoreStub(m, n)
    graph = TaskGraph()
    _record(record_getrf(graph, A, _plan(m, n, "lu", panel="gpu")), graph)
    assert any(task.name == "upload" for task in graph.tasks)
    gone = weakref.ref(graph)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        del graph
        assert gone() is None
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_streamed_potrf_sends_the_triangle_home(uplo):
    """Only the uplo triangle's block columns (rows) are written and sent home; the residency
    of the other triangle's tiles stays at home."""
    from hybridla.lapack.potrf import record_potrf
    n = 37
    A = StreamedStoreStub(n, n)
    graph = TaskGraph()
    _record(record_potrf(graph, A, _plan(n, n, "cho", panel="gpu"), uplo), graph)
    assert A.residency.home_is_current(), A.residency


def test_an_upload_is_not_a_write_and_a_cpu_panel_coming_back_is():
    """The device copy is valid after a bring-up and the home too (nothing dirty); a panel
    factored on the CPU and sent back up leaves the device copy the only valid one."""
    from hybridla.scheduler.transfers import TransferPlan, panel_round_trip
    A = StreamedStoreStub(16, 16)
    plan = _plan(16, 16, "lu")
    graph = TaskGraph()
    TransferPlan(graph, A, plan).bring_up()
    assert A.residency.valid(DEVICE, 0, 16, 0, 16) and not A.residency.dirty(DEVICE)
    device_plan = dataclasses.replace(plan, backend=_DeviceLike())
    panel_round_trip(graph, A, device_plan, 0, lambda lane: None, Region("A", 0, 16, 0, 8), [],
                     0.0)
    assert A.residency.dirty(DEVICE, 0, 16, 0, 8)
    assert not A.residency.dirty(DEVICE, 0, 16, 8, 16)


class _DeviceLike:
    has_device = True


def test_residency_refuses_to_drop_a_dirty_tile():
    r = Residency(10, 10, 4, home=HOST)
    r.arrived(DEVICE, 0, 10, 0, 10)
    r.written(DEVICE, 0, 4, 0, 4)
    assert r.dirty(DEVICE) and not r.valid(HOST, 0, 4, 0, 4) and not r.home_is_current()
    r.dropped(DEVICE, 4, 10, 0, 10)  # clean tiles: fine
    with pytest.raises(RuntimeError, match="dropped from device before"):
        r.dropped(DEVICE, 0, 4, 0, 4)
    r.arrived(HOST, 0, 4, 0, 4)
    r.dropped(DEVICE, 0, 4, 0, 4)
    assert r.home_is_current() and r.tiles_at(DEVICE) == 2  # row 0, columns 4:10


def test_chains_order_tasks_without_regions():
    g = TaskGraph()
    a = g.add("a", 0, "cpu", None, chain="copy")
    b = g.add("b", 0, "cpu", None)
    c = g.add("c", 0, "cpu", None, chain="copy")
    d = g.add("d", 0, "cpu", None, after=["copy"])
    e = g.add("e", 0, "cpu", None, after=["other"])
    assert b.deps == [] and c.deps == [a.index] and d.deps == [c.index] and e.deps == []


def test_residency_of_a_store_that_moves_nothing_costs_nothing():
    """A grid is made only once a tile moves: a store of 2^40 one-element tiles answers at once
    (a grid would be a terabyte)."""
    side = 1 << 20
    r = Residency(side, side, 1, home=HOST)
    assert r.home_is_current() and r.tiles_at(HOST) == side * side and r.tiles_at(DEVICE) == 0
    assert r.valid(HOST, 0, side, 0, side) and not r.valid(DEVICE, 0, 1, 0, 1)
    assert not r.dirty(DEVICE)


def _uploads(graph):
    return [tuple(task.fn.keywords[k] for k in ("r0", "r1", "c0", "c1"))
            for task in graph.tasks if task.name == "upload"]


@pytest.mark.parametrize("per_slot", [1, 3])
def test_staged_uploads_go_up_as_many_block_columns_at_once_as_a_slot_holds(per_slot):
    from hybridla.lapack.getrf import record_getrf
    m, n, nb = 45, 61, 8
    A = StagedStoreStub(m, n, nb)
    A.slot_elements = per_slot * nb * m
    graph = TaskGraph()
    _record(record_getrf(graph, A, _plan(m, n, "lu", panel="gpu")), graph)
    uploads = _uploads(graph)
    covered = np.zeros((m, n), int)
    for r0, r1, c0, c1 in uploads:
        assert (r0, r1) == (0, m) and (c1 - c0) * m <= A.slot_elements
        covered[r0:r1, c0:c1] += 1
    np.testing.assert_array_equal(covered, 1)
    assert len(uploads) == -(-n // (per_slot * nb))
    assert_downloads_cover_once(graph, m, n, A)


@pytest.mark.parametrize("staged", [False, True], ids=["pageable", "staged"])
@pytest.mark.parametrize("lo_hi", [(0, 44), (5, 30)], ids=["all", "lo-hi"])
def test_streamed_gehrd_sends_its_columns_home_once_a_few_panels_at_a_time(staged, lo_hi,
                                                                            monkeypatch):
    import importlib
    gehrd = importlib.import_module("hybridla.lapack.gehrd")  # the module, not the function
    n, nb = 45, 4
    # a batch of finished columns goes home once three panels' worth have gathered
    monkeypatch.setattr(gehrd, "_SEND_HOME_BYTES", 3 * nb * n * 8)
    A = StagedStoreStub(n, n, nb) if staged else StreamedStoreStub(n, n)
    lo, hi = lo_hi
    plan = make_plan(hybridla.backend.get_backend("host"), n, n, np.float64, routine="hrd", nb=nb,
                     lookahead=0, panel="cpu")
    graph = gehrd.record_gehrd(A, plan, lo, hi, np.zeros(n - 1), None)
    assert_downloads_cover_once(graph, n, n, A)
    panels = len(range(lo, hi, nb))
    batches = {task.step for task in graph.tasks if task.name == "download"}
    assert len(batches) <= panels // 3 + 2  # the batches, the last panels' and the rest


def test_column_blocks_slice_as_the_matrix_they_make_views_within_a_block():
    from hybridla.backend.host.transfers import ColumnBlocks
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((7, 23)))
    edges = [0, 5, 13, 23]
    blocks = [np.asfortranarray(a[:, c0:c1]) for c0, c1 in zip(edges, edges[1:])]
    columns = ColumnBlocks(blocks)
    assert columns.shape == a.shape and columns.nbytes == a.nbytes
    for c0 in range(23):
        for c1 in range(c0 + 1, 24):
            for rows in (slice(None), slice(2, 6)):
                part = columns[rows, c0:c1]
                np.testing.assert_array_equal(part, a[rows, c0:c1])
                within = any(b0 <= c0 and c1 <= b1 for b0, b1 in zip(edges, edges[1:]))
                assert within == any(np.shares_memory(part, b) for b in blocks)
    stacked = columns.stacked(np.complex128)
    assert stacked.dtype == np.complex128 and stacked.flags.f_contiguous
    np.testing.assert_array_equal(stacked, a)
    with pytest.raises(ValueError, match="rows and dtype"):
        ColumnBlocks([blocks[0], np.zeros((6, 3))])
    with pytest.raises(ValueError, match="rows and dtype"):
        ColumnBlocks([blocks[0], np.zeros((7, 3), np.float32)])


class _StagedCopies(StagedStoreStub):
    """A streamed store whose staged copies move NumPy data (the host `source` into a slot,
    the slot into `device`), each logged with the thread that made it; `hold` (an Event),
    when given, holds the thread of UploadsAhead inside its stage of block `hold_at` until it
    is set (`holding` is set once it is there), and `fail_at` makes that thread's stage of
    that block raise."""

    def __init__(self, source, nb, hold_at=None, fail_at=None):
        super().__init__(*source.shape, nb)
        self.slot_elements = nb * source.shape[0]  # a block column a slot
        self.source, self.device = source, np.zeros_like(source)
        self.slots, self.log, self.lock = {}, [], threading.Lock()
        self.hold_at, self.fail_at = hold_at, fail_at
        self.hold, self.holding = threading.Event(), threading.Event()

    def stage_block(self, lane, slot, r0, r1, c0, c1):
        ahead = threading.current_thread().name == "hybridla-uploads-ahead"
        if ahead and c0 // self.nb == self.fail_at:
            raise OSError("the host copy failed")
        if ahead and c0 // self.nb == self.hold_at:
            self.holding.set()
            assert self.hold.wait(30)
        self.slots[slot] = ((r0, r1, c0, c1), self.source[r0:r1, c0:c1].copy())
        with self.lock:
            self.log.append(("stage", c0 // self.nb, ahead))

    def upload_staged(self, lane, slot, r0, r1, c0, c1):
        held, block = self.slots[slot]
        assert held == (r0, r1, c0, c1), "a slot filled again before its DMA read it"
        self.device[r0:r1, c0:c1] = block
        with self.lock:
            self.log.append(("upload", c0 // self.nb, threading.current_thread().name ==
                             "hybridla-uploads-ahead"))

    @property
    def nb(self):
        return self.slot_elements // self.m


def _bring_up(A, nb):
    from hybridla.scheduler.transfers import TransferPlan
    m, n = A.m, A.n
    graph = TaskGraph()
    TransferPlan(graph, A, _plan(m, n, "lu")).bring_up()
    return graph


@pytest.mark.parametrize("ahead", [0, 3, None], ids=["never-started", "3-ahead", "all-ahead"])
def test_uploads_ahead_of_the_graph_hand_over_without_a_block_twice(ahead):
    """A streamed store's bring-up started from its own thread (transfers.UploadsAhead) while
    the graph is recorded: the thread takes blocks in order until the graph's copies reach one
    it has not, and the graph's copies of the blocks it took wait for it and do nothing
    else; every block goes up once, and the device copy is the matrix."""
    m, n, nb = 20, 8 * 11 + 5, 8
    source = np.arange(m * n, dtype=np.float64).reshape(m, n, order="F")
    blocks = -(-n // nb)
    A = _StagedCopies(source, nb, hold_at=ahead if ahead else None)
    graph = _bring_up(A, nb)
    uploads_ahead = graph.uploads_ahead
    if ahead != 0:
        uploads_ahead.start()
        if ahead is None:  # the thread goes through, then the graph finds everything done
            uploads_ahead.finish()
        else:  # the thread is inside block 3: blocks 0-3 are its; the graph waits for them
            assert A.holding.wait(30)
            threading.Timer(0.05, A.hold.set).start()
    try:
        trace = run(graph, hybridla.backend.get_backend("host"), workers=2)
    finally:
        A.hold.set()
        uploads_ahead.finish()
    uploads_ahead.add_to(trace)  # the thread's copies in the run's trace, on a lane of their own
    assert len([r for r in trace.records if r["lane"] == "cpu:ahead"]) == uploads_ahead.count
    np.testing.assert_array_equal(A.device, source)
    for kind in ("stage", "upload"):
        done = [(block, by_thread) for what, block, by_thread in A.log if what == kind]
        assert sorted(block for block, _ in done) == list(range(blocks)), kind
        taken = [block for block, by_thread in done if by_thread]
        assert taken == list(range(len(taken))), "the thread's blocks are the first ones"
        assert len(taken) == uploads_ahead.count
    expected = {0: 0, None: blocks}.get(ahead)
    if expected is not None:
        assert uploads_ahead.count == expected
    else:
        assert ahead + 1 <= uploads_ahead.count <= blocks


def test_an_upload_ahead_that_fails_fails_the_run():
    """The thread's failure is raised by the graph's copy of the block it failed, and the
    graph's run raises it (the data of a block that never went up is never read)."""
    m, n, nb = 20, 8 * 6, 8
    source = np.ones((m, n), order="F")
    A = _StagedCopies(source, nb, fail_at=2)
    graph = _bring_up(A, nb)
    graph.uploads_ahead.start()
    try:
        with pytest.raises(RuntimeError, match="block 2 ahead of the graph failed: the host copy"):
            run(graph, hybridla.backend.get_backend("host"), workers=2)
    finally:
        graph.uploads_ahead.finish()
    assert graph.uploads_ahead.count == 2
