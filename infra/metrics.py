"""A run's metrics: phase timings (Timer), metrics.jsonl and its TensorBoard / W&B sinks
(MetricsLog), and the progress bars (progress)."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Sequence

from tqdm import tqdm

from infra.model import UserError


class Timer:
    """Accumulates seconds per phase: `with timer("generate"): ...`; a phase entered twice in
    a step (dynamic sampling's extra rounds) adds up. pop() -> {"time/generate": s, ...}.
    clock: seconds as a float (tests pass their own)."""

    def __init__(self, clock=time.perf_counter):
        self.seconds: dict[str, float] = {}
        self.clock = clock

    def __call__(self, name):
        timer = self

        class _Ctx:
            def __enter__(self):
                self.t = timer.clock()

            def __exit__(self, *a):
                timer.seconds[name] = timer.seconds.get(name, 0.0) + timer.clock() - self.t
        return _Ctx()

    def wrap(self, name, fn):
        """fn with each call's seconds added to phase `name` (for phases that interleave, as
        AT-GRPO's turns alternate generation and the sandbox); fn's name kept (TRL logs a
        reward function under its name)."""
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with self(name):
                return fn(*args, **kwargs)
        return timed

    def pop(self) -> dict[str, float]:
        out, self.seconds = {f"time/{k}": round(v, 3) for k, v in self.seconds.items()}, {}
        return out


REPORT_TO = ("tensorboard", "wandb")


class MetricsLog:
    """Rank 0 appends one JSON object a line to <out>/metrics.jsonl and, with report_to, sends
    the numbers to TensorBoard (<out>/tensorboard) and/or Weights & Biases (offline unless
    WANDB_MODE says otherwise; `wandb sync <out>/wandb/...` uploads later). Scalars are named
    <phase>/<key> (eval: eval/<key>, at the RL step it was taken after)."""

    def __init__(self, out_dir: str, main: bool, report_to: Sequence[str] = (),
                 config: dict | None = None, name: str = "run"):
        self.path = os.path.join(out_dir, "metrics.jsonl") if main else None
        self.sinks = [make_sink(kind, out_dir, config or {}, name) for kind in report_to] \
            if main else []
        self.rl_step = 0

    def __call__(self, row: dict):
        if self.path:
            with open(self.path, "a") as f:
                # 6 significant digits: a warm-up lr of 1e-7 must not log as 0.0
                f.write(json.dumps({k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                                    for k, v in row.items()}) + "\n")
        if row.get("phase") == "rl":
            self.rl_step = row["step"]
        step = row["step"] if "step" in row and row.get("phase") != "eval" else self.rl_step
        phase = row.get("phase", "metrics")
        scalars = {f"{phase}/{k}": float(v) for k, v in row.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        for sink in self.sinks:
            sink.log(scalars, step)

    def text(self, tag: str, text: str, step: int) -> None:
        """Send a block of text (a step's samples, infra.samples.format_records) to the
        sinks at `step`: TensorBoard's text tab, a W&B HTML panel. metrics.jsonl keeps
        numbers only (the samples have their own file)."""
        for sink in self.sinks:
            sink.text(tag, text, step)

    def forget_after(self, step: int, phases: Sequence[str]) -> int:
        """On resume from a checkpoint at `step`: drop the rows of `phases` past it (and the
        after-RL evaluations), which the resumed run logs again, so every step has one row.
        Returns how many rows were dropped. A row that does not parse (cut off by a kill or a
        full disk mid-append) is dropped too, and counted in one line on stderr. The log is
        rewritten as a new file that replaces the old one whole (os.replace): a run stopped
        mid-rewrite leaves the old log, never a cut one."""
        if not self.path or not os.path.isfile(self.path):
            return 0
        with open(self.path, encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.strip()]
        rows = [_row(line) for line in lines]
        keep = [line if line.endswith("\n") else line + "\n"
                for line, row in zip(lines, rows) if row is not None
                and not redone(row, step, phases)]
        cut = sum(row is None for row in rows)
        if cut:
            print(f"[metrics] {self.path}: dropped {cut} row(s) that do not parse (cut off "
                  "when a run stopped mid-write)", file=sys.stderr, flush=True)
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(keep)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        return len(lines) - len(keep) - cut

    def close(self):
        for sink in self.sinks:
            sink.close()


def _row(line: str) -> dict | None:
    """A metrics.jsonl line as its row; None when it is not a JSON object (cut off)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def redone(row: dict, step: int, phases: Sequence[str]) -> bool:
    """Whether a run resumed at `step` logs this metrics row again."""
    return row.get("phase") in phases and (
        row.get("step", 0) > step or str(row.get("when", "")).endswith("after_rl"))


class TensorBoardSink:
    def __init__(self, out_dir: str):
        try:
            from torch.utils.tensorboard import SummaryWriter  # optional: tensorboard
        except ImportError:
            raise UserError("--report-to tensorboard needs the tensorboard package: "
                             "pip install tensorboard (or leave the flag out).") from None
        self.writer = SummaryWriter(os.path.join(out_dir, "tensorboard"))

    def log(self, scalars: dict, step: int):
        for tag, v in scalars.items():
            self.writer.add_scalar(tag, v, step)
        self.writer.flush()

    def text(self, tag: str, text: str, step: int):
        # TensorBoard renders markdown: four spaces keep the code's layout
        self.writer.add_text(tag, "\n".join("    " + line for line in text.split("\n")), step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandbSink:
    def __init__(self, out_dir: str, config: dict, name: str):
        try:
            import wandb  # optional: wandb
        except ImportError:
            raise UserError("--report-to wandb needs the wandb package: pip install wandb "
                             "(or leave the flag out).") from None
        # wandb's own step must only grow, and SFT, RL and eval rows each count from 0: the
        # phase's step is logged as a metric instead.
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rl4code"), name=name,
                              dir=out_dir, config=config,
                              mode=os.environ.get("WANDB_MODE", "offline"))

    def log(self, scalars: dict, step: int):
        phase = next(iter(scalars), "x/").split("/")[0]
        self.run.log({**scalars, f"{phase}/step": step})

    def text(self, tag: str, text: str, step: int):
        import html

        import wandb
        self.run.log({tag: wandb.Html(f"<pre>{html.escape(text)}</pre>"),
                      f"{tag.split('/')[0]}/step": step})

    def close(self):
        self.run.finish()


def make_sink(kind: str, out_dir: str, config: dict, name: str):
    if kind == "tensorboard":
        return TensorBoardSink(out_dir)
    if kind == "wandb":
        return WandbSink(out_dir, config, name)
    raise UserError(f"--report-to {kind!r}: choose from {', '.join(REPORT_TO)}.")


class PlainProgress:
    """A progress bar for log files: a plain line at most every `every` seconds (and at the
    end) instead of tqdm's carriage-return redraws."""

    def __init__(self, iterable, desc: str, total: int, initial: int = 0, stream=None,
                 every: float = 30.0, clock=time.monotonic):
        self.iterable, self.desc, self.total, self.done = iterable, desc, total, initial
        self.stream, self.every, self.clock = stream or sys.stdout, every, clock
        self.postfix, self.start, self.last = "", clock(), None
        self.first = initial

    def set_postfix(self, **kw):
        self.postfix = " ".join(f"{k}={v}" for k, v in kw.items())

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.done += 1
            now = self.clock()
            if self.done == self.total or self.last is None or now - self.last >= self.every:
                self.last = now
                rate = (now - self.start) / max(self.done - self.first, 1)
                print(f"[{self.desc}] {self.done}/{self.total} {self.postfix} "
                      f"({rate:.1f} s/it)", file=self.stream, flush=True)


def progress(iterable, desc: str, total: int, initial: int = 0, enabled: bool = True,
             stream=None):
    """tqdm on a terminal, PlainProgress lines when the output goes to a file, nothing when
    disabled (ranks other than 0)."""
    stream = stream or sys.stderr
    if enabled and not stream.isatty():
        return PlainProgress(iterable, desc, total, initial, stream)
    return tqdm(iterable, desc=desc, total=total, initial=initial, disable=not enabled,
                dynamic_ncols=True, file=stream)


def report_to_list(spec: str) -> list[str]:
    """--report-to "tensorboard,wandb" -> ["tensorboard", "wandb"] ("none" / "" -> [])."""
    kinds = [k for k in spec.replace(" ", "").split(",") if k and k != "none"]
    for k in kinds:
        if k not in REPORT_TO:
            raise UserError(f"--report-to {k!r}: choose from none, {', '.join(REPORT_TO)}.")
    return kinds
