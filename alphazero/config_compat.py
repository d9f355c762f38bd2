"""What may change when a run is reopened, and the hashes that name a network and a whole config.

A run's saved config.toml and the config a reopening process asks for must
agree on FIXED_FIELDS (alphazero.store.rundir refuses the rest, naming each
with both values); checkpoints and compiled passes carry the hashes.

>>> from alphazero.presets import get_preset
>>> from alphazero.config import apply_overrides
>>> small = get_preset("small")
>>> incompatible_fields(small, apply_overrides(small, ["network.blocks=4", "search.simulations=9"]))
['network.blocks']
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from alphazero.config import SECTIONS, Config, NetworkConfig, section_toml, to_toml
from alphazero.config_values import toml_value

# Fields that may not differ between a run's saved config and a reopening
# process: "section.*" is a whole section.
FIXED_FIELDS = ("network.*", "learner.optimizer")


def _is_fixed(section: str, name: str) -> bool:
    return f"{section}.*" in FIXED_FIELDS or f"{section}.{name}" in FIXED_FIELDS


def incompatible_fields(saved: Config, requested: Config) -> list[str]:
    """Lists the dotted names of FIXED_FIELDS on which ``requested`` differs from ``saved``.

    These may not change when a run is reopened: the network architecture
    (checkpoints only load into it) and the optimizer (its saved state only
    loads into the same kind). Every other field may be overridden freely.
    """
    names = []
    for section in SECTIONS:
        old, new = getattr(saved, section), getattr(requested, section)
        for f in dataclasses.fields(old):
            if _is_fixed(section, f.name) and getattr(old, f.name) != getattr(new, f.name):
                names.append(f"{section}.{f.name}")
    return names


def describe_differences(saved: Config, requested: Config, names: Sequence[str]) -> str:
    """Formats 'network.blocks: run has 2, requested 4' for each dotted name, joined by '; '."""
    parts = []
    for dotted in names:
        section, name = dotted.split(".", 1)
        old = getattr(getattr(saved, section), name)
        new = getattr(getattr(requested, section), name)
        parts.append(f"{dotted}: run has {toml_value(old)}, requested {toml_value(new)}")
    return "; ".join(parts)


def architecture_hash(network: NetworkConfig | Config) -> str:
    """Gets the sha256 hex digest of the canonical TOML of the network section."""
    if isinstance(network, Config):
        network = network.network
    text = "\n".join(section_toml(network, comments=False)) + "\n"
    return hashlib.sha256(text.encode()).hexdigest()


def config_hash(config: Config) -> str:
    """Gets the sha256 hex digest of the canonical TOML of the whole config."""
    return hashlib.sha256(to_toml(config, comments=False).encode()).hexdigest()
