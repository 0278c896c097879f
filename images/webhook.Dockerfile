# syntax=docker/dockerfile:1.7
# The kube-prestop-webhook image: a static (musl) binary on an empty base.
#
#   docker buildx build -f images/webhook.Dockerfile \
#     --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t REGISTRY/kube-prestop/webhook:0.1.0 .
#
# Build context: the repository root. Multi-arch: each platform's stage runs
# on that platform (natively or under emulation); on Alpine, Rust's musl
# target links statically by default, ring's C code included. The same image
# is built without Docker by images/build-oci.sh (used by the tests here).

ARG RUST_VERSION=1.95
ARG ALPINE_VERSION=3.22

FROM rust:${RUST_VERSION}-alpine${ALPINE_VERSION} AS build
ARG TARGETARCH
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN --mount=type=cache,id=kube-prestop-cargo-registry-${TARGETARCH},target=/usr/local/cargo/registry \
    --mount=type=cache,id=kube-prestop-target-${TARGETARCH},target=/src/target \
    cargo build --locked --release -p kube-prestop-webhook \
 && install -D -m 0755 target/release/kube-prestop-webhook /out/kube-prestop-webhook \
 && ! readelf -l /out/kube-prestop-webhook | grep -q 'program interpreter'

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="kube-prestop-webhook" \
      org.opencontainers.image.description="kube-prestop admission webhook: injects the preStop sidecar into Job pods" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kube-prestop/kube-prestop"
COPY --from=build /out/kube-prestop-webhook /kube-prestop-webhook
# Non-root; no /etc/passwd needed for a numeric user.
USER 65532:65532
ENTRYPOINT ["/kube-prestop-webhook"]
CMD ["serve"]
