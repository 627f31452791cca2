#!/usr/bin/env python3
"""Times torch._grouped_mm (bf16, the runtime's default grouped GEMM on sm90) against a dense
bf16 matmul of the same FLOPs, on the same DeepSeek-like shapes as kernels_device_check's cuBLAS
grouped GEMM row (32 local experts, hidden 7168, ffn 2048, 256..768 rows per expert rounded up
to 8). Together the two decide which grouped path the runtime should use on the GPU machine.
First checks _grouped_mm against a per-group matmul loop. Usage: python3 kernels_grouped_mm.py
"""
import sys

import torch


def time_ms(fn, iterations=10):
    fn()
    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iterations


def main():
    if not torch.cuda.is_available():
        print("kernels_grouped_mm: no CUDA device (none visible to torch)")
        return 77  # tests/device/no_cuda_device.h
    torch.manual_seed(0)
    groups, hidden, ffn = 32, 7168, 2048
    sizes = ((torch.randint(256, 769, (groups,)) + 7) // 8 * 8).tolist()
    offs = torch.tensor(sizes, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    rows = int(sum(sizes))
    a = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    w_k_by_n = torch.randn(groups, hidden, ffn, device="cuda", dtype=torch.bfloat16) * 0.02
    # nn.Linear layout [G, ffn, hidden] seen transposed: the layout torchtitan passes.
    w_n_by_k = torch.randn(groups, ffn, hidden, device="cuda", dtype=torch.bfloat16) * 0.02
    dense_w = torch.randn(hidden, ffn, device="cuda", dtype=torch.bfloat16)

    failures = 0
    out = torch._grouped_mm(a, w_n_by_k.transpose(-2, -1), offs=offs)
    starts = [0] + offs.tolist()[:-1]
    reference = torch.cat([a[s:e].float() @ w_n_by_k[g].t().float() for g, (s, e) in enumerate(zip(starts, offs.tolist()))])
    error = (out.float() - reference).abs().max().item()
    scale = reference.abs().max().item()
    ok = error <= 2e-2 * scale
    failures += not ok
    print(f"  {'ok' if ok else 'FAIL'} _grouped_mm vs per-group loop: max abs err {error:.3g} (scale {scale:.3g})")

    flops = 2.0 * rows * hidden * ffn
    dense_ms = time_ms(lambda: a @ dense_w)
    rows_out = []
    for name, b in (("B [G,k,n]", w_k_by_n), ("B [G,n,k]^T", w_n_by_k.transpose(-2, -1))):
        ms = time_ms(lambda: torch._grouped_mm(a, b, offs=offs))
        rows_out.append((f"torch._grouped_mm bf16 32 x [~512,7168]x[7168,2048] {name}", flops / ms / 1e9))
    dense_tflops = flops / dense_ms / 1e9
    name = torch.cuda.get_device_name()
    print(f"\n| grouped GEMM on {name} | achieved | dense bf16 matmul | ratio | target |")
    print("|---|---|---|---|---|")
    for label, tflops in rows_out:
        print(f"| {label} | {tflops:.0f} TFLOP/s | {dense_tflops:.0f} TFLOP/s | {100 * tflops / dense_tflops:.0f}% | >= 60% |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
