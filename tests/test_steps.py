"""ingest/steps.resolved_steps: step tables that need no rule skip them, with the rules' answer."""
from __future__ import annotations

import numpy as np
import pandas as pd


def test_steps_already_disjoint_and_in_order_skip_the_rules_with_the_same_answer(caplog):
    """resolved_steps returns ranges that no rule changes (distinct numbers, strictly increasing
    starts, each ending by the next start) as they are; on every table the answer and warnings are
    the rules' own (_resolved)."""
    from overlapscope.ingest import steps as steps_module
    rng = np.random.default_rng(11)
    skipped = 0
    for _ in range(400):
        n = int(rng.integers(1, 6))
        start = np.sort(rng.integers(0, 40, n)) * 10
        end = start + rng.integers(0, 3, n) * 10 * int(rng.integers(1, 3))
        number = rng.permutation(n) if rng.random() < 0.6 else rng.integers(0, 3, n)
        frame = pd.DataFrame({"step": number.astype(np.int32), "start_ns": start.astype(np.int64),
                              "end_ns": end.astype(np.int64)})
        caplog.clear()
        got = steps_module.resolved_steps(frame)
        got_log = caplog.text
        caplog.clear()
        want = steps_module._resolved(number.astype(np.int32), start.astype(np.int64), end.astype(np.int64), "")
        pd.testing.assert_frame_equal(got, want)
        assert got_log == caplog.text
        skipped += steps_module._disjoint_in_order(number, start, end)
    assert 50 < skipped < 350  # both paths taken
