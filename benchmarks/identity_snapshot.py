"""Snapshots that a speed change must leave identical, and their comparison.

    python benchmarks/identity_snapshot.py take OUT [--tree CHECKOUT] [--ranks 256] [--collectives 200]
    python benchmarks/identity_snapshot.py compare BEFORE AFTER

`take` writes, with CHECKOUT's code (default: this tree; another checkout, e.g. a `git worktree` of
main before the change, by putting it first on PYTHONPATH):
  - OUT/json/<run>.json: `overlapscope analyze RUN --format json --no-cache` of every run in traces/
    and every Kineto directory and nsys export in tests/data/real (the same traces as ../shared/traces);
  - OUT/reduce.pkl: every field of `combine()` (the `Analysis`) for benchmarks/reduce_scale.py's
    synthetic run of --ranks x --collectives, the path the example runs are too small to stress.
`compare` exits 1 unless every JSON file is byte-identical and every Analysis field is equal,
dtypes and index included (pandas.testing.assert_frame_equal, exact).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def runs(tree: Path) -> list[Path]:
    real = tree / "tests" / "data" / "real"
    return (sorted(p for p in (tree / "traces").glob("*") if p.is_dir())
            + sorted(p for p in (real / "kineto-gpu").glob("*") if p.is_dir())
            + sorted((real / "nsys").glob("*.sqlite")))


def take(out: Path, tree: Path, ranks: int, collectives: int) -> None:
    out = out.resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    (out / "json").mkdir(parents=True, exist_ok=True)
    for run in runs(tree):
        name = str(run.relative_to(tree)).replace(os.sep, "_")
        # relative to the checkout: the report holds the run's path as given
        done = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(run.relative_to(tree)), "--format", "json",
                               "--no-cache", "-o", str((out / "json" / f"{name}.json").resolve())],
                              env=env, cwd=tree, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{run}: analyze exited {done.returncode}: {done.stderr.strip()[-500:]}")
    subprocess.run([sys.executable, __file__, "_reduce", str(out / "reduce.pkl"), str(ranks), str(collectives)],
                   env=env, check=True)
    print(f"{out}: {len(runs(tree))} runs and the {ranks} x {collectives} reduce, with {tree}'s code")


def _reduce(path: Path, ranks: int, collectives: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import numpy as np
    from reduce_scale import rank_trace

    from overlapscope.analysis import analyze_rank, combine
    from overlapscope.core.table import Run

    rng = np.random.default_rng(ranks)
    traces = [rank_trace(r, collectives, rng) for r in range(ranks)]
    result = combine(Run(ranks=traces, manifest={}, path="bench"), [analyze_rank(t) for t in traces])
    path.write_bytes(pickle.dumps({f.name: getattr(result, f.name) for f in dataclasses.fields(result)}))


def compare(before: Path, after: Path) -> int:
    import pandas as pd

    bad = []
    names = sorted({p.name for p in (before / "json").glob("*.json")} | {p.name for p in (after / "json").glob("*.json")})
    for name in names:
        a, b = before / "json" / name, after / "json" / name
        if not (a.exists() and b.exists()) or a.read_bytes() != b.read_bytes():
            bad.append(f"json/{name}")
    fields_a, fields_b = (pickle.loads((d / "reduce.pkl").read_bytes()) for d in (before, after))
    for key in sorted(fields_a.keys() | fields_b.keys()):
        x, y = fields_a.get(key), fields_b.get(key)
        try:
            if isinstance(x, pd.DataFrame) and isinstance(y, pd.DataFrame):
                pd.testing.assert_frame_equal(x, y, check_exact=True)
            elif x != y:
                raise AssertionError("differs")
        except AssertionError as exc:
            bad.append(f"reduce.{key}: {str(exc).splitlines()[0] if str(exc) else 'differs'}")
    for line in bad:
        print("DIFFERS", line)
    print(f"{len(names)} JSON reports and {len(fields_a)} Analysis fields: "
          + ("identical" if not bad else f"{len(bad)} differ"))
    return 1 if bad else 0


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "_reduce":  # the child `take` runs with the tree's code
        _reduce(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("take")
    t.add_argument("out", type=Path)
    t.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code runs (default: this one)")
    t.add_argument("--ranks", type=int, default=256)
    t.add_argument("--collectives", type=int, default=200)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.command == "take":
        take(args.out, args.tree.resolve(), args.ranks, args.collectives)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
