"""`pip install .` the way a PyTorch user who only profiles does it: build moescope's wheel
(pyproject.toml, scikit-build-core), install it into a new virtual environment that sees the
environment's torch, and record a small PyTorch training with the installed `moescope`. The
trace must hold the training's 30 steps (the zero-code capture's step markers), which proves
that the installed command found the installed shim and Python module.

    python wheel_install_test.py SOURCE_DIR WORK_DIR [--cmake-build-dir DIR]

The CMake build folder of the wheel (default WORK_DIR/cmake-build) is shared with
wheel_torch_capture_test.py by CTest, so the second test only reinstalls. The C++ torch capture
is left unbuilt here (MOESCOPE_BUILD_CAPTURE=0): that is the other test's subject.

Exit 77 (CTest: skipped) with the reason when this cannot run here: no torch in this Python, no
venv module, or the build backend cannot be installed (no network and nothing in pip's cache).
"""
import argparse
import json
import os
import re
import shutil
import site
import subprocess
import sys

SKIPPED = 77
TRAINING_STEPS = 30  # tests/compat/programs/torch_cpu_training.py


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIPPED)


def run(command, **kwargs):
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, text=True, capture_output=True, **kwargs)


def check(result, what):
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")
        sys.exit(f"FAILED: {what} (exit {result.returncode})")
    return result


def remove_when_passed(*paths):
    """A passed test leaves no build behind: the virtual environments, the wheel's CMake build
    and zig's cache take GBs, and CI's disk is small (a full one failed CI). A failed test
    keeps them to be read."""
    for path in filter(None, paths):
        shutil.rmtree(path, ignore_errors=True)


def build_requirements(source_dir):
    """The [build-system] requires list of pyproject.toml."""
    with open(os.path.join(source_dir, "pyproject.toml"), "rb") as pyproject:
        text = pyproject.read().decode()
    try:
        import tomllib
        return tomllib.loads(text)["build-system"]["requires"]
    except ImportError:  # Python < 3.11: the one line is simple enough
        line = re.search(r"^requires\s*=\s*\[(.*)\]", text, re.M).group(1)
        return re.findall(r'"([^"]+)"', line)


def make_venv(path):
    """A new virtual environment that sees this environment's packages (torch): through
    --system-site-packages, and a .pth file when this Python is itself a virtual environment
    (whose packages --system-site-packages would not reach)."""
    result = run([sys.executable, "-m", "venv", "--system-site-packages", path])
    if result.returncode != 0:
        skip(f"cannot create a virtual environment ({result.stderr.strip()[-300:]}); "
             "apt-get install python3-venv")
    bin_dir = os.path.join(path, "bin")
    purelib = check(run([f"{bin_dir}/python", "-c",
                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"]),
                    "reading the new environment's site-packages").stdout.strip()
    with open(os.path.join(purelib, "build_environment_packages.pth"), "w") as pth:
        pth.write("\n".join(site.getsitepackages()) + "\n")
    return bin_dir


def build_wheel(source_dir, work, cmake_build_dir):
    """pip wheel of `source_dir` into WORK/dist (CMake build folder `cmake_build_dir`, kept
    between runs so a second test rebuilds only what changed); returns the wheel's path."""
    build_bin = make_venv(os.path.join(work, "build-env"))
    requirements = build_requirements(source_dir)
    result = run([f"{build_bin}/python", "-m", "pip", "install", "-q", *requirements])
    if result.returncode != 0:
        skip(f"cannot install the build backend ({' '.join(requirements)}): "
             f"{result.stderr.strip()[-300:]}")
    dist = os.path.join(work, "dist")
    # zig's cache (the C++ runtime and glibc stubs it builds for the manylinux target) goes
    # with the CMake build, so remove_when_passed takes it too; never the user's ~/.cache/zig.
    zig_cache = os.path.join(cmake_build_dir, "zig-cache")
    environment = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=zig_cache, ZIG_LOCAL_CACHE_DIR=zig_cache)
    check(run([f"{build_bin}/python", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
               "-w", dist, f"--config-settings=build-dir={cmake_build_dir}", source_dir],
              env=environment), "pip wheel")
    wheels = [name for name in os.listdir(dist) if name.endswith(".whl")]
    if len(wheels) != 1 or not wheels[0].startswith("moescope-"):
        sys.exit(f"FAILED: expected one moescope wheel in {dist}, found {wheels}")
    # The manylinux check and tag, as a release does it (fails when a binary needs more than
    # glibc 2.28 or a library outside the policy).
    result = run([f"{build_bin}/python", "-m", "pip", "install", "-q", "auditwheel", "wheel"])
    if result.returncode != 0:
        skip(f"cannot install auditwheel: {result.stderr.strip()[-300:]}")
    tagged = check(run([f"{build_bin}/python",
                        os.path.join(source_dir, "scripts", "tag_manylinux_wheel.py"),
                        os.path.join(dist, wheels[0])]), "the manylinux check of the wheel")
    print(tagged.stdout)
    wheel = tagged.stdout.strip().splitlines()[-1]
    if not re.search(r"-py3-none-manylinux_2_(\d+)_x86_64\.whl$", wheel) or \
            int(re.search(r"manylinux_2_(\d+)", wheel).group(1)) > 28:
        sys.exit(f"FAILED: the wheel is not tagged manylinux_2_28 or older: {wheel}")
    print(f"built {os.path.basename(wheel)}: {os.path.getsize(wheel) / 1e6:.1f} MB")
    return wheel


def install_wheel(work, wheel):
    """A user's environment: torch from the environment it was made from, moescope from the
    wheel. Returns (its folder, its bin folder, a clean environment with that bin on PATH)."""
    user = os.path.join(work, "user-env")
    user_bin = make_venv(user)
    check(run([f"{user_bin}/python", "-m", "pip", "install", "-q", "--no-deps", wheel]),
          "pip install of the wheel")
    # Nothing from the build tree: a clean environment, the installed command found on PATH.
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("MOESCOPE_") and key != "PYTHONPATH"}
    environment["PATH"] = f"{user_bin}:{environment.get('PATH', '/usr/bin:/bin')}"
    environment["OMP_NUM_THREADS"] = "1"
    # Builds of the C++ capture go to this test's folder, never to the user's ~/.cache.
    environment["MOESCOPE_CACHE_DIR"] = os.path.join(work, "cache")
    moescope = shutil.which("moescope", path=environment["PATH"])
    if moescope != os.path.join(user_bin, "moescope"):
        sys.exit(f"FAILED: `moescope` on PATH is {moescope}, not the installed one")
    return user, user_bin, environment


