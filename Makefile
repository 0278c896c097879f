# kube-prestop developer entry points. `make help` lists them.
#
# The cluster targets need root (network and mount namespaces, cgroups) and build
# their components into $(KUBE_PRESTOP_CACHE) (default /var/cache/kube-prestop).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CLUSTER := tests/cluster

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Local cluster (tests/cluster)

.PHONY: cluster-up
cluster-up: ## Start the single-node test cluster (idempotent); prints export KUBECONFIG=...
	$(CLUSTER)/up.sh

.PHONY: cluster-down
cluster-down: ## Stop the cluster and remove its processes, mounts, namespaces and state; then verify
	$(CLUSTER)/down.sh
	$(CLUSTER)/check-clean.sh

.PHONY: cluster-status
cluster-status: ## Show the cluster's processes, node and pods
	$(CLUSTER)/status.sh

.PHONY: cluster-smoke
cluster-smoke: ## Prove the cluster with a busybox Job and a pod deletion (cluster must be up)
	$(CLUSTER)/smoke.sh

.PHONY: cluster-check-clean
cluster-check-clean: ## Verify that nothing of the harness is left (after cluster-down)
	$(CLUSTER)/check-clean.sh

.PHONY: cluster-import
cluster-import: ## Import an OCI archive into the running cluster's containerd: make cluster-import ARCHIVE=FILE.tar [BASE_NAME=localhost/NAME]
	@test -n "$(ARCHIVE)" || { echo "usage: make cluster-import ARCHIVE=FILE.tar [BASE_NAME=localhost/NAME]" >&2; exit 2; }
	$(CLUSTER)/images.sh import "$(ARCHIVE)" $(BASE_NAME)

.PHONY: cluster-image
cluster-image: ## Build a directory's Containerfile with buildah and import it into the running cluster: make cluster-image CONTEXT=DIR REF=localhost/NAME:TAG [FILE=Containerfile]
	@test -n "$(CONTEXT)" -a -n "$(REF)" || { echo "usage: make cluster-image CONTEXT=DIR REF=localhost/NAME:TAG [FILE=Containerfile]" >&2; exit 2; }
	$(CLUSTER)/images.sh buildah "$(CONTEXT)" "$(REF)" $(FILE)

##@ Images (images/)

.PHONY: binaries
binaries: ## Static binaries for linux/amd64 and linux/arm64 into target/images/linux/<arch>/ (images/build.sh binaries)
	images/build.sh binaries

.PHONY: images
images: ## The binaries (cargo auditable), then both images as multi-platform OCI archives target/oci/kube-prestop-{webhook,sidecar}.tar (buildah, images/*.Dockerfile) and their CycloneDX SBOMs, one per platform (.linux-<arch>.cdx.json)
	images/build.sh

.PHONY: images-test
images-test: ## Checks make images' output: binaries per architecture (arm64 under qemu-aarch64), embedded dependency lists against the SBOMs, image indexes and layout, sizes, reproducibility, containerd import
	images/test.sh

##@ Tests

CLUSTER_ENV := /var/lib/kube-prestop/cluster/env.sh

.PHONY: e2e
e2e: ## Run the Rust e2e tests against the running cluster
	@test -f $(CLUSTER_ENV) || { echo "no cluster: run make cluster-up" >&2; exit 1; }
	source $(CLUSTER_ENV) && cargo test -p kube-prestop-e2e -- --test-threads=1

.PHONY: lint
lint: ## cargo fmt --check, cargo clippy -D warnings, the engine pure and portable, shellcheck on the scripts, docs consistency, the matrix log parser on its fixtures, actionlint on the workflows
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	scripts/engine-pure.sh
	shellcheck -x .ci/run .ci/*.sh bench/*.sh tests/*.sh tests/cluster/*.sh tests/chart/*.sh tests/docs/*.sh tests/release/*.sh tests/argo/*.sh images/*.sh certs/*.sh sidecar/*.sh $(wildcard scripts/*.sh)
	tests/docs/check.sh
	tests/matrix.sh self-test
	scripts/actionlint.sh

.PHONY: unit
unit: ## Rust unit, golden, HTTP and sidecar namespace tests (no cluster; the namespace tests as root, scripts/privileged-tests.sh)
	cargo test --workspace --exclude kube-prestop-e2e
	scripts/privileged-tests.sh

.PHONY: chart-test
chart-test: ## helm lint, helm template per mode and cluster version, kubeconform, golden renders
	tests/chart/run.sh

.PHONY: release-test
release-test: ## The release path against a registry on loopback: push target/oci/*.tar and the chart (scripts/release.sh), pull them back, sign them and attest the SBOMs with cosign (a test key), verify, a tampered image refused
	tests/release/check.sh

.PHONY: deny
deny: ## cargo-deny: licenses, bans, sources
	scripts/deny.sh

.PHONY: install
install: ## Build the images (images/build.sh), import them and helm install the chart on the running cluster
	tests/install-product.sh

.PHONY: e2e-all
e2e-all: ## Cluster up, install kube-prestop and Argo Workflows (tests/argo/install.sh), the e2e suite and the chart install check, cluster down (always)
	@rc=0; \
	{ $(CLUSTER)/up.sh && tests/install-product.sh && tests/argo/install.sh && \
	  $(MAKE) --no-print-directory e2e && \
	  tests/install-product.sh --uninstall && \
	  source $(CLUSTER_ENV) && tests/chart/install-check.sh && \
	  KUBE_PRESTOP_TEST_KUBECONFIG=$$KUBECONFIG cargo test -p kube-prestop-cluster --lib \
	    self_managed_certs::cluster_tests -- --ignored; } || rc=$$?; \
	$(CLUSTER)/down.sh || rc=1; \
	$(CLUSTER)/check-clean.sh || rc=1; \
	exit $$rc

.PHONY: e2e-matrix
e2e-matrix: ## The e2e suite over Kubernetes versions x runtimes, cell by cell (root; cached builds; results in target/matrix, one table at the end; see tests/matrix.sh)
	tests/matrix.sh

.PHONY: test
test: ## Everything CI runs: installs what is missing (.ci/install-deps.sh), lint, unit, chart and deny checks, the images and their checks, then the e2e suite on a real cluster and the release path
	.ci/install-deps.sh
	@for part in lint unit chart-test deny images images-test e2e-all release-test; do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$part || exit 1; \
	  echo "==> make $$part: $$(( $$(date +%s) - start )) s, disk used $$(df --output=used -BG / | tail -1 | tr -d ' ')"; \
	done

##@ Demo

.PHONY: demo
demo: ## The main job: cluster up, install kube-prestop, run an example Job, show its preStop output
	tests/demo.sh

##@ Benchmarks

.PHONY: bench-profiles
bench-profiles: ## Candidate Cargo profiles (fat/thin LTO, codegen units): cold build time, binary sizes, webhook CPU per review (bench/profiles.sh; root not needed)
	bench/profiles.sh

.PHONY: bench
bench: ## Benchmarks (not part of the tests; root): webhook vs ceiling and floor, sidecar costs, on-cluster pod start and burst (BENCH_PARTS=webhook,sidecar,cluster, the default; init-start, optional: an init container's StartContainer per security context); one table into bench/out/results.md
	bench/run.sh
