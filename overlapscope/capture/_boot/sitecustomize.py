"""Injected by `overlapscope profile` (first on PYTHONPATH): profile this process, then hand over
to any sitecustomize that was already on the path."""
import importlib
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

try:
    from overlapscope.capture.hook import install_from_env
    install_from_env()
except Exception as _exc:  # never break the user's interpreter
    sys.stderr.write(f"overlapscope: start-up hook failed: {_exc}\n")

# chain to the next sitecustomize on the path, as if this one were not here
_saved = list(sys.path)
try:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    _me = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        if _me is not None:
            sys.modules["sitecustomize"] = _me
finally:
    sys.path[:] = _saved
