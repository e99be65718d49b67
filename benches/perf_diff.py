#!/usr/bin/env python3
"""Where a configuration's extra CPU goes, per operation: the kernel and
user symbols of two system-wide profiles (benches/e2e.sh with PERF=dir),
each divided by the operations (connections, requests) of its
measurement, and the difference.

    benches/perf_diff.py BASE.data BASE_OPS OTHER.data OTHER_OPS [ROWS]

BASE_OPS / OTHER_OPS: connections (or requests) the measurement made,
its rate times its seconds. Prints µs per operation of each side (idle
excluded) and the symbols whose µs per operation differ most. Samples are
taken at perf's frequency (e2e.sh: 499 Hz per CPU), so a sample is
1/499 s of one CPU.
"""
import subprocess
import sys

IDLE = ("pv_native_safe_halt", "default_idle", "cpu_idle_poll", "intel_idle", "acpi_idle_do_entry")


def samples(path):
    out = subprocess.run(
        ["perf", "report", "-i", path, "--no-children", "--sort", "sym", "-n", "-g", "none",
         "-q", "--stdio"],
        check=True, capture_output=True, text=True).stdout
    counts, freq = {}, 499
    for line in out.splitlines():
        parts = line.split()
        # "  1.23%  456  [k] symbol"
        if len(parts) >= 4 and parts[0].endswith("%") and parts[1].isdigit():
            name = " ".join(parts[3:])
            counts[name] = counts.get(name, 0) + int(parts[1])
    return counts, freq


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    base, base_ops, other, other_ops = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    rows = int(sys.argv[5]) if len(sys.argv) == 6 else 25
    (a, freq), (b, _) = samples(base), samples(other)
    per = 1e6 / freq
    busy = lambda d, ops: sum(v for k, v in d.items() if k not in IDLE) * per / ops
    print(f"busy CPU µs per operation: base {busy(a, base_ops):.1f}, other {busy(b, other_ops):.1f}, "
          f"difference {busy(b, other_ops) - busy(a, base_ops):+.1f}")
    diff = sorted(
        ((b.get(s, 0) * per / other_ops - a.get(s, 0) * per / base_ops, s)
         for s in (set(a) | set(b)) if s not in IDLE),
        reverse=True)
    print(f"{'µs/op':>7}  {'base':>6}  {'other':>6}  symbol")
    for d, s in diff[:rows]:
        print(f"{d:+7.2f}  {a.get(s, 0) * per / base_ops:6.2f}  {b.get(s, 0) * per / other_ops:6.2f}  {s}")


if __name__ == "__main__":
    main()
