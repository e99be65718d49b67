#!/bin/sh
# Points `iptables` at the backend the host already uses, so that tollgate
# (which detects the backend from `iptables -V`) programs the same tables
# as kube-proxy and the CNI. The choice, as Kubernetes' iptables-wrapper
# makes it: the backend holding kubelet's KUBE-IPTABLES-HINT or
# KUBE-KUBELET-CANARY chain wins; otherwise the one holding more rules; on
# a host with none, nf_tables (Debian's default) is kept.
#
# Only plain `*-save` calls look at the host: they list the tables that
# exist and create none (`iptables-legacy-save -t mangle` would create an
# empty legacy table, and every later `iptables-nft` call would warn).
# The chosen backend's directory of links (made in the Dockerfile) goes
# first on PATH; nothing is written, so a read-only root filesystem works.
# Without those directories (the script run elsewhere) the system's
# `iptables` is used as it is.
set -eu

links=/usr/local/lib/tollgate

# Everything the host's tables of backend $1 (nft or legacy) hold.
tables() {
    "iptables-$1-save" 2>/dev/null || true
    "ip6tables-$1-save" 2>/dev/null || true
}

if [ -d "$links/iptables-nft" ] && [ -d "$links/iptables-legacy" ]; then
    legacy_tables=$(tables legacy)
    nft_tables=$(tables nft)
    hint='^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY) '
    if printf '%s\n' "$legacy_tables" | grep -Eq "$hint"; then
        mode=legacy reason="kubelet hint chain"
    elif printf '%s\n' "$nft_tables" | grep -Eq "$hint"; then
        mode=nft reason="kubelet hint chain"
    else
        legacy=$(printf '%s\n' "$legacy_tables" | grep -c '^-' || true)
        nft=$(printf '%s\n' "$nft_tables" | grep -c '^-' || true)
        mode=nft
        if [ "$legacy" -gt "$nft" ]; then
            mode=legacy
        fi
        reason="rules: legacy $legacy, nft $nft"
    fi
    PATH="$links/iptables-$mode:$PATH"
    export PATH
    echo "tollgate-entrypoint: iptables backend $mode ($reason)" >&2
fi

exec /usr/local/bin/tollgate "$@"
