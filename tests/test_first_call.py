"""A process's first call (issue 34): our kernels compiled per file of cuda/, in parallel and in
the background (backend/cuda/runtime.Kernels), and the pinned staging slots made in the
background (backend/cuda/memory.PinnedBuffers).

On the CPU: runtime.py and memory.py are loaded from their paths over stand-ins for PyCUDA,
nvmath and the driver calls (as tests/_batched_emulation.py does), so that what they decide
without a device is tested here: which file defines which kernel (checked against the C
preprocessor's expansion of the sources), that the modules build at once in threads of their
own, that a lookup waits for its own module only, and that a build's failure is raised, naming
its file, in the thread that looks a kernel of it up. On the GPU (``-m cuda``): the real
backend's kernels resolve and launch.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[1]
_CUDA_DIR = _ROOT / "cuda"
_PACKAGE = "hybridla.backend.cuda"


def _load(name: str, monkeypatch, driver=None, pagelocked_empty=None):
    """hybridla/backend/cuda/<name>.py, loaded over stand-ins for what it imports that needs
    CUDA (PyCUDA, nvmath's bindings, backend/_driver.py)."""
    import hybridla.backend

    drv = types.ModuleType("pycuda.driver")
    drv.Context = types.SimpleNamespace(pop=lambda: None)
    drv.device_attribute = types.SimpleNamespace()
    drv.MemoryError = MemoryError
    drv.pagelocked_empty = pagelocked_empty
    compiler = types.ModuleType("pycuda.compiler")
    compiler.compile = lambda source, **kw: b""
    compiler.get_nvcc_version = lambda nvcc: "nvcc"
    pycuda = types.ModuleType("pycuda")
    pycuda.driver, pycuda.compiler = drv, compiler
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublas = bindings.cusolverDn = types.SimpleNamespace()
    nvmath = types.ModuleType("nvmath")
    nvmath.bindings = bindings
    if driver is None:
        driver = types.ModuleType("hybridla.backend._driver")
        driver.CudaDriverError = type("CudaDriverError", (RuntimeError,), {})
    with monkeypatch.context() as m:  # for the import only
        for module_name, module in (("pycuda", pycuda), ("pycuda.driver", drv),
                                    ("pycuda.compiler", compiler), ("nvmath", nvmath),
                                    ("nvmath.bindings", bindings),
                                    ("hybridla.backend._driver", driver)):
            m.setitem(sys.modules, module_name, module)
        m.setattr(hybridla.backend, "_driver", driver, raising=False)
        path = _ROOT / "hybridla" / "backend" / "cuda" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"{_PACKAGE}._{name}_under_test", path)
        module = importlib.util.module_from_spec(spec)
        module.__package__ = _PACKAGE
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def runtime(monkeypatch):
    return _load("runtime", monkeypatch)


def _preprocessed_kernels(path: Path) -> set[str]:
    """The kernels of a .cu file as the C preprocessor expands its macros (the #include lines
    left out: they define no kernels of ours)."""
    source = "".join(line for line in path.read_text().splitlines(keepends=True)
                     if not line.lstrip().startswith("#include"))
    expanded = subprocess.run(["cpp", "-P", "-x", "c++", "-"], input=source, text=True,
                              capture_output=True, check=True).stdout
    return set(re.findall(r"__global__\s+void\s+(?:__\w+__\s*\([^()]*\)\s*)*(\w+)\s*\(",
                          expanded))


# -- which file defines which kernel -------------------------------------------------------------
def test_every_file_of_cuda_is_a_module(runtime):
    files = runtime._KERNEL_FILES
    assert set(files) == {p.name for p in _CUDA_DIR.glob("*.cu")} - {"batched.cu"}
    order = list(files)
    for name, before in files.items():  # what a file uses are modules too, listed before it
        for part in before:
            assert part in files and order.index(part) < order.index(name), (name, part)


@pytest.mark.skipif(shutil.which("cpp") is None, reason="needs the C preprocessor (cpp)")
def test_kernel_names_match_the_preprocessor(runtime):
    for path in sorted(_CUDA_DIR.glob("*.cu")):
        assert runtime.kernel_names(path.read_text()) == _preprocessed_kernels(path), path.name


