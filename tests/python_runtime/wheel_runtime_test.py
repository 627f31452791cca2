"""`pip install` of a moescope wheel that carries the runtime's torch extension, into a new
virtual environment that sees this environment's torch, then the replace_moe_blocks tests
(test_replace_hf.py: logits, gradients, 50 training steps) run against the installed package
alone: nothing from the build tree, the extension found through the install layout.

    python wheel_runtime_test.py SOURCE_DIR WORK_DIR [--wheel WHEEL] [--build-dir DIR]

Without --wheel it builds one: pip wheel --no-build-isolation with
MOESCOPE_WITH_TORCH=ON, MOESCOPE_WHEEL_RUNTIME=ON and this Python as MOESCOPE_PYTHON (the torch
the extension is compiled for), CMake build directory --build-dir (default
SOURCE_DIR/build-wheel-runtime: beside build/, so ccache's relative paths match the main build's
and, with the same compiler name and CUDA setting, the runtime is not compiled twice; CUDA on
because the main build has it, viewer off because the wheel test does not need it). Exit 77 (skipped) with the reason when the build
backend cannot be installed or this Python has no torch.
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "install"))
from wheel_install_test import (build_requirements, check, make_venv,  # noqa: E402
                                remove_when_passed, run, skip)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source_dir")
    parser.add_argument("work")
    parser.add_argument("--wheel", default="")
    parser.add_argument("--build-dir", default="")
    arguments = parser.parse_args()
    source_dir, work = os.path.abspath(arguments.source_dir), os.path.abspath(arguments.work)
    if run([sys.executable, "-c", "import torch, transformers"]).returncode != 0:
        skip(f"{sys.executable} cannot import torch and transformers")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    wheel = arguments.wheel
    build_dir = ""
    if not wheel:
        build_bin = make_venv(os.path.join(work, "build-env"))
        requirements = build_requirements(source_dir)
        result = run([f"{build_bin}/python", "-m", "pip", "install", "-q", *requirements])
        if result.returncode != 0:
            skip(f"cannot install the build backend: {result.stderr.strip()[-300:]}")
        dist = os.path.join(work, "dist")
        build_dir = arguments.build_dir or os.path.join(source_dir, "build-wheel-runtime")
        check(run([f"{build_bin}/python", "-m", "pip", "wheel", "--no-build-isolation",
                   "--no-deps", "-w", dist, f"--config-settings=build-dir={build_dir}",
                   "-C", "cmake.define.MOESCOPE_WITH_TORCH=ON",
                   "-C", "cmake.define.MOESCOPE_WHEEL_RUNTIME=ON",
                   "-C", "cmake.define.MOESCOPE_WITH_CUDA=ON",  # the main build's flags
                   "-C", "cmake.define.MOESCOPE_WITH_VIEWER=OFF",
                   # The extension links libtorch (libstdc++): the system compiler, not
                   # the manylinux wheel's zig toolchain (pyproject.toml).
                   "-C", "cmake.define.CMAKE_TOOLCHAIN_FILE=",
                   # ccache hashes the compiler's name: the main build's `c++`, not g++
                   "-C", f"cmake.define.CMAKE_CXX_COMPILER={shutil.which('c++') or 'c++'}",
                   "-C", f"cmake.define.CMAKE_C_COMPILER={shutil.which('cc') or 'cc'}",
                   "-C", f"cmake.define.MOESCOPE_PYTHON={sys.executable}", source_dir]),
              "pip wheel with the runtime extension")
        wheels = [name for name in os.listdir(dist) if name.endswith(".whl")]
        if len(wheels) != 1:
            sys.exit(f"FAILED: expected one wheel in {dist}, found {wheels}")
        wheel = os.path.join(dist, wheels[0])
    user = os.path.join(work, "user-env")
    user_bin = make_venv(user)
    check(run([f"{user_bin}/python", "-m", "pip", "install", "-q", "--no-deps", wheel]),
          "pip install of the wheel")
    purelib = check(run([f"{user_bin}/python", "-c",
                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"]),
                    "reading the user environment's site-packages").stdout.strip()
    for path in ("lib/libmoescope_runtime_torch_ops.so",
                 "lib/libmoescope_runtime_torch_ops.so.torch_version",
                 "lib/libmoescope_runtime.so", "lib/libmoescope_recorder.so",
                 f"{purelib}/moescope/runtime/__init__.py"):
        if not os.path.exists(os.path.join(user, path)):
            sys.exit(f"FAILED: the installed wheel lacks {path}")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("MOESCOPE_") and key != "PYTHONPATH"}
    # The installed package is in the environment's site-packages; the tests are here.
    environment["PYTHONPATH"] = HERE
    environment["OMP_NUM_THREADS"] = "1"
    located = check(run([f"{user_bin}/python", "-c",
                         "import moescope.runtime as r; print(r.load_library())"],
                        env=environment, cwd=work), "import moescope.runtime")
    print("extension loaded from", located.stdout.strip())
    if not located.stdout.strip().startswith(user):
        sys.exit(f"FAILED: the extension came from {located.stdout.strip()}, not the install")
    tests = check(run([f"{user_bin}/python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-W", "ignore::UserWarning", os.path.join(HERE, "test_replace_hf.py")],
                      env=environment, cwd=work), "test_replace_hf.py against the installed wheel")
    print(tests.stdout[-1500:])
    print("OK: the wheel's runtime extension passed test_replace_hf.py")
    remove_when_passed(work, build_dir)


if __name__ == "__main__":
    main()
