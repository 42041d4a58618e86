"""Hugging Face's ``Trainer`` under DECOR (docs/contract.md, "Hugging Face Trainer").

* progress: ``DecorTrainerCallback`` reports optimizer steps (the library's global step) out
  of ``max_steps``, and ``batch x gradient accumulation x world size`` samples per step;
* SIGTERM: ``SaveAndStop`` asks the Trainer to save a checkpoint after the current optimizer
  step and to stop; the script then exits 0;
* resume: ``output_dir`` is ``$DECOR_CHECKPOINT_DIR``, and a restart passes the latest
  ``checkpoint-N`` in it to ``train(resume_from_checkpoint=...)``: model, optimizer,
  scheduler, RNG and the position in the data come back, at optimizer step N.

The model is a tiny BERT built from its configuration (nothing to download), on random
data. Run it as a job with ``decor run examples/own-loop/hf-job.yaml --local``.
"""

import argparse
import os
import signal

import torch
from decor_trainer.callbacks import DecorTrainerCallback
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=256)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--accumulation", type=int, default=2, help="gradient accumulation steps")
parser.add_argument("--save-every", type=int, default=20, help="optimizer steps between saves")
parser.add_argument("--log-every", type=int, default=10, help="optimizer steps between logs")
args = parser.parse_args()


class SaveAndStop(TrainerCallback):
    """On SIGTERM: save a checkpoint after the current optimizer step, then stop training."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, lambda signum, frame: setattr(self, "requested", True))

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested:
            control.should_save = True
            control.should_training_stop = True


class RandomSequences(torch.utils.data.Dataset):
    def __init__(self, count, length=16, vocab=100):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, vocab, (count, length), generator=generator)
        self.labels = (self.ids[:, 0] % 2).tolist()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


output_dir = os.environ.get("DECOR_CHECKPOINT_DIR", "checkpoints")
training_args = TrainingArguments(
    output_dir=output_dir,
    num_train_epochs=int(os.environ.get("DECOR_EPOCHS", "3")),  # spec.epochs
    per_device_train_batch_size=args.batch_size,
    gradient_accumulation_steps=args.accumulation,
    save_strategy="steps",
    save_steps=args.save_every,
    save_total_limit=2,
    logging_steps=args.log_every,
    learning_rate=1e-3,
    seed=0,
    use_cpu=True,
    report_to=[],
    disable_tqdm=True,
)
config = BertConfig(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
)
set_seed(training_args.seed)  # before the model: its initial weights come from the seed
stop = SaveAndStop()
decor = DecorTrainerCallback()
trainer = Trainer(
    model=BertForSequenceClassification(config),
    args=training_args,
    train_dataset=RandomSequences(args.samples),
    callbacks=[decor, stop],
)
last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
if last is not None:
    print(f"resuming from {last}", flush=True)
trainer.train(resume_from_checkpoint=last)
trainer.save_state()  # trainer_state.json in output_dir: the steps and their losses
reporter = decor.bridge.reporter
if reporter is not None:
    done = reporter.snapshot()
    print(
        f"{'stopped' if stop.requested else 'finished'}: {done.steps}/{done.steps_planned} steps,"
        f" {done.samples} samples",
        flush=True,
    )
