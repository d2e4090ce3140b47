"""The cuda backend's runtime: our kernels (CUDA C from cuda/, compiled once per process), the
primary context (`active`, `call`), the lanes (`CudaLane`: a stream and its cuBLAS and cuSOLVER
handles), runs (`begin_run` / `end_run`: the SMs kept for the panel lane), synchronization and
the replay of CUDA graphs.

Module-level functions over the backend (the facade, `CudaBackend`, binds them): it holds the
process's device state (context, kernels, lanes), which the other family files reach as
`lane.backend`.
"""
from __future__ import annotations

import contextlib
import threading
from importlib import resources
from pathlib import Path

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas, cusolverDn
from pycuda.compiler import compile as compile_cuda

from .. import _driver
from ..host import HostLane
from ..ops import DeviceSettings

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
# getrf_leaf_cluster.cu's shape: one cluster of 16 blocks of 512 threads, 4 rows per thread
_LEAF_CLUSTER = {"blocks": 16, "threads": 512, "max_rows": 16 * 512 * 4, "max_width": 16,
                 "dtypes": (np.dtype(np.float32),)}
# convert.cu's row_stats/col_stats/narrow_hermitian and hemv.cu's launch shape (STATS_THREADS,
# STRIP)
_STATS_THREADS, _STATS_STRIP = 256, 64
SM_SPLITS = ("cublas", "green")  # device.sm_split: how device.panel_sms is kept
_KERNEL_FILES = ("laswp.cu", "lapack_aux.cu", "geqp3.cu", "convert.cu", "hemv.cu", "getrf_panel.cu",
                 "tslu.cu", "getrf_leaf_cluster.cu", "butterfly.cu")


def _kernel_source(name: str) -> str:
    """CUDA C from cuda/ (a source checkout) or from the installed hybridla.kernels package."""
    checkout = Path(__file__).resolve().parents[3] / "cuda" / name
    if checkout.exists():
        return checkout.read_text()
    return resources.files("hybridla.kernels").joinpath(name).read_text()


