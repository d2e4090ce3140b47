"""Probe: can a worker register a page of host memory shared between processes (a file in
/dev/shm, mapped) for its GPU, as scheduler/transport_nccl._Gates does for the broadcast
gates' flags? On the 2 x H100 machine at stop 59 _Gates.made gave None on both workers (the
GPU test of two GPUs, with distributed.nccl_gate on), and the cause is not known: this
prints what each step gives.

    python3 perf/probes/probe_gate_page.py

For the page in /dev/shm, an anonymous shared mapping and a page of NumPy's: the mapping's
address, then cuMemHostRegister with the flags PORTABLE | DEVICEMAP (3, what _Gates asks),
DEVICEMAP (2), PORTABLE (1) and none (0), each followed by cuMemHostGetDevicePointer and
unregistered again; the driver's error name where one fails.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import uuid

import numpy as np

from hybridla.backend import _driver, get_backend


def _name(status):
    name = ctypes.c_char_p()
    _driver._cuda.cuGetErrorName(status, ctypes.byref(name))
    return name.value.decode() if name.value else str(status)


def _try(label, address):
    print(f"{label}: address {address:#x}, page-aligned {address % mmap.PAGESIZE == 0}")
    for flags in (3, 2, 1, 0):
        status = _driver._cuda.cuMemHostRegister_v2(ctypes.c_void_p(address),
                                                    ctypes.c_size_t(mmap.PAGESIZE),
                                                    ctypes.c_uint(flags))
        line = f"  register flags {flags}: {_name(status)}"
        if status == 0:
            device = ctypes.c_uint64()
            got = _driver._versioned("cuMemHostGetDevicePointer")(
                ctypes.byref(device), ctypes.c_void_p(address), ctypes.c_uint(0))
            line += f"; device pointer {_name(got)} {device.value:#x}"
            _driver._cuda.cuMemHostUnregister(ctypes.c_void_p(address))
        print(line, flush=True)


def main():
    ops = get_backend("cuda")
    with ops.active():
        path = os.path.join("/dev/shm", f"hybridla-probe-{uuid.uuid4().hex}")
        try:
            with open(path, "wb") as page:
                page.truncate(mmap.PAGESIZE)
            with open(path, "r+b") as page:
                shared = mmap.mmap(page.fileno(), mmap.PAGESIZE)
            words = np.frombuffer(shared, np.uint32)
            _try(f"{path}", words.ctypes.data)
            del words
            shared.close()
        except OSError as exc:
            print(f"{path}: {exc}")
        finally:
            if os.path.exists(path):
                os.unlink(path)
        anonymous = mmap.mmap(-1, mmap.PAGESIZE)
        words = np.frombuffer(anonymous, np.uint32)
        _try("anonymous shared mapping", words.ctypes.data)
        del words
        anonymous.close()
        own = np.zeros(2 * mmap.PAGESIZE, np.uint8)
        start = -own.ctypes.data % mmap.PAGESIZE
        _try("NumPy's memory", own[start:].ctypes.data)


if __name__ == "__main__":
    main()
