"""JUnit XML for the gate: one test case per metric, so CI shows which number failed and why."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from overlapscope.report.gate import Verdict
from overlapscope.report.summary import describe

SUITE = "overlapscope.check"


def junit_xml(verdict: Verdict) -> str:
    """`<testsuites><testsuite>` with a `<testcase>` per metric: failure = regression, skipped = inconclusive
    (the message says the smallest change the data could detect and what to record instead)."""
    alpha = verdict.thresholds.alpha
    failures = sum(r.status == "regression" for r in verdict.results)
    skipped = len(verdict.inconclusive)
    counts = {"tests": str(len(verdict.results)), "failures": str(failures), "errors": "0",
              "skipped": str(skipped), "time": "0"}
    root = ET.Element("testsuites", name="overlapscope", **counts)
    suite = ET.SubElement(root, "testsuite", name=SUITE, **counts)
    props = ET.SubElement(suite, "properties")
    for name, value in (("baseline", verdict.baseline_run.get("path", "")),
                        ("run", verdict.current_run.get("path", "")),
                        ("world_size", verdict.current_run.get("world_size", "")),
                        ("max_increase_pct", verdict.thresholds.max_increase_pct),
                        ("min_increase_ms", verdict.thresholds.min_increase_ms),
                        ("alpha", alpha), ("power", verdict.thresholds.power)):
        ET.SubElement(props, "property", name=name, value=str(value))
    for result in verdict.results:
        case = ET.SubElement(suite, "testcase", classname=SUITE, name=result.metric.name, time="0")
        line = describe(result, alpha, verdict.thresholds.power)
        if result.status == "regression":
            failure = ET.SubElement(case, "failure", message=line, type="regression")
            failure.text = line
        elif result.status == "inconclusive":
            ET.SubElement(case, "skipped", message=line)
        else:
            ET.SubElement(case, "system-out").text = line
    if verdict.warnings:
        ET.SubElement(suite, "system-err").text = "\n".join(verdict.warnings)
    return _serialize(root)


def junit_error_xml(message: str) -> str:
    """The run could not be compared (exit 2): one errored test case that says why."""
    counts = {"tests": "1", "failures": "0", "errors": "1", "skipped": "0", "time": "0"}
    root = ET.Element("testsuites", name="overlapscope", **counts)
    suite = ET.SubElement(root, "testsuite", name=SUITE, **counts)
    case = ET.SubElement(suite, "testcase", classname=SUITE, name="compatibility", time="0")
    ET.SubElement(case, "error", message=message, type="unusable_input").text = message
    return _serialize(root)


def _serialize(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
