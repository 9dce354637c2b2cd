"""Holds the sitecustomize.py that `overlapscope profile` puts first on PYTHONPATH (a package only so
that setuptools installs it with overlapscope)."""
