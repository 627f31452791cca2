"""What a Python environment already has, for scripts/setup.sh, read from package metadata
(importing torch takes seconds; a second setup run must not).

    python scripts/setup_state.py TORCH_VERSION
prints one line: MISSING CUDA TOOLKIT
    MISSING  the package groups to install, comma-separated ("-" when none): torch, tools, models
    CUDA     the CUDA version torch is built with ("-" for none or no torch)
    TOOLKIT  the cuda-toolkit wheel version torch pins ("-" when it pins none)
"""
import importlib.metadata as metadata
import importlib.util
import os
import re
import sys


def installed_version(name):
    try:
        return metadata.version(name).split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def torch_cuda_version():
    spec = importlib.util.find_spec("torch")
    if not spec or not spec.submodule_search_locations:
        return "-"
    with open(os.path.join(spec.submodule_search_locations[0], "version.py")) as version_file:
        match = re.search(r"^cuda\b[^=]*=\s*'([0-9.]+)'", version_file.read(), re.M)
    return match.group(1) if match else "-"


def pinned_cuda_toolkit():
    try:
        requirements = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return "-"
    for requirement in requirements:
        match = re.match(r"cuda-toolkit\[[^\]]*\]\s*==\s*([0-9.]+)", requirement)
        if match:
            return match.group(1)
    return "-"


def main():
    torch_version = sys.argv[1]
    groups = {
        "torch": installed_version("torch") == torch_version,
        "tools": all(installed_version(name) for name in
                     ("numpy", "psutil", "HolisticTraceAnalysis", "nvtx", "pytest",
                      "tensorboard", "wandb", "dask", "distributed")),
        "models": (installed_version("transformers") == "5.25.0"
                   and installed_version("torchtitan") == "0.3.0"
                   and installed_version("megatron-core") == "0.16.1"),
    }
    missing = ",".join(name for name, present in groups.items() if not present) or "-"
    print(missing, torch_cuda_version(), pinned_cuda_toolkit())


if __name__ == "__main__":
    main()
