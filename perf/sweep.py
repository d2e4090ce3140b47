#!/usr/bin/env python3
"""Tuning sweep for getrf on the GPU machine: hybridla variants (nb, look-ahead, SMs left to the
panel, host-memory pinning) against cuSOLVER, in one process, one row per variant.

    python3 perf/sweep.py --n 32768 --nb 512 768 --panel-sms 0 16 32 [--cpu-interface]
"""
import argparse
import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import hybridla  # noqa: E402
from hybridla.bench import baselines, harness  # noqa: E402  (cuSOLVER baseline, clocks)
from hybridla.bench.flops import getrf_flops  # noqa: E402

# median of `repeat` runs, CuPy's device synchronized around each (perf/sweep_potrf.py uses it)
median_time = harness.median_time


def idle_share(run, setup, path):
    """One traced run: the share of the call's wall time in which no GPU lane worked. Everything
    the host does (validation, planning, recording the graph, Dask, Python, waiting) that is not
    hidden behind GPU work shows up here: that is our measure of scheduler + Python overhead."""
    from hybridla.scheduler.trace import Trace
    arg = setup()
    harness.cupy_sync()
    t0 = time.perf_counter()
    run(arg, path)
    harness.cupy_sync()
    wall = time.perf_counter() - t0
    busy = Trace.load(path).summary()["gpu_busy"]
    return wall, (wall - busy) / wall


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[32768])
    p.add_argument("--nb", type=int, nargs="+", default=[512])
    p.add_argument("--lookahead", type=int, nargs="+", default=[1])
    p.add_argument("--panel-sms", type=int, nargs="+", default=[16])
    p.add_argument("--panel", default="gpu")
    p.add_argument("--transfer", nargs="+", default=["staged"],
                   choices=["staged", "register", "pageable"],
                   help="device.host_transfer values for the CPU interface")
    p.add_argument("--cpu-interface", action="store_true")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--trace-dir", default=None, help="trace each variant's last run; report idle")
    a = p.parse_args()
    if a.trace_dir:
        os.makedirs(a.trace_dir, exist_ok=True)
    cp = harness.cupy()
    print("| n | interface | nb | look-ahead | panel SMs | host transfer | time s | TFLOP/s | vs cuSOLVER "
          "| GPU idle share of wall (traced run) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in a.n:
        host = np.asfortranarray(np.random.default_rng(0).standard_normal((n, n)))
        d_a = cp.empty((n, n), order="F")
        flops = getrf_flops(n, n, np.float64)
        setup = lambda: d_a.set(host) or d_a  # noqa: E731
        baselines.getrf(setup())  # warm-up
        base = median_time(baselines.getrf, setup, a.repeat)
        print(f"| {n} | cuSOLVER | | | | | {base:.4f} | {flops / base / 1e12:.1f} | 1.00 |", flush=True)
        for nb, la, sms, reg in itertools.product(a.nb, a.lookahead, a.panel_sms, a.transfer):
            with hybridla.config.set({"device.panel_sms": sms, "device.host_transfer": reg}):
                def run(x, trace=None):
                    return hybridla.lu_factor(x, overwrite_a=True, check_finite=False,
                                              backend="cuda", nb=nb, lookahead=la, panel=a.panel,
                                              trace=trace)

                def traced(setup_fn, iface):
                    if not a.trace_dir:
                        return ""
                    path = f"{a.trace_dir}/{iface}_{n}_{nb}_{la}_{sms}_{reg}.json"
                    wall, idle = idle_share(run, setup_fn, path)
                    return f"{idle:.1%} of {wall:.3f} s"

                if reg == a.transfer[0]:  # the GPU interface does not transfer: once
                    run(setup())
                    t = median_time(run, setup, a.repeat)
                    print(f"| {n} | GPU | {nb} | {la} | {sms} | | {t:.4f} | {flops / t / 1e12:.1f} | "
                          f"{base / t:.2f} | {traced(setup, 'gpu')} |", flush=True)
                if a.cpu_interface:
                    work = np.empty_like(host, order="F")
                    host_setup = lambda: (np.copyto(work, host), work)[1]  # noqa: E731
                    t = median_time(run, host_setup, a.repeat)
                    print(f"| {n} | CPU | {nb} | {la} | {sms} | {reg} | {t:.4f} | "
                          f"{flops / t / 1e12:.1f} | {base / t:.2f} | {traced(host_setup, 'cpu')} |",
                          flush=True)
        del d_a
        harness.release_device_memory()


if __name__ == "__main__":
    main()
