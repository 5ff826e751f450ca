# Anvil: anvild and the anvil CLI in a slim runtime image.
#
#   docker build -t anvil .
#
# The builder installs dependencies with the same script `make` uses (scripts/install-deps.sh)
# and fetches the built-in digits dataset; the runtime stage carries only runtime libraries,
# the two binaries and the dataset, and runs as an unprivileged user.
# The runtime stage receives the libraries the binaries load from the builder
# (scripts/bundle-libs.sh), so any glibc-based image at least as new as the builder serves.
# The CPU image is 253 MB (bookworm-slim 78 MB; the bundled libraries, ONNX and OpenCV DNN
# included, and the binaries the rest).
#
# `make test-image` (CI runs it) builds this file without a Docker engine, buildah on a Debian 12
# base made with debootstrap, keeps the image under 300 MB, and runs it as a user would: its
# entrypoint as its user, health, a job, a Predict, this HEALTHCHECK, a SIGTERM drain
# (scripts/test-image.sh).
#
# CPU (default): Debian bookworm to build, bookworm-slim to run.
# CUDA: NVIDIA's images (deploy/docker-compose.gpu.yml passes these):
#   docker build --build-arg BUILDER_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#                --build-arg RUNTIME_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04 -t anvil:cuda .
# nvcc in the builder turns the CUDA backend on (CUDA_ARCHS picks the GPUs; default A100
# and H100/H200 plus PTX); cuBLAS comes from the runtime image, loaded at first use.
ARG BUILDER_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
FROM ${BUILDER_IMAGE} AS builder
ARG CUDA_ARCHS="80-real;90-real;90-virtual"
# The kernels' baseline is portable, never the build machine's CPU: an image built anywhere
# runs on any x86-64-v3 CPU and refuses an older one with a message; AVX-512 and AMX kernels
# and the BLAS libraries' kernels are chosen at run time from the CPU's features.
ARG CPU_BASELINE=x86-64-v3
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/fetch-data.sh scripts/
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
    && scripts/install-deps.sh build
COPY . .
# The compiler cache lives in a build cache mount (BuildKit's and buildah's RUN --mount=type=cache),
# so a rebuild after a change compiles only what changed; it is not part of the image.
RUN --mount=type=cache,id=anvil-ccache,target=/root/.cache/ccache \
    export CCACHE_DIR=/root/.cache/ccache CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=1 \
    && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_BUILD_TESTS=OFF -DANVIL_BUILD_EXAMPLES=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}" -DANVIL_CPU_BASELINE="${CPU_BASELINE}" \
    && cmake --build build --target anvild anvil anvil-run \
    && ccache --show-stats \
    && scripts/bundle-libs.sh /opt/anvil/lib --load libopenblas.so.0 --load libdnnl.so.2 --load libblis.so.4 \
         build/server/anvild build/client/anvil build/launcher/anvil-run \
    && scripts/fetch-data.sh /opt/anvil/datasets

FROM ${RUNTIME_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
# openssl: the entrypoint makes a development certificate when none is mounted;
# ca-certificates: HTTPS to an S3 artifact store (anvild --artifacts s3://...).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends openssl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# uid and gid 10001 both, so a host volume can be prepared with `chown 10001:10001`.
RUN groupadd --system --gid 10001 anvil \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/anvil --create-home anvil
COPY --from=builder /opt/anvil/lib /opt/anvil/lib
COPY --from=builder /src/build/server/anvild /src/build/client/anvil /src/build/launcher/anvil-run /usr/local/bin/
COPY --from=builder /opt/anvil/datasets /opt/anvil/datasets
COPY scripts/dev-ca.sh /usr/local/bin/anvil-dev-ca
COPY scripts/docker-entrypoint.sh /usr/local/bin/anvil-entrypoint
USER anvil
ENV LD_LIBRARY_PATH=/opt/anvil/lib \
    ANVILD_ADDRESS=0.0.0.0:50051 \
    ANVILD_METRICS_ADDRESS=0.0.0.0:9464 \
    ANVILD_DATA_DIR=/var/lib/anvil \
    ANVILD_DATASETS_DIR=/opt/anvil/datasets \
    ANVILD_TLS_CERT=/var/lib/anvil/tls/server.pem \
    ANVILD_TLS_KEY=/var/lib/anvil/tls/server.key
VOLUME /var/lib/anvil
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s \
  CMD ["anvil", "--server", "localhost:50051", "--tls-ca", "/var/lib/anvil/tls/ca.pem", "health"]
ENTRYPOINT ["anvil-entrypoint"]
