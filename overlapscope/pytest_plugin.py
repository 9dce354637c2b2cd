"""pytest plugin: keep exposed communication in check from a test, the way pytest-benchmark keeps timings.

    def test_train_step_overlap(overlapscope):
        overlapscope.profile_step(train_step, steps=6)          # in this process

    def test_fsdp_overlap(overlapscope):
        overlapscope.profile_command(["torchrun", "--nproc-per-node", "2", "train.py"])

Each call profiles, analyzes, and compares with a baseline JSON kept in the repository
(`<test dir>/overlapscope_baselines/<test name>.json`, or the `overlapscope_baseline_dir` ini
option); a regression or an incompatible run fails the test with the gate's one-line verdicts.
`pytest --overlapscope-update-baseline` records the baselines instead, and
`pytest --overlapscope-baseline-runs 3` records baselines of three runs each (the run-to-run noise the
gate needs on a busy machine). An inconclusive verdict (the data could not have detected a worsening
of the threshold's size) passes the test and says so in the overlapscope summary section.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import pytest

from overlapscope.errors import OverlapscopeError

if TYPE_CHECKING:
    from overlapscope.pipeline.options import RunOptions
    from overlapscope.report.gate import Thresholds, Verdict

UPDATE = "--overlapscope-update-baseline"
RUNS = "--overlapscope-baseline-runs"
# Every pytest session of every user who installs overlapscope loads this module (pytest11): it
# imports only pytest at load time; pandas, scipy and torch come in when a test uses the fixture.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("overlapscope", "exposed-communication regression checks")
    group.addoption(UPDATE, action="store_true", default=False,
                    help="Record overlapscope baselines from this run instead of comparing with them.")
    group.addoption(RUNS, type=int, default=None, metavar="N",
                    help="Record baselines of N runs each (implies --overlapscope-update-baseline): profile_step and "
                         "profile_command run N times, so check knows the run-to-run noise.")
    group.addoption("--overlapscope-max-increase", type=float, default=None, metavar="PCT",
                    help="Allowed worsening, percent of the baseline median (default 10).")
    group.addoption("--overlapscope-min-increase-ms", type=float, default=None, metavar="MS",
                    help="Allowed worsening in ms per step (default 1).")
    parser.addini("overlapscope_baseline_dir", default="",
                  help="Directory for baseline JSON files, relative to the rootdir "
                       "(default: overlapscope_baselines/ beside each test file).")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "overlapscope: the test profiles a run and checks it against a baseline")
    config._overlapscope_log = []  # type: ignore[attr-defined]  # (nodeid, outcome line) for the summary


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = getattr(config, "_overlapscope_log", [])
    if lines:
        terminalreporter.section("overlapscope")
        for nodeid, line in lines:
            terminalreporter.write_line(f"{nodeid}: {line}")


class OverlapscopeGate:
    """What the `overlapscope` fixture returns: profile, analyze, compare (or record) in one call."""

    def __init__(self, request: pytest.FixtureRequest, work_dir: Path) -> None:
        self._request = request
        self._config = request.config
        self._work_dir = work_dir
        runs = self._config.getoption(RUNS)
        if runs is not None and runs < 1:
            raise pytest.UsageError(f"{RUNS} must be at least 1, got {runs}")
        self.update: bool = bool(self._config.getoption(UPDATE)) or runs is not None
        self.baseline_runs: int = runs or 1
        """Runs per recorded baseline (profile_step and profile_command; check_run records the one it is given)."""

    def baseline_path(self, name: str | None = None) -> Path:
        node = self._request.node
        stem = _UNSAFE.sub("_", node.name if name is None else f"{node.name}-{name}").strip("_")
        configured = self._config.getini("overlapscope_baseline_dir")
        folder = Path(self._config.rootpath, configured) if configured else \
            Path(node.path).parent / "overlapscope_baselines"
        return folder / f"{stem}.json"

    def thresholds(self, **overrides: float) -> Thresholds:
        from overlapscope.report.gate import Thresholds

        opts = {"max_increase_pct": self._config.getoption("--overlapscope-max-increase"),
                "min_increase_ms": self._config.getoption("--overlapscope-min-increase-ms")}
        values = {k: v for k, v in opts.items() if v is not None} | overrides
        return Thresholds(**values)

    def check_run(self, run: str | Path, *, name: str | None = None, metrics: Iterable[str] | None = None,
                  options: RunOptions | None = None, **thresholds: float) -> Verdict | None:
        """Compare a run already on disk with this test's baseline (or record it); None when recording.
        options: how to read and analyze it (the CLI's run options)."""
        return self._check_runs([run], name, metrics, options, thresholds)

    def _check_runs(self, runs: Sequence[str | Path], name: str | None, metrics: Iterable[str] | None,
                    options: RunOptions | None, thresholds: dict[str, float]) -> Verdict | None:
        from overlapscope.pipeline.run import analyze_run
        from overlapscope.report.gate_baseline import build_baseline, combine

        try:
            doc = combine([build_baseline(analyze_run(run, options)) for run in runs])
            return self._judge(doc, name, None if metrics is None else tuple(metrics), self.thresholds(**thresholds))
        except OverlapscopeError as exc:
            self._log(f"unusable: {exc}")
            pytest.fail(f"overlapscope: {exc}", pytrace=False)

    def profile_step(self, step_fn: Callable[[], Any], *, steps: int = 5, skip_first: int = 1,
                     name: str | None = None, metrics: Iterable[str] | None = None,
                     **thresholds: float) -> Verdict | None:
        """Run `step_fn` skip_first + 1 + steps times in this process under `overlapscope.capture`, then check."""
        import torch

        from overlapscope.capture import capture

        if steps < 2:
            raise ValueError("profile_step needs at least 2 steps to compare per-step samples")
        self._require_baseline(name)
        runs = []
        for _ in range(self._runs_now()):
            out = Path(tempfile.mkdtemp(prefix="run-", dir=self._work_dir))
            # skip_first steps run unprofiled (warm-up), one more is the profiler's own warm-up, then `steps` recorded
            with capture(out, steps=steps, skip_first=skip_first) as cap:
                for _ in range(skip_first + 1 + steps):
                    step_fn()
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    cap.step()
            runs.append(out)
        return self._check_runs(runs, name, metrics, None, thresholds)

    def profile_command(self, cmd: Sequence[str], *, steps: int = 5, skip_first: int = 1, name: str | None = None,
                        metrics: Iterable[str] | None = None, timeout_s: float = 900,
                        env: dict[str, str] | None = None, **thresholds: float) -> Verdict | None:
        """Run CMD (e.g. a torchrun command) under `overlapscope profile`, then check its traces."""
        from overlapscope.report.gate_record import profile_argv

        self._require_baseline(name)
        runs = []
        for _ in range(self._runs_now()):  # one after the other: side by side they would load each other
            out = Path(tempfile.mkdtemp(prefix="run-", dir=self._work_dir)) / "traces"
            proc = subprocess.run(profile_argv(cmd, out, steps=steps, skip_first=skip_first), capture_output=True,
                                  text=True, timeout=timeout_s, env={**os.environ, **(env or {})})
            log_path = out.parent / "profile.log"
            log_path.write_text(proc.stdout + "\n" + proc.stderr)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                pytest.fail(f"overlapscope: the profiled command exited with status {proc.returncode} "
                            f"(full output: {log_path}):\n{tail}", pytrace=False)
            runs.append(out)
        return self._check_runs(runs, name, metrics, None, thresholds)

    def _runs_now(self) -> int:
        """Runs to profile in this call: the baseline's runs when recording, else the one to check."""
        return self.baseline_runs if self.update else 1

    def _judge(self, doc: dict[str, Any], name: str | None, metrics: tuple[str, ...] | None,
               thresholds: Thresholds) -> Verdict | None:
        from overlapscope.report import gate_baseline as gb
        from overlapscope.report.gate import compare
        from overlapscope.report.summary import text_report

        path = self.baseline_path(name)
        if self.update:
            steps = gb.step_frame(doc)
            if steps.empty or (steps["step"] < 0).all():
                raise OverlapscopeError("no steps were recorded: nothing to keep as a baseline", path)
            gb.save_baseline(doc, path)
            n = len(gb.split_runs(doc))
            self._log(f"baseline written to {path} ({n} run{'s' if n > 1 else ''})")
            return None
        self._require_baseline(name)
        verdict = compare(gb.load_baseline(path), doc, thresholds, metrics)
        report = text_report(verdict)
        self._request.node.user_properties.append(("overlapscope", report))
        self._log(report.splitlines()[-1])  # PASS, INCONCLUSIVE (never a failure) or FAIL
        if not verdict.passed:
            pytest.fail(f"{report}\nbaseline: {path} (refresh with pytest {UPDATE})", pytrace=False)
        return verdict

    def _require_baseline(self, name: str | None) -> None:
        """Fail before profiling (a torchrun job can take minutes) when there is nothing to compare with."""
        path = self.baseline_path(name)
        if not self.update and not path.is_file():
            self._log(f"no baseline at {path}")
            pytest.fail(f"overlapscope: no baseline at {path}; record one with pytest {UPDATE}", pytrace=False)

    def _log(self, line: str) -> None:
        self._config._overlapscope_log.append((self._request.node.nodeid, line))  # type: ignore[attr-defined]


@pytest.fixture
def overlapscope(request: pytest.FixtureRequest, tmp_path: Path) -> OverlapscopeGate:
    """Profile a training step or a torchrun command and compare it with the test's baseline file."""
    return OverlapscopeGate(request, tmp_path)
