"""Tournament pivoting (TSLU) as the backends run it: the tree cuda/tslu.cu walks (its constants,
shared by both backends), the NumPy walk of the same tree node for node (the host backend's
leaf, and the reference the kernel is tested against), and the LAPACK getrf of a host panel it
is built from (also the CPU panel of every LU, panel/lu.getrf_panel_cpu)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import get_blas_funcs, get_lapack_funcs

# The tournament's tree (cuda/tslu.cu, and factor_panel_tournament below, which follows it node
# for node): level 0 takes the panel's rows in chunks of TOURNAMENT_CHUNK (a thread block's
# threads, one row each), each node above the proposals of TOURNAMENT_FAN nodes below (so FAN
# times the widest leaf, TOURNAMENT_WIDTH, must fit in a chunk).
TOURNAMENT_CHUNK, TOURNAMENT_FAN, TOURNAMENT_WIDTH = 256, 8, 32


def tournament_tree() -> tuple[int, int]:
    """(chunk, fan) as they are now (perf/probes/probe_tslu.py --tree sweeps them), checked."""
    if TOURNAMENT_FAN < 2 or TOURNAMENT_FAN * TOURNAMENT_WIDTH > TOURNAMENT_CHUNK \
            or TOURNAMENT_CHUNK % 32:
        raise ValueError(f"tournament tree: chunk {TOURNAMENT_CHUNK} (a multiple of 32) must "
                         f"hold fan {TOURNAMENT_FAN} (>= 2) proposals of {TOURNAMENT_WIDTH}")
    return TOURNAMENT_CHUNK, TOURNAMENT_FAN


def factor_panel(panel: np.ndarray) -> tuple[np.ndarray, int]:
    """Factor ``panel = P L U`` in place with LAPACK getrf.

    Returns the panel-local 0-based pivots and LAPACK's info (the first zero U(i,i), 1-based within
    the panel; the factorization goes on past it, as LAPACK's does)."""
    getrf, = get_lapack_funcs(("getrf",), dtype=panel.dtype)
    lu, piv, info = getrf(panel, overwrite_a=int(panel.flags.f_contiguous))
    if not np.shares_memory(lu, panel):  # f2py copied a strided panel: put the result back
        panel[...] = lu
    return piv, int(info)


def factor_panel_tournament(panel: np.ndarray) -> np.ndarray:
    """Factor ``panel = P L U`` in place (m x w, m >= w) with its pivots chosen by a tournament
    (TSLU, the panel of CALU: Grigori, Demmel and Xiang 2011), as cuda/tslu.cu does on a device:

        level 0        getrf on each chunk of rows; each proposes the w rows it pivoted on
        level l + 1    getrf on the rows (as they are in the panel) that `fan` nodes proposed
        root           its pivot rows, in its order, are the panel's; its factors, L11 and U11
        then           the interchanges that bring them to the top (LAPACK's sequence),
                       A21 := A21 U11^-1 (a column whose U(k, k) is exactly zero left
                       unscaled, as getf2 leaves it)

    Partial pivoting when the panel is one chunk (LAPACK's getrf then). Returns the 0-based
    interchanges."""
    chunk, fan = tournament_tree()
    m, w = panel.shape
    if m <= chunk:
        return factor_panel(panel)[0]
    getrf, laswp = get_lapack_funcs(("getrf", "laswp"), dtype=panel.dtype)
    trsm, = get_blas_funcs(("trsm",), dtype=panel.dtype)
    proposals = [np.arange(first, min(first + chunk, m)) for first in range(0, m, chunk)]
    while True:
        chosen = []
        for rows in proposals:
            factors, interchanges, _ = getrf(panel[rows])
            order = np.arange(len(rows))
            for i, p in enumerate(interchanges):
                order[i], order[p] = order[p], order[i]
            chosen.append(rows[order[:w]])
        if len(proposals) == 1:
            break
        proposals = [np.concatenate(chosen[i:i + fan]) for i in range(0, len(chosen), fan)]
    interchanges = interchanges_bringing_to_top(chosen[0])
    swapped = laswp(panel, interchanges, k1=0, k2=w - 1, inc=1, overwrite_a=1)
    if not np.shares_memory(swapped, panel):
        panel[...] = swapped
    upper = np.triu(factors[:w])
    panel[:w] = factors[:w]
    if np.all(np.diagonal(upper) != 0):
        panel[w:] = trsm(1, upper, panel[w:], side=1, lower=0, trans_a=0, diag=0)
    else:
        for k in range(w):  # the columns one by one, as tslu.cu's finish solves them
            column = panel[w:, k] - panel[w:, :k] @ upper[:k, k]
            panel[w:, k] = column / upper[k, k] if upper[k, k] != 0 else column
    return interchanges


def interchanges_bringing_to_top(chosen) -> np.ndarray:
    """LAPACK's sequence of interchanges (0-based) that puts row chosen[j] at row j, j in order."""
    position, holder = {}, {}  # a moved row's position; a changed position's row
    interchanges = np.empty(len(chosen), np.int32)
    for j, row in enumerate(chosen):
        p = position.get(row, row)
        interchanges[j] = p
        displaced = holder.get(j, j)
        holder[j], holder[p] = row, displaced
        position[row], position[displaced] = j, p
    return interchanges
