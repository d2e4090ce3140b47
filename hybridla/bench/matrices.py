"""The benchmarks' test matrices: F-ordered, fixed seeds, built one column block at a time where
they are large.

- perf/bench.py's (``hybridla bench``): ``random_matrix`` (standard normals) and ``spd_matrix``
  (A = G G^H / n + I), in all four dtypes, in host memory; MATRICES names them by kind.
- perf/mixed.py's, float64, where CuPy or NumPy builds them (``xp``): randn, spd (G G^T / n + I),
  kappa=K (A = U diag(s) (P U Q)^T, cond_2 K) and spd-kappa=K (U diag(s) U^T), s geometric from 1
  to 1/K, U Haar orthogonal; ``parse_matrix`` reads the words, ``MatrixFactory`` builds them.
- perf/distributed.py's: ``placed_cyclically`` persists a dask array's block columns on the
  workers that hybridla.distributed's layout gives them.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Optional

import os

import numpy as np

from . import harness

_log = harness.logger("bench")
HOST_SPD_WARN = 8191   # an SPD matrix larger than this built on the host takes a while (O(n^3))


def column_blocks(n: int, rows: int, itemsize: int = 8, target_bytes: int = 1 << 28):
    """Column ranges [j0, j1) of about target_bytes each for a rows x n matrix."""
    width = max(1, min(n, target_bytes // max(1, rows * itemsize)))
    for j0 in range(0, n, width):
        yield j0, min(n, j0 + width)


def random_matrix(n: int, dtype, seed: int) -> np.ndarray:
    """n x n F-ordered matrix of float64 standard normals (real + 1j*imag if complex),
    generated in parallel (see _parallel_normal): one thread took 10-25 s at n = 32768-49152,
    most of a benchmark call's limit."""
    return _parallel_normal(n, np.dtype(dtype), seed, 0)


def check_dtype(dtype) -> np.dtype:
    """Precision of the backward-error computation: double (complex double) always."""
    return np.promote_types(np.dtype(dtype), np.float64)


def seed_int(*words: int) -> int:
    """One 63-bit integer seed from a sequence (CuPy's generators take an integer)."""
    return int(np.random.SeedSequence(list(words)).generate_state(1, dtype=np.uint64)[0] >> 1)


def spd_matrix(n: int, dtype, seed: int) -> np.ndarray:
    """n x n F-ordered Hermitian positive definite A = G G^H / n + I, G standard normal
    (real and imaginary parts for complex dtypes), exactly Hermitian, in host memory.

    Built in double precision one column block at a time (only the lower triangle is
    computed, the upper one is its mirror), on the GPU with CuPy where one is present (the
    O(n^3) product takes about a second there at n = 32768), else with NumPy on the host.
    The eigenvalues lie in about [1, 5] (real) or [1, 9] (complex).
    """
    dtype = np.dtype(dtype)
    wdt = check_dtype(dtype)
    on_gpu = harness.cupy_has_gpu()
    xp = harness.cupy() if on_gpu else np
    if not on_gpu and n > HOST_SPD_WARN:
        _log(f"n={n}: building the SPD matrix on the host (O(n^3), no GPU): this takes a while")
    if on_gpu:
        rng = xp.random.default_rng(seed_int(seed, n, 2))
    else:
        rng = np.random.default_rng([seed, n, 2])
    g = xp.empty((n, n), dtype=wdt)
    if np.issubdtype(wdt, np.complexfloating):
        g.real = rng.standard_normal((n, n), dtype=np.float64)
        g.imag = rng.standard_normal((n, n), dtype=np.float64)
    else:
        g[...] = rng.standard_normal((n, n), dtype=np.float64)
    a = xp.empty((n, n), dtype=dtype, order="F")
    for j0, j1 in column_blocks(n, n, itemsize=wdt.itemsize):
        c = g[j0:] @ g[j0:j1].conj().T             # rows j0.. of columns j0:j1 of G G^H
        c /= n
        w = j1 - j0
        c[:w] = (c[:w] + c[:w].conj().T) / 2       # the diagonal block exactly Hermitian
        a[j0:, j0:j1] = c
        if j1 < n:
            a[j0:j1, j1:] = c[w:].conj().T         # the mirror of the block below
        del c
    del g
    diag = xp.arange(n)
    a[diag, diag] += 1
    if xp is np:
        return a
    host = np.empty((n, n), dtype=dtype, order="F")
    a.get(out=host)
    del a
    harness.release_device_memory()
    return host


