"""Is run B's loss curve worse than run A's? Two hf_ep_train.py --summary files.

    python bench/python_runtime/compare_losses.py base.json balanced.json [--from-step 80]

Over the steps from --from-step on, each run's mean loss and its standard error from the means
of 8 consecutive batches of steps (neighbouring steps are correlated), and the difference B - A
with a 95% interval (normal approximation). Prints one JSON line.
"""
import argparse
import json
import math
import statistics


def mean_and_error(values, batches=8):
    size = len(values) // batches
    means = [statistics.fmean(values[i * size:(i + 1) * size]) for i in range(batches)]
    return statistics.fmean(values), statistics.stdev(means) / math.sqrt(batches)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--from-step", type=int, default=80)
    arguments = parser.parse_args()
    runs = [json.load(open(path))["losses"][arguments.from_step:]
            for path in (arguments.base, arguments.new)]
    (mean_a, error_a), (mean_b, error_b) = (mean_and_error(run) for run in runs)
    half_width = 1.96 * math.hypot(error_a, error_b)
    difference = mean_b - mean_a
    print(json.dumps({"steps": len(runs[0]), "base_mean": mean_a, "base_se": error_a,
                      "new_mean": mean_b, "new_se": error_b, "difference": difference,
                      "interval": [difference - half_width, difference + half_width],
                      "new_worse": difference - half_width > 0}))


if __name__ == "__main__":
    main()
