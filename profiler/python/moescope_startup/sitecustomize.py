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
        except ImportError:  # moescope's own Python folder is next to this one
            sys.path.append(os.path.dirname(here))
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


_start_moescope()
