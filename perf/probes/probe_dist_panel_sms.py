#!/usr/bin/env python3
"""Probe: whether SMs kept for the panel lane (device.panel_sms, device.sm_split) shorten the
distributed factorizations on 2 GPUs, where each GPU's update is half the one-GPU update but
the panel chain (panel, broadcast, larft, the look-ahead column, the next owner's panel) is
not: the QR's traced panels at n = 65536 took 59 ms beside the update and 17 ms alone.
Also whether fewer thread blocks for NCCL's collectives (distributed.nccl_max_ctas) do: a
rank's broadcast holds its blocks from when it is queued until the owner sends; and what the
panel lane enqueued in recorded order costs or gives each routine (settings "o" and "u").

Each setting is set on every worker (hybridla.config.set through Client.run) and the call
timed `--repeat` times on the same input (device chunks, laid out cyclically), after an
untimed call at the order; the best is printed with every run.

    python3 perf/probes/probe_dist_panel_sms.py --routines qr,lu,cho --settings 0,8,16,g16,c4
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
# perf/distributed.py by its path: its name would shadow the `distributed` package
_SPEC = importlib.util.spec_from_file_location("perf_distributed",
                                               os.path.join(_ROOT, "perf", "distributed.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _configure(settings):
    import hybridla.config
    from hybridla.lapack import _dist
    settings = dict(settings)
    _dist.ORDERED_LANES = settings.pop("ordered lanes", ("gpu:panel",))
    hybridla.config.set(settings)  # not as a context: it stays for the worker's later calls
    return True


def setting(text):
    """"16": 16 SMs by cuBLAS's SM count target; "g16": 16 SMs on a green context; "c4": no
    SMs kept, the NCCL communicator's collectives on at most 4 thread blocks
    (distributed.nccl_max_ctas; "c0": NCCL's choice); "o": the defaults, "u": the defaults
    but the panel lane enqueued as its tasks become ready, not in their recorded order
    (lapack/_dist.ORDERED_LANES)."""
    if text in ("o", "u"):
        return {"device.panel_sms": 0, "device.sm_split": "cublas",
                "distributed.nccl_max_ctas": None,
                "ordered lanes": ("gpu:panel",) if text == "o" else ()}
    if text.startswith("c"):
        return {"device.panel_sms": 0, "device.sm_split": "cublas",
                "distributed.nccl_max_ctas": int(text[1:]) or None}
    green = text.startswith("g")
    sms = int(text[1:] if green else text)
    return {"device.panel_sms": sms, "device.sm_split": "green" if green else "cublas",
            "distributed.nccl_max_ctas": None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--nb", type=int, default=512)
    parser.add_argument("--routines", default="qr")
    parser.add_argument("--settings", default="0,8,16")
    parser.add_argument("--repeat", type=int, default=2)
    opts = parser.parse_args(argv)
    from distributed import wait
    cluster, client = bench.start_cluster("cuda", None)
    try:
        for routine in opts.routines.split(","):
            a = bench.placed_cyclically(client, bench.matrix(opts.n, routine, opts.nb,
                                                             device=True))
            wait(a)
            factors = bench.run_distributed(client, routine, a, "cuda", opts.nb, None)
            for text in opts.settings.split(","):
                client.run(_configure, setting(text))
                bench.hd.release(client)  # communicators made anew, with the setting's CTAs
                runs = []
                for _ in range(opts.repeat):
                    factors = None
                    start = time.perf_counter()
                    factors = bench.run_distributed(client, routine, a, "cuda", opts.nb, None)
                    runs.append(time.perf_counter() - start)
                print(f"{routine} n {opts.n} panel_sms {text}: best {min(runs):.3f} s (runs "
                      f"{', '.join(f'{r:.3f}' for r in runs)})", flush=True)
            client.run(_configure, setting("0"))
            del factors, a
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
