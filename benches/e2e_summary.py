#!/usr/bin/env python3
"""Summary of benches/e2e.sh: medians of interleaved rounds, ratios to none.

  e2e_summary.py RESULTS

RESULTS has one measurement a line, written by e2e.sh as it goes:

  <scenario> <round> <configuration> <value> [<value2>]

Scenarios and what their values are:
  conn     new connections/s, repeated tuples (wrk 'Connection: close')
  miss     new connections/s, every connection from a new source address
  dns      per-query RTT in µs of the timing client: p50 and p99
  l7       keep-alive HTTP requests/s through an L7 rule
  bulk     Gbit/s of one established TCP stream (iperf3)
  flood    SYNs sent at a denied port, and packets queued to userspace
  queued:<scenario>   packets the kernel queued to userspace during a
           tollgate measurement (all queues), shown beside its figure
  cpu:<scenario>      µs of CPU the whole machine spent per connection
           (or request) during a conn, miss or l7 measurement

Every scenario but flood has a configuration `none` (no firewall) measured
in each of its rounds, interleaved with the others. A ratio is the median
over rounds of (configuration / none of the same round); an added latency
is the median over rounds of (configuration - none of the same round).
conn, miss and bulk also measure `conntrack` (connection tracking on, no
filtering): the ratio to it ("to ct") is printed beside the ratio to none.
The CPU column is the median µs per connection (or request) of the whole
machine, and `+cpu` what a configuration adds to none's (the median of the
per-round differences).
The last table holds each figure of issue 17's targets: met or missed.
"""

import statistics
import sys
from collections import defaultdict

TARGETS = {
    # scenario: (lowest ratio to none, text)
    "conn": (0.95, ">= 0.95"),
    "miss": (0.90, ">= 0.90"),
    "l7": (0.60, ">= 0.6"),
    "bulk": (0.98, ">= 0.98"),
}
DNS_TARGETS = {"p50": 50.0, "p99": 500.0}
UNITS = {"conn": "conn/s", "miss": "conn/s", "l7": "req/s", "bulk": "Gbit/s"}


def target_applies(scenario, config):
    """A target names the shipped configuration: tollgate with the cache on
    (or the binary's default where it has no cache), default L7 queues."""
    if not config.startswith("tollgate"):
        return False
    if config.endswith("-cache-off") or config.endswith("-l7q1"):
        return False
    return scenario in TARGETS


def load(path):
    # rows[scenario][config][round] = [values]
    rows = defaultdict(lambda: defaultdict(dict))
    order = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 4:
                continue
            scenario, rnd, config = parts[0], int(parts[1]), parts[2]
            try:
                values = [float(v) for v in parts[3:]]
            except ValueError:
                continue
            rows[scenario][config][rnd] = values
            if config not in order[scenario]:
                order[scenario].append(config)
    return rows, order


