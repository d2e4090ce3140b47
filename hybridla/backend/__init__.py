"""The hardware boundary. Algorithms see a `Backend` and the operations it offers on blocks;
where memory lives and how work is ordered on the device is decided here, not in the algorithms.

- ``host``: NumPy/SciPy in worker threads (always available; how CI tests the algorithms).
- ``cuda``: PyCUDA (context, memory, streams, events, our kernels) with cuBLAS/cuSOLVER through
  nvmath-python's low-level bindings (the ``cuda`` extra: ``pip install .[cuda]``).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import shutil
import threading
import warnings

from .._logging import get_logger

_NAMES = ("host", "cuda")
_log = get_logger("backend")

# What a machine with a GPU needs for the cuda backend (the warning below and `hybridla info`).
CUDA_INSTALL_HINT = ('python3 -m pip install "hybridla[cuda]" (PyCUDA and nvmath-python; PyCUDA '
                     'builds against the CUDA toolkit: nvcc and cuda.h, e.g. in /usr/local/cuda)')


@functools.cache
def _cuda_unavailable_reason() -> str | None:
    """Why the cuda backend cannot be used here, or None if it can."""
    try:
        import pycuda.driver as drv  # noqa: F401
        import nvmath.bindings.cublas  # noqa: F401
    except Exception as exc:  # ImportError, or a driver library that fails to load
        return f"PyCUDA / nvmath-python not importable ({exc.__class__.__name__}: {exc})"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA device"
    except Exception as exc:
        return f"CUDA driver: {exc}"
    return None


def gpu_present() -> str | None:
    """What says that this machine has an NVIDIA GPU ("/dev/nvidia0", the path of nvidia-smi),
    or None. Only a hint for the warning below: the cuda backend decides by itself."""
    if os.path.exists("/dev/nvidia0"):
        return "/dev/nvidia0"
    return shutil.which("nvidia-smi")


_warned_lock = threading.Lock()
_warned = False


def _warn_unusable_gpu(reason: str) -> None:
    """Once per process: a GPU is present, but the cuda backend cannot use it (PyCUDA or
    nvmath-python missing or failing), so "auto" runs on the CPU. Not when the GPUs are hidden
    on purpose (CUDA_VISIBLE_DEVICES empty or -1)."""
    global _warned
    if _warned or os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return
    where = gpu_present()
    if where is None:
        return
    with _warned_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(
        f"hybridla: this machine has a GPU ({where}) but the cuda backend cannot use it: "
        f"{reason}. Running on the CPU (host backend). For GPU support: {CUDA_INSTALL_HINT}; "
        f"`hybridla info` shows what is missing; backend='host' (or HYBRIDLA_BACKEND=host) "
        f"chooses the CPU without this warning.", RuntimeWarning, stacklevel=4)


def available_backends() -> list[str]:
    """Names of the backends usable on this machine, best last ("host" always)."""
    return ["host"] + (["cuda"] if _cuda_unavailable_reason() is None else [])


def check_name(name) -> None:
    if name not in (None, "auto") + _NAMES:
        raise ValueError(f"backend must be one of 'auto', 'host', 'cuda'; got backend={name!r}")


def resolve_name(name: str | None) -> str:
    """Turn "auto"/None into the best available backend; reject unknown or unavailable names."""
    check_name(name)
    if name in (None, "auto"):
        why = _cuda_unavailable_reason()
        if why is None:
            _log.debug("backend 'auto' -> 'cuda'")
            return "cuda"
        _log.debug("backend 'auto' -> 'host' (cuda: %s)", why)
        _warn_unusable_gpu(why)
        return "host"
    if name == "cuda" and (why := _cuda_unavailable_reason()):
        raise RuntimeError(f"backend='cuda' is not available: {why}")
    return name


def get_backend(name: str | None = "auto", ordinal: int | None = None):
    """The process-wide backend object of that name (created once: handles, compiled kernels);
    "auto" is the same object as the name it resolves to. The cuda backend is one per device:
    `ordinal`, else the device of the CUDA context current in this thread (a public call's,
    pushed by its backend's `call`; or the caller's own, such as CuPy's current device), else
    device 0."""
    name = resolve_name(name)
    key = name
    if name == "cuda":
        if ordinal is None:
            ordinal = _call_ordinal.get()
        ordinal = _current_ordinal() if ordinal is None else int(ordinal)
        key = "cuda" if ordinal == 0 else f"cuda:{ordinal}"
    with _made_lock:  # threads asking at once get one object, not one each
        if key not in _made:
            if name == "cuda":
                from .cuda import CudaBackend
                _made[key] = CudaBackend(ordinal)
            else:
                from .host import HostBackend
                _made[key] = HostBackend()
            _log.info("backend %r created (device %s)", key,
                      getattr(_made[key], "device_name", "?"))
        return _made[key]


# the device of the public call under way in this thread (`on_device`), which every
# get_backend("cuda") inside it means
_call_ordinal: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "hybridla_call_ordinal", default=None)


@contextlib.contextmanager
def on_device(ordinal: int):
    """get_backend("cuda") means device `ordinal`'s backend in this thread for the block (a
    public call on arrays of that device: hybridla._common.public)."""
    token = _call_ordinal.set(int(ordinal))
    try:
        yield
    finally:
        _call_ordinal.reset(token)


def _current_ordinal() -> int:
    """The ordinal of the device whose CUDA context is current in this thread, else 0."""
    try:
        from ._driver import current_device
    except OSError:  # no CUDA driver: a cuda backend here is a test's stand-in, device 0
        return 0
    ordinal = current_device()
    return 0 if ordinal is None else ordinal


_made: dict = {}
_made_lock = threading.Lock()
