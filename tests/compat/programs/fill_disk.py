"""Fills the disk its argument lives on, then keeps working and frees the room at the end: what
it prints must not depend on how much room there was."""
import errno
import os
import sys
import time

import nvtx

filler_path = os.path.join(sys.argv[1], "filler.bin")
filled = False
with open(filler_path, "wb", buffering=0) as filler:
    block = b"\0" * 65536
    try:
        for _ in range(1 << 16):
            filler.write(block)
    except OSError as error:
        filled = error.errno == errno.ENOSPC
print("disk full:", filled, flush=True)
# Ranges into the full disk for at least 0.5 s, five of the recorder's 100 ms flushes, however
# fast the machine: a shorter loop could end before any flush and leave the disk full to nobody.
total, part, deadline = 0, 0, time.monotonic() + 0.5
while part < 20000 or time.monotonic() < deadline:
    with nvtx.annotate(f"part {part % 50}"):
        total += part * part if part < 20000 else 0
    part += 1
print("worked on:", total)
os.remove(filler_path)
