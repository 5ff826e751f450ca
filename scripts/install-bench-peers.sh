#!/usr/bin/env bash
# Installs PyTorch 2.x (with numpy and safetensors) into a virtual environment, .venv-bench/ by
# default: the benchmark programs run it beside Anvil (bench/*_peer.py), and
# tests/conformance/make_golden.py writes the conformance golden files with it. Best effort:
# without the package index the peer columns read n/a. Several GB (the wheel brings
# its CUDA libraries); kept out of `make test`.
#   install-bench-peers.sh [VENV_DIR]
set -uo pipefail
venv="${1:-.venv-bench}"
if [[ -x "${venv}/bin/python" ]] && "${venv}/bin/python" -c 'import torch, safetensors' 2>/dev/null; then
  exit 0
fi
python=$(command -v python3 || true)
if [[ ! -x "${venv}/bin/python" ]] && { [[ -z "${python}" ]] || ! "${python}" -m venv "${venv}" >/dev/null 2>&1; }; then
  echo "install-bench-peers: cannot create ${venv}; PyTorch 2.x columns will read n/a" >&2
  rm -rf "${venv}"
  exit 0
fi
if ! "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check torch numpy safetensors; then
  echo "install-bench-peers: could not install torch; PyTorch 2.x columns will read n/a" >&2
fi
exit 0
