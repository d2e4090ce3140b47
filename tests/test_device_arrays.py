"""The user's device arrays as they come in and go out (hybridla/backend/device_arrays.py): DLPack
as well as the CUDA Array Interface, the array's device, ordering after the producer's stream,
results of the input's kind, the GPU interface's pivots on the device, and sparse input.

Host (no GPU): the DLPack consumer against NumPy's capsules (relabelled as CUDA memory), the
producer against NumPy's from_dlpack, `admit` with a recording device, and whole calls on the
emulated device of tests/_batched_emulation.py with DLPack-only arrays. GPU (``-m cuda``): CuPy
and PyTorch streams, DLPack-only wrappers of CuPy and PyTorch arrays, 2-D pivots on the device,
an array on a second GPU.
"""
from __future__ import annotations

import copy

import ctypes
import gc
import sys
import types

import numpy as np
import pytest
import scipy.sparse
from _lapack_checks import getrf_ratio, solve_backward_error, to_device, to_host

import hybridla
from hybridla import _stacked_device
from hybridla.backend import device_arrays as da

THRESH = 30.0


# -- a DLPack-only "device array" made of NumPy memory -------------------------------------------
def _relabel(capsule, device):
    """NumPy's capsule made to say its memory is on `device` ((type, id)), as a GPU library's."""
    for versioned in (True, False):
        name = b"dltensor_versioned" if versioned else b"dltensor"
        if da._capsule_is_valid(capsule, name):
            managed = (da._ManagedVersioned if versioned else da._Managed).from_address(
                da._capsule_pointer(capsule, name))
            managed.dl_tensor.device = da._Device(*device)
            return capsule
    raise AssertionError("not a DLPack capsule")


class DLPackOnly:
    """A NumPy array behind DLPack alone (no __cuda_array_interface__), claiming a CUDA device;
    it records the streams its consumers hand it. Its "library" (__array_namespace__) makes
    results of its kind from any DLPack producer."""

    def __init__(self, a, device=(da.KDL_CUDA, 0), legacy=False, memory=None):
        self.a, self.device, self.legacy, self.streams = a, device, legacy, []
        if memory is not None:
            memory.register(a)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        if not (self.legacy or max_version is None):
            try:
                return _relabel(self.a.__dlpack__(max_version=max_version), self.device)
            except TypeError:  # NumPy < 2.1: DLPack 0.x only
                pass
        return _relabel(self.a.__dlpack__(), self.device)

    def __array_namespace__(self):
        return types.SimpleNamespace(from_dlpack=_from_dlpack)


def _from_dlpack(producer):
    """DLPackOnly's library's from_dlpack: the producer's memory, seen through DLPack."""
    view = da.DLPackArray(producer)
    cai = view.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape, strides = cai["shape"], cai["strides"]
    if strides is None:
        strides = tuple(int(np.prod(shape[i + 1:])) * dtype.itemsize for i in range(len(shape)))
    extent = sum((s - 1) * st for s, st in zip(shape, strides)) + dtype.itemsize
    buffer = (ctypes.c_char * max(extent, 1)).from_address(cai["data"][0]) if cai["data"][0] \
        else bytearray(1)
    array = np.ndarray(shape, dtype, buffer=buffer, strides=strides)
    result = DLPackOnly(array)
    result.keep = view  # the producer's array lives as long as this one
    return result


def _host(x):
    return np.array(x.a) if isinstance(x, DLPackOnly) else np.array(x)


class Recorder:
    """The device primitives admit uses, recording the waits."""

    def __init__(self, ordinal=0, devices=None):
        self.ordinal, self.devices, self.waits = ordinal, devices or {}, []

    def pointer_device(self, pointer):
        return self.devices.get(pointer, 0)

    def consumer_stream(self):
        return 0xC0FFEE

    def stream_synchronize(self, stream):
        self.waits.append(("stream", stream))

    def synchronize(self):
        self.waits.append(("device",))


class CAI:
    """A NumPy array behind __cuda_array_interface__ (version 3 with `stream`, unless
    stream is "absent")."""

    def __init__(self, a, stream="absent"):
        self.a, self.stream = a, stream

    @property
    def __cuda_array_interface__(self):
        cai = {"shape": self.a.shape, "typestr": self.a.dtype.str,
               "data": (self.a.ctypes.data, False), "strides": self.a.strides, "version": 3}
        if self.stream != "absent":
            cai["stream"] = self.stream
        return cai


