#!/usr/bin/env python3
"""A Python client for anvild on the stubs protoc's gRPC Python plugin generates.

Submits a small training job, follows its metric stream to the end, predicts with the model
it produced, and exports the model, checking the SHA-256 the server announces.

    python3 anvil_client.py --server 127.0.0.1:50051 --stubs build/python

Needs python3-grpcio and python3-protobuf (Debian packages). Exit status 0 when every step
worked, 1 otherwise (the reason on stderr).
"""
import argparse
import hashlib
import os
import struct
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--stubs", default="build/python", help="folder holding anvil/v1/anvil_pb2*.py")
    parser.add_argument("--name", default="py-blobs")
    parser.add_argument("--token", default=os.environ.get("ANVIL_TOKEN", ""),
                        help="bearer token for a server that requires one (anvil token create); or $ANVIL_TOKEN")
    parser.add_argument("--tls-ca", default="", help="connect over TLS, trusting this CA (PEM)")
    parser.add_argument("--tls-cert", default="", help="mutual TLS: this client's certificate (PEM)")
    parser.add_argument("--tls-key", default="", help="mutual TLS: this client's private key (PEM)")
    args = parser.parse_args()
    sys.path.insert(0, args.stubs)
    import grpc
    from anvil.v1 import anvil_pb2 as pb
    from anvil.v1 import anvil_pb2_grpc as rpc

    if args.tls_ca or args.tls_cert:
        def read(path):
            with open(path, "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(args.tls_ca) if args.tls_ca else None,
            private_key=read(args.tls_key) if args.tls_key else None,
            certificate_chain=read(args.tls_cert) if args.tls_cert else None)
        channel = grpc.secure_channel(args.server, creds)
    else:
        channel = grpc.insecure_channel(args.server)
    md = [("authorization", "Bearer " + args.token)] if args.token else []
    training = rpc.TrainingStub(channel)
    serving = rpc.ServingStub(channel)

    spec = pb.JobSpec(name=args.name, model_preset="mlp", dataset=pb.DatasetSpec(name="blobs"),
                      epochs=3, batch_size=32, seed=3, metric_interval=5)
    job = training.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=30, metadata=md).job
    print(f"submitted {job.id}")

    seqs, last = [], None
    for event in training.StreamMetrics(pb.StreamMetricsRequest(job_id=job.id), timeout=300, metadata=md):
        seqs.append(event.seq)
        last = event
        if event.HasField("epoch_metrics"):
            m = event.epoch_metrics
            print(f"epoch {event.epoch + 1}: train loss {m.train_loss:.4f}, val accuracy {100 * m.val_accuracy:.1f} %")
    if seqs != list(range(1, len(seqs) + 1)):
        raise SystemExit(f"stream sequence numbers have gaps: {seqs}")
    if last is None or last.WhichOneof("event") != "state" or last.state != pb.SUCCEEDED:
        raise SystemExit(f"job did not succeed: {last}")

    rows = [(0.5, -1.0), (3.0, 2.5)]
    raw = b"".join(struct.pack("<2f", *r) for r in rows)
    request = pb.PredictRequest(model=args.name, top_k=2,
                                inputs=[pb.Tensor(name="input", dtype=pb.FLOAT32, shape=[len(rows), 2], raw=raw)])
    response = serving.Predict(request, timeout=30, metadata=md)
    out = response.outputs[0]
    if list(out.shape) != [2, 4] or out.dtype != pb.FLOAT32 or len(out.raw) != 2 * 4 * 4:
        raise SystemExit(f"unexpected output {out.shape} {out.dtype}")
    logits = struct.unpack("<8f", out.raw)
    for r, top in enumerate(response.top_k):
        best = max(range(4), key=lambda c: logits[4 * r + c])
        if top.classes[0] != best:
            raise SystemExit(f"top-1 class {top.classes[0]} is not the arg-max {best}")
        print(f"row {r}: class {top.labels[0]} ({100 * top.probabilities[0]:.1f} %)")

    # A bad request gets INVALID_ARGUMENT with a message naming the shapes.
    try:
        serving.Predict(pb.PredictRequest(model=args.name, inputs=[pb.Tensor(
            name="input", dtype=pb.FLOAT32, shape=[1, 3], raw=b"\0" * 12)]), timeout=30, metadata=md)
        raise SystemExit("a [1, 3] input was accepted by a [N, 2] model")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.INVALID_ARGUMENT or "[N, 2]" not in e.details():
            raise SystemExit(f"unexpected error for a bad shape: {e.code()} {e.details()}")

    data, digest, size = bytearray(), None, None
    for chunk in serving.Export(pb.ExportRequest(model=args.name, format=pb.NATIVE), timeout=60, metadata=md):
        data += chunk.data
        if chunk.sha256:
            digest, size = chunk.sha256, chunk.total_bytes
    if size != len(data) or hashlib.sha256(data).hexdigest() != digest:
        raise SystemExit("export: size or SHA-256 does not match")
    print(f"exported {len(data)} bytes, sha256 {digest[:16]}... verified")
    print("ok")


if __name__ == "__main__":
    main()
