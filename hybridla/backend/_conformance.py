"""Checked by mypy, never imported: both backends satisfy the declared contract (ops.py), and
both tile stores the TileStore protocol. A method that is renamed, loses an argument or is
missing on one backend fails CI here."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cuda import CudaBackend, DeviceMatrix
    from .host import HostBackend, HostMatrix
    from .ops import Backend, DeviceBackend, StagedTileStore, StreamedTileStore, TileStore

    def host_backend(backend: HostBackend) -> Backend:
        return backend

    def host_store(store: HostMatrix) -> TileStore:
        return store

    def host_staged_store(store: HostMatrix) -> StagedTileStore:
        return store

    def cuda_backend(backend: CudaBackend) -> DeviceBackend:
        return backend

    def cuda_store(store: DeviceMatrix) -> StreamedTileStore:
        return store
