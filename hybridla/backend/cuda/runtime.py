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
import functools
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas, cusolverDn
from pycuda.compiler import compile as compile_cuda
from pycuda.compiler import get_nvcc_version

from ..._logging import get_logger
from .. import _driver
from ..host import HostLane
from ..ops import DeviceSettings

_log = get_logger("cuda")

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
# getrf_leaf_cluster.cu's shape: one cluster of 16 blocks of 512 threads, 4 rows per thread
_LEAF_CLUSTER = {"blocks": 16, "threads": 512, "max_rows": 16 * 512 * 4, "max_width": 16,
                 "dtypes": (np.dtype(np.float32),)}
# convert.cu's row_stats/col_stats/narrow_hermitian and hemv.cu's launch shape (STATS_THREADS,
# STRIP)
_STATS_THREADS, _STATS_STRIP = 256, 64
SM_SPLITS = ("cublas", "green")  # device.sm_split: how device.panel_sms is kept
# Each file of cuda/ is the module of its own kernels, compiled after the files whose
# definitions it uses (in the order they had when all were one module). The files a first LU
# call needs come first: they are compiled first where the host has fewer cores than there are
# modules.
_KERNEL_FILES = {
    "laswp.cu": (),
    "lapack_aux.cu": (),
    "getrf_panel.cu": (),
    "tslu.cu": ("getrf_panel.cu",),
    "getrf_leaf_cluster.cu": ("getrf_panel.cu", "tslu.cu"),
    "geqrf_leaf_cluster.cu": (),
    "convert.cu": ("lapack_aux.cu",),
    "geqp3.cu": ("lapack_aux.cu",),
    "hemv.cu": ("lapack_aux.cu", "convert.cu"),
    "butterfly.cu": ("lapack_aux.cu",),
}
# the lanes a first factorization takes, made in the background when the backend is (begin_run's
# lane, the first upload's, the panels', the downloads')
_FIRST_LANES = ("gpu:update", "copy:h2d", "gpu:panel", "copy:d2h")


def _kernel_source(name: str) -> str:
    """CUDA C from cuda/ (a source checkout) or from the installed hybridla.kernels package."""
    checkout = Path(__file__).resolve().parents[3] / "cuda" / name
    if checkout.exists():
        return checkout.read_text()
    return resources.files("hybridla.kernels").joinpath(name).read_text()


# a kernel's definition: `__global__ void`, attributes such as __launch_bounds__(...), its name
_GLOBAL = re.compile(r"__global__\s+void\s+(?:__\w+__\s*\([^()]*\)\s*)*(\w+)\s*\(")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)(.*)$", re.MULTILINE)


def kernel_names(source: str) -> set[str]:
    """The names of the kernels (__global__ functions) a CUDA C source defines, those its
    function-like macros make included (each invocation at the start of a line, its arguments
    substituted, `##` pasted): what the lookup of a kernel's module goes by."""
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.DOTALL)
    source = re.sub(r"//[^\n]*", "", source).replace("\\\n", " ")
    macros = {name: ([p.strip() for p in params.split(",")], body)
              for name, params, body in _DEFINE.findall(source) if "__global__" in body}
    plain = _DEFINE.sub("", source)
    names = set(_GLOBAL.findall(plain))
    for name, (params, body) in macros.items():
        for arguments in re.findall(rf"^[ \t]*{name}\(([^)]*)\)", plain,
                                    flags=re.MULTILINE):
            values: dict[str, str] = dict(zip(params, (a.strip() for a in arguments.split(","))))
            expanded = "".join(values.get(token, token) for token in re.split(r"(\w+)", body)
                               if token)
            names |= set(_GLOBAL.findall(re.sub(r"\s*##\s*", "", expanded)))
    return names


class KernelBuildError(RuntimeError):
    """A module of our kernels (a file of cuda/) could not be compiled or loaded."""