def test_every_kernel_maps_to_exactly_one_file(runtime):
    kernels = runtime.Kernels(lambda file, source: file)
    seen = {}
    for name in runtime._KERNEL_FILES:
        for kernel in runtime.kernel_names((_CUDA_DIR / name).read_text()):
            assert kernel not in seen, f"{kernel} in {seen.get(kernel)} and {name}"
            seen[kernel] = name
            assert kernels.file_of(kernel) == name
    assert len(seen) > 100
    # the kernels the backend launches by a literal name are among them
    for name in ("pivots_to_global", "pivots_to_moves", "laswp_8", "apply_moves_16",
                 "getrf_panel_fused_d", "tslu_z", "tslu_finish_s", "getrf_leaf_cluster_s",
                 "first_zero_diagonal_d", "hemv_c", "narrow_butterfly_z", "power_of_two_scales",
                 "row_stats_d", "qp3_norms_s", "nonfinite_8", "zero_triangle_4"):
        assert kernels.file_of(name) in runtime._KERNEL_FILES
    with pytest.raises(KeyError, match="no_such_kernel"):
        kernels.file_of("no_such_kernel")


def test_a_module_is_its_file_after_the_files_it_uses(runtime):
    sources = {}
    runtime.Kernels(lambda file, source: sources.setdefault(file, source)).wait()
    hemv = sources["hemv.cu"]
    assert hemv.index('#line 1 "lapack_aux.cu"') < hemv.index('#line 1 "convert.cu"') \
        < hemv.index('#line 1 "hemv.cu"')
    assert (_CUDA_DIR / "hemv.cu").read_text() in hemv
    assert sources["laswp.cu"] == '#line 1 "laswp.cu"\n' + (_CUDA_DIR / "laswp.cu").read_text() \
        + "\n"


# -- the lazy modules ----------------------------------------------------------------------------
class _Module:
    def __init__(self, file):
        self.file, self.launched = file, []

    def launch(self, name, *args, **kw):
        self.launched.append(name)


