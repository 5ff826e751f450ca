"""The client: thin, typed wrappers over anvil.v1's Training and Serving services."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import tempfile
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from anvil_client._gen import anvil_pb2 as pb
from anvil_client._gen import anvil_pb2_grpc as rpc

_DTYPES = {
    pb.FLOAT32: np.float32, pb.FLOAT64: np.float64, pb.FLOAT16: np.float16, pb.INT64: np.int64,
    pb.INT32: np.int32, pb.UINT8: np.uint8, pb.BOOL: np.bool_,
}
_TERMINAL = {pb.SUCCEEDED, pb.FAILED, pb.CANCELLED}


class AnvilError(Exception):
    """A failed call: `code` is the gRPC status code (grpc.StatusCode), `message` the server's."""

    def __init__(self, what: str, code: grpc.StatusCode, message: str):
        super().__init__(f"{what}: {message} ({code.name})")
        self.code, self.message = code, message


@dataclasses.dataclass
class Job:
    id: str
    name: str
    state: str
    step: int
    epoch: int
    reason: str
    model_name: str
    model_version: int

    @staticmethod
    def of(j: pb.Job) -> "Job":
        return Job(j.id, j.name, pb.JobState.Name(j.state), j.step, j.epoch, j.reason, j.model_name, j.model_version)


@dataclasses.dataclass
class MetricEvent:
    """One event of a job's stream: a step's metrics, an epoch's, or a state change."""
    seq: int
    step: int
    epoch: int
    kind: str                       # "step", "epoch", "state", "finding" or "checked"
    loss: Optional[float] = None    # step: the interval's training loss; epoch: the epoch's
    lr: Optional[float] = None
    grad_norm: Optional[float] = None
    val_loss: Optional[float] = None
    val_accuracy: Optional[float] = None
    state: Optional[str] = None
    message: str = ""
    loss_scale: Optional[float] = None   # step, float16 jobs: GradScaler's loss scale
    skipped_steps: Optional[int] = None  # step, float16 jobs: steps skipped so far
    finding: Optional[dict] = None       # finding: the training doctor's (code, severity, evidence, advice)
    checked: Optional[List[str]] = None  # checked: the doctor's rules that could decide from here on

    @staticmethod
    def of(e: pb.MetricEvent) -> "MetricEvent":
        which = e.WhichOneof("event")
        if which == "step_metrics":
            m = e.step_metrics
            scaled = m.loss_scale > 0
            return MetricEvent(e.seq, e.step, e.epoch, "step", loss=m.loss, lr=m.lr, grad_norm=m.grad_norm,
                               loss_scale=m.loss_scale if scaled else None,
                               skipped_steps=m.skipped_steps if scaled else None)
        if which == "epoch_metrics":
            m = e.epoch_metrics
            return MetricEvent(e.seq, e.step, e.epoch, "epoch", loss=m.train_loss,
                               val_loss=m.val_loss if m.has_val_loss else None,
                               val_accuracy=m.val_accuracy if m.has_val_accuracy else None)
        if which == "finding":
            return MetricEvent(e.seq, e.step, e.epoch, "finding", message=e.finding.advice,
                               finding=_finding(e.finding))
        if which == "checked":
            return MetricEvent(e.seq, e.step, e.epoch, "checked", checked=list(e.checked.codes))
        return MetricEvent(e.seq, e.step, e.epoch, "state", state=pb.JobState.Name(e.state), message=e.message)


def _finding(f: pb.Finding) -> dict:
    return {"code": f.code, "severity": f.severity, "first_step": f.first_step, "last_step": f.last_step,
            "evidence": {e.name: e.value for e in f.evidence}, "advice": f.advice}


@dataclasses.dataclass
class Prediction:
    model: str
    version: int
    outputs: Dict[str, np.ndarray]
    top_k: List[List[tuple]]  # per row: (class, label, probability), most probable first


def _tensor(name: str, x: np.ndarray) -> pb.Tensor:
    x = np.ascontiguousarray(x)
    for code, dtype in _DTYPES.items():
        if x.dtype == dtype:
            return pb.Tensor(name=name, dtype=code, shape=list(x.shape), raw=x.astype(x.dtype.newbyteorder("<")).tobytes())
    raise TypeError(f"predict: arrays of {x.dtype} are not served; use float32, float64, float16, int64, int32, uint8 or bool")