class Kernels:
    """Our kernels, one module per file of cuda/ (`files`: file -> the files compiled before
    it in its module), built in parallel by host threads of their own from construction on
    (nvcc is a subprocess: the threads compile at once, one core each) while the caller goes
    on. `build(file, source)` compiles and loads one module (in a worker thread) and returns
    it; `source(file)` reads a file; `workers`: the threads that build (None: one per module,
    at most one per core).

    The lookups of `_driver.Module` (`function`, `launch`, `allow_shared`,
    `allow_nonportable_cluster`) take a kernel's name and wait for its own module only. A
    module whose build failed raises KernelBuildError naming its file, in the thread that
    looks a kernel of it up, at every lookup; a name no file defines raises KeyError. No
    thread is left once the builds are done."""

    def __init__(self, build, files=None, source=_kernel_source, workers: int | None = None):
        files = _KERNEL_FILES if files is None else files
        sources = {name: source(name) for name in files}
        self._file_of: dict[str, str] = {}  # kernel name -> file
        for name in files:
            for kernel in kernel_names(sources[name]):
                if kernel in self._file_of:
                    raise ValueError(f"kernel {kernel} is defined in {self._file_of[kernel]} "
                                     f"and in {name}")
                self._file_of[kernel] = name
        self._before = dict(files)
        # "#line": nvcc's messages then name the file and line a problem is in
        module_sources = {name: "".join(f'#line 1 "{part}"\n{sources[part]}\n'
                                        for part in (*files[name], name)) for name in files}
        if workers is None:
            workers = max(1, min(len(files), os.cpu_count() or 1))
        builders = ThreadPoolExecutor(workers, thread_name_prefix="hybridla-nvcc")
        try:
            self._modules = {name: builders.submit(build, name, module_sources[name])
                             for name in files}
        finally:
            builders.shutdown(wait=False)  # its threads end with the last build

    def file_of(self, kernel: str) -> str:
        """The file of cuda/ that defines `kernel` (KeyError where none does)."""
        try:
            return self._file_of[kernel]
        except KeyError:
            raise KeyError(f"no file of cuda/ defines a kernel {kernel!r}") from None

    def module(self, file: str):
        """The module of `file`, once built (waits for it)."""
        try:
            return self._modules[file].result()
        except Exception as exc:
            with_ = f" (after {', '.join(self._before[file])})" if self._before[file] else ""
            raise KernelBuildError(f"building the kernels of cuda/{file}{with_} failed: "
                                   f"{type(exc).__name__}: {exc}") from exc

    def module_of(self, kernel: str):
        """The module that holds `kernel`, once built (waits for it)."""
        return self.module(self.file_of(kernel))

    def wait(self) -> Kernels:
        """Every module built (raising the first failure, as `module`)."""
        for file in self._modules:
            self.module(file)
        return self

    def function(self, name: str):
        return self.module_of(name).function(name)

    def launch(self, name, grid, block, stream: int, *args, shared: int = 0,
               cooperative: bool = False):
        self.module_of(name).launch(name, grid, block, stream, *args, shared=shared,
                                    cooperative=cooperative)

    def allow_shared(self, name: str, nbytes: int) -> None:
        self.module_of(name).allow_shared(name, nbytes)

    def allow_nonportable_cluster(self, name: str) -> None:
        self.module_of(name).allow_nonportable_cluster(name)


_nvcc_version_lock = threading.Lock()


def compile_source(source: str, arch: str | None = None) -> bytes:
    """The cubin of CUDA C `source` (-O3, for `arch`; None: the current context's device), from
    PyCUDA's compiler and its on-disk cache.

    The `#include`s go to PyCUDA written `# include` (the same directive to the C
    preprocessor): PyCUDA keys its cache by the preprocessed source wherever the text holds
    "#include", running `nvcc --preprocess` on every process's first build, cache hit or not
    (2.5 s until the last module was ready from the cache on the H100 machine; perf/RESULTS.md,
    issue 34, the first call). Our includes are the toolkit's own headers, fixed by nvcc's
    version, which the key holds with the text and the options."""
    keyed_by_text = re.sub(r"^([ \t]*)#include\b", r"\1# include", source, flags=re.MULTILINE)
    return compile_cuda(keyed_by_text, no_extern_c=True, options=["-O3"], arch=arch)


def _build_module(context, arch: str, prepare, file: str, source: str) -> _driver.Module:
    """Compile one module of `Kernels` for `arch` (PyCUDA's compiler: its on-disk cache, keyed
    by the source, the options and nvcc's version, skips nvcc when the module is there), load
    it into `context` with its kernels' code, and let `prepare(file, module)` set their launch
    limits. Runs in a worker thread: the context is pushed here."""
    with _nvcc_version_lock:  # asked once per process (PyCUDA memoizes it, without a lock)
        get_nvcc_version("nvcc")
    # the architecture given: PyCUDA would ask the context current in this thread (none)
    cubin = compile_source(source, arch)
    context.push()
    try:
        module = _driver.Module(cubin)
        # the file's own kernels (those of the files before it live in their own modules)
        module.load_functions(kernel_names(source[source.rindex(f'#line 1 "{file}"'):]))
        prepare(file, module)
    finally:
        drv.Context.pop()
    return module


