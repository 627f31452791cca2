"""GPU check of moescope.runtime from Python (the `python_runtime` part of run.sh; not yet run on
a GPU).

    PYTHONPATH=profiler/python MOESCOPE_RUNTIME_OPS_LIBRARY=<build>/lib/libmoescope_runtime_torch_ops.so \
        python tests/device/python_runtime_check.py

One Qwen3-MoE sparse block (H 1024, F 1024, 64 experts, top-8, 4096 tokens) on cuda:0 in fp32
and bf16, swapped by replace_moe_blocks (backend_device="cuda"): output and input/expert weight
gradients against the HF block (fp32: within 1e-4 of the largest |value|; bf16: 3e-2, where the
runtime's fp32 router may pick another expert for a near-tied token, counted and printed), then
forward+backward tokens/s of both (HF's default "grouped_mm" experts) and their ratio.

Exit 0 passed, 1 a failed check, 3 something it needs is missing (transformers, the runtime
extension: said on the last line), 77 no CUDA device (after the extension loaded, so a CPU run
checks everything up to the GPU: tests/device's device_build.python_runtime_check).
"""
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bench", "python_runtime"))
from swapped_layer_bench import build_block  # noqa: E402


def timed(module, hidden, upstream, reps=20):
    for _ in range(3):
        module(hidden).backward(upstream)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        module(hidden).backward(upstream)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


MISSING, NO_CUDA_DEVICE = 3, 77


def main():
    try:
        import transformers  # noqa: F401
    except ImportError as error:
        print(f"missing: transformers ({error}); the check builds a Hugging Face block")
        return MISSING
    try:  # RuntimeUnavailable is an ImportError
        from moescope.runtime import load_library, replace_moe_blocks
        print(f"runtime extension: {load_library()}")
    except ImportError as error:
        print(f"missing: {error}")
        return MISSING
    if not torch.cuda.is_available():
        print("no CUDA device (torch sees none)")
        return NO_CUDA_DEVICE
    failed = False
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
        torch.manual_seed(0)
        block, _ = build_block("qwen3_moe", 1024, 1024, 64, 8, "grouped_mm")
        block = block.to("cuda", dtype)
        holder = torch.nn.Module()
        holder.block = block
        swapped_holder = copy.deepcopy(holder)
        replace_moe_blocks(swapped_holder, backend_device="cuda")
        swapped = swapped_holder.block
        hidden = torch.randn(1, 4096, 1024, device="cuda", dtype=dtype, requires_grad=True)
        upstream = torch.randn_like(hidden)
        results = {}
        for name, module in (("hf", block), ("moescope", swapped)):
            out = module(hidden)
            (grad_input,) = torch.autograd.grad(out, hidden, upstream)
            results[name] = (out.float(), grad_input.float())
        for index, what in enumerate(("output", "input gradient")):
            want, got = results["hf"][index], results["moescope"][index]
            error = float((got - want).abs().max() / want.abs().max())
            ok = error <= tolerance
            failed |= not ok
            print(f"  {'ok' if ok else 'FAILED'} {dtype} {what}: max error {error:.2e} "
                  f"of max |value| (limit {tolerance:g})")
        hf_s, ours_s = timed(block, hidden, upstream), timed(swapped, hidden, upstream)
        print(f"  {dtype} tokens/s: hf grouped_mm {4096 / hf_s:.0f}, moescope {4096 / ours_s:.0f}, "
              f"ratio {hf_s / ours_s:.2f}")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
