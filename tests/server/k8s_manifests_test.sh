#!/usr/bin/env bash
# The Kubernetes manifests (deploy/k8s) offline: every resource valid against Kubernetes' own
# schemas, strictly (kubernetes-validate, from the peers' venv: scripts/install-test-peers.sh),
# and in step with anvild: every flag the Deployment passes is one anvild takes, every
# ANVILD_* variable one it reads, the ConfigMap's anvild.json a settings file it accepts, every
# file the kustomization lists present, and the probes the CLI's health check.
#   k8s_manifests_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/anvild_lib.sh" "$1" k8s
src="$(cd "$2" && pwd)"
use_peer_python "${src}" kubernetes_validate yaml
cd "${src}/deploy/k8s"
resources=$("${python}" -c "import yaml; print(' '.join(yaml.safe_load(open('kustomization.yaml'))['resources']))")
for f in ${resources}; do [[ -f "${f}" ]] || fail "kustomization.yaml lists ${f}, which is missing"; done
# shellcheck disable=SC2086
"$(dirname "${python}")/kubernetes-validate" --strict --quiet ${resources} || fail "a manifest is not valid Kubernetes"
echo "  kubernetes-validate --strict: ${resources}"

"${build}/server/anvild" --help > "${work}/help.txt"
"${python}" - "${work}" "${build}/server/anvild" ${resources} <<'PY' || fail "the manifests do not match anvild"
import json, subprocess, sys, yaml
work, anvild, files = sys.argv[1], sys.argv[2], sys.argv[3:]
help_text = open(f"{work}/help.txt").read()
binary = open(anvild, "rb").read()
docs = [d for f in files for d in yaml.safe_load_all(open(f)) if d]
deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "anvild")
container = deployment["spec"]["template"]["spec"]["containers"][0]
flags = [a for a in container.get("args", []) if a.startswith("--")]
for flag in flags:
    assert f"{flag} " in help_text or f"{flag}," in help_text or help_text.count(flag) > 0, f"anvild has no {flag}"
for env in container.get("env", []):
    if env["name"].startswith("ANVILD_"):
        assert env["name"].encode() in binary, f"anvild does not read {env['name']}"
for probe in ("readinessProbe", "livenessProbe"):
    cmd = container[probe]["exec"]["command"]
    assert cmd[0] == "anvil" and cmd[-1] == "health", f"{probe}: {cmd}"
# The settings file: anvild reads it before anything else (--repair then only reports).
config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "anvild-config")
open(f"{work}/anvild.json", "w").write(config["data"]["anvild.json"])
json.loads(config["data"]["anvild.json"])
run = subprocess.run([anvild, "--config", f"{work}/anvild.json", "--data-dir", f"{work}/data", "--repair"],
                     capture_output=True, text=True)
assert run.returncode == 0 and "unknown setting" not in run.stderr, run.stderr
# The Service and the headless Service select the Deployment's pods; the PDB too.
labels = deployment["spec"]["template"]["metadata"]["labels"]
for d in docs:
    selector = d.get("spec", {}).get("selector")
    if d["kind"] == "Service" and d["metadata"]["name"].startswith("anvild"):
        assert all(labels.get(k) == v for k, v in selector.items()), d["metadata"]["name"]
    if d["kind"] == "PodDisruptionBudget":
        assert all(labels.get(k) == v for k, v in selector["matchLabels"].items())
annotations = deployment["spec"]["template"]["metadata"]["annotations"]
assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9464"
print(f"  Deployment flags {flags}, {len(container.get('env', []))} variables, the settings file, "
      "the probes and the selectors agree with anvild")
PY
echo PASS
