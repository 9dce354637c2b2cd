"""Start the overlapscope dashboard: `python app.py RUN [RUN2] [--port P] [--host H]`.

All the code lives in overlapscope/dashboard/; this file only parses the command line.
"""
from __future__ import annotations

import argparse
import logging

from overlapscope.dashboard import create_app, serve


def main() -> None:
    ap = argparse.ArgumentParser(description="overlapscope dashboard")
    ap.add_argument("runs", nargs="+", metavar="RUN", help="run directory or trace file (two to compare)")
    ap.add_argument("--port", type=int, default=8050)
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    args = ap.parse_args()
    if len(args.runs) > 2:
        ap.error("give one run, or two to compare")
    logging.basicConfig(level=logging.WARNING, format="overlapscope: %(levelname)s: %(message)s")
    app = create_app(args.runs)
    print(f"overlapscope dashboard: http://{args.host}:{args.port}/  (Ctrl-C to stop)", flush=True)
    serve(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
