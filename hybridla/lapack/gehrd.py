"""gehrd: blocked reduction of an n x n matrix to upper Hessenberg form by a unitary similarity,
Q^H A Q = H, as MAGMA's dgehrd does it (Tomov and Dongarra, LAPACK Working Note 219): LAPACK's
dgehrd with dlahr2's panel (Quintana-Orti and van de Geijn): the panel's loop driven by the CPU
enqueuing every column's work), its matrix-vector products with the trailing matrix, its small
products with V, Z and T, its larfg, and the blocked updates where the matrix lives.

Only rows and columns lo..hi are reduced (0-based and inclusive: scipy.linalg.lapack's lo, hi;
LAPACK's ILO - 1, IHI - 1), A being upper triangular outside them already (as gebal leaves it).
With e = hi + 1: Q = H(lo) H(lo+1) ... H(hi-1), H(j) = I - tau_j v_j v_j^H, v_j zero in rows
0..j, 1 in row j+1, v_j[j+2:e] stored in A[j+2:e, j]; tau_j = 0 outside lo <= j < hi.

For each panel, reflectors k0:k1 (kb = k1 - k0 <= nb), with r = e - k0 - 1 rows below row k0:

    [panel]  lahr2's column loop on P = A[k0+1:e, k0:k1], driven by the CPU: V (r x kb) and
             T (kb x kb), H(k0) ... H(k1-1) = I - V T V^H, and Z = A[k0+1:e, k0+1:e] V; column
             i needs z_i = A[k0+1:e, k0+i+1:e] v_i, one GEMV where the matrix lives
    [top]    V explicit;  Y = A[0:e, k0+1:e] V T = [A[0:k0+1, k0+1:e] V; Z] T;
             the panel's own columns:  A[0:k0+1, k0+1:k1] -= Y[0:k0+1] V[0:kb-1]^H
    [right]  A[0:e, k1:e] -= Y V[kb-1:]^H                        A := A (I - V T V^H)
    [left]   A[k0+1:e, k1:n] := (I - V T V^H)^H A[k0+1:e, k1:n]   (larfb)

The last panel is as short as what is left. LAPACK switches to the unblocked dgehd2 for the last
columns; a short panel is that (dgehd2's column is lahr2's loop with the update not deferred),
so one code path serves both.

No look-ahead: the next panel's matrix-vector products read the whole trailing matrix, which
they need after this panel's updates, so nothing of the next panel can start earlier (MAGMA's
dgehrd has none either). The GPU's edge is its memory bandwidth in those products.

Passes over the trailing matrix (t = e - k0 - 1 its order, s the element size in bytes):
  [panel]  kb GEMVs, the i-th reading t (t - i) elements: ~kb t^2 s bytes per panel, over the
           whole reduction ~(e - lo)^3 s / 3 (1.5 TB for n = 8192 in float64): the
           matrix-vector phase, memory-bound; the panel task counts these bytes exactly
  [top]    one GEMM reading A[0:k0+1, k0+1:e] once: k0 t s
  [right]  one GEMM reading and writing A[0:e, k1:e] once: 2 e t s
  [left]   W = V^H C reads A[k0+1:e, k1:n] once, C -= V W reads and writes it once: 3 t n s
so the GEMMs move about 6 n t s bytes per panel against the GEMVs' kb t^2 s: the matrix-vector
products set the device's pace. The panel's other work is about four passes over r x i blocks
for column i (its share of the right and left updates, V^H v for T): O(r nb) per column against
the GEMV's O(r^2). Done on the host (the first version of this loop: the panel down, v up and y
down per GEMV), it took two thirds of the time at n = 8192 on an H100 (perf/RESULTS.md); where
the matrix lives it costs launches, about ten small cuBLAS calls and kernels per column, which
the host enqueues without waiting (one wait per panel).

CPU interface on a device backend (a host-resident matrix): it goes up in block columns before
the first panel (which reads all of it); panel columns k0:k1 are final after their step (later
steps touch columns k1 on) and go back to the host while the reduction goes on, the columns
left of lo and right of the last panel at the end: every element once. Within a panel only
its kb scalars tau travel.
info is 0: the reduction cannot fail.
"""
from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..scheduler import Region, TaskGraph
from ..update.qr import apply_block_reflector, larfb_flops
from ..scheduler.transfers import TransferPlan
from ._blocked import run_graph, trailing_chunks

