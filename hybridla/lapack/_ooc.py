"""The skeleton every out-of-core factorization shares (getrf_ooc, potrf_ooc, geqrf_ooc): a
host matrix larger than the memory budget, factored left-looking over wide block columns (the
shape of MAGMA's magma_dgetrf_m and magma_dpotrf_m), with every transfer a task of the graph
that overlaps compute. Each driver keeps only its math: how a finished block column updates a
wide column, and which in-core factorization finishes it.

The working store, within plan.memory_budget, in the routine's canonical coordinates (A's
columns: LU, QR, lower Cholesky; A's rows: LQ, upper Cholesky; reversed: QL, see `layout`):

    columns [0, W) and [W, 2W)   two buffers, one wide column each, in turn: while one is
                                 updated and factored, the next comes up into the other and
                                 the last goes home from it
            [2W, 2W + 2 nb)      two slots for the finished block columns streamed through
                                 the device, in turn: one arrives while the other is used
    rows    the matrix's own (row i of the store is row i of the matrix)

W is the widest multiple of nb that fits the budget (`width_for_budget`); a matrix that fits
whole is one wide column, in one buffer, with no slots. The wide columns are W wide but the
first, which takes what is left over (`cut`): the last ones, whose left updates stream the
most, are then the widest, and a streamed byte updates as many columns as it can (W / 4 flops
a byte in float64). The first is factored as its block columns come up (plan.arriving). The wide column just before the one
being updated is still in the other buffer, so its block columns are read there, not streamed.
Two buffers cannot make two wide columns (where two of W >= n / 2 fit, the whole matrix does):
a budget of 1.5 to 3 times less than the matrix gives 3 to 6 of them. With one buffer (config
device.ooc_buffers: 1) W is twice as wide, so half as much streams (pass 2 of the drivers), but
a wide column's copies wait for the last one's instead of overlapping its factorization.

How the copies travel (config device.ooc_transfer, plan.ooc_transfer):
- "staged" (the default): through the store's pinned staging slots
  (backend/ops.StagedTileStore): a CPU task copies each block into a slot and the DMA follows
  (down: the reverse). Each byte crosses the host's memory three times (read, written to the
  slot, read by the DMA). That memory is the host's, shared by every copy: at n = 65536 on
  the GPU machines' 16 cores the staging chain moved 24-49 GB/s, and 8-13 GB/s while the LU's
  interchanges ran on the host beside it (laswp takes all the cores), so getrf_ooc applies
  them on the device (perf/RESULTS.md, issue 31).
- "register": the host matrix's wide columns whose bytes cross the link at least
  PIN_WHEN_READ times (bring-up, streams, the way home) are pinned in place, in pieces of
  about PIN_PIECE_BYTES, one after the other on a CPU task of the pinning chain, and their
  copies are one DMA each straight from or into them, waiting only for their piece: one pass
  of host memory a byte. Pinning costs about 26 ms a GB and unpinning 15, and cuMemHostRegister
  holds up the GPU work queued meanwhile (DESIGN.md's table); so only the wide columns read
  often enough are pinned, and only where the wide columns are the host array's columns
  (contiguous: LU, QR, lower Cholesky). Pinning all of them (PIN_WHEN_READ 0) kept the GPU
  busy between the first and the last wide column but cost 2 s of pinning and unpinning at
  n = 65536 (perf/RESULTS.md).
The user's input, where it is not the array factored in place (overwrite_a=False), is read
once, by pass 1, staged; a matrix below device.pin_min_bytes is staged (its pages may be
shared with other objects).
Either way each copy is a task recorded by the transfer plan (scheduler/transfers.py), on the
copy chain, so that copies run while the device computes; the graph orders them by the regions
they read and write: "A" the working store, "H" the host matrix, "pinned" its pieces.
The in-core factorization of a wide column is today's engine (getrf, potrf, geqrf's
recorders) on a window of the working store (backend/ops.StoreOps.window), recorded into the
same graph (scheduler/graph.WindowGraph), so that one graph holds the whole run.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any

from ..backend.pinning import PinnedPieces
from ..scheduler import Region, TaskGraph
from ..scheduler.graph import WindowGraph
from ..scheduler.transfers import TransferPlan
from ._blocked import first_failure, run_graph
from ._householder import LQ, QL, QR

UP_SLOTS = DOWN_SLOTS = 4  # staging slots each way (the in-core streamed store's count)
# pinned in place: pieces this large, so that the first copies wait for one piece's pinning
# (about 26 ms a GB) rather than the whole wide column's
PIN_PIECE_BYTES = 1 << 30
# ... and only the wide columns whose bytes cross the link this often (see the docstring)
PIN_WHEN_READ = 4
SLOTS_LANE = "copy:d2h-slots"  # the copy lane of send_panel_home


@dataclass(frozen=True)
class Orientation:
    """Which way the wide columns run on the matrix: its columns, or its rows (`transpose`).
    The canonical coordinates of _householder.Form without the reversal of QL: shape() and
    rect() as Form's."""

    transpose: bool

    def shape(self, m, n):
        return (n, m) if self.transpose else (m, n)

    def rect(self, m, n, r0, r1, c0, c1):
        return (c0, c1, r0, r1) if self.transpose else (r0, r1, c0, c1)


