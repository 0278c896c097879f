# shellcheck shell=bash disable=SC2034  # the variables are read by the scripts that source this file
# The Cargo profile of the shipped binaries, defined once. Sourced (not run) by
# images/build.sh (the images' binaries), sidecar/build-static.sh (the static
# x86_64 sidecar) and bench/run.sh (which measures the image's sidecar binary
# and names its profile in the report), so that the bench's figures are taken
# on a binary built exactly as the images ship it. OCI_CARGO_PROFILE overrides
# it for all of them; the profiles are in Cargo.toml (release: LTO, one codegen
# unit, opt-level 3, stripped).
SHIPPED_CARGO_PROFILE="${OCI_CARGO_PROFILE:-release}"
# The directory cargo writes the profile's artifacts to (dev's is debug/).
SHIPPED_CARGO_PROFILE_DIR="${SHIPPED_CARGO_PROFILE}"
if [[ "${SHIPPED_CARGO_PROFILE}" == dev ]]; then
    SHIPPED_CARGO_PROFILE_DIR=debug
fi
