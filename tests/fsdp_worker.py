"""Worker for tests/test_fsdp.py, started by torchrun: mixft's Trainer on FSDP2-sharded tiny models.

One launch runs several checks (each 2-process start costs seconds): every rank writes what
it saw to OUT.rank<r>.pt, and the test compares with one process trained in pytest itself.

Usage: python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_worker.py OUT CHECK[,CHECK...]
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mixft import distributed  # noqa: E402
from mixft.data.batching import LengthGroupedBatchSampler  # noqa: E402
from mixft.train.hooks import Callback  # noqa: E402
from mixft.train.trainer import Trainer  # noqa: E402
from tests.one_process_sees import NanLossAt, SignalAt  # noqa: E402

VOCAB, ROWS, SEQ = 96, 32, 12

# name -> (architecture, LoRA, precision, grad_accum per process)
RUNS = {
    "bert_fp32": ("bert", False, "fp32", 1),
    "qwen2_fp32": ("qwen2", False, "fp32", 2),
    # RoBERTa's encoder (its own embeddings and blocks): the text-classification recipe's family, sharded too.
    "roberta_fp32": ("roberta", False, "fp32", 1),
    "bert_lora_fp32": ("bert", True, "fp32", 1),
    "gpt2_lora_fp32": ("gpt2", True, "fp32", 1),
    "bert_bf16": ("bert", False, "bf16", 1),
    "qwen2_lora_bf16": ("qwen2", True, "bf16", 1),
    "bert_fp16_inf": ("bert", False, "fp16", 1),
    # Dropout on, the same seed: under FSDP vs under DDP.
    "bert_dropout": ("bert", False, "fp32", 1),
    "bert_dropout_ddp": ("bert", False, "fp32", 1),
    # --inject-nonfinite at rate 1 on sharded gradients: every step skipped on every rank.
    "bert_fp32_injected": ("bert", False, "fp32", 1),
    # bert-sst2's model (BertClassifier): its last layer computes the [CLS] tokens only, sharded too.
    "bertcls_fp32": ("bertcls", False, "fp32", 1),
    "bertcls_bf16": ("bertcls", False, "bf16", 1),
}


class Rows(Dataset):
    """ROWS fixed-length rows: learnable labels (the parity of the second token)."""

    def __init__(self):
        g = torch.Generator().manual_seed(3)
        self.ids = torch.randint(5, VOCAB, (ROWS, SEQ), generator=g)
        self.labels = self.ids[:, 1] % 2

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": self.labels[i]}


def classifier(arch: str, lora: bool, dropout: bool = False):
    """A 2-block tiny classifier of ``arch``, without dropout unless asked (one process compares bit for bit)."""
    from tiny_models import tiny_config
    from transformers import AutoModelForSequenceClassification

    from mixft.models.classifiers import SequenceClassifier
    from mixft.models.lora import LoraOptions, apply_lora

    overrides = {"n_layer": 2} if arch == "gpt2" else {"num_hidden_layers": 2}
    config = tiny_config("bert" if arch == "bertcls" else arch, VOCAB, num_labels=2, pad_token_id=0, **overrides)
    for key in (
        ()
        if dropout
        else (
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
            "resid_pdrop",
            "embd_pdrop",
            "attn_pdrop",
            "attention_dropout",
            "summary_first_dropout",
        )
    ):
        if hasattr(config, key):
            setattr(config, key, 0.0)
    torch.manual_seed(0)
    if arch == "bertcls":
        from transformers import BertModel

        from mixft.models.classifiers import BertClassifier, logits_to_labels
        from recipes.bert_sst2 import loss_fn

        model = BertClassifier(BertModel(config, add_pooling_layer=False), dropout=0.0)
        model.loss_fn, model.predict_fn = loss_fn, logits_to_labels
        return model
    model = SequenceClassifier(AutoModelForSequenceClassification.from_config(config))
    if lora:
        targets = {"bert": "query,value", "roberta": "query,value", "qwen2": "q_proj,v_proj", "gpt2": "c_attn"}[arch]
        model = apply_lora(model, LoraOptions(r=4, alpha=8.0, dropout=0.0, target_modules=targets))
        torch.manual_seed(1)
        for name, p in model.named_parameters():  # peft starts B at zero: give the adapters a signal at once
            if "lora_B" in name:
                nn.init.normal_(p, std=0.02)
    return model


class Record(Callback):
    """Per-step facts: stepped or skipped, loss scale, LR, the shards' dtypes; an inf for fp16's check."""

    def __init__(self, inject: tuple[int, int] | None = None):
        self.inject = inject  # (rank, step index): write inf into that rank's local shard
        self.steps, self.grad_dtypes, self.gathered, self.last_feed_forward = [], set(), set(), set()

    def on_before_optimizer_step(self, trainer):
        from mixft.train.fsdp import local

        grads = [p.grad for p in trainer.params if p.grad is not None]
        self.grad_dtypes |= {str(local(g).dtype) for g in grads}
        if self.inject and self.inject == (distributed.rank(), trainer.state.step):
            local(grads[0]).view(-1)[0] = float("inf")

    def on_step_end(self, trainer, info):
        self.steps.append({"skipped": info.skipped, "scale": info.loss_scale, "lr": info.lr})


def watch_last_feed_forward(model, record: Record) -> None:
    """Note the input shape of the last layer's feed-forward: (sentences, width) when it ran for [CLS] only."""
    from transformers import BertModel

    for encoder in (m for m in model.modules() if isinstance(m, BertModel)):
        encoder.encoder.layer[-1].intermediate.register_forward_pre_hook(
            lambda m, args: record.last_feed_forward.add(tuple(args[0].shape))
        )