# -- DLPack in and out, against NumPy ---------------------------------------------------------------
@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_a_dlpack_array_is_seen_through_the_cuda_array_interface(legacy, order):
    a = np.asarray(np.arange(12.0).reshape(3, 4), order=order)
    producer = DLPackOnly(a, legacy=legacy)
    refs = sys.getrefcount(a)
    view = da.DLPackArray(producer, stream=0x5EED)
    assert producer.streams == [0x5EED]
    cai = view.__cuda_array_interface__
    assert cai["data"] == (a.ctypes.data, False) and cai["shape"] == (3, 4)
    assert np.dtype(cai["typestr"]) == np.float64 and cai["stream"] is None
    assert cai["strides"] in (None, a.strides) and (cai["strides"] or a.strides) == a.strides
    assert view.device == (da.KDL_CUDA, 0) and view.source is producer
    assert sys.getrefcount(a) == refs + 1  # NumPy's tensor holds the array until released
    del view
    gc.collect()
    assert sys.getrefcount(a) == refs  # the producer's deleter ran


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128,
                                   np.int32])
def test_an_export_is_read_by_numpy_and_released_when_it_lets_go(dtype):
    a = np.asfortranarray(np.arange(6).reshape(2, 3).astype(dtype))
    if a.dtype.kind == "c":
        a += 1j
    before = len(da._exports)
    b = np.from_dlpack(da.DLPackExport(CAI(a), (da.KDL_CPU, 0)))
    np.testing.assert_array_equal(b, a)
    a[0, 0] = 7  # the same memory (NumPy < 2 makes b read-only)
    assert b[0, 0] == 7 and len(da._exports) == before + 1
    del b
    gc.collect()
    assert len(da._exports) == before


@pytest.mark.parametrize("versioned", [False, True])
def test_an_unconsumed_export_is_released_with_its_capsule_and_round_trips(versioned):
    a = np.arange(5, dtype=np.int32)
    before = len(da._exports)
    capsule = da.export(CAI(a), (da.KDL_CUDA, 0), versioned=versioned)
    assert len(da._exports) == before + 1
    del capsule
    gc.collect()
    assert len(da._exports) == before
    view = da.DLPackArray(da.DLPackExport(CAI(a), (da.KDL_CUDA, 0)))
    assert view.__cuda_array_interface__["data"][0] == a.ctypes.data and view.shape == (5,)
    del view
    gc.collect()
    assert len(da._exports) == before


# -- admission: the device, the producer's stream, sparse input ----------------------------------------
def test_the_producers_stream_is_waited_for_before_anything_reads_the_array():
    a = np.ones((3, 3))
    for stream, waits in ((7, [("stream", 7)]), (None, []), ("absent", [("device",)])):
        device = Recorder()
        assert da.admit(device, "a", CAI(a, stream)).a is a
        assert device.waits == waits, stream
    device, producer = Recorder(), DLPackOnly(a)
    view = da.admit(device, "a", producer)
    assert isinstance(view, da.DLPackArray) and producer.streams == [0xC0FFEE]
    assert device.waits == [("stream", 0xC0FFEE)]


def test_an_array_on_another_device_is_refused_naming_the_argument():
    a = np.ones((3, 3))
    with pytest.raises(ValueError, match=r"^b is on CUDA device 1, and hybridla's cuda backend "
                                         r"runs on device 0"):
        da.admit(Recorder(), "b", DLPackOnly(a, device=(da.KDL_CUDA, 1)))
    with pytest.raises(ValueError, match="lu_and_piv.0. is on CUDA device 2"):
        da.admit(Recorder(devices={a.ctypes.data: 2}), "lu_and_piv[0]", CAI(a))
    # managed memory is any device's; an empty array has no device to be on
    assert da.admit(Recorder(), "a", DLPackOnly(a, device=(da.KDL_CUDA_MANAGED, 3)))
    empty = CAI(np.ones((0, 3)))
    empty.a = types.SimpleNamespace(shape=(0, 3), dtype=np.dtype(np.float64), strides=(24, 8),
                                    ctypes=types.SimpleNamespace(data=0))
    assert da.admit(Recorder(devices={0: 5}), "a", empty) is empty


