"""The user's device arrays as they come in and go out: the CUDA Array Interface and DLPack.

A device array is anything with ``__cuda_array_interface__`` (CuPy, PyTorch, PyCUDA, Numba) or
with DLPack's ``__dlpack__`` and ``__dlpack_device__`` on a CUDA device (JAX, and the same
libraries). Every public call admits each device argument once, before any work (`admit`):

- it must live on the device hybridla's cuda backend runs on (its ``__dlpack_device__``, else
  the device that owns its pointer), or the call raises ValueError naming the argument;
- the work that produced it is ordered before hybridla reads it: hybridla waits (on the host)
  for the stream the array names (the interface's version 3 "stream" key: None means no wait),
  for the caller's current stream where the array names none (a PyTorch tensor), or, for a
  DLPack producer, hands it one of its streams in ``__dlpack__(stream=...)`` (the producer
  makes that stream wait for its work) and waits for that; an array that says nothing about
  streams is waited for by synchronizing the whole device;
- a DLPack-only array is seen through ``__cuda_array_interface__`` (`DLPackArray`), holding the
  producer's tensor until hybridla lets it go; results of its kind are made by its library's
  ``from_dlpack`` from a DLPack export of hybridla's array (`DLPackArray.like`).

A call returns only once its device work has finished (the engine synchronizes at the end of a
run), so its results may be used on any stream at once.

Pure Python and ctypes (no PyCUDA): the device primitives come from the backend, `device`
below: ``ordinal`` (the device it runs on), ``pointer_device(ptr)`` (the device owning a
pointer, or None), ``consumer_stream()`` (a stream of hybridla's for DLPack producers),
``stream_synchronize(stream)`` and ``synchronize()``.
"""
from __future__ import annotations

import ctypes
import sys
import weakref

import numpy as np

# DLDeviceType (dlpack.h)
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY of DLManagedTensorVersioned.flags
LEGACY_STREAM = 1  # CU_STREAM_LEGACY, the CUDA Array Interface's 1
UNKNOWN = "unknown"  # producer_stream: the array says nothing about its stream


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):  # DLTensor
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):  # DLManagedTensor (DLPack 0.x, capsule "dltensor")
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned ("dltensor_versioned")
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _Tensor)]


# DLDataTypeCode (int, uint, float, complex, bool) and bits -> NumPy, and back
_CODES = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_KINDS = {kind: code for code, kind in _CODES.items()}

# capsule names: C strings that live as long as the process (a capsule keeps the pointer)
_NAMES = {name: ctypes.create_string_buffer(name) for name in
          (b"dltensor", b"used_dltensor", b"dltensor_versioned", b"used_dltensor_versioned")}


def _api(name, restype, *argtypes):
    """A CPython C-API function with our own prototype (ctypes.pythonapi's are shared)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_is_valid = _api("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_pointer = _api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                        ctypes.c_char_p)
_capsule_rename = _api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
_capsule_new = _api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_void_p)
# on a capsule being destroyed: its raw address, no new reference to it
_raw_is_valid = _api("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_raw_pointer = _api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)


# -- what is a device array ---------------------------------------------------------------------
def dlpack_device(x):
    """(device type, device id) of an object offering DLPack, else None."""
    if isinstance(x, np.ndarray) or not hasattr(type(x), "__dlpack_device__"):
        return None
    try:
        kind, ident = x.__dlpack_device__()
    except Exception:  # noqa: BLE001 - a producer that cannot say is not a device array
        return None
    return int(kind), int(ident)


def is_device_array(x) -> bool:
    """Whether x is a device array: ``__cuda_array_interface__``, or DLPack on a CUDA device
    (device memory or managed memory)."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    device = dlpack_device(x)
    return device is not None and device[0] in (KDL_CUDA, KDL_CUDA_MANAGED)


def device_array_layout(obj):
    """(pointer, (rows, cols), dtype, strides in bytes) of a 1-D or 2-D device array, from its
    __cuda_array_interface__ (PyCUDA GPUArray, CuPy, PyTorch, Numba all offer it). A 1-D array
    is a column."""
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides = tuple(int(np.prod(shape[i + 1:])) * dtype.itemsize for i in range(len(shape)))
    if len(shape) == 1:
        shape, strides = (shape[0], 1), (strides[0], shape[0] * dtype.itemsize)
    return int(cai["data"][0]), shape, dtype, tuple(strides)


def column_major(x) -> bool:
    """Whether a device array is laid out column-major: unit stride down a column, columns at
    least a column apart (a 1-D array is a column)."""
    _, (m, n), dtype, strides = device_array_layout(x)
    return strides[0] == dtype.itemsize and (n <= 1 or strides[1] >= m * dtype.itemsize)


def factored_in_place(x, overwrite) -> bool:
    """Whether a factorization of the device array x works in x's own memory, with no copy:
    the caller allows it (`overwrite`), x is writable and column-major (the cuda backend's
    device_matrix; a row-major array is factored in a column-major copy)."""
    return bool(overwrite) and hasattr(x, "__cuda_array_interface__") and \
        not x.__cuda_array_interface__["data"][1] and column_major(x)


