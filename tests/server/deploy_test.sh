#!/usr/bin/env bash
# The deployment files: docker-compose accepts the compose stack (CPU, and with the GPU
# override), and the Dockerfile installs with the same script the Makefile uses. (No
# container engine is needed: `config -q` validates the files.)
#   deploy_test.sh SOURCE_DIR
set -euo pipefail
cd "$1"
command -v docker-compose > /dev/null || { echo "FAIL: docker-compose is missing (make deps installs it)" >&2; exit 1; }
docker-compose -f deploy/docker-compose.yml config -q
docker-compose -f deploy/docker-compose.yml -f deploy/docker-compose.gpu.yml config -q
# Replicas: three anvild on one PostgreSQL, each named, each on the shared store.
docker-compose -f deploy/compose-replicas.yaml config -q
replicas=$(docker-compose -f deploy/compose-replicas.yaml config)
for r in 1 2 3; do
  [[ "${replicas}" == *"--instance"*"anvild-${r}"* ]] || { echo "FAIL: compose-replicas: anvild-${r} has no --instance" >&2; exit 1; }
done
[[ $(grep -o "ANVILD_STORE: postgresql://" <<< "${replicas}" | wc -l) -eq 3 ]] ||
  { echo "FAIL: compose-replicas: not every replica is on PostgreSQL" >&2; exit 1; }
merged=$(docker-compose -f deploy/docker-compose.yml -f deploy/docker-compose.gpu.yml config)  # whole, then grep:
[[ "${merged}" == *capabilities* ]] || { echo "FAIL: the GPU override adds no device reservation" >&2; exit 1; }  # (no SIGPIPE)
[[ "${merged}" == *"BUILDER_IMAGE: nvidia/cuda:"*devel* ]] || { echo "FAIL: the GPU override does not build on a CUDA devel image" >&2; exit 1; }
grep -q "^ARG BUILDER_IMAGE=" Dockerfile && grep -q '^FROM ${BUILDER_IMAGE} AS builder' Dockerfile \
  && grep -q '^FROM ${RUNTIME_IMAGE}' Dockerfile || { echo "FAIL: the Dockerfile's base images are not build arguments" >&2; exit 1; }
grep -q "scripts/install-deps.sh build" Dockerfile || { echo "FAIL: the Dockerfile does not use scripts/install-deps.sh" >&2; exit 1; }
grep -q "scripts/install-deps.sh build" Makefile || { echo "FAIL: the Makefile does not use scripts/install-deps.sh" >&2; exit 1; }
grep -q "^USER " Dockerfile && grep -q "^HEALTHCHECK " Dockerfile || { echo "FAIL: the image must run as a user and have a health check" >&2; exit 1; }
# Every file the compose stack mounts exists.
for f in deploy/prometheus/prometheus.yml deploy/grafana/provisioning/datasources/prometheus.yml \
         deploy/grafana/provisioning/dashboards/anvil.yml deploy/grafana/dashboards/anvil-training.json \
         deploy/grafana/dashboards/anvil-serving.json deploy/prometheus/prometheus-replicas.yml; do
  [[ -f "$f" ]] || { echo "FAIL: $f is missing" >&2; exit 1; }
done
echo "deployment files OK"