def test_host_memory_behind_dlpack_is_not_a_device_array():
    assert not da.is_device_array(np.ones(3))
    assert not da.is_device_array(DLPackOnly(np.ones(3), device=(da.KDL_CPU, 0)))
    assert da.is_device_array(DLPackOnly(np.ones(3)))
    assert da.is_device_array(CAI(np.ones(3)))


@pytest.mark.parametrize("module, layout, fix", [
    ("cupyx.scipy.sparse._csr", None, "a.toarray()"),
    ("torch", "torch.sparse_coo", "a.to_dense()")])
def test_gpu_sparse_matrices_get_a_type_error_that_says_to_densify(module, layout, fix):
    sparse = type("csr_matrix", (), {"__module__": module, "layout": layout,
                                     "__dlpack_device__": lambda self: (da.KDL_CUDA, 0)})()
    with pytest.raises(TypeError, match=rf"hybridla factors dense matrices: pass {fix}"):
        da.admit(Recorder(), "a", sparse)
    on_host = type("csr_matrix", (), {"__module__": module, "layout": layout})()
    with pytest.raises(TypeError, match=rf"^a is a .*hybridla factors dense matrices: pass {fix}"):
        hybridla.lu_factor(on_host, backend="host")


SPARSE_CALLS = {
    "lu_factor": lambda s, b: hybridla.lu_factor(s),
    "lu_solve": lambda s, b: hybridla.lu_solve((s, np.arange(4, dtype=np.int32)), b),
    "solve": lambda s, b: hybridla.solve(s, b),
    "solve b": lambda s, b: hybridla.solve(np.eye(4), scipy.sparse.csr_matrix(b[:, None])),
    "solve sym": lambda s, b: hybridla.solve(s, b, assume_a="sym"),
    "solve banded": lambda s, b: hybridla.solve(s, b, assume_a="banded"),
    "cho_factor": lambda s, b: hybridla.cho_factor(s),
    "cholesky": lambda s, b: hybridla.cholesky(s),
    "cho_solve": lambda s, b: hybridla.cho_solve((s, False), b),
    "qr": lambda s, b: hybridla.qr(s), "ql": lambda s, b: hybridla.ql(s),
    "lq": lambda s, b: hybridla.lq(s), "geqrf": lambda s, b: hybridla.geqrf(s),
    "geqlf": lambda s, b: hybridla.geqlf(s), "gelqf": lambda s, b: hybridla.gelqf(s),
    "geqp3": lambda s, b: hybridla.geqp3(s), "lstsq": lambda s, b: hybridla.lstsq(s, b),
    "hessenberg": lambda s, b: hybridla.hessenberg(s), "gehrd": lambda s, b: hybridla.gehrd(s),
    "solve_mixed": lambda s, b: hybridla.solve_mixed(s, b),
    "lstsq_mixed": lambda s, b: hybridla.lstsq_mixed(s, b),
}


@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array"])
@pytest.mark.parametrize("routine", list(SPARSE_CALLS))
def test_scipy_sparse_input_gets_a_type_error_that_says_to_densify(routine, kind):
    s = getattr(scipy.sparse, kind)(np.eye(4) * 4 + np.eye(4, k=1))
    with pytest.raises(TypeError, match=r"is a scipy.sparse .*hybridla factors dense matrices: "
                                        r"pass \w+\.toarray\(\)"):
        SPARSE_CALLS[routine](s, np.ones(4))


# -- whole calls on the emulated device (tests/_batched_emulation.py) --------------------------------
@pytest.fixture
def emulated(monkeypatch):
    from _batched_emulation import install
    return install(monkeypatch)


def _stack(rng, shape, dtype=np.float64):
    return np.ascontiguousarray(rng.standard_normal(shape).astype(dtype))


