"""Reports: JSON (overlapscope.report/1), terminal table, markdown, CSV - all from an Analysis."""
