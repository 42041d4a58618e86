"""Lightning under DECOR (docs/contract.md, "Lightning").

* progress: ``DecorLightningCallback`` reports optimizer steps (Lightning's global step) out
  of ``max_epochs x batches per epoch / accumulate_grad_batches``, and ``batch x accumulation``
  samples per step (one process);
* SIGTERM: ``SaveAndStop`` saves ``last.ckpt`` after the current optimizer step and stops;
  the script then exits 0;
* resume: a restart passes ``$DECOR_CHECKPOINT_DIR/last.ckpt`` to ``fit(ckpt_path=...)``:
  model, optimizer, loops and the step come back.

The model is a small multilayer perceptron on random data (nothing to download). It needs
Lightning (PyTorch >= 2.1): the PyTorch 2.x trainer image has it
(localhost/decor/trainer:0.1.0, trainer_image/frameworks-torch2.txt).
"""

import argparse
import os
import signal

import lightning as L
import torch
from decor_trainer.callbacks import DecorLightningCallback

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=2048)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--accumulation", type=int, default=2, help="gradient accumulation steps")
parser.add_argument("--width", type=int, default=256, help="hidden units of the model")
args = parser.parse_args()

checkpoint_dir = os.environ.get("DECOR_CHECKPOINT_DIR", "checkpoints")
last = os.path.join(checkpoint_dir, "last.ckpt")


class SaveAndStop(L.Callback):
    """On SIGTERM: save after the current optimizer step (never inside an accumulation)."""

    def on_train_start(self, trainer, pl_module):
        self.requested = False  # at train start, after Lightning installed its own handler
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "requested", True))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.requested and (batch_idx + 1) % trainer.accumulate_grad_batches == 0:
            trainer.save_checkpoint(last)
            trainer.should_stop = True


class Regression(L.LightningModule):
    def __init__(self, width):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
            torch.nn.ReLU(), torch.nn.Linear(width, 1),
        )  # fmt: skip

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


generator = torch.Generator().manual_seed(0)
x = torch.randn(args.samples, 64, generator=generator)
data = torch.utils.data.TensorDataset(x, x.sum(dim=1))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size)
L.seed_everything(0)  # before the model: its initial weights come from the seed
trainer = L.Trainer(
    max_epochs=int(os.environ.get("DECOR_EPOCHS", "3")),  # spec.epochs
    accumulate_grad_batches=args.accumulation,
    accelerator="cpu",
    default_root_dir=checkpoint_dir,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    callbacks=[DecorLightningCallback(samples_per_step=args.batch_size * args.accumulation),
               SaveAndStop()],
)  # fmt: skip
resume = last if os.path.exists(last) else None
if resume:
    print(f"resuming from {resume}", flush=True)
trainer.fit(Regression(args.width), loader, ckpt_path=resume)
print(f"finished: {trainer.global_step} optimizer steps", flush=True)
