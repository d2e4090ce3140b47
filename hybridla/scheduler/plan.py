"""The plan of one factorization (block size, look-ahead, panel placement, workers) and the cost
model that places each step's panel on the CPU or the GPU."""
from __future__ import annotations

import copy

import contextlib
import logging
from dataclasses import dataclass

import numpy as np

from .. import config as _config
from .._logging import get_logger
from ..backend.ops import DeviceSettings
from ..backend.tournament import TOURNAMENT_WIDTH

# lu.panel_pivoting / mixed.panel_pivoting: partial pivoting, a tournament for the leaves of
# recursive panels (panel/lu.py), or pivots within a window of block rows from the diagonal
PIVOTING = ("partial", "tournament", "window")
# where "window" may be asked for: the solvers that randomize A first (hybridla/butterfly.py)
RANDOMIZED_ONLY = ("window",)

_log = get_logger("plan")

PANEL_CHOICES = ("cpu", "gpu", "auto")
# device.ooc / ooc=: a host matrix over the memory budget factored out of core ("auto"), every
# one ("always"), or none: MemoryError ("never")
OOC_CHOICES = ("auto", "always", "never")
# device.ooc_transfer: how an out-of-core run's copies travel (lapack/_ooc.py)
OOC_TRANSFERS = ("staged", "register")


