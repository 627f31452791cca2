"""Shared fixtures of the autocapture tests: a recorder standing in for the trace, and hooks
removed after every test."""

import os
import sys

import pytest
import torch

_PYTHON_SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                               "profiler", "python")
if _PYTHON_SOURCES not in sys.path:
    sys.path.append(_PYTHON_SOURCES)  # after PYTHONPATH, so a chosen transformers stays first

from moescope.autocapture import expert_load_capture  # noqa: E402


class Recorder:
    """Collects what the capture hands to ``record``; ``step`` is what ``current_step`` says."""

    def __init__(self):
        self.samples = []
        self.step = 0

    def record(self, step, layer, counts):
        assert counts.device.type == "cpu" and counts.dtype == torch.int64, counts
        self.samples.append((step, layer, counts.clone()))

    def current_step(self):
        return self.step

    def by_step_and_layer(self):
        """{(step, layer): counts}; each (step, layer) must have been recorded exactly once."""
        samples = {}
        for step, layer, counts in self.samples:
            assert (step, layer) not in samples, f"step {step} layer {layer} recorded twice"
            samples[(step, layer)] = counts
        return samples


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture(autouse=True)
def remove_hooks_after_test():
    yield
    expert_load_capture.detach_all()