def prepare(argv):
    """Parses SOURCE_DIR WORK_DIR [--cmake-build-dir DIR]; skips without torch; a fresh WORK."""
    parser = argparse.ArgumentParser()
    parser.add_argument("source_dir")
    parser.add_argument("work")
    parser.add_argument("--cmake-build-dir", default="")
    arguments = parser.parse_args(argv)
    source_dir, work = os.path.abspath(arguments.source_dir), os.path.abspath(arguments.work)
    if run([sys.executable, "-c", "import torch"]).returncode != 0:
        skip(f"{sys.executable} cannot import torch (scripts/setup.sh installs it)")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cmake_build_dir = os.path.abspath(arguments.cmake_build_dir or f"{work}/cmake-build")
    return source_dir, work, cmake_build_dir


def main():
    source_dir, work, cmake_build_dir = prepare(sys.argv[1:])
    wheel = build_wheel(source_dir, work, cmake_build_dir)
    user, user_bin, environment = install_wheel(work, wheel)
    purelib = check(run([f"{user_bin}/python", "-c",
                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"]),
                    "reading the user environment's site-packages").stdout.strip()
    for path in ("bin/moescope", "lib/libmoescope_inject.so", "lib/libmoescope_inject_no_nccl.so",
                 f"{purelib}/moescope/__init__.py",
                 f"{purelib}/moescope/autocapture/torch_capture_sources/collective_capture.cpp",
                 "share/moescope/python/moescope_startup/sitecustomize.py"):
        if not os.path.exists(os.path.join(user, path)):
            sys.exit(f"FAILED: the installed wheel lacks {path}")
    if os.path.exists(os.path.join(user, "share/moescope/python/moescope")):
        sys.exit("FAILED: the wheel installs a second copy of the moescope package")
    # This test leaves the C++ capture unbuilt (wheel_torch_capture_test.py builds it).
    environment["MOESCOPE_BUILD_CAPTURE"] = "0"

    program = os.path.join(source_dir, "tests", "compat", "programs", "torch_cpu_training.py")
    recorded = check(run(["moescope", "record", "-o", f"{work}/run.%r.moetrace", "--",
                          "python", program], env=environment, cwd=work), "moescope record")
    if f"step {TRAINING_STEPS - 1} loss" not in recorded.stdout:
        sys.exit(f"FAILED: the program's output is missing under record:\n{recorded.stdout}")
    traces = sorted(name for name in os.listdir(work) if name.endswith(".moetrace"))
    if len(traces) != 1:
        sys.exit(f"FAILED: expected one trace in {work}, found {traces}")
    report = check(run(["moescope", "report", "--format", "json", traces[0]], env=environment,
                       cwd=work), "moescope report")
    summary = json.loads(report.stdout)["summary"]
    print("report summary:", summary)
    if summary["steps"] != TRAINING_STEPS or "marker" not in summary["step_source"]:
        sys.exit(f"FAILED: expected {TRAINING_STEPS} steps from step markers, "
                 f"found {summary['steps']} ({summary['step_source']})")
    check_viewer(user, work, traces[0], environment)
    print(f"OK: the installed moescope recorded {summary['steps']} steps")
    remove_when_passed(work)  # the CMake build stays for wheel_torch_capture_test.py


def check_viewer(user, work, trace, environment):
    """The wheel's viewer uses the GLFW the wheel carries (not the build machine's), and draws
    the recorded trace in a real window (under xvfb-run, when this machine has it)."""
    viewer = os.path.join(user, "bin", "moescope-view")
    if not os.path.exists(viewer):
        print("the wheel has no viewer (built without Dear ImGui/GLFW): not checked")
        return
    bundled = os.path.join(user, "lib", "libglfw.so.3")
    if not os.path.exists(bundled):
        sys.exit(f"FAILED: the wheel's viewer came without its GLFW ({bundled})")
    linked = check(run(["ldd", viewer], env=environment), "ldd of the viewer").stdout
    glfw = re.search(r"libglfw\.so\.3 => (\S+)", linked)
    if not glfw or os.path.realpath(glfw.group(1)) != os.path.realpath(bundled):
        sys.exit(f"FAILED: the viewer does not load the wheel's GLFW:\n{linked}")
    if not shutil.which("xvfb-run"):
        print("no xvfb-run: the viewer's window is not drawn here")
        return
    picture = os.path.join(work, "viewer.png")
    check(run(["xvfb-run", "-a", viewer, trace, "--screenshot", picture], env=environment,
              cwd=work, timeout=300), "the wheel's viewer drawing the trace")
    if not os.path.exists(picture) or os.path.getsize(picture) < 1000:
        sys.exit(f"FAILED: the wheel's viewer wrote no screenshot ({picture})")
    print(f"the wheel's viewer drew {trace} with its own GLFW ({glfw.group(1)})")


if __name__ == "__main__":
    main()
