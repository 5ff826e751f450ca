#!/usr/bin/env bash
# The live status page in a real browser: headless Chromium (Debian's chromium) loads anvild's
# `/` while a job trains, and every chart it drew is checked point by point against
# /status.json through the DOM; a provoked finding (raw [0, 255] inputs: INPUT_NOT_NORMALIZED)
# is listed beside the charts and marked on them; the served model's row carries its requests.
# Screenshots are kept as BUILD_DIR/status-page.png (1280x800) and status-page-phone.png.
#   status_page_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" status
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n "${browser}" ]] || fail "chromium is missing (make deps-test installs Debian's chromium package)"
start_anvild
url="http://127.0.0.1:${metrics_port}"
cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")

# 1. A short job on raw pixel values: the doctor's INPUT_NOT_NORMALIZED fires on its first
# batch; its model is served next. Its name carries markup, which the page must escape.
mkdir -p "${work}/data"
write_pixels_csv "${work}/data/pixels.csv"
cat > "${work}/pixels.json" <<'JSON'
{"name": "pixels", "model_preset": "mlp", "dataset": {"path": "pixels.csv"}, "epochs": 2, "batch_size": 16,
 "metric_interval": 1}
JSON
"${cli[@]}" submit "${work}/pixels.json" --watch > /dev/null || fail "the raw-pixel job failed"

# 2. Requests to its model, some refused (a wrong shape), sent with the generated stubs.
/usr/bin/python3 - "127.0.0.1:${grpc_port}" "${build}/python" <<'PY' || fail "predict traffic"
import struct, sys
sys.path.insert(0, sys.argv[2])
import grpc
from anvil.v1 import anvil_pb2 as pb, anvil_pb2_grpc as rpc
serving = rpc.ServingStub(grpc.insecure_channel(sys.argv[1]))
good = pb.PredictRequest(model="pixels", inputs=[pb.Tensor(dtype=pb.FLOAT32, shape=[2, 3], raw=struct.pack("<6f", *range(6)))])
bad = pb.PredictRequest(model="pixels", inputs=[pb.Tensor(dtype=pb.FLOAT32, shape=[1, 2], raw=b"\0" * 8)])
for i in range(40):
    serving.Predict(good, timeout=10)
    if i % 4 == 0:
        try:
            serving.Predict(bad, timeout=10)
        except grpc.RpcError:
            pass
PY

# 3. A float16 job long enough to still run while the browser looks: every chart has data
# (the loss scale too).
cat > "${work}/job.json" <<'JSON'
{"name": "status-page", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 400,
 "batch_size": 16, "seed": 3, "metric_interval": 25, "precision": "fp16"}
JSON
id=$("${cli[@]}" --json submit "${work}/job.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['job']['id'])")
python3 - "${url}" "${id}" <<'PY' || fail "the job did not report 10 training losses"
import json, sys, time, urllib.request
url, job = sys.argv[1], sys.argv[2]
for _ in range(300):
    jobs = json.load(urllib.request.urlopen(url + "/status.json", timeout=5))["jobs"]
    mine = [j for j in jobs if j["id"] == job]
    if mine and len(mine[0]["train_loss"]) >= 10 and mine[0]["val_loss"]:
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PY

chrome=("${browser}" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run
        --user-data-dir="${work}/profile" --virtual-time-budget=4000)
"${chrome[@]}" --window-size=1280,800 --dump-dom "${url}/" > "${work}/dom.html" 2> "${work}/chromium.log" \
  || { cat "${work}/chromium.log" >&2; fail "chromium could not load the page"; }
"${chrome[@]}" --window-size=1280,800 --screenshot="${build}/status-page.png" "${url}/" >> "${work}/chromium.log" 2>&1 \
  || { cat "${work}/chromium.log" >&2; fail "chromium could not take a screenshot"; }
"${chrome[@]}" --window-size=390,844 --screenshot="${build}/status-page-phone.png" "${url}/" >> "${work}/chromium.log" 2>&1 \
  || { cat "${work}/chromium.log" >&2; fail "chromium could not take the phone-width screenshot"; }
[[ -s "${build}/status-page.png" && -s "${build}/status-page-phone.png" ]] || fail "no screenshot"
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" \
  "${url}/status.json" > "${work}/status.json" || fail "/status.json"

# The charts in the DOM against the data: the page maps (step, value) to pixels over the range
# of the points it had; recompute the same mapping independently from /status.json (history is
# append-only, so the page's points are a prefix of today's) and compare every point.
python3 - "${work}/dom.html" "${work}/status.json" "${id}" <<'PY'
import html, json, math, re, sys
dom, status, running = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]
jobs = {j["id"]: j for j in status["jobs"]}
pixels = next(j for j in status["jobs"] if j["name"] == "pixels")
W, H = 480, 200
# Chart id -> (its series, whether a log scale is allowed, a fixed y range).
charts = {"loss": (["train_loss", "val_loss"], True, None), "accuracy": (["val_accuracy"], False, None),
          "grad_norm": (["grad_norm"], True, None), "lr": (["lr"], False, None),
          "samples_per_second": (["samples_per_second"], False, None),
          "data_wait": (["data_wait_ratio"], False, (0, 1)), "loss_scale": (["loss_scale"], True, None)}

def svgs(job_id):
    return {m.group(2): m for m in re.finditer(
        r'<svg viewBox="0 0 %d %d" data-job="%s" data-chart="(([a-z_]+))" data-points="(\d+)" data-scale="(\w+)">(.*?)</svg>'
        % (W, H, re.escape(job_id)), dom, re.S)}

