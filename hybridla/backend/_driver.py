"""The few CUDA driver calls PyCUDA does not offer, through ctypes on the driver library PyCUDA
already loaded: streams with priorities (PyCUDA's Stream has none, and without them the panel
queues behind the trailing update's GEMM blocks), events on such streams, kernel launches on
them, CUDA graphs captured from them, green contexts (a share of the SMs that a stream's work
is kept to), and pinning memory that is not C-contiguous (a Fortran-ordered NumPy matrix) in
place, or mapped for the device; a stream's wait on a flag and its write of one (the NCCL
transport's broadcast gates); and the allocations handed to the user (mem_alloc), made
without holding the GIL.
Every call's status is checked."""
from __future__ import annotations

import ctypes

_cuda = ctypes.CDLL("libcuda.so.1")
_CU_EVENT_DEFAULT = 0
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CUDA_ERROR_NOT_READY = 600  # cuEventQuery, cuStreamQuery: work still pending
_CU_STREAM_NON_BLOCKING = 1
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1  # other threads may still allocate meanwhile
_CU_DEV_RESOURCE_TYPE_SM = 1
_CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120
_CU_GREEN_CTX_DEFAULT_STREAM = 1  # required by cuGreenCtxCreate
_CU_STREAM_WAIT_VALUE_GEQ = 0  # (int32_t)(*addr - value) >= 0: cyclic, past wraparound
_CU_STREAM_WRITE_VALUE_DEFAULT = 0  # the stream's earlier writes are visible before it
_CU_MEMHOSTREGISTER_PORTABLE_DEVICEMAP = 1 | 2  # every context; a device address for it


class CudaDriverError(RuntimeError):
    pass


def _check(status, what):
    if status != 0:
        name = ctypes.c_char_p()
        _cuda.cuGetErrorName(status, ctypes.byref(name))
        raise CudaDriverError(f"{what} failed: {name.value.decode() if name.value else status}")


def stream_priority_range() -> tuple[int, int]:
    """(least, greatest) priority; numerically lower is more urgent."""
    least, greatest = ctypes.c_int(), ctypes.c_int()
    _check(_cuda.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)),
           "cuCtxGetStreamPriorityRange")
    return least.value, greatest.value


def stream_create(priority: int) -> int:
    handle = ctypes.c_void_p()
    _check(_cuda.cuStreamCreateWithPriority(ctypes.byref(handle), _CU_STREAM_NON_BLOCKING,
                                            ctypes.c_int(priority)), "cuStreamCreateWithPriority")
    return handle.value


def pointer_device(pointer: int) -> int | None:
    """The ordinal of the device whose memory `pointer` points into (cuPointerGetAttribute),
    or None where the driver does not know the pointer (host memory)."""
    ordinal = ctypes.c_int()
    status = _cuda.cuPointerGetAttribute(ctypes.byref(ordinal),
                                         _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                         ctypes.c_void_p(pointer))
    return ordinal.value if status == 0 else None


def current_device() -> int | None:
    """The ordinal of the device whose context is current in this thread (cuCtxGetCurrent,
    cuCtxGetDevice: a device's handle is its ordinal), or None where none is (or the driver
    is not initialized yet)."""
    context = ctypes.c_void_p()
    if _cuda.cuCtxGetCurrent(ctypes.byref(context)) != 0 or not context.value:
        return None
    device = ctypes.c_int()
    _check(_cuda.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
    return device.value


def cluster_launch(ordinal: int) -> bool:
    """Whether device `ordinal` launches kernels in thread-block clusters (compute capability
    9.0 on; PyCUDA has no name for the attribute)."""
    device, value = ctypes.c_int(), ctypes.c_int()
    _check(_cuda.cuDeviceGet(ctypes.byref(device), ctypes.c_int(ordinal)), "cuDeviceGet")
    _check(_cuda.cuDeviceGetAttribute(ctypes.byref(value), _CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
                                      device), "cuDeviceGetAttribute(CLUSTER_LAUNCH)")
    return bool(value.value)


_CUDA_ERROR_OUT_OF_MEMORY = 2


def mem_alloc(nbytes: int) -> int:
    """cuMemAlloc of `nbytes` in the current context: the pointer; MemoryError where the device
    has too little. Through ctypes, which lets Python's other threads run during the call;
    PyCUDA's mem_alloc holds the GIL throughout, and a worker's 17.2 GB part took 0.02 s to
    map, its connection and its GPU work held up as long (perf/RESULTS.md, issue 32, stop
    58)."""
    pointer = ctypes.c_uint64()
    status = _cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes))
    if status == _CUDA_ERROR_OUT_OF_MEMORY:
        raise MemoryError(f"cuMemAlloc of {nbytes} bytes: the device is out of memory")
    _check(status, "cuMemAlloc")
    return pointer.value


