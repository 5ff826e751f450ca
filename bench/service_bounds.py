#!/usr/bin/env python3
"""What hostile and crowded clients cost a running anvild: its threads, resident memory and
the latency of an ordinary call, measured from /proc while the case runs.

  python3 bench/service_bounds.py BUILD_DIR      (needs grpcio; no generated code: raw bytes)

Cases:
  streams     500 StreamMetrics streams on one training job (reactors: no thread each)
  modelinfer  128 ModelInfers at once (Predict's pool: 64 running, the rest queued)
  empty       an 8 MiB ModelInfer of empty `inputs` entries (refused on the wire)
  listjobs    ListJobs latency with the 500 streams replaying
Prints a markdown table; the CPU is named from /proc/cpuinfo.
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import grpc


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(n, wire, payload):
    tag = varint(n << 3 | wire)
    if wire == 2:
        return tag + varint(len(payload)) + payload
    return tag + varint(payload)


def text(n, s):
    return field(n, 2, s.encode())


def read_varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def field_bytes(msg, number):
    """The first length-delimited field `number` of a message's wire bytes."""
    i = 0
    while i < len(msg):
        tag, i = read_varint(msg, i)
        wire = tag & 7
        if wire == 0:
            _, i = read_varint(msg, i)
        elif wire == 2:
            n, i = read_varint(msg, i)
            if tag >> 3 == number:
                return msg[i:i + n]
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
    return b""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return int(out["Threads"]), int(out["VmRSS"].split()[0]) // 1024, int(out["VmHWM"].split()[0]) // 1024


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    build = sys.argv[1]
    work = tempfile.mkdtemp(prefix="anvil-bounds-")
    port, metrics = free_port(), free_port()
    server = subprocess.Popen(
        [f"{build}/server/anvild", "--address", f"127.0.0.1:{port}", "--metrics-address", f"127.0.0.1:{metrics}",
         "--data-dir", f"{work}/data"],
        stdout=open(f"{work}/anvild.log", "w"), stderr=subprocess.STDOUT)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    grpc.channel_ready_future(channel).result(timeout=30)
    unary = lambda m: channel.unary_unary(m, request_serializer=None, response_deserializer=None)
    submit, list_jobs = unary("/anvil.v1.Training/SubmitJob"), unary("/anvil.v1.Training/ListJobs")
    get_job, infer = unary("/anvil.v1.Training/GetJob"), unary("/inference.GRPCInferenceService/ModelInfer")
    stream = channel.unary_stream("/anvil.v1.Training/StreamMetrics", request_serializer=None,
                                  response_deserializer=None)

    def spec(name, epochs, model_name=None):
        s = text(1, name) + text(3, "mlp") + field(5, 2, text(1, "blobs")) + field(6, 0, 32) + field(7, 0, epochs)
        s += field(19, 0, 1)  # a metric event every step: a long history to replay
        return field(1, 2, s)

    rows = []
    # A model to serve, then a long job to watch.
    done = submit(spec("served", 2))
    job_id = field_bytes(field_bytes(done, 1), 1).decode()  # SubmitJobResponse.job -> Job.id
    for e in stream(field(1, 2, job_id.encode())):
        pass
    long = submit(spec("long", 100000))
    long_id = field_bytes(field_bytes(long, 1), 1).decode()
    time.sleep(5)  # a few thousand stored events
    base = proc_status(server.pid)
    rows.append(("idle, job training", *base, ""))

    def list_latency(n=5):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            list_jobs(b"")
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)

    # 500 streams on the long job, opened at once: their replays run while ListJobs is timed.
    calls, threads = [], []
    def follow(call):
        try:
            for _ in call:
                pass
        except grpc.RpcError:
            pass
    for _ in range(500):
        call = stream(field(1, 2, long_id.encode()))
        calls.append(call)
        t = threading.Thread(target=follow, args=(call,), daemon=True)
        t.start()
        threads.append(t)
    during = list_latency()
    time.sleep(3)
    th, rss, hwm = proc_status(server.pid)
    rows.append(("500 StreamMetrics streams", th, rss, hwm, f"ListJobs {during:.1f} ms during the replays"))
    for c in calls:
        c.cancel()
    time.sleep(1)

    # 128 ModelInfers at once.
    tensor = text(1, "input") + text(2, "FP32") + field(3, 2, varint(1) + varint(2))
    req = text(1, "served") + field(5, 2, tensor) + field(7, 2, b"\x00" * 8)
    peak = [0]
    stop = threading.Event()
    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc_status(server.pid)[0])
            time.sleep(0.005)
    sampler = threading.Thread(target=sample)
    sampler.start()
    futures = [infer.future(req) for _ in range(2000)]
    codes = {}
    for f in futures:
        try:
            f.result()
            codes["OK"] = codes.get("OK", 0) + 1
        except grpc.RpcError as e:
            codes[e.code().name] = codes.get(e.code().name, 0) + 1
    stop.set()
    sampler.join()
    th, rss, hwm = proc_status(server.pid)
    rows.append(("2,000 ModelInfers at once", peak[0], rss, hwm, ", ".join(f"{k} {v}" for k, v in sorted(codes.items()))))

    # 8 MiB of empty inputs.
    empty = text(1, "served") + field(5, 2, b"") * ((8 << 20) // 2)
    try:
        infer(empty)
        code = "OK"
    except grpc.RpcError as e:
        code = f"{e.code().name}: {e.details()[:80]}"
    th, rss, hwm = proc_status(server.pid)
    rows.append(("8 MiB ModelInfer of empty inputs", th, rss, hwm, code))
    rows.append(("after", *proc_status(server.pid), f"ListJobs {list_latency():.1f} ms"))

    server.terminate()
    server.wait(timeout=30)
    print(f"CPU: {cpu_name()}; anvild from {build}\n")
    print("| case | threads | RSS (MiB) | peak RSS (MiB) | notes |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |")


if __name__ == "__main__":
    main()