def check_job(job_id, expect_charts):
    found = svgs(job_id)
    assert set(expect_charts) <= set(found), (job_id, sorted(found))
    drawn_steps = None
    for name, m in found.items():
        series, may_log, fixed = charts[name]
        body = m.group(5)
        # The page's x range: the step span it drew (every chart shares it).
        x0, x1 = map(int, re.search(r"step (\d+) \.\. (\d+)", body).groups())
        drawn_steps = drawn_steps or (x0, x1)
        assert (x0, x1) == drawn_steps, ("one step axis", name, (x0, x1), drawn_steps)
        data = jobs[job_id]
        lines = {}
        for s in series:
            pl = re.search(r'<polyline class="%s s\d" data-series="%s" points="([^"]*)"' % (s, s), body)
            lines[s] = [tuple(map(float, p.split(","))) for p in pl.group(1).split()] if pl else []
        assert sum(map(len, lines.values())) == int(m.group(3)) > 0, (name, "no points")
        pts = {s: [p for p in data[s] if p[0] <= x1][:len(lines[s])] for s in series}
        for s in series:
            assert len(pts[s]) == len(lines[s]), (name, s, len(pts[s]), len(lines[s]))
        ys = [p[1] for s in series for p in pts[s]]
        y0, y1 = fixed if fixed else (min(ys), max(ys))
        log = may_log and y0 > 0 and y1 / y0 > 100
        assert m.group(4) == ("log" if log else "linear"), (name, m.group(4))
        f = math.log10 if log else (lambda v: v)
        sx = lambda x: 40 + (W - 50) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)
        sy = lambda y: 10 + (H - 30) * ((1 - (f(y) - f(y0)) / (f(y1) - f(y0))) if y1 > y0 else 0.5)
        for s in series:
            for (px, py), (x, y) in zip(lines[s], pts[s]):
                assert abs(px - sx(x)) <= 0.006 and abs(py - sy(y)) <= 0.006, (name, s, (px, py), (sx(x), sy(y)))
        # Each finding fired inside the drawn span is marked where it fired.
        for fd in data["findings"]:
            if x0 <= fd["last_step"] <= x1:
                mark = re.search(r'<line class="mark %s" data-code="%s" x1="([\d.]+)"' % (fd["severity"], fd["code"]), body)
                assert mark and abs(float(mark.group(1)) - sx(fd["last_step"])) <= 0.006, (name, fd["code"])
    return found

running_charts = check_job(running, list(charts))
row = re.search(r"<tr><td>%s</td>.*?</tr>" % re.escape(running), dom, re.S)
assert row and "RUNNING" in row.group(0), "the jobs table should show the job running"
train = [tuple(map(float, p.split(","))) for p in
         re.search(r'data-series="train_loss" points="([^"]*)"', running_charts["loss"].group(5)).group(1).split()]
assert train[-1][1] > train[0][1], "the drawn loss should fall (SVG y grows downwards)"

# The provoked finding: listed beside the charts with its evidence and advice (escaped), and
# marked on the pixel job's charts.
check_job(pixels["id"], ["loss", "grad_norm", "lr"])
codes = [f["code"] for f in pixels["findings"]]
assert "INPUT_NOT_NORMALIZED" in codes, codes
aside = re.search(r'<aside class="findings" data-job="%s">(.*?)</aside>' % re.escape(pixels["id"]), dom, re.S)
assert aside, "no findings panel for the pixel job"
for fd in pixels["findings"]:
    item = re.search(r'<div class="finding %s" data-code="%s"><b>%s</b>(.*?)</div></div>'
                     % (fd["severity"], fd["code"], fd["code"]), aside.group(1), re.S)
    assert item, ("finding not listed", fd["code"])
    # The DOM serialises text escaping &, < and > only.
    assert html.escape(fd["advice"], quote=False) in item.group(1), "advice missing"
    for k in fd["evidence"]:
        assert html.escape(k) + " = " in item.group(1), ("evidence missing", k)
assert '<p class="none">none so far</p>' in re.search(
    r'<aside class="findings" data-job="%s">(.*?)</aside>' % re.escape(running), dom, re.S).group(1) or \
    jobs[running]["findings"], "a job with no findings says so"

# The served model: its versions with precision, and requests, latency and errors.
model = re.search(r'<tr data-model="pixels">(.*?)</tr>', dom, re.S)
assert model, "the served model is not listed"
cells = re.findall(r"<td[^>]*>(.*?)</td>", model.group(1))
assert cells[1].startswith("v1 fp32"), cells
rate, p50, p99 = float(cells[2]), float(cells[3]), float(cells[4])
assert rate > 0 and 0 < p50 <= p99, cells
mean, peak = cells[5].split(" / ")
assert float(mean) >= 1 and int(peak) >= 2, cells
window_errors, total_errors = map(int, cells[6].split(" / "))
assert window_errors == total_errors == 10, cells
served = next(m for m in status["models"] if m["name"] == "pixels")
assert served["requests_total"] == 50 and served["errors_total"] == 10, served
print(f"status page: {len(running_charts)} charts of the running job match /status.json point by point; "
      f"findings {codes} listed and marked; model row {cells[2:]}")
PY
"${cli[@]}" cancel "${id}" > /dev/null || true
echo "screenshots: ${build}/status-page.png ${build}/status-page-phone.png"
