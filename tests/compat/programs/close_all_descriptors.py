"""A daemon-like program: closes every descriptor it did not open, then opens its own files
(which get the lowest numbers again) and writes to them while it works."""
import hashlib
import os
import sys
import time

os.closerange(3, 1 << 20)
out_path = sys.argv[1]
digest = hashlib.sha256()
with open(out_path, "wb") as out:
    deadline = time.monotonic() + 0.6  # several flush intervals of the recorder
    line = 0
    while time.monotonic() < deadline or line < 1000:
        text = f"line {line}\n".encode()
        out.write(text)
        out.flush()
        digest.update(text)
        line += 1
        if line % 200 == 0:
            time.sleep(0.01)
with open(out_path, "rb") as back:
    intact = hashlib.sha256(back.read()).hexdigest() == digest.hexdigest()
print("file intact" if intact else "file CORRUPTED")
