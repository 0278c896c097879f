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

##@ Tests

CLUSTER_ENV := /var/lib/kube-prestop/cluster/env.sh

.PHONY: e2e
e2e: ## Run the Rust e2e tests against the running cluster
	@test -f $(CLUSTER_ENV) || { echo "no cluster: run make cluster-up" >&2; exit 1; }
	source $(CLUSTER_ENV) && cargo test -p kube-prestop-e2e -- --test-threads=1