def _parallel_normal(n: int, dtype, seed: int, stream: int) -> np.ndarray:
    """n x n F-ordered standard normals (real + 1j*imag if complex), column blocks filled by a
    thread per core, each block from its own generator (seeded by seed, n, stream, block):
    NumPy's generators release the GIL, so 80 GB take seconds instead of minutes."""
    from concurrent.futures import ThreadPoolExecutor
    a = np.empty((n, n), dtype=dtype, order="F")
    complex_entries = np.issubdtype(dtype, np.complexfloating)

    def fill(index_block):
        index, (j0, j1) = index_block
        rng = np.random.default_rng([seed, n, stream, index])
        block = a[:, j0:j1]
        # (w, n) C-order transposed = (n, w) F-order: column-major generation
        if complex_entries:
            block.real = rng.standard_normal((j1 - j0, n)).T
            block.imag = rng.standard_normal((j1 - j0, n)).T
        else:
            block[...] = rng.standard_normal((j1 - j0, n)).T

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(fill, enumerate(column_blocks(n, n, a.itemsize, target_bytes=1 << 26))))
    return a


def large_spd_matrix(n: int, dtype, seed: int) -> np.ndarray:
    """A symmetric positive definite n x n matrix (real dtypes) without spd_matrix's G G^T,
    which needs two n x n arrays on the device (160 GB at n = 100000): A = (R + R^T) / 2 +
    2 sqrt(n) I, R standard normal. The symmetric part's eigenvalues lie within about
    +-sqrt(2n) (the semicircle law), so A's lie in about [0.6 sqrt(n), 3.4 sqrt(n)]: definite,
    condition number about 6. Built in place, block by block of columns, by a thread per
    core."""
    from concurrent.futures import ThreadPoolExecutor
    a = _parallel_normal(n, np.dtype(dtype), seed, 2)
    blocks = list(column_blocks(n, n, target_bytes=1 << 28))

    def symmetrize(block):  # the blocks at or below the diagonal block, each pair once
        j0, j1 = block
        for i0, i1 in blocks:
            if i0 > j0:
                break
            upper, lower = a[i0:i1, j0:j1], a[j0:j1, i0:i1]
            if i0 == j0:
                upper[...] = (upper + upper.T) / 2
            else:
                mean = (upper + lower.T) / 2
                upper[...] = mean
                lower[...] = mean.T

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(symmetrize, blocks))
    diagonal = np.arange(n)
    a[diagonal, diagonal] += 2 * np.sqrt(n)
    return a


# Test-matrix generators by kind (a routine names the kind it needs).
MATRICES: dict[str, Callable[[int, Any, int], np.ndarray]] = {
    "general": random_matrix,
    "spd": spd_matrix,
    "large-general": random_matrix,  # the out-of-core runs' name for it
    "large-spd": large_spd_matrix,
}


@dataclass(frozen=True)
class MatrixSpec:
    """One --matrices word: kind randn | kappa | spd | spd-kappa, with its condition number."""
    name: str
    kind: str
    kappa: Optional[float] = None

    @property
    def spd(self) -> bool:
        return self.kind.startswith("spd")

    @property
    def needs_orthogonal(self) -> bool:
        return self.kappa is not None


def parse_matrix(word: str) -> MatrixSpec:
    word = word.strip()
    if word in ("randn", "spd"):
        return MatrixSpec(word, word)
    for kind in ("spd-kappa", "kappa"):
        if word.startswith(kind + "="):
            try:
                kappa = float(word[len(kind) + 1:])
            except ValueError:
                break
            if not kappa >= 1 or not np.isfinite(kappa):
                raise argparse.ArgumentTypeError(f"{word}: the condition number must be >= 1")
            return MatrixSpec(word, kind, kappa)
    raise argparse.ArgumentTypeError(
        f"unknown matrix {word!r}; choose from randn, spd, kappa=K, spd-kappa=K (K >= 1)")


def normal(shape, xp, seed: int, *words: int):
    """float64 standard normals, from CuPy's generator on the device or NumPy's on the host."""
    if xp is np:
        return np.random.default_rng([seed, *words]).standard_normal(shape)
    return xp.random.default_rng(seed_int(seed, *words)).standard_normal(
        shape, dtype=np.float64)


def singular_values(n: int, kappa: float, xp=np):
    """s_i = kappa^(-i/(n-1)), i = 0..n-1: geometric from 1 down to 1/kappa."""
    if n == 1:
        return xp.ones(1)
    return xp.asarray(kappa ** (-np.arange(n) / (n - 1)))


