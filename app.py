"""Start the overlapscope dashboard: `python app.py RUN [RUN2] [--port P] [--host H]`.

The same command as `overlapscope dashboard` (its options, its one-line errors, exit 2 on a bad
run or a missing [dash] extra); all the code lives in overlapscope/dashboard/.
"""
from __future__ import annotations

import logging

from overlapscope.dashboard.cli import dashboard

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="overlapscope: %(levelname)s: %(message)s")
    dashboard(prog_name="app.py")
