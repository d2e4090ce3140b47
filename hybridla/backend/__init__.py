"""The hardware boundary. Algorithms see a `Backend` and the operations it offers on blocks;
where memory lives and how work is ordered on the device is decided here, not in the algorithms.

- ``host``: NumPy/SciPy in worker threads (always available; how CI tests the algorithms).
- ``cuda``: PyCUDA (context, memory, streams, events, our kernels) with cuBLAS/cuSOLVER through
  nvmath-python's low-level bindings (the ``cuda`` extra: ``pip install .[cuda]``).
"""
from __future__ import annotations

import functools
import threading

_NAMES = ("host", "cuda")


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
        return available_backends()[-1]
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
        return _made[name]


_made: dict = {}
_made_lock = threading.Lock()
