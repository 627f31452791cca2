"""Checks HolisticTraceAnalysis's temporal breakdown of exported traces against ours.

usage: hta_breakdown_check.py TRACE_DIR EXPECTED.json
EXPECTED.json: {"<rank>": {"idle_us": x, "compute_us": y, "non_compute_us": z, "window_us": w}}
HTA rounds event times to microseconds, so each value may differ by a few microseconds per
kernel: the tolerance is 0.2% of the window plus 1 us per GPU op.
Exits 0 when every rank agrees, 1 when a value differs, 2 when HTA cannot be imported.
"""
import json
import sys


def main() -> int:
    trace_dir, expected_path = sys.argv[1], sys.argv[2]
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as error:  # setup.sh installs it; say so plainly when it is missing
        print(f"HolisticTraceAnalysis is not importable: {error}")
        return 2
    with open(expected_path) as f:
        expected = json.load(f)
    analysis = TraceAnalysis(trace_dir=trace_dir)
    frame = analysis.get_temporal_breakdown(visualize=False)
    failures = 0
    seen = set()
    for _, row in frame.iterrows():
        rank = str(int(row["rank"]))
        seen.add(rank)
        ours = expected[rank]
        tolerance = 0.002 * ours["window_us"] + 1.0 * ours["kernels"]
        pairs = {
            "idle": (row["idle_time(us)"], ours["idle_us"]),
            "compute": (row["compute_time(us)"], ours["compute_us"]),
            "non_compute": (row["non_compute_time(us)"], ours["non_compute_us"]),
            "window": (row["kernel_time(us)"], ours["window_us"]),
        }
        for name, (hta_value, our_value) in pairs.items():
            ok = abs(hta_value - our_value) <= tolerance
            print(f"rank {rank} {name}: HTA {hta_value:.1f} us, moescope {our_value:.1f} us"
                  f" {'ok' if ok else 'DIFFERENT'} (tolerance {tolerance:.1f})")
            failures += not ok
    if seen != set(expected):
        print(f"ranks seen by HTA {sorted(seen)} != exported {sorted(expected)}")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
