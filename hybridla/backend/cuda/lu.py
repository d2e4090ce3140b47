"""What LU panels ask of the cuda backend (panel/lu.py): the panel's factorization (our fused
kernel, cuSOLVER getrf, a thread-block cluster's leaf, the tournament of cuda/tslu.cu), its info,
and the row interchanges (cuda/laswp.cu: replayed pivots, or the row moves they amount to).

Module-level functions over (lane, A, ...): A the tile store (DeviceMatrix), the caller has
entered `lane` (a CudaLane) and the work is enqueued on its stream, no host wait. Kernels and
launch limits are the lane's backend's.
"""
from __future__ import annotations

import ctypes

from nvmath.bindings import cusolverDn

from .. import _driver
from .. import tournament as _tournament
from .runtime import _LEAF_CLUSTER, _PREFIX

_LASWP_THREADS = 128
# laswp.cu's moves: MOVES_THREADS x MOVES_PER_THREAD moves per column at most (2 per pivot)
_MOVES_THREADS, _MOVES_MAX_WIDTH, _MOVES_MAX_BLOCKS = 256, 2048, 4096
_FUSED_PANEL_THREADS = 256     # getrf_panel.cu: one thread per row of a block's share, mostly
_FUSED_PANEL_MIN_ROWS = 256    # a short panel takes fewer blocks: fewer to hear from per column
_FUSED_PANEL_MAX_WIDTH = 256   # the widest panel it takes
_FUSED_PANEL_COOPERATIVE = True  # cuLaunchCooperativeKernel: the blocks' residency guaranteed
_TSLU_FINISH_THREADS = 256  # tslu.cu's finish: a row of L21, or a column of the moves, each


class _FusedPanelSlots:
    """The exchange area of the fused LU panel kernel (cuda/getrf_panel.cu), one per tile store:
    per block and parity of the column its candidate row, magnitude, row index and tag, and block
    0's row j. Sized for the most blocks and the widest panel the kernel takes."""

    def __init__(self, store, max_blocks):
        real_size = 8  # the magnitudes, at most a double
        self.max_blocks, item = max_blocks, store.itemsize
        rows = 2 * max_blocks * _FUSED_PANEL_MAX_WIDTH * item
        row_j = 2 * _FUSED_PANEL_MAX_WIDTH * item
        magnitudes, indices = 2 * max_blocks * real_size, 2 * max_blocks * 4
        base = int(store._alloc(rows + row_j + magnitudes + 2 * indices))
        self.rows, self.row_j = base, base + rows
        self.magnitudes = self.row_j + row_j
        self.indices = self.magnitudes + magnitudes
        self.tags = self.indices + indices

    def arguments(self, stream):
        """The kernel's slot arguments for a launch on `stream`, its tags zeroed first on the
        same stream (a memset on another stream could land while the kernel runs and erase a
        tag that blocks are waiting for)."""
        _driver.memset_d32_async(self.tags, 0, 2 * self.max_blocks, stream)
        return (ctypes.c_void_p(self.rows), ctypes.c_void_p(self.row_j),
                ctypes.c_void_p(self.magnitudes), ctypes.c_void_p(self.indices),
                ctypes.c_void_p(self.tags), ctypes.c_uint(1))


