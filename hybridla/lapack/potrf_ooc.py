"""potrf_ooc: Cholesky, A = L L^H (lower) or U^H U (upper), of a host matrix larger than the
memory budget: left-looking over wide block columns (rows, for upper; MAGMA's
magma_dpotrf_m), each factored in-core by potrf's engine as a tall (wide) panel. The skeleton
(the working store, the copies, the windows) is _ooc.WideColumns'.

Lower shown (upper: the same on rows, A^H's columns). For each wide column J = columns j0:j1
(W wide, as the budget allows), in one of two buffers:

    A[j0:, J] comes up: its triangle and what is below (the other triangle is not read)   pass 1
    for each block column K = k0:k1 left of j0 (nb wide), its rows j0: streamed up (pass 2),
    except the previous wide column's, which are still in the other buffer:
        A[J, J] := A[J, J] - L[J, K] L[J, K]^H            the triangle: herk on its diagonal
                                                          blocks, gemms between them
        A[j1:, J] := A[j1:, J] - L[j1:, K] L[J, K]^H      gemm
    A[j0:, J] = [L_JJ; L_(j1:),J] L_JJ^H     potrf's engine on the buffer's rows j0:n: the
                                             diagonal block factored, the rows below solved
    L[j0:, J] goes home                                                                    pass 3

The passes over the host matrix, and what they move (s bytes an element, c = n / W):
    1  the lower triangle and the diagonal blocks up once: about (n^2 / 2 + n W / 2) s
    2  for wide column J, rows j0: of the columns left of the previous wide column:
       sum_J (n - j0) p0 s, p0 the previous wide column's first column: about
       n^3 s / (6 W) (a third of LU's; n^3 / 3 flops)
    3  the same as 1, down once
Each is a graph task on a copy lane (staged through pinned slots on a device) that overlaps the
compute: the next wide column comes up and the last goes home while one is factored, the block
columns stream through two slots (MAGMA's potrf_m overlaps none of its copies).

Only the `uplo` triangle is written (the diagonal blocks' other triangle goes home as it came).
info as LAPACK's: the order of the first leading minor that is not positive definite.
"""
from __future__ import annotations

import functools

from ..scheduler import Region
from ..update import chol as chol_update
from ._ooc import WideColumns
from .potrf import record_potrf


def potrf_ooc(source, result, plan, uplo="L", trace=None):
    """Factor the Hermitian host matrix `source` into `result` (F-ordered, the same array
    with overwrite_a; its other triangle as it should stay) out of core, within
    plan.memory_budget. Returns (info, trace) as potrf's."""
    with WideColumns(source, result, plan, "potrf", uplo) as wide:
        n = wide.M
        for J in wide:
            wide.bring_up(J, J.c0, n)
            for P in wide.finished(J):
                for K in wide.panels(J, P, rows=lambda k0, k1: (J.c0, n)):
                    # A[j0:, J] := A[j0:, J] - L[j0:, K] L[J, K]^H
                    wide.task("left_update", J, "gpu:update",
                              functools.partial(_update, wide.ops, A=wide.A, uplo=uplo,
                                                panel=K.rect, target=wide.buffer(J, J.c0, n)),
                              reads=[K.region], writes=[Region("A", *wide.buffer(J, J.c0, n))],
                              flops=chol_update.herk_flops(n, K.k0, K.k1, J.c0, J.c1))
            # A[j0:, J] = L[j0:, J] L_JJ^H
            wide.factor(J, record_potrf, uplo)
            wide.send_home(J, J.c0, n)
        trace = wide.run(trace)
        info = wide.first_failure(lambda store: store.finish()[1])
    return info, trace


def _update(ops, lane, A, uplo, panel, target):
    chol_update.trapezoid_update(ops, lane, uplo, A.block(*panel), A.block(*target), A.nb,
                                 A.scratch)
