#!/usr/bin/env python3
"""Checks a built moescope wheel against the manylinux policies and gives it its platform tag.

    python scripts/tag_manylinux_wheel.py WHEEL [--newest manylinux_2_28]

scikit-build-core tags the wheel `linux_x86_64` (it cannot know what the binaries need).
`auditwheel show` reads every ELF file in it (bin/, lib/, the bundled GLFW) and names the most
compatible manylinux policy they satisfy: symbol versions of glibc and libstdc++, and shared
libraries outside the policy's list. This script fails, with auditwheel's explanation, when that
policy is newer than --newest (torch's own wheels are manylinux_2_28), and otherwise renames the
wheel to that policy's tag (`python -m wheel tags`). It does not use `auditwheel repair`: the
wheel's binaries live in its data folder, for which repair's RPATHs point into the wheel's
layout, not the installed one; the wheel already carries what it needs (README, "Install").

Prints the tagged wheel's path on its last line.
"""
import argparse
import os
import re
import subprocess
import sys


def policy_version(tag):
    """(2, 28) for manylinux_2_28_x86_64; None for a tag that is not manylinux_X_Y."""
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    return (int(match.group(1)), int(match.group(2))) if match else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel")
    parser.add_argument("--newest", default="manylinux_2_28",
                        help="the newest policy accepted (default: torch's, manylinux_2_28)")
    arguments = parser.parse_args()
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", arguments.wheel],
                           text=True, capture_output=True)
    if shown.returncode != 0:
        sys.exit(f"auditwheel show failed on {arguments.wheel}:\n{shown.stdout}{shown.stderr}")
    text = " ".join(shown.stdout.split())
    print(shown.stdout)
    # auditwheel's verdict: "consistent with the following platform tag: "X"" and, when the
    # binaries need more, "This constrains the platform tag to "Y"".
    constrained = re.search(r'constrains the platform tag to "([^"]+)"', text)
    consistent = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
    tag = (constrained or consistent).group(1) if (constrained or consistent) else ""
    newest_tag = arguments.newest + "_x86_64"
    newest = policy_version(newest_tag)
    found = policy_version(tag)
    if found is None or newest is None or found > newest:
        sys.exit(f"FAILED: {os.path.basename(arguments.wheel)} satisfies {tag or 'no policy'}, "
                 f"not {newest_tag} or older (auditwheel's explanation above)")
    tagged = subprocess.run([sys.executable, "-m", "wheel", "tags", "--remove",
                             "--platform-tag", tag, arguments.wheel],
                            text=True, capture_output=True)
    if tagged.returncode != 0:
        sys.exit(f"wheel tags failed:\n{tagged.stdout}{tagged.stderr}")
    path = os.path.join(os.path.dirname(arguments.wheel), tagged.stdout.strip().splitlines()[-1])
    print(f"tagged {tag}: {path}")
    print(path)


if __name__ == "__main__":
    main()