def sparse_kind(x):
    """A description of x when it is a sparse matrix of a GPU library (which hybridla does
    not take: it factors dense matrices), with how to densify it; else None."""
    module = type(x).__module__
    if module.startswith("cupyx.scipy.sparse"):
        return f"a cupyx.scipy.sparse {type(x).__name__}", ".toarray()"
    layout = getattr(x, "layout", None)
    if module.split(".")[0] == "torch" and layout is not None and str(layout) != "torch.strided":
        return f"a sparse torch tensor ({layout})", ".to_dense()"
    return None


def check_dense(name, x) -> None:
    """TypeError, naming the argument and how to densify it, for a GPU library's sparse matrix
    (scipy.sparse is the user layer's to name)."""
    sparse = sparse_kind(x)
    if sparse is not None:
        raise TypeError(f"{name} is {sparse[0]}; hybridla factors dense matrices: pass "
                        f"{name}{sparse[1]}")


def array_library(x) -> str:
    """The top-level module of the array `x`'s type ("cupy", "torch", "pycuda", ...)."""
    return type(x).__module__.split(".")[0]


# -- admission ------------------------------------------------------------------------------------
def array_device(device, x):
    """The CUDA device x lives on: its ``__dlpack_device__``, else the device owning its pointer
    (`device.pointer_device`); None where any device may use it (managed memory, an empty
    array) or none says."""
    kind = dlpack_device(x)
    if kind is not None and kind[0] in (KDL_CUDA, KDL_CUDA_MANAGED):
        return kind[1] if kind[0] == KDL_CUDA else None
    pointer = int(x.__cuda_array_interface__["data"][0] or 0)
    return device.pointer_device(pointer) if pointer else None


def producer_stream(x):
    """The stream whose work produced the CUDA-array-interface array x: the interface's
    "stream" (version 3; None: nothing to wait for), the caller's current stream for a PyTorch
    tensor (its interface names none), else UNKNOWN."""
    cai = x.__cuda_array_interface__
    if "stream" in cai:
        return None if cai["stream"] is None else int(cai["stream"])
    if array_library(x) == "torch":
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream or LEGACY_STREAM
    return UNKNOWN


def wait_for_producer(device, stream) -> None:
    """A named host wait: before hybridla reads a user's array, the work that produced it has
    finished (on `stream`; UNKNOWN: everything on the device; None: nothing to wait for)."""
    if stream is UNKNOWN:
        device.synchronize()
    elif stream is not None:
        device.stream_synchronize(stream)


def admit(device, name, x):
    """The user's device argument `name` as hybridla's layers read it, checked and ordered
    (see the module's docstring): x itself, or a DLPackArray over a DLPack-only x."""
    check_dense(name, x)
    where = array_device(device, x)
    if where is not None and where != device.ordinal:
        raise ValueError(
            f"{name} is on CUDA device {where}, and hybridla's cuda backend runs on device "
            f"{device.ordinal}: move {name} there first (CuPy: create it inside "
            f"`with cupy.cuda.Device({device.ordinal}):`; PyTorch: {name}.to('cuda:"
            f"{device.ordinal}')), or make that device the first one the process sees "
            f"(CUDA_VISIBLE_DEVICES)")
    if hasattr(x, "__cuda_array_interface__"):
        wait_for_producer(device, producer_stream(x))
        return x
    stream = device.consumer_stream()
    view = DLPackArray(x, stream)
    wait_for_producer(device, stream)  # the producer made our stream wait for its work
    return view


def unwrap(result):
    """A call's result with each DLPackArray (a DLPack-only input handed back, as an in-place
    result) replaced by the user's own array."""
    if isinstance(result, DLPackArray):
        return result.source
    if isinstance(result, tuple) and any(isinstance(r, (DLPackArray, tuple)) for r in result):
        return tuple(unwrap(r) for r in result)
    return result


# -- DLPack in ----------------------------------------------------------------------------------
def _release_producer(deleter: int, managed: int) -> None:
    if deleter:
        ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(deleter)(managed)


