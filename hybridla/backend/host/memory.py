"""Memory on the host: no device memory to allocate, count or cache (the working matrix is the
user's array or a NumPy array of the store's own)."""
from __future__ import annotations


def memory_check(nbytes: int, what: str):
    pass


def allocated_bytes() -> int:
    return 0


def cached_bytes() -> int:
    return 0


def free_cached():
    pass