COLUMNS, ROWS = Orientation(False), Orientation(True)


def layout(routine, uplo="L", lookahead=1, nb=1):
    """(geometry, workspace columns) of a routine's working store: the orientation of its wide
    columns (getrf: A's columns; potrf: columns for lower, rows for upper; geqrf, geqlf,
    gelqf: their Householder form's canonical coordinates), and its workspaces counted as
    columns of the store's height (the Householder family's V and T slots: lookahead + 2 of
    the in-core engine's, 2 of the finished panels'; the others' diagonal inverse)."""
    householder = {"geqrf": QR, "geqlf": QL, "gelqf": LQ}
    if routine in householder:
        return householder[routine], nb * (lookahead + 5)
    return (COLUMNS if routine == "getrf" or uplo == "L" else ROWS), nb


def _working_bytes(ops, geometry, rows, cols, dtype, nb, extra):
    """What a working store of `cols` canonical columns of `rows` and its workspaces take."""
    return ops.required_bytes(*geometry.shape(rows, cols + extra), dtype, nb)


def width_for_budget(ops, geometry, rows, cols, dtype, nb, budget, extra=0, buffers=2):
    """The wide columns' width W: `cols` itself where the whole matrix fits `budget` (one wide
    column), else the widest multiple of nb with which `buffers` buffers of W and two slots of
    nb fit it. MemoryError where not even W = nb does."""
    if _working_bytes(ops, geometry, rows, cols, dtype, nb, extra) <= budget:
        return cols

    def fits(blocks):
        return _working_bytes(ops, geometry, rows, buffers * blocks * nb + 2 * nb, dtype, nb,
                              extra) <= budget
    if not fits(1):
        need = _working_bytes(ops, geometry, rows, (buffers + 2) * nb, dtype, nb, extra)
        raise MemoryError(f"out of core, the {rows} x {cols} matrix needs at least {need} "
                          f"bytes ({buffers} wide column buffer(s) and two block columns of "
                          f"nb = {nb}), over the budget of {budget} bytes (config "
                          f"device.memory_budget)")
    low, high = 1, max(1, -(-cols // nb))  # fits(low); the largest such, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return min(low * nb, cols)


def cut(columns, width, nb):
    """The wide columns' bounds [(c0, c1), ...] over `columns` canonical columns: all `width`
    wide but the first, which takes the remainder rounded up to a multiple of nb, and the
    last, which ends where the matrix does. (Equal widths with the remainder last, MAGMA's
    cut, left the narrowest wide column the most to stream: at n = 65536 under 16 GiB its
    left update was a third of the run and waited on the staging chain, perf/RESULTS.md.)"""
    if width >= columns:
        return [(0, columns)]
    count = -(-columns // width)
    first = min(width, -(-(columns - (count - 1) * width) // nb) * nb)
    bounds = [0, *range(first, columns, width), columns]
    return list(zip(bounds[:-1], bounds[1:]))


def budget_for_width(ops, routine, shape, dtype, nb, width, uplo="L", lookahead=1, buffers=2):
    """The budget with which `routine`'s out-of-core driver on an m x n matrix (`shape`) takes
    wide columns of `width` (a multiple of nb; `buffers` of them, plan.ooc_buffers): for tests
    and benchmarks that cap the budget to a number of wide columns. Where the matrix fits that
    budget whole, it is one wide column instead."""
    geometry, extra = layout(routine, uplo, lookahead, nb)
    rows, _ = geometry.shape(*shape)
    return _working_bytes(ops, geometry, rows, buffers * width + 2 * nb, dtype, nb, extra)


@dataclass
class WideColumn:
    """Wide column `index`: canonical columns c0:c1 of the matrix, in the working store's
    buffer whose first column is b0; `store` and `graph`: the window its in-core factorization
    runs on and the graph as that sees it (None where it has no rows left to factor)."""

    index: int
    c0: int
    c1: int
    b0: int
    store: Any = None
    graph: Any = None
    factored: int = 0  # its pivot (reflector) columns: min(rows - c0, c1 - c0)

    @property
    def width(self):
        return self.c1 - self.c0

    def own(self, resource, i0, i1):
        """A region of its window's own results ("piv", "tau") as the whole graph names it."""
        return self.graph.region(Region(resource, i0, i1))


@dataclass
class Panel:
    """A finished block column k0:k1 of wide column `column` as a left update reads it: the
    rectangle `rect` (on the working store) holds its rows r0:r1, in the wide column's buffer
    or streamed into a slot."""

    column: WideColumn
    k0: int
    k1: int
    rect: tuple
    region: Region = field(init=False)

    def __post_init__(self):
        self.region = Region("A", *self.rect)


class WideColumns:
    """The wide columns of an out-of-core run of `routine` on the host matrix `source` (the
    factors go to `result`, the same array with overwrite_a), their working store and the one
    graph that records them. A context manager: the store and the windows go whatever
    happens."""

    def __init__(self, source, result, plan, routine, uplo="L"):
        self.source, self.result, self.plan, self.routine = source, result, plan, routine
        self.ops, self.nb = plan.backend, plan.nb
        self.geometry, extra = layout(routine, uplo, plan.lookahead, plan.nb)
        self.M, self.N = self.geometry.shape(*result.shape)  # canonical rows and columns
        self.k_end = min(self.M, self.N)
        self.buffers = plan.ooc_buffers
        budget = sys.maxsize if plan.memory_budget is None else plan.memory_budget
        self.width = width_for_budget(self.ops, self.geometry, self.M, self.N, result.dtype,
                                      self.nb, budget, extra, self.buffers)
        W = self.width
        self.columns = [WideColumn(j, c0, c1, (j % self.buffers) * W)
                        for j, (c0, c1) in enumerate(cut(self.N, W, self.nb))]
        self.slot0 = self.buffers * W  # the streaming slots' first column
        cols = self.N if len(self.columns) == 1 else self.slot0 + 2 * self.nb
        # which wide columns are pinned in place, and the host matrix's pieces: planned before
        # any memory is taken (a bad setting must not leave a store behind)
        self.pinned = set()  # the wide columns pinned in place (their indices)
        self.pieces = None  # the host matrix's pieces (backend/pinning.PinnedPieces)
        self.pinned_pieces = set()
        if self._pins_in_place(plan, result):
            self.pinned = {column.index for column in self.columns
                           if self._crossings(column) >= PIN_WHEN_READ}
            # pieces start at every wide column and about every PIN_PIECE_BYTES inside one
            step = max(1, PIN_PIECE_BYTES // max(1, self.M * result.itemsize) // self.nb) * \
                self.nb
            self.pieces = PinnedPieces(result, [c0 for column in self.columns
                                                for c0 in range(column.c0, column.c1, step)])
            self.pinned_pieces = {
                piece for piece, c0 in enumerate(self.pieces.first_columns)
                if any(column.c0 <= c0 < column.c1 for column in self.columns
                       if column.index in self.pinned)}
        self.A = self.ops.matrix(*self.geometry.shape(self.M, cols), result.dtype, self.nb,
                                 settings=plan.device_settings)
        self._windows = {}
        self._panel_lane = False  # send_panel_home has its down slots
        try:
            self.A.use_staging(UP_SLOTS, DOWN_SLOTS)
            self.graph = TaskGraph()
            self.transfers = TransferPlan(self.graph, self.A, plan)
            if self.pinned_pieces:
                self.transfers.pin(-1, self.pieces, only=sorted(self.pinned_pieces))
        except BaseException:
            self.A.close()
            raise

    def _pins_in_place(self, plan, result):
        """Whether wide columns may be pinned in place (see the module's docstring):
        device.ooc_transfer "register", more than one wide column, each the host array's
        columns, and on a device a matrix of pages of its own."""
        return (plan.ooc_transfer == "register" and len(self.columns) > 1
                and (self.geometry is COLUMNS or self.geometry is QR)
                and result.flags.f_contiguous and result.nbytes > 0
                and (not self.ops.has_device
                     or result.nbytes >= plan.device_settings.pin_min_bytes))

    def _crossings(self, column):
        """How often the wide column's bytes cross the link: up and home once each, and once
        for each later wide column that streams its block columns (all but the next, which
        finds it still in the other buffer)."""
        if column.c0 >= self.k_end:
            return 2
        later = len(self.columns) - column.index - 1
        return 2 + max(0, later - (1 if self.buffers == 2 else 0))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for window in self._windows.values():
            window.close()
        self.A.close()

    def __iter__(self):
        return iter(self.columns)

    # -- where things are -------------------------------------------------------------------
    def place(self, r0, r1, c0, c1):
        """The working store's canonical rectangle r0:r1 x c0:c1, on the store."""
        return self.geometry.rect(self.A.m, self.A.n, r0, r1, c0, c1)

    def home(self, r0, r1, c0, c1):
        """The matrix's canonical rectangle r0:r1 x c0:c1, on the host array."""
        return self.geometry.rect(*self.result.shape, r0, r1, c0, c1)

    def buffer(self, column, r0, r1):
        """Rows r0:r1 of wide column `column` in its buffer, on the working store."""
        return self.place(r0, r1, column.b0, column.b0 + column.width)

    def window(self, r0, r1, c0, c1):
        """A store over a rectangle of the working store (as `place` and `buffer` give it: on
        the store), in place: the backend's window, made once."""
        rect = (r0, r1, c0, c1)
        if rect not in self._windows:
            self._windows[rect] = self.ops.window(self.A, *rect)
        return self._windows[rect]

    # -- copies -----------------------------------------------------------------------------
    def bring_up(self, column, r0, r1):
        """Rows r0:r1 of the wide column from the host matrix to its buffer, a block column of
        nb at a time, so that the work that needs only the first ones can start."""
        for c0 in range(column.c0, column.c1, self.nb):
            c1 = min(c0 + self.nb, column.c1)
            self._up(c0 // self.nb, self.source, self.home(r0, r1, c0, c1),
                     self.place(r0, r1, column.b0 + c0 - column.c0, column.b0 + c1 - column.c0),
                     column)

    def send_home(self, column, r0, r1):
        """Rows r0:r1 of the wide column, final, from its buffer to the host matrix."""
        if r1 <= r0:
            return
        self._down(column.c0 // self.nb, self.buffer(column, r0, r1),
                   self.home(r0, r1, column.c0, column.c1), column)

    def send_rect_home(self, step, rect, home):
        """The store's rectangle `rect` to the host matrix's `home` (same shape, in no pinned
        wide column), staged beside the way home."""
        self._down(step, rect, home, None, lane=SLOTS_LANE)

    def reserve_panel_slots(self):
        """Before any copy is recorded: send_panel_home's copies go beside the way home, on
        a copy lane with two down slots of its own (a streaming slot is written again two
        block columns after it is read, and shared down slots made its copy wait for the way
        home of a whole wide column, which had recorded its copies first)."""
        self.transfers.reserve_down_slots(SLOTS_LANE, 2)
        self._panel_lane = True

    def send_panel_home(self, panel, r0, r1):
        """Rows r0:r1 of the streamed block column `panel`, from its slot to the host matrix
        (where the device changed them: getrf_ooc's late interchanges)."""
        if self.geometry is not COLUMNS:
            raise NotImplementedError("send_panel_home: the wide columns must be A's columns")
        if not self._panel_lane:
            raise RuntimeError("send_panel_home: reserve_panel_slots() first")
        _, _, s0, s1 = panel.rect  # its slot's columns
        self._down(panel.k0 // self.nb, (r0, r1, s0, s1), self.home(r0, r1, panel.k0, panel.k1),
                   panel.column, lane=SLOTS_LANE)

    def _down(self, step, rect, home, column, lane="copy:d2h"):
        """The host rectangle `home` of the host matrix := the store's `rect` (same shape),
        which lies in wide column `column`'s columns (None: in no pinned one): straight into
        the host matrix where that wide column is pinned, else staged (on copy lane `lane`)."""
        h0, h1, g0, g1 = home
        if column is None or column.index not in self.pinned:
            self.transfers.download(step, *rect, target=self.result[h0:h1, g0:g1],
                                    writes=[Region("H", h0, h1, g0, g1)], lane=lane)
            return
        for pinned, (a0, a1, b0, b1), piece_rect in self._pieces((h0, h1, g0, g1), rect):
            self.transfers.download_direct(step, *piece_rect,
                                           target=self.result[a0:a1, b0:b1],
                                           reads=pinned, writes=[Region("H", a0, a1, b0, b1)])

    def _up(self, step, array, home, rect, column):
        """The store's rectangle `rect` := the host rectangle `home` of `array` (the user's
        input or the host matrix), which lies in wide column `column`'s columns: straight
        from the host matrix where that wide column is pinned, else staged."""
        h0, h1, g0, g1 = home
        if column.index not in self.pinned or array is not self.result:
            self.transfers.upload(step, array[h0:h1, g0:g1], *rect,
                                  reads=[Region("H", h0, h1, g0, g1)])
            return
        for pinned, (a0, a1, b0, b1), piece_rect in self._pieces(home, rect):
            self.transfers.upload_direct(step, array[a0:a1, b0:b1], *piece_rect,
                                         reads=[Region("H", a0, a1, b0, b1), *pinned])

    def _pieces(self, home, rect):
        """A copy between the host rectangle `home` (in a pinned wide column's columns) and
        the store's `rect` (same shape), cut where the host matrix's pieces meet: (the pinned
        piece's region, or none for the sliver of a page that belongs to an unpinned piece,
        which the DMA then copies at pageable speed; host rectangle; store rectangle) each."""
        h0, _, g0, _ = home
        s0, _, t0, _ = rect
        for piece, (a0, a1, b0, b1) in self.pieces.split(*home):
            pinned = [Region("pinned", piece, piece + 1)] if piece in self.pinned_pieces else []
            yield pinned, (a0, a1, b0, b1), (s0 + a0 - h0, s0 + a1 - h0, t0 + b0 - g0,
                                              t0 + b1 - g0)

    # -- the left-looking update ------------------------------------------------------------
    def finished(self, column):
        """The wide columns on its left that hold pivot (reflector) columns, in order."""
        return [p for p in self.columns[:column.index] if p.c0 < self.k_end]

    def panels(self, column, p, rows):
        """The block columns k0:k1 of the finished wide column p, in order, as the update of
        `column` reads them: their rows rows(k0, k1) = (r0, r1). The wide column just before
        `column` is still in its buffer; an older one's block columns come from the host
        matrix (the factors, already home), each into the next streaming slot in turn (so
        does the previous one, with one buffer)."""
        for k0 in range(p.c0, min(p.c1, self.k_end), self.nb):
            k1 = min(k0 + self.nb, p.c1, self.k_end)
            r0, r1 = rows(k0, k1)
            if p.index == column.index - 1 and self.buffers == 2:
                rect = self.place(r0, r1, p.b0 + k0 - p.c0, p.b0 + k1 - p.c0)
            else:
                s0 = self.slot0 + self.graph.counter("slot") % 2 * self.nb
                rect = self.place(r0, r1, s0, s0 + k1 - k0)
                self._up(k0 // self.nb, self.result, self.home(r0, r1, k0, k1), rect, p)
            yield Panel(p, k0, k1, rect)

    # -- the in-core factorization ----------------------------------------------------------
    def factor(self, column, record, *args):
        """Record the in-core factorization of the wide column's rows c0: (`record(graph,
        store, plan, *args)`: getrf's, potrf's or geqrf's recorder) on a window of its buffer,
        into the run's graph; the window's pivots, tau and infos are its own."""
        rect = self.buffer(column, column.c0, self.M)
        column.store = self.window(*rect)
        column.graph = WindowGraph(self.graph, "A", rect[0], rect[2], f"wide {column.index}:",
                                   step0=column.c0 // self.nb)
        column.factored = min(self.M - column.c0, column.width)
        # the first wide column is still coming up as its factorization starts (the others
        # are up while the one before them is factored)
        plan = self.plan if column.index or len(self.columns) == 1 else \
            replace(self.plan, arriving=self.plan.ooc_transfer)
        for _ in record(column.graph, column.store, plan, *args):
            pass

    def task(self, name, column, lane, fn, **kw):
        """A task of the left-looking update of wide column `column` (its step: the first)."""
        return self.graph.add(name, column.c0 // self.nb, lane, fn, **kw)

    # -- the run ----------------------------------------------------------------------------
    def run(self, trace=None):
        """Run the recorded graph; returns the trace, which says how the matrix was cut."""
        trace = run_graph(self.graph, self.plan, self.routine, trace)
        budget = self.plan.memory_budget or sys.maxsize
        trace.metadata["out_of_core"] = {"width": self.width, "wide_columns": len(self.columns),
                                         "buffers": self.buffers,
                                         "transfer": self.plan.ooc_transfer,
                                         "pinned": sorted(self.pinned),
                                         "budget": budget if budget < sys.maxsize else None}
        return trace

    def first_failure(self, infos):
        """LAPACK's info: the first failing step of the first wide column with one, global
        (`infos(store)`: the steps' infos of a window, after the run)."""
        for column in self.columns:
            if column.store is not None:
                local = first_failure(infos(column.store), self.nb)
                if local:
                    return column.c0 + local
        return 0