# the reduction's workspaces in the tile store, and the graph Regions that order their reuse:
# V, Y, T of the current panel, and the panel loop's vectors: a short one and the scalars tau
# (_W), a column as long as the panel's (_Wr, ordered with _W: only panel tasks use them)
_V, _Y, _T, _W, _Wr = "hrd V", "hrd Y", "hrd T", "hrd u", "hrd w"
# Finished columns go home (the CPU interface) when this many bytes of them have gathered: the
# panel loop is the host's enqueueing, which a download and its copy-out per panel slowed by a
# third at n = 8192 (7.3 ms a panel on the GPU interface, 11 ms on the CPU interface, 128
# copy-outs of 4 MiB beside them: perf/RESULTS.md, "Issue 34's last rows")
_SEND_HOME_BYTES = 32 << 20


@dataclass
class HessenbergStats:
    """The matrix-vector phase of a reduction, summed by the panel tasks: `calls` of the GEMV
    with the trailing matrix, the time they took (`seconds`: CUDA events around each on a
    device, the wall clock on the host backend), the `bytes` of the matrix they read, and the
    panel tasks' whole time (`panel_seconds`: the loop's other work and its waits included)."""
    calls: int = 0
    seconds: float = 0.0
    bytes: float = 0.0
    panel_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, calls, seconds, nbytes, panel_seconds):
        with self._lock:
            self.calls += calls
            self.seconds += seconds
            self.bytes += nbytes
            self.panel_seconds += panel_seconds

    @property
    def bandwidth(self) -> float:
        """Bytes of the matrix read per second of matrix-vector time (0 before any)."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


def check_lo_hi(n, lo, hi):
    """LAPACK's test of ILO and IHI, 0-based: 0 <= lo <= max(0, n - 1) and
    min(lo, n - 1) <= hi <= n - 1. Returns (lo, hi) as ints; ValueError naming the argument."""
    for name, value in (("lo", lo), ("hi", hi)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an integer; got {name}={value!r}")
    if not 0 <= lo <= max(0, n - 1):
        raise ValueError(f"lo must satisfy 0 <= lo <= {max(0, n - 1)} for a matrix of order "
                         f"{n}; got lo={lo}")
    if not min(lo, n - 1) <= hi <= n - 1:
        raise ValueError(f"hi must satisfy {min(lo, n - 1)} <= hi <= {n - 1} for a matrix of "
                         f"order {n} and lo={lo}; got hi={hi}")
    return int(lo), int(hi)


def gehrd(A, plan, lo=0, hi=None, trace=None, stats=None):
    """Reduce the tile store's square matrix to upper Hessenberg form in place, in LAPACK's
    storage, over rows and columns lo..hi (0-based, inclusive; default all). Returns
    (tau, info, trace): tau the n - 1 scalars (host array, zero outside lo..hi-1), info 0.
    `stats` (a HessenbergStats) receives the matrix-vector phase's calls, time and bytes; only
    then are the GEMVs timed (two CUDA events a column, on the critical path)."""
    if A.m != A.n:
        raise ValueError(f"gehrd needs a square matrix; got {A.m} x {A.n}")
    lo, hi = check_lo_hi(A.n, lo, A.n - 1 if hi is None else hi)
    tau = np.zeros(max(A.n - 1, 0), dtype=A.dtype)
    graph = record_gehrd(A, plan, lo, hi, tau, stats)
    return tau, 0, run_graph(graph, plan, "gehrd", trace)


def zero_below_subdiagonal(ops, F):
    """H from gehrd's factors in the n x n tile store F, in place: F[i, j] := 0 for i > j + 1,
    where the reflectors were (laset on the update lane; nothing to zero for n <= 2), then a
    synchronize: this and all work enqueued before it (orghr's, say) complete on return."""
    n = F.n
    if n > 2:
        lane = ops.lane("gpu:update")
        with lane:
            ops.laset(lane, "L", 0, 0, F.block(2, n, 0, n - 2))
    ops.synchronize()


def record_gehrd(A, plan, lo, hi, tau, stats) -> TaskGraph:
    ops, nb = plan.backend, plan.nb
    n, e = A.n, hi + 1
    graph = TaskGraph()
    transfers = TransferPlan(graph, A, plan)
    if A.streamed:
        transfers.bring_up()
    panels = list(range(lo, e - 1, nb))  # each panel's first reflector
    if panels:  # the workspaces at their largest, now: allocating in a run could synchronize
        width = min(nb, e - 1 - lo)
        A.workspace(_V, e - lo - 1, width)
        A.workspace(_Y, e, width)
        A.workspace(_T, width, width)
        A.workspace(_W, width, 2)
        A.workspace(_Wr, e - lo - 1, 1)
    V, Y, T = (Region(name, 0, 1) for name in (_V, _Y, _T))
    itemsize = np.dtype(A.dtype).itemsize
    k1 = home_from = lo
    for step, k0 in enumerate(panels):
        k1 = min(k0 + nb, e - 1)
        kb, r = k1 - k0, e - k0 - 1
        where = dict(ops=ops, A=A, k0=k0, k1=k1, e=e)

        # [panel] the reduced columns, V, T and Z = A V on the CPU, the GEMVs where A is
        # (its host work only enqueues on the panel lane, which waits for the last step's
        # update on the device: the enqueueing overlaps it)
        graph.add("panel", step, "cpu", functools.partial(_panel, **where, tau=tau, stats=stats),
                  reads=[Region("A", k0 + 1, e, k1, e)],
                  writes=[Region("A", k0 + 1, e, k0, k1), Y, T, Region(_W, 0, 1),
                          Region("tau", k0, k1)],
                  flops=lahr2_flops(r, kb), bytes=matvec_bytes(r, kb, itemsize),
                  enqueues_on="gpu:panel")

        # [top] V explicit, Y = A V T, the right update of the panel columns' top rows
        graph.add("top", step, "gpu:update", functools.partial(_top, **where),
                  reads=[Region("A", 0, k0 + 1, k1, e), Region("A", k0 + 1, e, k0, k1), T],
                  writes=[Region("A", 0, k0 + 1, k0 + 1, k1), V, Y],
                  flops=float(2 * (k0 + 1) * r * kb + e * kb * kb + 2 * (k0 + 1) * kb * kb))

        # [right] and [left] on the columns right of the panel, cut into tasks by columns
        for c0, c1 in trailing_chunks(list(range(k1, n, nb)), n, nb, ops, plan, None, False):
            right = max(0, min(c1, e) - c0)
            graph.add("update", step, "gpu:update",
                      functools.partial(_update, **where, c0=c0, c1=c1),
                      reads=[V, Y, T],
                      writes=[Region("A", 0, e, c0, c0 + right),
                              Region("A", k0 + 1, e, c0 + right, c1)],
                      flops=float(2 * e * right * kb) + larfb_flops(r, kb, c1 - c0))

        # the panel columns are final: home they go, a few panels' at a time
        if A.streamed and (k1 - home_from) * n * itemsize >= _SEND_HOME_BYTES:
            transfers.send_home(step, 0, n, home_from, k1)
            home_from = k1
    if A.streamed:  # what is not sent yet: the columns left of lo, the last panels' and beyond
        for c0, c1 in ((0, lo), (home_from, n)):
            if c1 > c0:
                transfers.send_home(len(panels), 0, n, c0, c1)
    return graph


def _panel(lane, ops, A, k0, k1, e, tau, stats):
    """LAPACK lahr2's column loop (the complex form: ^H where real LAPACK has ^T) on the panel
    A[k0+1:e, k0:k1] where it lives, with explicit V (unit diagonal, zeros above) beside it
    instead of lahr2's ones written into the panel. Leaves the reduced panel (H's entries and the
    reflectors below the first subdiagonal), V, T, and Z = A V (the GEMVs' results) in Y's rows
    k0+1:e (the [top] task makes them Y = Z T); tau[k0:k1] on the host.

    lahr2 keeps Y = A V T up to date column by column, Y[:, i] = tau_i (y_i - Y[:, :i] t_i); as
    Y[:, :i] = Z[:, :i] T[:i, :i] with T triangular, that is column i of Z T. Keeping Z instead
    saves two of the five passes over r x i blocks per column, and the product by T becomes one
    TRMM in the [top] task.

    Every operation is the backend's, on the critical-path lane, larfg included (a kernel of
    ours on a GPU): the host only enqueues, and waits once, for the panel's tau at the end. It
    is a CPU task, which leaves no event behind: that wait is also what makes its results
    complete for the tasks after it."""
    started = time.perf_counter()
    kb, r = k1 - k0, e - k0 - 1
    sub = ops.sub_block
    P = A.block(k0 + 1, e, k0, k1)
    V, T = A.workspace(_V, r, kb), A.workspace(_T, kb, kb)
    Z = sub(A.workspace(_Y, e, kb), k0 + 1, e, 0, kb)
    work, w = A.workspace(_W, kb, 2), A.workspace(_Wr, r, 1)
    u, taus = sub(work, 0, kb, 0, 1), sub(work, 0, kb, 1, 2)
    gpu = ops.lane("gpu:panel")
    timer = _LaneTimer(gpu) if stats is not None else _NO_TIMER
    with gpu:
        ops.laset(gpu, "A", 0, 1, V)  # V's unit diagonal and zeros above it, for all columns
        ops.laset(gpu, "A", 0, 0, T)
        for i in range(kb):
            b = sub(P, 0, r, i, i + 1)
            if i > 0:
                Vi, Ti, ui = sub(V, 0, r, 0, i), sub(T, 0, i, 0, i), sub(u, 0, i, 0, 1)
                # b -= Z[:, :i] T[:i, :i] V[i-1, :i]^H: this column's share of the right update
                ops.gemm(gpu, 1, Ti, sub(V, i - 1, i, 0, i), 0, ui, trans_b="C")
                ops.gemm(gpu, -1, sub(Z, 0, r, 0, i), ui, 1, b)
                # b := (I - V T V^H)^H b: the left update by this panel's reflectors so far
                ops.gemm(gpu, 1, Vi, b, 0, ui, trans_a="C")
                ops.trmm(gpu, "L", "U", "C", "N", 1, Ti, ui)
                ops.gemm(gpu, -1, Vi, ui, 1, b)
            # H(k0+i) annihilates b[i+1:]: b[i] := beta, v = (1, b[i+1:]) into V, tau_i where
            # it lives and in T[i, i], and w = -tau_i v for T's column below
            tau_i = sub(taus, i, i + 1, 0, 1)
            ops.lahr2_reflector(gpu, sub(b, i, r, 0, 1), tau_i, sub(V, i + 1, r, i, i + 1),
                                sub(w, 0, r - i, 0, 1), sub(T, i, i + 1, i, i + 1))
            v = sub(V, i, r, i, i + 1)
            # Z[:, i] = A[k0+1:e, k0+i+1:e] v: the pass over the trailing matrix, r (r - i)
            # elements read (the GEMVs are all the bytes of the reduction but the GEMMs')
            timer.start()
            ops.gemm(gpu, 1, A.block(k0 + 1, e, k0 + i + 1, e), v, 0, sub(Z, 0, r, i, i + 1))
            timer.stop()
            # T[:i, i] = T[:i, :i] V^H w = -tau T[:i, :i] V^H v (larft's recurrence)
            if i > 0:
                ops.gemm(gpu, 1, sub(V, i, r, 0, i), sub(w, 0, r - i, 0, 1), 0,
                         sub(T, 0, i, i, i + 1), trans_a="C")
                ops.trmm(gpu, "L", "U", "N", "N", 1, sub(T, 0, i, 0, i), sub(T, 0, i, i, i + 1))
    # the panel's scalars to the host: the one wait of the panel (a CPU task leaves no event,
    # so its device work must be done when it returns)
    tau[k0:k1] = ops.to_host(gpu, taus)[:, 0]
    if stats is not None:
        stats.add(kb, timer.seconds(), matvec_bytes(r, kb, np.dtype(A.dtype).itemsize),
                  time.perf_counter() - started)


class _LaneTimer:
    """Time spent in marked stretches of a lane's work: CUDA events on a device (read after the
    lane has been waited for), the wall clock on the host backend (whose operations are done
    when they return)."""

    def __init__(self, lane):
        self.lane, self.pairs, self.wall = lane, [], 0.0

    def start(self):
        self._clock, self._event = time.perf_counter(), self.lane.record()

    def stop(self):
        end = self.lane.record()
        if end is None:
            self.wall += time.perf_counter() - self._clock
        else:
            self.pairs.append((self._event, end))

    def seconds(self):
        return self.wall + sum(end.time_since(begin) for begin, end in self.pairs) / 1e3


class _NoTimer:
    """A _LaneTimer that times nothing: the panel loop without stats records no events."""

    def start(self):
        pass

    def stop(self):
        pass


_NO_TIMER = _NoTimer()


def _top(lane, ops, A, k0, k1, e):
    kb, r = k1 - k0, e - k0 - 1
    V, T = A.workspace(_V, r, kb), A.workspace(_T, kb, kb)
    Y = A.workspace(_Y, e, kb)
    top = ops.sub_block(Y, 0, k0 + 1, 0, kb)
    # V := the panel's reflectors, explicit: QR storage, one row below the diagonal
    ops.explicit_reflectors(lane, A.block(k0 + 1, e, k0, k1), V, "QR")
    # Y = A[0:e, k0+1:e] V T: its top rows' A V here, the panel's Z = A V below them
    ops.gemm(lane, 1, A.block(0, k0 + 1, k0 + 1, e), V, 0, top)
    ops.trmm(lane, "R", "U", "N", "N", 1, T, Y)
    # A[0:k0+1, k0+1:k1] -= Y[0:k0+1] V[0:kb-1]^H (rows k0+1:e of these columns: the panel's)
    if kb > 1:
        ops.gemm(lane, -1, top, ops.sub_block(V, 0, kb - 1, 0, kb), 1,
                 A.block(0, k0 + 1, k0 + 1, k1), trans_b="C")


def _update(lane, ops, A, k0, k1, e, c0, c1):
    kb, r = k1 - k0, e - k0 - 1
    V, T, Y = A.workspace(_V, r, kb), A.workspace(_T, kb, kb), A.workspace(_Y, e, kb)
    if c0 < e:
        # A[0:e, c0:c] -= Y V[c0-k0-1 : c-k0-1]^H  (V's row j belongs to column k0 + 1 + j)
        c = min(c1, e)
        ops.gemm(lane, -1, Y, ops.sub_block(V, c0 - k0 - 1, c - k0 - 1, 0, kb), 1,
                 A.block(0, e, c0, c), trans_b="C")
    # A[k0+1:e, c0:c1] := (I - V T V^H)^H A[k0+1:e, c0:c1]
    apply_block_reflector(ops, lane, A, "L", "C", V, T, A.block(k0 + 1, e, c0, c1), "forward")


def matvec_bytes(r, kb, itemsize) -> float:
    """Bytes of the matrix a panel's GEMVs read: sum over i < kb of r (r - i) elements."""
    return float(itemsize * (kb * r * r - r * kb * (kb - 1) // 2))


def lahr2_flops(r, kb) -> float:
    """Real flops of a panel: the GEMVs (2 r (r - i) each) and the loop's own products with
    V, Y and T (about 10 r i for column i)."""
    return float(2 * (kb * r * r - r * kb * (kb - 1) // 2) + 5 * r * kb * (kb - 1))
