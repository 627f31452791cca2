"""Runs one pytest file for CTest, or reports it skipped (exit 77) when a package is missing.

    run_pytest.py TEST_FILE [--require MODULE[==VERSION_PREFIX]]... [--install HINT]

A test that needs ``transformers`` 4.x must not pass silently because only 5.x (or nothing) is
installed: each ``--require`` is imported first and its ``__version__`` checked against the
prefix; a miss prints the reason and how to install it, and exits 77 (CTest SKIP_RETURN_CODE).
"""

import argparse
import importlib
import os
import sys

SKIP = 77


def missing_requirement(requirement):
    module_name, _, version_prefix = requirement.partition("==")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure means "cannot run here"
        return f"{module_name} cannot be imported ({type(error).__name__}: {error})"
    version = str(getattr(module, "__version__", ""))
    if version_prefix and not version.startswith(version_prefix):
        where = os.path.dirname(getattr(module, "__file__", "") or "?")
        return f"{module_name} {version} from {where} is installed, the test needs {version_prefix}*"
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("test_file")
    parser.add_argument("--require", action="append", default=[])
    parser.add_argument("--install", default="", help="how to install what is missing")
    arguments = parser.parse_args()
    for requirement in ["pytest", "torch"] + arguments.require:
        reason = missing_requirement(requirement)
        if reason:
            print(f"SKIP: {reason}" + (f"; install with: {arguments.install}"
                                       if arguments.install else ""))
            return SKIP
    import pytest
    return pytest.main([arguments.test_file, "-q", "-p", "no:cacheprovider", "-rs",
                        "-W", "ignore::DeprecationWarning", "-W", "ignore::UserWarning"])


if __name__ == "__main__":
    sys.exit(main())
