"""Shared helpers of the learner tests: a tiny random-init Qwen3 model directory with its own
word-level tokenizer (built here, nothing downloaded) and synthetic multi-turn trajectories."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from wmrl.rollout import EXECUTED, Trajectory, Turn

VOCAB = 300
PAD, EOS = 0, 1
REPO = Path(__file__).resolve().parents[1]
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(script: Path, args: list[str], ranks: int = 1, srun: bool = False,
              inherited: dict[str, str] | None = None) -> None:
    """``script ARGS`` as ``ranks`` processes: plain ``python`` (one), ``torchrun`` over gloo, or ``srun``."""
    # This pytest process may hold a learner of its own: its launch variables must not leak
    # (``inherited``: the ones a test hands down on purpose).
    env = {**{k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}, **(inherited or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    launcher = [sys.executable]
    if srun:  # Slurm starts the ranks; the learner finds them through submitit's environment
        launcher = ["srun", f"--ntasks={ranks}", "--cpus-per-task=1", "--time=15", "--job-name=wmrl-learner-test",
                    *launcher]
    elif ranks > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                     f"--master_port={_free_port()}"]
    proc = subprocess.run([*launcher, str(script), *args], env=env, capture_output=True, text=True, timeout=800,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def tiny_model_dir(path: Path, seed: int = 0) -> Path:
    """A random-init ``Qwen3ForCausalLM`` (vocab 300, 2 layers) + tokenizer saved at ``path``."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=1024,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None, tie_word_embeddings=False,
    )
    Qwen3ForCausalLM(config).save_pretrained(path)
    _save_tokenizer(path)
    return path


def tiny_qwen3_5_dir(path: Path, seed: int = 0) -> Path:
    """A random-init ``Qwen3_5ForCausalLM`` (``qwen3_5_text``: the 4B/9B's hybrid architecture at tiny
    dimensions, one Gated DeltaNet ``linear_attention`` layer and one ``full_attention`` layer) + tokenizer."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(seed)
    config = Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel_dim=4, max_position_embeddings=1024,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None, tie_word_embeddings=False,
    )
    Qwen3_5ForCausalLM(config).save_pretrained(path)
    _save_tokenizer(path)
    return path


def _save_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="w0", eos_token="w1", unk_token="w2").save_pretrained(path)


def make_groups(
    n_groups: int, n: int, seed: int = 0, turns: int = 2, prompt_len: int = 12, gen_len: tuple[int, int] = (3, 14)
) -> list[list[Trajectory]]:
    """Groups of multi-turn trajectories with random tokens and varied generated lengths."""
    rng = np.random.default_rng(seed)
    groups = []
    for k in range(n_groups):
        group = []
        for i in range(n):
            traj = Trajectory(task_id=f"task{k}", group=k, index=i, role=EXECUTED)
            for t in range(turns):
                plen = prompt_len if t == 0 else int(rng.integers(2, 6))
                glen = int(rng.integers(*gen_len))
                traj.turns.append(Turn(
                    prompt_ids=rng.integers(3, VOCAB, plen).tolist(),
                    generated_ids=rng.integers(3, VOCAB, glen).tolist(),
                    logprobs=(-rng.uniform(1.0, 8.0, glen)).tolist(),
                    text="", code=None, parse_error=None,
                ))
            group.append(traj)
        groups.append(group)
    return groups


def advantages_of(groups: list[list[Trajectory]], seed: int = 1) -> np.ndarray:
    """Group-centred advantages A_i = r_i - mean_j r_j of random scores in [0, 1]."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(0.0, 1.0, (len(groups), len(groups[0])))
    return r - r.mean(axis=1, keepdims=True)


def with_policy_logprobs(groups: list[list[Trajectory]], model_path: Path) -> None:
    """Replace the sampler log-probs by the model's own (what an exact on-policy sampler returns)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32).eval()
    for group in groups:
        for traj in group:
            ids = torch.tensor([traj.token_ids()])
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            token_lp = logp.gather(-1, ids[0, 1:, None])[:, 0].tolist()
            pos = 0
            for turn in traj.turns:
                pos += len(turn.prompt_ids)
                turn.logprobs = token_lp[pos - 1 : pos - 1 + len(turn.generated_ids)]
                pos += len(turn.generated_ids)


def parameters(learner) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in learner.named_parameters()}
