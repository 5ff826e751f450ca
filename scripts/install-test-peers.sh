#!/usr/bin/env bash
# Installs the Python peers some tests compare Anvil against (the reference safetensors
# implementation, numpy, tensorboard's event reader, Triton's gRPC client, onnx and onnxruntime
# for the exported ONNX files, kubernetes-validate for deploy/k8s, moto's S3 server for the artifact store) into a virtual environment,
# .venv/ by default. Best effort:
# with no network or no venv support it says so and exits 0, and those tests skip.
#   install-test-peers.sh [VENV_DIR]
set -uo pipefail
venv="${1:-.venv}"
packages=(safetensors numpy tensorboard "tritonclient[grpc]" onnx onnxruntime kubernetes-validate "moto[server]")

if [[ -x "${venv}/bin/python" ]] && "${venv}/bin/python" -c 'import safetensors, numpy, tensorboard, tritonclient.grpc, onnx, onnxruntime, kubernetes_validate, moto.server, flask' 2>/dev/null; then
  exit 0
fi
python=$(command -v python3 || true)
if [[ -z "${python}" ]]; then
  echo "install-test-peers: no python3; interoperability tests will skip" >&2
  exit 0
fi
if ! "${python}" -m venv "${venv}" >/dev/null 2>&1; then
  echo "install-test-peers: '${python} -m venv' failed (Debian: apt-get install python3-venv); interoperability tests will skip" >&2
  rm -rf "${venv}"
  exit 0
fi
if ! "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"; then
  echo "install-test-peers: could not install ${packages[*]}; interoperability tests will skip" >&2
fi
exit 0
