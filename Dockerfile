# syntax=docker/dockerfile:1
# KegFS CSI image: kegfs-csi (the driver) and kegfs (the mounter it launches).
#   docker build -t kegfs-csi:dev .
# Stage 1 builds both with CMake on Debian 12; stage 2 is a slim runtime with
# only the shared libraries they link and the tools a FUSE node plugin needs.

FROM debian:12-slim AS builder
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ca-certificates \
      libfuse3-dev libsqlite3-dev libhiredis-dev libcurl4-openssl-dev libssl-dev libexpat1-dev \
      libyaml-dev libyajl-dev libmicrohttpd-dev liblz4-dev libzstd-dev \
      protobuf-c-compiler libprotobuf-c-dev libgrpc-dev libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKEG_WERROR=ON \
    && cmake --build /build --target kegfs kegfs-csi -j"$(nproc)" \
    && install -D -m 0755 /build/mounter/kegfs /out/usr/local/bin/kegfs \
    && install -D -m 0755 /build/csi/kegfs-csi /out/usr/local/bin/kegfs-csi \
    && strip --strip-debug /out/usr/local/bin/*

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      fuse3 libfuse3-3 libsqlite3-0 libhiredis0.14 libcurl4 libssl3 libexpat1 libyaml-0-2 libyajl2 libmicrohttpd12 \
      libgrpc29 libprotobuf-c1 liblz4-1 libzstd1 ca-certificates util-linux \
    && rm -rf /var/lib/apt/lists/* \
    && echo user_allow_other >> /etc/fuse.conf
COPY --from=builder /out/ /
# kegfs-csi finds the mounter at /usr/local/bin/kegfs (next to itself).
ENTRYPOINT ["/usr/local/bin/kegfs-csi"]
CMD ["--help"]
