"""A rectangle of a tile store, seen as a tile store of its own.

LAPACK's orghr and ormhr are orgqr and ormqr on a sub-block of the Hessenberg factors (and of Q
or C): the reflectors of gehrd stored from the first subdiagonal down are a QR factorization's
reflectors once seen from the row below the diagonal. `SubMatrix` lends the QR machinery that
view: blocks, workspaces and scratch are the parent store's, with the offsets added, and its
Householder scalars are a range of the parent's.
"""
from __future__ import annotations


class SubMatrix:
    """Rows r0:r0+m x columns c0:c0+n of the tile store `parent`; with `taus` = (t0, t1) its
    scalars are the parent's tau[t0:t1] (host copy `tau`, device operand `tau_block`)."""

    def __init__(self, parent, r0, c0, m, n, taus=None):
        if r0 < 0 or c0 < 0 or m < 0 or n < 0 or r0 + m > parent.m or c0 + n > parent.n:
            raise ValueError(f"rows {r0}:{r0 + m} x columns {c0}:{c0 + n} are not inside the "
                             f"{parent.m} x {parent.n} matrix")
        self.parent, self.r0, self.c0, self.m, self.n = parent, r0, c0, m, n
        self.dtype = parent.dtype
        self.t0 = 0 if taus is None else taus[0]
        self.tau = parent.tau[0:0] if taus is None else parent.tau[taus[0]:taus[1]]

    def block(self, r0, r1, c0, c1):
        return self.parent.block(self.r0 + r0, self.r0 + r1, self.c0 + c0, self.c0 + c1)

    def tau_block(self, t0, t1):
        return self.parent.tau_block(self.t0 + t0, self.t0 + t1)

    def workspace(self, name, rows, cols):
        return self.parent.workspace(name, rows, cols)

    def scratch(self, lane, rows, cols):
        return self.parent.scratch(lane, rows, cols)

    def read_block(self, r0, r1, c0, c1):
        return self.parent.read_block(self.r0 + r0, self.r0 + r1, self.c0 + c0, self.c0 + c1)
