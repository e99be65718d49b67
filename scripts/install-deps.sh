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
    containernetworking-plugins util-linux # podman's bridge networks, nsenter (tests/netns/docker.rs)
    iperf3 gcc libc6-dev                 # benches/e2e.sh: bulk throughput, its all-miss bind shim
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "install-deps: cargo not found on PATH" >&2; exit 1; }