def watch_gathered_dtypes(model, record: Record) -> None:
    """Note the dtype each Linear and LayerNorm computes with (FSDP's unsharded parameters, in forward)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.LayerNorm)):
            module.register_forward_pre_hook(
                lambda m, args: record.gathered.add(
                    ("LayerNorm" if isinstance(m, nn.LayerNorm) else "Linear", str(m.weight.dtype))
                )
            )


def train(name: str, fsdp: bool, grad_accum: int | None = None, callbacks=(), before_fit=None, eval_only=False):
    """Train RUNS[name] 4 steps: sharded (fsdp) or in one process (the reference: global batch in grad_accum).

    ``eval_only``: evaluate the untrained model instead (``Trainer.evaluate_only``, ``--eval-only``'s path).
    """
    arch, lora, precision, accum = RUNS[name]
    ddp = name.endswith("_ddp")
    fsdp = fsdp and not ddp
    world = distributed.world_size() if fsdp or ddp else 1
    ds = Rows()
    # Equal lengths + no shuffle: global batches 0, 1, 2, ...; rank r takes r, r + world, ...
    sampler = LengthGroupedBatchSampler(
        [SEQ] * ROWS, batch_size=4, shuffle=False, num_replicas=world, rank=distributed.rank() if world > 1 else 0
    )
    eval_sampler = LengthGroupedBatchSampler(
        [SEQ] * 12, batch_size=4, shuffle=False, num_replicas=world, rank=distributed.rank() if world > 1 else 0
    )  # 3 batches: 2 + 1
    model = classifier(arch, lora, dropout="dropout" in name)
    record = Record(inject=(1, 1) if name.endswith("_inf") else None)
    if name.endswith("_injected"):
        from mixft.callbacks.faults import InjectNonFinite

        callbacks = [*callbacks, InjectNonFinite(1.0, seed=0)]

    def optimizer(params):
        return torch.optim.AdamW([p for p in params if p.requires_grad], lr=1e-3, weight_decay=0.01)

    trainer = Trainer(
        model,
        optimizer,
        model.loss_fn,
        DataLoader(ds, batch_sampler=sampler),
        eval_loader=DataLoader(ds, batch_sampler=eval_sampler),
        precision=precision,
        device="cpu",
        lr_scheduler=lambda opt, total: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / 8),
        grad_accum=grad_accum or accum,
        max_grad_norm=None if "dropout" in name else 0.05,
        epochs=1,
        max_steps=4,
        predict_fn=model.predict_fn,
        callbacks=[record, *callbacks],
        fsdp=fsdp,
        seed=0,
        scaler_kwargs={"init_scale": 1024.0} if precision == "fp16" else None,  # only fp16 has a GradScaler
    )
    if fsdp:
        watch_gathered_dtypes(trainer.module, record)
    watch_last_feed_forward(trainer.module, record)
    if before_fit is not None:
        before_fit(trainer)
    result = trainer.evaluate_only() if eval_only else trainer.fit()
    return trainer, result, record


class SaveAndStop(Callback):
    """Write a sharded checkpoint after optimizer step ``step``, then end the fit (a stop between steps)."""

    def __init__(self, directory, step: int):
        self.directory, self.step = directory, step

    def on_step_end(self, trainer, info):
        from mixft.train.hooks import StopTraining
        from mixft.train.sharded_checkpoint import save_sharded_checkpoint

        if info.step == self.step:
            save_sharded_checkpoint(trainer, self.directory, {"test": True})
            raise StopTraining("stopped for the resume check")


def stopped_and_resumed(name: str, directory: str):
    """RUNS[name] under FSDP stopped after step 2 with a sharded checkpoint, then a new trainer resumed from it."""
    from mixft.train.sharded_checkpoint import load_sharded_checkpoint

    train(name, fsdp=True, callbacks=[SaveAndStop(directory, 2)])
    return train(name, fsdp=True, before_fit=lambda trainer: load_sharded_checkpoint(trainer, directory))


def signalled(name: str, directory: str):
    """RUNS[name] under FSDP with the CLI's stop-on-signal and a sharded Checkpointer; process 1 alone is signalled."""
    from mixft.callbacks.checkpointer import Checkpointer
    from mixft.callbacks.interrupt import SignalHandler, StopOnSignal

    handler = SignalHandler()  # not entered: no handler of the OS's is installed
    saves = Checkpointer(directory, every=0, minutes=0, sharded=True)  # saves only when told to
    return train(name, fsdp=True, callbacks=[SignalAt(handler, rank=1, step=2), StopOnSignal(handler), saves])


def collapsed(name: str):
    """RUNS[name] under FSDP with the CLI's CollapseDetector; process 1 alone sees a NaN loss after step 2."""
    from mixft.callbacks.faults import CollapseDetector

    return train(name, fsdp=True, callbacks=[NanLossAt(rank=1, step=2), CollapseDetector(check_every=1)])


def whole_parameters(module) -> torch.Tensor:
    from mixft.train.fsdp import whole

    return torch.cat([whole(p.detach()).reshape(-1).float() for p in module.parameters()])


if __name__ == "__main__":
    out, checks = sys.argv[1], sys.argv[2].split(",")
    assert distributed.init_from_env("cpu"), "expected to run under torchrun"
    from mixft.distributed import is_sharded
    from mixft.train.fsdp import local

    seen = {}
    for name in checks:
        if name.startswith("resume:"):
            trainer, result, record = stopped_and_resumed(name.removeprefix("resume:"), f"{out}.{name[7:]}.dcp")
        elif name.startswith("signal:"):
            trainer, result, record = signalled(name.removeprefix("signal:"), f"{out}.signal.dcp")
            from mixft.train.sharded_checkpoint import verify_sharded_checkpoint

            result.eval["checkpoint_step"] = verify_sharded_checkpoint(f"{out}.signal.dcp", 2)["meta"]["step"]
        elif name.startswith("collapse:"):
            trainer, result, record = collapsed(name.removeprefix("collapse:"))
        elif name.startswith("evalonly:"):
            trainer, result, record = train(name.removeprefix("evalonly:"), fsdp=True, eval_only=True)
        else:
            trainer, result, record = train(name, fsdp=True)
        seen[name] = {
            "weights": whole_parameters(trainer.module),
            "sharded": is_sharded(trainer.module),
            "shard_dtypes": sorted({str(local(p).dtype) for p in trainer.module.parameters()}),
            "local_numel": sum(local(p).numel() for p in trainer.module.parameters()),
            "numel": sum(p.numel() for p in trainer.module.parameters()),
            "grad_dtypes": sorted(record.grad_dtypes),
            "gathered": sorted(record.gathered),
            "last_feed_forward": sorted(record.last_feed_forward),
            "steps": record.steps,
            "losses": [float(x) for x in trainer.state.history["loss"]],
            "eval": result.eval,
            "skipped": result.skipped_steps,
            "final_loss_scale": result.final_loss_scale,
            "stop_kind": result.stop_kind,
            "stopped_early": result.stopped_early,
            "step": trainer.state.step,
            "samples": trainer.state.samples,
            "grad_norms": [float(x) for x in trainer.state.history["grad_norm"]],
        }
        del trainer, result
        gc.collect()
    torch.save(
        {"rank": distributed.rank(), "world": distributed.world_size(), "runs": seen},
        f"{out}.rank{distributed.rank()}.pt",
    )
    distributed.shutdown()
