"""Fills the disk its argument lives on, then keeps working and frees the room at the end: what
it prints must not depend on how much room there was."""
import errno
import os
import sys

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
total = 0
for part in range(20000):  # many flushes' worth of ranges into the full disk
    with nvtx.annotate(f"part {part % 50}"):
        total += part * part
print("worked on:", total)
os.remove(filler_path)
