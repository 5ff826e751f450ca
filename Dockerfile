# Anvil: anvild and the anvil CLI in a slim runtime image.
#
#   docker build -t anvil .
#
# The builder installs dependencies with the same script `make` uses (scripts/install-deps.sh)
# and fetches the built-in digits dataset; the runtime stage carries only runtime libraries,
# the two binaries and the dataset, and runs as an unprivileged user.
# Both stages are Debian bookworm: the runtime stage installs the same releases of the
# libraries the builder linked against. (A CUDA image comes with the CUDA backend.)
FROM debian:bookworm AS builder
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/fetch-data.sh scripts/
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
    && scripts/install-deps.sh build
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_BUILD_TESTS=OFF -DANVIL_BUILD_EXAMPLES=OFF \
    && cmake --build build --target anvild anvil \
    && scripts/fetch-data.sh /opt/anvil/datasets

FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libsqlite3-0 libopenblas0-pthread libcivetweb1 libstb0 zlib1g ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/anvil --create-home anvil
COPY --from=builder /src/build/server/anvild /src/build/client/anvil /usr/local/bin/
COPY --from=builder /opt/anvil/datasets /opt/anvil/datasets
USER anvil
ENV ANVILD_ADDRESS=0.0.0.0:50051 \
    ANVILD_METRICS_ADDRESS=0.0.0.0:9464 \
    ANVILD_DATA_DIR=/var/lib/anvil \
    ANVILD_DATASETS_DIR=/opt/anvil/datasets
VOLUME /var/lib/anvil
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s CMD ["anvil", "--server", "127.0.0.1:50051", "health"]
ENTRYPOINT ["anvild"]
