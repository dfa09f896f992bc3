"""Can the tiny world model learn to rank solutions that run? A diagnosis for issue 22.

    python benchmarks/wm_quality_finetune.py [--model DIR] [--epochs 8] [--lr 1e-3] [--probe-every 2]

The quality check's answer carries the predicted Position Score (``confidence``). This script asks two
questions of the references of the built-in pool (every one ran once when the pool was built, so each has
a real score; held out as ``wmrl sft`` holds them out: held-out tasks, and 25% of the training tasks'
references by a hash of their name):

1. Is the ranking information in the code at all? A bag of identifiers and numbers (TF-IDF) with a ridge
   regression, fitted on the non-held-out references, scored on the held-out ones (seconds, no LLM).
2. Does the LM learn it? The SFT'd model (the default world model) trained further on the quality
   answers of the non-held-out references alone, with the run's own prompts, ``--epochs`` passes; every
   ``--probe-every`` epochs the quality answer is read on a fixed sample of held-out and of training
   references in two ways: the greedy-equivalent (the most probable value) and the expected value of the
   score over the 101 values 0.00..1.00 (each answer's log-probability, normalised over the 101: the
   G-Eval reading, continuous even where the most probable value is one constant).

Writes results/world_model/quality_finetune.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from wmrl.config import load_config
from wmrl.configs import TINY_CONFIG
from wmrl.io import atomic_write_json, atomic_write_text
from wmrl.world_model.prompts import QUALITY

OUT = Path(__file__).resolve().parents[1] / "results" / "world_model"
# The quality answer up to its score, as wmrl/world_model_data/targets.py writes it.
HEAD = '{"reason": "Predicted leaderboard position of this approach.", "verdict": "pass", "confidence": '
GRID = [round(i / 100, 2) for i in range(101)]


def correlations(pred: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    constant = float(np.std(pred)) == 0.0  # one value for every reference: no correlation (None)
    return {"n": len(real), "pearson": None if constant else float(stats.pearsonr(pred, real)[0]),
            "spearman": None if constant else float(stats.spearmanr(pred, real)[0]),
            "std": float(np.std(pred)), "distinct": len(set(np.round(pred, 4)))}


def code_vectorizer() -> Any:
    """TF-IDF over a program's identifiers and numbers."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from wmrl.world_model.memory import IDENTIFIER_TOKENS

    return TfidfVectorizer(token_pattern=IDENTIFIER_TOKENS, sublinear_tf=True)


def code_regression(train: list[Any], heldout: list[Any]) -> dict[str, float]:
    """TF-IDF of identifiers and numbers + ridge: the ranking information the code carries."""
    from sklearn.linear_model import Ridge

    vectorizer = code_vectorizer()
    x_train = vectorizer.fit_transform([f"{v.task_id} {v.code}" for v in train])
    ridge = Ridge(alpha=1.0).fit(x_train, [v.reference_score for v in train])
    pred = ridge.predict(vectorizer.transform([f"{v.task_id} {v.code}" for v in heldout]))
    return correlations(pred, np.array([v.reference_score for v in heldout]))


def nearest_executed(train: list[Any], queries: list[Any]) -> dict[str, tuple[float, float] | None]:
    """For each query, the real score and TF-IDF cosine similarity of the most similar training reference
    of its task (never itself); None where its task has none (held-out tasks)."""
    from sklearn.neighbors import NearestNeighbors

    vectorizer = code_vectorizer()
    vectorizer.fit([v.code for v in train])
    out: dict[str, tuple[float, float] | None] = {}
    for v in queries:
        same_task = [u for u in train if u.task_id == v.task_id and u.key != v.key]
        if not same_task:
            out[v.key] = None
            continue
        index = NearestNeighbors(n_neighbors=1, metric="cosine").fit(vectorizer.transform([u.code for u in same_task]))
        distance, nearest = index.kneighbors(vectorizer.transform([v.code]))
        out[v.key] = (same_task[int(nearest[0][0])].reference_score, 1.0 - float(distance[0][0]))
    return out


def nearest_reference(train: list[Any], heldout: list[Any]) -> dict[str, Any]:
    """The real score of the most similar training reference of the same task: what a world model shown
    its task's nearest executed solution could copy (held-out references of the training tasks only)."""
    nearest = nearest_executed(train, heldout)
    pairs = [(nearest[v.key][0], v.reference_score) for v in heldout if nearest[v.key] is not None]
    return correlations(np.array([p for p, _ in pairs]), np.array([r for _, r in pairs]))


def known_result(found: tuple[float, float] | None) -> str:
    """The line --nearest adds to the task overview."""
    if found is None:
        return "\n\nKNOWN RESULT: no solution of this task has been executed yet."
    return (f"\n\nKNOWN RESULT: the most similar solution already executed for this task scored Position "
            f"Score {found[0]:.2f} (code similarity {found[1]:.2f}).")


