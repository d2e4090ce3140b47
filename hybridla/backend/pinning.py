"""Pinning a host matrix in pieces, and cutting host copies where the pieces meet.

Copies from pinned memory are asynchronous DMA at full bandwidth, several times faster than from
pageable memory, but pinning and unpinning cost time in proportion to the bytes (perf/transfers.py;
perf/RESULTS.md, "Transfers (perf/transfers.py, H200, 2026-11-22)", and "Measurements formerly in
docstrings"). Pinning in pieces lets the first block columns upload while later pieces are still
being pinned. The driver refuses a copy that spans two pinned ranges, or a pinned and an unpinned
one (measured: "invalid argument"), so every host copy is cut at the pieces' boundaries.
Pure arithmetic on addresses: no CUDA here, so it is tested on any machine.
"""
from __future__ import annotations

PAGE = 4096


def plan_pieces(base: int, nbytes: int, m: int, n: int, nb: int, itemsize: int, pieces: int):
    """Cut the column-major m x n array at address `base` into page-aligned ranges starting near
    block-column boundaries. Returns (first block column of each piece, [(lo, hi) address ranges],
    cuts: the element offsets from `base` where each piece after the first begins)."""
    blocks = -(-n // nb)
    if base % itemsize:  # cuts would fall inside an element: pin in one piece
        pieces = 1
    candidates = sorted({round(j * blocks / pieces) for j in range(max(1, min(pieces, blocks)))})
    first_blocks, starts = [0], [base // PAGE * PAGE]
    for block in candidates[1:]:
        start = (base + block * nb * m * itemsize) // PAGE * PAGE
        if start > starts[-1]:  # pieces smaller than a page merge with the one before
            first_blocks.append(block)
            starts.append(start)
    ranges = list(zip(starts, starts[1:] + [-(-(base + nbytes) // PAGE) * PAGE]))
    cuts = [(lo - base) // itemsize for lo, _ in ranges[1:]]
    return first_blocks, ranges, cuts


def split_at_cuts(r0, r1, c0, c1, m, cuts):
    """Cut the copy of rows r0:r1 x columns c0:c1 of a column-major m-row array so that no piece
    crosses a cut (an element offset where another pinned range begins). Yields (r0, r1, c0, c1)
    rectangles that together cover the copy exactly once."""
    column = c0
    for cut in cuts:
        c, row = divmod(cut, m)
        if c < column or c >= c1:
            continue
        if c > column:
            yield r0, r1, column, c
        if row > r0:
            yield r0, min(r1, row), c, c + 1
        if row < r1:
            yield max(r0, row), r1, c, c + 1
        column = c + 1
    if column < c1:
        yield r0, r1, column, c1


def pieces_touched(block: int, first_blocks: list[int]) -> tuple[int, int]:
    """The pieces (first, last) that the bytes of block column `block` lie in: its own, and the
    next one too when it is its piece's last block (the next range starts on the page boundary
    just before the block's end)."""
    own = max(p for p, start in enumerate(first_blocks) if start <= block)
    reaches_next = own + 1 < len(first_blocks) and first_blocks[own + 1] == block + 1
    return own, own + 1 if reaches_next else own


class PinnedPieces:
    """An F-ordered m x n host array cut into page ranges that start at the columns `starts`
    (the first 0, increasing; each range begins at the page holding its first column's first
    element, so a page where two ranges meet belongs to the later one), to be pinned in place
    range by range, and its copies cut where the ranges meet (the driver refuses a copy that
    spans two pinned ranges, or a pinned and an unpinned one): out of core's host matrix,
    whose most-read wide columns are pinned (lapack/_ooc.py). `ranges`: the (lo, hi) addresses
    of each piece; `first_columns`: the column each starts at."""

    def __init__(self, array, starts):
        m, n = array.shape
        base, itemsize = array.ctypes.data, array.itemsize
        self.m = m
        self.first_columns, lows = [0], [base // PAGE * PAGE]
        for column in starts[1:]:
            low = (base + column * m * itemsize) // PAGE * PAGE
            if low > lows[-1]:  # pieces smaller than a page merge with the one before
                self.first_columns.append(column)
                lows.append(low)
        end = -(-(base + array.nbytes) // PAGE) * PAGE
        self.ranges = list(zip(lows, lows[1:] + [end]))
        # in elements from the array's first (the first range may begin before it)
        self.cuts = [(lo - base) // itemsize for lo in lows[1:]]

    def split(self, r0, r1, c0, c1):
        """The copy of rows r0:r1 x columns c0:c1 cut at the pieces' boundaries: yields
        (piece, (r0, r1, c0, c1)), each rectangle inside that one piece."""
        for rect in split_at_cuts(r0, r1, c0, c1, self.m, self.cuts):
            first = rect[0] + rect[2] * self.m  # its first element's offset
            yield sum(1 for cut in self.cuts if cut <= first), rect
