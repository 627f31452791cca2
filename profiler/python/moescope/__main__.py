"""``python -m moescope build-capture``: builds the C++ PyTorch capture for the torch in this
Python now, into the per-user cache (moescope/autocapture/torch_capture_build.py), and waits
for it. ``moescope record`` otherwise starts that build itself on first use."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m moescope")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser(
        "build-capture", help="compile the C++ collective and operator capture for this torch")
    build.add_argument("--force", action="store_true", help="rebuild even if it is built")
    # Started by a recording that found no library, with build.lock open and locked for it.
    build.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)

    from .autocapture import torch_capture_build
    try:
        path = torch_capture_build.build(force=arguments.force, log=sys.stderr,
                                         lock_fd=arguments.lock_fd)
    except torch_capture_build.BuildUnavailable as error:
        sys.stderr.write("moescope: the C++ capture is not available: %s\n" % error)
        return 1
    except ImportError as error:
        sys.stderr.write("moescope: build-capture needs torch in this Python: %s\n" % error)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
