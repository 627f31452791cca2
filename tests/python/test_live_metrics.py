"""moescope.live_metrics without a recorder: the per-step metric set's formulas, the program's
global step per training step, when a step is written, and a failing sink that is dropped
without reaching the program."""

import json
import math

from moescope import live_metrics


def test_layer_metrics_of_one_step():
    values = dict(live_metrics.layer_metrics(7, [6, 2, 0, 0]))
    assert values["moescope/layer7/max_over_mean"] == 3.0
    assert values["moescope/layer7/min_over_mean"] == 0.0
    assert math.isclose(values["moescope/layer7/cv"], math.sqrt(6) / 2)
    assert values["moescope/layer7/dead_experts"] == 2.0
    assert values["moescope/layer7/hot_experts"] == 1.0  # 0.75 > 2 / 4
    assert values["moescope/layer7/tokens"] == 8.0
    assert math.isclose(values["moescope/layer7/effective_experts"],
                        math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))))


def test_across_layer_percentiles_interpolate_like_numpy():
    values = live_metrics.step_metrics({0: [1, 1], 1: [3, 1], 2: [2, 0]}, step_ms=5.0)
    # max/mean per layer: 1, 1.5, 2 -> p50 1.5, p90 1.9, max 2
    assert math.isclose(values["moescope/max_over_mean/p50"], 1.5)
    assert math.isclose(values["moescope/max_over_mean/p90"], 1.9)
    assert values["moescope/max_over_mean/max"] == 2.0
    assert values["moescope/dead_experts"] == 1.0
    assert values["moescope/step_time_ms/mean"] == 5.0


class FailingSink:
    def write(self, *args, **kwargs):
        raise OSError("disk full")

    def flush(self):
        pass

    def close(self):
        pass


def test_steps_reach_sinks_at_the_programs_global_steps(tmp_path, capsys):
    live = live_metrics.LiveMetrics()
    path = tmp_path / "live.jsonl"
    live.add_sink("jsonl", lambda: live_metrics.JsonlSink(str(path), 0))
    live.add_sink("failing", FailingSink)
    current = [0]
    live.current_step = lambda: current[0]
    for step in range(4):
        current[0] = step
        live.on_expert_load(step, 0, [4, 4])
        live.on_expert_load(step, 1, [8, 0])
        live.on_step_end(step, 0.002)
        if step < 2:  # the program logs steps 0 and 1 only, at 100, 110
            live.on_program_step(100 + 10 * step)
    live.publish(final=False)  # steps 0..2 are done (step 3 ended, nothing after it yet)
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in written] == [0, 1, 2]
    live.close()
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in written] == [0, 1, 2, 3]
    # Logged steps at their global steps, later ones shifted like the last one logged.
    assert [line["global_step"] for line in written] == [100, 110, 111, 112]
    assert all(line["scalars"]["moescope/layer1/max_over_mean"] == 2.0 for line in written)
    assert "dropping a sink: OSError: disk full" in capsys.readouterr().err
    live.close()  # twice is harmless
