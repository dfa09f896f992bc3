"""Does a policy read the schema from its prompt? Per slot, how often its code names what the task names.

The task families (issue 35) vary the names a solution must take from the prompt: the training and test
files, the id column and the target. A policy that copies them writes runnable code on a held-out
instance; one that writes the names it saw most in SFT does not. For each task of a split, this draws the
policy's greedy first-turn reply to the same prompt SFT and the runs use, reads the four names out of the
code (the lines every family's reference writes: ``read_csv(os.path.join(DATA_DIR, "..."))`` twice,
``y_train = train["..."]``, ``test_ids = test["..."]``) and compares them with the task's own (read the
same way from its reference). Beside each slot: the share a policy would get by always writing the name
most frequent among the *training* tasks (what a policy that ignores the prompt can reach).

    python scripts/schema_copy.py MODEL_DIR configs/tiny-transfer.yaml [key=value ...] [--split heldout]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from wmrl.config import load_config
from wmrl.sft.data import SFTData, policy_examples, run_context
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import ensure_pool, load_pool

SLOTS = {
    "train_file": re.compile(r'train = pd\.read_csv\(os\.path\.join\(DATA_DIR, "([^"]+)"\)\)'),
    "test_file": re.compile(r'test = pd\.read_csv\(os\.path\.join\(DATA_DIR, "([^"]+)"\)\)'),
    "target": re.compile(r'y_train = train\["([^"]+)"\]'),
    "id_column": re.compile(r'test_ids = test\["([^"]+)"\]'),
}


def slots(code: str) -> dict[str, str | None]:
    return {name: (m.group(1) if (m := pattern.search(code)) else None) for name, pattern in SLOTS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--split", default="heldout", choices=("heldout", "train"))
    parser.add_argument("--tasks", type=int, default=0, help="the first N tasks of the split (0 = all)")
    parser.add_argument("--max-new-tokens", type=int, default=400)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    cfg = load_config(args.config, args.overrides)
    if cfg.tasks.families.schema != "literal":
        parser.error(f"tasks.families.schema is {cfg.tasks.families.schema!r}: the references read the names from "
                     "the data, so there is no name to copy; add tasks.families.schema=literal")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    pool = load_pool(ensure_pool(cfg.tasks, progress=False))
    tasks = [t for t in pool if t.split == args.split][: args.tasks or None]
    truth = {t.task_id: slots(t.reference_solutions()[0].code) for t in pool}
    majority = {name: Counter(truth[t.task_id][name] for t in pool if t.split == "train").most_common(1)[0][0]
                for name in SLOTS}
    data = SFTData([])
    agent_ctx, _, _ = run_context(cfg)
    policy_examples(tokenizer, tasks, {t.task_id: task_overview(t) for t in tasks}, agent_ctx,
                    cfg.agent.prompt_style, 1 << 20, data, 1)
    rows = []
    for task, example in zip(tasks, data.examples):
        with torch.no_grad():
            out = model.generate(torch.tensor([example.prompt_ids]), max_new_tokens=args.max_new_tokens,
                                 do_sample=False)
        written = slots(tokenizer.decode(out[0, len(example.prompt_ids):]))
        rows.append({"task_id": task.task_id, "truth": truth[task.task_id], "written": written})
    report = {"model": str(args.model), "split": args.split, "tasks": len(rows), "slots": {}}
    for name in SLOTS:
        report["slots"][name] = {
            "copied": sum(r["written"][name] == r["truth"][name] for r in rows) / len(rows),
            "majority_guess": sum(majority[name] == r["truth"][name] for r in rows) / len(rows),
            "missing": sum(r["written"][name] is None for r in rows) / len(rows),
        }
    report["rows"] = rows
    print(f"{args.split}, {len(rows)} tasks, greedy: share of replies whose code names the task's own ...")
    for name, s in report["slots"].items():
        print(f"  {name:10} {s['copied']:.2f}  (always the training tasks' most frequent name: "
              f"{s['majority_guess']:.2f}; slot not found in the reply: {s['missing']:.2f})")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
