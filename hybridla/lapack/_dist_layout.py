"""The layout of a distributed call's matrix over the workers (BlockColumns).

Layout: 1-D block columns. Block column j (columns j nb : (j+1) nb) lives on one rank, j mod P
(cyclic) unless the data already lives elsewhere (BlockColumns.near: a dask array's blocks stay
on the workers that hold them while the trailing updates stay within 10% of an even split:
an LU of n = 65536 on two GPUs spent 27 of its 31 s outside the workers' 4 s engines, placing
a persisted dask array cyclically, 2026-11-26);
a worker's local matrix is its block columns side by side, in order, with all m rows. Why
columns and not a 2-D grid, by bytes moved per step of
width nb on an m x n matrix (8-byte words; LU, the other two alike):

    1-D columns: the panel, rows k:m of nb columns, from its owner to the P - 1 others:
                 (P - 1) (m - k) nb words; the row interchanges are local (every worker holds
                 whole columns) and so is the rest of the update.
    2-D p x q grid (p q = P): the panel along its process row and U12 along its process
                 column, (q - 1) (m - k) nb / p + (p - 1) (n - k) nb / q words, plus a
                 pivot search across the p process rows for each of the nb columns (nb
                 latency-bound reductions per step) and the interchanges of rows that live on
                 other process rows.

At P = 2 a grid is 1 x 2 (that is 1-D columns) or 2 x 1 (2-D's pivot search across the two
GPUs, nb reductions a step, on the critical path): 1-D columns move (m - k) nb words a step,
at n = 65536, nb = 512 at most 268 MB, 0.8 ms at NVLink's measured 350 GB/s against a step's
update of ~2 (n - k)^2 nb / 2 flops = 35 ms per GPU at 60 TFLOP/s: hidden by look-ahead. A 2-D
grid pays off only from P ~ 8 (the 1-D volume grows with P, the grid's with sqrt(P)), and
only across machines, where the link is ~10x slower; then the layout would change here,
behind the same drivers.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockColumns:
    """1-D block columns (module docstring): m x n, blocks of nb columns, over `size` ranks;
    block column j on rank `owners[j]`, cyclic (j mod size) where `owners` is None. A rank's
    local matrix is its block columns side by side, in order."""

    m: int
    n: int
    nb: int
    size: int
    owners: tuple | None = None

    @property
    def blocks(self) -> int:
        return -(-self.n // self.nb)

    def owner(self, j: int) -> int:
        """The rank that holds block column j."""
        return j % self.size if self.owners is None else self.owners[j]

    def owned(self, rank: int) -> list[int]:
        """The block columns rank holds, in order."""
        return list(self._owned[rank])

    @functools.cached_property
    def _owned(self) -> tuple:
        # made once: global_column is asked for every block column of every update task,
        # when it is recorded and when it runs
        if self.owners is None:
            return tuple(tuple(range(r, self.blocks, self.size)) for r in range(self.size))
        return tuple(tuple(j for j, o in enumerate(self.owners) if o == r)
                     for r in range(self.size))

    def block_width(self, j: int) -> int:
        return min(self.nb, self.n - j * self.nb)

    def width(self, rank: int) -> int:
        """The columns of rank's local matrix."""
        return self._widths[rank]

    @functools.cached_property
    def _widths(self) -> tuple:
        return tuple(sum(self.block_width(j) for j in self._owned[r]) for r in range(self.size))

    def local_start(self, rank: int, j: int) -> int:
        """The local column where rank's blocks from block column j on start (its columns of
        blocks before j come first; only the last block may be narrower than nb)."""
        return sum(self.block_width(i) for i in self.owned(rank) if i < j)

    def columns(self, rank: int) -> np.ndarray:
        """The global indices of rank's local columns, in local order."""
        cols = [np.arange(j * self.nb, j * self.nb + self.block_width(j))
                for j in self.owned(rank)]
        return np.concatenate(cols) if cols else np.zeros(0, dtype=np.intp)

    def global_column(self, rank: int, local: int) -> int:
        """The global index of rank's local column `local`."""
        block, offset = divmod(local, self.nb)
        return self._owned[rank][block] * self.nb + offset

    def imbalance(self, k_end: int) -> float:
        """The trailing updates' time under this ownership over an even split's: each step
        k < k_end blocks waits for the rank with the most trailing columns (blocks past k)
        to update its (m - k nb) rows, sum_k (m - k nb) max_r count_r(k), over the same sum
        with every count the mean (1.0: perfectly even; cyclic is within a block of it)."""
        counts = _trailing_counts(self, k_end)
        heights = self.m - np.arange(counts.shape[1]) * self.nb
        return float((heights * counts.max(axis=0)).sum() /
                     max((heights * counts.mean(axis=0)).sum(), 1e-300))

    @classmethod
    def near(cls, m, n, nb, size, holders, k_end, tolerance=1.1):
        """Block columns owned where they already are (`holders[j]`: the rank holding block j,
        or -1 where none does), so that as little as possible moves: starting from the
        holders, the block whose move to another rank lowers `imbalance` most is moved, one
        at a time, until it is within `tolerance` (cyclic ownership's is about 1.0). Blocks
        no rank holds go to the rank with the fewest columns first."""
        owners = list(holders)
        for j, r in enumerate(owners):
            if r < 0:
                counts = np.bincount([o for o in owners if o >= 0], minlength=size)
                owners[j] = int(np.argmin(counts))
        layout = cls(m, n, nb, size, tuple(owners))
        heights = m - np.arange(-(-k_end // nb)) * nb
        ideal = (heights * _trailing_counts(layout, k_end).mean(axis=0)).sum()
        for _ in range(layout.blocks):
            current = layout.imbalance(k_end)
            if current <= tolerance:
                break
            # every single move at once: block j to rank r lowers r_j's trailing count by
            # one and raises r's at each step before j
            counts, blocks = _trailing_counts(layout, k_end), layout.blocks
            before = np.arange(counts.shape[1])[None, :] < np.arange(blocks)[:, None]  # [j, k]
            best = None
            for r in range(size):
                trial = np.repeat(counts[None], blocks, axis=0)  # [j, rank, k]
                trial[np.arange(blocks), owners, :] -= before
                trial[:, r, :] += before
                cost = (heights * trial.max(axis=1)).sum(axis=1) / ideal
                cost[np.asarray(owners) == r] = np.inf
                j = int(np.argmin(cost))
                if best is None or cost[j] < best[0]:
                    best = (cost[j], j, r)
            if best is None or best[0] >= current:
                break
            owners[best[1]] = best[2]
            layout = cls(m, n, nb, size, tuple(owners))
        return layout


def _trailing_counts(layout, k_end):
    """count[r, k]: rank r's block columns past block k, for the steps k < k_end blocks."""
    steps = -(-k_end // layout.nb)
    owners = np.array([layout.owner(j) for j in range(layout.blocks)])
    past = np.arange(layout.blocks)[None, :] > np.arange(steps)[:, None]  # [k, j]
    return np.stack([(past & (owners == r)[None, :]).sum(axis=1) for r in range(layout.size)])
