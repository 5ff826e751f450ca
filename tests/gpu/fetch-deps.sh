#!/usr/bin/env bash
# Run on the build machine before a GPU check: downloads (never installs) the Debian packages
# the engine's build needs into .gpu-debs/, so tests/gpu/check.sh can unpack them on a GPU
# machine whose image lacks them (such machines reach no package registry). Also fetches
# the digits data set into data/. Pass both folders along with the working tree.
#   tests/gpu/fetch-deps.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
pkgs=(libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 libquadmath0
      nlohmann-json3-dev libgtest-dev libgmock-dev googletest zlib1g-dev libstb0 libstb-dev
      prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
      libcivetweb-dev libcivetweb1 libcurl4-openssl-dev libcurl4 libabsl-dev libabsl20220623
      libgloo-dev libgloo0 libhiredis-dev libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200)
mkdir -p .gpu-debs
chmod 777 .gpu-debs  # apt-get download runs as _apt when started as root
(cd .gpu-debs && apt-get download -qq "${pkgs[@]}")
scripts/fetch-data.sh data
ls -la .gpu-debs
