"""The hardware boundary. Algorithms see a `Backend` and the operations it offers on blocks;
where memory lives and how work is ordered on the device is decided here, not in the algorithms.

- ``host``: NumPy/SciPy in worker threads (always available; how CI tests the algorithms).
- ``cuda``: PyCUDA (context, memory, streams, events, our kernels) with cuBLAS/cuSOLVER through
  nvmath-python's low-level bindings (the ``cuda`` extra: ``pip install .[cuda]``).
"""
from __future__ import annotations

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


def get_backend(name: str | None = "auto"):
    """The process-wide backend object of that name (created once: handles, compiled kernels);
    "auto" is the same object as the name it resolves to."""
    name = resolve_name(name)
    with _made_lock:  # threads asking at once get one object, not one each
        if name not in _made:
            if name == "cuda":
                from .cuda import CudaBackend
                _made[name] = CudaBackend()
            else:
                from .host import HostBackend
                _made[name] = HostBackend()
            _log.info("backend %r created (device %s)", name,
                      getattr(_made[name], "device_name", "?"))
        return _made[name]


_made: dict = {}
_made_lock = threading.Lock()
