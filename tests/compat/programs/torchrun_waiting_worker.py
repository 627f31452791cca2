"""A torchrun worker that says it is ready and waits: torchrun_sigterm stops the launcher with
SIGTERM, and the launcher must stop its workers (its own handler's cleanup) as it does plainly.
Each worker writes its pid into the folder named on the command line."""
import os
import sys
import time

with open(os.path.join(sys.argv[1], f"worker.{os.getpid()}"), "w") as out:
    out.write(str(os.getpid()))
print(f"rank {os.environ.get('RANK')} ready", flush=True)
time.sleep(120)
