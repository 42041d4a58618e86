"""A training loop written the way users write theirs (the fourth benchmark workload).

A small transformer encoder learns to classify synthetic token sequences. Plain PyTorch, none
of the reference trainer's care: PyTorch's default thread count whatever the CPU limit, no
checkpoint, no DECOR flags; progress goes through the two-line helper only::

    from decor_trainer import progress
    progress.step(samples=len(labels))  # after every optimizer step

``--threads N`` pins it to N threads (``torch.set_num_threads``), as some users write theirs:
a loop that cannot use more cores than that, whatever its limit (the benchmark's
``encoder-1t`` and ``encoder-2t``).

Run: ``python -m decor_trainer.encoder_loop [--epochs E --steps-per-epoch S] [--width W]``.
Without ``--epochs``/``--steps-per-epoch`` it trains the plan DECOR gives the trainer
(``DECOR_EPOCHS``, ``DECOR_STEPS_PER_EPOCH``), as a script configured from the job would.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decor_trainer import progress

CLASSES = 4  # a token's class is its id modulo CLASSES; a sequence's, its most frequent one


class EncoderClassifier(nn.Module):
    """Token and position embeddings, a transformer encoder, mean pooling, a linear head."""

    def __init__(self, vocab: int, seq_len: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq_len, width)
        layer = nn.TransformerEncoderLayer(
            d_model=width, nhead=heads, dim_feedforward=4 * width, dropout=0.1, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, tokens: Tensor) -> Tensor:
        where = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.encoder(self.tokens(tokens) + self.positions(where))
        return self.head(hidden.mean(dim=1))


def make_batch(
    generator: torch.Generator, batch: int, seq_len: int, vocab: int
) -> tuple[Tensor, Tensor]:
    tokens = torch.randint(vocab, (batch, seq_len), generator=generator)
    labels = F.one_hot(tokens % CLASSES, CLASSES).sum(dim=1).argmax(dim=1)
    return tokens, labels


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=_env_int("DECOR_EPOCHS") or 1)
    p.add_argument("--steps-per-epoch", type=int, default=_env_int("DECOR_STEPS_PER_EPOCH") or 100)
    p.add_argument("--width", type=int, default=64, help="model width (embedding size)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=0, help="pin to this many threads (0: PyTorch's default)"
    )
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error("--threads must be 0 (PyTorch's default) or more")
    if args.epochs < 1 or args.steps_per_epoch < 1:
        p.error("--epochs and --steps-per-epoch must be at least 1")
    if args.width % args.heads:
        p.error(f"--width {args.width} must be a multiple of --heads {args.heads}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = EncoderClassifier(args.vocab, args.seq_len, args.width, args.layers, args.heads)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    started = time.monotonic()
    for epoch in range(args.epochs):
        for _ in range(args.steps_per_epoch):
            tokens, labels = make_batch(generator, args.batch_size, args.seq_len, args.vocab)
            loss = F.cross_entropy(model(tokens), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            progress.step(samples=len(labels))
        progress.epoch()
        print(
            f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.3f} "
            f"({time.monotonic() - started:.1f}s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
