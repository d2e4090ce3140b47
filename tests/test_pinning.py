"""The arithmetic of pinning a host matrix in pieces (hybridla/backend/pinning.py): every host
copy must stay inside one pinned range, and the pieces of a copy must cover it exactly once."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybridla.backend.pinning import (PAGE, PinnedPieces, pieces_touched, plan_pieces,
                                      split_at_cuts)


def range_of(offset_bytes, ranges, base):
    address = base + offset_bytes
    hits = [i for i, (lo, hi) in enumerate(ranges) if lo <= address < hi]
    assert len(hits) == 1, "every byte of the matrix is in exactly one pinned range"
    return hits[0]


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 60), nb=st.integers(1, 16),
       itemsize=st.sampled_from([4, 8, 16]), pieces=st.integers(1, 9),
       base_offset=st.sampled_from([0, 16, 64, 4080]), data=st.data())
def test_copies_never_cross_a_pinned_range(m, n, nb, itemsize, pieces, base_offset, data):
    base = 1 << 30 | base_offset
    nbytes = m * n * itemsize
    first_blocks, ranges, cuts = plan_pieces(base, nbytes, m, n, nb, itemsize, pieces)
    assert first_blocks[0] == 0 and len(ranges) == len(first_blocks) == len(cuts) + 1
    assert all(lo % PAGE == 0 and hi % PAGE == 0 and lo < hi for lo, hi in ranges)
    r0 = data.draw(st.integers(0, m - 1))
    r1 = data.draw(st.integers(r0 + 1, m))
    c0 = data.draw(st.integers(0, n - 1))
    c1 = data.draw(st.integers(c0 + 1, n))
    covered = np.zeros((m, n), dtype=int)
    for pr0, pr1, pc0, pc1 in split_at_cuts(r0, r1, c0, c1, m, cuts):
        assert r0 <= pr0 < pr1 <= r1 and c0 <= pc0 < pc1 <= c1
        covered[pr0:pr1, pc0:pc1] += 1
        # a 2-D copy touches, per column, the bytes of rows pr0:pr1; all in one range
        owners = {range_of((c * m + r) * itemsize + b, ranges, base)
                  for c in (pc0, pc1 - 1) for r in (pr0, pr1 - 1) for b in (0, itemsize - 1)}
        owners |= {range_of((c * m + pr0) * itemsize, ranges, base) for c in range(pc0, pc1)}
        assert len(owners) == 1, "a copy piece spans two pinned ranges"
    expected = np.zeros((m, n), dtype=int)
    expected[r0:r1, c0:c1] = 1
    assert (covered == expected).all(), "the pieces cover the copy exactly once"


@pytest.mark.parametrize("m,nb,pieces", [(1000, 64, 8), (512, 32, 4), (333, 7, 5)])
def test_an_upload_depends_on_every_piece_its_bytes_touch(m, nb, pieces):
    n, itemsize, base = 40 * nb + 3, 8, (1 << 30) + 16
    first_blocks, ranges, _ = plan_pieces(base, m * n * itemsize, m, n, nb, itemsize, pieces)
    for block in range(-(-n // nb)):
        c0, c1 = block * nb, min(block * nb + nb, n)
        touched = {range_of(offset, ranges, base)
                   for offset in (c0 * m * itemsize, c1 * m * itemsize - 1)}
        first, last = pieces_touched(block, first_blocks)
        assert touched <= set(range(first, last + 1))


def test_pinned_pieces_never_overlap_and_their_splits_stay_inside_one():
    """Out of core's pieces (backend/pinning.PinnedPieces): page ranges that start at the
    given columns and never overlap (the driver refuses a second pinning of a page), and
    every rectangle of a split lies inside the one range it names."""
    a = np.zeros((1001, 700), order="F")
    pieces = PinnedPieces(a, [0, 100, 250, 251, 600])
    assert pieces.first_columns == [0, 100, 250, 251, 600]
    assert all(hi == lo for (_, hi), (lo, _) in zip(pieces.ranges, pieces.ranges[1:]))
    covered = 0
    for piece, (r0, r1, c0, c1) in pieces.split(3, 1001, 90, 700):
        lo, hi = pieces.ranges[piece]
        first = a.ctypes.data + (r0 + c0 * 1001) * 8
        last = a.ctypes.data + ((r1 - 1) + (c1 - 1) * 1001) * 8 + 8
        assert lo <= first and last <= hi
        covered += (r1 - r0) * (c1 - c0)
    assert covered == 998 * 610
