"""Rollout records: one step's trajectories in ``RUN_DIR/rollouts/step-NNNNNN.jsonl.gz``.

Everything the learner, the calibration and the cost accounting need, and what a person needs to read
what the agent wrote and what the world model said: per trajectory its task, group, role, score, r,
r_hat, kept turn and final code, seconds and tokens per phase; per turn the prompt / generated ids,
log-probs (the loss mask is implied: 1 on generated ids), the reply, the parsed code or the parse
error, the feedback with its per-check verdicts and raw world-model texts.

Compact: the first line holds each task's first-turn prompt ids once (every trajectory of a task
starts with the same rendered prompt, by far the longest part), turns refer to it; log-probs keep 6
decimals; the file is gzipped. Written atomically, so a step rewritten after a resume replaces the
old file and a reader never sees half of one.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wmrl.io import atomic_write_bytes
from wmrl.rollout import EXECUTED, Feedback, Groups, Trajectory, Turn

FORMAT = "wmrl-rollouts-v1"


def rollout_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "rollouts" / f"step-{step:06d}.jsonl.gz"


def _turn(turn: Turn, shared: list[int] | None) -> dict[str, Any]:
    fb = turn.feedback
    return {
        "prompt_ids": "first_prompt" if shared is not None and turn.prompt_ids == shared else turn.prompt_ids,
        "generated_ids": turn.generated_ids,
        "logprobs": [round(float(x), 6) for x in turn.logprobs],
        "text": turn.text,
        "code": turn.code,
        "parse_error": turn.parse_error,
        "seconds": turn.seconds,
        "feedback": None if fb is None else {
            "key": fb.key, "text": fb.text, "score": fb.score, "valid": fb.valid, "status": fb.status,
            "seconds": fb.seconds, "tokens": fb.tokens, "details": fb.details, "cpu_seconds": fb.cpu_seconds,
        },
    }


def _trajectory(step: int, t: Trajectory, shared: list[int] | None) -> dict[str, Any]:
    return {
        "step": step, "task_id": t.task_id, "group": t.group, "index": t.index, "role": t.role,
        "score": t.score, "r": t.r, "r_hat": t.r_hat, "kept_turn": t.kept_turn, "final_code": t.final_code,
        "seconds": t.seconds, "tokens": t.tokens, "turns": [_turn(turn, shared) for turn in t.turns],
    }


def write_rollouts(run_dir: Path, step: int, groups: Groups, extra: dict[str, Any] | None = None) -> Path:
    """Write one step's groups (atomically); ``extra`` (e.g. the roles, rho) goes into the header."""
    firsts: dict[str, list[int]] = {}
    for t in (t for group in groups for t in group):
        if t.turns and t.task_id not in firsts:
            firsts[t.task_id] = t.turns[0].prompt_ids
    header = {"format": FORMAT, "step": step, "first_prompts": firsts, "extra": extra or {}}
    lines = [json.dumps(header)]
    lines += [json.dumps(_trajectory(step, t, firsts.get(t.task_id))) for group in groups for t in group]
    path = rollout_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same step gives the same bytes (reproducible runs compare files).
    atomic_write_bytes(path, gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), mtime=0))
    return path


def _read_turn(data: dict[str, Any], first: list[int]) -> Turn:
    fb = data["feedback"]
    feedback = None if fb is None else Feedback(fb["key"], fb["text"], fb["score"], fb["valid"], fb["status"],
                                                fb["seconds"], fb["tokens"], fb["details"],
                                                fb.get("cpu_seconds", 0.0))  # absent before round 22
    prompt = first if data["prompt_ids"] == "first_prompt" else data["prompt_ids"]
    return Turn(list(prompt), data["generated_ids"], data["logprobs"], data["text"], data["code"],
                data["parse_error"], feedback, data["seconds"])


def read_rollouts(run_dir: Path, step: int) -> tuple[dict[str, Any], Groups]:
    """The header and the groups of one step, as written (``payload`` is not stored)."""
    path = rollout_path(run_dir, step)
    if not path.is_file():
        raise FileNotFoundError(f"no rollouts for step {step}: {path} does not exist")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        header = json.loads(f.readline())
        if header.get("format") != FORMAT:
            raise ValueError(f"{path}: not a rollouts file of format {FORMAT} (found {header.get('format')!r})")
        groups: dict[int, list[Trajectory]] = {}
        for line in f:
            d = json.loads(line)
            first = header["first_prompts"].get(d["task_id"], [])
            # r and r_hat are written for a reader's eyes; the record's own are score and, on an anchor
            # trajectory, r_hat (its pair)
            pair = d["r_hat"] if d["role"] == EXECUTED else None
            t = Trajectory(d["task_id"], d["group"], d["index"], d["role"],
                           [_read_turn(x, first) for x in d["turns"]], d["score"], d["kept_turn"], d["final_code"],
                           pair, None, d["seconds"], d["tokens"])
            groups.setdefault(t.group, []).append(t)
    return header, [groups[g] for g in sorted(groups)]


def steps_written(run_dir: Path) -> list[int]:
    return sorted(int(p.name[5:11]) for p in (Path(run_dir) / "rollouts").glob("step-*.jsonl.gz"))


def _cut(text: str, limit: int | None) -> str:
    text = (text or "").rstrip()
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit} more characters; --full shows all]"


def _verdict_lines(details: dict[str, Any]) -> Iterable[str]:
    for v in details.get("verdicts", []):
        where = f" line {v['error_line']}" if v.get("error_line") else ""
        error = f" {v['error_type']}{where}" if v.get("error_type") else ""
        flag = f" [{v['status']}: {', '.join(v['problems'])}]" if v.get("status") != "ok" else ""
        source = " (pre-check)" if v.get("source") == "precheck" else ""
        yield f"      {v['check']:<14} {v['verdict']:<4} {v['confidence']:.2f}{error}{source}{flag}"


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def format_rollouts(header: dict[str, Any], groups: Groups, limit: int | None = 600,
                    group: int | None = None, trajectory: int | None = None) -> str:
    """What the agent wrote and what the environment (or world model) answered, turn by turn."""
    out = [f"step {header['step']}: {len(groups)} groups, {sum(len(g) for g in groups)} trajectories"]
    for g in groups:
        for t in g:
            if (group is not None and t.group != group) or (trajectory is not None and t.index != trajectory):
                continue
            out.append(f"\n=== group {t.group} trajectory {t.index} | {t.task_id} | {t.role} | score {_score(t.score)}"
                       f" (r {_score(t.r)}, r_hat {_score(t.r_hat)}) | kept turn {t.kept_turn} ===")
            for k, turn in enumerate(t.turns):
                parsed = "parsed" if turn.code is not None else f"NOT RUN ({turn.parse_error})"
                out.append(f"--- turn {k}: {len(turn.generated_ids)} tokens generated, {parsed}")
                out.append(_cut(turn.text, limit))
                fb = turn.feedback
                if fb is None:
                    continue
                out.append(f"  >> feedback: status {fb.status}, score {_score(fb.score)}, valid {fb.valid}, "
                           f"{fb.seconds:.1f} s, {fb.tokens} tokens")
                out.append("\n".join("     " + line for line in _cut(fb.text, limit).splitlines()))
                out.extend(_verdict_lines(fb.details))
    return "\n".join(out) + "\n"