def compile_kernels(device, context):
    """Our kernels, compiled once per process (PyCUDA caches the cubin on disk too), with the
    launch limits the device allows them: (kernels, fused_panel_shared, tslu_shared,
    leaf_cluster)."""
    context.push()
    try:
        source = "\n".join(_kernel_source(name) for name in _KERNEL_FILES)
        kernels = _driver.Module(compile_cuda(source, no_extern_c=True, options=["-O3"]))
        optin = getattr(drv.device_attribute, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", None)
        # the dynamic shared memory a fused LU panel may take (the kernel's static share,
        # under 1 KiB, comes out of the same per-block limit)
        most = device.get_attribute(optin) if optin else 48 * 1024
        fused_panel_shared = most - 1024
        # tslu.cu's static shares (the finish's copy of U11, 32 x 32 elements; the slots)
        # stay under 20 KiB
        tslu_shared = most - 20 * 1024
        # a cluster of 16 blocks is above the portable 8: allowed per kernel, where the
        # device has it (an H100 or H200 does; elsewhere the leaves go to getrf_panel)
        leaf_cluster = device.compute_capability() >= (9, 0)
        try:
            if leaf_cluster:
                kernels.allow_nonportable_cluster("getrf_leaf_cluster_s")
        except _driver.CudaDriverError:
            leaf_cluster = False
        for prefix in _PREFIX.values():
            kernels.allow_shared(f"getrf_panel_fused_{prefix}", fused_panel_shared)
            kernels.allow_shared(f"tslu_{prefix}", tslu_shared)
            kernels.allow_shared(f"tslu_finish_{prefix}", tslu_shared)
    finally:
        drv.Context.pop()
    return kernels, fused_panel_shared, tslu_shared, leaf_cluster


class CudaLane:
    """A CUDA stream and, for compute lanes, its own cuBLAS and cuSOLVER handles (handles are not
    thread-safe, so a lock serializes the worker threads that enqueue on the same lane).

    Compute lanes ("gpu:*") get priority streams, made through the driver (PyCUDA's streams have
    no priority): "gpu:panel", the critical path, the most urgent, so that its kernels' blocks are
    scheduled ahead of the trailing update's; in a green context (`green`) where the SMs are
    split (device.sm_split). Copy lanes ("copy:*") are PyCUDA streams, which its 2-D copies
    need; `handle` is the raw stream either way. `backend`: the CudaBackend whose lane it is
    (its kernels, its scalars), for the family functions that take the lane."""

    def __init__(self, name: str, backend, green: _driver.GreenContext | None = None):
        self.name, self.backend = name, backend
        if name.startswith("gpu:"):
            least, greatest = _driver.stream_priority_range()
            priority = greatest if name == "gpu:panel" else least
            self.stream = None
            self.handle = green.stream_create(priority) if green is not None \
                else _driver.stream_create(priority)
            # the largest thread-block cluster of SM-filling blocks its kernels can count on
            self.cluster_blocks = green.coscheduled if green is not None else \
                _LEAF_CLUSTER["blocks"] if backend.leaf_cluster else 1
            self.blas = cublas.create()
            cublas.set_stream(self.blas, self.handle)
            self.solver = cusolverDn.create()
            cusolverDn.set_stream(self.solver, self.handle)
        else:
            self.stream = drv.Stream(flags=1)  # non-blocking: no sync with the legacy stream
            self.handle = self.stream.handle
        self._lock = threading.Lock()

    def __enter__(self):
        self._lock.acquire()
        self.backend.context.push()  # PyCUDA's context stack is per thread
        return self

    def __exit__(self, *exc):
        drv.Context.pop()
        self._lock.release()
        return False

    def wait_for(self, events):
        for event in events:
            if event is not None:
                event.make_wait(self.handle)

    def record(self):
        return _driver.Event().record(self.handle)


# -- the context -------------------------------------------------------------------------------
@contextlib.contextmanager
def active(backend):
    """The primary context current in this thread for the block, popped whatever happens."""
    backend.context.push()
    try:
        yield backend
    finally:
        drv.Context.pop()


@contextlib.contextmanager
def call(backend, pool_max_bytes=None):
    """One user-level call on this device, from any thread: calls run one at a time (they
    share the lanes, their handles and the staging slots; one GPU gains little from two
    factorizations at once), the context is current in the calling thread throughout, and
    when the outermost call ends the memory pool keeps at most `pool_max_bytes` (the
    outermost call's `device.pool_max_bytes`; None: all of it)."""
    with backend._calls:
        backend._call_depth += 1
        try:
            with backend.active():
                yield backend
        finally:
            backend._call_depth -= 1
            if backend._call_depth == 0:
                backend.trim_cached(pool_max_bytes)


# -- lanes and synchronization -------------------------------------------------------------------
def lane(backend, name: str):
    """The lane of that name: "gpu:*" and "copy:*" lanes are CUDA streams; "cpu*" lanes are
    host worker threads (they wait for device events on the host)."""
    with backend._lanes_lock:
        split = backend._split if name.startswith("gpu:") else None
        lanes = backend._lanes if split is None else split["lanes"]
        if name not in lanes:
            backend.context.push()
            try:
                if name.startswith("cpu"):
                    lanes[name] = HostLane(name)
                else:
                    green = None if split is None else \
                        split["panel" if name == "gpu:panel" else "rest"]
                    lanes[name] = CudaLane(name, backend, green)
            finally:
                drv.Context.pop()
        return lanes[name]


def update_tasks(workers: int) -> int:
    return 1  # one GEMM fills the GPU; more tasks only add launches and scheduling


def begin_run(backend, workers: int, settings: DeviceSettings | None = None):
    """The run's settings (`settings`, the plan's DeviceSettings; None: the defaults):
    `panel_sms` multiprocessors kept for the critical path (the "gpu:panel" lane: panels,
    look-ahead columns), on top of its stream's priority, by `sm_split`: "cublas", the bulk
    update's cuBLAS calls asked to leave them (cublasSetSmCountTarget: a hint for their grids;
    other kernels still fill them); "green", the run's compute lanes in two green contexts,
    the panel lane's on those SMs and the others' on the rest (a wall:
    perf/probes/probe_green_panel.cu)."""
    settings = DeviceSettings() if settings is None else settings
    reserved = int(settings.panel_sms or 0)
    how = settings.sm_split
    if how not in SM_SPLITS:
        raise ValueError(f"device.sm_split must be one of {SM_SPLITS}; got {how!r}")
    lane = backend.lane("gpu:update")
    cublas.set_sm_count_target(lane.blas, max(backend.multiprocessors - reserved, 0)
                               if reserved and how == "cublas" else 0)
    if reserved and how == "green":
        _enter_split(backend, reserved)


def end_run(backend):
    _leave_split(backend)


def _enter_split(backend, reserved: int):
    """The run's compute lanes from now on: those of the green contexts of `reserved` SMs
    and the rest, each first waiting for the work already queued on its namesake."""
    if reserved not in backend._green:
        backend.context.push()
        try:
            panel, rest = _driver.split_sms(reserved)
        finally:
            drv.Context.pop()
        backend._green[reserved] = {"panel": panel, "rest": rest, "lanes": {}}
    before = {name: lane for name, lane in backend._lanes.items() if name.startswith("gpu:")}
    backend._split = backend._green[reserved]
    backend.context.push()
    try:
        for name, lane in before.items():
            backend.lane(name).wait_for([lane.record()])
    finally:
        drv.Context.pop()


def _leave_split(backend):
    """Back to the ordinary lanes, each waiting for the work its green namesake queued."""
    split, backend._split = backend._split, None
    if split is None:
        return
    backend.context.push()
    try:
        for name, lane in split["lanes"].items():
            if name.startswith("gpu:"):
                backend.lane(name).wait_for([lane.record()])
    finally:
        drv.Context.pop()


def synchronize(backend):
    backend.context.push()
    try:
        backend.context.synchronize()
    finally:
        drv.Context.pop()


def host_wait(events):
    """A CPU task needs device data: wait on the host for the events of its inputs."""
    for event in events:
        if event is not None:
            event.synchronize()


def replay(lane, recordings: dict, key, record, launch=True):
    """Run record(): work enqueued on `lane` (entered) only, with no host wait and no
    allocation. The first call for `key` captures it into a CUDA graph, kept in
    `recordings` (the caller's: the graphs live as long as it keeps them); every call
    launches that graph, one launch for all of record()'s (launch=False: only capture it,
    which runs nothing, so the host may do it while the device works on). The refinement's
    blocked triangular solves are ~130 small kernels per application; replayed, they take
    less time than launched one by one from Python (perf/RESULTS.md, "Earlier today (H100
    14:53-14:56 UTC, H200 14:59-15:01 UTC)")."""
    graph = recordings.get(key)
    if graph is None:
        graph = recordings[key] = _driver.Graph(lane.handle, record)
    if launch:
        graph.launch(lane.handle)