class CostModel:
    """Times of the pieces of one step, from the device's tuning entry (rates measured by
    `hybridla tune`, or the built-in table's, which names its source).

    A CPU panel runs while the GPU does the previous step's trailing update, so it costs the
    critical path only what it takes beyond that update (plus its two transfers); a GPU panel
    shares the GPU with that update and costs its whole time. Each step goes where it costs less.
    """

    def __init__(self, table: dict, dtype):
        self.table = table
        self.flop_scale = 4.0 if np.dtype(dtype).kind == "c" else 1.0  # a complex flop is 4 real
        self.itemsize = np.dtype(dtype).itemsize
        self.stagers = 1  # processes staging host matrices on this host at once (sharing_host)

    def sharing_host(self, stagers: int) -> "CostModel":
        """This model for one of `stagers` processes that stage host matrices on the same host
        at once (the distributed workers of one machine): they share its memory, which the
        staged copies' rate is bound by (upload_seconds)."""
        model = copy.copy(self)
        model.stagers = max(1, int(stagers))
        return model

    def _seconds(self, flops, rate_key):
        return self.flop_scale * flops / (self.table[rate_key] * 1e9)

    def _rate_key(self, device, kind):
        """The table's rate for this kind of panel ("cpu_potrf_gflops"), or the LU panel's
        ("cpu_panel_gflops") where the table has none."""
        key = f"{device}_{kind}_gflops"
        return key if key in self.table else f"{device}_panel_gflops"

    def cpu_panel(self, rows, cols, kind="getrf") -> float:
        """The CPU panel's time on the critical path: its factorization, its two copies and the
        round trip's fixed cost (host wait, Dask hand-off, copy launches)."""
        transfers = rows * cols * self.itemsize * (1 / self.table["d2h_gbps"]
                                                   + 1 / self.table["h2d_gbps"]) / 1e9
        return (self._seconds(PANEL_FLOPS[kind](rows, cols), self._rate_key("cpu", kind))
                + transfers + self.table.get("cpu_roundtrip_us", 0.0) * 1e-6)

    def gpu_panel(self, rows, cols, kind="getrf") -> float:
        return (self._seconds(PANEL_FLOPS[kind](rows, cols), self._rate_key("gpu", kind))
                + self.table["launch_us"] * 1e-6)

    def gpu_update(self, flops) -> float:
        return self._seconds(flops, "gpu_gemm_gflops")

    def upload_seconds(self, nbytes, transfer) -> float:
        """Time to bring a host matrix up, by how it travels: staged, the host copies into the
        slots and the DMA overlap, so the slower of the two; pinned in place, likewise the
        pinning and the DMA; pageable, the driver's staged copy; "device", a copy from device
        memory (d2d_gbps).
        The staged copies of `stagers` processes at once share the host's memory, each getting
        a share of stage_gbps: two GPU workers of one machine each staged their 57.6 GB part of
        the distributed LU at n = 120000 at 15-30 GB/s against one process's 40 GB/s, and
        with their uploads modelled at 40 the upload hid half the steps it takes (the update
        lanes 56-63% busy until it ended; perf/RESULTS.md, issue 32, stop 53)."""
        table = self.table
        if transfer == "device":  # a copy from other device memory (a distributed part's
            # chunks into its store): read and written on the device
            return nbytes / (table.get("d2d_gbps", table["h2d_gbps"]) * 1e9)
        if transfer == "staged":
            stage = table.get("stage_gbps", table["h2d_gbps"]) / self.stagers
            return nbytes / (min(stage, table["h2d_gbps"]) * 1e9)
        if transfer == "register":
            return nbytes / (min(table.get("pin_gbps", table["h2d_gbps"]), table["h2d_gbps"]) * 1e9)
        return nbytes / (table.get("h2d_pageable_gbps", table["h2d_gbps"]) * 1e9)

    def solve_seconds(self, kind, m, n, nrhs, nb) -> dict:
        """The modelled times of a solve with `nrhs` right-hand sides on host factors of `kind`
        ("getrs", "potrs": n x n; "gels": m x n, m >= n, QR's Q^H B and R's solve):

            host    max(factor bytes / host_gbps, flops / cpu_panel_gflops)
                    (LAPACK on the factors where they are: each triangular solve reads its
                    triangle once, memory-bound for few columns, BLAS-3-bound for many)
            device  max(factor bytes / link, flops / gpu_gemm_gflops)
                    + B up and X down + task_us per task of the graph
                    (the factors streamed once per solve, `SOLVE_WORK`, through the staging
                    slots: link = upload_seconds' staged rate; the copies overlap the compute,
                    so the slower bounds; B and X cross once each, not hidden)

        Returns {"host": s, "device": s}. A complex flop is 4 real (flop_scale)."""
        table = self.table
        elements, flops, passes = SOLVE_WORK[kind](m, n, nrhs)
        factor_bytes = elements * self.itemsize
        rhs_bytes = max(m, n) * nrhs * self.itemsize
        flops *= self.flop_scale
        host = max(factor_bytes / (table["host_gbps"] * 1e9),
                   flops / (table["cpu_panel_gflops"] * 1e9))
        # per block column and triangular solve: a staging copy, its DMA and one update task
        tasks = 3 * passes * -(-n // max(nb, 1))
        device = (max(self.upload_seconds(factor_bytes, "staged"),
                      flops / (table["gpu_gemm_gflops"] * 1e9))
                  + self.upload_seconds(rhs_bytes, "staged")
                  + rhs_bytes / (table["d2h_gbps"] * 1e9)
                  + tasks * table.get("task_us", 0.0) * 1e-6)
        return {"host": host, "device": device}

    def solve_place(self, kind, m, n, nrhs, nb) -> str:
        """Where a solve on host factors costs less by `solve_seconds`: "host" or "device"."""
        seconds = self.solve_seconds(kind, m, n, nrhs, nb)
        place = "device" if seconds["device"] < seconds["host"] else "host"
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s %dx%d, %d right-hand sides -> %s (cost model: host %.3g ms, streamed "
                       "through the device %.3g ms)", kind, m, n, nrhs, place,
                       seconds["host"] * 1e3, seconds["device"] * 1e3)
        return place

    def place_panel(self, rows, cols, hiding_update_flops, kind="getrf") -> str:
        cpu_delay = max(0.0, self.cpu_panel(rows, cols, kind)
                        - self.gpu_update(hiding_update_flops))
        place = "cpu" if cpu_delay < self.gpu_panel(rows, cols, kind) else "gpu"
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s panel %dx%d -> %s (cost model: CPU delay %.3g ms, GPU panel %.3g ms)",
                       kind, rows, cols, place, cpu_delay * 1e3,
                       self.gpu_panel(rows, cols, kind) * 1e3)
        return place


def panel_flops(rows: int, cols: int) -> float:
    """Real flops of getrf on a rows x cols panel (rows >= cols): rows cols^2 - cols^3 / 3."""
    return float(rows * cols * cols - cols ** 3 / 3)


