"""Host <-> store copies of the host-driven loops on store blocks (gehrd's panel, the condition
estimate, the mixed solvers). A CPU task that calls these leaves no device event behind
(scheduler/engine.py), so each one is complete when it returns: the device tasks after the CPU task
start on the data being there. Here the store is host memory: plain copies.

Also the host side of staging that both backends share: the copy into a slot that checks what
it copied (`copy_checked`), the finiteness test it uses (`all_finite`, the user layer's too),
and faulting in the pages of a new
result array ahead of the copies that fill it (`populate_for_writing`)."""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

# a copy that checks its destination does it in strips of this many bytes, each tested right
# after it is written, while it is still in the core's cache (a server core's L2: 1-2 MiB), so
# that the test reads cache instead of memory a second time
CHECK_STRIP_BYTES = 1 << 20

# madvise(2)'s advice that faults pages in for writing without changing their contents (Linux
# 5.14 and later; older kernels answer EINVAL)
_MADV_POPULATE_WRITE = 23


def to_host(lane, B, out=None) -> np.ndarray:
    """A new F-ordered host array holding the block B, complete on return (on a device
    backend: a copy down and a wait), or `out` (an F-ordered array of B's shape and dtype)
    filled and returned. `lane` is the calling CPU task's lane."""
    if out is None:
        return np.array(B, order="F", copy=True)
    out[...] = B
    return out


def from_host(lane, x, B):
    """The block B := the host array x (B's shape, B's dtype), complete on return (on a
    device backend: a copy up and a wait); x may be reused or freed afterwards."""
    B[...] = x


def all_finite(array) -> bool:
    """Whether no entry of `array` is NaN or infinite (numpy.asarray_chkfinite's test, the real
    and imaginary parts of a complex entry both), in a pass that allocates nothing: a sum with
    a NaN or an infinity among its terms is not finite, so a finite sum settles it, and only a
    sum that overflowed needs the test entry by entry. Arrays of other kinds (integers) are
    finite."""
    if array.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.sum(array))) or bool(np.isfinite(array).all())


def copy_checked(dst, src, check_finite: bool) -> bool:
    """dst[...] = src (2-D, one shape). With check_finite, also whether every entry of dst is
    finite (`all_finite`), each strip of columns tested right after it is copied; the copy
    stops at the first strip that is not (the caller raises: what dst holds then is of no
    use). Without, True."""
    if not check_finite:
        np.copyto(dst, src)
        return True
    width = max(1, CHECK_STRIP_BYTES // max(1, dst.shape[0] * dst.itemsize))
    for j in range(0, dst.shape[1], width):
        strip = dst[:, j:j + width]
        np.copyto(strip, src[:, j:j + width])
        if not all_finite(strip):
            return False
    return True


def populate_for_writing(array: np.ndarray) -> bool:
    """Fault in the memory pages under `array` for writing, without changing a byte of them
    (nor of the other objects that share its first and last page): madvise's
    MADV_POPULATE_WRITE. Its contents stay as they are, so this may run while other threads
    write the array. False where the system cannot (not Linux, a kernel before 5.14): the
    pages are then faulted in by whatever writes them first, as without this call."""
    if not sys.platform.startswith("linux") or array.nbytes == 0 or \
            not (array.flags.c_contiguous or array.flags.f_contiguous):
        return False
    page = os.sysconf("SC_PAGE_SIZE")
    first = array.ctypes.data
    last = first + array.nbytes
    start = first - first % page
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc.madvise(start, last - start, _MADV_POPULATE_WRITE) == 0
