#!/usr/bin/env bash
# Build the server's container image with buildah, from Debian's own packages only.
#
# No registry is needed (none but Debian's, PyPI and npm is reachable from the build hosts):
# the base is a Debian bookworm minbase root filesystem made by mmdebstrap, the way the image
# store makes its sandbox base (service/images/base.py), committed into buildah's storage as
# $BASE; deploy/Containerfile then builds FROM it with `--pull=never`.
#
#   deploy/build_image.sh [TAG]        # default rollout-service:dev; run from anywhere, as root
#
# The build host's CA bundle reaches the pip step as a build secret (an egress that re-signs TLS
# needs it), never a layer: the image keeps Debian's own roots.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${1:-rollout-service:dev}"
BASE="${BASE:-localhost/rollout-deploy-base:bookworm}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

make_base() {
  local scratch container
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' RETURN
  # The image's own hostname and resolvers come from its runtime, never the build host's.
  mmdebstrap --mode=root --variant=minbase --include=ca-certificates \
    --customize-hook='rm -f "$1/etc/hostname"; : > "$1/etc/resolv.conf"' \
    bookworm "$scratch/rootfs"
  container="$(buildah from --quiet scratch)"
  buildah copy --quiet "$container" "$scratch/rootfs" /
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$container"
  buildah commit --quiet --format oci "$container" "$BASE"
  buildah rm "$container" >/dev/null
}

buildah inspect --type image "$BASE" >/dev/null 2>&1 || make_base
buildah bud --pull=never --isolation chroot --layers \
  --build-arg "BASE=$BASE" --secret "id=ca,src=$CA_BUNDLE" \
  -f deploy/Containerfile -t "$TAG" .
