# The kube-prestop-sidecar image (the install image): static (musl) sidecar
# binaries on an empty base. Nothing is compiled or pulled here: the build
# context is target/images, where `make binaries` (images/build.sh binaries)
# puts linux/<arch>/kube-prestop-sidecar for every shipped architecture, and
# the build picks the platform's binary by TARGETARCH, so a multi-platform
# build needs no emulation; and architectures/<arch>/kube-prestop-sidecar for
# each architecture built (images/build.sh stages it). Built by `make images`
# with buildah; with Docker:
#
#   make binaries
#   docker buildx build -f images/sidecar.Dockerfile target/images \
#     --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t REGISTRY/kube-prestop-sidecar:0.1.0 --push
#
# Layout (every platform's image; the webhook and the chart rely on it):
#   /kube-prestop-sidecar                         this platform's binary, the
#                                                 ENTRYPOINT (install init container;
#                                                 the image volume's mount)
#   /architectures/<arch>/kube-prestop-sidecar    every built architecture's
#                                                 binary (amd64, arm64 for a
#                                                 release), the same files in
#                                                 every platform's image
FROM scratch
ARG TARGETARCH
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="kube-prestop-sidecar" \
      org.opencontainers.image.description="kube-prestop install image: the static sidecar binary at /kube-prestop-sidecar, every architecture's at /architectures/<arch>/kube-prestop-sidecar" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kube-prestop/kube-prestop"
COPY linux/${TARGETARCH}/kube-prestop-sidecar /kube-prestop-sidecar
COPY architectures/ /architectures/
# Non-root; no /etc/passwd needed for a numeric user.
USER 65532:65532
ENTRYPOINT ["/kube-prestop-sidecar"]
