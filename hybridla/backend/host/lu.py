"""The LU family on the host: LAPACK getrf on panels and on the leaves of recursive panels,
tournament pivoting (the NumPy walk of cuda/tslu.cu's tree: backend/tournament.py), the panel's
info, and LAPACK laswp for the row interchanges."""
from __future__ import annotations

import numpy as np

from ..tournament import factor_panel, factor_panel_tournament
from . import nogil
from .store import HostMatrix


def getrf_panel(lane, A: HostMatrix, step, r0, c0, c1, r1=None):
    """LAPACK getrf on the panel A[r0:r1, c0:c1] in place (r1 None: to the last row); pivots
    global (the leaves of a recursive panel, windows: panel/lu.py)."""
    piv, info = factor_panel(A.host_panel(step, r0, c0, c1, r1))
    A.set_panel_result(step, c0, c1, piv + r0, info)


def getrf_leaf(lane, A: HostMatrix, step, r0, c0, c1, k0=None, k1=None, r1=None):
    """The leaf A[r0:r1, c0:c1] of the panel A[r0:r1, k0:k1] (k0, k1 default c0, c1; r1
    None: to the last row) by LAPACK getrf, its interchanges applied to the panel's other
    columns; pivots global, the info left to panel_info."""
    getrf_panel(lane, A, step, r0, c0, c1, r1)
    _interchange_other_columns(lane, A, c0, c1, k0, k1)


def tslu_panel(lane, A: HostMatrix, step, r0, c0, c1, k0=None, k1=None):
    """The leaf A[r0:, c0:c1] of the panel A[r0:, k0:k1] by tournament pivoting
    (backend/tournament.factor_panel_tournament, the tree of cuda/tslu.cu), its interchanges
    applied to the panel's other columns; pivots global, the info left to panel_info."""
    pivots = factor_panel_tournament(A.host_panel(step, r0, c0, c1))
    A.set_panel_result(step, c0, c1, pivots + r0, 0)
    _interchange_other_columns(lane, A, c0, c1, k0, k1)


def _interchange_other_columns(lane, A, c0, c1, k0, k1):
    """A leaf's interchanges (of pivots c0:c1) applied to the panel's columns k0:c0 and c1:k1."""
    laswp(lane, A, c0 if k0 is None else k0, c0, c0, c1)
    laswp(lane, A, c1, c1 if k1 is None else k1, c0, c1)


def panel_info(lane, A: HostMatrix, step, k0, k1):
    """The step's info := the first exactly zero U(i, i) of the panel (1-based), else 0."""
    zeros = np.flatnonzero(np.diagonal(A.a[k0:k1, k0:k1]) == 0)
    A.info[step] = zeros[0] + 1 if zeros.size else 0


def prepare_interchanges(lane, A: HostMatrix, step, k0, k1):
    """Nothing to prepare: LAPACK's laswp applies a step's interchanges well as they are."""


def laswp(lane, A: HostMatrix, c0, c1, k0, k1, forward=True, pivots_of=None):
    """Apply the row interchanges of pivots k0..k1-1 (of `pivots_of`, default A) to the
    columns c0:c1 of A (all rows), in order, or in reverse order when not forward."""
    if c1 <= c0 or k1 <= k0:
        return
    # full columns of an F-ordered array, or of a window's (backend/ops.window): each column
    # contiguous, swapped in place, without the GIL (nogil.py: the engine's other tasks run)
    nogil.laswp(A.a[:, c0:c1], (pivots_of or A).pivots, k0, k1, forward)