def mem_free(pointer: int) -> None:
    """cuMemFree of what mem_alloc gave, in its context."""
    _check(_cuda.cuMemFree_v2(ctypes.c_uint64(pointer)), "cuMemFree")


def _versioned(name):
    """The driver's entry point `name`, as its _v2 where the library exports one."""
    return getattr(_cuda, name + "_v2", None) or getattr(_cuda, name)


def stream_write_value32(stream: int, pointer: int, value: int) -> None:
    """The 32-bit word at `pointer` (device memory, or host memory mapped for it) := value,
    in the order of `stream`, once its earlier work is done (cuStreamWriteValue32): no
    kernel, so no SM."""
    _check(_versioned("cuStreamWriteValue32")(
        ctypes.c_void_p(stream), ctypes.c_uint64(pointer), ctypes.c_uint32(value),
        ctypes.c_uint(_CU_STREAM_WRITE_VALUE_DEFAULT)), "cuStreamWriteValue32")


def stream_wait_value32(stream: int, pointer: int, value: int) -> None:
    """`stream`'s later work waits on the device until the 32-bit word at `pointer` has
    reached `value` (cuStreamWaitValue32, >= as a cyclic comparison): no kernel, so no SM
    held while it waits."""
    _check(_versioned("cuStreamWaitValue32")(
        ctypes.c_void_p(stream), ctypes.c_uint64(pointer), ctypes.c_uint32(value),
        ctypes.c_uint(_CU_STREAM_WAIT_VALUE_GEQ)), "cuStreamWaitValue32")


