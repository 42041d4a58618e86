"""A plain PyTorch training loop that DECOR can run to a deadline (docs/contract.md).

What it does for DECOR, and nothing else:

* reports progress after every mini-batch (``decor_trainer.progress``): steps done out of
  the steps it plans, and samples;
* on SIGTERM finishes the current mini-batch, saves a checkpoint and exits 0; it also saves
  every ``--checkpoint-every`` steps, in case the process is killed outright;
* on start resumes from ``$DECOR_CHECKPOINT_DIR`` at the exact step: model, optimizer, RNG
  and the position in the data, so no step is repeated or lost.

It needs PyTorch and decor-trainer (``pip install ./trainer_image``, docs/contract.md#install).
Run it alone (``python3 examples/own-loop/train.py``) or as a job:
``decor run examples/own-loop/job.yaml --local``.
"""

import argparse
import os
import time

import torch
from decor_trainer import progress
from decor_trainer.checkpoint import (
    TrainingPosition,
    apply_checkpoint,
    checkpoint_path,
    read_checkpoint,
    restart_seconds,
    save_checkpoint,
    stop_on_signals,
)

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=8192, help="size of the (synthetic) data set")
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--hidden", type=int, default=512, help="width of the hidden layer")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--checkpoint-every", type=int, default=50, help="steps (0 = on SIGTERM only)")
parser.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
args = parser.parse_args()

# The data: fixed by the seed. Each epoch's order is a permutation drawn from (seed, epoch)
# alone, so the order of any epoch can be rebuilt after a restart.
torch.manual_seed(args.seed)
inputs = torch.randn(args.samples, 32)
labels = (inputs[:, :4].sum(dim=1) > 0).long()
steps_per_epoch = -(-args.samples // args.batch_size)  # the last batch of an epoch is smaller
epochs = int(os.environ.get("DECOR_EPOCHS", "3"))  # spec.epochs
steps_planned = epochs * steps_per_epoch  # spec.stepsPerEpoch should say the same


def batch_indices(step):
    """The sample indices of global step ``step`` (0-based)."""
    epoch, index = divmod(step, steps_per_epoch)
    order = torch.randperm(args.samples, generator=torch.Generator().manual_seed(args.seed + epoch))
    return order[index * args.batch_size : (index + 1) * args.batch_size]


model = torch.nn.Sequential(
    torch.nn.Linear(32, args.hidden),
    torch.nn.ReLU(),
    torch.nn.Dropout(0.1),
    torch.nn.Linear(args.hidden, args.hidden),
    torch.nn.ReLU(),
    torch.nn.Linear(args.hidden, 2),
)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

# Resume: DECOR names the directory; the checkpoint holds model, optimizer, RNG and position.
ckpt = checkpoint_path(os.environ.get("DECOR_CHECKPOINT_DIR", "checkpoints"))
saved = read_checkpoint(ckpt)
position = TrainingPosition()
if saved is not None:
    position = apply_checkpoint(saved, model=model, optimizer=optimizer)
    print(f"resumed from {ckpt} at step {position.step}/{steps_planned}", flush=True)

# Progress: the counters start where the checkpoint left them.
reporter = progress.init(
    steps_planned=steps_planned,
    epochs_planned=epochs,
    start_step=position.step,
    start_samples=position.samples,
    start_epoch=position.epoch,
)


def save():
    save_checkpoint(ckpt, model=model, optimizer=optimizer, position=position)


with stop_on_signals() as stop:  # SIGTERM sets stop.requested; the loop checks it
    for step in range(position.step, steps_planned):
        if stop.requested:
            break
        batch = batch_indices(step)
        loss = torch.nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        position = TrainingPosition(
            step=step + 1,
            epoch=(step + 1) // steps_per_epoch,
            samples=position.samples + len(batch),
        )
        progress.step(samples=len(batch))
        if (step + 1) % steps_per_epoch == 0:
            progress.epoch()
        if saved is not None:  # the first step after a resume: report what the restart cost
            if reporter is not None:
                reporter.restart_done(restart_seconds(saved, time.time()) or 0.0)
            saved = None
        if args.log_every and (step + 1) % args.log_every == 0:
            print(f"step {step + 1}/{steps_planned} loss {loss.item():.6f}", flush=True)
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
            save()
    save()  # on SIGTERM, and at the end (a rerun of a finished job then does nothing)

if reporter is not None:
    done = reporter.snapshot()
    print(
        f"{'stopped' if stop.requested else 'finished'}: {done.steps}/{done.steps_planned} steps,"
        f" {done.samples} samples, restart {done.restart_s:.3f} s",
        flush=True,
    )
