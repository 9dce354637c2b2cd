"""The layer graph is one-way (docs/DESIGN.md "Layout"): core <- ingest, analysis <- pipeline <- report,
dashboard, cli. Checked twice: every import statement in the source (lazy ones inside functions
included), and what a fresh interpreter actually loads."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "overlapscope"

# layer -> the overlapscope packages (first name under overlapscope) its modules may import.
ALLOWED = {
    "core": {"core", "errors"},
    "ingest": {"core", "errors", "ingest"},
    "analysis": {"core", "errors", "analysis"},
    "pipeline": {"core", "errors", "io_atomic", "ingest", "analysis", "pipeline", "__version__"},
}


def imported_layers(path: Path) -> set[tuple[str, int]]:
    """(first package under overlapscope, line) of every overlapscope import in a module."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        module += ".__init__"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "overlapscope":
                found.add((parts[1] if len(parts) > 1 else "", node.lineno))
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_source_imports_only_lower_layers(layer):
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for target, line in imported_layers(path):
            if target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports overlapscope.{target}")
    assert not bad, "\n".join(bad)


def loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_importing_the_readers_loads_no_analysis_or_orchestration():
    loaded = loaded_after("import overlapscope.ingest, overlapscope.ingest.kineto, overlapscope.ingest.nsys")
    above = sorted(m for m in loaded if m.startswith(("overlapscope.analysis", "overlapscope.pipeline",
                                                      "overlapscope.report", "overlapscope.dashboard")))
    assert not above


def test_analysis_loads_no_reader_cache_pool_or_dask():
    # (pyarrow itself comes with pandas, which backs strings with it; the cache's Parquet does not.)
    modules = " ".join(f"overlapscope.analysis.{p.stem}" for p in (PACKAGE / "analysis").glob("*.py")
                       if p.stem != "__init__")
    loaded = loaded_after(f"import overlapscope.analysis; import {modules.replace(' ', ', ')}")
    forbidden = sorted(m for m in loaded if m.startswith(("overlapscope.ingest", "overlapscope.pipeline", "pyarrow.parquet",
                                                          "distributed", "sqlite3", "multiprocessing")))
    assert not forbidden


def test_the_cli_options_load_without_numpy():
    """`overlapscope --help` builds every command's options from RunOptions: that must stay cheap."""
    loaded = loaded_after("import overlapscope.pipeline.options")
    assert not {"numpy", "pandas", "overlapscope.ingest", "overlapscope.analysis"} & loaded
