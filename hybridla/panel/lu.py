"""The LU panel: LAPACK getrf on the CPU (scipy.linalg.lapack, routine chosen by dtype:
backend/tournament.factor_panel), recursive panels on any backend, tournament pivoting for their
leaves (backend/tournament.py), and pivoting within a window of block rows from the diagonal (for
randomized matrices: the mixed solvers' random butterfly)."""
from __future__ import annotations

# factor_panel (LAPACK getrf of a host panel) and tournament pivoting (the tree of cuda/tslu.cu,
# its NumPy walk) live in the backend (backend/tournament.py); the names below stay importable
# from here for the drivers and tune.py. The tree's knobs TOURNAMENT_CHUNK and TOURNAMENT_FAN
# are not: a probe that sweeps them sets them in backend/tournament.py, where tournament_tree
# reads them.
from ..backend.tournament import (  # noqa: F401
    TOURNAMENT_WIDTH, factor_panel, factor_panel_tournament, interchanges_bringing_to_top,
    tournament_tree)


def getrf_panel_cpu(A, step: int, r0: int, c0: int, c1: int, r1: int | None = None) -> None:
    """The CPU panel of step `step`: [A11; A21] = P [L11; L21] U11 for rows r0:r1 (r1 None: to
    the last) and columns c0:c1, on the host copy the tile store provides (the matrix itself on
    the host backend, a pinned buffer on the cuda backend). Pivots are recorded as global row
    indices."""
    piv, info = factor_panel(A.host_panel(step, r0, c0, c1, r1))
    A.set_panel_result(step, c0, c1, piv + r0, info)


def getrf_panel_recursive(ops, lane, A, step: int, k0: int, k1: int, leaf: int,
                          pivoting: str = "partial") -> None:
    """The panel A[k0:, k0:k1] factored by recursive halving (Toledo 1997; MAGMA's and cuSOLVER's
    fast panels), on one lane, where the matrix is:

        [A11 A12; A21 A22] with the left half k0:mid, the right half mid:k1
        P1 [A11; A21] = [L11; L21] U11          the left half, recursively
        A12 := L11^-1 A12                        U12
        A22 := A22 - L21 U12                     one tall GEMM: most of the panel's flops
        P2 A22 = L22 U22                         the right half, recursively

    Halves at most `leaf` wide are the leaves, and each leaf applies its interchanges to the
    whole panel k0:k1 at once (P1 to the right half, P2 to the left: the recursion needs no
    laswp of its own). A leaf is the backend's `ops.getrf_leaf` with partial pivoting (on a
    device: one thread-block cluster for a float leaf up to 16 wide, cuda/getrf_leaf_cluster.cu;
    else our fused kernel or cuSOLVER getrf, then laswp; LAPACK getrf on the host), or with
    `pivoting` "tournament" its tournament (`ops.tslu_panel`: cuda/tslu.cu, or
    factor_panel_tournament on the host), which needs no step across the whole height per
    column. A whole-panel cuSOLVER getrf spends most of its time in narrow, latency-bound
    steps; the recursion moves (w - leaf) / w of the panel's flops into GEMMs, at the update's
    precision (the tensor cores in a mixed solve). The leaves' infos are local to them, so the
    step's info is taken at the end from U's diagonal (`ops.panel_info`): the first exactly
    zero U(i, i), as LAPACK's getrf reports it."""
    factor_leaf = ops.getrf_leaf if pivoting == "partial" else ops.tslu_panel
    _recursive(ops, lane, A, k0, k1, leaf,
               lambda c0, c1: factor_leaf(lane, A, step, c0, c0, c1, k0, k1))
    ops.panel_info(lane, A, step, k0, k1)


