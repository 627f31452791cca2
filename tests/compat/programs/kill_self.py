"""Works for a while (longer than the recorder's flush interval) with NVTX ranges from the
`nvtx` package, then dies of the signal named on the command line."""
import os
import signal
import sys
import time

import nvtx

for step in range(6):
    with nvtx.annotate(f"step {step}"):
        time.sleep(0.05)
print("about to die", flush=True)
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
time.sleep(10)
print("still alive")
