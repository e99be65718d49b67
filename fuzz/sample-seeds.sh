#!/usr/bin/env bash
# Turns the repository's recorded samples into fuzz seeds (no root needed):
#   seeds/dns_learn/       8 control bytes + each core/tests/data/dns/*.bin
#   seeds/http_stream/     8 control bytes + each core/tests/data/http/* stream
#   seeds/policy_compile/  rules/inventory.yaml + each rules/*.yaml and
#                          tests/data/spec/*.yaml policy file
#   seeds/l7_urgent/       client TCP segments with and without urgent
#                          data (urgent-seeds.py)
# Packet seeds come from capture-seeds.sh (a lab capture, needs root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
root=..
mkdir -p seeds/dns_learn seeds/http_stream seeds/policy_compile
for f in "$root"/core/tests/data/dns/*.bin; do
    { head -c 8 /dev/zero; cat "$f"; } >"seeds/dns_learn/sample-$(basename "$f" .bin)"
done
for f in "$root"/core/tests/data/http/*.http "$root"/core/tests/data/http/*.bin; do
    { head -c 8 /dev/zero; cat "$f"; } >"seeds/http_stream/sample-$(basename "${f%.*}")"
done
for f in "$root"/rules/*.yaml "$root"/tests/data/spec/*.yaml; do
    [[ $(basename "$f") == inventory.yaml ]] && continue
    { cat "$root/rules/inventory.yaml"; echo "---"; cat "$f"; } \
        >"seeds/policy_compile/sample-$(basename "$(dirname "$f")")-$(basename "$f" .yaml)"
done
python3 urgent-seeds.py