def _array(t: pb.Tensor) -> np.ndarray:
    return np.frombuffer(t.raw, dtype=np.dtype(_DTYPES[t.dtype]).newbyteorder("<")).reshape(list(t.shape))


# Calls that are safe to repeat retry UNAVAILABLE (a server restarting, draining, or not yet
# listening) with gRPC's own retry policy: up to 5 attempts over about 3 s. SubmitJob (safe only
# with a client_job_id), DeleteJob and the streams are left to the caller. Calls spread
# round-robin over the addresses given (replicas), each checked with the standard health
# protocol: a draining replica (NOT_SERVING) is skipped.
_RETRY_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    "methodConfig": [{
    "name": [{"service": "anvil.v1.Training", "method": m} for m in ("GetJob", "ListJobs", "CancelJob", "GetServerInfo")]
    + [{"service": "anvil.v1.Serving", "method": m} for m in ("Predict", "ListModels", "GetModel")],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.2s", "maxBackoff": "2s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]},
}]})


def _target(address: str) -> Tuple[str, str]:
    """gRPC's target for `address` (HOST:PORT, HOST:PORT,HOST:PORT,... for replicas, or a target
    URI such as dns:///NAME:PORT), and the first host named (TLS: the certificate's name)."""
    if "," not in address:
        host = address.rsplit(":", 1)[0].strip("[]") if "://" not in address else ""
        return address, host
    v4, v6, first = [], [], ""
    for item in filter(None, (a.strip() for a in address.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port:
            raise ValueError(f"expected HOST:PORT, got {item!r}")
        host = host.strip("[]")
        first = first or host
        family, _, _, _, sockaddr = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0]
        (v4 if family == socket.AF_INET else v6).append(
            f"{sockaddr[0]}:{port}" if family == socket.AF_INET else f"[{sockaddr[0]}]:{port}")
    chosen = v4 or v6
    return ("ipv4:" if v4 else "ipv6:") + ",".join(chosen), first


class Client:
    """anvild at `address`, or replicas at "HOST:PORT,HOST:PORT,..." (or dns:///NAME:PORT), with
    calls spread round-robin over the healthy ones. `token`: a bearer token (or $ANVIL_TOKEN);
    `tls_ca` (PEM path) connects over TLS, `tls_cert` / `tls_key` add a client certificate."""

    def __init__(self, address: str = "127.0.0.1:50051", token: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 timeout: float = 30.0):
        options = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20),
                   ("grpc.enable_retries", 1), ("grpc.service_config", _RETRY_CONFIG)]
        address, first_host = _target(address)
        if (tls_ca or tls_cert) and address.startswith("ipv"):
            options.append(("grpc.ssl_target_name_override", first_host))
        if tls_ca or tls_cert:
            def read(p):
                with open(p, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(read(tls_ca) if tls_ca else None,
                                                 read(tls_key) if tls_key else None,
                                                 read(tls_cert) if tls_cert else None)
            self._channel = grpc.secure_channel(address, creds, options)
        else:
            self._channel = grpc.insecure_channel(address, options)
        token = token if token is not None else os.environ.get("ANVIL_TOKEN", "")
        self._metadata = [("authorization", "Bearer " + token)] if token else []
        self._timeout = timeout
        self._training = rpc.TrainingStub(self._channel)
        self._serving = rpc.ServingStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, what, method, request, timeout=None):
        try:
            return method(request, metadata=self._metadata, timeout=timeout or self._timeout)
        except grpc.RpcError as e:
            raise AnvilError(what, e.code(), e.details()) from None

    # --- training -------------------------------------------------------------------------
    def submit(self, spec: Union[dict, pb.JobSpec], dry_run: bool = False) -> Job:
        """Submits a job (a JobSpec, or a dict of its JSON form)."""
        if isinstance(spec, dict):
            spec = json_format.ParseDict(spec, pb.JobSpec())
        resp = self._call("submit", self._training.SubmitJob, pb.SubmitJobRequest(spec=spec, dry_run=dry_run))
        return Job.of(resp.job)

    def job(self, job_id: str) -> Job:
        return Job.of(self._call(f"job {job_id}", self._training.GetJob, pb.GetJobRequest(job_id=job_id)))

    def jobs(self, state: Optional[str] = None, limit: Optional[int] = None) -> List[Job]:
        """Jobs, newest first (summaries: `job()` has the spec), read page by page; at most
        `limit` of them when given."""
        states = [pb.JobState.Value(state.upper())] if state else []
        out: List[Job] = []
        token = ""
        while limit is None or len(out) < limit:
            size = 1000 if limit is None else min(1000, limit - len(out))
            resp = self._call("jobs", self._training.ListJobs,
                              pb.ListJobsRequest(states=states, page_size=size, page_token=token))
            out.extend(Job.of(j) for j in resp.jobs)
            token = resp.next_page_token
            if not token:
                break
        return out

    def findings(self, job_id: str) -> List[dict]:
        """The training doctor's findings on a job so far, most severe first: dicts of code,
        severity, first_step, last_step, evidence ({name: value}) and advice (docs/doctor.md)."""
        resp = self._call(f"findings {job_id}", self._training.GetFindings, pb.GetFindingsRequest(job_id=job_id))
        return [_finding(f) for f in resp.findings]

    def checks(self, job_id: str) -> dict:
        """What the training doctor has checked on a job: {"healthy": [codes checked that did
        not fire], "not_checked": {code: what it needs}} (rules that apply but have had too
        little to decide on so far; docs/doctor.md)."""
        resp = self._call(f"checks {job_id}", self._training.GetFindings, pb.GetFindingsRequest(job_id=job_id))
        return {"healthy": list(resp.healthy), "not_checked": {u.code: u.needs for u in resp.not_checked}}

    def delete(self, job_id: str) -> None:
        """Deletes a finished job with its metric history and files (its model stays)."""
        self._call(f"delete {job_id}", self._training.DeleteJob, pb.DeleteJobRequest(job_id=job_id))

    def cancel(self, job_id: str) -> Job:
        return Job.of(self._call(f"cancel {job_id}", self._training.CancelJob, pb.CancelJobRequest(job_id=job_id)))

    def watch(self, job_id: str, from_step: int = 0, retries: int = 60) -> Iterator[MetricEvent]:
        """The job's events from `from_step` until it ends. A broken stream is reopened from
        the step after the last one seen (events already seen are not repeated)."""
        next_step, last_seq, failures = from_step, 0, 0
        while True:
            stream = self._training.StreamMetrics(pb.StreamMetricsRequest(job_id=job_id, from_step=next_step),
                                                  metadata=self._metadata)
            ended = False
            try:
                for e in stream:
                    failures = 0
                    if e.seq <= last_seq:  # a reopened stream replays the state events
                        continue
                    last_seq = e.seq
                    if e.WhichOneof("event") in ("step_metrics", "epoch_metrics"):
                        next_step = max(next_step, e.step + 1)
                    event = MetricEvent.of(e)
                    yield event
                    if e.WhichOneof("event") == "state" and e.state in _TERMINAL:
                        ended = True
                if ended:
                    return
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    raise AnvilError(f"watch {job_id}", e.code(), e.details()) from None
            failures += 1
            if failures > retries:
                raise AnvilError(f"watch {job_id}", grpc.StatusCode.UNAVAILABLE, "gave up reconnecting")
            time.sleep(1.0)

    # --- serving --------------------------------------------------------------------------
    def predict(self, model: str, x: np.ndarray, version: str = "latest", top_k: int = 3,
                input_name: str = "input") -> Prediction:
        """Runs `model` on `x` ([N, *input shape]); the outputs come back as arrays."""
        req = pb.PredictRequest(model=model, version=str(version), inputs=[_tensor(input_name, x)], top_k=top_k)
        resp = self._call(f"predict {model}", self._serving.Predict, req)
        return Prediction(resp.model, resp.version, {t.name: _array(t) for t in resp.outputs},
                          [list(zip(t.classes, t.labels, t.probabilities)) for t in resp.top_k])

    def quantize(self, model: str, version: str = "latest", mode: str = "static", observer: str = "histogram",
                 calibration_batches: int = 16, max_accuracy_drop: float = 1.0,
                 per_tensor_weights: bool = False, dataset: Optional[dict] = None,
                 seed: int = 0, keep_float: Sequence[str] = ()) -> pb.QuantizeResponse:
        """Quantizes a registered model to int8 (scope train): calibrated on the training split of
        `dataset` (default: the dataset of the job that trained it) and gated on its validation
        split. An imported ONNX graph is quantized statically and needs `dataset` (`seed`: the
        seed a generated dataset and its split follow). The reply says whether the int8 version
        was registered (`registered`, `model`), both accuracies, and the layers' quantization
        errors, worst first. `keep_float` leaves layers in float32, by the paths those errors
        report ("3", "2.body.0"), or an imported graph's node names."""
        spec = pb.QuantizeSpec(mode=mode, observer=observer, calibration_batches=calibration_batches,
                               max_accuracy_drop=max_accuracy_drop, per_tensor_weights=per_tensor_weights,
                               keep_float=list(keep_float))
        req = pb.QuantizeRequest(model=model, version=str(version), spec=spec, seed=seed)
        if dataset is not None:
            json_format.ParseDict(dataset, req.dataset)
        return self._call(f"quantize {model}", self._serving.Quantize, req, timeout=600)

    def register_model(self, name: str, path: str, labels: Sequence[str] = ()) -> pb.Model:
        """Registers the ONNX file at `path` as the next version of model `name` (scope train);
        returns the model's description. A file the server cannot serve raises AnvilError
        INVALID_ARGUMENT naming its unsupported operators."""
        with open(path, "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        step = 1 << 20

        def chunks():
            yield pb.RegisterModelChunk(name=name, labels=list(labels), data=data[:step],
                                        sha256=digest if len(data) <= step else "")
            for at in range(step, len(data), step):
                yield pb.RegisterModelChunk(data=data[at:at + step], sha256=digest if at + step >= len(data) else "")

        try:
            return self._serving.RegisterModel(chunks(), metadata=self._metadata, timeout=600)
        except grpc.RpcError as e:
            raise AnvilError(f"register_model {name}", e.code(), e.details()) from None

    def export(self, model: str, path: str, format: str = "native", version: str = "latest",
               opset: int = 0, dynamic_axes: Sequence[str] = (), verify: bool = False,
               fold_batch_norm: bool = False) -> str:
        """Writes the model to `path` (a temporary file, checked against the size and SHA-256
        the server sends, then renamed); returns the SHA-256. ONNX only: `opset` (13 to 17, 0 for
        the default), `dynamic_axes`, symbolic axes beyond the batch ("input:1=seq"), and
        `verify`: the server runs the file in a second runtime first and refuses one that
        disagrees with the model (FAILED_PRECONDITION); `fold_batch_norm`: batch norms folded into
        the convolution or linear layer before them."""
        req = pb.ExportRequest(model=model, version=str(version), format=pb.ExportFormat.Value(format.upper()),
                               opset=opset, dynamic_axes=list(dynamic_axes), verify=verify,
                               fold_batch_norm=fold_batch_norm)
        digest, total, announced, sha = hashlib.sha256(), 0, -1, ""
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".export-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in self._serving.Export(req, metadata=self._metadata, timeout=600):
                    out.write(chunk.data)
                    digest.update(chunk.data)
                    total += len(chunk.data)
                    if chunk.sha256:
                        sha, announced = chunk.sha256, chunk.total_bytes
                out.flush()
                os.fsync(out.fileno())
            if announced != total or digest.hexdigest() != sha:
                raise AnvilError(f"export {model}", grpc.StatusCode.DATA_LOSS,
                                 f"received {total} bytes with SHA-256 {digest.hexdigest()}, "
                                 f"the server sent {announced} with {sha}")
            os.replace(tmp, path)
            return sha
        except grpc.RpcError as e:
            raise AnvilError(f"export {model}", e.code(), e.details()) from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def health(self) -> bool:
        """Whether the server answers SERVING (grpc.health.v1, from grpcio-health-checking)."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError:
            return False
        return resp.status == health_pb2.HealthCheckResponse.SERVING