def _potrf_flops(rows: int, cols: int) -> float:
    return cols ** 3 / 3


def _geqrf_flops(rows: int, cols: int) -> float:
    return float(2 * rows * cols * cols - 2 * cols ** 3 / 3)


# the flops of one panel, by kind: LU's panel (rows x cols), the Cholesky diagonal block
# (cols x cols), a Householder QR panel
PANEL_FLOPS = {"getrf": panel_flops, "potrf": _potrf_flops, "geqrf": _geqrf_flops}


def _getrs_work(m, n, k):
    """L and U once each (their diagonal blocks are counted once: n nb more, ignored here)."""
    return float(n * n), float(2 * n * n * k), 2


def _potrs_work(m, n, k):
    """The triangle once per triangular solve, two solves."""
    return float(n * (n + 1)), float(2 * n * n * k), 2


def _gels_work(m, n, k):
    """The reflectors (m n - n^2 / 2) for Q^H B, R (n^2 / 2) for its solve; Q^H B's flops
    4 m n k - 2 n^2 k (two GEMMs a block), R's n^2 k."""
    return float(m * n), float(4 * m * n * k - n * n * k), 2


# a solve on host factors by kind: (factor elements it reads, real flops, triangular passes)
SOLVE_WORK = {"getrs": _getrs_work, "potrs": _potrs_work, "gels": _gels_work}

# solve.place: where a solve on host factors runs (lu_solve, cho_solve, an out-of-core lstsq)
SOLVE_PLACES = ("auto", "host", "device")


def solve_place_setting(place=None) -> str:
    """Configuration solve.place (or `place`), checked: "auto", "host" or "device"."""
    place = _config.config.get("solve.place", "auto") if place is None else place
    if not isinstance(place, str) or place not in SOLVE_PLACES:
        raise ValueError(f"solve.place must be one of {SOLVE_PLACES}; got solve.place={place!r}")
    return place


@dataclass
class Plan:
    backend: object
    nb: int
    lookahead: int
    panel: str
    workers: int
    cost: CostModel | None = None
    trace_path: str | None = None
    progress: bool = False  # show a progress bar (tqdm) over the tasks
    pin_pieces: int = 8  # a host-resident matrix is pinned in this many pieces as it uploads
    #                      (config device.pin_pieces)
    panel_leaf: int = 0  # LU panels wider than this are factored by recursive halving down to
    #                      it (panel/lu.py); 0: the whole panel in one getrf
    panel_pivoting: str = "partial"  # "partial"; "tournament" (TSLU) for the recursive panels'
    #                                  leaves; "window": within pivot_window block rows from
    #                                  the diagonal, for randomized matrices (panel/lu.py)
    upload_group: int = 2  # staged uploads: block columns per trailing-update task while the
    #                        matrix arrives (config device.upload_group)
    head_steps: int = 2  # steps that start running while the rest are recorded (config
    #                      scheduler.head_steps; 0: record everything first)
    tail: int = 0  # Cholesky on a device: the trailing matrix of this order or less is factored
    #                in one call of the device's potrf (config cho.tail); 0: never
    pivot_window: int = 2  # "window" pivoting's block rows (config <routine>.pivot_window)
    ooc: str = "auto"  # out of core: "auto", "always", "never" (config device.ooc)
    ooc_buffers: int = 2  # out of core: wide column buffers, 1 or 2 (config device.ooc_buffers)
    ooc_transfer: str = "staged"  # out of core: the host matrix pinned in place or staged
    #                                 (config device.ooc_transfer; lapack/_ooc.py)
    record_segments: bool = True  # after the head, each stretch recorded runs while the rest
    #                                is recorded (config scheduler.record_segments; engine.py)
    arriving: str = ""  # how the matrix's block columns are still coming up, in order, by
    #                     copies recorded elsewhere: "" they are all there; an out-of-core
    #                     run's first wide column its ooc_transfer (lapack/_ooc.py); a
    #                     distributed device part's chunks "device" (lapack/_dist.py): the
    #                     first steps' updates follow them
    memory_budget: int | None = None  # bytes an out-of-core run's working store may take
    #                                   (set by the user layer once it goes out of core)
    # the device.* settings the backend's run and stores take (config device.*; the backend
    # reads no configuration): SMs for the panels, memory pool, host transfers, copy threads
    device_settings: DeviceSettings = DeviceSettings()

    def panel_placement(self, rows, cols, hiding_update_flops, kind="getrf") -> str:
        """Where this step's panel (of `kind`, see PANEL_FLOPS) runs: always the CPU on the host
        backend; else as the plan says, or where the cost model finds it costs less."""
        if not self.backend.has_device:
            return "cpu"
        if self.panel != "auto":
            return self.panel
        return self.cost.place_panel(rows, cols, hiding_update_flops, kind)


