"""Link peaks the cost model compares busbw with: data, one entry per link, each with its public source.

All bandwidths are GB/s per direction per GPU - what nccl-tests' busbw measures ("a unidirectional
bandwidth", nccl-tests doc/PERFORMANCE.md). Vendors quote NVLink as the bidirectional total per GPU;
the entries halve it. GPU models are recognised by the device name in the trace (Kineto
`deviceProperties[].name`, the nsys device name); an unknown GPU, and every CPU (gloo) run, has no
peak unless `--link-gbps` / `--inter-node-gbps` give one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Link:
    name: str
    """What the link is, as printed in reports (NVLink 4, PCIe 4.0 x16, InfiniBand NDR)."""
    gbps: float
    """Peak GB/s per direction per GPU."""
    nvswitch: bool = False
    """All GPUs of a node reach each other through NVSwitch at this rate (flat / NVLS algorithms apply)."""
    source: str = ""
    """Where the number comes from."""


_NVLINK_PAGE = "https://www.nvidia.com/en-us/data-center/nvlink/ (per-GPU NVLink bandwidth by generation)"
_PCIE = "PCI-SIG: PCIe 4.0 16 GT/s and 5.0 32 GT/s per lane, 128b/130b encoding (x16: ~31.5 / ~63 GB/s per direction)"

# (device-name pattern, intra-node link); first match wins, so PCIe card patterns come first.
GPU_LINKS: tuple[tuple[str, Link], ...] = (
    (r"A100.*PCIE", Link(name="PCIe 4.0 x16", gbps=32.0, source=_PCIE)),
    (r"H100.*PCIE", Link(name="PCIe 5.0 x16", gbps=64.0, source=_PCIE)),
    (r"V100", Link(name="NVLink 2", gbps=150.0, nvswitch=False,
                   source=_NVLINK_PAGE + ": V100 300 GB/s total, 6 links")),
    (r"A100|A800", Link(name="NVLink 3", gbps=300.0, nvswitch=True,
                        source=_NVLINK_PAGE + ": A100 600 GB/s total, 12 links of 50 GB/s")),
    (r"H100|H800|H200|GH200", Link(name="NVLink 4", gbps=450.0, nvswitch=True,
                                   source=_NVLINK_PAGE + ": H100/H200 900 GB/s total, 18 links")),
    (r"B200|B300|GB200|GB300", Link(name="NVLink 5", gbps=900.0, nvswitch=True,
                                    source=_NVLINK_PAGE + ": Blackwell 1.8 TB/s total, 18 links")),
)
INTER_NODE: dict[str, Link] = {
    "ib_hdr": Link(name="InfiniBand HDR (200 Gb/s per GPU)", gbps=25.0,
                   source="NVIDIA ConnectX-6 HDR: 200 Gb/s per port (https://www.nvidia.com/en-us/networking/infiniband-adapters/)"),
    "ib_ndr": Link(name="InfiniBand NDR (400 Gb/s per GPU)", gbps=50.0,
                   source="NVIDIA ConnectX-7 NDR: 400 Gb/s per port (https://www.nvidia.com/en-us/networking/infiniband-adapters/)"),
}
# Which NIC generation a GPU generation's reference systems pair each GPU with (DGX A100: HDR, DGX H100: NDR).
DEFAULT_INTER_NODE = {"NVLink 3": "ib_hdr", "NVLink 4": "ib_ndr", "NVLink 5": "ib_ndr", "NVLink 2": "ib_hdr"}
DEFAULT_LATENCY_US = {"intra": 1.0, "inter": 5.0}
"""α per algorithm step: rough NCCL-like figures (a few µs across a network, ~1 µs over NVLink), a
default for the model's shape, not a measurement; --latency-us sets both."""


def intra_node_link(device_name: str | None) -> Link | None:
    """The intra-node link of a GPU model, from its device name; None when unknown (or a CPU)."""
    if not device_name:
        return None
    for pattern, link in GPU_LINKS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return link
    return None


def inter_node_link(intra: Link | None) -> Link | None:
    key = DEFAULT_INTER_NODE.get(intra.name) if intra else None
    return INTER_NODE[key] if key else None
