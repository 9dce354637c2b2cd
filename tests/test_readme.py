"""The README runs as written: every shell block and Python snippet, in order, in one scratch folder.

A block is skipped only when the line before it says `<!-- readme-test: skip (why) -->` (a make
target of this very suite, or an illustration with the user's own train.py). Two rules keep it
honest and affordable:
- `pip install ...` lines are not run: this suite runs in the environment `make setup` installed.
- the tour profiles one small run (CPU + gloo, 2 ranks, 4 steps); a later `overlapscope profile`
  of the same job (only --out differs) gets a copy of that run instead of a second torchrun.
A command that runs until stopped (`overlapscope dashboard`, given a free --port here) must print its
address and serve the page; then it is stopped. Every other command must exit 0.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FENCE = re.compile(r"^(<!-- readme-test: skip \((?P<why>[^)]*)\) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```$",
                   re.M | re.S)


def blocks() -> list[tuple[str, str, str | None]]:
    """(language, text, skip reason or None) of every fenced block, in README order."""
    return [(m["lang"], m["body"], m["why"]) for m in FENCE.finditer(README.read_text())]


def commands(body: str) -> list[str]:
    """Shell lines of a block: continuations joined, comments and blanks dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # overlapscope, torchrun and python of this suite
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


class Tour:
    def __init__(self, work: Path) -> None:
        self.work, self.env = work, environment()
        self.profiled: dict[tuple[str, ...], Path] = {}  # the job (argv without --out) -> its run
        self.outputs: dict[str, subprocess.CompletedProcess] = {}

    def shell(self, line: str) -> None:
        argv = shlex.split(line, comments=True)
        if argv[:2] == ["pip", "install"]:
            return
        if argv[:2] == ["overlapscope", "profile"]:
            return self.profile(line, argv)
        if argv[:2] == ["overlapscope", "dashboard"]:
            return self.serve(line)
        done = subprocess.run(line, shell=True, cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"README command failed ({done.returncode}): {line}\n{done.stderr[-3000:]}"
        self.outputs[line] = done

    def profile(self, line: str, argv: list[str]) -> None:
        out = argv[argv.index("--out") + 1]
        job = tuple(a for i, a in enumerate(argv) if a != "--out" and argv[i - 1] != "--out")
        if job in self.profiled:
            shutil.copytree(self.profiled[job], self.work / out)
            return
        done = subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"README command failed ({done.returncode}): {line}\n{done.stderr[-3000:]}"
        self.profiled[job] = self.work / out
        self.outputs[line] = done

    def serve(self, line: str) -> None:
        port = 18500 + os.getpid() % 1000
        proc = subprocess.Popen(f"{line} --port {port}", shell=True, cwd=self.work, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
                    break
                except OSError:
                    assert proc.poll() is None, f"README command exited: {line}\n{proc.stdout.read()[-3000:]}"
                    assert time.monotonic() < deadline, f"README command did not serve: {line}"
                    time.sleep(0.5)
            assert "overlapscope" in body
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            output = proc.communicate(timeout=30)[0]
        assert f"overlapscope dashboard: http://127.0.0.1:{port}/" in output, output

    def python(self, code: str) -> None:
        done = subprocess.run([sys.executable, "-c", code], cwd=self.work, env=self.env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"README snippet failed:\n{code}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> Tour:
    t = Tour(tmp_path_factory.mktemp("readme"))
    for lang, body, skip in blocks():
        if skip is not None:
            continue
        if lang == "bash":
            for line in commands(body):
                t.shell(line)
        elif lang == "python":
            t.python(body)
    return t


def test_every_runnable_block_runs(tour):
    ran = [b for b in blocks() if b[2] is None and b[0] in ("bash", "python")]
    assert len(ran) >= 2 and tour.profiled  # the tour and the notebook snippet at least
    assert {"fsdp", "fsdp-new"} <= {p.name for p in (tour.work / "runs").iterdir()}
    assert (tour.work / "junit.xml").is_file() and (tour.work / "summary.md").is_file()


def test_skipped_blocks_say_why():
    for lang, body, skip in blocks():
        if skip is not None:
            assert skip.strip(), body


def test_the_tour_profile_is_quiet(tour):
    [done] = [d for line, d in tour.outputs.items() if line.startswith("overlapscope profile")]
    assert "USDT:" not in done.stderr and "OMP_NUM_THREADS" not in done.stderr
    assert "Optimizer.step#" not in done.stderr
    assert "held back" in done.stderr and "(-v shows them)" in done.stderr


def test_the_example_output_is_what_the_command_prints():
    # The block that starts with "$ overlapscope analyze ...": its lines, less the "..." elisions,
    # must appear in the command's output in that order.
    [example] = [body for lang, body, _ in blocks() if lang == "" and body.startswith("$ overlapscope analyze")]
    first, *shown = example.splitlines()
    done = subprocess.run(first[2:], shell=True, cwd=REPO, env=environment(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    printed = iter(done.stdout.splitlines())
    for line in shown:
        if line != "...":
            assert any(p == line for p in printed), f"not printed (in this order): {line!r}"
