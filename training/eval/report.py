"""The benchmark's report: a run's records (training/eval/runner.py) summed up per task and per
suite, written as JSON, a Markdown table and a PNG plot; and two reports side by side.

    report = build_report(run_dir.meta(), run_dir.records(), extra={"command": ...})
    write_report(report, run_dir.path)        # report.json, report.md, report.png
    text = compare(load_report(a), load_report(b))   # Markdown: summaries, per-task changes

report.json (format "composer-eval-report/1"):
    suite {name, path, budget, perfect, trivial}, policy {spec, kind, model, endpoint, quantize},
    command, machine, created, finished, complete (every attempt recorded)
    summary   tasks, attempts, scored, masked; resolved (mean over tasks of each task's mean over
              its scored attempts), resolved_ci95 (Wilson over tasks), resolved_count,
              reward; turns, tool_calls, completion_tokens, prompt_tokens, wall_s (means per
              scored attempt); parallel_share (parallel calls / all calls), tokens_per_s
              (completion tokens / model seconds); unsupported_claims (total),
              attempts_with_unsupported_claims, malformed_tool_calls (total); adherence (mean
              score where measured, with its count); stop_reasons {reason: count}
    groups    {"level": {"0": summary, ...}, "kind": {...}} for the tasks' metadata
    tasks     per task: instance_id, metadata, attempts, resolved (mean), reward, turns,
              tool_calls, parallel_share, completion_tokens, wall_s, unsupported_claims,
              adherence, stop_reason, status

Tests: .venv/bin/python -m pytest tests/training/test_eval.py
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPORT_FORMAT = "composer-eval-report/1"
BOOTSTRAP = 2000
"""Resamples of the bootstrap intervals (seeded: the same records give the same interval)."""


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _eff(record: dict[str, Any]) -> dict[str, Any]:
    return record["reward"]["efficiency"]


def _unsupported(record: dict[str, Any]) -> int:
    return int(record["reward"]["claims"].get("unsupported", 0))


def bootstrap_ci(values: list[float], seed: int = 0) -> list[float] | None:
    """A 95% percentile-bootstrap interval of the mean of `values`."""
    if not values:
        return None
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP))
    return [round(means[int(0.025 * BOOTSTRAP)], 4), round(means[int(0.975 * BOOTSTRAP) - 1], 4)]


def rate_ci(values: list[float]) -> list[float] | None:
    """A 95% Wilson score interval of a success rate over tasks (a task's value is its success
    over seeds). Unlike a percentile bootstrap it does not collapse to a point at 0% or 100%:
    0 of 120 gives [0, 0.031]."""
    if not values:
        return None
    n, z = len(values), 1.959964
    p = statistics.fmean(values)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def per_task(records: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """Each task's attempts summed up, in `order` (tasks without a record are left out)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_task.setdefault(record["instance_id"], []).append(record)
    rows = []
    for instance in [i for i in order if i in by_task] + sorted(set(by_task) - set(order)):
        attempts = by_task[instance]
        scored = [r for r in attempts if r["status"] == "scored"]
        calls = sum(_eff(r)["tool_calls"] for r in scored)
        adh = [r["adherence"]["score"] for r in scored if r.get("adherence")]
        rows.append({
            "instance_id": instance, "metadata": attempts[0].get("metadata", {}), "attempts": len(attempts),
            "status": "scored" if scored else "masked",
            "resolved": _mean([float(bool(r["resolved"])) for r in scored]),
            "reward": _mean([r["reward"]["reward"] for r in scored]),
            "turns": _mean([_eff(r)["turns"] for r in scored]),
            "tool_calls": _mean([_eff(r)["tool_calls"] for r in scored]),
            "parallel_share": round(sum(_eff(r)["parallel_calls"] for r in scored) / calls, 4) if calls else 0.0,
            "completion_tokens": _mean([_eff(r)["completion_tokens"] for r in scored]),
            "wall_s": _mean([_eff(r)["wall_s"] for r in scored]),
            "unsupported_claims": sum(_unsupported(r) for r in scored),
            "adherence": _mean(adh),
            "stop_reason": Counter(r.get("stop_reason") or "none" for r in attempts).most_common(1)[0][0],
        })
    return rows


