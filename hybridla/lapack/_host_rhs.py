"""Host arrays in and out of tile stores where the factors live, for the user layer's solves:
a host right-hand side solved with factors that stay on the device (getrs, potrs, ...), and a
host result uploaded into a new device array. On the host backend the copies are host copies.
"""
from __future__ import annotations


def solve_host_rhs(backend, F, X, rhs, solve):
    """x for the host right-hand side `rhs` (F-ordered, n x nrhs, n = F.n), solved where the
    factors F live: X's block rows 0:n, columns 0:nrhs (a store there, at least that large) :=
    rhs, then `solve(backend, F, X)` (getrs, potrs, ... in place on X), then that block down.
    The copies are the backend's from_host / to_host, ordered after the update lane's work;
    complete on return. Returns x, a new F-ordered n x nrhs host array."""
    n = F.n
    lane = backend.lane("gpu:update")
    block = X.block(0, n, 0, rhs.shape[1])
    backend.from_host(lane, rhs, block)
    solve(backend, F, X)
    return backend.to_host(lane, block)


def lacpy_from_host(backend, x, X):
    """X's rows 0:m, columns 0:k := the host array x (m x k): the backend's from_host, after
    the update lane's work; complete on return (x may be reused)."""
    lane = backend.lane("gpu:update")
    backend.from_host(lane, x, X.block(0, x.shape[0], 0, x.shape[1]))
