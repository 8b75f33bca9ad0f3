"""The bf16 check: issue 41's goals measured side by side in one command, on a CPU with native bf16.

Does mixft's bf16 pay on the CPU built for it? The goals (bf16 against fp32 in the main job and at
BERT-base size, mixft against ``transformers.Trainer`` with mixft's packing and at Trainer's fastest
stock setting, each precision's step against its floor, accuracy against Trainer's default sampling)
are figures of different benchmarks; this runs them one after another in one process, each part
timed, on the GPU check's driver (``benchmarks.gpu_check.run_check``: a part the budget would not
cover is skipped with a note; ``OUT_DIR/bf16_check.json`` and ``bf16_check.md`` are rewritten after
every part, the goals' table at their top). Parts, in order:

- ``main``      ``scripts/finetune.py --recipe bert-sst2 --compare fp32,bf16 --seeds 0,1,2``: the main job
                on the recipe's data (``--data-dir DIR``: real SST-2 text), bf16 ÷ fp32 train speed per seed;
- ``bert-base`` the same on BERT-base's shape (``BertConfig()``, random weights: speed does not depend on
                them), 640 generated sentences, one epoch, seed 0;
- ``peers``     mixft, Trainer with mixft's packing, Trainer length-grouped and Trainer's default random
                sampling (``benchmarks.peers``), fp32 and bf16, each seed: speed ratios and accuracy;
- ``floor``     the stream's whole-step time beside its floor per precision (``benchmarks.step_ablation
                --stream``: the recipe's loader in its order, the probe's matmul rate and a measured bandwidth),
                what the shape ladder buys in that step, and the CPU step change on by default left out (the
                [CLS]-only last layer): whether it pays in the stream here.

On a CPU without native bf16 (torch: ``mixft.amp.hardware.native_precisions``) bf16 is emulated,
~20x slower than fp32, and its figures say nothing about the goals: the check refuses there (exit
2, one line) unless ``--emulated`` is given, and then every verdict says "emulated". ``--tiny``: a
1-layer, 32-wide BERT and a few sentences, so that the suite runs every part on any CPU.

Usage::

    python -m benchmarks.bf16_check OUT_DIR [--data-dir sst2-sample] [--seeds 0,1,2] [--budget-s 3000]
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixft.amp.hardware import native_precisions, resolve_device
from mixft.amp.precision import native_evidence
from mixft.cli.parser import OneLineParser, int_list, non_negative_float, setup_logging
from mixft.errors import UsageError

from .gpu_check import Suite, check_parts, made_out_dir, run_check
from .gpu_parts import Budget, Context, Outcome, Part, compare_outcome
from .timing import markdown_table, median_ratio

PROG = "bf16_check"
DEFAULT_BUDGET_S = 3000.0  # the parts' estimates (guesses for a 2-core AMX Xeon) sum to 2200 s: room for a slower one
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Bf16Sizes:
    """How big each part is (``name`` "tiny" makes ``Context`` build the tiny BERT). The estimates are
    budget guesses in seconds for a 2-core CPU with native bf16, not measurements."""

    name: str
    train: int  # bert-base: generated sentences to train on (Context.data_dir), to evaluate on
    eval: int
    main_options: tuple[str, ...]  # the main job's options beyond --compare and --seeds
    peers_train: int
    peers_precisions: tuple[str, ...]  # the goals read bf16's rows; fp32's say what packing and the loop buy there
    peers_eval: int
    stream_options: tuple[str, ...]  # step_ablation's
    peers_warmup: int  # untimed steps per framework before the peers' timed runs (PeersConfig.warmup_steps)
    estimates: dict[str, float]


FULL = Bf16Sizes(
    name="cpu",
    train=640,  # issue 41's BERT-base measurement: 640 sentences
    eval=64,
    main_options=("--max-train-samples", "2000"),  # the recipe's defaults otherwise: 2 epochs, batch 32
    peers_train=1000,
    peers_precisions=("fp32", "bf16"),
    peers_eval=500,
    stream_options=("--rounds", "4", "--steps", "8", "--warmup", "2", "--train-samples", "2000"),
    peers_warmup=2,
    estimates={"main": 600.0, "bert-base": 300.0, "peers": 900.0, "floor": 400.0},
)
TINY = Bf16Sizes(
    name="tiny",
    train=16,
    eval=8,
    main_options=("--epochs", "1", "--batch-size", "8"),
    peers_train=16,
    peers_precisions=("bf16",),
    peers_eval=8,
    stream_options=("--rounds", "1", "--steps", "1", "--warmup", "1", "--train-samples", "16", "--batch-size", "8"),
    peers_warmup=0,  # the tiny check proves the parts run, not their figures
    estimates={"main": 30.0, "bert-base": 30.0, "peers": 60.0, "floor": 60.0},
)


@dataclass(frozen=True)
class Goal:
    what: str
    target: float
    at_most: bool = False  # the floor's: the measured figure must not exceed the target
    bf16: bool = True  # a bf16 figure: on a CPU that emulates bf16 its verdict says so

    def verdict(self, measured: float | None, emulated: bool) -> str:
        if measured is None:
            return "not measured"
        met = measured <= self.target if self.at_most else measured >= self.target
        return ("met" if met else "not met") + (EMULATED if emulated and self.bf16 else "")


EMULATED = " (bf16 emulated: not the goal's CPU)"


MAIN = Goal("bert-sst2 main job, bf16 ÷ fp32 train speed (median over seeds)", 1.8)
PACKED = Goal("mixft bf16 ÷ Trainer with mixft's packing, bf16", 1.5)
GROUPED = Goal("mixft bf16 ÷ Trainer length-grouped (its fastest stock setting), bf16", 2.0)
BASE = Goal("BERT-base size, bf16 ÷ fp32 train speed", 2.5)
FLOOR = {p: Goal(f"{p} step ÷ its floor, the stream", 2.0, at_most=True, bf16=p == "bf16") for p in ("fp32", "bf16")}


@dataclass
class Bf16Context(Context):
    """The GPU check's context plus what these parts take from the command line."""

    seeds: tuple[int, ...] = SEEDS
    data_dir_option: str | None = None  # --data-dir: real text for the main job, the peers and the stream

    def recipe_model(self) -> str | None:
        """The main job's, the peers' and the stream's model: the tiny BERT, or None for the recipe's own."""
        return str(self.model_dir()) if self.tiny else None

    def recipe_data(self) -> str | None:
        """Their data: ``--data-dir``'s, the tiny set, or None for the recipe's own."""
        if self.data_dir_option:
            return self.data_dir_option
        return str(self.data_dir()) if self.tiny else None

    def recipe_options(self) -> list[str]:
        """``--model`` and ``--data-dir`` as the main job and the stream take them (nothing for the recipe's own)."""
        pairs = (("--model", self.recipe_model()), ("--data-dir", self.recipe_data()))
        return [item for flag, value in pairs if value for item in (flag, value)]


