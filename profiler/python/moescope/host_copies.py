"""Small device tensors to the host without waiting for the device.

Every capture path that records values living on a GPU (the zero-code expert-load capture,
``moescope.expert_load`` with a CUDA tensor) goes through :class:`HostCopyQueue`: the tensor is
copied into a pinned host buffer with ``non_blocking=True`` on the current stream, a
``torch.cuda.Event`` is recorded after the copy, and the value is handed to ``deliver`` once the
event has completed: checked with ``Event.query`` (which does not block) whenever something new
is submitted, and at :meth:`HostCopyQueue.flush`, which the end of a run calls and which alone
waits. So a step's values usually reach the trace during the next step. Buffers and events are
pooled: after the first steps nothing is allocated but the host tensor handed over. Values are
handed over in submission order.
"""

import collections
import threading

import torch


class PinnedTransfer:
    """A pinned host buffer and the event that says when the copy into it has landed."""

    def __init__(self, numel, dtype):
        self.host = torch.empty(numel, dtype=dtype, pin_memory=True)
        self.event = torch.cuda.Event()
        self.key = None

    def start(self, values):
        """Queues the copy of ``values`` (CUDA, ``[numel]``) on the current stream."""
        self.host.copy_(values, non_blocking=True)
        self.event.record(torch.cuda.current_stream(values.device))

    def landed(self):
        return self.event.query()

    def wait(self):
        self.event.synchronize()


class HostCopyQueue:
    """Hands ``deliver(key, host_tensor)`` each submitted device tensor once its copy landed."""

    def __init__(self, deliver):
        self.deliver = deliver
        self.in_flight = collections.deque()  # transfers, oldest first
        self.free = {}                        # (numel, dtype) -> [transfer]
        self.lock = threading.Lock()          # submitted from several threads
        self.transfer_type = PinnedTransfer   # tests drive the queue with a stand-in

    def submit(self, key, values):
        """Starts the copy of ``values`` (a CUDA tensor ``[n]``); hands over what has landed."""
        shape = (values.numel(), values.dtype)
        with self.lock:
            pool = self.free.setdefault(shape, [])
            transfer = pool.pop() if pool else self.transfer_type(*shape)
        transfer.start(values)
        transfer.key = key
        with self.lock:
            self.in_flight.append(transfer)
        self.hand_over_landed()

    def hand_over_landed(self, wait=False):
        """Hands over, oldest first, the values whose copy has completed (all of them if wait)."""
        while True:
            with self.lock:
                if not self.in_flight:
                    return
                transfer = self.in_flight[0]
                if not wait and not transfer.landed():
                    return
                self.in_flight.popleft()
            if wait:
                transfer.wait()  # the end of a run only
            values = transfer.host.clone()  # the pinned buffer goes back to the pool
            with self.lock:
                self.free.setdefault((values.numel(), values.dtype), []).append(transfer)
            self.deliver(transfer.key, values)

    def flush(self):
        """Hands over everything in flight, waiting for the copies."""
        self.hand_over_landed(wait=True)
