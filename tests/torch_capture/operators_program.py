"""One process under `moescope record`: the C++ torch capture with every operator (ops=True),
then a matrix product of known shapes and a small training step. Prints "ok"."""
import sys

import torch

from moescope.autocapture import torch_capture


def main():
    started, reason = torch_capture.start(collectives=True, ops=True)
    print("capture %s: %s" % (started, reason), file=sys.stderr)
    a = torch.randn(3, 5)
    b = torch.randn(5, 7)
    torch.mm(a, b)
    model = torch.nn.Linear(5, 2)
    model(a).sum().backward()
    torch_capture.stop()
    torch.mm(b.t(), a.t())  # after stop: not recorded
    print("ok" if started else "not started")


if __name__ == "__main__":
    main()
