#!/bin/sh
# Runs tollgate as a container on a Docker host (docs/guide/docker.md):
# the node image (scripts/image.sh) in the host's network namespace with
# only NET_ADMIN and NET_RAW, the Docker socket read-only as its inventory
# (`--docker`), and policies from a host directory.
#
#   docker/run.sh [EXTRA TOLLGATE RUN FLAGS...]
#
# Environment (defaults in brackets):
#   DOCKER          the client [docker]; `podman` works the same way
#   TOLLGATE_IMAGE  the image [localhost/tollgate:dev]
#   POLICIES        host directory of policy files [/etc/tollgate/policies]
#   DOCKER_SOCKET   the engine's API socket on the host [/var/run/docker.sock]
#   NAME            the container's name [tollgate]
#   RUN_DIR         host directory for the status socket [/run/tollgate]
#
# The socket is mounted read-only, which does not restrict the API: any
# client of it is root on the host. A read-only socket proxy in front of it
# limits tollgate to what it reads (docs/guide/docker.md, "The socket is root on the host").
#
# /run/tollgate is shared so that `tollgate status` works on the host;
# /run/xtables.lock is the host's, so that with the legacy iptables
# backend tollgate's and dockerd's writes take the same lock.
set -eu
DOCKER=${DOCKER:-docker}
TOLLGATE_IMAGE=${TOLLGATE_IMAGE:-localhost/tollgate:dev}
POLICIES=${POLICIES:-/etc/tollgate/policies}
DOCKER_SOCKET=${DOCKER_SOCKET:-/var/run/docker.sock}
NAME=${NAME:-tollgate}
RUN_DIR=${RUN_DIR:-/run/tollgate}

mkdir -p "$RUN_DIR"
touch /run/xtables.lock
# shellcheck disable=SC2086 # DOCKER may carry global flags (podman --runtime runc ...)
exec $DOCKER run --detach --name "$NAME" --restart unless-stopped \
    --network host \
    --cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW \
    --volume "$DOCKER_SOCKET:/var/run/docker.sock:ro" \
    --volume "$POLICIES:/etc/tollgate/policies:ro" \
    --volume "$RUN_DIR:/run/tollgate" \
    --volume /run/xtables.lock:/run/xtables.lock \
    "$TOLLGATE_IMAGE" \
    run --docker --docker-host unix:///var/run/docker.sock \
    --policies /etc/tollgate/policies --drift-check-seconds 2 "$@"
