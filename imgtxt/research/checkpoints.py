"""What a training run folder holds besides its best model: `state.pt` (resumable, rewritten atomically after
every epoch), the kept epochs' snapshots (`--average-best`), and their offline average. Everything is read with
torch's safe loader (tensors and plain types only), so a planted file cannot run code."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from imgtxt.model.modelfile import TrainedModel, save_model
from imgtxt.model.tensor_file import LazyTensors

from .joint_model import JointConfig, JointModel


def atomic_torch_save(obj, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_weights(model: JointModel, folder: Path) -> None:
    tensors = LazyTensors(folder / "model.safetensors")
    model.import_tensors({k: torch.from_numpy(np.array(tensors[k], dtype=np.float32)) for k in tensors.keys()
                          if not k.endswith(".scale")})


def load_state(path: Path) -> dict:
    """state.pt with torch's safe loader: tensors and plain types only, so a planted file cannot run code
    (the state holds nothing else: numpy's RNG state is a dict of ints, the optimizer's a dict of tensors)."""
    state = safe_load(path)
    if not isinstance(state, dict) or not {"model", "optimizer", "rng", "config"} <= set(state):
        raise SystemExit(f"{path}: not an imgtxt training state; use a new --run-dir or delete it")
    return state


def safe_load(path: Path):
    import pickle

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise SystemExit(f"{path}: not a training state imgtxt can load safely ({reason[:200]}); "
                         f"use a new --run-dir or delete it") from None


def load_snapshots(run_dir: Path) -> list[dict]:
    return [safe_load(p) for p in sorted((run_dir / "snapshots").glob("*.pt"))]


def average_is_current(run_dir: Path) -> bool:
    """Whether run_dir/averaged.json averages the snapshots kept now: a run continued past an earlier end
    (more --epochs) keeps other epochs, and its stale average must not stand for them."""
    try:
        averaged = json.loads((run_dir / "averaged.json").read_text())["averaged_epochs"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    kept = sorted(int(p.stem.split("-e")[-1]) for p in (run_dir / "snapshots").glob("*.pt"))
    return sorted(averaged) == kept


def trainable_state(model: JointModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in model.named_parameters() if v.requires_grad}


def keep_snapshot(model: JointModel, run_dir: Path, phase: int, epoch: int, rsum: float, keep: int) -> None:
    """Keep the trainable weights of the `keep` best epochs of the last phase (run_dir/snapshots)."""
    folder = run_dir / "snapshots"
    folder.mkdir(exist_ok=True)
    atomic_torch_save({"state": trainable_state(model), "rsum": rsum, "epoch": epoch, "phase": phase},
                       folder / f"p{phase + 1}-e{epoch:03d}.pt")
    snaps = sorted(folder.glob("*.pt"), key=lambda p: (p.name[:p.name.index("-")], -snap_rsum(p)))
    mine = [p for p in snaps if p.name.startswith(f"p{phase + 1}-")]
    for p in [p for p in snaps if p not in mine] + mine[keep:]:
        p.unlink()


def snap_rsum(path: Path) -> float:
    return torch.load(path, weights_only=True, map_location="cpu")["rsum"]


def average_saved_snapshots(run_dir: Path | str, out: Path | str) -> list[int]:
    """Offline twin of the end-of-training average, for a run stopped early: run_dir/best with its trainable
    weights replaced by the mean of run_dir/snapshots, written to `out` (evaluate it with `imgtxt eval`)."""
    run_dir = Path(run_dir)
    snaps = load_snapshots(run_dir)
    if not snaps:
        raise SystemExit(f"{run_dir / 'snapshots'}: no snapshots to average (train with --average-best K > 1)")
    best = TrainedModel.load(run_dir / "best")
    joint = JointConfig(**best.config["joint"])
    model = JointModel(joint)
    load_weights(model, run_dir / "best")
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name in snaps[0]["state"]:
            params[name].copy_(torch.stack([s["state"][name] for s in snaps]).mean(0))
    epochs = sorted(s["epoch"] for s in snaps)
    config = {k: v for k, v in best.config.items() if k not in ("format", "version", "weights_sha256")}
    config["metrics"] = {"averaged_epochs": epochs, "note": "val rsum: see eval_val"}
    files = {n: (run_dir / "best" / n).read_bytes() for n in ("vocab.json", "tokenizer.json")
             if (run_dir / "best" / n).is_file()}
    weights = {k: v.detach().numpy() for k, v in model.export_tensors().items()}
    save_model(out, weights, None, config, best.stats, best.caption_bank(), files=files,
               int8=tuple(config.get("training", {}).get("int8", ())))
    return epochs