def test_dlpack_only_stacks_in_results_of_their_kind_out(emulated, rng):
    a = _stack(rng, (3, 12, 12))
    b = _stack(rng, (3, 12, 2))
    producer = DLPackOnly(a, memory=emulated.memory)
    lu, piv = hybridla.lu_factor(producer)
    assert isinstance(lu, DLPackOnly) and isinstance(piv, DLPackOnly)
    assert producer.streams == [emulated.backend.CONSUMER_STREAM]
    assert ("stream", emulated.backend.CONSUMER_STREAM) in emulated.backend.waits
    lu_h, piv_h = _host(lu), _host(piv)
    assert piv_h.dtype == np.int32 and piv_h.shape == (3, 12)
    for i in range(3):
        assert getrf_ratio(a[i], lu_h[i], piv_h[i]) < THRESH
    x = hybridla.lu_solve((lu, piv), DLPackOnly(b, memory=emulated.memory))
    assert isinstance(x, DLPackOnly)
    for i in range(3):
        assert solve_backward_error(a[i], _host(x)[i], b[i]) < THRESH
    spd = np.einsum("bij,bkj->bik", a, a) + 12 * np.eye(12)
    c = hybridla.cholesky(DLPackOnly(spd, memory=emulated.memory), lower=True)
    assert isinstance(c, DLPackOnly)
    np.testing.assert_allclose(np.einsum("bij,bkj->bik", _host(c), _host(c)), spd, rtol=1e-12)
    np.testing.assert_array_equal(a, producer.a)  # the input as it was


def test_on_the_emulated_device_the_producers_stream_comes_first(emulated, rng):
    a = _stack(rng, (2, 8, 8))
    array = emulated.array(a)
    base = type(array)
    array.__class__ = type("StreamArray", (base,), {"__cuda_array_interface__": property(
        lambda self: {**base.__cuda_array_interface__.fget(self), "stream": 77})})
    emulated.backend.waits.clear()
    hybridla.lu_factor(array)
    assert emulated.backend.waits[0] == ("stream", 77)

def test_on_the_emulated_device_an_array_runs_on_its_own_device(emulated, rng, monkeypatch):
    """One cuda backend per device (backend.get_backend): an array on device 1 is factored by
    device 1's; arrays of one call on two devices are refused, naming both."""
    a = _stack(rng, (2, 8, 8))
    emulated.backend.devices[a.ctypes.data] = 1
    second = copy.copy(emulated.backend)
    second.ordinal, second.waits = 1, []
    monkeypatch.setitem(hybridla.backend._made, "cuda:1", second)
    emulated.backend.waits.clear()
    lu, piv = hybridla.lu_factor(emulated.array(a))
    assert second.waits and not emulated.backend.waits
    for i in range(2):
        assert getrf_ratio(a[i], emulated.host(lu)[i], emulated.host(piv)[i]) < THRESH
    with pytest.raises(ValueError, match=r"^lu_and_piv\[0\] is on CUDA device 1 and b on "
                                         r"device 0: the arrays of one call must be on one"):
        hybridla.lu_solve((emulated.array(a), np.zeros((2, 8), np.int32)),
                          emulated.array(np.ones((2, 8))))


def test_pivots_go_to_the_device_and_back(emulated, rng):
    template = emulated.array(_stack(rng, (4, 4)))
    ops = emulated.backend
    host = rng.integers(0, 9, size=9).astype(np.int32)
    piv = _stacked_device.device_pivots(ops, template, host)
    assert tuple(piv.__cuda_array_interface__["shape"]) == (9,)
    np.testing.assert_array_equal(emulated.host(piv), host)
    np.testing.assert_array_equal(_stacked_device.host_pivots(ops, piv), host)
    stack = rng.integers(0, 9, size=(2, 3, 5)).astype(np.int32)
    np.testing.assert_array_equal(
        _stacked_device.host_pivots(ops, _stacked_device.device_pivots(ops, template, stack)),
        stack)
    with pytest.raises(TypeError, match="piv on the device must be int32"):
        _stacked_device.host_pivots(ops, emulated.array(np.ones(3)))
    assert ops.allocations == {}


