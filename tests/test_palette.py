"""The exposed-comm colour is unmistakable: far from every other colour the dashboard draws beside it,
for normal vision and under simulated colour-vision deficiency.

Simulation: Machado, Oliveira & Fernandes (2009), "A Physiologically-based Model for Simulation of
Color Vision Deficiency", IEEE TVCG 15(6): a 3x3 matrix on linear sRGB per deficiency, here at
severity 1.0 (full dichromacy). Distance: CIE76 delta E in CIELAB (D65); about 2.3 is a just
noticeable difference, 25 is two colours nobody confuses at a glance.
"""
from __future__ import annotations

import numpy as np
import pytest

from overlapscope.dashboard.figures import COLLECTIVE_COLORS, COLORS, collective_color

MACHADO_2009 = {
    "normal vision": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}
MIN_DELTA_E = 25.0


def linear_rgb(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(rgb: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ \
        np.clip(rgb, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str, vision: str) -> float:
    m = MACHADO_2009[vision]
    return float(np.linalg.norm(lab(m @ linear_rgb(a)) - lab(m @ linear_rgb(b))))


def test_the_simulation_reproduces_a_known_confusion():
    # red and green that a deuteranope cannot tell apart, while normal vision sees them far apart
    assert delta_e("#e45756", "#54a24b", "normal vision") > 60
    assert delta_e("#e45756", "#54a24b", "deuteranopia") < 3


@pytest.mark.parametrize("vision", sorted(MACHADO_2009))
def test_exposed_comm_stands_apart_from_every_other_colour(vision):
    others = {**{k: v for k, v in COLORS.items() if k != "exposed"}, **COLLECTIVE_COLORS,
              "other collective": collective_color("")}
    close = {name: round(delta_e(COLORS["exposed"], colour, vision), 1) for name, colour in others.items()
             if delta_e(COLORS["exposed"], colour, vision) < MIN_DELTA_E}
    assert close == {}, f"{vision}: exposed comm {COLORS['exposed']} too close to {close}"


def test_the_html_report_draws_exposed_comm_in_the_same_colour():
    from overlapscope.report.html_report import LANE_COLORS

    assert LANE_COLORS["exposed"] == COLORS["exposed"]
    assert LANE_COLORS["compute"] == COLORS["compute"] and LANE_COLORS["comm"] == COLORS["comm"]
