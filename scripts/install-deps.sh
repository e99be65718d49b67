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
    prometheus                           # promtool and a real Prometheus (tests/monitoring.rs, tests/netns/observe.rs)
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
# Bridged container-to-container traffic reaches iptables only through
# br_netfilter (tests/netns/docker.rs, dockerfw.rs; the harness sets the
# per-namespace sysctls itself). Not fatal here: a kernel with the module
# built in has the sysctls already, and the harness says what is missing.
if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    modprobe br_netfilter 2>/dev/null ||
        echo "install-deps: modprobe br_netfilter failed: the Docker tests need it (load it on the host)" >&2
fi
command -v cargo >/dev/null || { echo "install-deps: cargo not found on PATH" >&2; exit 1; }