def summarize(records: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The suite-level numbers of a set of records and their per-task rows."""
    scored = [r for r in records if r["status"] == "scored"]
    resolved = [t["resolved"] for t in tasks if t["resolved"] is not None]
    calls = sum(_eff(r)["tool_calls"] for r in scored)
    model_s = sum(_eff(r)["model_s"] for r in scored)
    adh = [r["adherence"]["score"] for r in scored if r.get("adherence")]
    return {
        "tasks": len(tasks), "attempts": len(records), "scored": len(scored), "masked": len(records) - len(scored),
        "resolved": _mean(resolved), "resolved_ci95": rate_ci(resolved),
        "resolved_count": sum(1 for r in scored if r["resolved"]),
        "reward": _mean([r["reward"]["reward"] for r in scored]),
        **{key: _mean([_eff(r)[key] for r in scored])
           for key in ("turns", "tool_calls", "completion_tokens", "prompt_tokens", "wall_s")},
        "parallel_share": round(sum(_eff(r)["parallel_calls"] for r in scored) / calls, 4) if calls else 0.0,
        "tokens_per_s": round(sum(_eff(r)["completion_tokens"] for r in scored) / model_s, 2) if model_s else None,
        "unsupported_claims": sum(_unsupported(r) for r in scored),
        "attempts_with_unsupported_claims": sum(1 for r in scored if _unsupported(r)),
        "malformed_tool_calls": sum(int(r["reward"]["malformed"]["count"]) for r in scored),
        "adherence": _mean(adh), "adherence_count": len(adh),
        "stop_reasons": dict(Counter(r.get("stop_reason") or "none" for r in records).most_common()),
    }


def build_report(meta: dict[str, Any], records: list[dict[str, Any]], *, suite: Any = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of a run (`meta`: its run.json; `suite`: the Suite, for its scores)."""
    order = list(meta.get("instances") or [])
    tasks = per_task(records, order)
    groups: dict[str, dict[str, Any]] = {}
    for key in ("level", "kind"):
        values = sorted({str(t["metadata"][key]) for t in tasks if key in t["metadata"]})
        if values:
            groups[key] = {v: summarize([r for r in records if str(r.get("metadata", {}).get(key)) == v],
                                        [t for t in tasks if str(t["metadata"].get(key)) == v]) for v in values}
    expected = len(order) * len(meta.get("budget", {}).get("seeds") or [0])
    suite_info = {"name": meta.get("suite"), "path": meta.get("suite_path"), "budget": meta.get("budget")}
    if suite is not None:
        suite_info |= {"perfect": suite.perfect, "trivial": suite.trivial, "difficulty": suite.difficulty}
    return {"format": REPORT_FORMAT, "suite": suite_info, "policy": meta.get("policy"), "created": meta.get("created"),
            "finished": time.time(), "complete": len(records) >= expected, "expected_attempts": expected,
            **(extra or {}), "summary": summarize(records, tasks), "groups": groups, "tasks": tasks}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)]


