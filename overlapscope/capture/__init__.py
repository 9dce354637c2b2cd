"""Capture: wrap a training run and get one Kineto trace per rank plus a run manifest."""
from .labels import label
from .manifest import set_layout
from .profiler import Capture, CaptureConfig, capture

__all__ = ["Capture", "CaptureConfig", "capture", "label", "set_layout"]
