"""Probe: how fast one GPU runs a distributed Cholesky worker's trailing update alone (no
panel, no NCCL beside it), against plain gemms of the same flops. The question: the update
lanes of the distributed Cholesky at n = 65536 on 2 H100s are 98-100% busy in steps 0-48 at
42.9, 37.0 and 29.6 TFLOP/s per GPU (perf/RESULTS.md, issue 32, stop 58), where cuBLAS's
DGEMM gives 59-62: is it the staircase's form (strided-batched gemms over spaced block
columns, the batched diagonal blocks) or what runs beside it?

    python3 perf/probes/probe_chol_staircase.py --n 65536 --nb 1024 --steps 0,16,32 --repeat 5

Per step, rank 0 of 2 (1-D block-cyclic columns, as lapack/potrf_dist.py lays them out), the
columns past its look-ahead column (the update lane's one task of that step):
- "staircase": update/chol.staircase_update, as the driver calls it;
- "gathered": the same rectangles and diagonal blocks, each rectangle one plain gemm against a
  contiguous copy of the panel's rows at the block columns' diagonals (the copy timed in);
- "plain": one gemm of the staircase's rows x columns x kb (more flops: its rate is the
  ceiling).
Each time is the median of --repeat runs by CUDA events on one lane; rates count the
staircase's flops (update/chol.herk_flops), "plain" its own.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hybridla.backend import get_backend
from hybridla.lapack._dist_layout import BlockColumns
from hybridla.update import chol as chol_update


def gathered_update(ops, lane, P, C, starts, nb, scratch, G):
    """staircase_update with each rectangle one gemm against G, the panel's rows at the
    block columns' diagonals copied side by side (rows i nb : i nb + nb of G for block i)."""
    sub, kb = ops.sub_block, P.shape[1]
    rows, width = C.shape
    tops = starts[:width // nb]
    for i, top in enumerate(tops):
        ops.lacpy(lane, "A", sub(P, top, top + nb, 0, kb), sub(G, i * nb, i * nb + nb, 0, kb))
    for i0, i1, r0, r1 in chol_update.staircase_rectangles(tops, nb, rows):
        ops.gemm(lane, -1, sub(P, r0, r1, 0, kb), sub(G, i0 * nb, i1 * nb, 0, kb), 1,
                 sub(C, r0, r1, i0 * nb, i1 * nb), trans_b="C")
    step = tops[1] - tops[0] if len(tops) > 1 else None
    ops.herk_diagonal_blocks(lane, "L", "N", -1, sub(P, tops[0], tops[-1] + nb, 0, kb),
                             sub(C, tops[0], tops[-1] + nb, 0, width), nb,
                             scratch(lane, nb, width), row_step=step)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--nb", type=int, default=1024)
    parser.add_argument("--steps", default="0,16,32")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", default="cuda",
                        help="host: a dry run that also checks gathered against staircase")
    opts = parser.parse_args()
    ops, n, nb = get_backend(opts.backend), opts.n, opts.nb
    layout, rank = BlockColumns(n, n, nb, 2), 0
    width = layout.width(rank)
    A = ops.matrix(n, width, np.float64, nb)
    P = ops.matrix(n, nb, np.float64, nb)
    G = ops.matrix(width, nb, np.float64, nb)
    rng = np.random.default_rng(0)
    ops.from_host(None, rng.standard_normal((n, nb)) / n, P.block(0, n, 0, nb))
    ops.synchronize()
    lane = ops.lane("gpu:update")
    for step in [int(s) for s in opts.steps.split(",")]:
        k0 = step * nb
        lk = layout.local_start(rank, step)
        c0 = lk + nb if layout.owner(step) == rank else lk
        c0 += nb  # past the look-ahead column (the panel lane's)
        starts = [layout.global_column(rank, c) for c in range(c0, width, nb)]
        if not starts:
            continue
        top = starts[0]
        Pk = P.block(0, n - k0, 0, nb)  # the slot: the panel's rows k0:n
        Pb, Cb = ops.sub_block(Pk, top - k0, n - k0, 0, nb), A.block(top, n, c0, width)
        offsets = [j0 - top for j0 in starts]
        flops = sum(chol_update.herk_flops(n - j0, 0, nb, 0, nb) for j0 in starts)
        variants = {
            "staircase": (lambda: chol_update.staircase_update(ops, lane, Pb, Cb, offsets, nb,
                                                                A.scratch), flops),
            "gathered": (lambda: gathered_update(ops, lane, Pb, Cb, offsets, nb, A.scratch,
                                                 G.block(0, width - c0, 0, nb)), flops),
            "plain": (lambda: ops.gemm(lane, -1, Pb, ops.sub_block(Pb, 0, width - c0, 0, nb),
                                       1, Cb, trans_b="C"),
                      2.0 * (n - top) * (width - c0) * nb),
        }
        if opts.backend == "host":  # the two ways' results on the staircase, from one start
            start = rng.standard_normal((n - top, width - c0))
            results = []
            for name in ("staircase", "gathered"):
                ops.from_host(None, start, Cb)
                variants[name][0]()
                results.append(ops.to_host(None, Cb))
            mask = np.zeros(start.shape, bool)
            for i, j0 in enumerate(offsets):
                mask[j0:, i * nb:i * nb + nb] = np.tril(np.ones((n - top - j0, nb), bool))
            print(f"step {step}: gathered against staircase "
                  f"{np.abs(results[0] - results[1])[mask].max():.1e}, untouched above: "
                  f"{np.array_equal(results[1][~mask], start[~mask])}")
        for name, (update, count) in variants.items():
            times = []
            for _ in range(opts.repeat + 1):
                began = time.perf_counter()
                with lane:
                    start = lane.record()
                    update()
                    end = lane.record()
                ops.synchronize()
                times.append(end.time_since(start) if end is not None
                             else (time.perf_counter() - began) * 1e3)
            t = statistics.median(times[1:])
            print(f"step {step} rows {n - top} cols {width - c0} blocks {len(starts)} {name}: "
                  f"{t:.2f} ms, {count / t / 1e9:.1f} TFLOP/s (runs "
                  f"{', '.join(f'{x:.2f}' for x in times[1:])})", flush=True)
    for M in (A, P, G):
        M.close()


if __name__ == "__main__":
    main()
