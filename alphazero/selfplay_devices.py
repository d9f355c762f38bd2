"""The device self-play runs on: a run's ``selfplay.device`` and the GPUs reserved for self-play, resolved.

>>> selfplay_device("auto", 0), selfplay_device("auto", 1), selfplay_device("cuda:0", 1)
('cpu', 'cuda', 'cuda')
"""

from __future__ import annotations

import dataclasses
import re

from alphazero.config import Config
from alphazero.errors import UserError


def selfplay_device(setting: str, gpus: float) -> str:
    """Gets the device self-play's actors and servers run on when ``gpus`` GPUs are reserved for them.

    'auto' is 'cuda' with GPUs and 'cpu' without: an actor or server that holds
    no GPU runs on the CPU whatever the machine has (Ray no longer hides the
    GPUs from it, and a CUDA context there would sit on GPU 0 unseen by Ray).
    An actor or server that holds a GPU sees that one alone, as cuda:0 (Ray
    sets its CUDA_VISIBLE_DEVICES), so 'cuda:0' is 'cuda' and 'cuda:N' above 0
    names a GPU it cannot reach.

    Raises:
        UserError: 'cpu' with GPUs, cuda:N above 0, or a CUDA device without GPUs; the message names
            selfplay.device.
    """
    setting = setting.strip().lower()
    if gpus > 0:
        if setting == "cpu":
            raise UserError(f"--gpus {gpus:g} reserves GPUs for self-play, but selfplay.device is 'cpu': "
                            f"leave out --gpus, or --set selfplay.device=auto")
        numbered = re.fullmatch(r"cuda:(\d+)", setting)
        if numbered is not None and int(numbered[1]) > 0:
            raise UserError(f"selfplay.device is {setting!r}, but each self-play actor and server sees only the GPU "
                            f"Ray gives it, as cuda:0: --set selfplay.device=cuda, and choose the machine's GPUs "
                            f"with CUDA_VISIBLE_DEVICES")
        return "cuda" if setting in ("auto", "cuda:0") else setting
    if setting not in ("auto", "cpu"):
        raise UserError(f"selfplay.device is {setting!r}, but self-play has no GPUs: pass --gpus N, "
                        f"or --set selfplay.device=auto")
    return "cpu"


def for_gpus(config: Config, gpus: float) -> Config:
    """Gets the config self-play runs with on ``gpus`` GPUs: selfplay.device resolved (selfplay_device) and, with
    GPUs, selfplay.gpu_games_per_actor (when set) as selfplay.games_per_actor and selfplay.gpu_leaves_per_game
    (when set, for PUCT: Gumbel's Sequential Halving takes one leaf a game) as search.leaves_per_game.

    Raises:
        UserError: selfplay.device contradicts ``gpus`` (selfplay_device).
    """
    selfplay = dataclasses.replace(config.selfplay, device=selfplay_device(config.selfplay.device, gpus))
    if gpus > 0 and selfplay.gpu_games_per_actor > 0:
        selfplay = dataclasses.replace(selfplay, games_per_actor=selfplay.gpu_games_per_actor)
    search = config.search
    if gpus > 0 and selfplay.gpu_leaves_per_game > 0 and search.algorithm == "puct":
        search = dataclasses.replace(search, leaves_per_game=selfplay.gpu_leaves_per_game)
    return dataclasses.replace(config, selfplay=selfplay, search=search)
