"""The device self-play runs on: a run's ``selfplay.device`` and the GPUs reserved for self-play, resolved.

>>> selfplay_device("auto", 0), selfplay_device("auto", 1)
('cpu', 'cuda')
"""

from __future__ import annotations

import dataclasses

from alphazero.config import Config
from alphazero.errors import UserError


def selfplay_device(setting: str, gpus: float) -> str:
    """Gets the device self-play's actors and servers run on when ``gpus`` GPUs are reserved for them.

    'auto' is 'cuda' with GPUs and 'cpu' without: an actor or server that holds
    no GPU runs on the CPU whatever the machine has (Ray no longer hides the
    GPUs from it, and a CUDA context there would sit on GPU 0 unseen by Ray).

    Raises:
        UserError: 'cpu' with GPUs, or a CUDA device without; the message names selfplay.device.
    """
    setting = setting.strip().lower()
    if gpus > 0:
        if setting == "cpu":
            raise UserError(f"--gpus {gpus:g} reserves GPUs for self-play, but selfplay.device is 'cpu': "
                            f"leave out --gpus, or --set selfplay.device=auto")
        return "cuda" if setting == "auto" else setting
    if setting not in ("auto", "cpu"):
        raise UserError(f"selfplay.device is {setting!r}, but self-play has no GPUs: pass --gpus N, "
                        f"or --set selfplay.device=auto")
    return "cpu"


def for_gpus(config: Config, gpus: float) -> Config:
    """Gets the config self-play runs with on ``gpus`` GPUs: selfplay.device resolved (selfplay_device) and, with
    GPUs, selfplay.gpu_games_per_actor (when set) as selfplay.games_per_actor.

    Raises:
        UserError: selfplay.device contradicts ``gpus`` (selfplay_device).
    """
    selfplay = dataclasses.replace(config.selfplay, device=selfplay_device(config.selfplay.device, gpus))
    if gpus > 0 and selfplay.gpu_games_per_actor > 0:
        selfplay = dataclasses.replace(selfplay, games_per_actor=selfplay.gpu_games_per_actor)
    return dataclasses.replace(config, selfplay=selfplay)
