"""What every benchmark and probe shares: optional GPU modules imported on first use, the clocks
(host clock around synchronized calls, median or best of repeats; CUDA events), the alternating
comparison of several implementations (``alternate``: round-robin repetitions, median, spread),
device and pinned host memory. How the results are reported (date, device, commit, cells,
"parity", markdown tables) is report.py's.

Importing this needs no GPU: CuPy, PyTorch, PyCUDA and nvmath-python are imported when first
asked for (``optional_import``), and a failure is remembered with its reason (``import_error``).
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np


def logger(prefix: str) -> Callable[[str], None]:
    """A function printing "[prefix] message" lines on stderr (the tables go to stdout)."""
    def log(msg: str) -> None:
        print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)
    return log


# -- optional modules ------------------------------------------------------------------------

_MODULES: dict[str, Any] = {}   # name -> module, or None and name + ":error" -> the reason
_RECORDERS: list[dict] = []     # recording_imports' dicts, open now


@contextlib.contextmanager
def recording_imports():
    """A dict of the optional modules asked for inside the block (name -> module or None), the
    ones imported earlier in the process included (a --dry run asks for none)."""
    asked: dict[str, Any] = {}
    _RECORDERS.append(asked)
    try:
        yield asked
    finally:
        _RECORDERS.remove(asked)


def optional_import(name: str):
    """The module `name`, imported once; None (its reason kept for import_error) if that fails."""
    if name not in _MODULES:
        try:
            _MODULES[name] = __import__(name, fromlist=["_"])
        except Exception as exc:  # ImportError, or a CUDA library failing to load
            _MODULES[name] = None
            _MODULES[name + ":error"] = f"{type(exc).__name__}: {exc}"
    for asked in _RECORDERS:
        asked[name] = _MODULES[name]
    return _MODULES[name]


def import_error(name: str) -> str:
    return _MODULES.get(name + ":error", f"cannot import {name}")


def loaded(name: str):
    """The module if optional_import already brought it in, else None (imports nothing)."""
    return _MODULES.get(name)


def cupy():
    return optional_import("cupy")


def cupy_has_gpu() -> bool:
    """CuPy is importable and sees a CUDA device."""
    cp = cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def no_gpu_reason() -> Optional[str]:
    """Why CuPy cannot run on a GPU here, or None if it can."""
    if cupy() is None:
        return import_error("cupy")
    return None if cupy_has_gpu() else "no CUDA device"


def hybridla_backends() -> list[str]:
    import hybridla
    return list(hybridla.available_backends())


def cupy_sync() -> None:
    cupy().cuda.Device().synchronize()


def torch_sync() -> None:
    optional_import("torch").cuda.synchronize()


# -- memory ----------------------------------------------------------------------------------

def release_device_memory() -> None:
    """Give cached device (and pinned host) memory back between implementations."""
    gc.collect()
    cp = loaded("cupy")
    if cp is not None:
        try:
            cp.cuda.Device().synchronize()
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:
            pass
    torch = loaded("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        except Exception:
            pass


def prime_pinned_pool(nbytes: int, log: Optional[Callable[[str], None]] = None) -> None:
    """Put a pinned block of nbytes in CuPy's pinned pool, so that cupy.asarray's pinned staging
    buffer (cudaHostAlloc, slow for GBs) is not allocated inside a timed region: the upload of
    a pageable NumPy array then goes through pinned memory at the link's rate."""
    try:
        mem = cupy().cuda.alloc_pinned_memory(nbytes)
        del mem
    except Exception as exc:   # cupy.asarray then falls back to a synchronous copy
        if log is not None:
            log(f"could not pin {nbytes / 2**30:.1f} GiB ahead of a timed upload: {exc}")


