"""backend/host/nogil.laswp: LAPACK's laswp through cython_lapack's function pointer (the GIL
released) gives scipy.linalg.lapack's laswp to the bit, for every dtype, both directions,
F-ordered arrays and column blocks of wider ones, and refuses what it cannot swap."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import get_lapack_funcs

from hybridla.backend.host.nogil import laswp

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def scipy_laswp(a, pivots, k0, k1, forward):
    routine, = get_lapack_funcs(("laswp",), dtype=a.dtype)
    return routine(np.asfortranarray(a), pivots.copy(), k1=k0, k2=k1 - 1,
                   inc=1 if forward else -1)


@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
def test_laswp_is_lapacks(dtype, forward, rng):
    m, n = 97, 13
    pivots = np.array([rng.integers(i, m) for i in range(m)], dtype=np.int32)
    a = np.asfortranarray(rng.standard_normal((m, n))).astype(dtype)
    for k0, k1 in ((0, m), (5, 60), (60, 61), (7, 7)):
        want = scipy_laswp(a, pivots, k0, k1, forward) if k1 > k0 else a  # none: no change
        whole = a.copy(order="F")
        laswp(whole, pivots, k0, k1, forward)
        wide = np.zeros((m, 3 * n), dtype=dtype, order="F")
        wide[:, ::3] = a
        every_third = wide[:, ::3]  # columns 3 m apart: lda = 3 m
        laswp(every_third, pivots, k0, k1, forward)
        assert np.array_equal(whole, want) and np.array_equal(every_third, want)
        assert not wide[:, 1::3].any()  # nothing between the columns touched


def test_laswp_takes_one_column_of_any_stride(rng):
    """A vector as a column (b[:, None]: its column stride 0) or any single column."""
    pivots = np.array([3, 5, 2, 3, 4, 5], dtype=np.int32)
    b = rng.standard_normal(6)
    want = scipy_laswp(b[:, None], pivots, 0, 6, True)
    column = b.copy()[:, None]
    laswp(column, pivots, 0, 6)
    assert column.strides[1] == 0 and np.array_equal(column, want)


def test_laswp_refuses_what_it_cannot_swap(rng):
    a = np.asfortranarray(rng.standard_normal((6, 4)))
    pivots = np.array([3, 5, 2, 3, 4, 5], dtype=np.int32)
    with pytest.raises(ValueError, match="rows contiguous"):
        laswp(np.ascontiguousarray(a), pivots, 0, 6)
    with pytest.raises(ValueError, match="rows contiguous"):  # columns overlapping
        laswp(np.lib.stride_tricks.as_strided(a, (6, 3), (8, 8)), pivots, 0, 6)
    with pytest.raises(ValueError, match="pivots k0..k1-1 must be rows"):
        laswp(a, np.array([0, 6, 2], dtype=np.int32), 0, 3)
    with pytest.raises(ValueError, match="3 pivots, not the 5"):
        laswp(a, pivots[:3], 0, 5)
    with pytest.raises(ValueError, match="2-D float or complex"):
        laswp(a.astype(np.int64), pivots, 0, 6)
    frozen = a.copy(order="F")
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        laswp(frozen, pivots, 0, 6)
