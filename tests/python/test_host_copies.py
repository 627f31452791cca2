"""moescope.host_copies and moescope.expert_load with device tensors: values reach the trace in
submission order, only once their copy landed, and nothing waits but flush(). The CUDA transfer
is replaced by a stand-in that the test completes (no GPU here); PinnedTransfer itself only runs
on the GPU machine."""
import sys

import pytest
import torch

from moescope.host_copies import HostCopyQueue


class StandIn:
    def __init__(self, numel, dtype):
        self.host = torch.empty(numel, dtype=dtype)
        self.done = self.waited = False

    def start(self, values):
        self.host.copy_(values)
        self.done = False

    def landed(self):
        return self.done

    def wait(self):
        self.waited = self.done = True


def test_values_are_delivered_in_order_once_landed_and_only_flush_waits():
    delivered = []
    queue = HostCopyQueue(lambda key, values: delivered.append((key, values.tolist())))
    queue.transfer_type = StandIn
    for key in range(3):
        queue.submit(key, torch.full((4,), key))
    transfers = list(queue.in_flight)
    transfers[2].done = True
    queue.hand_over_landed()
    assert delivered == []  # the third landed, but the first has not: order is kept
    transfers[0].done = True
    queue.submit(3, torch.full((4,), 3))  # a later submission hands over what landed
    assert [key for key, _ in delivered] == [0]
    assert not any(transfer.waited for transfer in transfers)
    queue.flush()
    assert [key for key, _ in delivered] == [0, 1, 2, 3]
    assert delivered[1][1] == [1, 1, 1, 1]


def test_a_delivered_tensor_does_not_change_when_its_buffer_is_reused():
    delivered = []
    queue = HostCopyQueue(lambda key, values: delivered.append(values))
    queue.transfer_type = StandIn
    queue.submit(0, torch.full((2,), 7))
    queue.flush()
    queue.submit(1, torch.full((2,), 9))
    queue.flush()
    assert delivered[0].tolist() == [7, 7] and delivered[1].tolist() == [9, 9]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
