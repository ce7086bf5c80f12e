"""Finding a model: a config.json, a checkpoint directory, or the name of a bundled example."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simulator.spec import suggest
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.checkpoint import Checkpoint
from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.quantised_checkpoint import (
    QuantisedCheckpoint,
    Scheme,
    check_stored_parts,
    read_scheme,
    refuse_unlabelled_parts,
)
from tcp_compiler.frontend.weight_shapes import check_shapes

# The bundled models ship inside the package (package data), so an installed tcpc finds them.
BUNDLED = Path(__file__).resolve().parent / "models"


def bundled_models() -> list[str]:
    return sorted(p.stem for p in BUNDLED.glob("*.json"))


@dataclass
class Model:
    config: ModelConfig
    source: Path  # the config.json read
    checkpoint: Checkpoint | QuantisedCheckpoint | None  # present when the model came as a directory
    scheme: Scheme | None = None  # how the checkpoint's weights are quantised (quantization_config)


def load_model(spec: str | Path) -> Model:
    """Reads a model's config (and opens its checkpoint's headers, if it is a directory)."""
    path = Path(spec)
    checkpoint = None
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise FrontendError(f"{path}: a checkpoint directory needs a config.json")
        if any(path.glob("*.safetensors")):
            checkpoint = Checkpoint.open(path)
        name = path.resolve().name
    elif path.is_file():
        config_path = path
        name = path.stem if path.name != "config.json" else path.resolve().parent.name
    elif (BUNDLED / f"{spec}.json").is_file():
        config_path = BUNDLED / f"{spec}.json"
        name = str(spec)
    else:
        raise FrontendError(
            f"{spec}: not a config.json, a checkpoint directory or a bundled model"
            f"{suggest(str(spec), bundled_models())} (bundled: {', '.join(bundled_models()) or 'none'})"
        )
    raw = RawConfig.load(config_path)
    config = read_model_config(raw, name)
    scheme = None
    if checkpoint is not None:
        check_shapes(config, checkpoint, config_path)
        quant = raw.get("quantization_config", kind=dict)
        if quant is not None:  # read only with weights: a bundled config is costed by --dtype
            scheme = read_scheme(quant, str(config_path))
            check_stored_parts(config, checkpoint, scheme, config_path)
            checkpoint = QuantisedCheckpoint(checkpoint, scheme)
        else:
            refuse_unlabelled_parts(checkpoint, config_path)
    return Model(config, config_path, checkpoint, scheme)
