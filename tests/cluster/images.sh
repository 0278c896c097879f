#!/usr/bin/env bash
# Container images for the test cluster without any registry: OCI archives built
# with umoci from static binaries of Debian packages, imported into containerd's
# k8s.io namespace (the one the CRI plugin uses).
#
#   tests/cluster/images.sh build               build the pause and busybox archives (cached)
#   tests/cluster/images.sh import PATH [BASE]  import any OCI archive into the running cluster
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
    *)
      echo "usage: $0 build | import PATH [BASE_NAME]" >&2
      exit 2
      ;;
  esac
fi