def getrf_panel(lane, A, step, r0, c0, c1, r1=None):
    """The LU of the panel A[r0:r1, c0:c1] (r1 None: to the last row), its pivots global
    0-based rows on the device, its info in the step's slot: our one-launch kernel where the
    panel fits in the SMs' shared memory (the leaves of recursive panels), else cuSOLVER
    getrf."""
    backend = lane.backend
    panel = A.block(r0, A.m if r1 is None else r1, c0, c1)
    piv_ptr = int(A.pivots_dev) + c0 * 4
    info_ptr = int(A.info_dev) + step * 4
    shape = backend.fused_panel_shape(panel.rows, panel.cols, A.itemsize)
    if shape is not None:
        blocks, rows_per_block, shared = shape
        backend.kernels.launch(
            f"getrf_panel_fused_{_PREFIX[A.dtype]}", (blocks,), (_FUSED_PANEL_THREADS,),
            lane.handle, ctypes.c_void_p(panel.ptr), ctypes.c_longlong(panel.ld),
            ctypes.c_int(panel.rows), ctypes.c_int(panel.cols), ctypes.c_int(rows_per_block),
            ctypes.c_void_p(piv_ptr), ctypes.c_int(r0), ctypes.c_void_p(info_ptr),
            *A.panel_slots.arguments(lane.handle), shared=shared,
            cooperative=_FUSED_PANEL_COOPERATIVE)
        return
    work = int(A.solver_workspace)
    getrf = getattr(cusolverDn, _PREFIX[A.dtype] + "getrf")
    getrf(lane.solver, panel.rows, panel.cols, panel.ptr, panel.ld, work, piv_ptr, info_ptr)
    count = c1 - c0
    backend.kernels.launch("pivots_to_global", (-(-count // 256),), (256,), lane.handle,
                           ctypes.c_void_p(piv_ptr), ctypes.c_int(count), ctypes.c_int(r0))


def getrf_leaf(lane, A, step, r0, c0, c1, k0=None, k1=None, r1=None):
    """The leaf A[r0:r1, c0:c1] of the panel A[r0:r1, k0:k1] (k0, k1 default c0, c1; r1 None:
    to the last row) by partial pivoting, its interchanges applied to the panel's other
    columns too; pivots global 0-based rows, the info left to panel_info. One launch on a
    thread-block cluster (cuda/getrf_leaf_cluster.cu) for a float leaf of up to 16 columns
    and 32768 rows, where the lane can launch its cluster of 16 (not in a green context of
    fewer SMs than a GPU processing cluster); else getrf_panel and laswp."""
    k0, k1, r1 = c0 if k0 is None else k0, c1 if k1 is None else k1, A.m if r1 is None else r1
    rows, width = r1 - r0, c1 - c0
    if not (lane.cluster_blocks >= _LEAF_CLUSTER["blocks"]
            and A.dtype in _LEAF_CLUSTER["dtypes"]
            and width <= min(rows, _LEAF_CLUSTER["max_width"])
            and rows <= _LEAF_CLUSTER["max_rows"]):
        lane.backend.getrf_panel(lane, A, step, r0, c0, c1, r1=r1)
        _interchange_other_columns(lane, A, step, c0, c1, k0, k1)
        return
    lane.backend.kernels.launch(
        "getrf_leaf_cluster_s", (_LEAF_CLUSTER["blocks"],), (_LEAF_CLUSTER["threads"],),
        lane.handle, ctypes.c_void_p(A.block(r0, r1, c0, c1).ptr), ctypes.c_longlong(A.ld),
        ctypes.c_int(rows), ctypes.c_int(width), ctypes.c_int(c0 - k0), ctypes.c_int(k1 - c1),
        ctypes.c_void_p(int(A.pivots_dev) + c0 * 4), ctypes.c_int(r0))


def _interchange_other_columns(lane, A, step, c0, c1, k0, k1):
    """A leaf's interchanges (pivots c0..c1-1) in the panel's columns k0:c0 and c1:k1, as
    the row moves they amount to (replayed column by column, each thread would make the
    leaf's c1 - c0 dependent swaps). The moves go to the step's slot, a part of it that
    prepare_interchanges overwrites once the panel is done (same lane, in order)."""
    backend = lane.backend
    backend.prepare_interchanges(lane, A, step, c0, c1)
    try:
        backend.laswp(lane, A, k0, c0, c0, c1)
        backend.laswp(lane, A, c1, k1, c0, c1)
    finally:
        A.moves.pop((c0, c1), None)


def tslu_panel(lane, A, step, r0, c0, c1, k0=None, k1=None):
    """The leaf A[r0:, c0:c1] of the panel A[r0:, k0:k1] (k0, k1 default c0, c1) by
    tournament pivoting, its interchanges applied to the panel's other columns too: two
    launches (cuda/tslu.cu). Pivots global 0-based rows; the info is left to panel_info. A
    leaf wider than backend/tournament.TOURNAMENT_WIDTH or with fewer rows than columns goes
    to getrf_panel and laswp."""
    backend = lane.backend
    k0, k1 = c0 if k0 is None else k0, c1 if k1 is None else k1
    rows, width = A.m - r0, c1 - c0
    chunk, fan = _tournament.tournament_tree()
    shared = (chunk + width) * width * A.itemsize  # a node's rows; the root's first rows
    finish_shared = _TSLU_FINISH_THREADS * width * A.itemsize  # a row of L21 per thread
    if width > _tournament.TOURNAMENT_WIDTH or rows < width or \
            max(shared, finish_shared) > backend.tslu_shared:
        backend.getrf_panel(lane, A, step, r0, c0, c1)
        _interchange_other_columns(lane, A, step, c0, c1, k0, k1)
        return
    candidates, counts, arrivals, moves = A.tournament_tree(lane, chunk, fan)
    prefix, top = _PREFIX[A.dtype], A.block(r0, A.m, k0, k1)
    backend.kernels.launch(
        f"tslu_{prefix}", (-(-rows // chunk),), (chunk,), lane.handle,
        ctypes.c_void_p(A.block(r0, A.m, c0, c1).ptr), ctypes.c_longlong(A.ld),
        ctypes.c_int(rows), ctypes.c_int(width), ctypes.c_int(fan),
        ctypes.c_void_p(candidates), ctypes.c_void_p(counts), ctypes.c_void_p(arrivals),
        ctypes.c_void_p(int(A.pivots_dev) + c0 * 4), ctypes.c_int(r0), ctypes.c_void_p(moves),
        shared=shared)
    row_blocks = -(-(rows - width) // _TSLU_FINISH_THREADS)
    column_blocks = -(-(k1 - k0 - width) // _TSLU_FINISH_THREADS)
    if row_blocks + column_blocks:
        backend.kernels.launch(
            f"tslu_finish_{prefix}", (row_blocks + column_blocks,), (_TSLU_FINISH_THREADS,),
            lane.handle, ctypes.c_void_p(top.ptr), ctypes.c_longlong(A.ld), ctypes.c_int(rows),
            ctypes.c_int(width), ctypes.c_int(k1 - k0), ctypes.c_int(c0 - k0),
            ctypes.c_int(row_blocks), ctypes.c_void_p(moves), shared=finish_shared)


def fused_panel_shape(backend, rows, cols, itemsize):
    """(blocks, rows per block, shared bytes) of the fused panel kernel for a rows x cols
    panel, or None where it does not take it: wider than its tags allow, fewer rows than
    columns, or a share of rows too large for one SM's shared memory. Block 0 must hold the
    first `cols` rows (the rows that become U)."""
    if cols > _FUSED_PANEL_MAX_WIDTH or rows < cols or cols == 0:
        return None
    blocks = min(backend.multiprocessors, -(-rows // _FUSED_PANEL_MIN_ROWS))
    per_block = max(-(-rows // blocks), cols)
    shared = (per_block + 2) * cols * itemsize
    if shared > backend.fused_panel_shared:
        return None
    return -(-rows // per_block), per_block, shared


def panel_info(lane, A, step, k0, k1):
    """The step's info := the first exactly zero U(i, i) of the panel's diagonal block
    (1-based within it), else 0: LAPACK getrf's info, for a panel factored in pieces."""
    lane.backend.kernels.launch(
        f"first_zero_diagonal_{_PREFIX[A.dtype]}", (1,), (256,), lane.handle,
        ctypes.c_void_p(A.block(k0, k1, k0, k1).ptr), ctypes.c_longlong(A.ld),
        ctypes.c_int(k1 - k0), ctypes.c_void_p(int(A.info_dev) + step * 4))


def prepare_interchanges(lane, A, step, k0, k1):
    """Turn the step's pivots k0..k1-1 (global rows, on the device) into the row moves they
    amount to (cuda/laswp.cu's pivots_to_moves), for the step's laswps to apply at once."""
    width, first = k1 - k0, step + 4 * k0
    if not 0 < width <= _MOVES_MAX_WIDTH or first + 1 + 4 * width > A.moves_ints:
        A.moves.pop((k0, k1), None)
        return
    hash_size = 1 << (2 * width - 1).bit_length()
    moves = int(A.moves_dev) + first * 4
    lane.backend.kernels.launch("pivots_to_moves", (1,), (256,), lane.handle,
                                ctypes.c_void_p(int(A.pivots_dev)), ctypes.c_int(k0),
                                ctypes.c_int(k1), ctypes.c_int(hash_size),
                                ctypes.c_void_p(moves), shared=(width + 2 * hash_size) * 4)
    A.moves[(k0, k1)] = moves


def laswp(lane, A, c0, c1, k0, k1, forward=True, pivots_of=None):
    """Apply the interchanges of pivots k0..k1-1 (global rows; of `pivots_of`, default A) to
    columns c0:c1: as the row moves prepare_interchanges made of them where it did, else
    replayed column by column."""
    ncols = c1 - c0
    if ncols <= 0 or k1 <= k0:
        return
    owner = A if pivots_of is None else pivots_of  # the store whose pivots these are
    moves = owner.moves.get((k0, k1)) if forward else None
    if moves is not None:
        lane.backend.kernels.launch(f"apply_moves_{A.itemsize}",
                                    (min(ncols, _MOVES_MAX_BLOCKS),), (_MOVES_THREADS,),
                                    lane.handle, ctypes.c_void_p(A.ptr + c0 * A.ld * A.itemsize),
                                    ctypes.c_longlong(A.ld), ctypes.c_int(ncols),
                                    ctypes.c_void_p(moves))
        return
    pivots = int(owner.pivots_dev)
    lane.backend.kernels.launch(f"laswp_{A.itemsize}", (-(-ncols // _LASWP_THREADS),),
                                (_LASWP_THREADS,), lane.handle,
                                ctypes.c_void_p(A.ptr + c0 * A.ld * A.itemsize),
                                ctypes.c_longlong(A.ld), ctypes.c_int(ncols),
                                ctypes.c_void_p(pivots), ctypes.c_int(k0), ctypes.c_int(k1),
                                ctypes.c_int(1 if forward else 0))
