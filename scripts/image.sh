#!/usr/bin/env bash
# Builds the tollgate node image from docker/Dockerfile with podman, on a
# machine that has no Docker engine and reaches no image registry (only
# Debian's package archive). See docs/guide/kubernetes.md.
#
#   scripts/image.sh [--binary PATH] [--tag NAME]
#
# --binary PATH  put this prebuilt tollgate binary in the image (the
#                Dockerfile's `prebuilt` target, build-arg TOLLGATE_BINARY);
#                default: build it with `cargo build --release --locked` on
#                the host first. Without a registry the Dockerfile's own
#                Rust stage cannot run (no rust image to pull).
# --tag NAME     image name (default localhost/tollgate:dev).
#
# The Dockerfile's base, debian:bookworm-slim, is made here instead of
# pulled: mmdebstrap builds a slim bookworm root (minbase, no man pages,
# docs or locales, apt lists removed) from Debian's archive, cached as
# /var/cache/tollgate-image/base-<key>.tar (the key hashes the suite, the
# variant and the options below), and `podman import` tags it as
# docker.io/library/debian:bookworm-slim in root's podman storage.
#
# Repeated runs are cheap: the base tarball is reused, podman's layer cache
# keeps the Dockerfile's `apt-get install` layer, and when the image already
# carries the label tollgate.inputs=<hash of binary, Dockerfile and
# entrypoint> nothing is rebuilt at all. Concurrent runs are serialized by a
# lock in the cache directory. Each image carries the label
# tollgate.checkout=<this repository's path>; an image whose checkout no
# longer exists (a CI clone that is gone) is removed here, so test runs do
# not pile up images. Needs root; installs podman, buildah,
# mmdebstrap, runc and uidmap with apt when they are missing.
#
# This machine kind needs runc, cgroupfs and explicit ulimits for every
# podman call (../shared/notes/containers.md); the flags are in PODMAN and
# BUILD_FLAGS below. Prints the image's size in bytes as the last line
# (`size=<bytes>`).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
tag=localhost/tollgate:dev
binary=
while (($#)); do
    case "$1" in
    --binary) binary=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--tag NAME]" >&2; exit 2 ;;
    esac
done

log() { echo "image.sh: $*" >&2; }

[[ $(id -u) == 0 ]] || { log "needs root (podman storage, mmdebstrap)"; exit 1; }

tools=(podman buildah mmdebstrap runc newuidmap)
packages=(podman buildah mmdebstrap runc uidmap)
missing=()
for i in "${!tools[@]}"; do
    command -v "${tools[$i]}" >/dev/null || missing+=("${packages[$i]}")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
BUILD_FLAGS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --network host --layers)

cache=/var/cache/tollgate-image
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9

# The Dockerfile's base: what debian:bookworm-slim is, built locally.
suite=bookworm
base_image=docker.io/library/debian:bookworm-slim
base_opts=(
    --variant=minbase
    # merged /usr by symlinks, as debootstrap makes it, not by the usrmerge
    # package (which pulls in perl)
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --aptopt='APT::Install-Recommends "false"'
)
# As the official slim image's docker-clean: later installs (the
# Dockerfile's) keep no .debs or package caches. Added to the tarball after
# mmdebstrap, which needs its downloads while it works.
docker_clean='APT::Keep-Downloaded-Packages "false";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";'
base_key=$(printf '%s\n' "$suite" "${base_opts[@]}" "$docker_clean" | sha256sum | cut -c1-16)
base_tar="$cache/base-$base_key.tar"
if [[ ! -s $base_tar ]]; then
    log "building the $suite base with mmdebstrap (once per machine)"
    if ! mmdebstrap --format=tar "${base_opts[@]}" "$suite" "$base_tar.part" >"$cache/mmdebstrap.log" 2>&1; then
        tail -n 30 "$cache/mmdebstrap.log" >&2
        exit 1
    fi
    extra=$(mktemp -d)
    mkdir -p "$extra/etc/apt/apt.conf.d"
    echo "$docker_clean" >"$extra/etc/apt/apt.conf.d/docker-clean"
    tar --append --file "$base_tar.part" --owner=0 --group=0 -C "$extra" ./etc/apt/apt.conf.d/docker-clean
    rm -rf "$extra"
    mv "$base_tar.part" "$base_tar"
fi
if [[ $("${PODMAN[@]}" image inspect --format '{{index .Labels "tollgate.base"}}' "$base_image" 2>/dev/null) != "$base_key" ]]; then
    log "importing $base_tar as $base_image"
    "${PODMAN[@]}" import --quiet --change "LABEL tollgate.base=$base_key" \
        --change 'CMD ["bash"]' "$base_tar" "$base_image" >/dev/null
fi

if [[ -z $binary ]]; then
    log "building tollgate (cargo build --release --locked)"
    (cd "$repo" && cargo build --release --locked --bin tollgate)
    binary="$repo/target/release/tollgate"
fi
[[ -x $binary ]] || { log "not an executable: $binary"; exit 1; }

# The build context holds only what the prebuilt target copies, not the
# repository's (large) target directory.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/docker"
cp "$repo/docker/Dockerfile" "$repo/docker/entrypoint.sh" "$context/docker/"
cp "$binary" "$context/tollgate"
strip "$context/tollgate" 2>/dev/null || true

inputs=$(cat "$context/tollgate" "$context/docker/Dockerfile" "$context/docker/entrypoint.sh" \
    <(echo "$base_key") | sha256sum | cut -c1-32)
if [[ $("${PODMAN[@]}" image inspect --format '{{index .Labels "tollgate.inputs"}}' "$tag" 2>/dev/null) == "$inputs" ]]; then
    log "$tag is up to date"
else
    log "building $tag"
    previous=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
    "${PODMAN[@]}" build "${BUILD_FLAGS[@]}" --quiet \
        -f "$context/docker/Dockerfile" --target prebuilt \
        --build-arg TOLLGATE_BINARY=tollgate \
        --label "tollgate.inputs=$inputs" --label "tollgate.checkout=$repo" \
        -t "$tag" "$context" >/dev/null
    # The previous build of this tag, unless a container still uses it.
    if [[ -n $previous ]]; then
        "${PODMAN[@]}" rmi "$previous" >/dev/null 2>&1 || true
    fi
fi
# Images built for checkouts that no longer exist (unless a container still
# uses one: rmi refuses).
"${PODMAN[@]}" images --filter label=tollgate.checkout --format '{{.ID}} {{index .Labels "tollgate.checkout"}}' |
    while read -r id checkout; do
        [[ -d $checkout ]] || "${PODMAN[@]}" rmi "$id" >/dev/null 2>&1 || true
    done
echo "size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$tag")"
