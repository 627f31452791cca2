"""The capture itself, with only torch: a user's own MoE found through a registered adapter,
the CUDA hand-over queue driven by a stand-in transfer (this machine has no GPU), and
failures that must never reach the program."""

import sys

import pytest
import torch

from moescope.autocapture import expert_load_capture, moe_layers
from moescope.autocapture.moe_layers import MoeLayer

NUM_EXPERTS, TOP_K, DIM = 4, 2, 8


class HomeMadeRouter(torch.nn.Module):
    """Returns (weights [tokens, top_k], expert ids [tokens, top_k]) like many routers."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(DIM, NUM_EXPERTS)

    def forward(self, x):
        weights, ids = torch.topk(self.linear(x).softmax(-1), TOP_K)
        return weights, ids


class HomeMadeMoe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.router = HomeMadeRouter()
        self.experts = torch.nn.ModuleList(torch.nn.Linear(DIM, DIM) for _ in range(NUM_EXPERTS))

    def forward(self, x):
        weights, ids = self.router(x)
        out = torch.zeros_like(x)
        for expert_index, expert in enumerate(self.experts):
            token, slot = torch.where(ids == expert_index)
            out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return out


class HomeMadeAdapter:
    """The adapter a user writes for their own MoE (docs/autocapture-adapters.md)."""

    def match(self, name, module):
        if not isinstance(module, HomeMadeMoe):
            return None
        return MoeLayer(
            path=name, layer=moe_layers.decoder_layer_index(name), block=module,
            router=module.router, num_experts=NUM_EXPERTS, top_k=TOP_K, family="home-made",
            count_tokens=lambda output: moe_layers.tokens_per_expert_from_indices(
                output[1], NUM_EXPERTS))


@pytest.fixture
def adapter():
    adapter = HomeMadeAdapter()
    moe_layers.register_adapter(adapter)
    yield adapter
    moe_layers.unregister_adapter(adapter)


def home_made_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(HomeMadeMoe(), torch.nn.ReLU(), HomeMadeMoe())


def test_registered_adapter_finds_a_users_moe(adapter, recorder):
    model = home_made_model()
    layers = expert_load_capture.attach(model, recorder.record, recorder.current_step)
    assert [(layer.path, layer.layer) for layer in layers] == [("0", 0), ("2", 2)]
    x = torch.randn(10, DIM)
    ids_seen = []
    model[0].router.register_forward_hook(lambda m, a, output: ids_seen.append(output[1]))
    model(x)
    assert torch.equal(recorder.by_step_and_layer()[(0, 0)],
                       torch.bincount(ids_seen[0].reshape(-1), minlength=NUM_EXPERTS))
    assert expert_load_capture.attach(model, recorder.record, recorder.current_step) == [], \
        "a second attach must not hook the same routers again"


def test_indices_outside_the_experts_are_not_counted():
    ids = torch.tensor([[0, 3], [3, -1], [4, 1]])
    assert moe_layers.tokens_per_expert_from_indices(ids, 4).tolist() == [1, 1, 0, 2]


def test_layer_index_comes_from_the_path():
    assert moe_layers.decoder_layer_index("model.layers.13.mlp") == 13
    assert moe_layers.decoder_layer_index("layers.2.moe.router") == 2
    assert moe_layers.decoder_layer_index("moe") == -1


def test_failures_in_record_or_current_step_stay_inside(adapter, capsys):
    model = home_made_model()
    x = torch.randn(6, DIM)
    plain = model(x)

    def broken_step():
        raise KeyError("no step yet")
    expert_load_capture.attach(model, lambda *sample: None, broken_step)
    assert torch.equal(model(x), plain)
    assert torch.equal(model(x), plain)
    err = capsys.readouterr().err
    assert err.count("moescope: ") == 1 and "KeyError" in err
    assert not model[0].router._forward_hooks and not model[2].router._forward_hooks


class StandInTransfer:
    """Stands in for the pinned buffer + CUDA event: the test says when a copy has landed."""

    created = 0

    def __init__(self, numel, dtype):
        StandInTransfer.created += 1
        self.host = torch.empty(numel, dtype=dtype)
        self.done = False
        self.waited = False

    def start(self, counts):
        self.host.copy_(counts)
        self.done = False

    def landed(self):
        return self.done

    def wait(self):
        self.waited = True
        self.done = True


def test_in_flight_counts_are_handed_over_in_order_once_landed(adapter, recorder):
    capture = expert_load_capture.ExpertLoadCapture([], recorder.record, recorder.current_step)
    capture.queue.transfer_type = StandInTransfer
    layer = moe_layers.find_moe_layers(home_made_model())[0]
    for step in range(3):
        capture._start_transfer(step, layer, torch.full((NUM_EXPERTS,), step))
    slots = list(capture.queue.in_flight)
    slots[1].done = True  # the second landed first: it must still wait for the first
    capture._hand_over_landed()
    assert recorder.samples == []
    slots[0].done = True
    capture._hand_over_landed()
    assert [step for step, _, _ in recorder.samples] == [0, 1]
    assert all(not slot.waited for slot in slots)  # no waiting outside flush
    capture.flush()
    assert slots[2].waited
    assert [(step, counts.tolist()) for step, _, counts in recorder.samples] == [
        (step, [step] * NUM_EXPERTS) for step in range(3)]
    # The buffers went back to the pool: the next transfers reuse them.
    created = StandInTransfer.created
    capture._start_transfer(3, layer, torch.zeros(NUM_EXPERTS, dtype=torch.int64))
    assert StandInTransfer.created == created
    capture.flush()
    assert recorder.samples[2][2].tolist() == [2] * NUM_EXPERTS, \
        "a handed-over tensor must not change when its buffer is reused"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