def haar_orthogonal(n: int, seed: int, xp=np):
    """A Haar-distributed n x n orthogonal matrix: Q of the QR of a Gaussian, times the signs
    of R's diagonal (O(n^3); about 2 s with cupy.linalg.qr at n = 32768)."""
    g = normal((n, n), xp, seed, n, 3)
    q, r = xp.linalg.qr(g)
    del g
    signs = xp.sign(xp.diagonal(r)).copy()
    del r
    signs[signs == 0] = 1
    q *= signs[None, :]
    return q


def general_with_singular_values(u, s, seed: int, xp=np):
    """A = U diag(s) V^T with V = P U Q (P, Q random permutations of rows and columns of the
    orthogonal U, so V is orthogonal): F-ordered, singular values s.  u is consumed."""
    n = len(s)
    rng = np.random.default_rng([seed, n, 4])
    p, q = (xp.asarray(rng.permutation(n)) for _ in range(2))
    v = u[p]                    # P U
    v = v[:, q]                 # P U Q
    u *= s[None, :]             # U diag(s), in place
    at = v @ u.T                # A^T = V diag(s) U^T, C order
    del v
    return at.T                 # A, F order


def spd_with_eigenvalues(u, s, xp=np):
    """A = U diag(s) U^T, exactly symmetric, F-ordered.  u is consumed."""
    a = (u * s[None, :]) @ u.T
    del u
    a = a + a.T                 # a[i,j] + a[j,i] == a[j,i] + a[i,j]: exactly symmetric
    a *= 0.5
    return a.T                  # the same values, F order


def spd_gram(n: int, seed: int, xp=np):
    """A = G G^T / n + I, G standard normal: eigenvalues in about [1, 5]."""
    g = normal((n, n), xp, seed, n, 2)
    a = g @ g.T
    del g
    a = a + a.T
    a *= 0.5 / n
    diag = xp.arange(n)
    a[diag, diag] += 1
    return a.T


def randn_matrix(n: int, seed: int, xp=np):
    return normal((n, n), xp, seed, n, 1).T     # iid entries: the transpose is F order


def download(d) -> np.ndarray:
    """A host copy of a CuPy array in its own layout (CuPy's get() defaults to C order, which
    for an F-ordered array would cost a transposed device copy first)."""
    out = np.empty(d.shape, dtype=d.dtype, order="F" if d.flags.f_contiguous else "C")
    d.get(out=out)
    return out


class MatrixFactory:
    """Builds the test matrices of one size; keeps its one orthogonal U in host memory."""

    def __init__(self, n: int, seed: int, xp, log: Callable[[str], None] = _log):
        self.n, self.seed, self.xp, self.log = n, seed, xp, log
        self._u: Optional[np.ndarray] = None

    def orthogonal(self):
        """A fresh copy of U where the matrices are built (computed on the first call)."""
        if self._u is None:
            self.log(f"n={self.n}: QR of a Gaussian for the orthogonal factor")
            q = haar_orthogonal(self.n, self.seed, self.xp)
            self._u = q if self.xp is np else download(q)
            del q
            harness.release_device_memory()
        return self.xp.array(self._u)

    def make(self, spec: MatrixSpec):
        n, xp = self.n, self.xp
        if spec.kind == "randn":
            return xp.asfortranarray(randn_matrix(n, self.seed, xp))
        if spec.kind == "spd":
            return xp.asfortranarray(spd_gram(n, self.seed, xp))
        s = singular_values(n, spec.kappa, xp)
        if spec.kind == "kappa":
            return general_with_singular_values(self.orthogonal(), s, self.seed, xp)
        return spd_with_eigenvalues(self.orthogonal(), s, xp)


def placed_cyclically(client, a):
    """The dask array `a` (one row of block columns) computed and persisted with its block
    column j on worker j mod p (the p workers in hybridla's rank order, their sorted
    addresses): the layout hybridla.distributed factors a dask array of device chunks in, so
    that the call moves no block (perf/distributed.py's --input-layout cyclic). The same keys
    and values as client.persist(a); only where the chunks lie differs."""
    import dask.array as da
    import distributed
    from dask.highlevelgraph import HighLevelGraph
    addresses = sorted(client.nthreads())
    blocks = a.to_delayed().ravel()  # one row of block columns
    futures = [client.compute(block, workers=[addresses[j % len(addresses)]],
                              allow_other_workers=False) for j, block in enumerate(blocks)]
    distributed.wait(futures)
    layer = {future.key: future for future in futures}
    return da.Array(HighLevelGraph.from_collections(a.name, layer, dependencies=()), a.name,
                    a.chunks, meta=a._meta)