SUMMARY_KEYS = ("resolved", "resolved_ci95", "resolved_count", "scored", "masked", "reward", "turns", "tool_calls",
                "parallel_share", "completion_tokens", "prompt_tokens", "wall_s", "tokens_per_s",
                "unsupported_claims", "malformed_tool_calls", "adherence")


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: what ran, the summary, the groups and one row per task."""
    s, suite, policy = report["summary"], report["suite"], report["policy"] or {}
    lines = [f"# {suite['name']}: {policy.get('spec')}", "",
             f"{s['tasks']} tasks, {s['attempts']} of {report['expected_attempts']} attempts"
             f"{'' if report['complete'] else ' (partial: the run is not finished)'}; "
             f"budget {json.dumps(suite.get('budget'))}.", ""]
    if report.get("command"):
        lines += ["```", report["command"], "```", ""]
    lines += _table(["metric", "value"], [[k, s.get(k)] for k in SUMMARY_KEYS])
    lines += ["", "stop reasons: " + ", ".join(f"{k} {v}" for k, v in s["stop_reasons"].items()), ""]
    for key, by_value in report["groups"].items():
        lines += [f"## by {key}", ""]
        lines += _table([key, "tasks", "resolved", "ci95", "turns", "tool calls", "tokens", "wall s"],
                        [[v, g["tasks"], g["resolved"], g["resolved_ci95"], g["turns"], g["tool_calls"],
                          g["completion_tokens"], g["wall_s"]] for v, g in by_value.items()])
        lines.append("")
    lines += ["## tasks", ""]
    lines += _table(["task", "resolved", "reward", "turns", "tool calls", "parallel", "tokens", "wall s",
                     "unsupported claims", "adherence", "stop"],
                    [[t["instance_id"], t["resolved"], t["reward"], t["turns"], t["tool_calls"], t["parallel_share"],
                      t["completion_tokens"], t["wall_s"], t["unsupported_claims"], t["adherence"],
                      t["stop_reason"]] for t in report["tasks"]])
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """report.png: resolved rate (by group, with the suite's perfect and trivial scores), turns,
    tokens against wall time, stop reasons."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in report["tasks"] if t["resolved"] is not None]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    groups = next(iter(report["groups"].values()), {})
    names = ["all", *groups]
    rates = [report["summary"]["resolved"] or 0.0, *(g["resolved"] or 0.0 for g in groups.values())]
    axes[0][0].bar(names, rates, color="tab:blue")
    for key, style in (("perfect", "--"), ("trivial", ":")):
        if report["suite"].get(key) is not None:
            axes[0][0].axhline(report["suite"][key], linestyle=style, color="gray", label=key)
    axes[0][0].set(ylim=(0, 1.05), ylabel="resolved", title=f"{report['suite']['name']}: resolved"
                   + (f" by {next(iter(report['groups']))}" if groups else ""))
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(loc="upper right")
    axes[0][1].hist([t["turns"] for t in tasks], bins=range(0, int(max([t["turns"] for t in tasks] or [1])) + 2))
    axes[0][1].set(xlabel="model calls", ylabel="tasks", title="turns per task")
    colors = ["tab:green" if t["resolved"] else "tab:red" for t in tasks]
    axes[1][0].scatter([t["wall_s"] for t in tasks], [t["completion_tokens"] for t in tasks], c=colors, s=12)
    axes[1][0].set(xlabel="wall s", ylabel="completion tokens", title="cost per task (green: resolved)")
    stops = report["summary"]["stop_reasons"]
    axes[1][1].barh(list(stops), list(stops.values()), color="tab:gray")
    axes[1][1].set(xlabel="attempts", title="stop reasons")
    fig.suptitle(f"{report['suite']['name']} - {(report['policy'] or {}).get('spec')}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(report: dict[str, Any], folder: Path) -> list[Path]:
    """report.json, report.md and report.png in `folder`, each written atomically."""
    folder = Path(folder)
    _write(folder / "report.json", json.dumps(report, indent=1) + "\n")
    _write(folder / "report.md", markdown(report))
    png = folder / "report.png"
    plot(report, png.with_name("report.tmp.png"))
    os.replace(png.with_name("report.tmp.png"), png)
    return [folder / "report.json", folder / "report.md", png]


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A report.json; ValueError when the file is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable report ({err})") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise ValueError(f"{path}: not a {REPORT_FORMAT} report (format {data.get('format') if isinstance(data, dict) else None!r})")
    return data


def paired(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-task changes from run `a` to run `b` on the tasks both resolved-scored, and a paired
    bootstrap 95% interval of the change in resolved rate."""
    ra = {t["instance_id"]: t for t in a["tasks"] if t["resolved"] is not None}
    rb = {t["instance_id"]: t for t in b["tasks"] if t["resolved"] is not None}
    common = [i for i in ra if i in rb]
    deltas = [rb[i]["resolved"] - ra[i]["resolved"] for i in common]
    changes = [{"instance_id": i, "a": ra[i]["resolved"], "b": rb[i]["resolved"],
                "turns": [ra[i]["turns"], rb[i]["turns"]], "tokens": [ra[i]["completion_tokens"], rb[i]["completion_tokens"]]}
               for i in common if ra[i]["resolved"] != rb[i]["resolved"]]
    return {"common": len(common), "delta": _mean(deltas), "delta_ci95": bootstrap_ci(deltas),
            "fixed": [c for c in changes if c["b"] > c["a"]], "broken": [c for c in changes if c["b"] < c["a"]],
            "only_a": sorted(set(ra) - set(rb)), "only_b": sorted(set(rb) - set(ra))}


def compare(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Markdown: two reports' summaries side by side and the per-task changes from A to B."""
    if a["suite"]["name"] != b["suite"]["name"]:
        note = f"(different suites: {a['suite']['name']} and {b['suite']['name']}; per-task changes on shared ids)"
    else:
        note = f"suite {a['suite']['name']}"
    p = paired(a, b)
    rows = []
    for key in SUMMARY_KEYS:
        va, vb = a["summary"].get(key), b["summary"].get(key)
        delta = round(vb - va, 4) if isinstance(va, int | float) and isinstance(vb, int | float) else None
        rows.append([key, va, vb, delta])
    lines = [f"# A: {a['policy']['spec']}  vs  B: {b['policy']['spec']}", "", note, ""]
    lines += _table(["metric", "A", "B", "B - A"], rows)
    lines += ["", f"Paired over {p['common']} tasks: resolved B - A = {_cell(p['delta'])}, "
              f"95% bootstrap interval {p['delta_ci95']}; {len(p['fixed'])} fixed, {len(p['broken'])} broken.", ""]
    for title, items in (("fixed (unresolved in A, resolved in B)", p["fixed"]),
                         ("broken (resolved in A, unresolved in B)", p["broken"])):
        lines += [f"## {title}", ""]
        lines += _table(["task", "A", "B", "turns A/B", "tokens A/B"],
                        [[c["instance_id"], c["a"], c["b"], "/".join(map(_cell, c["turns"])),
                          "/".join(map(_cell, c["tokens"]))] for c in items]) if items else ["none"]
        lines.append("")
    if p["only_a"] or p["only_b"]:
        lines += [f"only in A: {len(p['only_a'])} tasks; only in B: {len(p['only_b'])} tasks", ""]
    return "\n".join(lines)
