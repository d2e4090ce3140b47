"""The contract between the algorithms and the backends, family by family.

panel/, update/, lapack/ and the scheduler talk to a backend only through the operations
declared here; `backend/cuda/` and `backend/host/` implement them with the same family files
side by side (runtime, memory, store, transfers, blas, lu, qr, chol, mixed), and mypy checks
in CI that both satisfy `Backend` (backend/_conformance.py). Conventions of every operation:

- `lane` first: where the work goes (a CUDA stream with its own cuBLAS/cuSOLVER handles, or a
  host worker). Work on a device lane is enqueued, not finished, when the call returns, unless
  the contract says "complete on return"; a host lane computes at once.
- Blocks are rectangles of a tile store (`TileStore.block`, `.workspace`, `.scratch`, or
  `Backend.sub_block` of one), with `.shape`; column-major, as LAPACK's.
- Names and arguments are LAPACK's where LAPACK has the operation (uplo "U"/"L"/"A", trans
  "N"/"T"/"C", side "L"/"R", diag "N"/"U"); `alpha`, `beta` scalars of the block's dtype.
- Indices are 0-based, ranges half-open; pivots are global 0-based rows; infos as LAPACK's
  (1-based).

The backend reads no configuration: every setting it needs arrives as an argument, gathered
into `DeviceSettings` by the plan (scheduler/plan.py) or, for a call outside any plan, by the
user layer. Capabilities are attributes with defaults (`BackendDefaults`), never probed with
getattr.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class DeviceSettings:
    """The device settings of one run (config keys `device.*`, documented in config.py).

    copy_threads: threads of a host copy into or out of pinned memory (0: one per core).
    panel_sms, sm_split: SMs set aside for the panel lane and how ("cublas" or "green").
    memory_pool: whether device allocations come from a pool.
    host_transfer: how a host matrix moves (as config.py lists).
    pin_min_bytes: below this a host matrix is copied pageable, neither staged nor pinned.
    pool_max_bytes: what the pool may keep cached once a public call returns (None: all).
    qr_panel_leaf: the widest leaf of a device's recursive Householder panel (0: the vendor's
        whole-panel geqrf).
    """

    copy_threads: int = 0
    panel_sms: int = 0
    sm_split: str = "cublas"
    memory_pool: bool = True
    host_transfer: str = "staged"
    pin_min_bytes: int = 1 << 26
    pool_max_bytes: int | None = 1 << 30
    qr_panel_leaf: int = 16


class BackendDefaults:
    """Capability flags, with the defaults of a plain backend; a backend that differs says so
    by overriding the attribute.

    has_device: the matrix lives in device memory; CPU panels travel through pinned buffers.
    herk_is_gemm: the Cholesky update of a block column is one gemm call (a reduced-precision
        backend rounds A21 once and runs gemms on it; update/chol.py).
    herk_panel_slots: how many rounded panels such a backend keeps in flight (one per step,
        in turn: lapack/potrf.py).
    gemm_copies_operands: gemm reads its operands into rounded copies first, so the output may
        overlap them (update/chol.py updates a diagonal block in place then).
    batched, ldl: families that the device paths of stacks and of solve's structured forms
        reach as modules (None: host arrays take scipy's paths).
    panel_ops: the operations panels run with (a reduced-precision backend keeps its panels in
        the working precision of the backend it wraps).
    """

    has_device: bool = False
    batched: Any = None  # the stacks-of-matrices family of a device backend (cuda/batched.py)
    ldl: Any = None  # its structured solves: sytrf/sytrs, triangular, diagonal (cuda/ldl.py)
    herk_is_gemm: bool = False
    herk_panel_slots: int = 0
    gemm_copies_operands: bool = False

    @property
    def panel_ops(self) -> Any:
        return self


class Lane(Protocol):
    """Where work goes. `with lane:` makes it the caller's (the device context current, the
    lane's handles held); `record()` an event after the work enqueued so far (None on the
    host); `wait_for(events)` makes later work on the lane wait for them (on the device, not
    the host)."""

    name: str

    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: Any) -> Any: ...
    def wait_for(self, events: Any) -> None: ...
    def record(self) -> Any: ...


@runtime_checkable
class TileStore(Protocol):
    """A matrix being factored, and everything that lives with it: pivots, tau, the panels'
    infos, workspaces. What every algorithm asks of it on both backends.

    m, n, dtype, nb: the matrix. `streamed`: it lives in host memory and moves through the
    device as the run goes (the CPU interface on a device backend): the transfer plan
    (scheduler/transfers.py) then brings each tile up before its first reader and sends it
    home once final. `residency`: where each tile lives and which copies are valid
    (backend/residency.Residency)."""

    m: int
    n: int
    nb: int
    dtype: Any
    streamed: bool
    residency: Any

    def block(self, r0: int, r1: int, c0: int, c1: int) -> Any:
        """A[r0:r1, c0:c1] as a block where the store computes (no copy)."""
    def read_block(self, r0: int, r1: int, c0: int, c1: int) -> Any:
        """A host copy of A[r0:r1, c0:c1], complete on return (a host wait on a device)."""
    def diagonal(self) -> Any:
        """A host copy of the diagonal, complete on return."""
    def workspace(self, name: str, rows: int, cols: int, dtype: Any = None) -> Any:
        """A block that lives with the store (of the store's dtype, or `dtype`), allocated on
        first use; recorders ask for the largest size first, before the run, and a graph
        Region of the same name orders its reuse. Freed by close()."""
    def scratch(self, lane: Any, rows: int, cols: int) -> Any:
        """A temporary block for one operation on `lane`."""
    def host_panel(self, step: int, r0: int, c0: int, c1: int, r1: int | None = None) -> Any:
        """The host array a CPU panel of `step` works on (the matrix itself on the host; the
        step's pinned buffer on a device)."""
    def set_panel_result(self, step: int, c0: int, c1: int, pivots: Any, info: int,
                         tau: Any = None) -> None:
        """A panel's pivots (global 0-based, entries c0:c1), its info (the step's slot) and its
        tau (tau[c0:c1]; for QL and LQ the reflectors' range)."""
    def set_pivots(self, pivots: Any) -> None:
        """Existing factors' pivots (a solve on given factors)."""
    def finish(self) -> tuple[Any, Any]:
        """(pivots, the steps' infos), final once every task has run."""
    def finish_tau(self) -> tuple[Any, Any]:
        """(tau, the steps' infos), as finish() for the Householder factorizations."""
    def set_tau(self, tau: Any) -> None:
        """Existing factors' scalars."""
    def tau_block(self, t0: int, t1: int) -> Any:
        """tau[t0:t1] as an operand block."""
    def track_one_norm(self, arriving: bool = False) -> None:
        """Start summing |a_ij| down the columns before the factorization overwrites them (at
        once where the matrix is; as each block arrives when streamed, or where `arriving`:
        its blocks are copied in by tasks of the run)."""
    def one_norm(self) -> float:
        """||A||_1 of the input (LAPACK lange's "1"), after track_one_norm()."""
    def close(self) -> None:
        """Free the store's device memory and buffers (always: use finally)."""


class StagedTileStore(TileStore, Protocol):
    """Copies between a store and host arrays through staging slots (pinned on a device), so
    that they overlap compute: `use_staging(up, down)` takes the slots (slot_elements each,
    held until end_staging or close), a CPU task fills an up slot from any 2-D host array
    (stage_array) and the DMA follows (upload_staged: the slot into the store's rectangle);
    downwards DMA into a down slot (download_staged), then a CPU task copies it into a host
    array (unstage_array). Out-of-core's working store moves its wide columns and finished
    block columns so (lapack/_ooc.py); a streamed store its own host matrix."""

    staged: bool
    up_slots: int
    down_slots: int
    slot_elements: int

    def use_staging(self, up_slots: int, down_slots: int) -> None: ...
    def end_staging(self) -> None: ...
    def stage_array(self, lane: Any, slot: int, source: Any) -> None: ...
    def upload_staged(self, lane: Any, slot: int, r0: int, r1: int, c0: int, c1: int) -> None: ...
    def download_staged(self, lane: Any, slot: int, r0: int, r1: int, c0: int,
                        c1: int) -> None: ...
    def unstage_array(self, lane: Any, slot: int, target: Any) -> None: ...
    # or without the slots: a host array pinned in place (`pin_host`, a range of addresses,
    # unpinned by `close`; False where it could not be), then DMA between it and a rectangle
    # (upload_array, download_array: any F-ordered 2-D view; from memory that is not pinned
    # they still copy, at pageable speed)
    def pin_host(self, lo: int, hi: int) -> bool: ...
    def upload_array(self, lane: Any, source: Any, r0: int, r1: int, c0: int, c1: int) -> None: ...
    def download_array(self, lane: Any, r0: int, r1: int, c0: int, c1: int,
                       target: Any) -> None: ...


class StreamedTileStore(StagedTileStore, Protocol):
    """The transfers of a store whose home is a host array (the CPU interface on a device).
    Each moves one rectangle; the transfer plan records them as tasks and updates residency.

    Staged: a CPU task copies the rectangle into pinned slot `slot` (stage_block) and the DMA
    follows (upload_staged); downwards DMA into a slot (download_staged), then a CPU task
    copies it out (unstage_block). Pinned in place: the host array is pinned in pieces
    (plan_pin_pieces, pin_piece) and upload_block / download_block copy directly. A CPU panel
    goes down to a pinned buffer and back on its own copy lanes (panel_to_host,
    panel_to_device)."""

    pin: bool
    transfer: str

    def stage_block(self, lane: Any, slot: int, r0: int, r1: int, c0: int, c1: int) -> None: ...
    def unstage_block(self, lane: Any, slot: int, r0: int, r1: int, c0: int, c1: int) -> None: ...
    def plan_pin_pieces(self, pieces: int) -> Any: ...
    def pin_piece(self, piece: int) -> None: ...
    def upload_block(self, lane: Any, r0: int, r1: int, c0: int, c1: int) -> None: ...
    def download_block(self, lane: Any, r0: int, r1: int, c0: int, c1: int) -> None: ...
    def panel_to_host(self, lane: Any, step: int, r0: int, c0: int, c1: int,
                      r1: int | None = None) -> None: ...
    def panel_to_device(self, lane: Any, step: int, r0: int, c0: int, c1: int,
                        r1: int | None = None) -> None: ...


class RuntimeOps(Protocol):
    """Lanes and runs. name, device_name: for traces and `hybridla info`."""

    name: str
    device_name: str
    has_device: bool

    def lane(self, name: str) -> Any:
        """The lane of that name ("cpu:<i>", "gpu:panel" the most urgent, "gpu:update",
        "copy:h2d", "copy:d2h", "copy:panel-h2d", "copy:panel-d2h"), made on first use."""
    def begin_run(self, workers: int, settings: DeviceSettings | None = None) -> None:
        """A run of the engine starts with `workers` host threads (the BLAS limit of host
        runs, counted across concurrent runs; the device's SM split per `settings`)."""
    def end_run(self) -> None:
        """Undo begin_run's changes (the last concurrent run restores the BLAS limit)."""
    def update_tasks(self, workers: int) -> int:
        """How many tasks a trailing update is cut into (one GEMM fills a GPU; the host
        wants one per worker)."""
    def synchronize(self) -> None:
        """Wait on the host for everything enqueued on every lane."""
    def host_wait(self, events: Any) -> None:
        """Wait on the host for these events (a named point: say why at the call)."""
    def replay(self, lane: Any, recordings: dict, key: Any, record: Any,
               launch: bool = True) -> None:
        """Run record() (work on `lane` only: no host wait, no allocation), recorded once per
        key into `recordings` and replayed after that (a CUDA graph; the host runs it)."""


class MemoryOps(Protocol):
    def allocated_bytes(self) -> int:
        """Bytes held by live stores and arrays where the backend computes (device memory; on
        the host, the working stores of its own: `matrix`'s)."""
    def cached_bytes(self) -> int:
        """Device bytes the pool keeps for reuse."""
    def free_cached(self) -> None:
        """Give the pool's cached memory back to the driver."""
    def required_bytes(self, m: int, n: int, dtype: Any, nb: int) -> int:
        """The most memory a tile store of an m x n matrix and its workspaces take where the
        backend computes (what the budget device.memory_budget is held against)."""


class StoreOps(Protocol):
    def matrix(self, m: int, n: int, dtype: Any, nb: int,
               settings: DeviceSettings | None = None) -> Any:
        """A new m x n tile store where the backend computes (uninitialized), following the
        run's settings (a device's memory pool)."""
    def host_matrix(self, source: Any, result: Any, nb: int, dtype: Any = None,
                    settings: DeviceSettings | None = None) -> Any:
        """A store whose home is the host array `source`, its results going to `result`
        (the same array with overwrite_a): on the host it computes there; on a device it is
        streamed (StreamedTileStore) or uploaded whole, per the run's DeviceSettings. A
        narrower `dtype` (a mixed solver's low-precision copy, `result` None) is rounded on
        the way."""
    def window(self, A: Any, r0: int, r1: int, c0: int, c1: int) -> Any:
        """A store over rows r0:r1 x columns c0:c1 of store A, in place: a part of a working
        area factored in-core (out-of-core's wide columns). Its results are its own (pivots,
        tau, infos); A's workspaces, scratch blocks and panel buffers it shares (a graph
        Region keeps a workspace's name, so the graph orders their reuse). Freed with A."""
    def wrap(self, a: Any, pivots: Any = None, tau: Any = None) -> Any:
        """A store over an existing array, in place (the stages after a factorization)."""
    def empty(self, shape: Any, dtype: Any, like: Any = None, pooled: bool = False) -> Any:
        """A new column-major array where the backend computes (of `like`'s kind; `pooled`:
        from that kind's own allocator, where it pools)."""


class TransferOps(Protocol):
    def to_host(self, lane: Any, B: Any, out: Any = None) -> Any:
        """A new F-ordered host copy of block B, or `out` filled; complete on return."""
    def from_host(self, lane: Any, x: Any, B: Any) -> None:
        """Block B := host array x (B's shape and dtype); complete on return."""
    def sub_block(self, B: Any, r0: int, r1: int, c0: int, c1: int) -> Any:
        """Rows r0:r1, columns c0:c1 of block B, as a block (a view: no copy, no lane)."""
    def strided_columns(self, B: Any, first: int, count: int, step: int) -> Any:
        """Columns first, first + step, ... of B as a block (no copy)."""


class BlasOps(Protocol):
    """BLAS and LAPACK auxiliaries on blocks, as their LAPACK namesakes."""

    def gemm(self, lane: Any, alpha: Any, A: Any, B: Any, beta: Any, C: Any,
             trans_a: str = "N", trans_b: str = "N") -> None:
        """C := alpha op(A) op(B) + beta C."""
    def trsm(self, lane: Any, side: str, uplo: str, trans: str, diag: str, alpha: Any, T: Any,
             B: Any) -> None:
        """B := alpha op(T)^-1 B ("L") or alpha B op(T)^-1 ("R")."""
    def trsv(self, lane: Any, uplo: str, trans: str, diag: str, T: Any, x: Any) -> None:
        """x := op(T)^-1 x for a one-column block x."""
    def trmm(self, lane: Any, side: str, uplo: str, trans: str, diag: str, alpha: Any, T: Any,
             B: Any) -> None:
        """B := alpha op(T) B ("L") or alpha B op(T) ("R")."""
    def herk(self, lane: Any, uplo: str, trans: str, alpha: Any, A: Any, beta: Any,
             C: Any) -> None:
        """C := alpha A A^H + beta C ("N") or alpha A^H A + beta C, the uplo triangle."""
    def herk_diagonal_blocks(self, lane: Any, uplo: str, trans: str, alpha: Any, A: Any, C: Any,
                             nb: int, scratch: Any, row_step: int | None = None) -> None:
        """The `uplo` triangles of C's diagonal blocks of order nb += alpha op(A) op(A)^H;
        with `row_step` (lower, "N"): block i at rows i row_step, columns i nb, all full."""
    def gemm_spaced_blocks(self, lane: Any, alpha: Any, A: Any, B: Any, beta: Any, C: Any,
                           nb: int, row_step: int) -> None:
        """C's block columns i of order nb (all full) := alpha A B_i^H + beta C_i, B_i the
        nb rows of B from row i row_step."""
    def invert_triangular_blocks(self, lane: Any, uplo: str, diag: str, T: Any, b: int, W: Any,
                                 scratch: Any) -> None:
        """The inverses of T's diagonal blocks of order b, block c at columns c (b + 1) of W
        (leading dimension b): the blocked triangular solves of the preconditioners and the
        Cholesky's off-diagonal solve."""
    def laset(self, lane: Any, uplo: str, alpha: Any, beta: Any, B: Any) -> None:
        """Off-diagonal ("A", "U", "L") := alpha, diagonal := beta."""
    def lacpy(self, lane: Any, uplo: str, src: Any, dst: Any) -> None:
        """dst := src ("A", "U", "L")."""
    def scale_copy(self, lane: Any, alpha: Any, src: Any, dst: Any) -> None:
        """dst := alpha src."""


class LuOps(Protocol):
    """What LU panels ask (panel/lu.py)."""

    def getrf_panel(self, lane: Any, A: Any, step: int, r0: int, c0: int, c1: int,
                    r1: int | None = None) -> None:
        """P [A11; A21] = L U for A[r0:r1, c0:c1] in place (r1 None: to the last row);
        pivots to entries c0:c1, info to the step's slot."""
    def getrf_leaf(self, lane: Any, A: Any, step: int, r0: int, c0: int, c1: int,
                   k0: int | None = None, k1: int | None = None, r1: int | None = None) -> None:
        """A leaf of a recursive panel by partial pivoting, its interchanges applied to the
        panel's other columns k0:c0 and c1:k1 as well; the info is left to panel_info."""
    def tslu_panel(self, lane: Any, A: Any, step: int, r0: int, c0: int, c1: int,
                   k0: int | None = None, k1: int | None = None) -> None:
        """The same by tournament pivoting (a leaf of at most tournament.TOURNAMENT_WIDTH
        columns; both backends walk the same tree, so both choose the same pivots)."""
    def panel_info(self, lane: Any, A: Any, step: int, k0: int, k1: int) -> None:
        """The step's info := the first exactly zero U(i, i) of the panel's diagonal block."""
    def prepare_interchanges(self, lane: Any, A: Any, step: int, k0: int, k1: int) -> None:
        """After a step's panel: its pivots made ready for the step's laswps (on a device the
        row moves they amount to, which laswp then applies at once)."""
    def laswp(self, lane: Any, A: Any, c0: int, c1: int, k0: int, k1: int,
              forward: bool = True, pivots_of: Any = None) -> None:
        """Pivots k0..k1-1 (of `pivots_of`, default A) applied to columns c0:c1, in order
        (backwards: undone); forwards, as the row moves prepare_interchanges made of them
        where it did."""


class QrOps(Protocol):
    """What the Householder family (QR, QL, LQ, Hessenberg) asks (update/qr.py, lapack/)."""

    def explicit_reflectors(self, lane: Any, src: Any, dst: Any, storage: str) -> None:
        """dst := V in explicit column form (unit diagonal, zeros on the other side) from a
        panel stored as "QR" (rows x kb), "QL" (unit at row rows-kb+i) or "LQ" (kb x cols:
        dst cols x kb is its row form's conjugate transpose)."""
    def triangular_factor(self, lane: Any, V: Any, tau: Any, T: Any, direction: str,
                          work: Any = None) -> None:
        """larft: "forward" T upper, H(1)...H(k) = I - V T V^H; "backward" T lower,
        H(k)...H(1); tau_i = 0 gives a zero row and column i; T's other triangle zero."""
    def larfg(self, lane: Any, x: Any, tau: Any, beta: Any = None) -> None:
        """LAPACK larfg on the column block x (alpha on top), in place; tau (1 x 1) := it; with
        beta (1 x 1): beta := beta and x[0] := 1 (v in place)."""
    # QR with column pivoting's panel (lapack/geqp3.py, LAPACK laqps): norms is a cols x 2
    # block of the real dtype (vn1, vn2), flags and jpvt int32 cols x 1, stop int32 1 x 1
    def column_norms(self, lane: Any, A: Any, norms: Any, flags: Any, stop: Any,
                     every: bool = False) -> None:
        """norms[j] := (||A[:, j]||, the same) for every column (every) or the flagged ones
        (flags cleared); stop := 0."""
    def laqps_pivot(self, lane: Any, A: Any, k: int, F: Any, norms: Any, jpvt: Any) -> None:
        """p = k + argmax(norms[k:, 0]) (the first on a tie); columns k, p of A, rows k, p of
        F[:, 0:k] and jpvt[k], jpvt[p] exchanged; norms[p] := norms[k]."""
    def laqps_f_column(self, lane: Any, F: Any, k: int, y: Any, tau: Any) -> None:
        """F[:, k] := tau (y masked to rows > k - F[:, k] when k > 0)."""
    def laqps_downdate(self, lane: Any, row: Any, k: int, norms: Any, flags: Any, stop: Any,
                       diagonal: Any, beta: Any, downdate: bool = True) -> None:
        """LAPACK laqps's downdate of norms[j], j > k, from the final row `row` (flags[j] and
        stop := 1 where it lost accuracy); then diagonal := beta."""
    def lahr2_reflector(self, lane: Any, x: Any, tau: Any, v: Any, w: Any,
                        t_diagonal: Any) -> None:
        """larfg on x (as larfg, without beta), then v := x[1:], w := -tau (1; x[1:]) and
        t_diagonal (1 x 1) := tau: gehrd's panel loop's copies of the reflector, one launch."""
    def apply(self, lane: Any, A: Any, X: Any, Y: Any, trans: str = "N",
              uplo: str | None = None) -> None:
        """Y := op(A) X for blocks (A triangular-stored Hermitian when uplo is given)."""
    def apply_to_host(self, lane: Any, A: Any, X: Any, trans: str = "N", uplo: str | None = None,
                      work: Any = None) -> Any:
        """op(A) X for a host X, one pass over A; complete on return."""


class MixedOps(Protocol):
    """What the mixed-precision solvers ask (backend/reduced.py, lapack/_mixed.py,
    lapack/_preconditioner.py)."""

    def keep_on_device(self, owner: Any, name: str, array: Any) -> Any:
        """A vector copied once to where `owner` lives (freed with it)."""
    def vector_to_low(self, lane: Any, src: Any, dst: Any, scale: Any,
                      permutation: Any = None) -> None:
        """dst_ij := (s_{p_i} src_{p_i j}) rounded to dst's precision; s, p may be None."""
    def vector_from_low(self, lane: Any, src: Any, dst: Any, scale: Any) -> None:
        """dst_ij := s_i src_ij in dst's precision (s may be None)."""
    def butterfly_rows(self, lane: Any, src: Any, dst: Any, groups: Any, transpose: bool,
                       before: Any = None, after: Any = None) -> None:
        """dst := diag(after) op(W) diag(before) src (dst may be src)."""
    def equilibration(self, lane: Any, owner: Any, A: Any, rows: int, cols: int,
                      meanwhile: Any = None) -> Any:
        """reduced.Equilibration of block A: power-of-two row scales, then column scales of
        diag(r) A, with maxima and sums of |a_ij|; `meanwhile()` runs on the host meanwhile."""
    def narrow(self, lane: Any, owner: Any, src: Any, dst: Any, row_scale: Any, col_scale: Any,
               limit: Any, butterfly: Any = None) -> bool:
        """dst := L^T (r src c) R rounded to dst's precision, one read of src (dst may be
        src); True when something overflowed `limit`."""
    def narrow_hermitian(self, lane: Any, owner: Any, src: Any, dst: Any, scale: Any, uplo: str,
                         limit: Any) -> Any:
        """narrow for the stored triangle of a Hermitian matrix, summing rows and columns."""
    def add_to_diagonal(self, lane: Any, owner: Any, B: Any, sigma: Any) -> None:
        """B := B + sigma I."""
    def prepare_reduced(self, owner: Any, compute: str, panel_keys: Any = (),
                        leaf_order: int = 0) -> None:
        """Allocate what gemm_reduced and round_panel need for `owner`, before the run."""
    def overflowed(self, owner: Any) -> bool:
        """Whether a rounding into the reduced precision overflowed during the run."""
    def gemm_reduced(self, lane: Any, owner: Any, compute: str, alpha: Any, A: Any, B: Any,
                     beta: Any, C: Any, trans_a: str = "N", trans_b: str = "N") -> None:
        """gemm with operands rounded to `compute` ("half-x3": error-corrected halves)."""
    def round_panel(self, lane: Any, owner: Any, compute: str, A: Any, trans: str,
                    key: Any = None) -> Any:
        """A herk's panel rounded once into the device buffer named `key`."""
    def gemm_rounded_panel(self, lane: Any, owner: Any, panel: Any, alpha: Any, first: Any,
                           second: Any, beta: Any, C: Any, trans_a: str, trans_b: str) -> None:
        """A strip's gemm cut from a rounded panel."""


class Backend(RuntimeOps, MemoryOps, StoreOps, TransferOps, BlasOps, LuOps, QrOps, MixedOps,
              Protocol):
    """Everything the algorithms ask of a backend: the families above, and the capabilities
    of BackendDefaults."""

    herk_is_gemm: bool
    herk_panel_slots: int
    gemm_copies_operands: bool

    @property
    def panel_ops(self) -> Any: ...


class DeviceBackend(Backend, Protocol):
    """What a backend with device memory adds: the user's device arrays, memory, device-only
    panels (the host's CPU panels are panel/'s LAPACK calls)."""

    def call(self, pool_max_bytes: int | None = None) -> Any:
        """Context manager around a public call: the device context current in the calling
        thread, calls one at a time, the pool trimmed to pool_max_bytes when the outermost
        call ends."""
    def active(self) -> Any:
        """Context manager: the device context current for a block (push, pop in finally)."""
    def alloc(self, nbytes: int) -> Any: ...
    def free_memory(self) -> int: ...
    def device_matrix(self, obj: Any, nb: int, overwrite: bool) -> Any:
        """A store over the user's device array (in place with overwrite, else a copy)."""
    def zero_triangle(self, obj: Any, upper: bool) -> None: ...
    def has_nonfinite(self, obj: Any) -> bool:
        """Whether the device array `obj` (or any of a list of them) holds an inf or a NaN."""
    def stack_columns(self, blocks: Any, m: int, dtype: Any) -> Any:
        """The device arrays `blocks` (m rows each) side by side in a new column-major
        array of the first one's kind (a distributed call's part, from Dask's chunks)."""
    def copy_columns(self, blocks: Any, out: Any, starts: Any, check: bool = False) -> bool:
        """The device arrays `blocks` into the column-major device array `out`, block i at
        column starts[i]; with `check`, whether an inf or a NaN was among them."""
    def arrivable(self, block: Any, m: int, dtype: Any) -> bool:
        """Whether `arrive_columns` takes the device array `block` (m rows of `dtype`)."""
    def arrive_columns(self, lane: Any, A: Any, block: Any, c0: int) -> None:
        """A task of a run (on a copy lane): the device array `block` into the store A's
        columns from c0, asynchronous, summed where A tracks its 1-norm as it arrives."""
    # a user's device array as it comes in (backend/device_arrays.admit): the device it must be
    # on, the device owning a pointer (None: unknown), a stream of ours for DLPack producers to
    # order their work before, a host wait for a stream
    ordinal: int

    def pointer_device(self, pointer: int) -> int | None: ...
    def consumer_stream(self) -> int: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def potrf_panel(self, lane: Any, A: Any, step: int, uplo: str, k0: int, k1: int) -> None:
        """A[k0:k1, k0:k1] = L L^H by the device's potrf; info to the step's slot."""
    def householder_panel(self, lane: Any, A: Any, step: int, storage: str, rows: Any,
                          cols: Any, taus: Any) -> None:
        """The device's geqrf on the panel (QR), or on a reversed (QL) or conjugate-transposed
        (LQ) workspace copy and back; tau[taus] on the device."""
