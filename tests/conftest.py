"""Shared fixtures: the backend every test body runs on, device-array kinds, a seeded RNG.

One test body runs on every backend present: tests take the ``backend`` fixture and pass its
value as ``backend=...``. Its "cuda" parameter carries the ``cuda`` marker (``pytest -m cuda`` on
the GPU machine selects exactly the GPU runs) and skips where the cuda backend is unavailable.
"""
from __future__ import annotations

import functools
import os
import sys
import zlib

import numpy as np
import pytest

# The helper module next to this file (tests/_lapack_checks.py) must import whatever pytest's
# import mode; with the default "prepend" mode this is already so.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cuda: needs the cuda backend (a GPU, PyCUDA and nvmath-python); select with -m cuda")


@functools.cache
def cuda_available() -> bool:
    """True where hybridla's cuda backend can run (imported lazily: a broken package must not
    break the collection of unrelated test files)."""
    import hybridla.backend
    return "cuda" in hybridla.backend.available_backends()


def _skip_without_cuda():
    if not cuda_available():
        pytest.skip("the cuda backend is not available here "
                    "(hybridla.backend.available_backends() has no 'cuda')")


@pytest.fixture(scope="session",
                params=["host", pytest.param("cuda", marks=pytest.mark.cuda)])
def backend(request):
    """The backend name, "host" or "cuda"; pass it on as ``backend=...``."""
    if request.param == "cuda":
        _skip_without_cuda()
    return request.param


@pytest.fixture(scope="session")
def cuda_backend():
    """ "cuda", for tests that only mean something on the GPU (mark them ``cuda`` as well)."""
    _skip_without_cuda()
    return "cuda"


@pytest.fixture(scope="session",
                params=[pytest.param(k, marks=pytest.mark.cuda)
                        for k in ("cupy", "torch", "pycuda")])
def device_kind(request):
    """A kind of device array for the GPU interface: "cupy", "torch" or "pycuda"."""
    _skip_without_cuda()
    if request.param == "pycuda":
        pytest.importorskip("pycuda.gpuarray")
        import pycuda.autoprimaryctx  # noqa: F401  (the primary context, never autoinit)
    else:
        mod = pytest.importorskip(request.param)
        if request.param == "torch" and not mod.cuda.is_available():
            pytest.skip("torch has no CUDA here")
    return request.param


@pytest.fixture
def rng(request):
    """A NumPy Generator seeded from the test's name and parameters: reproducible, different
    between tests, and the same on every backend (so a matrix checked on the host, e.g. for its
    condition number, is the very matrix the GPU run gets)."""
    callspec = getattr(request.node, "callspec", None)
    params = {} if callspec is None else callspec.params
    key = request.node.originalname + repr(sorted(
        (name, repr(value)) for name, value in params.items()
        if name not in ("backend", "device_kind")))
    return np.random.default_rng(zlib.crc32(key.encode()))
