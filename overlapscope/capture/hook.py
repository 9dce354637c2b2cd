"""The start-up hook `overlapscope profile` injects into every Python process of the job.

`_boot/sitecustomize.py` calls `install_from_env()`. It does nothing unless the launcher's
environment variables are set. Otherwise it registers torch's global optimizer-step post hook:
the first `optimizer.step()` starts the profiler, every later one is a step boundary, so each
recorded ProfilerStep is one whole iteration (zero_grad, forward, backward, optimizer step).
Processes that never step an optimizer (the torchrun agent, data-loader workers) never profile.
A script that enters `capture()` itself wins: the hook stands down. Nothing here may break the
user's program: every failure is logged and the hook disables itself.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("overlapscope.capture")


class _OptimizerStepHook:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.session: Any = None
        self.optimizer_id: int | None = None
        self.disabled = False

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.disabled:
            return
        from . import profiler
        try:
            if profiler.user_capture_active():
                self._stand_down()
                return
            # Scripts with several optimizers (one per pipeline stage...) step them all per
            # iteration: the first one seen marks the boundaries.
            if self.optimizer_id is None:
                self.optimizer_id = id(optimizer)
            elif id(optimizer) != self.optimizer_id:
                return
            if self.session is None:
                self.session = profiler.Session(self.config)
                profiler.register_hook_session(self.session)
                self.session.start()
                # only a process that profiles trades SIGTERM's instant death for a partial trace
                if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                    signal.signal(signal.SIGTERM, _exit_on_sigterm)
                return
            self.session.step()
            if self.session.exported:
                self.disabled = True
        except Exception as exc:  # never take the training run down with us
            log.warning("overlapscope: profiling disabled on this rank: %s", exc)
            self.disabled = True

    def _stand_down(self) -> None:
        if self.session is not None and self.session.running:
            self.session.discard = True
            self.session.stop()
        self.disabled = True

    def finish(self) -> None:
        """At exit: a run shorter than skip_first + warmup + steps still leaves what was recorded."""
        if self.session is not None and self.session.running and not self.session.discard:
            try:
                self.session.stop()
            except Exception as exc:  # pragma: no cover - best effort at interpreter exit
                log.warning("overlapscope: could not write the partial trace: %s", exc)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # torchrun SIGTERMs the surviving ranks when one fails; exiting normally runs atexit, which
    # writes the partial trace those ranks hold. (A rank blocked inside a C++ collective runs this
    # only when the call returns; torchrun's SIGKILL after its grace period still ends it.)
    sys.exit(128 + signum)


def install_from_env() -> bool:
    """Install the optimizer-step hook when launched by `overlapscope profile`; True if installed."""
    from .profiler import ENV_NSYS, ENV_OUT, ENV_SKIP_FIRST, ENV_STEPS, CaptureConfig
    out = os.environ.get(ENV_OUT)
    if not out:
        return False
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        config = CaptureConfig(out_dir=Path(out), steps=int(os.environ.get(ENV_STEPS, "5")),
                               skip_first=int(os.environ.get(ENV_SKIP_FIRST, "1")),
                               nsys=os.environ.get(ENV_NSYS) == "1")
        hook = _OptimizerStepHook(config)
        register_optimizer_step_post_hook(hook)
        atexit.register(hook.finish)
        return True
    except Exception as exc:
        log.warning("overlapscope: start-up hook not installed: %s", exc)
        return False
