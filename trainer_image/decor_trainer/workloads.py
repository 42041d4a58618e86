"""Reference workloads: three PyTorch models with synthetic data made in-process.

* ``resnet``: a ResNet-18-style CNN (4 stages of 2 basic blocks, channels W, 2W, 4W, 8W)
  for 3 x 32 x 32 images and 10 classes. ``width=64`` is the CIFAR ResNet-18 of the papers.
* ``vgg``: a VGG-11-style CNN with batch norm (channels W .. 8W) for the same images.
  ``width=64`` is the CIFAR VGG-11.
* ``lstm``: a 2-layer LSTM language model (embedding and hidden size W) over sequences of
  ``seq_len`` tokens from a ``vocab_size`` vocabulary. ``width=650, vocab_size=10000,
  seq_len=35, batch_size=20`` is the medium PTB model of Zaremba et al.

The mini-batch of global step ``s`` is a pure function of ``(seed, s)``, generated on the
CPU with its own ``torch.Generator`` (then moved to the device), so a resumed run sees
exactly the batches an uninterrupted one would. The reference trainer instead draws a
finite dataset in a seeded order (:meth:`Workload.samples`: sample ``i`` is a pure function
of ``(seed, i)``), so that workers can split a step's samples between them. The data is learnable, so the loss falls:
images are a class prototype plus noise; token sequences follow a fixed random successor
rule with some random tokens mixed in. Tiny sizes (``width=4``, ``batch_size=4``) take
tens of milliseconds per step on one CPU core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

WORKLOADS = ("resnet", "vgg", "lstm")
"""Names accepted by :func:`build_workload`."""

IMAGE_CHANNELS = 3
IMAGE_SIZE = 32
NUM_CLASSES = 10
IMAGE_NOISE = 1.0
"""Standard deviation of the noise added to a class prototype (prototypes have std 1)."""
TOKEN_NOISE = 0.1
"""Fraction of tokens replaced by a uniformly random one in the language-model data."""
CNN_LEARNING_RATE = 0.05
CNN_MOMENTUM = 0.9
"""The CNNs train with SGD and momentum, as in the papers."""
LM_LEARNING_RATE = 3e-3
"""The LM trains with Adam: plain SGD barely moves a narrow LSTM in a few hundred steps."""
GRAD_CLIP_NORM = 1.0
"""Gradient-norm clip of the language model (LSTMs need it; the CNNs do not)."""

_MASK63 = (1 << 63) - 1
_SAMPLE_SALT = 0x2545F4914F6CDD1D
"""Mixed into the seed of per-sample generators (:func:`sample_seed`)."""


@dataclass(frozen=True)
class WorkloadConfig:
    """What determines a workload: its name, sizes and seed.

    ``width`` >= 1 is the base channel count of the CNNs or the embedding/hidden size of
    the LM; ``batch_size`` >= 1 samples per mini-batch (sequences for the LM);
    ``vocab_size`` >= 2 and ``seq_len`` >= 1 only matter for ``lstm``.
    """

    name: str
    width: int = 16
    batch_size: int = 32
    seed: int = 0
    vocab_size: int = 1000
    seq_len: int = 35

    def __post_init__(self) -> None:
        if self.name not in WORKLOADS:
            raise ValueError(f"unknown workload {self.name!r}; choose one of {WORKLOADS}")
        for field in ("width", "batch_size", "seq_len"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (stored in checkpoints to refuse resuming a different workload)."""
        return asdict(self)


def step_seed(seed: int, step: int) -> int:
    """A 63-bit generator seed that is a pure, well-mixed function of ``(seed, step)``."""
    z = (seed * 0x9E3779B97F4A7C15 + step + 1) & ((1 << 64) - 1)  # splitmix64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (z ^ (z >> 31)) & _MASK63


def sample_seed(seed: int, index: int) -> int:
    """The generator seed of dataset sample ``index`` (>= 0): distinct from every step seed."""
    return step_seed(seed ^ _SAMPLE_SALT, index)


