#!/bin/sh
# Points `iptables` at the backend the host already uses, so that tollgate
# (which detects the backend from `iptables -V`) programs the same tables
# as kube-proxy and the CNI. The backend holding more rules wins; on a host
# with none, nf_tables (Debian's default) is kept.
set -eu

count() {
    { "$1-save" 2>/dev/null || true; } | grep -c '^-' || true
}

if command -v update-alternatives >/dev/null 2>&1; then
    legacy=$(( $(count iptables-legacy) + $(count ip6tables-legacy) ))
    nft=$(( $(count iptables-nft) + $(count ip6tables-nft) ))
    mode=nft
    if [ "$legacy" -gt "$nft" ]; then
        mode=legacy
    fi
    for tool in iptables ip6tables; do
        update-alternatives --set "$tool" "/usr/sbin/$tool-$mode" >/dev/null
    done
    echo "tollgate-entrypoint: iptables backend $mode (rules: legacy $legacy, nft $nft)" >&2
fi

exec /usr/local/bin/tollgate "$@"