@contextlib.contextmanager
def progress_bar(plan, total, name):
    """A tqdm bar over a run's tasks when the plan asks for one; yields the per-task callback."""
    if not plan.progress:
        yield None
        return
    from tqdm import tqdm
    with tqdm(total=total, desc=name, unit="task", leave=False) as bar:
        yield lambda task: bar.update()


def _positive_int(name, value, minimum):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {name}={value!r}")
    return int(value)


def device_settings() -> DeviceSettings:
    """The device.* configuration as the backend takes it (backend/ops.DeviceSettings): read
    once per plan by make_plan, or by a call that runs outside any plan. Values are checked
    where the backend uses them (device.sm_split, device.host_transfer), or here, where a bad
    one would only raise inside a run (device.qr_panel_leaf: in a panel task, the matrix half
    factored)."""
    cfg = _config.config
    leaf = cfg.get("device.qr_panel_leaf")
    if _positive_int("device.qr_panel_leaf", leaf, 0) > 32:
        raise ValueError(f"device.qr_panel_leaf must be at most 32; got "
                         f"device.qr_panel_leaf={leaf!r}")
    return DeviceSettings(copy_threads=cfg.get("device.copy_threads") or 0,
                          panel_sms=cfg.get("device.panel_sms") or 0,
                          sm_split=cfg.get("device.sm_split"),
                          memory_pool=bool(cfg.get("device.memory_pool")),
                          host_transfer=cfg.get("device.host_transfer"),
                          pin_min_bytes=cfg.get("device.pin_min_bytes"),
                          pool_max_bytes=cfg.get("device.pool_max_bytes"),
                          qr_panel_leaf=int(leaf))


