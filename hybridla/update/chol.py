"""The Cholesky off-diagonal solve and trailing update of one step, against backend operations,
for the factor stored in either triangle.

lower, A = L L^H, step k with diagonal block rows/columns k0:k1:
    A21 := A21 L11^-H                        gemm with the inverse of L11
    for a block column c0:c1 to the right:  A[c0:c1, c0:c1] -= A[c0:c1, K] A[c0:c1, K]^H  (herk)
                                             A[c1:, c0:c1]  -= A[c1:, K] A[c0:c1, K]^H     (gemm)
upper, A = U^H U: the same with rows and columns exchanged:
    A12 := U11^-H A12;  A[c0:c1, c0:c1] -= A[K, c0:c1]^H A[K, c0:c1];
                        A[c0:c1, c1:]  -= A[K, c0:c1]^H A[K, c1:]
The bulk of a step's update is one task over the whole trailing triangle: its diagonal blocks of
nb in one batched call, the rest cut by recursive halving into gemms (see `_triangle_update`).

A tall store (lower, m > n) or a wide one (upper, m < n) is a Cholesky panel of order
min(m, n): its factor's block columns (rows) reach past the order to `extent(A, uplo)`, and
the solves and updates follow them there (out-of-core's wide columns: lapack/potrf_ooc.py).
`trapezoid_update` is the update on blocks wherever they are.
"""
from __future__ import annotations


def extent(A, uplo: str) -> int:
    """How far the factor's block columns (lower: rows, to A.m) or block rows (upper: columns,
    to A.n) reach: the order n for a square matrix."""
    return A.m if uplo == "L" else A.n


