"""Python runs this at startup when `moescope record` puts this folder on PYTHONPATH: it turns on
the zero-code capture (moescope.autocapture), then runs the `sitecustomize` this one hides, if
any, as Python would have. Nothing here may change what the program does."""


def _start_moescope():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        try:
            import moescope.autocapture as autocapture
        except ImportError:  # a Python without moescope installed: the copy next to `record`
            _import_moescope_of_this_installation(os.path.dirname(here))
            import moescope.autocapture as autocapture
        autocapture.install_from_environment()
    except Exception as error:  # noqa: BLE001 - the program must run on
        sys.stderr.write(f"moescope: zero-code capture is off: {type(error).__name__}: {error}\n")

    # The sitecustomize this one hides (a distribution's, a virtual environment's).
    del sys.modules["sitecustomize"]
    saved = list(sys.path)
    sys.path[:] = [entry for entry in sys.path
                   if os.path.abspath(entry or os.getcwd()) != here]
    try:
        import sitecustomize  # noqa: F401
    except ImportError as error:
        if error.name != "sitecustomize":  # as site.py says it
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{type(error).__name__}: {error}\n")
    except Exception as error:  # noqa: BLE001
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         f"{type(error).__name__}: {error}\n")
    finally:
        sys.path[:] = saved
        sys.modules.setdefault("sitecustomize", sys.modules.get(__name__))


def _import_moescope_of_this_installation(python_folder):
    """Imports the `moescope` package that belongs with this file: next to it (CMake install,
    source tree: <prefix>/share/moescope/python/moescope), else in a site-packages of the same
    prefix (pip: <prefix>/lib/pythonX.Y/site-packages/moescope). Only that package is imported
    from there: the rest of that site-packages stays out of this program's sys.path."""
    import glob
    import importlib.util
    import os
    import sys

    prefix = os.path.dirname(os.path.dirname(os.path.dirname(python_folder)))
    own = "python%d.%d" % sys.version_info[:2]
    candidates = [os.path.join(python_folder, "moescope")] + sorted(
        glob.glob(os.path.join(prefix, "lib", "python3*", "*-packages", "moescope")),
        key=lambda path: own not in path)  # this Python's version first
    for package in candidates:
        init = os.path.join(package, "__init__.py")
        if os.path.isfile(init):
            spec = importlib.util.spec_from_file_location(
                "moescope", init, submodule_search_locations=[package])
            module = importlib.util.module_from_spec(spec)
            sys.modules["moescope"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["moescope"]
                raise
            return
    raise ImportError("no moescope package next to %s or under %s/lib/python3*"
                      % (python_folder, prefix))


_start_moescope()