def make_plan(backend, m, n, dtype, *, routine="lu", nb=None, lookahead=None, panel=None,
              trace=None, progress=False, table_routine=None, ooc=None) -> Plan:
    """Resolve the engine options: call keywords win over `config` (which merges defaults, tuning
    files, HYBRIDLA_* environment and `config.set`). Bad values raise ValueError naming them.
    `table_routine`: a more specific name for the device table's entries ("mixed_lu": its
    "mixed_lu_nb_large" before "mixed_nb_large")."""
    cfg = _config.config
    nb = cfg.get(f"{routine}.nb") if nb is None else nb
    lookahead = cfg.get(f"{routine}.lookahead") if lookahead is None else lookahead
    panel = cfg.get(f"{routine}.panel") if panel is None else panel
    trace = cfg.get("trace") if trace is None else trace
    table = _config.device_table(backend.device_name)
    if isinstance(nb, str) and nb == "auto":
        # a routine's own large block size where the table has one ("cho_nb_large")
        large = table.get(f"{routine}_nb_large", table["nb_large"])
        large = table.get(f"{table_routine}_nb_large", large) if table_routine else large
        nb = table["nb_small"] if min(m, n) < table["nb_switch"] else large
    nb = _positive_int("nb", nb, 1)
    lookahead = _positive_int("lookahead", lookahead, 0)
    if panel == "auto":
        # a device's measured choice for this routine where the cost model's is worse
        # ("cho_panel": the per-step model misjudges the CPU round trip of a Cholesky block)
        panel = table.get(f"{routine}_panel", "auto")
    if panel not in PANEL_CHOICES:
        raise ValueError(f"panel must be one of {PANEL_CHOICES}; got panel={panel!r}")
    ooc = cfg.get("device.ooc", "auto") if ooc is None else ooc
    if not isinstance(ooc, str) or ooc not in OOC_CHOICES:
        raise ValueError(f"ooc must be one of {OOC_CHOICES}; got ooc={ooc!r}")
    ooc_transfer = cfg.get("device.ooc_transfer", "staged")
    if ooc_transfer not in OOC_TRANSFERS:
        raise ValueError(f"device.ooc_transfer must be one of {OOC_TRANSFERS}; got "
                         f"device.ooc_transfer={ooc_transfer!r}")
    ooc_buffers = _positive_int("device.ooc_buffers", cfg.get("device.ooc_buffers", 2), 1)
    if ooc_buffers > 2:
        raise ValueError(f"device.ooc_buffers must be 1 or 2; got {ooc_buffers}")
    workers = _positive_int("scheduler.workers", cfg.get("scheduler.workers"), 1)
    pin_pieces = _positive_int("device.pin_pieces", cfg.get("device.pin_pieces"), 1)
    panel_leaf = _positive_int(f"{routine}.panel_leaf", cfg.get(f"{routine}.panel_leaf", 0), 0)
    upload_group = _positive_int("device.upload_group", cfg.get("device.upload_group"), 1)
    head_steps = _positive_int("scheduler.head_steps", cfg.get("scheduler.head_steps", 2), 0)
    record_segments = cfg.get("scheduler.record_segments", True)
    if isinstance(record_segments, str):  # an environment variable's "true"
        record_segments = {"true": True, "false": False}.get(record_segments.lower(),
                                                             record_segments)
    if record_segments not in (True, False):  # 0 and 1 too
        raise ValueError(f"scheduler.record_segments must be true or false; got "
                         f"scheduler.record_segments={record_segments!r}")
    panel_pivoting = cfg.get(f"{routine}.panel_pivoting", "partial")
    if panel_pivoting not in PIVOTING:
        raise ValueError(f"{routine}.panel_pivoting must be one of {PIVOTING}; "
                         f"got {routine}.panel_pivoting={panel_pivoting!r}")
    if panel_pivoting in RANDOMIZED_ONLY and routine != "mixed":
        raise ValueError(f"{routine}.panel_pivoting={panel_pivoting!r} is stable only for a "
                         f"randomized matrix: it is for the mixed solvers "
                         f"(mixed.panel_pivoting), which transform A first")
    if panel_pivoting == "tournament" and not 0 < panel_leaf <= TOURNAMENT_WIDTH:
        raise ValueError(f"{routine}.panel_pivoting='tournament' pivots the leaves of recursive "
                         f"panels: it needs {routine}.panel_leaf from 1 to {TOURNAMENT_WIDTH}; "
                         f"got {routine}.panel_leaf={panel_leaf}")
    tail = cfg.get(f"{routine}.tail", 0)
    if isinstance(tail, str) and tail == "auto":
        tail = table.get(f"{routine}_tail", 0)
    tail = _positive_int(f"{routine}.tail", tail, 0)
    pivot_window = _positive_int(f"{routine}.pivot_window", cfg.get(f"{routine}.pivot_window", 2),
                                 1)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("plan %s %dx%d %s on %s (%s): nb %d, lookahead %d, panel %s, panel_leaf %d, "
                   "pivoting %s, workers %d, head_steps %d, tail %d, host transfer %s, trace %s",
                   routine, m, n, np.dtype(dtype), getattr(backend, "name", "?"),
                   backend.device_name, nb, lookahead, panel, panel_leaf, panel_pivoting,
                   workers, head_steps, tail,
                   cfg.get("device.host_transfer") if getattr(backend, "has_device", False)
                   else "none (host backend)", trace or "none")
    return Plan(backend, nb, lookahead, panel, workers, CostModel(table, dtype),
                str(trace) if trace else None, bool(progress), pin_pieces, panel_leaf,
                panel_pivoting, upload_group, head_steps, tail, pivot_window, ooc=ooc,
                ooc_buffers=ooc_buffers, ooc_transfer=ooc_transfer,
                record_segments=bool(record_segments), device_settings=device_settings())
