#!/usr/bin/env bash
# Installs the system packages tollgate's demo and test suite use (Debian).
# Idempotent; needs root. The Rust toolchain itself (cargo) is expected on
# PATH, as on the project's machines.
set -euo pipefail

PACKAGES=(
    iproute2 iptables ipset conntrack    # the datapath and the lab
    curl netcat-openbsd iputils-ping     # probes
    dnsmasq-base dnsutils                # DNS server and dig for FQDN tests
    nginx-light python3 procps psmisc    # servers and process tools
    python3-scapy                        # forged packets (tests/netns/forgery.rs)
    tcpdump wrk                          # packet captures, HTTP benchmark
    hping3                               # SYN floods (benches/overload.sh)
    shellcheck                           # lints the shell scripts (scripts/test.sh)
    podman buildah mmdebstrap runc uidmap # the node image (scripts/image.sh, tests/netns/image.rs)
    containernetworking-plugins util-linux # podman's CNI bridge networks, nsenter (tests/netns/docker.rs)
    netavark aardvark-dns                # podman's netavark backend (tests/netns/harness/podman.rs)
    kmod                                 # modprobe (br_netfilter, below)
    iperf3 gcc libc6-dev                 # benches/e2e.sh: bulk throughput, its all-miss bind shim
)
# Debian's Docker Engine and Compose v1 for the real-engine tests
# (tests/netns/harness/docker.rs, tests/netns/dockerd.rs): installed with
# no daemon started in the host's namespace (below).
DOCKER_PACKAGES=(docker.io docker-compose)

# Runs "$@" (an apt-get install of DOCKER_PACKAGES) with a policy-rc.d that
# refuses every service start, so the package starts neither containerd nor
# dockerd in the host's namespace: a policy-rc.d that already refuses is
# used as it is, a missing one is created and removed afterwards, a
# different one is moved aside and put back. On a systemd host the units
# are masked first as well.
install_without_daemons() {
    local guard=/usr/sbin/policy-rc.d saved="" created=0
    if [[ -e $guard ]]; then
        local refused=0
        "$guard" docker start >/dev/null 2>&1 || refused=$?
        if ((refused != 101)); then
            saved=$(mktemp)
            mv "$guard" "$saved"
        fi
    fi
    if [[ ! -e $guard ]]; then
        printf '#!/bin/sh\n# install-deps.sh: no service starts while it installs\nexit 101\n' >"$guard"
        chmod 755 "$guard"
        created=1
    fi
    if [[ -d /run/systemd/system ]]; then
        systemctl mask docker.service docker.socket containerd.service >/dev/null
    fi
    local status=0
    "$@" || status=$?
    if [[ -n $saved ]]; then
        mv "$saved" "$guard"
    elif ((created)); then
        rm -f "$guard"
    fi
    return "$status"
}

# Fails when a dockerd or containerd runs in this (the host's) network
# namespace: the tests start their own, each in its lab's namespaces.
no_daemon_in_host_namespace() {
    local self pid status=0
    self=$(readlink /proc/self/ns/net)
    for pid in $(pgrep -x dockerd || true) $(pgrep -x containerd || true); do
        if [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$self" ]]; then
            echo "install-deps: $(cat "/proc/$pid/comm") (pid $pid) runs in the host's network namespace: the tests start their own daemons in theirs; stop it" >&2
            status=1
        fi
    done
    return "$status"
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
docker_missing=()
for pkg in "${DOCKER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || docker_missing+=("$pkg")
done
if ((${#missing[@]} + ${#docker_missing[@]})); then
    apt-get update -qq
fi
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ((${#docker_missing[@]})); then
    echo "install-deps: installing ${docker_missing[*]} (no daemon started)" >&2
    install_without_daemons env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${docker_missing[@]}" >/dev/null
fi
no_daemon_in_host_namespace
# Bridged container-to-container traffic reaches iptables only through
# br_netfilter (tests/netns/docker.rs, dockerfw.rs; the harness sets the
# per-namespace sysctls itself). Not fatal here: a kernel with the module
# built in has the sysctls already, and the harness says what is missing.
if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    modprobe br_netfilter 2>/dev/null ||
        echo "install-deps: modprobe br_netfilter failed: the Docker tests need it (load it on the host)" >&2
fi
command -v cargo >/dev/null || { echo "install-deps: cargo not found on PATH" >&2; exit 1; }
