# syntax=docker/dockerfile:1
# The operator image: one static binary (Rust, musl libc) on an empty base: 6.7 MB compressed.
#
#   docker build -t ghcr.io/skyhook-rs/skyhook-operator:v0.1.0 .
#
# Without a Docker engine, deploy/image/build writes the same image as an OCI layout and archive.
# tests/e2e/image.rs checks that the image it writes has this file's ENTRYPOINT, USER, ENV,
# EXPOSE and LABELs: change both together.

# The build base by digest (the multi-arch manifest list of this tag when it was pinned), so a
# rebuilt tag cannot change what compiles the release. Keep the version equal to the release
# workflow's RUST_TOOLCHAIN (tests/supply_chain.rs checks both).
ARG RUST_IMAGE=docker.io/library/rust:1.95.0-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1

FROM ${RUST_IMAGE} AS build
# musl-gcc compiles the C in jemalloc and ring for the musl target.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY . .
# The same build and files as deploy/image/build: a stripped static release binary at /manager
# (the reference image's path, so its manifests work with only the image changed), and
# skyhook-operator on PATH for the manifests in deploy/ (`command: [skyhook-operator, run]`).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
 && CARGO_PROFILE_RELEASE_STRIP=true \
    cargo build --release --locked --target "$target" --bin skyhook-operator \
 && mkdir -p /rootfs/etc /rootfs/tmp /rootfs/usr/local/bin \
 && install -m 0755 "target/$target/release/skyhook-operator" /rootfs/manager \
 && ln -s /manager /rootfs/usr/local/bin/skyhook-operator \
 && chmod 1777 /rootfs/tmp \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/rootfs/etc/group

FROM scratch
# Keep equal to Cargo.toml's version (checked by tests/e2e/image.rs).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="skyhook-operator" \
      org.opencontainers.image.description="Rust re-implementation of the NVIDIA Skyhook operator: rolls host packages out to Kubernetes nodes" \
      org.opencontainers.image.source="https://github.com/skyhook-rs/skyhook" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /rootfs/ /
ENV PATH=/usr/local/bin
USER 65532:65532
EXPOSE 8080 8081
# No arguments runs the operator (`run`), configured by the reference's environment variables.
ENTRYPOINT ["/manager"]
