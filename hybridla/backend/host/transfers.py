"""Host <-> store copies of the host-driven loops on store blocks (gehrd's panel, the condition
estimate, the mixed solvers). A CPU task that calls these leaves no device event behind
(scheduler/engine.py), so each one is complete when it returns: the device tasks after the CPU task
start on the data being there. Here the store is host memory: plain copies."""
from __future__ import annotations

import numpy as np


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