class DLPackArray:
    """A DLPack producer's array seen through ``__cuda_array_interface__``: the tensor taken
    from ``source.__dlpack__(stream=stream)`` (the capsule consumed), kept until this object
    goes, when the producer's deleter runs. `like(out)` makes a result of the source's kind."""

    def __init__(self, source, stream=None):
        self.source = source
        try:
            capsule = source.__dlpack__(stream=stream, max_version=(1, 0))
        except TypeError:  # a producer of DLPack before 1.0: no max_version
            capsule = source.__dlpack__(stream=stream)
        for versioned in (True, False):
            name = b"dltensor_versioned" if versioned else b"dltensor"
            if _capsule_is_valid(capsule, name):
                break
        else:
            raise TypeError(f"{type(source).__name__}.__dlpack__ returned no DLPack capsule")
        address = _capsule_pointer(capsule, name)
        managed = (_ManagedVersioned if versioned else _Managed).from_address(address)
        # consumed: from here on the producer's tensor is ours to release
        _capsule_rename(capsule, ctypes.addressof(_NAMES[b"used_" + name]))
        self._release = weakref.finalize(self, _release_producer, managed.deleter or 0,
                                         address)
        tensor = managed.dl_tensor
        self.device = (tensor.device.device_type, tensor.device.device_id)
        self.readonly = bool(versioned and managed.flags & _READ_ONLY)
        kind, lanes = _CODES.get(tensor.dtype.code), tensor.dtype.lanes
        if kind is None or lanes != 1:
            raise TypeError(f"a DLPack array of type code {tensor.dtype.code}, "
                            f"{tensor.dtype.bits} bits, {lanes} lanes is not a NumPy dtype")
        self.dtype = np.dtype(f"{kind}{tensor.dtype.bits // 8}")
        self.shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
        self.strides = None if not tensor.strides else tuple(
            tensor.strides[i] * self.dtype.itemsize for i in range(tensor.ndim))
        self.ptr = (tensor.data or 0) + tensor.byte_offset

    @property
    def __cuda_array_interface__(self):
        # "stream": None: `admit` has ordered the producer's work already
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, self.readonly),
                "strides": self.strides, "version": 3, "stream": None}

    def like(self, out):
        """`out` (hybridla's device array, with __cuda_array_interface__) as an array of the
        source's library, sharing memory: its ``from_dlpack`` (through the array API's
        ``__array_namespace__``, else the library's module) of a DLPack export of out."""
        export = DLPackExport(out, self.device)
        namespace = getattr(self.source, "__array_namespace__", None)
        library = namespace() if namespace is not None else sys.modules.get(
            array_library(self.source))
        from_dlpack = getattr(library, "from_dlpack", None)
        return export if from_dlpack is None else from_dlpack(export)


# -- DLPack out -----------------------------------------------------------------------------------
_exports: dict = {}  # address of an exported DLManagedTensor -> what it keeps alive


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(managed):  # the consumer is done with the tensor: the array may go
    _exports.pop(managed, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):  # a capsule dropped unconsumed: release its tensor
    for name in (b"dltensor", b"dltensor_versioned"):
        if _raw_is_valid(capsule, name):
            _exports.pop(_raw_pointer(capsule, name), None)


def export(array, device, versioned=False):
    """A DLPack capsule ("dltensor", or "dltensor_versioned" for DLPack 1.0) over the memory of
    `array` (anything with __cuda_array_interface__), which it keeps alive until the
    consumer's deleter call (or the capsule's end, unconsumed). `device`: (type, id)."""
    cai = array.__cuda_array_interface__
    dtype, shape = np.dtype(cai["typestr"]), tuple(int(s) for s in cai["shape"])
    if dtype.kind not in _KINDS:
        raise BufferError(f"dtype {dtype} has no DLPack type")
    sizes = (ctypes.c_int64 * len(shape))(*shape)
    strides = None if cai.get("strides") is None else \
        (ctypes.c_int64 * len(shape))(*(s // dtype.itemsize for s in cai["strides"]))
    managed = _ManagedVersioned() if versioned else _Managed()
    tensor = managed.dl_tensor
    tensor.data, tensor.ndim = cai["data"][0], len(shape)
    tensor.device = _Device(*device)
    tensor.dtype = _DataType(_KINDS[dtype.kind], dtype.itemsize * 8, 1)
    tensor.shape = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int64))
    if strides is not None:
        tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = ctypes.cast(_deleter, ctypes.c_void_p).value
    if versioned:
        managed.version = _Version(1, 0)
        managed.flags = _READ_ONLY if cai["data"][1] else 0
    address = ctypes.addressof(managed)
    _exports[address] = (managed, sizes, strides, array)
    name = _NAMES[b"dltensor_versioned" if versioned else b"dltensor"]
    return _capsule_new(address, ctypes.addressof(name),
                        ctypes.cast(_capsule_destructor, ctypes.c_void_p).value)


class DLPackExport:
    """One of hybridla's device arrays (`array`, with __cuda_array_interface__) as a DLPack
    producer on `device` ((type, id)), for a library's ``from_dlpack``. hybridla's work on it
    has finished when a call returns: there is no stream to order a consumer after."""

    def __init__(self, array, device):
        self.array, self.device = array, (int(device[0]), int(device[1]))

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__

    @property
    def shape(self):
        return tuple(self.array.__cuda_array_interface__["shape"])

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"the array is on DLPack device {self.device}, not {dl_device}")
        if copy:
            raise BufferError("hybridla exports its arrays without a copy")
        return export(self.array, self.device,
                      versioned=max_version is not None and tuple(max_version) >= (1, 0))
