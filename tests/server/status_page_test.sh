#!/usr/bin/env bash
# The live status page in a real browser: headless Chromium (Debian's chromium) loads
# anvild's `/` while a job trains, and the loss curve it drew is checked point by point
# against /status.json through the DOM. A screenshot is kept as BUILD_DIR/status-page.png.
#   status_page_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" status
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n "${browser}" ]] || fail "chromium is missing (make deps-test installs Debian's chromium package)"
start_anvild
url="http://127.0.0.1:${metrics_port}"
cli=("${build}/client/anvil" --server "127.0.0.1:${grpc_port}")

# A job long enough to still run while the browser looks.
cat > "${work}/job.json" <<'JSON'
{"name": "status-page", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 400,
 "batch_size": 16, "seed": 3, "metric_interval": 25}
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
        --user-data-dir="${work}/profile" --virtual-time-budget=4000 --window-size=1100,700)
"${chrome[@]}" --dump-dom "${url}/" > "${work}/dom.html" 2> "${work}/chromium.log" \
  || { cat "${work}/chromium.log" >&2; fail "chromium could not load the page"; }
"${chrome[@]}" --screenshot="${build}/status-page.png" "${url}/" >> "${work}/chromium.log" 2>&1 \
  || { cat "${work}/chromium.log" >&2; fail "chromium could not take a screenshot"; }
[[ -s "${build}/status-page.png" ]] || fail "no screenshot"
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" \
  "${url}/status.json" > "${work}/status.json" || fail "/status.json"

# The chart in the DOM against the data: the page maps (step, loss) to pixels over the
# range of the points it had; invert nothing, recompute the same mapping from /status.json
# (history is append-only, so the page's points are a prefix of today's) and compare.
python3 - "${work}/dom.html" "${work}/status.json" "${id}" <<'PY'
import json, math, re, sys
dom, status, job = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]
assert "<b>status-page</b>" in dom, "the job's chart title is missing"
svg = re.search(r'<svg[^>]*data-job="%s"[^>]*data-points="(\d+)" data-scale="(\w+)"[^>]*>(.*?)</svg>' % re.escape(job),
                dom, re.S)
assert svg, "no chart for the job in the DOM"
n = int(svg.group(1))
def points(cls):
    m = re.search(r'<polyline class="%s" points="([^"]*)"' % cls, svg.group(3))
    return [tuple(map(float, p.split(","))) for p in m.group(1).split()] if m else []
train_px, val_px = points("train"), points("val")
assert len(train_px) == n >= 10, (len(train_px), n)
assert val_px, "no validation curve"
row = re.search(r"<tr><td>%s</td>.*?</tr>" % re.escape(job), dom, re.S)
assert row and "RUNNING" in row.group(0), "the jobs table should show the job running"
x_range = re.search(r"step (\d+) \.\. (\d+)", svg.group(3))
last_step = int(x_range.group(2))
data = next(j for j in status["jobs"] if j["id"] == job)
train = data["train_loss"][:n]
val = [p for p in data["val_loss"] if p[0] <= last_step][:len(val_px)]
assert len(val) == len(val_px), (len(val), len(val_px))
pts = train + val
x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
# Log scale when the losses span more than two decades.
log = y0 > 0 and y1 / y0 > 100
assert svg.group(2) == ("log" if log else "linear"), svg.group(2)
f = math.log10 if log else (lambda v: v)
w, h = 480, 240
sx = lambda x: 40 + (w - 50) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)
sy = lambda y: 10 + (h - 30) * ((1 - (f(y) - f(y0)) / (f(y1) - f(y0))) if y1 > y0 else 0.5)
for (px, py), (x, y) in zip(train_px + val_px, train + val):
    assert abs(px - sx(x)) <= 0.051 and abs(py - sy(y)) <= 0.051, ((px, py), (sx(x), sy(y)), (x, y))
# The curve falls: training works and the page shows it (SVG y grows downwards).
assert train_px[-1][1] > train_px[0][1], "the drawn loss should fall"
print(f"status page: {n} train and {len(val_px)} validation points ({svg.group(2)} scale) match /status.json")
PY
"${cli[@]}" cancel "${id}" > /dev/null || true
echo "screenshot: ${build}/status-page.png"