# -- on the GPU -----------------------------------------------------------------------------------
def _wrap_dlpack_only(x, library):
    """A CuPy array or a PyTorch tensor behind DLPack alone, results made by its library."""
    class Wrapped:
        def __dlpack_device__(self):
            return x.__dlpack_device__()

        def __dlpack__(self, stream=None, max_version=None):
            self.streams.append(stream)
            return x.__dlpack__(stream=stream)

        def __array_namespace__(self):
            return types.SimpleNamespace(from_dlpack=library.from_dlpack)
    wrapped = Wrapped()
    wrapped.streams = []
    return wrapped


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_gpu_lu_factor_pivots_on_the_device_of_the_inputs_kind(device_kind, dtype, rng):
    from _lapack_checks import is_on_device
    a = np.asfortranarray(rng.standard_normal((150, 150)).astype(dtype))
    lu, piv = hybridla.lu_factor(to_device(a, device_kind), backend="cuda", nb=32)
    assert is_on_device(lu, device_kind) and is_on_device(piv, device_kind)
    piv_h = to_host(piv)
    assert piv_h.dtype == np.int32 and piv_h.shape == (150,)
    np.testing.assert_array_equal(piv_h, hybridla.lu_factor(a, backend="cuda", nb=32)[1])
    assert getrf_ratio(a, to_host(lu), piv_h) < THRESH
    b = rng.standard_normal((150, 2)).astype(dtype)
    for p in (piv, piv_h):  # lu_solve takes the pivots on the device or the host
        x = hybridla.lu_solve((lu, p), to_device(b, device_kind), backend="cuda")
        assert is_on_device(x, device_kind)
        assert solve_backward_error(a, to_host(x), b) < THRESH
    lu0, piv0 = hybridla.lu_factor(to_device(np.ones((0, 0), dtype), device_kind))
    assert is_on_device(piv0, device_kind) and to_host(piv0).shape == (0,)


@pytest.mark.cuda
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_gpu_dlpack_only_arrays_in_their_librarys_arrays_out(cuda_backend, library, rng):
    lib = pytest.importorskip(library)
    a = np.asfortranarray(rng.standard_normal((200, 200)))
    b = rng.standard_normal(200)
    if library == "torch":
        if not lib.cuda.is_available():
            pytest.skip("torch has no CUDA here")
        a_d, b_d = lib.from_numpy(np.ascontiguousarray(a)).cuda(), lib.from_numpy(b).cuda()
        kind = lib.Tensor
    else:
        a_d, b_d, kind = lib.asarray(a), lib.asarray(b), lib.ndarray
    wa, wb = _wrap_dlpack_only(a_d, lib), _wrap_dlpack_only(b_d, lib)
    lu, piv = hybridla.lu_factor(wa)
    assert isinstance(lu, kind) and isinstance(piv, kind)
    assert wa.streams == [hybridla.backend.get_backend("cuda").lane("gpu:update").handle]
    assert getrf_ratio(a, to_host(lu), to_host(piv)) < THRESH
    x = hybridla.solve(wa, wb)
    assert isinstance(x, kind) and solve_backward_error(a, to_host(x), b) < THRESH
    q, r = hybridla.qr(wa, mode="economic")
    assert isinstance(q, kind) and np.allclose(to_host(q) @ to_host(r), a)
    same, _ = hybridla.lu_factor(wa, overwrite_a=True)  # in place: the user's own object back
    assert same is wa


@pytest.mark.cuda
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_gpu_the_callers_stream_is_waited_for(cuda_backend, library, rng, monkeypatch):
    """An array written on the caller's non-default stream: hybridla waits for that stream
    (CuPy: the interface's "stream"; PyTorch: its current stream) before it reads the array,
    and its results are complete when the call returns, for use on any stream."""
    lib = pytest.importorskip(library)
    backend = hybridla.backend.get_backend("cuda")
    waited = []
    sync = type(backend).stream_synchronize
    monkeypatch.setattr(type(backend), "stream_synchronize",
                        lambda self, stream: (waited.append(stream), sync(self, stream))[1])
    n = 2048
    a = np.asfortranarray(rng.standard_normal((n, n)))
    if library == "torch":
        if not lib.cuda.is_available():
            pytest.skip("torch has no CUDA here")
        stream = lib.cuda.Stream()
        with lib.cuda.stream(stream):
            x = lib.from_numpy(np.ascontiguousarray(a)).cuda()
            for _ in range(20):  # keep the stream busy: the input is ready only at the end
                y = x @ x.T
            a_d = (x + 0 * y).T.contiguous().T
            lu, piv = hybridla.lu_factor(a_d, backend="cuda")
            handle = stream.cuda_stream
    else:
        stream = lib.cuda.Stream(non_blocking=True)
        with stream:
            x = lib.asarray(a)
            for _ in range(20):
                y = x @ x.T
            a_d = lib.asfortranarray(x + 0 * y)
            lu, piv = hybridla.lu_factor(a_d, backend="cuda")
            handle = stream.ptr
    assert handle in waited
    assert getrf_ratio(a, to_host(lu), to_host(piv)) < THRESH