class QualityReader:
    """The quality answer's score read from the model: log P(answer with v | prompt) for v in GRID."""

    def __init__(self, tokenizer: Any) -> None:
        full = [tokenizer.encode(HEAD + json.dumps(v) + ",", add_special_tokens=False) for v in GRID]
        shared = 0  # the answer's tokens before the number (BPE merges the number with what follows)
        while all(len(f) > shared and f[shared] == full[0][shared] for f in full):
            shared += 1
        self.head = full[0][:shared]
        width = max(len(f) - shared for f in full)
        self.ids = torch.zeros((len(GRID), width), dtype=torch.long)
        self.mask = torch.zeros((len(GRID), width))
        for j, f in enumerate(full):
            self.ids[j, :len(f) - shared] = torch.tensor(f[shared:])
            self.mask[j, :len(f) - shared] = 1

    @torch.no_grad()
    def read(self, model: Any, prompts: list[list[int]], max_context: int) -> tuple[np.ndarray, np.ndarray]:
        """(expected value, most probable value) per prompt; one prefill each, the 101 answers batched."""
        values = torch.tensor(GRID)
        expected, mode = [], []
        n = len(GRID)
        for prompt in prompts:
            ids = (list(prompt) + self.head)[-max_context:]
            out = model(torch.tensor([ids]), use_cache=True)
            cache = out.past_key_values
            cache.batch_repeat_interleave(n)
            first = torch.log_softmax(out.logits[0, -1], -1)[self.ids[:, 0]]
            attention = torch.cat([torch.ones((n, len(ids))), self.mask], 1).long()
            logits = model(self.ids, attention_mask=attention, past_key_values=cache, use_cache=False).logits
            rest = torch.log_softmax(logits[:, :-1], -1).gather(-1, self.ids[:, 1:, None])[..., 0]
            total = first + (rest * self.mask[:, 1:]).sum(1)
            expected.append(float((torch.softmax(total, 0) * values).sum()))
            mode.append(GRID[int(total.argmax())])
        return np.array(expected), np.array(mode)