def pinned_empty(shape, dtype, order: str = "F") -> np.ndarray:
    """An uninitialized NumPy array in page-locked (pinned) host memory from CuPy's pinned pool;
    the array keeps the allocation alive. Pinning GBs takes seconds: allocate outside a clock."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    mem = cupy().cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
    return np.frombuffer(mem, dtype, count).reshape(shape, order=order)


def to_host(arr) -> np.ndarray:
    """A NumPy view/copy of a NumPy, CuPy or PyTorch array."""
    if isinstance(arr, np.ndarray):
        return arr
    if hasattr(arr, "get"):                    # CuPy, PyCUDA GPUArray
        return arr.get()
    if hasattr(arr, "cpu"):                    # torch.Tensor
        return arr.cpu().numpy()
    return np.asarray(arr)


def as_checkable(arr):
    """NumPy arrays stay; device arrays (CuPy, torch, PyCUDA, ...) become CuPy arrays."""
    if isinstance(arr, np.ndarray):
        return arr
    cp = cupy()
    if cp is not None and (isinstance(arr, cp.ndarray) or hasattr(arr, "__cuda_array_interface__")):
        return cp.asarray(arr)
    return to_host(arr)


def array_module(arr):
    """CuPy for a CuPy array, else NumPy."""
    cp = loaded("cupy")
    if cp is not None and isinstance(arr, cp.ndarray):
        return cp
    return np


# -- clocks ----------------------------------------------------------------------------------

@dataclass
class Measurement:
    seconds: Optional[float]   # the statistic (median by default); None where it failed
    result: Any         # what the last repetition returned (alternate: finish(result))
    times: list = field(default_factory=list)   # every timed repetition, in order
    meta: Any = None    # meta(result) of the repetition whose time is the median (or None)
    error: Optional[str] = None   # why it failed (alternate), else None

    @property
    def spread(self) -> Optional[tuple[float, float]]:
        """(fastest, slowest) of the timed repetitions, or None without any."""
        return (min(self.times), max(self.times)) if self.times else None


def no_setup():
    return None


def measure(fn: Callable[[Any, bool], Any], setup: Callable[[], Any], repeat: int, *,
            warmup: int = 0, sync: Optional[Callable[[], None]] = None,
            statistic: Callable[[list], float] = statistics.median,
            meta: Optional[Callable[[Any], Any]] = None) -> Measurement:
    """Time fn(setup(), last) ``warmup + repeat`` times on the host clock.

    setup() runs outside the timed region (a fresh copy of the input, say); ``last`` is True
    on the final repetition. sync, if given, is called before the clock starts and before it
    stops, so that asynchronous device work is inside. The previous repetition's input and
    result are dropped before the next setup: at most one of each is alive. meta, if given,
    keeps meta(result) of each timed repetition, and the Measurement carries the one of the
    repetition at the median (the lower middle one for an even count).
    """
    times, metas = [], []
    result = None
    total = warmup + repeat
    for i in range(total):
        state = result = None
        state = setup()
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        result = fn(state, i == total - 1)
        if sync is not None:
            sync()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
            if meta is not None:
                metas.append(meta(result))
    return Measurement(statistic(times), result, times,
                       metas[_median_index(times)] if metas else None)


def _median_index(times: list) -> int:
    """The index of the median repetition (the lower middle one for an even count)."""
    return sorted(range(len(times)), key=times.__getitem__)[(len(times) - 1) // 2]


@dataclass
class Contender:
    """One implementation of an alternating comparison (``alternate``).

    fn(state, last) is timed; setup() runs before it outside the clock (a fresh copy of the
    input); sync, if given, runs before the clock starts and before it stops. meta(result), if
    given, is kept per timed repetition. finish(result), if given, runs on the final
    repetition's result at once, outside the clock, and its value is what the Measurement keeps:
    the check of a large result happens there, so that the result need not stay alive while
    the other contenders run (they may share input buffers).
    """
    name: str
    fn: Callable[[Any, bool], Any]
    setup: Callable[[], Any] = no_setup
    sync: Optional[Callable[[], None]] = None
    meta: Optional[Callable[[Any], Any]] = None
    finish: Optional[Callable[[Any], Any]] = None


def alternate(contenders: list, repeat: int, *, warmup: int = 0,
              statistic: Callable[[list], float] = statistics.median) -> dict[str, Measurement]:
    """Time the contenders round-robin: ``warmup + repeat`` rounds, each running every
    contender once in list order (A, B, C, A, B, C, ...), so that slow drifts of the machine
    (clocks, temperature, other load) fall on all of them alike. The first ``warmup`` rounds
    are not timed.

    Returns name -> Measurement: seconds = statistic (median) of its ``repeat`` times, times,
    the meta of its median repetition, and result = finish(last result) (or the last result).
    A contender that raises (in setup, fn or finish) is dropped from the later rounds: its
    Measurement has seconds None and error "Type: message"; the others go on. At most one
    result is alive at a time: each repetition's result is dropped before the next setup.
    """
    names = [c.name for c in contenders]
    if len(set(names)) != len(names):
        raise ValueError(f"contender names must be distinct: {names}")
    times: dict[str, list] = {c.name: [] for c in contenders}
    metas: dict[str, list] = {c.name: [] for c in contenders}
    kept: dict[str, Any] = {}
    errors: dict[str, str] = {}
    total = warmup + repeat
    for i in range(total):
        last = i == total - 1
        for c in contenders:
            if c.name in errors:
                continue
            state = result = None
            try:
                state = c.setup()
                if c.sync is not None:
                    c.sync()
                t0 = time.perf_counter()
                result = c.fn(state, last)
                if c.sync is not None:
                    c.sync()
                t1 = time.perf_counter()
                state = None
                if i >= warmup:
                    times[c.name].append(t1 - t0)
                    if c.meta is not None:
                        metas[c.name].append(c.meta(result))
                if last:
                    kept[c.name] = c.finish(result) if c.finish is not None else result
            except Exception as exc:
                errors[c.name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            state = result = None
    out = {}
    for c in contenders:
        t, error = times[c.name], errors.get(c.name)
        meta = metas[c.name][_median_index(t)] if metas[c.name] and len(metas[c.name]) == len(
            t) else None
        out[c.name] = Measurement(None if error or not t else statistic(t), kept.get(c.name),
                                  t, meta, error)
    return out


def median_time(fn: Callable[[Any], Any], setup: Callable[[], Any], repeat: int,
                sync: Optional[Callable[[], None]] = cupy_sync) -> float:
    """Median seconds of fn(setup()) over `repeat` runs (setup untimed), the device synchronized
    around each (CuPy's by default)."""
    return measure(lambda state, last: fn(state), setup, repeat, sync=sync).seconds


def best_of(repeat: int, call: Callable[[], Any],
            sync: Optional[Callable[[], None]] = cupy_sync) -> float:
    """The probes' device clock: seconds of the fastest of `repeat` calls of call(), the host's
    clock around each with the device synchronized before and after (CuPy's by default)."""
    return measure(lambda state, last: call(), no_setup, repeat, sync=sync,
                   statistic=min).seconds


def seconds(call: Callable[[], Any], sync: Optional[Callable[[], None]] = None) -> float:
    """Seconds of one call of call(), sync() (if given) after it inside the clock."""
    started = time.perf_counter()
    call()
    if sync is not None:
        sync()
    return time.perf_counter() - started


def event_times(call: Callable[[], Any], repeat: int = 1, stream=None) -> list[float]:
    """Device seconds of each of `repeat` calls of call() by CUDA events recorded around it on
    `stream` (CuPy's current stream by default); the host waits for each end event."""
    cp = cupy()
    stream = stream or cp.cuda.get_current_stream()
    out = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        call()
        end.record(stream)
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return out


def copy_bandwidth(mib: int) -> float:
    """Device-to-device copy of `mib` MiB: (bytes read + bytes written) / time, best of 10 after
    one untimed copy (CUDA events), in bytes/s."""
    cp = cupy()
    nbytes = mib * 2 ** 20
    buffers = [cp.ones(nbytes, cp.uint8), cp.empty(nbytes, cp.uint8)]

    def copy():
        buffers[1].data.copy_from_device(buffers[0].data, nbytes)
    best = min(event_times(copy, 11)[1:])
    buffers.clear()
    cp.get_default_memory_pool().free_all_blocks()
    return 2 * nbytes / best
