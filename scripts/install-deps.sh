#!/usr/bin/env bash
# Installs the system packages tollgate needs (Debian). Idempotent; needs
# root for the packages.
#
#   scripts/install-deps.sh          everything the test suite uses
#   scripts/install-deps.sh --demo   only what scripts/demo.sh needs (the
#                                    build's C linker and the lab's tools)
#
# The Rust toolchain is checked FIRST, before anything is installed: Debian
# ships an older Rust than the build needs, so the script stops at once and
# says how to get the right one (rustup). apt-get waits for the package
# lock another process (unattended-upgrades, a second apt) holds, up to
# APT_LOCK_WAIT seconds (default 600).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The lab (scripts/lab.sh) and the build (a C compiler and libc headers for
# the linker and the `ring` crate).
DEMO_PACKAGES=(
    iproute2 iptables ipset curl netcat-openbsd iputils-ping python3 dnsmasq-base
    gcc libc6-dev
)
PACKAGES=(
    "${DEMO_PACKAGES[@]}"
    conntrack                            # the datapath's conntrack flushes in tests
    dnsutils                             # dig for FQDN tests
    nginx-light procps psmisc            # servers and process tools
    python3-scapy                        # forged packets (tests/netns/forgery.rs)
    tcpdump wrk                          # packet captures, HTTP benchmark
    hping3                               # SYN floods (benches/overload.sh)
    shellcheck                           # lints the shell scripts (scripts/test.sh)
    podman buildah mmdebstrap runc uidmap # the node image (scripts/image.sh, tests/netns/image.rs)
    containernetworking-plugins util-linux # podman's CNI bridge networks, nsenter (tests/netns/docker.rs)
    netavark aardvark-dns                # podman's netavark backend (tests/netns/harness/podman.rs)
    kmod                                 # modprobe (br_netfilter, below)
    iperf3                               # benches/e2e.sh: bulk throughput
    prometheus                           # promtool and a real Prometheus (tests/monitoring.rs, tests/netns/observe.rs)
)
# Debian's Docker Engine and Compose v1 for the real-engine tests
# (tests/netns/harness/docker.rs, tests/netns/dockerd.rs): installed with
# no daemon started in the host's namespace (below).
DOCKER_PACKAGES=(docker.io docker-compose)

# Runs "$@" (an apt-get install) with a policy-rc.d that refuses every
# service start, so no package starts its daemon in the host's namespace
# (containerd, dockerd, nginx, prometheus: the tests start their own, in
# their labs' namespaces): a policy-rc.d that already refuses is
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
        systemctl mask docker.service docker.socket containerd.service nginx.service prometheus.service >/dev/null
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

# Fails when a dockerd, containerd or prometheus runs in this (the host's)
# network namespace: the tests start their own, each in its lab's namespaces.
no_daemon_in_host_namespace() {
    local self pid status=0
    self=$(readlink /proc/self/ns/net)
    for pid in $(pgrep -x dockerd || true) $(pgrep -x containerd || true) $(pgrep -x prometheus || true); do
        if [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$self" ]]; then
            echo "install-deps: $(cat "/proc/$pid/comm") (pid $pid) runs in the host's network namespace: the tests start their own daemons in theirs; stop it" >&2
            status=1
        fi
    done
    return "$status"
}

demo=false
case "${1:-}" in
    --demo) demo=true ;;
    "") ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

# The toolchain: cargo on PATH and rustc at least the workspace's
# rust-version.
need=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
rustup_hint="install it with rustup (https://rustup.rs), as the user who builds:
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain $need
    . \"\$HOME/.cargo/env\"
(Debian's own rustc is older: Debian 12 ships 1.63)"
if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    echo "install-deps: no Rust toolchain on PATH: tollgate needs Rust $need or newer; $rustup_hint" >&2
    exit 1
fi
have=$(rustc --version | awk '{print $2}')
if [[ $(printf '%s\n%s\n' "$need" "${have%%-*}" | sort -V | head -n 1) != "$need" ]]; then
    echo "install-deps: rustc $have is too old: tollgate needs Rust $need or newer; $rustup_hint" >&2
    exit 1
fi

# apt_get ARGS...: apt-get, waiting while another process holds the lock
# (apt-get exits 100 with "Could not get lock" at once otherwise).
apt_get() {
    local deadline=$((SECONDS + ${APT_LOCK_WAIT:-600})) err said=false
    err=$(mktemp)
    while :; do
        if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=10 "$@" 2>"$err"; then
            rm -f "$err"
            return 0
        fi
        if ! grep -qiE 'could not get lock|unable to acquire|unable to lock' "$err" || ((SECONDS >= deadline)); then
            cat "$err" >&2
            rm -f "$err"
            return 1
        fi
        if ! $said; then
            echo "install-deps: waiting for the apt lock ($(grep -m1 -io 'held by process [0-9]* ([^)]*)' "$err" || echo 'held by another process'))" >&2
            said=true
        fi
        sleep 2
    done
}

if $demo; then wanted=("${DEMO_PACKAGES[@]}"); else wanted=("${PACKAGES[@]}"); fi
missing=()
for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
docker_missing=()
$demo && DOCKER_PACKAGES=()
for pkg in "${DOCKER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || docker_missing+=("$pkg")
done
if ((${#missing[@]} + ${#docker_missing[@]})); then
    apt_get update -qq
fi
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}" >&2
    if $demo; then
        # The demo's packages start no service.
        apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        install_without_daemons apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi
$demo && exit 0
if ((${#docker_missing[@]})); then
    echo "install-deps: installing ${docker_missing[*]} (no daemon started)" >&2
    install_without_daemons apt_get install -y -qq --no-install-recommends "${docker_missing[@]}" >/dev/null
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