def getrf_panel_window(ops, panel_ops, lane, A, step: int, k0: int, k1: int,
                       blocks: int, leaf: int = 0) -> None:
    """The panel A[k0:, k0:k1] with its pivots searched for in `blocks` block rows of its width
    from the diagonal only (r1 = k0 + blocks (k1 - k0)):

        A[k0:r1, k0:k1] = P [L11; L21'] U11     getrf on the window (`panel_ops`: float32)
        L21'' := A[r1:, k0:k1] U11^-1            one tall triangular solve (`ops`: the update's
                                                 precision, tensor-core GEMMs in a mixed solve)

    P A = L U with P acting within each step's window. Partial pivoting's step across the whole
    height, once per column, is what makes the panel the LU's critical path; here no column step
    reaches below the window. That is stable only for a matrix whose rows below the window are
    no better pivots than those in it: what a random butterfly transform makes of a nonsingular
    matrix with high probability (Parker 1995; Baboulin et al. 2013), so only the mixed solvers,
    which transform A first and refine against the true A, may ask for it. With the diagonal
    block alone as the window the randomized LU grew too much for a float32-accurate
    preconditioner (n = 4096, nb 512, perf/probes/growth_window.py: max |l_ij| 71-114, growth
    290-650, cond(L) 1.2e6-1.8e6 against partial pivoting's 1, 5-34 and 1e4); with two block
    rows, as partial pivoting's (1.8, 6-32, 1.2e4: perf/RESULTS.md, "A randomized LU with
    window pivoting").

    With a `leaf` narrower than the panel, the window is factored by recursive halving, and each
    leaf of width w searches its pivots within `blocks` w rows from its own diagonal (the rows
    of the window below those, by U_leaf^-1): the window LU with block size `leaf`. cuSOLVER's
    getrf is latency-bound on a narrow panel, its time per column smaller where the panel is
    shorter, so a window goes faster by leaves than whole (perf/RESULTS.md, "Windows factored
    by leaves, one GMRES correction", and "Measurements formerly in docstrings"), and the
    growth stays partial pivoting's (float64, n = 4096, windows of two blocks of 128: max
    |l_ij| 2.2-2.5, cond(L) 1.7e4-1.8e4). The info is the panel's first zero U(i, i) (a zero
    U(i, i) leaves the rows below it infinite or NaN: the solver's code -3, and its
    fallback)."""
    r1 = min(k0 + blocks * (k1 - k0), A.m)
    if leaf and k1 - k0 > leaf:
        def window_leaf(c0, c1):
            leaf_r1 = min(c0 + blocks * (c1 - c0), r1)
            panel_ops.getrf_leaf(lane, A, step, c0, c0, c1, k0, k1, r1=leaf_r1)
            panel_ops.trsm(lane, "R", "U", "N", "N", 1, A.block(c0, c1, c0, c1),
                           A.block(leaf_r1, r1, c0, c1))
        _recursive(panel_ops, lane, A, k0, k1, leaf, window_leaf, r1)
        panel_ops.panel_info(lane, A, step, k0, k1)
    else:
        panel_ops.getrf_panel(lane, A, step, k0, k0, k1, r1=r1)
    ops.trsm(lane, "R", "U", "N", "N", 1, A.block(k0, k1, k0, k1), A.block(r1, A.m, k0, k1))


def _recursive(ops, lane, A, c0, c1, leaf, factor_leaf, r1=None):
    """Columns c0:c1 halved down to leaves at most `leaf` wide, factor_leaf(c0, c1) on each,
    the right half updated on rows down to r1 (None: all) between them."""
    if c1 - c0 <= leaf:
        factor_leaf(c0, c1)
        return
    mid = _middle(c0, c1, leaf)
    _recursive(ops, lane, A, c0, mid, leaf, factor_leaf, r1)
    _update_right_half(ops, lane, A, c0, mid, c1, r1)
    _recursive(ops, lane, A, mid, c1, leaf, factor_leaf, r1)


def _middle(c0, c1, leaf):
    return c0 + max(leaf, ((c1 - c0) // 2) // 32 * 32)  # a multiple of 32 for aligned GEMMs


def _update_right_half(ops, lane, A, c0, mid, c1, r1=None):
    r1 = A.m if r1 is None else r1
    ops.trsm(lane, "L", "L", "N", "U", 1, A.block(c0, mid, c0, mid), A.block(c0, mid, mid, c1))
    ops.gemm(lane, -1, A.block(mid, r1, c0, mid), A.block(c0, mid, mid, c1), 1,
             A.block(mid, r1, mid, c1))
