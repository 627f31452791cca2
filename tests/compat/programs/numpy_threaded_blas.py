"""numpy with a multithreaded BLAS (OpenBLAS threads from the wheel)."""
import numpy as np

rng = np.random.default_rng(7)
a = rng.standard_normal((600, 600))
b = rng.standard_normal((600, 600))
total = 0.0
for _ in range(5):
    a = np.tanh(a @ b / 30.0)
    total += float(a.sum())
print(f"checksum {total:.6e}")
