"""What QR, QL and LQ share: one blocked Householder algorithm in three orientations.

QL is the QR factorization of the reversed matrix J A J, and LQ that of A^H (panel/qr.py proves
both). So geqrf's blocked algorithm, written in the coordinates of that QR problem (the
"canonical" coordinates), is all three, and so is ormqr's loop: a `Form` maps canonical
rectangles onto the matrix and names what differs in the operations (the reflectors' storage,
the order of T, the side the block reflectors act from).

In canonical coordinates, step s (reflectors k0:k1) has the panel rows k0:m, columns k0:k1, and
its block reflector G_s = I - V T V^H acts on rows k0:m; the product of all of them in step order
is P = G_0 G_1 ... G_{S-1}. Then Q = P (QR, QL) or Q = P^H (LQ).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..scheduler import Region
from ..update.qr import apply_block_reflector, larft_flops


@dataclass(frozen=True)
class Form:
    storage: str      # "QR", "QL", "LQ": LAPACK's storage of the reflectors in the factors
    reverse: bool     # canonical = J A J (rows and columns reversed)
    transpose: bool   # canonical = A^H
    direction: str    # T's order: "forward", G = H(k0) ... H(k1-1), or "backward", the reverse

    def shape(self, m, n):
        """The canonical shape of an m x n matrix."""
        return (n, m) if self.transpose else (m, n)

    def span(self, size, i0, i1):
        """Canonical indices i0:i1 along an axis of `size`, on the matrix."""
        return (size - i1, size - i0) if self.reverse else (i0, i1)

    def rect(self, m, n, r0, r1, c0, c1):
        """The canonical rectangle rows r0:r1 x columns c0:c1 of an m x n matrix, on the matrix,
        as (r0, r1, c0, c1)."""
        rows, cols = self.shape(m, n)
        (r0, r1), (c0, c1) = self.span(rows, r0, r1), self.span(cols, c0, c1)
        return (c0, c1, r0, r1) if self.transpose else (r0, r1, c0, c1)

    def taus(self, k, t0, t1):
        """Canonical reflectors t0:t1 of k, as indices into tau."""
        return self.span(k, t0, t1)

    def on_p(self, trans):
        """op(Q) as op(P), P = G_0 G_1 ... G_{S-1}: the same, but flipped for LQ (Q = P^H)."""
        return {"N": "C", "C": "N"}[trans] if self.transpose else trans

    def trailing_update(self):
        """(side, trans) of a step's trailing update on the matrix: G^H from the left on the
        canonical columns, which for LQ (A^H's columns are A's rows) is A's rows times G from
        the right, as (G^H A^H)^H = A G."""
        return ("R" if self.transpose else "L"), self.on_p("C")


QR = Form("QR", reverse=False, transpose=False, direction="forward")
QL = Form("QL", reverse=True, transpose=False, direction="backward")
LQ = Form("LQ", reverse=False, transpose=True, direction="forward")


def reserve_reflector_slots(F, count, rows, nb):
    """Allocate the `count` workspace slots for V (rows x nb) and T (nb x nb) now, at their
    largest, before the run; steps take them round robin (slot = step % count)."""
    for slot in range(count):
        F.workspace(f"V{slot}", rows, nb)
        F.workspace(f"T{slot}", nb, nb)


def record_reflectors(graph, ops, F, resource, form, step, slot, panel, rows, kb, taus,
                      tau_of=None):
    """Task: V := the explicit reflectors of the factored `panel` (a rectangle of F, the graph's
    `resource`), T := larft(V, tau[taus]), into workspace slot `slot`. Returns (V, T, regions
    of the slot) for the updates that read them. Reusing the slot waits for the readers of its
    previous step (the graph's write-after-read). `tau_of`: the store whose tau they are,
    where F holds the panel but not its scalars (out-of-core's finished panels, whose tau
    belong to the wide column that made them: lapack/geqrf_ooc.py); default F."""
    tau_of = F if tau_of is None else tau_of
    V, T = F.workspace(f"V{slot}", rows, kb), F.workspace(f"T{slot}", kb, kb)
    slot_regions = [Region(f"V{slot}", 0, 1), Region(f"T{slot}", 0, 1)]

    def form_reflectors(lane):
        ops.explicit_reflectors(lane, F.block(*panel), V, form.storage)
        ops.triangular_factor(lane, V, tau_of.tau_block(*taus), T, form.direction,
                              work=F.scratch(lane, kb, kb))

    graph.add("larft", step, "gpu:panel", form_reflectors,
              reads=[Region(resource, *panel), Region("tau", *taus)], writes=slot_regions,
              flops=larft_flops(rows, kb))
    return V, T, slot_regions


def record_block_update(graph, ops, F, reflectors, side, trans, direction, C, resource, rect,
                        lane, step, flops, **order):
    """Task: the rectangle `rect` of C (the graph's `resource`) := op(G) C or C op(G), G the block
    reflector (V, T, slot regions) that `record_reflectors` made from F. `order`: the graph's
    ordering arguments (follows=)."""
    V, T, slot_regions = reflectors
    return graph.add(
        "update", step, lane,
        functools.partial(_apply, ops=ops, F=F, side=side, trans=trans, V=V, T=T,
                          C=C.block(*rect), direction=direction),
        reads=slot_regions, writes=[Region(resource, *rect)], flops=flops, **order)


def _apply(lane, ops, F, side, trans, V, T, C, direction):
    apply_block_reflector(ops, lane, F, side, trans, V, T, C, direction)


def copy_triangle(ops, F, form, dst):
    """dst := the triangular factor in the factored m x n matrix of the tile store F (R for QR,
    L for QL and LQ), zeros elsewhere. dst is m x n (scipy's "full" shape) or the economic
    k x n (QR, QL) or m x k (LQ), k = min(m, n). In canonical coordinates both hold R's k rows
    at the top: its k x k triangle, then the rectangle beside it, copied whole."""
    m, n = F.m, F.n
    k, cols = min(m, n), form.shape(m, n)[1]
    triangle = "L" if form.reverse != form.transpose else "U"  # J U J and U^H are lower
    lane = ops.lane("gpu:update")
    with lane:
        ops.laset(lane, "A", 0, 0, dst.block(0, dst.m, 0, dst.n))
        for part, c0, c1 in ((triangle, 0, k), ("A", k, cols)):
            ops.lacpy(lane, part, F.block(*form.rect(m, n, 0, k, c0, c1)),
                      dst.block(*form.rect(dst.m, dst.n, 0, k, c0, c1)))
