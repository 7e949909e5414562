"""The gate's findings where CI shows them: a table for the log, JUnit XML for the CI's test view,
and a Markdown summary (``$GITHUB_STEP_SUMMARY``, a PR comment) with per-rank bars."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

from shardopt.gate.check import Finding


def findings_table(findings: Sequence[Finding]) -> str:
    width = max((len(f.workload) for f in findings), default=8)
    lines = [f"{'workload':<{width}}  {'check':<10}  verdict  detail"]
    for f in findings:
        lines.append(f"{f.workload:<{width}}  {f.check:<10}  {'ok' if f.ok else 'FAIL':<7}  {f.message}")
    return "\n".join(lines)


def junit_xml(findings: Sequence[Finding]) -> str:
    """One test case per workload and check, failures with their message."""
    suite = ET.Element("testsuite", name="shardopt-gate", tests=str(len(findings)),
                       failures=str(sum(not f.ok for f in findings)), errors="0")
    for f in findings:
        case = ET.SubElement(suite, "testcase", classname=f"shardopt-gate.{f.workload}", name=f.check)
        if not f.ok:
            ET.SubElement(case, "failure", message=f.message).text = f.message
        else:
            ET.SubElement(case, "system-out").text = f.message
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def markdown_summary(findings: Sequence[Finding], bars: dict[str, str]) -> str:
    """A before/after table per workload and check, and a link to each workload's per-rank bars."""
    failed = sum(not f.ok for f in findings)
    lines = [f"## shardopt plan-quality gate: {'FAILED' if failed else 'passed'}"
             f" ({failed} of {len(findings)} checks failed)", "",
             "| workload | check | before | after | verdict | detail |", "|---|---|---|---|---|---|"]
    for f in findings:
        before = "" if f.before is None else f"{f.before:.4g}"
        after = "" if f.after is None else f"{f.after:.4g}"
        detail = f.message.replace("|", "\\|")
        lines.append(f"| {f.workload} | {f.check} | {before} | {after} | {'ok' if f.ok else '**FAIL**'} | {detail} |")
    if bars:
        lines += ["", "Per-rank predicted cost (compute and communication, forward and backward):", ""]
        lines += [f"- {name}: ![{name}]({path})" for name, path in sorted(bars.items())]
    return "\n".join(lines) + "\n"


def write_bars(measured, folder: Path) -> dict[str, str]:
    """Each workload's per-rank bars as a PNG beside the summary; their paths relative to it."""
    from shardopt.bench.report import plan_bars_png

    out = {}
    for m in measured:
        if m.per_rank:
            path = folder / f"{m.name}-ranks.png"
            plan_bars_png(m.per_rank, f"{m.name}: per-rank cost", path)
            out[m.name] = path.name
    return out
