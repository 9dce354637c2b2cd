"""`overlapscope profile`: run a job unchanged, with the start-up hook injected into every rank.

The hook travels as a `sitecustomize` module in a directory prepended to PYTHONPATH, with the
output directory and step counts in environment variables (profiler.ENV_*). After the job ends,
whatever its exit status, the launcher merges the ranks' fragments into manifest.json.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OverlapscopeError
from . import manifest
from .quiet import ChatterFilter
from .profiler import ENV_NSYS, ENV_OUT, ENV_SKIP_FIRST, ENV_STEPS

log = logging.getLogger(__name__)

BOOT_DIR = Path(__file__).resolve().parent / "_boot"
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
NSYS_TRACE = "cuda,nvtx,osrt"
# files a previous profile run leaves; --force removes only these
_OWN_PATTERNS = ("rank*.trace.json.gz", "manifest.json", ".overlapscope-rank*.meta", ".rank*.trace.part.gz",
                 "nsys/rank*.nsys-rep", "rank*.sqlite")
# nsys reports live in a subdirectory so `analyze OUT` reads each rank once, from its SQLite export
NSYS_SUBDIR = "nsys"
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True, kw_only=True)
class ProfileOptions:
    out_dir: Path
    """Where rank{R}.trace.json.gz and manifest.json go."""
    steps: int = 5
    """Steps recorded per rank (optimizer steps, or the script's own capture().step())."""
    skip_first: int = 1
    """Steps skipped before the one warm-up step and the recorded ones."""
    nsys: bool = False
    """Run each rank under `nsys profile` and export SQLite; Kineto then traces the CPU only."""
    force: bool = False
    """Write into a non-empty output directory (removing a previous run's traces there)."""
    quiet: bool = True
    """Hold back the profiler's and torchrun's chatter on the job's stderr, counted into one line
    (quiet.py); False passes every line through (`overlapscope -v profile`)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise OverlapscopeError(f"--steps must be at least 1, got {self.steps}")
        if self.skip_first < 0:
            raise OverlapscopeError(f"--skip-first must be at least 0, got {self.skip_first}")


def prepare_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise OverlapscopeError("output path exists and is not a directory", out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not force:
            raise OverlapscopeError("output directory is not empty (use --force to write into it)", out_dir)
        for pattern in _OWN_PATTERNS:
            for p in out_dir.glob(pattern):
                log.info("removing %s from a previous run", p)
                p.unlink()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file on the way, no permission, read-only file system
        raise OverlapscopeError(f"cannot create the output directory: {exc.strerror or exc}", out_dir) from None


def hook_env(opts: ProfileOptions, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes every Python process of the job load the start-up hook."""
    env = dict(os.environ if base is None else base)
    paths = [str(BOOT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(PACKAGE_PARENT)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[ENV_OUT] = str(opts.out_dir.resolve())
    env[ENV_STEPS] = str(opts.steps)
    env[ENV_SKIP_FIRST] = str(opts.skip_first)
    if opts.nsys:
        env[ENV_NSYS] = "1"
    return env


def nsys_prefix(out_dir: Path, name: str) -> list[str]:
    return ["nsys", "profile", "-t", NSYS_TRACE, "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--force-overwrite=true", "-o", str(out_dir / NSYS_SUBDIR / name)]


def nsys_command(cmd: list[str], out_dir: Path, python: str = sys.executable) -> list[str]:
    """Put each rank of CMD under nsys: torchrun runs `nsys profile ... python SCRIPT` per rank
    (its --no-python mode); any other command is one process and is wrapped whole."""
    launcher_len = _torchrun_prefix_len(cmd)
    if launcher_len == 0:
        return nsys_prefix(out_dir, "rank0") + list(cmd)
    from torch.distributed.run import get_args_parser
    args = get_args_parser().parse_args(cmd[launcher_len:])
    tail = [args.training_script, *args.training_script_args]
    opts = cmd[launcher_len:len(cmd) - len(tail)]
    opts = [o for o in opts if o not in ("-m", "--module", "--no-python", "--no_python")]
    if args.no_python:
        program = tail
    elif args.module:
        program = [python, "-m", *tail]
    else:
        program = [python, *tail]
    return [*cmd[:launcher_len], *opts, "--no-python", *nsys_prefix(out_dir, "rank%q{RANK}"), *program]


def _torchrun_prefix_len(cmd: list[str]) -> int:
    """How many leading words launch torchrun (1 for `torchrun`, 3 for `python -m torch.distributed.run`)."""
    if not cmd:
        return 0
    if Path(cmd[0]).name == "torchrun":
        return 1
    if Path(cmd[0]).name.startswith("python") and len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] in _TORCHRUN_MODULES:
        return 3
    return 0


def export_nsys(out_dir: Path) -> list[str]:
    """`nsys export --type sqlite` every report the ranks wrote (OUT/nsys/rankR.nsys-rep -> OUT/rankR.sqlite)."""
    written = []
    for rep in sorted((out_dir / NSYS_SUBDIR).glob("rank*.nsys-rep")):
        sqlite = out_dir / (rep.name[: -len(".nsys-rep")] + ".sqlite")
        done = subprocess.run(["nsys", "export", "--type", "sqlite", "--force-overwrite=true",
                               "-o", str(sqlite), str(rep)], capture_output=True, text=True)
        if done.returncode != 0:
            log.warning("nsys export failed for %s: %s", rep, done.stderr.strip().splitlines()[-1:])
            continue
        written.append(sqlite.name)
    return written


def run_profile(cmd: list[str], opts: ProfileOptions) -> tuple[int, dict[str, Any]]:
    """Run CMD under the hook; returns (CMD's exit status, the manifest written)."""
    if not cmd:
        raise OverlapscopeError("no command to profile: put it after `--`, e.g. `-- torchrun ... train.py`")
    if opts.nsys and shutil.which("nsys") is None:
        raise OverlapscopeError("--nsys needs Nsight Systems: `nsys` is not on PATH")
    prepare_out_dir(opts.out_dir, opts.force)
    run_cmd = list(cmd)
    if opts.nsys:
        run_cmd = nsys_command(cmd, opts.out_dir.resolve())
        (opts.out_dir / NSYS_SUBDIR).mkdir(exist_ok=True)
    start_iso, start_ns = manifest.utc_now()
    try:
        child = subprocess.Popen(run_cmd, env=hook_env(opts), stderr=subprocess.PIPE if opts.quiet else None)
    except OSError as exc:
        raise OverlapscopeError(f"cannot run {cmd[0]!r}: {exc.strerror or exc}") from exc
    chatter = ChatterFilter(child.stderr) if opts.quiet else None
    rc = _wait_forwarding_signals(child)
    held_back = chatter.close() if chatter else None
    if held_back:
        print(held_back, file=sys.stderr)
    extra: dict[str, Any] = {}
    if opts.nsys:
        extra["nsys_reports"] = export_nsys(opts.out_dir)
        extra["nsys_command"] = run_cmd
    written = manifest.finish_manifest(
        opts.out_dir, command=list(cmd), start_time=start_iso, start_time_ns=start_ns, steps=opts.steps,
        skip_first=opts.skip_first, mode="nsys" if opts.nsys else "kineto", exit_code=rc, extra=extra)
    return rc, written


def _wait_forwarding_signals(child: subprocess.Popen[bytes]) -> int:
    """Wait for CMD; Ctrl-C and SIGTERM go to it (so its ranks can write their traces), not to us."""
    def forward(signum: int, frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - rc if rc < 0 else rc