def main() -> None:
    from transformers import AutoModelForCausalLM

    from wmrl.agent.chat import ChatTokens
    from wmrl.models.loading import load_tokenizer
    from wmrl.sft.data import run_context
    from wmrl.sft.pipeline import initial_policy_path
    from wmrl.tasks.overview import task_overview
    from wmrl.tasks.pool import ensure_pool, load_pool
    from wmrl.world_model.prompts import check_messages, get_checks, simulator_system_prompt
    from wmrl.world_model_data.variants import all_references

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="", help="HF model dir (default: the tiny default's SFT, built)")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--probe-every", type=int, default=2)
    ap.add_argument("--probe-n", type=int, default=120, help="references read per split at each probe")
    ap.add_argument("--nearest", action="store_true",
                    help="show each prompt the real score of its task's most similar training reference (never "
                         "itself), and probe the held-out references of the training tasks only")
    ap.add_argument("--out", default=str(OUT / "quality_finetune"))
    args = ap.parse_args()

    cfg = load_config(TINY_CONFIG)
    wm = cfg.world_model
    random.seed(0)
    torch.manual_seed(0)
    model_dir = Path(args.model) if args.model else initial_policy_path(cfg, progress=False)
    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tasks = load_pool(ensure_pool(cfg.tasks, progress=False))
    overviews = {t.task_id: task_overview(t) for t in tasks}
    _, simulator, _ = run_context(cfg)
    system = simulator_system_prompt(simulator, wm.prompt_style)
    chat, quality = ChatTokens(tokenizer), get_checks([QUALITY])[0]
    references = all_references(tasks, wm.heldout_fraction)
    train = [v for v in references if not v.heldout]
    heldout = [v for v in references if v.heldout]

    nearest = nearest_executed(train, references) if args.nearest else {}
    if args.nearest:  # only a task with executed solutions has a result to show
        heldout = [v for v in heldout if nearest[v.key] is not None]

    def prompt(v: Any) -> list[int]:
        overview = overviews[v.task_id] + (known_result(nearest[v.key]) if args.nearest else "")
        return chat.first_prompt(check_messages(system, quality, overview, v.code, wm.max_overview_chars))

    report: dict[str, Any] = {"model": str(model_dir), "train_references": len(train),
                              "heldout_references": len(heldout), "nearest": args.nearest, "epochs": args.epochs, "lr": args.lr,
                              "batch": args.batch, "host": platform.node(),
                              "code_regression_heldout": code_regression(train, heldout),
                              "nearest_reference_heldout": nearest_reference(train, heldout), "probes": []}
    print(f"TF-IDF + ridge on held-out references: {report['code_regression_heldout']}; the nearest training "
          f"reference's score: {report['nearest_reference_heldout']}", flush=True)

    rng = np.random.default_rng(0)
    samples = {name: [group[i] for i in sorted(rng.choice(len(group), min(args.probe_n, len(group)), replace=False))]
               for name, group in (("heldout", heldout), ("train", train))}
    probe_prompts = {name: [prompt(v) for v in group] for name, group in samples.items()}
    reader = QualityReader(tokenizer)
    context = int(cfg.sft.pack_tokens)

    def probe(epoch: int, loss: float | None) -> None:
        model.eval()
        row: dict[str, Any] = {"epoch": epoch, "loss": loss}
        for name, group in samples.items():
            expected, mode = reader.read(model, probe_prompts[name], context)
            real = np.array([v.reference_score for v in group])
            row[name] = {"expected": correlations(expected, real), "most_probable": correlations(mode, real)}
        report["probes"].append(row)
        print(json.dumps(row), flush=True)

    end = [tokenizer.eos_token_id]
    examples = [(prompt(v), tokenizer.encode(HEAD + json.dumps(round(v.reference_score, 2))
                                             + ', "error_type": null, "error_line": null, "env_feedback": ""}',
                                             add_special_tokens=False) + end) for v in train]
    probe(0, None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    pad = tokenizer.pad_token_id or 0
    started = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        model.train()
        random.shuffle(examples)
        losses = []
        for b in range(0, len(examples), args.batch):
            batch = examples[b:b + args.batch]
            width = max(len(p) + len(t) for p, t in batch)
            ids = torch.full((len(batch), width), pad)
            labels = torch.full((len(batch), width), -100)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for j, (p, t) in enumerate(batch):
                ids[j, :len(p) + len(t)] = torch.tensor(p + t)
                attention[j, :len(p) + len(t)] = 1
                labels[j, len(p):len(p) + len(t)] = torch.tensor(t)
            loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        print(f"epoch {epoch}/{args.epochs}: loss {np.mean(losses):.3f}, "
              f"{(time.monotonic() - started) / 60:.1f} min", flush=True)
        if epoch % args.probe_every == 0 or epoch == args.epochs:
            probe(epoch, float(np.mean(losses)))
    report["minutes"] = round((time.monotonic() - started) / 60, 1)
    out = Path(args.out)
    atomic_write_json(out.with_suffix(".json"), report)
    atomic_write_text(out.with_suffix(".md"), render(report))
    print(f"wrote {out.with_suffix('.md')}")


def fmt(x: float | None) -> str:
    return "n/a (one value)" if x is None else f"{x:.3f}"


def render(report: dict[str, Any]) -> str:
    reg = report["code_regression_heldout"]
    lines = [
        "# Does the tiny world model learn to rank? (quality check, references of known score)",
        "",
        (f"Model: `{report['model']}` trained further on the quality answers of the {report['train_references']} "
        f"non-held-out references of the training tasks, {report['epochs']} epochs, AdamW lr {report['lr']}, "
        f"batch {report['batch']}; probed on a fixed sample of the {report['heldout_references']} held-out "
        f"references and of the training ones. {report.get('minutes', '?')} min on `{report['host']}`."),
        "",
        *([] if not report.get("nearest") else [
            ("With `--nearest`: each prompt's task overview ends with the real Position Score of the most similar "
             "training reference of its task (never itself) and their code similarity, and the held-out "
             "references probed are those of the training tasks (a held-out task has no executed solution)."),
            ""]),
        f"The information is in the code: TF-IDF of identifiers and numbers + ridge, fitted on the same "
        f"training references, on the held-out ones: Pearson {reg['pearson']:.3f}, Spearman {reg['spearman']:.3f} "
        f"(n={reg['n']})."
        + ("" if "nearest_reference_heldout" not in report else
           " The real score of the most similar training reference of the same task (TF-IDF cosine; held-out "
           f"references of the training tasks only): Spearman {report['nearest_reference_heldout']['spearman']:.3f}, "
           f"Pearson {report['nearest_reference_heldout']['pearson']:.3f} (n={report['nearest_reference_heldout']['n']})."),
        "",
        ("| epoch | loss | held-out Spearman (expected value) | held-out Pearson (expected value) | "
        "spread of the expected value (std) | held-out Spearman (most probable value) [distinct] | "
        "training Spearman (expected value) |"),
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["probes"]:
        h, t = row["heldout"], row["train"]
        loss = "" if row["loss"] is None else f"{row['loss']:.3f}"
        lines.append(f"| {row['epoch']} | {loss} | {fmt(h['expected']['spearman'])} | {fmt(h['expected']['pearson'])} | "
                     f"{h['expected']['std']:.3f} | {fmt(h['most_probable']['spearman'])} "
                     f"[{h['most_probable']['distinct']}] | {fmt(t['expected']['spearman'])} |")
    flags = " ".join(f"--{k} {report[k]}" for k in ("epochs", "lr")) + (" --nearest" if report.get("nearest") else "")
    lines += ["", f"Command: `python benchmarks/wm_quality_finetune.py {flags}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
