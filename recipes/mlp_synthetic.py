"""mlp-synthetic: the seed notebook's AMP benchmark workload, as a recipe.

Model: ``layers`` x ``Linear(width, width)``, a ReLU after every layer but the last
(the PyTorch AMP recipe's ``make_model``: the last layer is the regression output).
Data: ``batches`` fixed batches of ``torch.randn`` inputs and targets, generated once in
``prepare`` from a fixed generator seed and replayed in the same order every epoch.
Loss: MSE. Optimizer: plain SGD (lr 0.001), no clipping, no schedule.

Sizes (``RunConfig.extra``; the seed's are the defaults)::

    width   4096   features in and out of every Linear
    layers  3      Linear layers
    batches 50     batches per epoch (batch size is RunConfig.batch_size, 512)
    eval_batches 5 the first N training batches, re-scored after every epoch (eval loss)

There is no accuracy: the targets are noise, so the evaluation reports MSE on the first
``eval_batches`` training batches - "did the loss go down", nothing more. At the seed's
sizes the data alone is 2 x 50 x 512 x 4096 fp32 = 840 MB; on a 2-core CPU one epoch
takes on the order of 30 s in fp32. Scale down with, e.g.,
``extra={"width": 1024, "batches": 10}`` (``scripts/benchmark.py --small``); the recipe
logs a notice whenever sizes differ from the seed's.

Raises UsageError (before any work) for non-positive or non-integer sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from mixft.amp.precision import Precision
from mixft.config.run_config import RunConfig
from mixft.errors import UsageError
from mixft.log import logger
from mixft.recipe import TrainerParts

NAME = "mlp-synthetic"
USES = frozenset()  # it reads no model or data option: its sizes come from RunConfig.extra
DEFAULTS = {
    "model": "mlp",
    "epochs": 3,
    "batch_size": 512,
    "lr": 0.001,
    "max_grad_norm": 0.0,  # the seed does not clip (0 disables clipping)
}
# The seed notebook's sizes; anything else is "scaled down" (or up) and says so.
SEED_SIZES = {"width": 4096, "layers": 3, "batches": 50}
EXTRA_DEFAULTS = {**SEED_SIZES, "eval_batches": 5}
DATA_SEED = 1234  # fixed: the data is the same for every run and every training seed


@dataclass
class Prepared:
    width: int
    layers: int
    batch_size: int
    inputs: list[torch.Tensor]  # on CPU; moved to the run's device (once) in build
    targets: list[torch.Tensor]
    eval_batches: int
    scaled: str | None  # a one-line description of the scale-down, or None at seed sizes
    on_device: dict = field(default_factory=dict)  # device -> (inputs, targets) already moved

    @property
    def model_description(self) -> str:
        """The model in words: results.json's ``model``, and the key a ``--probe`` of it is cached under (which
        ``--amp`` reads back: named otherwise, it never found its own probe and measured again every run)."""
        weights = self.layers * self.width * self.width  # every Linear is width x width (biases excluded)
        return f"MLP {self.layers} x Linear({self.width}, {self.width}) ({weights / 1e6:.1f}M matmul weights)"


def sizes(cfg: RunConfig) -> dict[str, int]:
    """The recipe's sizes from ``cfg.extra`` (unknown keys and bad values are a UsageError)."""
    unknown = set(cfg.extra) - set(EXTRA_DEFAULTS)
    if unknown:
        raise UsageError(f"mlp-synthetic: unknown extra option(s) {sorted(unknown)}; known: {sorted(EXTRA_DEFAULTS)}")
    out = {**EXTRA_DEFAULTS, **cfg.extra}
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "eval_batches" else 1):
            raise UsageError(f"mlp-synthetic: extra {key!r} must be a positive integer, got {value!r}")
    return out


def scale_note(width: int, layers: int, batches: int, batch_size: int) -> str | None:
    """``None`` at the seed's sizes, else a one-line "scaled down" description."""
    seed = (SEED_SIZES["width"], SEED_SIZES["layers"], SEED_SIZES["batches"], DEFAULTS["batch_size"])
    if (width, layers, batches, batch_size) == seed:
        return None
    smaller = width * width * layers * batches * batch_size < seed[0] ** 2 * seed[1] * seed[2] * seed[3]
    return (
        f"sizes {'scaled down' if smaller else 'changed'} from the seed's: width {width} (seed {seed[0]}), "
        f"{layers} layers (seed {seed[1]}), {batches} batches (seed {seed[2]}) of {batch_size} (seed {seed[3]})"
    )


def prepare(cfg: RunConfig) -> Prepared:
    """Generate the synthetic data once (fixed generator seed): every run trains on the same tensors."""
    s = sizes(cfg)
    gen = torch.Generator().manual_seed(DATA_SEED)
    shape = (cfg.batch_size, s["width"])
    inputs = [torch.randn(shape, generator=gen) for _ in range(s["batches"])]
    targets = [torch.randn(shape, generator=gen) for _ in range(s["batches"])]
    note = scale_note(s["width"], s["layers"], s["batches"], cfg.batch_size)
    if note:
        logger.info("notice: mlp-synthetic %s", note)
    return Prepared(
        width=s["width"],
        layers=s["layers"],
        batch_size=cfg.batch_size,
        inputs=inputs,
        targets=targets,
        eval_batches=min(s["eval_batches"], s["batches"]),
        scaled=note,
    )


def build_model(width: int, layers: int, seed: int) -> nn.Sequential:
    """The seed's ``make_model``: Linear+ReLU x (layers-1), then a final Linear (no ReLU)."""
    torch.manual_seed(seed)
    modules: list[nn.Module] = []
    for _ in range(layers - 1):
        modules += [nn.Linear(width, width), nn.ReLU()]
    modules.append(nn.Linear(width, width))
    return nn.Sequential(*modules)


def linear_weight_count(model: nn.Module) -> int:
    """Weights of every ``nn.Linear`` (biases excluded): what the matmuls multiply by."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # Under autocast mse_loss runs in fp32 (it is on autocast's fp32 list), so a
    # half-precision output is upcast before squaring: no fp16 overflow in the loss.
    return nn.functional.mse_loss(outputs, targets)


def build(cfg: RunConfig, prepared: Prepared, precision: Precision, device: torch.device, seed: int) -> TrainerParts:
    model = build_model(prepared.width, prepared.layers, seed)  # fp32 master weights
    key = str(device)
    if key not in prepared.on_device:
        # Like the seed, the data lives on the device before timing starts: the benchmark
        # measures the math, not host-to-device copies. Moved once, shared by every run.
        prepared.on_device[key] = ([x.to(device) for x in prepared.inputs], [y.to(device) for y in prepared.targets])
    inputs, targets = prepared.on_device[key]
    train = list(zip(inputs, targets))
    eval_ = train[: prepared.eval_batches] or None
    lr = cfg.lr

    def optimizer(params):
        if precision.param_dtype is not None:  # bf16-pure / bf16-true: torch-optimi's SGD on the bf16 weights
            from mixft.train.pure_bf16 import compensated_sgd

            return compensated_sgd(params, lr, compensated=precision.compensated)
        return torch.optim.SGD(params, lr=lr)

    scaled = f"; {prepared.scaled}" if prepared.scaled else ""
    return TrainerParts(
        model=model,
        optimizer=optimizer,
        loss_fn=loss_fn,
        train_loader=train,
        eval_loader=eval_,
        run_info={
            "model": prepared.model_description,
            "dataset": f"synthetic randn, {len(train)} batches x {prepared.batch_size}{scaled}",
        },
    )