def test_modules_build_in_parallel_and_a_lookup_waits_for_its_own(runtime):
    files = {"a.cu": (), "b.cu": ("a.cu",), "slow.cu": ()}
    sources = {"a.cu": "extern \"C\" __global__ void ka(int x) {}",
               "b.cu": "#define K(S) extern \"C\" __global__ void kb_##S(int x) {}\nK(s)\nK(d)\n",
               "slow.cu": "extern \"C\" __global__ void kslow() {}"}
    started, release = [], threading.Event()
    all_started = threading.Barrier(3, timeout=10)

    def build(file, source):
        started.append(threading.current_thread().name)
        all_started.wait()  # each build in a thread of its own, all at once
        if file == "slow.cu":
            assert release.wait(10)
        return _Module(file)

    kernels = runtime.Kernels(build, files, sources.__getitem__, workers=3)
    kernels.launch("kb_d", (1,), (1,), 0)
    assert kernels.module("b.cu").launched == ["kb_d"]  # while slow.cu still builds
    assert kernels.module_of("ka").file == "a.cu"
    assert not release.is_set()
    release.set()
    assert kernels.module_of("kslow").file == "slow.cu"
    assert len(set(started)) == 3 and all(n.startswith("hybridla-nvcc") for n in started)
    deadline = time.monotonic() + 10  # no thread of the builds is left
    while any(t.name.startswith("hybridla-nvcc") for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_failed_build_is_raised_at_first_use_naming_its_file(runtime):
    files = {"good.cu": (), "bad.cu": ("good.cu",)}
    sources = {"good.cu": "extern \"C\" __global__ void fine() {}",
               "bad.cu": "extern \"C\" __global__ void broken() {}"}

    def build(file, source):
        if file == "bad.cu":
            raise RuntimeError("nvcc: kernel.cu(3): error: expected a ;")
        return _Module(file)

    kernels = runtime.Kernels(build, files, sources.__getitem__)
    kernels.launch("fine", (1,), (1,), 0)  # the other modules are unaffected
    errors = []

    def use():
        try:
            kernels.launch("broken", (1,), (1,), 0)
        except runtime.KernelBuildError as exc:
            errors.append(exc)

    user = threading.Thread(target=use)
    user.start()
    user.join()
    assert len(errors) == 1
    message = str(errors[0])
    assert "cuda/bad.cu" in message and "good.cu" in message and "expected a ;" in message
    assert isinstance(errors[0].__cause__, RuntimeError)
    with pytest.raises(runtime.KernelBuildError, match="bad.cu"):  # at every use
        kernels.function("broken")
    with pytest.raises(runtime.KernelBuildError, match="bad.cu"):
        kernels.wait()


def test_a_kernel_in_two_files_is_refused(runtime):
    sources = {"x.cu": "__global__ void twice() {}", "y.cu": "__global__ void twice() {}"}
    with pytest.raises(ValueError, match="twice"):
        runtime.Kernels(lambda f, s: f, {"x.cu": (), "y.cu": ()}, sources.__getitem__)


# -- the pinned staging slots --------------------------------------------------------------------
class _Allocation(bytearray):
    """A stand-in for PyCUDA's pinned host allocation (a pagelocked array's base): it records
    whether it was freed, and whether a context was current then (`current[0]`)."""

    def __init__(self, nbytes, current):
        super().__init__(nbytes)
        self.current, self.freed_in_context = current, None

    def free(self):
        self.freed_in_context = self.current[0] > 0


def _pinned(nbytes, dtype, current):
    """A pagelocked_empty stand-in's array, over an _Allocation (its base, as PyCUDA's)."""
    return np.ndarray((nbytes // np.dtype(dtype).itemsize,), dtype,
                      buffer=_Allocation(nbytes, current))


def test_staging_slots_are_made_in_the_background_in_order(monkeypatch):
    gate = [threading.Event() for _ in range(4)]
    made, current = [], [0]

    def pagelocked_empty(nbytes, dtype):
        assert gate[len(made)].wait(10)
        made.append(_pinned(nbytes, dtype, current))
        return made[-1]

    memory = _load("memory", monkeypatch, pagelocked_empty=pagelocked_empty)
    monkeypatch.setattr(memory.drv.Context, "pop", lambda: current.__setitem__(0, current[0] - 1))
    context = types.SimpleNamespace(push=lambda: current.__setitem__(0, current[0] + 1))
    backend = types.SimpleNamespace(_staging=None, context=context)
    slots = memory.staging_slots(backend, 4, 16)  # returns before any buffer is made
    assert len(slots) == 4 and not made
    up, down = slots[:2], slots[2:]
    gate[0].set()
    assert up[0] is made[0] and up[0].nbytes == 16  # waits for the first buffer only
    assert len(made) == 1
    for event in gate[1:]:
        event.set()
    assert down[1] is made[3] and len(down) == 2
    # kept for the next call; grown (all made again) when a larger one asks
    assert memory.staging_slots(backend, 2, 8)[1] is made[1]
    old = [buffer.base for buffer in made]  # the _Allocations behind the old buffers
    gate[:] = [threading.Event() for _ in range(4)]
    made.clear()
    for event in gate:
        event.set()
    grown = memory.staging_slots(backend, 3, 32)
    assert len(grown) == 3 and grown[2].nbytes == 32 and backend._staging.count == 4
    # the old buffers were given back at once, with the context current (from a thread where
    # none is, PyCUDA could not free them: they stayed pinned, 2026-11-26 on 2 x H100)
    assert [allocation.freed_in_context for allocation in old] == [True] * 4
    assert current[0] == 0


def test_a_failed_pinned_allocation_is_raised_where_the_slot_is_used(monkeypatch):
    made, refuse = [], [True]

    def pagelocked_empty(nbytes, dtype):
        if len(made) == 1 and refuse[0]:
            raise MemoryError("cuMemHostAlloc failed: out of memory")
        made.append(_pinned(nbytes, dtype, [0]))
        return made[-1]

    memory = _load("memory", monkeypatch, pagelocked_empty=pagelocked_empty)
    backend = types.SimpleNamespace(_staging=None,
                                    context=types.SimpleNamespace(push=lambda: None))
    slots = memory.staging_slots(backend, 3, 8)
    assert slots[0] is made[0]
    with pytest.raises(MemoryError, match="out of memory"):
        slots[1]
    with pytest.raises(MemoryError):
        slots[2]
    assert backend._staging.failed
    made.clear()  # the next call makes them again
    refuse[0] = False
    again = memory.staging_slots(backend, 3, 8)
    assert again[2] is made[2] and not backend._staging.failed


# -- on the GPU ----------------------------------------------------------------------------------
@pytest.mark.cuda
def test_two_backends_kernels_resolve_and_launch(cuda_backend):
    import ctypes

    import pycuda.driver as drv

    from hybridla.backend.cuda import CudaBackend, runtime

    backends = [CudaBackend(0), CudaBackend(0)]  # the second finds PyCUDA's cache filled
    for backend in backends:
        kernels = backend.kernels.wait()
        for name in runtime._KERNEL_FILES:
            assert kernels.module(name) is kernels.module(name)
        for kernel in kernels._file_of:
            assert kernels.function(kernel)
        with backend.active():
            ipiv = drv.mem_alloc(4 * 4)
            drv.memcpy_htod(ipiv, np.array([1, 2, 3, 4], np.int32))
            lane = backend.lane("gpu:update")
            with lane:
                kernels.launch("pivots_to_global", (1,), (256,), lane.handle,
                               ctypes.c_void_p(int(ipiv)), ctypes.c_int(4), ctypes.c_int(10))
            backend.synchronize()
            out = np.empty(4, np.int32)
            drv.memcpy_dtoh(out, ipiv)
            ipiv.free()
        assert out.tolist() == [10, 11, 12, 13]  # 1-based local -> 0-based global
        assert backend.leaf_cluster == (backend.device.compute_capability() >= (9, 0))


# -- staged uploads of C-ordered blocks ----------------------------------------------------------
def test_a_c_ordered_block_is_staged_as_it_lies_and_transposed_on_the_device(monkeypatch):
    """A block whose rows are contiguous (a dask chunk) goes into its slot as it lies and is
    transposed on the device; a column-ordered one goes as before. The device is emulated:
    addresses name NumPy arrays."""
    transfers = _load("transfers", monkeypatch)
    m, n, itemsize = 7, 5, 8
    device = np.zeros((m, n), order="F")  # the store's memory, at address BASE
    base, buffers, copies = 1 << 20, {}, []

    def memcpy_htod_async(address, source, stream):
        buffers[address] = np.array(source, copy=True)
        copies.append("dma to buffer")

    def geam_transpose(lane, src, src_ld, dst, dst_ld, rows, cols, dtype):
        # dst (rows x cols, column-major, ld dst_ld) := transpose of src (cols x rows, ld src_ld)
        assert src_ld == cols and dst_ld == m
        values = buffers[src].view(dtype)[:rows * cols].reshape((cols, rows), order="F")
        r0, c0 = (dst - base) // itemsize % m, (dst - base) // itemsize // m
        device[r0:r0 + rows, c0:c0 + cols] = values.T
        copies.append("transpose")

    def copy2d(A, lane, r0, r1, c0, c1, to_device, host_array=None):
        device[r0:r1, c0:c1] = host_array
        copies.append("dma in place")

    monkeypatch.setattr(transfers.drv, "memcpy_htod_async", memcpy_htod_async, raising=False)
    monkeypatch.setattr(transfers, "_copy2d", copy2d)
    slots = [np.zeros(m * n * itemsize, np.uint8) for _ in range(2)]
    backend = types.SimpleNamespace(host_copy=lambda dst, src, threads: np.copyto(dst, src),
                                    geam_transpose=geam_transpose)
    A = types.SimpleNamespace(backend=backend, dtype=np.dtype(np.float64), itemsize=itemsize,
                              ptr=base, ld=m, slot_elements=m * n, settings=types.SimpleNamespace(
                                  copy_threads=1), _slots={"up": slots},
                              _transposed_slots={}, _transposition_buffers={},
                              _alloc=lambda nbytes: 7 << 30, _sum_columns=lambda *a: None)
    lane = types.SimpleNamespace(name="copy:h2d", stream=None)
    rng = np.random.default_rng(0)
    c_ordered = np.ascontiguousarray(rng.standard_normal((m, 3)))
    f_ordered = np.asfortranarray(rng.standard_normal((m, 2)))
    transfers.stage_array(A, lane, 0, c_ordered)
    transfers.stage_array(A, lane, 1, f_ordered)
    assert A._transposed_slots == {0: True, 1: False}
    # slot 0 holds the block's rows one after the other, as they lay
    assert np.array_equal(slots[0][:m * 3 * itemsize].view(np.float64), c_ordered.ravel())
    transfers.upload_staged(A, lane, 0, 0, m, 0, 3)
    transfers.upload_staged(A, lane, 1, 0, m, 3, 5)
    assert copies == ["dma to buffer", "transpose", "dma in place"]
    assert np.array_equal(device, np.hstack([c_ordered, f_ordered]))