def paired(rows, config, index, op):
    """Per round: op(config's value, none's value); rounds where both exist."""
    none = rows["none"]
    return [
        op(v[index], none[r][index])
        for r, v in rows[config].items()
        if r in none and len(v) > index and len(none[r]) > index
    ]


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    rows, order = load(sys.argv[1])
    summary = []  # (figure, value, ratio, target, verdict)

    for scenario in ("conn", "miss", "l7", "bulk"):
        if scenario not in rows:
            continue
        data = rows[scenario]
        unit = UNITS[scenario]
        print(f"\n{scenario} ({unit}; ratio = median of per-round ratios to none)")
        queued = rows.get(f"queued:{scenario}", {})
        cpu = rows.get(f"cpu:{scenario}", {})
        print(
            f"  {'configuration':28} {'median':>10} {'ratio':>7} {'to ct':>7} {'queued':>9}"
            f" {'cpu µs':>8} {'+cpu':>7}   rounds"
        )
        for config in order[scenario]:
            values = [v[0] for _, v in sorted(data[config].items())]
            med = statistics.median(values)
            ratios = paired(data, config, 0, lambda a, b: a / b if b else 0.0)
            ratio = statistics.median(ratios) if ratios and config != "none" else None
            to_ct = None
            if "conntrack" in data and config not in ("none", "conntrack"):
                per_round = [
                    v[0] / data["conntrack"][r][0]
                    for r, v in data[config].items()
                    if r in data["conntrack"] and data["conntrack"][r][0]
                ]
                to_ct = statistics.median(per_round) if per_round else None
            q = statistics.median(v[0] for v in queued[config].values()) if config in queued else None
            c = statistics.median(v[0] for v in cpu[config].values()) if config in cpu else None
            added = None
            if config in cpu and "none" in cpu and config != "none":
                diffs = paired(cpu, config, 0, lambda a, b: a - b)
                added = statistics.median(diffs) if diffs else None
            print(
                f"  {config:28} {med:10.{0 if unit != 'Gbit/s' else 2}f} {fmt(ratio, 3):>7} {fmt(to_ct, 3):>7}"
                f" {fmt(q, 0):>9} {fmt(c, 1):>8} {fmt(added, 1):>7}   "
                + " ".join(f"{x:.{0 if unit != 'Gbit/s' else 2}f}" for x in values)
            )
            if config == "none":
                continue
            if target_applies(scenario, config):
                threshold, text = TARGETS[scenario]
                met = ratio is not None and ratio >= threshold
                summary.append((f"{scenario} {config}", f"{med:.2f} {unit}", fmt(ratio, 3), text, "met" if met else "MISSED"))
            else:
                summary.append((f"{scenario} {config}", f"{med:.2f} {unit}", fmt(ratio, 3), "(reference)", ""))

    if "dns" in rows:
        data = rows["dns"]
        print("\ndns (per-query RTT of the timing client, µs; added = median of per-round differences to none)")
        print(f"  {'configuration':28} {'p50':>8} {'p99':>8} {'added p50':>10} {'added p99':>10}")
        for config in order["dns"]:
            p50 = statistics.median(v[0] for v in data[config].values())
            p99 = statistics.median(v[1] for v in data[config].values())
            if config == "none":
                print(f"  {config:28} {p50:8.0f} {p99:8.0f}")
                continue
            added, ratio = {}, {}
            for i, q in enumerate(("p50", "p99")):
                diffs = paired(data, config, i, lambda a, b: a - b)
                added[q] = statistics.median(diffs) if diffs else None
                ratios = paired(data, config, i, lambda a, b: a / b if b else 0.0)
                ratio[q] = statistics.median(ratios) if ratios else None
            print(
                f"  {config:28} {p50:8.0f} {p99:8.0f} {fmt(added['p50'], 0):>10} {fmt(added['p99'], 0):>10}"
                f"   (RTT ratio to none: p50 {fmt(ratio['p50'], 3)}, p99 {fmt(ratio['p99'], 3)})"
            )
            for q in ("p50", "p99"):
                shipped = config.startswith("tollgate") and not config.endswith("-cache-off")
                row = (f"dns added {q} {config}", f"{fmt(added[q], 0)} µs", fmt(ratio[q], 3))
                if shipped:
                    met = added[q] is not None and added[q] < DNS_TARGETS[q]
                    summary.append(row + (f"< {DNS_TARGETS[q]:.0f} µs", "met" if met else "MISSED"))
                else:
                    summary.append(row + ("(reference)", ""))

    if "flood" in rows:
        data = rows["flood"]
        print("\nflood (SYNs at a denied port; userspace = packets the NFQUEUE target handed to a queue, overflowed ones included)")
        print(f"  {'configuration':28} {'sent':>10} {'userspace':>10} {'share':>7}")
        for config in order["flood"]:
            sent = statistics.median(v[0] for v in data[config].values())
            user = statistics.median(v[1] for v in data[config].values())
            share = statistics.median(v[1] / v[0] if v[0] else 0.0 for v in data[config].values())
            print(f"  {config:28} {sent:10.0f} {user:10.0f} {share:7.3f}")
            summary.append((f"flood userspace/SYN {config}", f"{user:.0f} of {sent:.0f}", f"{share:.3f}", "(measured)", ""))

    if summary:
        print("\nsummary (ratio to no firewall in the same run; dns: of the RTT; flood: share of SYNs that reached userspace)")
        print(f"  {'figure':40} {'value':>22} {'ratio':>7}  {'target':>12}  result")
        for figure, value, ratio, target, verdict in summary:
            print(f"  {figure:40} {value:>22} {ratio:>7}  {target:>12}  {verdict}")


if __name__ == "__main__":
    main()