def stream_synchronize(stream: int) -> None:
    """Wait on the host until everything enqueued on `stream` has finished."""
    _check(_cuda.cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")


class _DevResource(ctypes.Structure):
    """cuda.h's CUdevResource (CUDA 12.4+): its type, padding, then a 48-byte union whose SM
    member begins with these three counts."""
    _fields_ = [("type", ctypes.c_int), ("_internal_padding", ctypes.c_ubyte * 92),
                ("sm_count", ctypes.c_uint), ("min_partition_size", ctypes.c_uint),
                ("coscheduled_alignment", ctypes.c_uint), ("_rest", ctypes.c_ubyte * 36)]


class GreenContext:
    """A share of the device's SMs (CUDA 12.4+): the work of its streams runs on those SMs only,
    whatever else the device runs. Kept for the process (never destroyed)."""

    __slots__ = ("handle", "sms", "coscheduled")

    def __init__(self, device: ctypes.c_int, resource: _DevResource):
        desc, handle = ctypes.c_void_p(), ctypes.c_void_p()
        _check(_cuda.cuDevResourceGenerateDesc(ctypes.byref(desc), ctypes.byref(resource), 1),
               "cuDevResourceGenerateDesc")
        _check(_cuda.cuGreenCtxCreate(ctypes.byref(handle), desc, device,
                                      _CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate")
        self.handle, self.sms = handle.value, resource.sm_count
        # SMs guaranteed to sit in one GPU processing cluster: the largest thread-block cluster
        # its streams can launch (with one block per SM)
        self.coscheduled = resource.coscheduled_alignment

    def stream_create(self, priority: int) -> int:
        handle = ctypes.c_void_p()
        _check(_cuda.cuGreenCtxStreamCreate(ctypes.byref(handle), ctypes.c_void_p(self.handle),
                                            _CU_STREAM_NON_BLOCKING, ctypes.c_int(priority)),
               "cuGreenCtxStreamCreate")
        return handle.value


def split_sms(first: int) -> tuple[GreenContext, GreenContext]:
    """The current context's device's SMs as two green contexts: `first` of them (rounded up
    as the device asks: to a multiple of 8 on sm_90) and the rest. Raises CudaDriverError where
    the driver has no green contexts."""
    device = ctypes.c_int()
    _check(_cuda.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
    whole, group, rest, groups = _DevResource(), _DevResource(), _DevResource(), ctypes.c_uint(1)
    _check(_cuda.cuDeviceGetDevResource(device, ctypes.byref(whole), _CU_DEV_RESOURCE_TYPE_SM),
           "cuDeviceGetDevResource")
    _check(_cuda.cuDevSmResourceSplitByCount(ctypes.byref(group), ctypes.byref(groups),
                                             ctypes.byref(whole), ctypes.byref(rest), 0,
                                             ctypes.c_uint(first)), "cuDevSmResourceSplitByCount")
    if groups.value != 1 or rest.sm_count == 0:
        raise CudaDriverError(f"cannot split {whole.sm_count} SMs into {first} and the rest")
    return GreenContext(device, group), GreenContext(device, rest)


class Event:
    """A CUDA event recorded on a stream given by its raw handle."""

    __slots__ = ("handle",)

    def __init__(self):
        handle = ctypes.c_void_p()
        _check(_cuda.cuEventCreate(ctypes.byref(handle), _CU_EVENT_DEFAULT), "cuEventCreate")
        self.handle = handle.value

    def record(self, stream: int) -> "Event":
        _check(_cuda.cuEventRecord(ctypes.c_void_p(self.handle), ctypes.c_void_p(stream)),
               "cuEventRecord")
        return self

    def make_wait(self, stream: int) -> None:
        """Work enqueued on `stream` after this call waits for the event (on the device)."""
        _check(_cuda.cuStreamWaitEvent(ctypes.c_void_p(stream), ctypes.c_void_p(self.handle), 0),
               "cuStreamWaitEvent")

    def synchronize(self) -> None:
        _check(_cuda.cuEventSynchronize(ctypes.c_void_p(self.handle)), "cuEventSynchronize")

    def query(self) -> bool:
        """Whether the work before the event has completed, without waiting (the progress
        bars count finished device work by it)."""
        status = _cuda.cuEventQuery(ctypes.c_void_p(self.handle))
        if status == _CUDA_ERROR_NOT_READY:
            return False
        _check(status, "cuEventQuery")
        return True

    def time_since(self, earlier: "Event") -> float:
        """Milliseconds from `earlier` to this event (both completed)."""
        ms = ctypes.c_float()
        _check(_cuda.cuEventElapsedTime(ctypes.byref(ms), ctypes.c_void_p(earlier.handle),
                                        ctypes.c_void_p(self.handle)), "cuEventElapsedTime")
        return ms.value

    def __del__(self):
        if self.handle and _cuda is not None:
            _cuda.cuEventDestroy_v2(ctypes.c_void_p(self.handle))


class Graph:
    """The work `record()` enqueues on a stream, captured once (stream capture: nothing runs
    then) and launched as a whole as often as wanted, in that stream's order."""

    __slots__ = ("handle",)

    def __init__(self, stream: int, record):
        self.handle = None
        _check(_cuda.cuStreamBeginCapture_v2(ctypes.c_void_p(stream),
                                             _CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture")
        graph = ctypes.c_void_p()
        try:
            record()
        except BaseException:  # the stream leaves capture mode, the partial graph is freed
            _cuda.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(graph))
            if graph.value:
                _cuda.cuGraphDestroy(graph)
            raise
        _check(_cuda.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(graph)),
               "cuStreamEndCapture")
        try:
            handle = ctypes.c_void_p()
            _check(_cuda.cuGraphInstantiateWithFlags(ctypes.byref(handle), graph,
                                                     ctypes.c_ulonglong(0)),
                   "cuGraphInstantiate")
            self.handle = handle.value
        finally:
            if graph.value:
                _cuda.cuGraphDestroy(graph)  # the executable graph keeps what it needs

    def launch(self, stream: int) -> None:
        _check(_cuda.cuGraphLaunch(ctypes.c_void_p(self.handle), ctypes.c_void_p(stream)),
               "cuGraphLaunch")

    def __del__(self):
        if self.handle and _cuda is not None:
            _cuda.cuGraphExecDestroy(ctypes.c_void_p(self.handle))


class Module:
    """A compiled CUDA module (cubin from pycuda.compiler.compile) whose kernels launch on raw
    stream handles."""

    def __init__(self, cubin: bytes):
        self._image = ctypes.create_string_buffer(cubin)
        handle = ctypes.c_void_p()
        _check(_cuda.cuModuleLoadData(ctypes.byref(handle), self._image), "cuModuleLoadData")
        self.handle = handle.value
        self._functions = {}

    def function(self, name: str):
        if name not in self._functions:
            fn = ctypes.c_void_p()
            _check(_cuda.cuModuleGetFunction(ctypes.byref(fn), ctypes.c_void_p(self.handle),
                                             name.encode()), f"cuModuleGetFunction({name})")
            self._functions[name] = fn.value
        return self._functions[name]

    def load_functions(self, names) -> None:
        """Look the kernels `names` up and load their code now (cuFuncLoad, where the driver
        has it: CUDA 12.4 on). Under the driver's lazy loading (CUDA_MODULE_LOADING=LAZY, the
        default) a kernel's code is loaded at its first launch otherwise, on the caller's
        critical path, and loading may wait for the work the device has in flight."""
        load = getattr(_cuda, "cuFuncLoad", None)
        for name in names:
            function = self.function(name)
            if load is not None:
                _check(load(ctypes.c_void_p(function)), f"cuFuncLoad({name})")

    def launch(self, name, grid, block, stream: int, *args, shared: int = 0,
               cooperative: bool = False):
        """Launch kernel `name`; args are ctypes values (c_void_p, c_int, c_longlong, ...).
        `shared`: bytes of dynamic shared memory; `cooperative`: all blocks resident at once
        (cuLaunchCooperativeKernel), for kernels whose blocks wait for each other."""
        # the addresses of the argument values (addressof: a tenth of cast(pointer()), which
        # showed in profiles of gehrd's panel loop, a launch per few microseconds of work)
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        dims = (*map(ctypes.c_uint, grid), *map(ctypes.c_uint, block), ctypes.c_uint(shared),
                ctypes.c_void_p(stream), params)
        function = ctypes.c_void_p(self.function(name))
        if cooperative:
            _check(_cuda.cuLaunchCooperativeKernel(function, *dims), f"launch {name}")
        else:
            _check(_cuda.cuLaunchKernel(function, *dims, None), f"launch {name}")

    def allow_shared(self, name: str, nbytes: int) -> None:
        """Let kernel `name` use up to `nbytes` of dynamic shared memory (above the default 48 KiB
        a launch needs this opt-in)."""
        _check(_cuda.cuFuncSetAttribute(ctypes.c_void_p(self.function(name)),
                                        _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        ctypes.c_int(nbytes)), f"cuFuncSetAttribute({name})")

    def allow_nonportable_cluster(self, name: str) -> None:
        """Let kernel `name` run in clusters above the portable 8 blocks (its __cluster_dims__);
        raises CudaDriverError where the device has no such clusters."""
        _check(_cuda.cuFuncSetAttribute(ctypes.c_void_p(self.function(name)),
                                        _CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                        ctypes.c_int(1)), f"cuFuncSetAttribute({name})")


def memset_d32_async(pointer: int, value: int, count: int, stream: int) -> None:
    """count 32-bit words at `pointer` := value, in the order of `stream`."""
    _check(_cuda.cuMemsetD32Async(ctypes.c_void_p(pointer), ctypes.c_uint(value),
                                  ctypes.c_size_t(count), ctypes.c_void_p(stream)),
           "cuMemsetD32Async")


def host_register(pointer: int, nbytes: int) -> None:
    """Page-lock existing host memory in place (cuMemHostRegister), for true async DMA."""
    _check(_cuda.cuMemHostRegister_v2(ctypes.c_void_p(pointer), ctypes.c_size_t(nbytes), 0),
           "cuMemHostRegister")


def host_register_mapped(pointer: int, nbytes: int) -> int:
    """Page-lock existing host memory in place for every context, mapped into the device's
    address space: the address the device's streams read and write it at
    (cuMemHostRegister with PORTABLE | DEVICEMAP, cuMemHostGetDevicePointer)."""
    _check(_cuda.cuMemHostRegister_v2(ctypes.c_void_p(pointer), ctypes.c_size_t(nbytes),
                                      ctypes.c_uint(_CU_MEMHOSTREGISTER_PORTABLE_DEVICEMAP)),
           "cuMemHostRegister")
    device = ctypes.c_uint64()
    _check(_versioned("cuMemHostGetDevicePointer")(ctypes.byref(device), ctypes.c_void_p(pointer),
                                                   ctypes.c_uint(0)), "cuMemHostGetDevicePointer")
    return device.value


def host_unregister(pointer: int) -> None:
    _check(_cuda.cuMemHostUnregister(ctypes.c_void_p(pointer)), "cuMemHostUnregister")
