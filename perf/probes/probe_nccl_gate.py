"""Probe: does a posted NCCL broadcast that waits for its root slow the GEMMs beside it on the
receiving GPU, and does a gate on the device (the receiver's comm stream waits on a flag in
its memory, cuStreamWaitValue32, that the root's stream writes over NVLink,
cuStreamWriteValue32 on the IPC-mapped flag, just before its broadcast) give those SMs back?

The question comes from the distributed Cholesky's trace at n = 65536 on 2 H100s (perf/
RESULTS.md, issue 32, stop 58): a receiver's broadcast is posted as soon as its slot is free
and then spans 8-17 ms, waiting for the owner's panel, while its update lane runs at 29.6-42.9
TFLOP/s against 45-50 alone (probe_chol_staircase.py).

    python3 perf/probes/probe_nccl_gate.py --mb 512 --delay-ms 15 --repeat 5

Two processes, one GPU each (CUDA_VISIBLE_DEVICES as dask-cuda sets it). Each round: the
receiver (rank 1) enqueues --gemms DGEMMs (m x m x k) on a low-priority stream and, on a
high-priority comm stream, the broadcast of --mb MB from rank 0; rank 0 first keeps its comm
stream busy for about --delay-ms (GEMMs: "the panel"), then broadcasts. Ways:
- "none": no broadcast (the GEMMs alone);
- "posted": the receiver's broadcast enqueued at once (today's way);
- "gated": the receiver's comm stream first waits for the round's number in its flag, which
  rank 0 writes into it after its delay.
Printed per way: the receiver's GEMM time and the time to the broadcast's end (CUDA events,
from the round's start), medians of --repeat rounds.
"""
from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import os
import statistics


def _driver():
    cuda = ctypes.CDLL("libcuda.so.1")

    def function(name):
        for candidate in (name + "_v2", name):
            try:
                return getattr(cuda, candidate)
            except AttributeError:
                continue
        raise AttributeError(name)
    return function("cuStreamWaitValue32"), function("cuStreamWriteValue32")


def worker(rank, opts, pipe, barrier):
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1" if rank == 0 else "1,0"
    import cupy as cp
    import nccl.core as nc

    wait_value, write_value = _driver()
    for f in (wait_value, write_value):
        f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    cp.cuda.Device(0).use()
    if rank == 0:
        uid = nc.get_unique_id()
        pipe.send(uid.as_bytes)
    else:
        uid = nc.UniqueId.from_bytes(pipe.recv())
    comm = nc.Communicator.init(2, rank, uid)
    cp.zeros(1)  # the primary context made current, for the driver's calls
    from hybridla.backend._driver import stream_create, stream_priority_range
    least, greatest = stream_priority_range()
    comm_stream = cp.cuda.ExternalStream(stream_create(greatest))
    gemm_stream = cp.cuda.ExternalStream(stream_create(least))
    delay_out = cp.zeros((opts.m, opts.delay_cols))
    buf = cp.zeros(opts.mb * (1 << 20) // 8)
    m, k = opts.m, opts.k
    a, b = cp.random.standard_normal((m, k)), cp.random.standard_normal((k, m))
    c = cp.zeros((m, m))
    if rank == 1:  # the flag, in memory of its own so that its IPC handle is its address
        flag = cp.cuda.runtime.malloc(4)
        cp.cuda.runtime.memset(flag, 0, 4)
        pipe.send(cp.cuda.runtime.ipcGetMemHandle(flag))
    else:
        peer_flag = cp.cuda.runtime.ipcOpenMemHandle(pipe.recv())
    comm.broadcast(buf, buf, 0, stream=comm_stream.ptr)  # NCCL connects at its first
    comm_stream.synchronize()
    rounds = 0
    results = {}
    for number, way in enumerate(opts.ways.split(",")):
        gemm_ms, bcast_ms = [], []
        for _ in range(opts.repeat + 1):
            rounds += 1
            cp.cuda.Device(0).synchronize()
            barrier.wait()
            start = cp.cuda.Event()
            start.record(gemm_stream)
            comm_stream.wait_event(start)
            if rank == 1:
                with gemm_stream:
                    for _ in range(opts.gemms):
                        cp.matmul(a, b, out=c)
                gemm_end = cp.cuda.Event()
                gemm_end.record(gemm_stream)
                if way == "gated":
                    status = wait_value(comm_stream.ptr, flag, rounds, 0)  # GEQ
                    assert status == 0, status
            else:
                with comm_stream:
                    for _ in range(opts.delay_gemms):
                        cp.matmul(a, b[:, :opts.delay_cols], out=delay_out)
                if way == "gated":
                    status = write_value(comm_stream.ptr, peer_flag, rounds, 0)
                    assert status == 0, status
            if way != "none":
                comm.broadcast(buf, buf, 0, stream=comm_stream.ptr)
            bcast_end = cp.cuda.Event()
            bcast_end.record(comm_stream)
            cp.cuda.Device(0).synchronize()
            if rank == 1:
                gemm_ms.append(cp.cuda.get_elapsed_time(start, gemm_end))
                bcast_ms.append(cp.cuda.get_elapsed_time(start, bcast_end))
        if rank == 1:
            results[f"{way} ({number})"] = (statistics.median(gemm_ms[1:]), statistics.median(bcast_ms[1:]),
                            gemm_ms[1:], bcast_ms[1:])
    if rank == 0:
        cp.cuda.runtime.ipcCloseMemHandle(peer_flag)
    comm.destroy()
    pipe.send(results)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--m", type=int, default=16384)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--gemms", type=int, default=3)
    parser.add_argument("--delay-gemms", type=int, default=4)
    parser.add_argument("--delay-cols", type=int, default=4096)
    parser.add_argument("--ways", default="none,posted,gated,posted,gated")
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    pipes = [ctx.Pipe() for _ in range(2)]
    # rank 0's pipe end talks to rank 1's through the parent: relay the two messages
    procs = [ctx.Process(target=worker, args=(r, opts, pipes[r][1], barrier)) for r in range(2)]
    for p in procs:
        p.start()

    def receive(rank):  # from a child, or an error once either has died
        while not pipes[rank][0].poll(1.0):
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                raise SystemExit("a rank failed")
        return pipes[rank][0].recv()

    pipes[1][0].send(receive(0))  # NCCL's unique id, to rank 1
    pipes[0][0].send(receive(1))  # the flag's IPC handle, to rank 0
    receive(0)  # rank 0's empty results
    results = receive(1)
    for p in procs:
        p.join()
    flops = 2.0 * opts.m * opts.m * opts.k * opts.gemms
    for way, (gemm, bcast, gemms, bcasts) in results.items():
        print(f"{way}: receiver's gemms {gemm:.2f} ms ({flops / gemm / 1e9:.1f} TFLOP/s), "
              f"broadcast ends at {bcast:.2f} ms (gemm runs {', '.join(f'{x:.2f}' for x in gemms)};"
              f" broadcast {', '.join(f'{x:.2f}' for x in bcasts)})", flush=True)


if __name__ == "__main__":
    main()