def _per_seed_ratios(runs: list[dict[str, Any]]) -> list[float]:
    return [r["speed_vs_fp32"] for r in runs if r["precision"] == "bf16" and r["speed_vs_fp32"]]


def _with_ratios(outcome: Outcome) -> Outcome:
    ratios = _per_seed_ratios(outcome.figures["runs"])
    outcome.figures["bf16_vs_fp32"] = statistics.median(ratios) if ratios else None
    outcome.figures["bf16_vs_fp32_per_seed"] = ratios
    if ratios:
        outcome.note = (
            f"bf16 ÷ fp32 {statistics.median(ratios):.2f}x (per seed {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    return outcome


def run_main(ctx: Bf16Context) -> Outcome:
    options = ["--compare", "fp32,bf16", "--seeds", ",".join(map(str, ctx.seeds))]
    options += [*ctx.recipe_options(), *ctx.sizes.main_options]
    return _with_ratios(compare_outcome(ctx, options, "main"))


def run_bert_base(ctx: Bf16Context) -> Outcome:
    s = ctx.sizes
    options = ["--compare", "fp32,bf16", "--seed", "0", "--model", str(ctx.model_dir())]
    options += ["--data-dir", str(ctx.data_dir()), "--epochs", "1", "--max-train-samples", str(s.train)]
    options += ["--batch-size", "8"] if ctx.tiny else []
    return _with_ratios(compare_outcome(ctx, options, "bert_base"))


PEER_FRAMEWORKS = ["mixft", "hf-trainer-packed", "hf-trainer", "hf-trainer-random"]


def run_peers_goals(ctx: Bf16Context) -> Outcome:
    from .bert import BertSetup
    from .peers import PeersConfig, peers_table, run_peers

    s = ctx.sizes
    setup = BertSetup(
        train_samples=s.peers_train,
        eval_samples=s.peers_eval,
        batch_size=8 if ctx.tiny else 32,
        device="cpu",
        data_dir=ctx.recipe_data(),
        **({"model": ctx.recipe_model()} if ctx.tiny else {}),
    )
    precisions = list(s.peers_precisions)
    print(f"peers: {', '.join(PEER_FRAMEWORKS)}; {', '.join(precisions)}; seeds {list(ctx.seeds)}", flush=True)
    report = run_peers(
        PeersConfig(
            setup=setup,
            precisions=precisions,
            frameworks=PEER_FRAMEWORKS,
            seeds=list(ctx.seeds),
            warmup_steps=s.peers_warmup,
        )
    )
    rows = [{k: v for k, v in row.items() if k != "extra"} for row in report.summary()]

    def row(framework: str, precision: str = "bf16") -> dict[str, Any] | None:
        return next((r for r in rows if r["framework"] == framework and r["precision"] == precision), None)

    packed, grouped = row("hf-trainer-packed"), row("hf-trainer")
    figures = {
        "setup": dataclasses.asdict(setup),
        "rows": rows,
        "mixft_vs_trainer_packed_bf16": packed["mixft_ratio"] if packed else None,
        "mixft_vs_trainer_grouped_bf16": grouped["mixft_ratio"] if grouped else None,
        "accuracy": accuracy_against_trainer(row("mixft"), row("hf-trainer-random")),
    }
    note = "; ".join(
        f"mixft ÷ {name} {value:.2f}x"
        for name, value in (
            ("Trainer packed", figures["mixft_vs_trainer_packed_bf16"]),
            ("Trainer grouped", figures["mixft_vs_trainer_grouped_bf16"]),
        )
        if value is not None
    )
    return Outcome(figures, peers_table(report), note or None)


def accuracy_against_trainer(mixft: dict | None, trainer: dict | None) -> dict[str, Any] | None:
    """mixft bf16's accuracy over seeds against Trainer's default sampling in bf16: the gap in points and
    whether it lies within two standard errors of a difference of two means (the seeds' own spread)."""
    if not mixft or not trainer:
        return None
    a, b = mixft["accuracy_per_seed"], trainer["accuracy_per_seed"]
    gap = (statistics.mean(a) - statistics.mean(b)) * 100
    if len(a) < 2 or len(b) < 2:
        return {"gap_pts": gap, "two_se_pts": None, "within_noise": None, "seeds": len(a)}
    two_se = 2 * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) * 100
    return {"gap_pts": gap, "two_se_pts": two_se, "within_noise": abs(gap) <= two_se, "seeds": len(a)}


