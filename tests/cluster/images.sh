#!/usr/bin/env bash
# Container images for the test cluster without any registry: OCI archives built
# with umoci from static binaries of Debian packages, imported into containerd's
# k8s.io namespace (the one the CRI plugin uses).
#
#   tests/cluster/images.sh build               build the pause and busybox archives (cached)
#   tests/cluster/images.sh import PATH [BASE]  import any OCI archive into the running cluster
#   tests/cluster/images.sh buildah DIR REF [FILE]
#                                               build DIR's Containerfile (or Dockerfile, or
#                                               FILE) with buildah for this machine's platform
#                                               and import it into the running cluster as REF
#
# Sourced by up.sh for the same functions.
set -euo pipefail

_images_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$_images_here/lib.sh"

PAUSE_IMAGE="registry.k8s.io/pause:3.10"
BUSYBOX_IMAGE="localhost/kube-prestop/busybox:test"
IMAGE_CACHE="$KUBE_PRESTOP_CACHE/images"

_pkg_version() { dpkg-query -W -f '${Version}' "$1" | tr -c 'A-Za-z0-9.\n' '_'; }

# _umoci_image ARCHIVE TAG POPULATE_FN CONFIG_ARGS...: a one-layer image whose
# root file system POPULATE_FN fills, written as an OCI archive (tar of an OCI
# image layout whose index names the image TAG).
_umoci_image() {
  local archive="$1" tag="$2" populate="$3" work
  shift 3
  work="$(mktemp -d)"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$tag"
  umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
  "$populate" "$work/bundle/rootfs"
  umoci repack --image "$work/oci:$tag" "$work/bundle"
  umoci config --image "$work/oci:$tag" --author kube-prestop-tests "$@"
  umoci gc --layout "$work/oci"
  mkdir -p "$(dirname "$archive")"
  tar -C "$work/oci" -cf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
  rm -rf "$work"
}

_populate_pause() {
  install -m 0755 /usr/bin/catatonit "$1/catatonit"
}

# busybox-static with a symlink per applet (sh, sleep, cat, echo, true, ...).
_populate_busybox() {
  local root="$1" applet
  mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root"
  chmod 1777 "$root/tmp"
  install -m 0755 /usr/bin/busybox "$root/bin/busybox"
  for applet in $(/usr/bin/busybox --list); do
    [[ "$applet" == busybox ]] || ln -sf busybox "$root/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
}

# Prints the archive paths, one a line: pause then busybox.
build_base_images() {
  ensure_apt_packages umoci catatonit busybox-static
  local pause busybox
  # -path: with the PATH of registry.k8s.io/pause in its config (youki 0.7.0
  # refuses a process without PATH in its environment, even with an absolute
  # argv[0]: "PATH environment variable is not set"; runc does not need it).
  pause="$IMAGE_CACHE/pause-catatonit-$(_pkg_version catatonit)-path.oci.tar"
  busybox="$IMAGE_CACHE/busybox-$(_pkg_version busybox-static).oci.tar"
  if [[ ! -f "$pause" ]]; then
    log "building $pause"
    _umoci_image "$pause" 3.10 _populate_pause \
      --config.entrypoint /catatonit --config.entrypoint -P --config.user 65535:65535 \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  fi
  if [[ ! -f "$busybox" ]]; then
    log "building $busybox"
    _umoci_image "$busybox" test _populate_busybox \
      --config.cmd sh --config.env PATH=/bin --config.workingdir /
  fi
  printf '%s\n%s\n' "$pause" "$busybox"
}

# import_oci_archive PATH [BASE_NAME]: imports an OCI archive into containerd's
# k8s.io namespace and unpacks it for the overlayfs snapshotter. With BASE_NAME
# (e.g. localhost/kube-prestop/busybox), each image in the archive is named
# BASE_NAME:<its org.opencontainers.image.ref.name>, as umoci tags give only the
# tag; without it, the archive's own names are used (as `docker save` or
# images/build.sh writes them: the full reference).
import_oci_archive() {
  local path="$1" base="${2:-}" args=()
  [[ -f "$path" ]] || die "no such archive: $path"
  [[ -n "$base" ]] && args+=(--base-name "$base")
  "$CTR" --address "$CONTAINERD_SOCK" -n k8s.io images import "${args[@]}" "$path" >&2
}

# buildah_import CONTEXT REF [CONTAINERFILE]: builds CONTEXT with buildah
# (this machine's platform), writes it as an OCI archive named REF and imports
# it (import_oci_archive). Leaves nothing on the host: a private image store
# (vfs) and buildah's network configuration directory in a work directory,
# removed at the end; RUN steps use the host's network (--network host), so
# buildah sets up no bridge or CNI network of its own. Without the
# containers.conf of our own, buildah makes /etc/cni/net.d (containers.conf(5),
# network_config_dir; see images/build.sh), which check-clean.sh reports.
buildah_import() {
  local context="${1:-}" ref="${2:-}" file="${3:-}" work f
  [[ -d "$context" && -n "$ref" ]] || die "usage: $0 buildah CONTEXT_DIR REF [CONTAINERFILE]"
  if [[ -z "$file" ]]; then
    for f in Containerfile Dockerfile; do
      if [[ -f "$context/$f" ]]; then
        file="$context/$f"
        break
      fi
    done
  fi
  [[ -f "$file" ]] || die "no Containerfile or Dockerfile in $context (give the file as the third argument)"
  # The kubelet reads a name without a registry host as docker.io/...: the
  # image would be imported under one name and looked up under another.
  local host="${ref%%/*}"
  if [[ "$ref" != */* || ! ("$host" == localhost || "$host" == *.* || "$host" == *:*) ]]; then
    die "REF $ref: give a full reference with a registry host, e.g. localhost/$ref"
  fi
  [[ -S "$CONTAINERD_SOCK" ]] || die "no cluster running (no $CONTAINERD_SOCK): make cluster-up first"
  ensure_apt_packages buildah
  work="$(mktemp -d /var/tmp/kube-prestop-image.XXXXXX)"
  # shellcheck disable=SC2064 # expand now: work is local
  trap "rm -rf '$work'" RETURN
  printf '[network]\nnetwork_config_dir = "%s"\n' "$work/cni" >"$work/containers.conf"
  local -x CONTAINERS_CONF="$work/containers.conf"
  local store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
  log "buildah build $ref from $file"
  buildah "${store[@]}" build --quiet --network host -t "$ref" -f "$file" "$context" >/dev/null
  buildah "${store[@]}" push --quiet "$ref" "oci-archive:$work/image.tar:$ref"
  import_oci_archive "$work/image.tar"
  log "imported $ref: use it with imagePullPolicy: Never (or IfNotPresent)"
}

import_base_images() {
  local archives
  mapfile -t archives < <(build_base_images)
  import_oci_archive "${archives[0]}" "${PAUSE_IMAGE%:*}"
  import_oci_archive "${archives[1]}" "${BUSYBOX_IMAGE%:*}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    build) build_base_images ;;
    import)
      shift
      import_oci_archive "$@"
      ;;
    buildah)
      shift
      buildah_import "$@"
      ;;
    *)
      echo "usage: $0 build | import PATH [BASE_NAME] | buildah CONTEXT_DIR REF [CONTAINERFILE]" >&2
      exit 2
      ;;
  esac
fi
