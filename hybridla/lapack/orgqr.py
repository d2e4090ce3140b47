"""orgqr, orgql, orglq: the explicit Q of geqrf, geqlf or gelqf, or the part of it that the
factorization's shape calls for (ungqr, ungql, unglq for complex dtypes):

    QR:  Q[:, :c]    = Q I[:, :c]       Q's first c columns (c = m: all of Q)
    QL:  Q[:, m-c:]  = Q I[:, m-c:]     Q's last c columns
    LQ:  Q[:c, :]    = I[:c, :] Q       Q's first c rows

i.e. ormqr, ormql or ormlq applied to a slice of the identity. LAPACK's orgqr does better: it
builds Q in place of the factors, applying the block reflectors last to first, each only to the
columns it changes (those right of its own), which saves the flops spent here on the identity's
zeros (about a third for a square Q) and the separate array.
"""
from __future__ import annotations

import functools

from ..scheduler import Region, TaskGraph
from ._blocked import run_graph
from ._householder import LQ, QL, QR
from .ormqr import record_apply_q


def orgqr(F, Q, plan, trace=None):
    """Overwrite the tile store Q (m x c) with the first c columns of geqrf's Q (factors F)."""
    return form_q(F, Q, plan, QR, trace)


def orgql(F, Q, plan, trace=None):
    """Overwrite the tile store Q (m x c) with the last c columns of geqlf's Q (factors F)."""
    return form_q(F, Q, plan, QL, trace)


def orglq(F, Q, plan, trace=None):
    """Overwrite the tile store Q (c x n) with the first c rows of gelqf's Q (factors F)."""
    return form_q(F, Q, plan, LQ, trace)


def form_q(F, Q, plan, form, trace=None):
    """Q := the slice of the identity that `form` calls for, then op(Q) applied to it (from the
    left for QR and QL, from the right for LQ). Returns the run's trace."""
    ops = plan.backend
    graph = TaskGraph()
    c = min(Q.m, Q.n)
    graph.add("identity", -1, "gpu:update",
              functools.partial(_identity, ops=ops, Q=Q, square=form.rect(Q.m, Q.n, 0, c, 0, c)),
              writes=[Region("C", 0, Q.m, 0, Q.n)])
    record_apply_q(graph, F, Q, plan, form, "R" if form.transpose else "L", "N")
    return run_graph(graph, plan, f"org{form.storage.lower()}", trace)


def _identity(lane, ops, Q, square):
    """Zeros, with the unit diagonal in the canonical top-left square (`square` on the matrix)."""
    ops.laset(lane, "A", 0, 0, Q.block(0, Q.m, 0, Q.n))
    ops.laset(lane, "A", 0, 1, Q.block(*square))
