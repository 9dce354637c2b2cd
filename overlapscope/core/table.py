"""The event table: the one schema every reader produces and every analyzer consumes.

One row per interval, one table per rank (columns and meanings in DESIGN.md, "The event table").
Two columns beyond DESIGN.md's list make launches format-neutral: `launch_ns` and `launch_lane` say
when and on which CPU thread a device event was launched (for CPU events they repeat `start_ns` and
`lane`), so analyzers can tie GPU work to the annotation that launched it without knowing whether
the link was a Kineto correlation id or an nsys (correlationId, pid) pair. Two more carry an
all-to-all's traffic per peer: `send_split_bytes` / `recv_split_bytes`, bytes to / from each group
member in group order joined by commas ("" unknown; see ingest/splits.py). And `role` says what a
CPU range is for (step, comm op, FSDP unit phase, micro-batch, scope: core/roles.py), assigned here
from the reader's step pattern so that both readers fill it the same way and analyzers read it
instead of name prefixes.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .codes import categorical_dtype
from .frames import frame_of
from .roles import DEFAULT_STEP_PATTERN, annotation_roles

KINDS = ("compute", "comm", "memcpy", "memset", "sync", "cpu_op", "annotation")
COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
    "all_to_all", "send", "recv", "send_recv", "barrier", "",
)

# column -> dtype; str columns are object (names repeat: readers make them categoricals)
COLUMNS: dict[str, str] = {
    "rank": "int32",
    "lane": "category",
    "kind": "category",
    "name": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "collective": "category",
    "bytes": "int64",
    "group": "category",
    "seq": "int64",
    "step": "int32",
    "correlation": "int64",
    "launch_ns": "int64",
    "launch_lane": "category",
    "send_split_bytes": "category",
    "recv_split_bytes": "category",
    "role": "category",
}


def make_table(rank: int, *, step_pattern: str | None = DEFAULT_STEP_PATTERN, **columns: Any) -> pd.DataFrame:
    """Build a rank's event table from column arrays; missing optional columns get their defaults.

    Required: lane, kind, name, start_ns, end_ns. Defaults: collective "", bytes -1, group "",
    seq -1, step -1, correlation -1, launch_ns = start_ns, launch_lane = lane, send_split_bytes and
    recv_split_bytes "". `role` is always derived (core/roles.py), with `step_pattern` the reader's
    step ranges (matched whole, ignoring case).
    """
    n = len(columns["start_ns"])
    start = np.asarray(columns["start_ns"], dtype=np.int64)
    defaults = {
        "collective": "", "bytes": -1, "group": "", "seq": -1, "step": -1, "correlation": -1,
        "send_split_bytes": "", "recv_split_bytes": "",
    }
    data: dict[str, Any] = {"rank": np.full(n, rank, dtype=np.int32)}
    for col, dtype in COLUMNS.items():
        if col in ("rank", "role"):
            continue
        if col in columns and columns[col] is not None:
            value = columns[col]
        elif col == "launch_ns":
            value = start
        elif col == "launch_lane":
            value = columns["lane"]
        else:
            value = defaults[col]
        if dtype == "category":
            if isinstance(value, pd.Categorical):
                data[col] = value  # built from codes by the reader (`coded_categorical`)
                continue
            arr = np.asarray(value, dtype=object) if not np.isscalar(value) else np.full(n, value, dtype=object)
            data[col] = pd.Categorical(arr)
        else:
            data[col] = np.broadcast_to(np.asarray(value, dtype=dtype), (n,)).copy()
    step_rx = re.compile(step_pattern, re.IGNORECASE) if step_pattern else None
    data["role"] = annotation_roles(data["kind"], data["name"], data["collective"], step_rx)
    table = frame_of(data)
    bad_kind = set(table["kind"].cat.categories) - set(KINDS)
    assert not bad_kind, f"reader produced unknown kinds {bad_kind}"
    return table


def coded_categorical(codes: np.ndarray, uniques: Sequence[str]) -> pd.Categorical:
    """`pd.Categorical(values)` for values = uniques[codes], from the codes a reader already has.

    pd.Categorical hashes every row's string again (tens of ms per 100k-row column); this sorts the
    distinct strings that occur and renumbers the codes to them, which gives the same categorical:
    the categories present, in sorted order. `uniques` must be distinct str; codes index them.
    """
    codes = np.asarray(codes, dtype=np.int64)
    uniques = np.asarray(uniques, dtype=object)
    if codes.size == 0:
        return pd.Categorical(uniques[codes])
    used = np.flatnonzero(np.bincount(codes, minlength=uniques.size))
    present = uniques[used]
    order = np.argsort(present, kind="stable")  # Python str order: the order pandas sorts them in
    renumber = np.empty(uniques.size, dtype=np.int64)
    renumber[used[order]] = np.arange(used.size)
    return pd.Categorical.from_codes(renumber[codes], dtype=categorical_dtype(present[order].tolist()),
                                     validate=False)  # codes renumbered into range above



def empty_table(rank: int) -> pd.DataFrame:
    return make_table(rank, lane=[], kind=[], name=[], start_ns=[], end_ns=[])


@dataclass(frozen=True, kw_only=True)
class ProcessGroup:
    """A process group a rank belongs to, as its trace lists it."""

    name: str
    """The name comm events carry in their `group` column (Kineto's pg_name, e.g. "0")."""
    ranks: tuple[int, ...] = ()
    """Global ranks of the group (empty when the trace gives only its size)."""
    size: int | None = None
    """How many ranks it has (len(ranks) when they are listed)."""
    desc: str = ""
    """What it is for, as torch describes it (pg_desc: default_pg, mesh_tp, ...); "" unknown."""


@dataclass(frozen=True, kw_only=True)
class RankMeta:
    """What a reader learned about a rank besides its events: the same fields from every format,
    None (or empty) where the format does not say."""

    source_format: str
    """The reader: "kineto" or "nsys"."""
    source_file: str
    """The file the events were read from (an nsys report, not its temporary export)."""
    device_name: str | None = None
    """The accelerator's name ("NVIDIA H100 80GB HBM3"): Kineto deviceProperties, nsys TARGET_INFO_GPU."""
    backend: str | None = None
    """The communication backend (nccl, gloo, ...): Kineto distributedInfo; nsys: "nccl" when NCCL's
    NVTX ranges are in the export."""
    world_size: int | None = None
    """Ranks in the job: Kineto distributedInfo; nsys: at least the ranks found, above the highest."""
    process_groups: tuple[ProcessGroup, ...] = ()
    """The process groups this rank is in, with their ranks (Kineto distributedInfo.pg_config)."""
    clock: str = ""
    """The clock the timestamps are on after `clock_base_ns`: "unix" (Kineto baseTimeNanoseconds,
    nsys session start in UTC), "session" (an nsys export without a start time), "" unknown."""
    clock_base_ns: int = 0
    """What the reader added to the file's own timestamps to put them on `clock`."""
    host: str | None = None
    """Host name (nsys TARGET_INFO_SYSTEM_ENV); Kineto traces do not carry it."""
    incomplete: bool = False
    """The run manifest says this rank stopped before its capture ended (a crash, an early exit): its
    last step was cut short, so only the whole steps before it are analyzed."""
    comm_classification: dict[str, Any] | None = None
    """How the reader classified kernels as communication: rule families, comm-looking kernels no rule
    claimed, collective conflicts (ingest.comm_summary; analysis.comm_classes reports them)."""
    stream_waits: dict[str, list] | None = None
    """CUDA stream waits on events (Kineto "Stream Wait Event"): per wait the waiting lane, its
    correlation, the lane the event was recorded on and the record's correlation (the dependency
    graph's event edges); None when the trace has none."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Format-specific facts kept for reports and debugging, never read by an analyzer (nsys pid,
    CUDA device ids, thread names, versions; Kineto nccl_version)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the Parquet cache stores it); `from_json` reads it back."""
        out = dataclasses.asdict(self)
        out["process_groups"] = [dict(g, ranks=list(g["ranks"])) for g in out["process_groups"]]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankMeta":
        groups = tuple(ProcessGroup(**dict(g, ranks=tuple(g["ranks"]))) for g in data.get("process_groups", ()))
        return cls(**{**data, "process_groups": groups})


@dataclass
class RankTrace:
    """One rank's events plus what the reader learned about where they came from."""

    rank: int
    events: pd.DataFrame
    """The event table (COLUMNS)."""
    steps: pd.DataFrame
    """Step ranges on the CPU: columns step (int), start_ns, end_ns; empty when the trace has none."""
    meta: RankMeta
    """The reader's facts about the rank (device, backend, world size, process groups, clock, source)."""
    device: str
    """"gpu" when the rank has device (stream) activity, else "cpu"."""
    rank_from: str = "distributedInfo"
    """How the rank number was found: distributedInfo, filename, order, device, process."""

    @property
    def source(self) -> str:
        """The file the events were read from."""
        return self.meta.source_file

    @property
    def world_size(self) -> int | None:
        return self.meta.world_size


@dataclass
class Run:
    """All ranks of one run, ordered by rank, and the run manifest when one was written."""

    ranks: list[RankTrace]
    manifest: dict[str, Any]
    path: str

    @property
    def world_size(self) -> int | None:
        sizes = {r.world_size for r in self.ranks if r.world_size}
        return max(sizes) if sizes else (len(self.ranks) or None)

    def rank(self, rank: int) -> RankTrace:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(rank)