@pytest.mark.cuda
def test_gpu_an_array_on_the_second_gpu_is_factored_there(cuda_backend):
    """The input array's device is the one that computes (one cuda backend per device); the
    factors stay there; arrays of one call on two devices are refused."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    rng = np.random.default_rng(5)
    host = rng.standard_normal((300, 300))
    with cupy.cuda.Device(1):
        a = cupy.asarray(host)
        b = cupy.ones(300)
    lu, piv = hybridla.lu_factor(a)
    assert lu.device.id == 1 and piv.device.id == 1
    x = hybridla.lu_solve((lu, piv), b)
    assert x.device.id == 1
    assert solve_backward_error(host, cupy.asnumpy(x), np.ones(300)) < THRESH
    assert hybridla.backend.get_backend("cuda", 1).ordinal == 1
    with pytest.raises(ValueError, match="on CUDA device 1 and b on device 0"):
        hybridla.lu_solve((lu, piv), cupy.ones(300))


# -- a device array factored in place takes no more device memory -------------------------------
class _CAI:
    """A stand-in device array: only its __cuda_array_interface__ (no memory behind it)."""

    def __init__(self, shape, strides=None, readonly=False, typestr="<f8"):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (1 << 30, readonly), "version": 3}


@pytest.mark.parametrize("array, overwrite, expected", [
    (_CAI((6, 4), (8, 48)), True, True),                  # column-major
    (_CAI((6, 4), (8, 64)), True, True),                  # column-major, padded columns
    (_CAI((6, 4), (8, 48)), False, False),                # the caller keeps its array
    (_CAI((6, 4), (8, 48), readonly=True), True, False),  # read-only: a copy
    (_CAI((6, 4)), True, False),                          # C-contiguous (strides None)
    (_CAI((6, 4), (32, 8)), True, False),                 # row-major
    (_CAI((6,)), True, True),                             # a vector is a column
    (_CAI((6,), (16,)), True, False),                     # ... but not a strided one
])
def test_which_device_arrays_are_factored_in_place(array, overwrite, expected):
    assert da.factored_in_place(array, overwrite) is expected


def test_a_device_array_factored_in_place_is_not_counted_twice(monkeypatch):
    """A 6 x 4 float64 matrix needs its 192 bytes and 100 more: with a budget of 150 bytes
    only one already in device memory and factored there fits. The refusal of one over the
    budget says what would have fitted, not that the routine lacks an out-of-core version."""
    from hybridla import _memory
    backend = types.SimpleNamespace(has_device=True, free_memory=lambda: 0,
                                    required_bytes=lambda m, n, dtype, nb: m * n * 8 + 100)
    monkeypatch.setattr(_memory, "_memory_budget", lambda ops: 150)
    assert _memory._check_memory(backend, 6, 4, np.float64, 2, in_place=True) is None
    with pytest.raises(MemoryError, match="overwrite_a=True on a writable column-major"):
        _memory._check_memory(backend, 6, 4, np.float64, 2, why=_memory._DEVICE_COPY_WHY)


@pytest.mark.cuda
@pytest.mark.parametrize("factor", ["lu_factor", "qr"])
def test_gpu_a_budget_that_only_in_place_fits(cuda_backend, factor, rng):
    """A budget below the matrix and its workspaces but above the workspaces alone: a
    column-major device array factored in place (overwrite_a=True) runs; asked to keep its
    array (a copy) it is refused, the message saying how it would have fitted."""
    cupy = pytest.importorskip("cupy")
    n, nb = 512, 64
    a = np.asfortranarray(rng.standard_normal((n, n)))
    from hybridla.backend import get_backend
    need = get_backend(cuda_backend).required_bytes(n, n, np.float64, nb)
    call = {"lu_factor": lambda x, **kw: hybridla.lu_factor(x, nb=nb, backend="cuda", **kw),
            "qr": lambda x, **kw: hybridla.qr(x, mode="raw", nb=nb, backend="cuda", **kw)}[factor]
    with hybridla.config.set({"device.memory_budget": need - a.nbytes // 2}):
        with pytest.raises(MemoryError, match="overwrite_a=True on a writable column-major"):
            call(cupy.asfortranarray(cupy.asarray(a)))
        result = call(cupy.asfortranarray(cupy.asarray(a)), overwrite_a=True)
    if factor == "lu_factor":
        lu, piv = result
        assert getrf_ratio(a, to_host(lu), to_host(piv)) < THRESH
