# The kube-prestop-webhook image: the static (musl) admission server on an
# empty base. Nothing is compiled or pulled here: the build context is
# target/images, where `make binaries` (images/build.sh binaries) puts
# linux/<arch>/kube-prestop-webhook for every shipped architecture, and the
# build picks the platform's binary by TARGETARCH, so a multi-platform build
# needs no emulation. Built by `make images` with buildah; with Docker:
#
#   make binaries
#   docker buildx build -f images/webhook.Dockerfile target/images \
#     --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t REGISTRY/kube-prestop-webhook:0.1.0 --push
FROM scratch
ARG TARGETARCH
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
COPY linux/${TARGETARCH}/kube-prestop-webhook /kube-prestop-webhook
# Non-root; no /etc/passwd needed for a numeric user.
USER 65532:65532
ENTRYPOINT ["/kube-prestop-webhook"]
CMD ["serve"]
