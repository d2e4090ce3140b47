"""Where each tile of a matrix lives, which copies are valid, and which are dirty.

A matrix is cut into tiles of nb x nb (the last ones smaller). Each tile has a home (where it
lives when nobody works on it: the user's host array, device memory, or a remote worker) and a
set of places that hold a valid copy. A copy away from home that is the only valid one is
dirty: the home must get it back before the copy is dropped. The transfer plan
(scheduler/transfers.py) keeps this record as it records tasks: a bring-up makes the device
copy valid, a task that writes a tile makes its place's copy the only valid one, a send-home
makes the home valid again. The record therefore describes the state after the tasks recorded
so far have run, in recording order: what an out-of-core policy needs to decide, at record
time, which tiles to evict (clean ones cost nothing; dirty ones are sent home first).

Places are strings: "host" (the user's host array), "device", or a remote worker's name.
"""
from __future__ import annotations

import numpy as np

HOST, DEVICE = "host", "device"


class Residency:
    """The residency of an m x n matrix in tiles of nb x nb, whose home is `home`; at first
    the home holds the only valid copy of every tile (or `also_valid` holds one too)."""

    def __init__(self, m: int, n: int, nb: int, home: str, also_valid: tuple[str, ...] = ()):
        self.m, self.n, self.nb, self.home = m, n, max(1, nb), home
        self.shape = (-(-m // self.nb), -(-n // self.nb))
        # per place, a grid of the tiles it holds valid copies of; a place whose tiles are all
        # valid (or none) is a bool until something changes: most stores never move a tile,
        # and a grid costs a byte per tile (a wrapped n = 32768 matrix with nb = 1: 1 GB)
        self._valid: dict[str, np.ndarray | bool] = {place: True for place in (home, *also_valid)}

    def _tiles(self, r0, r1, c0, c1):
        """The tiles a rectangle touches, as a slice pair of the tile grid."""
        nb = self.nb
        return slice(r0 // nb, -(-r1 // nb)), slice(c0 // nb, -(-c1 // nb))

    def _at(self, place) -> np.ndarray:
        """The place's grid, made concrete (to be changed or read tile by tile)."""
        grid = self._valid.get(place, False)
        if isinstance(grid, bool):
            grid = self._valid[place] = np.full(self.shape, grid, dtype=bool)
        return grid

    def _uniform(self, place):
        """True or False where every tile of the place is (not) valid; None where it varies."""
        grid = self._valid.get(place, False)
        return grid if isinstance(grid, bool) else None

    # -- what happened ------------------------------------------------------------------------
    def arrived(self, place: str, r0: int, r1: int, c0: int, c1: int) -> None:
        """A copy of the rectangle's tiles reached `place` (an upload, a send-home)."""
        self._at(place)[self._tiles(r0, r1, c0, c1)] = True

    def written(self, place: str, r0: int, r1: int, c0: int, c1: int) -> None:
        """A task at `place` wrote the rectangle: its tiles' other copies are stale."""
        tiles = self._tiles(r0, r1, c0, c1)
        for other in list(self._valid):
            self._at(other)[tiles] = other == place
        self._at(place)[tiles] = True

    def dropped(self, place: str, r0: int, r1: int, c0: int, c1: int) -> None:
        """`place` gave up its copies (eviction); a dirty tile must have gone home first."""
        tiles = self._tiles(r0, r1, c0, c1)
        if place != self.home and not self._at(self.home)[tiles].all():
            raise RuntimeError(f"tiles of rows {r0}:{r1}, columns {c0}:{c1} dropped from "
                               f"{place} before their home ({self.home}) had them back")
        self._at(place)[tiles] = False

    # -- questions ----------------------------------------------------------------------------
    def valid(self, place: str, r0: int, r1: int, c0: int, c1: int) -> bool:
        """Whether `place` holds a valid copy of every tile of the rectangle."""
        uniform = self._uniform(place)
        if uniform is not None:
            return uniform
        return bool(self._at(place)[self._tiles(r0, r1, c0, c1)].all())

    def dirty(self, place: str, r0: int = 0, r1: int | None = None, c0: int = 0,
              c1: int | None = None) -> bool:
        """Whether some tile of the rectangle (default: all) is valid at `place` only, away
        from home: it must go home before `place` may drop it."""
        if place == self.home or self._uniform(place) is False or self._uniform(self.home):
            return False
        tiles = self._tiles(r0, self.m if r1 is None else r1, c0, self.n if c1 is None else c1)
        return bool(
            (self._at(place)[tiles] & ~self._at(self.home)[tiles]).any())

    def tiles_at(self, place: str) -> int:
        """How many tiles `place` holds valid copies of (a budget's measure)."""
        uniform = self._uniform(place)
        if uniform is not None:
            return self.shape[0] * self.shape[1] if uniform else 0
        return int(self._at(place).sum())

    def home_is_current(self) -> bool:
        """Whether the home holds a valid copy of every tile: nothing left behind."""
        uniform = self._uniform(self.home)
        return uniform if uniform is not None else bool(self._at(self.home).all())

    def __repr__(self):
        held = ", ".join(f"{place}: {self.tiles_at(place)}" for place in self._valid)
        return f"Residency({self.m}x{self.n}, nb={self.nb}, home={self.home}; valid tiles {held})"