# The CPU step changes on by default: this part measures whether each pays beyond the noise in the stream here.
STEP_CHANGES = ("first_token_encoder",)


def step_change_speedup(all_on: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    """How much faster the step is with a change than without it: the medians' ratio, and its range
    over ``step_ablation``'s rotated rounds; it pays beyond the noise when every round says so."""
    speedup, per_round = median_ratio(without, all_on)
    return {"speedup": speedup, "rounds": [min(per_round), max(per_round)], "every_round": min(per_round) > 1.0}


def run_floor(ctx: Bf16Context) -> Outcome:
    from . import step_ablation

    out = ctx.work_dir / "floor.json"
    # all: every step change on, the shape ladder among them; -shape_ladder: exact shapes, the recipes' default;
    # each other step change left out in turn: whether it pays in the stream on this CPU (docs/benchmarks.md).
    variants = ",".join(("all", *(f"-{change}" for change in ("shape_ladder", *STEP_CHANGES))))
    argv = ["--stream", "--variants", variants, "--precisions", "fp32,bf16", *ctx.sizes.stream_options]
    argv += [*ctx.recipe_options(), "--json", str(out)]
    command = "python benchmarks/step_ablation.py " + shlex.join(argv)
    print(f"floor: {command}", flush=True)
    try:
        code = step_ablation.main(argv)
    except SystemExit as e:  # its own option errors: a failed part, not the end of the check
        raise RuntimeError(f"{command} exited with code {e.code}") from e
    if code:
        raise RuntimeError(f"{command} exited with code {code}")
    found = json.loads(out.read_text(encoding="utf-8"))
    floors, times = found["floors"], found["step_times_s"]
    # What the ladder buys in the whole step, per precision: exact shapes' median step over the ladder's.
    ladder = {p: median_ratio(times[f"{p}/-shape_ladder"], times[f"{p}/all"])[0] for p in ("fp32", "bf16")}
    changes = {p: {c: step_change_speedup(times[f"{p}/all"], times[f"{p}/-{c}"]) for c in STEP_CHANGES} for p in ladder}
    figures = {"command": command, "floors": floors, "ladder_speedup": ladder, "step_changes": changes}
    lines = [floors[p]["line"] for p in floors]
    lines += [
        f"{p}: the shape ladder's step {ladder[p]:.2f}x as fast as exact shapes' (all ÷ -shape_ladder)" for p in ladder
    ]
    lines += [
        f"{p}: {change} {c['speedup']:.3f}x (all ÷ -{change}; rounds {c['rounds'][0]:.3f}-{c['rounds'][1]:.3f}: "
        + ("pays in every round)" if c["every_round"] else "within the rounds' spread)")
        for p in changes
        for change, c in changes[p].items()
    ]
    note = ", ".join(f"{p} {floors[p]['above_floor']:.2f}x its floor" for p in floors)
    return Outcome(figures, f"`{command}`\n\n" + "\n".join(f"- {line}" for line in lines), note or None)


PARTS: dict[str, Part] = {
    "main": Part("main", "bert-sst2 main job: --compare fp32,bf16 over seeds", run_main),
    "bert-base": Part("bert-base", "BERT-base size: --compare fp32,bf16", run_bert_base),
    "peers": Part("peers", "mixft against transformers.Trainer, with and without mixft's packing", run_peers_goals),
    "floor": Part("floor", "The stream's step against its floor", run_floor),
}


def goals_table(doc: dict[str, Any]) -> str:
    """Each goal of issue 41 with what this check measured and the verdict, under the machine's line."""
    figures = {p["name"]: p.get("figures") or {} for p in doc["parts"]}
    native = ((doc.get("hardware") or {}).get("native") or {}).get("bf16")
    emulated = native is not True
    floors = figures.get("floor", {}).get("floors", {})
    peers = figures.get("peers", {})
    measured = [
        (MAIN, figures.get("main", {}).get("bf16_vs_fp32")),
        (PACKED, peers.get("mixft_vs_trainer_packed_bf16")),
        (GROUPED, peers.get("mixft_vs_trainer_grouped_bf16")),
        (BASE, figures.get("bert-base", {}).get("bf16_vs_fp32")),
        *((goal, (floors.get(p) or {}).get("above_floor")) for p, goal in FLOOR.items()),
    ]
    rows = [
        [
            goal.what,
            f"{'<=' if goal.at_most else '>='} {goal.target:g}x",
            f"{value:.2f}x" if value else "",
            goal.verdict(value, emulated),
        ]
        for goal, value in measured
    ]
    accuracy = peers.get("accuracy")
    if accuracy and accuracy["within_noise"] is not None:
        verdict = "met" if accuracy["within_noise"] else "not met"
        rows.append(
            [
                f"accuracy, mixft bf16 against Trainer's default sampling, {accuracy['seeds']} seeds",
                "within 2 standard errors",
                f"{accuracy['gap_pts']:+.2f} pts (2 SE {accuracy['two_se_pts']:.2f})",
                verdict + (EMULATED if emulated else ""),
            ]
        )
    else:
        rows.append(
            ["accuracy, mixft bf16 against Trainer's default sampling", "within 2 standard errors", "", "not measured"]
        )
    head = f"{doc.get('hardware_line') or doc['device']}; native bf16: {'yes' if native else 'no (emulated)'}"
    return head + "\n\n" + markdown_table(["goal", "target", "measured", "verdict"], rows)


BF16_CHECK = Suite("bf16_check", "bf16 check", PARTS, goals=goals_table)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("out_dir", help="folder for bf16_check.json, bf16_check.md and the runs' results")
    p.add_argument(
        "--budget-s",
        type=non_negative_float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for all parts; a part the time left would not cover is skipped (default {DEFAULT_BUDGET_S:.0f})",
    )
    p.add_argument("--data-dir", help="GLUE-layout SST-2 text (train.tsv, dev.tsv) for the main job, peers and stream")
    p.add_argument(
        "--seeds", type=int_list, default=list(SEEDS), help="seeds of the main job and the peers (default 0,1,2)"
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"which, comma-separated (default {','.join(PARTS)})")
    p.add_argument("--tiny", action="store_true", help="a 1-layer, 32-wide BERT and a few sentences (the suite's run)")
    p.add_argument(
        "--emulated", action="store_true", help="run where bf16 is emulated (~20x slower than fp32; verdicts say so)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        names = check_parts(args.parts, PARTS)
        seeds = tuple(args.seeds)
        if len(set(seeds)) != len(seeds):
            raise UsageError(f"--seeds must list distinct integers, got {args.seeds}")
        if args.data_dir and not Path(args.data_dir).is_dir():
            raise UsageError(f"--data-dir {args.data_dir} is not a folder")
        cpu = resolve_device("cpu")
        native = native_precisions(cpu)
        if native.get("bf16") is not True and not (args.emulated or args.tiny):
            raise UsageError(
                f"this CPU has no native bf16 ({native_evidence(native, 'bf16')}): bf16 would run emulated, ~20x slower than fp32, "
                "and say nothing about the goals; run this on a CPU with amx_bf16 or avx512_bf16, or give --emulated"
            )
        out_dir = made_out_dir(args.out_dir)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    sizes = TINY if args.tiny else FULL
    budget = Budget(args.budget_s)
    command = shlex.join(["python", "-m", "benchmarks.bf16_check", *argv])

    context = functools.partial(Bf16Context, seeds=seeds, data_dir_option=args.data_dir)
    return run_check(out_dir, cpu, names, sizes, budget, None, command, BF16_CHECK, make_context=context)


if __name__ == "__main__":
    sys.exit(main())