def solve_off_diagonal(ops, lane, A, uplo: str, k0: int, k1: int) -> None:
    """A21 := A21 L11^-H (lower) or A12 := U11^-H A12 (upper), as gemms with the inverse of the
    diagonal block, as MAGMA does: cuBLAS trsm on the tall block ran far below gemm's rate and
    was the longest task of the critical path; the kb x kb inverse (the backend's
    invert_triangular_blocks: on a device, recursive halving into gemms, faster than cuBLAS
    trsm on the identity) and gemms take a fraction of that (perf/RESULTS.md, "Measurements
    formerly in docstrings").

    The inverse W is triangular, so the product is cut into column blocks J of the solved block
    (rows, for upper), each a gemm over only the columns of W that are not zero in J: lower,
    X[:, J] = A21[:, :j1] W[J, :j1]^H. With blocks of kb / 4 that is 1.25 kb^2 flops per row
    where one gemm with all of W takes 2 kb^2 (a trsm's are kb^2); over the first half of an
    n = 32768 Cholesky with kb = 1024 that is 0.3 of 11 TFLOP of device work."""
    n, kb = extent(A, uplo), k1 - k0
    if k1 >= n:
        return
    inverse = A.workspace("diagonal inverse", kb, kb)
    ops.invert_triangular_blocks(lane, uplo, "N", A.block(k0, k1, k0, k1), kb, inverse,
                                 A.scratch(lane, kb, -(-kb // 4)))
    sub = ops.sub_block
    blocks = _solve_blocks(ops, kb)
    # gemm cannot write its own operand, unless the backend copies the operands before it
    # multiplies (backend/reduced.py: their rounding is a copy) and one gemm does it all
    in_place = ops.gemm_copies_operands and len(blocks) == 1
    if uplo == "L":
        solved_from = A.block(k1, n, k0, k1) if in_place else A.scratch(lane, n - k1, kb)
        if not in_place:
            ops.lacpy(lane, "A", A.block(k1, n, k0, k1), solved_from)
        for j0, j1 in blocks:
            ops.gemm(lane, 1, sub(solved_from, 0, n - k1, 0, j1), sub(inverse, j0, j1, 0, j1), 0,
                     A.block(k1, n, k0 + j0, k0 + j1), trans_b="C")
    else:  # X = W^H A12 with W = U11^-1 upper: X[J, :] = W[:j1, J]^H A12[:j1, :]
        solved_from = A.block(k0, k1, k1, n) if in_place else A.scratch(lane, kb, n - k1)
        if not in_place:
            ops.lacpy(lane, "A", A.block(k0, k1, k1, n), solved_from)
        for j0, j1 in blocks:
            ops.gemm(lane, 1, sub(inverse, 0, j1, j0, j1), sub(solved_from, 0, j1, 0, n - k1), 0,
                     A.block(k0 + j0, k0 + j1, k1, n), trans_a="C")


# the solve's column blocks: narrower ones save flops but run gemms of a lower rate
SOLVE_BLOCK = 256


def _solve_blocks(ops, kb):
    """(j0, j1) of the solve's column blocks. One block on a backend whose gemms run on the tensor
    cores (backend/reduced.py), where flops are cheap and each gemm rounds its operands again."""
    if ops.herk_is_gemm or kb <= SOLVE_BLOCK:
        return [(0, kb)]
    parts = kb // SOLVE_BLOCK
    edges = [kb * j // parts for j in range(parts + 1)]
    return list(zip(edges, edges[1:]))


def round_panel(ops, lane, A, uplo: str, k0: int, k1: int, slot) -> None:
    """The step's solved panel (L21 below the diagonal block k0:k1, or U12 beside it) rounded
    once, into `slot`, for all the herks of the step, on a backend whose herk is gemms on
    rounded operands (backend/reduced.py): the look-ahead column's and the rest's each rounded
    it (the rest's rows again) before."""
    n = extent(A, uplo)
    if uplo == "L":
        ops.round_herk_panel(lane, A.block(k1, n, k0, k1), "N", slot)
    else:
        ops.round_herk_panel(lane, A.block(k0, k1, k1, n), "C", slot)


def herk_update(ops, lane, A, uplo: str, k0: int, k1: int, c0: int, c1: int,
                rounded_slot=None) -> None:
    """Update the block column (lower) or row (upper) c0:c1 with the finished panel k0:k1: its
    triangle on the diagonal, then the rectangle beyond it in one gemm (`trapezoid_update`). A
    backend whose herk is a gemm on the square (backend/reduced.py: the tensor cores have no
    herk) takes the whole block column in one herk on the trapezoid, from the panel
    `round_panel` rounded into `rounded_slot` (or that it rounds itself, when None)."""
    n = extent(A, uplo)
    if ops.herk_is_gemm:
        rounded = None if rounded_slot is None else (rounded_slot, c0 - k1)
        if uplo == "L":
            ops.herk(lane, "L", "N", -1, A.block(c0, n, k0, k1), 1, A.block(c0, n, c0, c1),
                     rounded=rounded)
        else:
            ops.herk(lane, "U", "C", -1, A.block(k0, k1, c0, n), 1, A.block(c0, c1, c0, n),
                     rounded=rounded)
        return
    if uplo == "L":
        trapezoid_update(ops, lane, uplo, A.block(c0, n, k0, k1), A.block(c0, n, c0, c1),
                         A.nb, A.scratch)
    else:
        trapezoid_update(ops, lane, uplo, A.block(k0, k1, c0, n), A.block(c0, c1, c0, n),
                         A.nb, A.scratch)


def trapezoid_update(ops, lane, uplo: str, P, C, nb: int, scratch) -> None:
    """C := C - P P^H on the trapezoid C, blocks wherever they are. Lower: C is r x w, its
    w x w top its lower triangle, the rectangle below it whole; P (r x kb) the panel's rows
    that match C's. Upper: the transposes (C w x r, the upper triangle; P kb x r, C -= P^H P).
    The triangle first (`_triangle_update`), then the rectangle in one gemm. `scratch(lane,
    rows, cols)`: the store's scratch blocks."""
    rows, width = C.shape if uplo == "L" else C.shape[::-1]
    _triangle_update(ops, lane, uplo, P, C, width, nb, scratch)
    if width < rows:
        _rectangle_update(ops, lane, uplo, P, C, (width, rows), (0, width))


def staircase_update(ops, lane, P, C, starts, nb, scratch) -> None:
    """C := C - P P^H on a lower staircase: block column i of C (its columns i nb : i nb +
    nb, the last one maybe narrower) from row starts[i] down, its block there its diagonal
    block (lower triangle only). `starts` ascend by nb or more (a worker's block columns of
    a matrix dealt out by columns: lapack/potrf_dist.py); P's rows match C's.

    The rows below the diagonal blocks are cut by recursive halving into rectangles that
    span several block columns (`staircase_rectangles`); where the block columns are equally
    spaced (a cyclic layout's), a rectangle is one strided-batched gemm over its blocks
    (gemm_spaced_blocks: P's rows of each block's diagonal are the other operand), as the
    one-GPU update's halving keeps its flops in large gemms. In the distributed Cholesky at
    n = 65536 on 2 H100s the update lanes ran at 37.3 TFLOP/s with one gemm per block column
    of nb columns (31-35 in the middle steps) and 38.2-38.8 with the rectangles, busy 1.14-
    1.16 s instead of 1.19 s (perf/RESULTS.md, issue 32, stop 50). The diagonal blocks go in
    runs of equal spacing, one batched call a run (herk_diagonal_blocks' row_step): one
    trapezoid update per block column made seven launches a block (stop 44)."""
    rows, width = C.shape
    sub, kb = ops.sub_block, P.shape[1]
    blocks = [(i * nb, min(i * nb + nb, width), starts[i]) for i in range(-(-width // nb))]
    if not blocks:
        return
    tops = [top for c0, c1, top in blocks if c1 - c0 == nb]  # the full blocks'
    spacings = {b - a for a, b in zip(tops, tops[1:])}
    if len(spacings) <= 1:  # equally spaced: a rectangle's blocks in one batched call
        step = spacings.pop() if spacings else nb
        for i0, i1, r0, r1 in staircase_rectangles(tops, nb, rows):
            ops.gemm_spaced_blocks(lane, -1, sub(P, r0, r1, 0, kb),
                                   sub(P, tops[i0], tops[i1 - 1] + nb, 0, kb), 1,
                                   sub(C, r0, r1, i0 * nb, i1 * nb), nb, step)
        below_each = blocks[len(tops):]  # a narrower last block column
    else:
        below_each = blocks
    for c0, c1, top in below_each:
        below = top + c1 - c0
        if below < rows:
            ops.gemm(lane, -1, sub(P, below, rows, 0, kb), sub(P, top, below, 0, kb), 1,
                     sub(C, below, rows, c0, c1), trans_b="C")

    def diagonal_blocks(run):  # (c0, c1, top) of full blocks equally spaced, or one block
        (c0, _, top), (last_c0, c1, last_top) = run[0], run[-1]
        bottom = last_top + c1 - last_c0
        ops.herk_diagonal_blocks(lane, "L", "N", -1, sub(P, top, bottom, 0, kb),
                                 sub(C, top, bottom, c0, c1), nb, scratch(lane, nb, c1 - c0),
                                 row_step=run[1][2] - top if len(run) > 1 else None)

    run = [blocks[0]]
    for block in blocks[1:]:
        full = block[1] - block[0] == nb and run[-1][1] - run[-1][0] == nb
        if full and (len(run) < 2 or block[2] - run[-1][2] == run[1][2] - run[0][2]):
            run.append(block)
        else:
            diagonal_blocks(run)
            run = [block]
    diagonal_blocks(run)


def staircase_rectangles(tops, nb, rows) -> list:
    """The rows below a staircase's diagonal blocks (block i of nb columns: rows tops[i] +
    nb : rows; `tops` ascending) as rectangles (i0, i1, r0, r1), each rows r0:r1 of blocks
    i0:i1, covering every block's rows once, the largest first: the rows all blocks of a
    range need (below its last block's diagonal), then each half of the range the rows left
    above those, recursively (the triangle's halving of `_triangle_update`, its blocks spaced)."""
    found = []

    def halve(i0, i1, r1):  # blocks i0:i1 need rows tops[i] + nb : r1
        r0 = tops[i1 - 1] + nb
        if r0 < r1:
            found.append((i0, i1, r0, r1))
        if i1 - i0 > 1:
            mid = (i0 + i1) // 2
            halve(i0, mid, r0)
            halve(mid, i1, r0)

    if tops:
        halve(0, len(tops), rows)
    return sorted(found, key=lambda r: -(r[1] - r[0]) * (r[3] - r[2]))


def _triangle_update(ops, lane, uplo, P, C, width, nb, scratch):
    """The diagonal triangle of order `width`: its diagonal blocks of nb at once
    (`herk_diagonal_blocks`: one strided-batched gemm on a device), the rest by recursive
    halving into gemms (the square between two half triangles, then each half). BLAS herk/syrk
    runs far below gemm's rate on a GPU (a whole trailing triangle in one cuBLAS dsyrk:
    perf/RESULTS.md, "Measurements formerly in docstrings"), while the halving keeps almost
    all flops in large gemms."""
    _below_diagonal_blocks(ops, lane, uplo, P, C, 0, width, nb)
    sub, kb = ops.sub_block, _panel_width(uplo, P)
    panel = sub(P, 0, width, 0, kb) if uplo == "L" else sub(P, 0, kb, 0, width)
    ops.herk_diagonal_blocks(lane, uplo, "N" if uplo == "L" else "C", -1, panel,
                             sub(C, 0, width, 0, width), nb, scratch(lane, nb, width))


def _below_diagonal_blocks(ops, lane, uplo, P, C, c0, c1, nb):
    """The triangle c0:c1 less its diagonal blocks of nb, by recursive halving at multiples of
    nb past c0 (so that the blocks left out are those `herk_diagonal_blocks` updates). The
    largest gemm is enqueued first: while the host enqueues the many small ones after it
    (slowly, when other threads hold the GIL: with the small gemms first, step 0's update took
    much longer than step 1's; perf/RESULTS.md, "potrf, geqrf, geqlf, gelqf (issue 3)"), the
    device already has most of the flops to work on."""
    if c1 - c0 <= nb:
        return
    mid = c0 + -(-(c1 - c0) // (2 * nb)) * nb  # a multiple of nb past c0, near the middle
    _rectangle_update(ops, lane, uplo, P, C, (mid, c1), (c0, mid))
    _below_diagonal_blocks(ops, lane, uplo, P, C, c0, mid, nb)
    _below_diagonal_blocks(ops, lane, uplo, P, C, mid, c1, nb)


def _rectangle_update(ops, lane, uplo, P, C, rows, cols):
    """The off-diagonal rectangle rows x cols of the trapezoid (lower: rows below cols; upper:
    its transpose) in one gemm: C[rows, cols] -= P[rows] P[cols]^H, or for upper
    C[cols, rows] -= P[:, cols]^H P[:, rows]."""
    (r0, r1), (c0, c1) = rows, cols
    sub, kb = ops.sub_block, _panel_width(uplo, P)
    if uplo == "L":
        ops.gemm(lane, -1, sub(P, r0, r1, 0, kb), sub(P, c0, c1, 0, kb), 1,
                 sub(C, r0, r1, c0, c1), trans_b="C")
    else:
        ops.gemm(lane, -1, sub(P, 0, kb, c0, c1), sub(P, 0, kb, r0, r1), 1,
                 sub(C, c0, c1, r0, r1), trans_a="C")


def _panel_width(uplo, P):
    return P.shape[1] if uplo == "L" else P.shape[0]


def finished_region(uplo: str, n: int, k0: int, k1: int):
    """(r0, r1, c0, c1) of the factor that step k0:k1 finishes: its block column (lower) or row."""
    return (k0, n, k0, k1) if uplo == "L" else (k0, k1, k0, n)


def update_region(uplo: str, n: int, k0: int, c0: int, c1: int):
    """(r0, r1, c0, c1) that `herk_update` of c0:c1 writes (the triangle, as a rectangle)."""
    return (c0, n, c0, c1) if uplo == "L" else (c0, c1, c0, n)


def herk_flops(n: int, k0: int, k1: int, c0: int, c1: int) -> float:
    """Real flops of `herk_update`: the triangle of the diagonal block and the gemm below it."""
    kb, width = k1 - k0, c1 - c0
    return float(width * (width + 1) * kb + 2 * (n - c1) * width * kb)
