"""What a run reports: one JSON line of metrics per update (`metrics.jsonl`, append-only), the same
scalars as TensorBoard events (`tb/`), and at the end a PNG of the curves that matter.

    log = RunLog(run_dir, start_step=resumed_step)    # TensorBoard drops events past a resume
    log.write(step, {"reward": 0.5, ...})
    plot_run(run_dir / "metrics.jsonl", run_dir / "plot.png")
    tensorboard --logdir runs/                        # the live view

A resumed run appends the steps it redoes again; readers keep the last record of each step.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

PANELS = (
    ("loss", ("sft_loss", "pg_loss"), "per loss token"),
    ("reward", ("reward",), "mean reward"),
    ("clipping", ("clip_low", "clip_high"), "fraction of policy tokens"),
    ("importance weights", ("is_weight", "is_truncated", "mismatch_abs"), "per token"),
    ("response length", ("response_tokens",), "policy tokens per sample"),
    ("tool calls", ("tool_calls", "turns"), "per rollout"),
    ("parallel calls", ("parallel_share",), "share of tool calls"),
)
"""The final plot: (title, metric names, y label) per panel."""


class RunLog:
    def __init__(self, run_dir: Path, start_step: int = 0, tensorboard: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(run_dir / "tb"), purge_step=start_step or None)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: v for k, v in metrics.items() if math.isfinite(v)}}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.writer is not None:
            for name, value in record.items():
                if name != "step":
                    self.writer.add_scalar(name, value, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(path: Path) -> list[dict]:
    """The last record of every step, in step order (a torn last line is ignored)."""
    by_step: dict[int, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            by_step[record["step"]] = record
    return [by_step[s] for s in sorted(by_step)]


def plot_run(metrics_path: Path, out: Path, title: str = "") -> Path:
    """The run's curves, one panel per PANELS entry (a metric never logged leaves its panel
    empty with a note). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    columns = math.ceil(len(PANELS) / 2)
    fig, axes = plt.subplots(2, columns, figsize=(4.3 * columns, 6.5), constrained_layout=True)
    for ax in axes.flat[len(PANELS):]:
        ax.set_visible(False)
    for ax, (name, keys, ylabel) in zip(axes.flat, PANELS):
        drawn = False
        for key in keys:
            points = [(r["step"], r[key]) for r in records if key in r]
            if points:
                ax.plot(*zip(*points), marker=".", label=key)
                drawn = True
        if drawn:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(name)
        ax.set_xlabel("update")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)
    return out
