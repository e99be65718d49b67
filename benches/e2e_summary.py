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
  fresh-names  answered names/s, lookup p50 and p99 µs, set elements/s
           learned, the agent's RSS MiB before and after (0 without one)
  queued:<scenario>   packets the kernel queued to userspace during a
           tollgate measurement (all queues), shown beside its figure
  cpu:<scenario>      µs of CPU the whole machine spent per connection
           (or request, or name) during a conn, miss, l7 or fresh-names
           measurement

Every scenario but flood has a configuration `none` (no firewall) measured
in each of its rounds, interleaved with the others. A ratio is the median
over rounds of (configuration / none of the same round); an added latency
is the median over rounds of (configuration - none of the same round).
conn, miss and bulk also measure `conntrack` (connection tracking on, no
filtering): the ratio to it ("to ct") is printed beside the ratio to none.
The CPU column is the median µs per connection (or request) of the whole
machine, and `+cpu` what a configuration adds to none's (the median of the
per-round differences).
The last table holds each figure against issue 34's targets (ratios to
conntrack only where the scenario measures it, else to none): met or
missed.
"""

import statistics
import sys
from collections import defaultdict

TARGETS = {
    # scenario: (lowest ratio, to which configuration of the same round)
    "conn": (0.97, "conntrack"),
    "miss": (0.95, "conntrack"),
    "l7": (0.80, "none"),
    "bulk": (0.98, "conntrack"),
}
# added µs at most (issue 34)
DNS_TARGETS = {"p50": 30.0, "p99": 200.0}
# issue 34: names/s, set elements/s, added p99 µs, RSS growth MiB
FRESH_TARGETS = {"names": 2000.0, "elements": 16000.0, "p99": 1000.0, "rss": 10.0}
UNITS = {"conn": "conn/s", "miss": "conn/s", "l7": "req/s", "bulk": "Gbit/s"}


def target_applies(scenario, config):
    """A target names the shipped configuration: tollgate with the cache on
    (or the binary's default where it has no cache), default L7 queues."""
    if not config.startswith("tollgate"):
        return False
    if config.endswith(("-cache-off", "-l7q1", "-noas")):
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


def paired(rows, config, index, op, base="none"):
    """Per round: op(config's value, base's value); rounds where both exist."""
    baseline = rows[base]
    return [
        op(v[index], baseline[r][index])
        for r, v in rows[config].items()
        if r in baseline and len(v) > index and len(baseline[r]) > index
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
                threshold, basis = TARGETS[scenario]
                of = to_ct if basis == "conntrack" else ratio
                text = f">= {threshold} of {'ct' if basis == 'conntrack' else 'none'}"
                met = of is not None and of >= threshold
                summary.append((f"{scenario} {config}", f"{med:.2f} {unit}", fmt(of, 3), text, "met" if met else "MISSED"))
            else:
                summary.append((f"{scenario} {config}", f"{med:.2f} {unit}", fmt(ratio, 3), "(reference)", ""))

    if "dns" in rows:
        data = rows["dns"]
        print("\ndns (per-query RTT of the timing client, µs; added = median of per-round differences to none; to ct: to conntrack only)")
        print(f"  {'configuration':28} {'p50':>8} {'p99':>8} {'added p50':>10} {'added p99':>10} {'to ct p50':>10} {'to ct p99':>10}")
        for config in order["dns"]:
            p50 = statistics.median(v[0] for v in data[config].values())
            p99 = statistics.median(v[1] for v in data[config].values())
            if config == "none":
                print(f"  {config:28} {p50:8.0f} {p99:8.0f}")
                continue
            added, ratio, to_ct = {}, {}, {}
            against_ct = "conntrack" in data and config != "conntrack"
            for i, q in enumerate(("p50", "p99")):
                diffs = paired(data, config, i, lambda a, b: a - b)
                added[q] = statistics.median(diffs) if diffs else None
                ratios = paired(data, config, i, lambda a, b: a / b if b else 0.0)
                ratio[q] = statistics.median(ratios) if ratios else None
                diffs = paired(data, config, i, lambda a, b: a - b, "conntrack") if against_ct else []
                to_ct[q] = statistics.median(diffs) if diffs else None
            print(
                f"  {config:28} {p50:8.0f} {p99:8.0f} {fmt(added['p50'], 0):>10} {fmt(added['p99'], 0):>10}"
                f" {fmt(to_ct['p50'], 0):>10} {fmt(to_ct['p99'], 0):>10}"
                f"   (RTT ratio to none: p50 {fmt(ratio['p50'], 3)}, p99 {fmt(ratio['p99'], 3)})"
            )
            for q in ("p50", "p99"):
                shipped = config.startswith("tollgate") and not config.endswith("-cache-off")
                row = (f"dns added {q} {config}", f"{fmt(added[q], 0)} µs", fmt(ratio[q], 3))
                if shipped:
                    met = added[q] is not None and added[q] <= DNS_TARGETS[q]
                    summary.append(row + (f"<= {DNS_TARGETS[q]:.0f} µs", "met" if met else "MISSED"))
                else:
                    summary.append(row + ("(reference)", ""))

    if "fresh-names" in rows:
        fresh_names(rows, order, summary)

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
        print("\nsummary (the ratio the target names, in the same run: to conntrack only (ct) or to no firewall; dns: added µs; flood: share of SYNs that reached userspace)")
        print(f"  {'figure':40} {'value':>22} {'ratio':>7}  {'target':>12}  result")
        for figure, value, ratio, target, verdict in summary:
            print(f"  {figure:40} {value:>22} {ratio:>7}  {target:>12}  {verdict}")


def fresh_names(rows, order, summary):
    """The fresh-names table: each configuration's medians, what tollgate
    adds to none and to conntrack (medians of per-round differences), and
    issue 34's targets for the shipped configuration."""
    data = rows["fresh-names"]
    cpu = rows.get("cpu:fresh-names", {})
    print("\nfresh-names (answered names/s, lookup µs from send to the second reply; added = median of per-round differences)")
    print(
        f"  {'configuration':24} {'names/s':>8} {'elem/s':>8} {'p50':>7} {'p99':>7} {'+p50 none/ct':>13}"
        f" {'+p99 none/ct':>13} {'cpu µs':>7} {'RSS MiB before/after':>21}"
    )

    def added(config, ref, i):
        diffs = [
            v[i] - data[ref][r][i] for r, v in data[config].items() if r in data.get(ref, {})
        ]
        return statistics.median(diffs) if diffs else None

    for config in order["fresh-names"]:
        med = [statistics.median(v[i] for v in data[config].values()) for i in range(6)]
        c = statistics.median(v[0] for v in cpu[config].values()) if config in cpu else None
        add = {
            i: (added(config, "none", i), added(config, "conntrack", i))
            for i in (1, 2)
        }
        show = config not in ("none", "conntrack")
        pair = lambda i: f"{fmt(add[i][0], 0)}/{fmt(add[i][1], 0)}" if show else "-"
        rss = f"{med[4]:.1f}/{med[5]:.1f}" if med[5] else "-"
        print(
            f"  {config:24} {med[0]:8.0f} {med[3]:8.0f} {med[1]:7.0f} {med[2]:7.0f} {pair(1):>13}"
            f" {pair(2):>13} {fmt(c, 1):>7} {rss:>21}"
        )
        if not show:
            continue
        growth = max(v[5] - v[4] for v in data[config].values())
        for figure, value, met, target in (
            # The last name of a run may be cut off: 15,999.6/s is 16,000.
            ("names/s", f"{med[0]:.0f}", round(med[0]) >= FRESH_TARGETS["names"], ">= 2000"),
            ("set elements/s", f"{med[3]:.0f}", round(med[3]) >= FRESH_TARGETS["elements"], ">= 16000"),
            (
                "added p99 (to none)",
                f"{fmt(add[2][0], 0)} µs",
                add[2][0] is not None and add[2][0] <= FRESH_TARGETS["p99"],
                "<= 1000 µs",
            ),
            ("RSS growth", f"{growth:+.1f} MiB", abs(growth) <= FRESH_TARGETS["rss"], "± 10 MiB"),
        ):
            summary.append((f"fresh-names {figure} {config}", value, "-", target, "met" if met else "MISSED"))


if __name__ == "__main__":
    main()
