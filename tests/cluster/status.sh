#!/usr/bin/env bash
# Shows the state of the test cluster (`make cluster-status`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$here/lib.sh"
use_running_platform

if [[ ! -d "$STATE/pids" ]]; then
  echo "cluster: down (no state in $STATE)"
  exit 0
fi
echo "state:      $STATE"
echo "netns:      $NETNS ($(netns_exists && echo present || echo MISSING))"
echo "mount ns:   $(mntns_exists && echo present || echo MISSING)"
echo "processes:"
for f in "$STATE"/pids/*.pid; do
  name="$(basename "$f" .pid)"
  pid="$(cat "$f")"
  if pid_alive "$pid"; then state=running; else state=DEAD; fi
  printf '  %-26s pid %-8s %s\n' "$name" "$pid" "$state"
done
if component_running kube-apiserver; then
  echo
  kubectl_admin get nodes -o wide || true
  echo
  kubectl_admin get pods -A -o wide || true
fi
echo
echo "export KUBECONFIG=$KUBECONFIG_HOST"