def _generator(seed: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and an identity (or 1x1) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-18-style CNN for 32x32 images: stem, 4 stages of ``blocks`` blocks, linear head."""

    def __init__(self, width: int, num_classes: int = NUM_CLASSES, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(IMAGE_CHANNELS, width, 3, 1, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        in_channels = width
        for stage, multiplier in enumerate((1, 2, 4, 8)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(in_channels, width * multiplier, stride))
                in_channels = width * multiplier
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(in_channels, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


_VGG11 = (1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M")


class VGG(nn.Module):
    """VGG-11-style CNN with batch norm for 32x32 images (channels in units of ``width``)."""

    def __init__(self, width: int, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = IMAGE_CHANNELS
        for item in _VGG11:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                assert isinstance(item, int)
                out_channels = width * item
                layers += [
                    nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
                    nn.BatchNorm2d(out_channels),
                    nn.ReLU(inplace=True),
                ]
                in_channels = out_channels
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(in_channels, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class LSTMLanguageModel(nn.Module):
    """Embedding, 2-layer LSTM, linear decoder to vocabulary logits (batch first)."""

    def __init__(self, vocab_size: int, width: int, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, width)
        self.lstm = nn.LSTM(width, width, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(width, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        out, _ = self.lstm(self.embedding(tokens))
        return self.decoder(out)


class Workload:
    """A model, its optimizer settings, its loss and its synthetic data.

    :meth:`batch` returns the ``(inputs, targets)`` of a global step on the CPU;
    :meth:`loss` maps the model's output and the targets to a scalar loss.
    """

    def __init__(self, config: WorkloadConfig) -> None:
        self.config = config
        self.model: nn.Module
        if config.name == "resnet":
            self.model = ResNet(config.width)
        elif config.name == "vgg":
            self.model = VGG(config.width)
        else:
            self.model = LSTMLanguageModel(config.vocab_size, config.width)
        data = _generator(step_seed(config.seed, -1))
        if config.name == "lstm":
            # Successor rule t -> (a * t + c) mod V, with a odd: the structure to learn.
            self._multiplier = (
                2 * int(torch.randint(0, config.vocab_size, (1,), generator=data)) + 1
            )
            self._increment = int(torch.randint(0, config.vocab_size, (1,), generator=data))
        else:
            shape = (NUM_CLASSES, IMAGE_CHANNELS, IMAGE_SIZE, IMAGE_SIZE)
            self._prototypes = torch.randn(shape, generator=data)

    @property
    def samples_per_step(self) -> int:
        """Training samples (images or sequences) per mini-batch."""
        return self.config.batch_size

    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over the model's parameters: SGD with momentum, Adam for the LM.

        Call after moving the model to its device.
        """
        if self.config.name == "lstm":
            return torch.optim.Adam(self.model.parameters(), lr=LM_LEARNING_RATE)
        return torch.optim.SGD(self.model.parameters(), lr=CNN_LEARNING_RATE, momentum=CNN_MOMENTUM)

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        """Inputs and targets of global step ``step`` (>= 0), on the CPU; pure in (seed, step)."""
        generator = _generator(step_seed(self.config.seed, step))
        size = self.config.batch_size
        if self.config.name == "lstm":
            vocab, length = self.config.vocab_size, self.config.seq_len
            tokens = torch.empty((size, length + 1), dtype=torch.long)
            tokens[:, 0] = torch.randint(0, vocab, (size,), generator=generator)
            noise = torch.rand((size, length), generator=generator) < TOKEN_NOISE
            random_tokens = torch.randint(0, vocab, (size, length), generator=generator)
            for i in range(length):
                successor = (tokens[:, i] * self._multiplier + self._increment) % vocab
                tokens[:, i + 1] = torch.where(noise[:, i], random_tokens[:, i], successor)
            return tokens[:, :-1], tokens[:, 1:]
        labels = torch.randint(0, NUM_CLASSES, (size,), generator=generator)
        noise = torch.randn((size, IMAGE_CHANNELS, IMAGE_SIZE, IMAGE_SIZE), generator=generator)
        return self._prototypes[labels] + IMAGE_NOISE * noise, labels

    def samples(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """Inputs and targets of the dataset samples ``indices`` (each >= 0), on the CPU.

        Sample ``i`` is a pure function of ``(seed, i)`` (its own generator), so any split of
        a batch across workers sees the same samples: the data path of distributed training
        (:mod:`decor_trainer.distributed` decides which indices a step consumes).
        """
        generators = [_generator(sample_seed(self.config.seed, i)) for i in indices]
        if self.config.name == "lstm":
            vocab, length = self.config.vocab_size, self.config.seq_len
            size = len(generators)
            tokens = torch.empty((size, length + 1), dtype=torch.long)
            noise = torch.empty((size, length), dtype=torch.bool)
            random_tokens = torch.empty((size, length), dtype=torch.long)
            for row, generator in enumerate(generators):
                tokens[row, 0] = torch.randint(0, vocab, (1,), generator=generator)
                noise[row] = torch.rand((length,), generator=generator) < TOKEN_NOISE
                random_tokens[row] = torch.randint(0, vocab, (length,), generator=generator)
            for i in range(length):
                successor = (tokens[:, i] * self._multiplier + self._increment) % vocab
                tokens[:, i + 1] = torch.where(noise[:, i], random_tokens[:, i], successor)
            return tokens[:, :-1], tokens[:, 1:]
        image = (IMAGE_CHANNELS, IMAGE_SIZE, IMAGE_SIZE)
        labels = torch.tensor(
            [int(torch.randint(0, NUM_CLASSES, (1,), generator=g)) for g in generators],
            dtype=torch.long,
        )
        noise = torch.stack([torch.randn(image, generator=g) for g in generators])
        return self._prototypes[labels] + IMAGE_NOISE * noise, labels

    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy (over tokens for the LM)."""
        if self.config.name == "lstm":
            return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
        return F.cross_entropy(output, targets)

    def clip_gradients(self) -> None:
        """Clip the gradient norm where the model needs it (the LM); call before ``step``."""
        if self.config.name == "lstm":
            nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP_NORM)


def build_workload(config: WorkloadConfig) -> Workload:
    """The workload named in ``config``; model weights come from torch's global RNG."""
    return Workload(config)