def compile_kernels(device, context, ordinal: int):
    """Our kernels, compiled once per process (PyCUDA caches the cubin on disk too), with the
    launch limits the device allows them: (kernels, fused_panel_shared, tslu_shared,
    leaf_cluster). Returns at once: `kernels` (a `Kernels`) compiles in the background, and a
    kernel's first use waits for its own module; the limits come from the attributes of the
    device (`ordinal`). No context need be current."""
    optin = getattr(drv.device_attribute, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", None)
    # the dynamic shared memory a fused LU panel may take (the kernel's static share,
    # under 1 KiB, comes out of the same per-block limit)
    most = device.get_attribute(optin) if optin else 48 * 1024
    fused_panel_shared = most - 1024
    # tslu.cu's static shares (the finish's copy of U11, 32 x 32 elements; the slots)
    # stay under 20 KiB
    tslu_shared = most - 20 * 1024
    # a cluster of 16 blocks is above the portable 8: allowed per kernel, where the device
    # has clusters (an H100 or H200 does; elsewhere the leaves go to getrf_panel). Decided
    # from the device, not by the opt-in, so that no lane waits for the leaf's module (the
    # slowest to compile); a device that has clusters and refuses the opt-in raises at the
    # leaf's first launch.
    leaf_cluster = device.compute_capability() >= (9, 0) and _driver.cluster_launch(ordinal)

    def prepare(file, module):
        if file == "getrf_panel.cu":
            for prefix in _PREFIX.values():
                module.allow_shared(f"getrf_panel_fused_{prefix}", fused_panel_shared)
        elif file == "tslu.cu":
            for prefix in _PREFIX.values():
                module.allow_shared(f"tslu_{prefix}", tslu_shared)
                module.allow_shared(f"tslu_finish_{prefix}", tslu_shared)
        elif file == "getrf_leaf_cluster.cu" and leaf_cluster:
            module.allow_nonportable_cluster("getrf_leaf_cluster_s")
        elif file == "geqrf_leaf_cluster.cu" and leaf_cluster:
            for prefix in _PREFIX.values():
                module.allow_nonportable_cluster(f"geqrf_leaf_cluster_{prefix}")
            for prefix in ("s", "d"):
                module.allow_nonportable_cluster(f"geqrf_leaf_cluster_32_{prefix}")

    major, minor = device.compute_capability()
    arch = f"sm_{major}{minor}"
    kernels = Kernels(functools.partial(_build_module, context, arch, prepare))
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
            self._blas = cublas.create()
            cublas.set_stream(self._blas, self.handle)
            self.solver = cusolverDn.create()
            cusolverDn.set_stream(self.solver, self.handle)
        else:
            self.stream = drv.Stream(flags=1)  # non-blocking: no sync with the legacy stream
            self.handle = self.stream.handle
            self._blas = None  # made on first use: only a transposing upload needs one
        self._lock = threading.Lock()

    @property
    def blas(self):
        """The lane's cuBLAS handle, on its stream (a copy lane's is made the first time it is
        asked for, inside the lane: its context is current)."""
        if self._blas is None:
            self._blas = cublas.create()
            cublas.set_stream(self._blas, self.handle)
        return self._blas

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
        return _lane_made(backend, name, backend._split if name.startswith("gpu:") else None)


def _lane_made(backend, name: str, split):
    """The lane `name` of `split` (a run's green contexts; None: the ordinary lanes), made
    if it is not yet. The caller holds `_lanes_lock`."""
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


def make_lanes_in_background(backend, names=_FIRST_LANES) -> threading.Thread:
    """Make the ordinary lanes `names` (streams; a compute lane's cuBLAS and cuSOLVER handles,
    the costly part) in a host thread of its own, which ends when they are made: a first call
    finds them made, or waits (`lane`, under `_lanes_lock`) for the one under way only. A lane
    that cannot be made here is left to be made at its first use, where its error is raised
    in the caller's thread."""
    def make():
        for name in names:
            try:
                with backend._lanes_lock:
                    _lane_made(backend, name, None)
            except Exception as exc:  # noqa: BLE001 - raised again at the lane's first use
                _log.debug("lane %s not made ahead (%s); it is made at its first use",
                           name, exc)

    thread = threading.Thread(target=make, name="hybridla-lanes")
    thread.start()
    return thread


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
    with backend._lanes_lock:  # the lanes made in the background may still be arriving
        before = {name: lane for name, lane in backend._lanes.items()
                  if name.startswith("gpu:")}
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
