"""The Chessformer: a transformer over the 64 squares with relative square positions.

After Monroe & Chalmers, "Mastering Chess with a Transformer Model" (2024), the
architecture of Leela Chess Zero's transformer networks. It takes the same
compact input and gives the same outputs as the residual network
(``alphazero.nn.heads.NetOutput``), so search, shards, agents, the learner and
the UCI engine use either without knowing which.

- **Tokens.** One per square of the board as the side to move sees it (ranks
  mirrored when Black moves, as the input planes already are): the square's
  119 input values (8 history steps x 14 piece and repetition planes, then
  colour, move count / 256, the four castling rights and the half-move clock
  / 100: ``alphazero.nn.planes.SCALAR_SCALE``) go through one linear projection,
  then a learned gain and offset per square and channel. The planes hold no
  en-passant plane: the previous step's pawns show it.
- **Body.** ``layers`` Post-LN encoder layers with DeepNorm (Wang et al.,
  2022): x <- Norm(alpha * x + Sublayer(x)), alpha = (2N)^(1/4), and the
  value, output and feed-forward projections initialised with Xavier normal
  scaled by beta = (8N)^(-1/4), N = layers. Norm is RMSNorm (no centering, no
  bias, a learned gain); the feed-forward sublayer is Linear-Mish-Linear; the
  query, key and value projections have no biases.
- **Attention** with Shaw et al. (2018) relative positions, one learned vector
  a^Q_ij, a^K_ij, a^V_ij per ordered pair of squares (i, j) and layer::

      e_ij = (x_i W^Q + a^Q_ij) . (x_j W^K + a^K_ij) / sqrt(d)
           = [q_i . k_j  +  q_i . a^K_ij  +  a^Q_ij . k_j  +  a^Q_ij . a^K_ij] / sqrt(d)
      z_i  = sum_j softmax_j(e_ij) (x_j W^V + a^V_ij)

  See ``RelativeSelfAttention`` for the variant and its parameter sharing.
- **Policy head**: attention policy. From-square queries against to-square
  keys give a 64 x 64 matrix of move logits; under-promotions add a bias per
  piece (knight, bishop, rook) and target file, projected from the keys of the
  promotion rank. A fixed index map turns it into the 4672-move policy
  (``policy_index_map``, alphazero.nn.move_map): index plane * 64 + from reads entry (from, to) of the
  matrix, plus the bias for an under-promotion. Queen promotions are the plain
  pawn moves to the last rank, as in the move index.
- **Value head**: per-square embedding, flattened, a hidden layer, then
  win/draw/loss logits (or a tanh scalar), as ``network.value_head`` says.
- **Action-value head** (with ``network.action_value_head``): each token
  through one linear layer to its from and to features, then the moves'
  outputs as alphazero.nn.action_values describes.
- **Auxiliary heads** (trained only when the learner gives them a weight, see
  ``learner.trainer``; search never runs them): a second attention policy
  head for the soft policy targets (pi^(1/T)) and a second value head for the
  search's root value (q), both on the same body, as in Leela's training.
- **Reply-policy head** (with ``network.reply_policy_head``; training only,
  ``forward_with_reply`` or ``forward_with_aux(..., reply_policy=True)``): a
  third attention policy head on the policy's square tokens, for the next
  position's search policy (alphazero.nn.heads.REPLY_POLICY_PREFIX).
- **Moves-left head** (with ``network.moves_left_head``; training only,
  ``forward_with_training_heads`` or ``forward_with_aux(..., moves_left=True)``):
  lc0's transformer form, each token embedded to 8 channels (Mish), flattened,
  128 hidden units (Mish) and one output, the plies left in the game
  (alphazero.nn.heads.moves_left_plies); search does not read it.

Example::

    model = Chessformer(get_preset("cf-tiny").network)
    out = model(planes, scalars)      # NetOutput: [N, 4672], [N], [N, 3]
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from alphazero.config import NetworkConfig
from alphazero.nn.action_values import ActionValueHead, start_level_from_value, with_action_values
from alphazero.nn.heads import (
    MOVES_LEFT_FILTERS,
    MOVES_LEFT_HIDDEN,
    NetOutput,
    TrainingHeads,
    float32_head,
    moves_left_plies,
)
from alphazero.nn.move_map import SQUARES, UNDER_PROMOTION_PIECES, policy_index_map
from alphazero.nn.planes import INPUT_PLANES, expand_torch

__all__ = [
    "AuxOutput", "Chessformer", "EncoderLayer", "RelativeSelfAttention", "deepnorm_alpha", "deepnorm_beta",
    "policy_index_map",
]

PROMOTION_RANK = slice(56, 64)  # oriented squares of the last rank: the side to move promotes there
RELATIVE_INIT_STD = 0.02  # the relative-position vectors start small: near plain attention
NORM_EPS = 1e-5


class AuxOutput(NamedTuple):
    """The auxiliary heads' outputs for a batch of N positions (training only)."""

    soft_policy_logits: torch.Tensor  # float32 [N, 4672], unmasked: learns the soft policy targets
    q: torch.Tensor  # float32 [N] in [-1, 1]: learns the search's root value
    reply_policy_logits: torch.Tensor | None = None  # float32 [N, 4672]: the next position's policy (when asked)
    moves_left: torch.Tensor | None = None  # float32 [N] >= 0: the plies left in the game (when asked)


def deepnorm_alpha(layers: int) -> float:
    """Gets DeepNorm's residual gain for an encoder of ``layers`` layers: (2N)^(1/4)."""
    return (2.0 * layers) ** 0.25


def deepnorm_beta(layers: int) -> float:
    """Gets DeepNorm's initialisation scale for an encoder of ``layers`` layers: (8N)^(-1/4)."""
    return (8.0 * layers) ** -0.25


# --- layers ------------------------------------------------------------------------------


class SquareEmbedding(nn.Module):
    """Turns the compact input into 64 square tokens: a linear projection, then a per-square gain and offset."""

    def __init__(self, width: int) -> None:
        super().__init__()
        # No bias: the per-square offset does its work.
        self.project = nn.Linear(INPUT_PLANES, width, bias=False)
        self.gain = nn.Parameter(torch.ones(SQUARES, width))
        self.offset = nn.Parameter(torch.zeros(SQUARES, width))

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        # [N, 119, 8, 8] -> [N, 64, 119]: token 8 * row + col holds that square's 119 values.
        features = expand_torch(planes, scalars).flatten(2).transpose(1, 2)
        return self.project(features) * self.gain + self.offset


class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention over the 64 squares with Shaw et al.'s relative positions.

    Variant: Shaw et al.'s (2018) key and value terms (a^K_ij, a^V_ij) plus the
    Chessformer paper's query term a^Q_ij, so that e_ij is the product of the
    two position-aware vectors in full (the four terms of the module
    docstring). The vectors belong to ordered pairs of squares (i, j), not to
    clipped offsets j - i as in Shaw et al.'s text: the board is small and its
    edges matter (a knight on a1 differs from one on d4), so each of the
    64 x 64 pairs learns its own.

    Sharing: one set of vectors per layer, of the head width d = embedding /
    heads, shared by all heads (each head still sees them through its own q_i
    and k_j). Per-head vectors would multiply the model's largest tensors by
    the head count: CF-6M (8 layers, 8 heads, d = 32) has 3.1M relative-position
    values this way and 6.8M parameters in all (without the auxiliary heads),
    the paper's size; per head it would have 25M and 29M.

    The term a^Q_ij . a^K_ij does not depend on the position, so it is one
    64 x 64 bias per layer (computed from the parameters every pass).
    """

    def __init__(self, width: int, heads: int, *, beta: float) -> None:
        super().__init__()
        self.heads = heads
        self.head_width = width // heads
        self.query = nn.Linear(width, width, bias=False)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, width)
        self.relative_query = nn.Parameter(torch.empty(SQUARES, SQUARES, self.head_width))
        self.relative_key = nn.Parameter(torch.empty(SQUARES, SQUARES, self.head_width))
        self.relative_value = nn.Parameter(torch.empty(SQUARES, SQUARES, self.head_width))
        nn.init.xavier_normal_(self.query.weight)
        nn.init.xavier_normal_(self.key.weight)
        nn.init.xavier_normal_(self.value.weight, gain=beta)
        nn.init.xavier_normal_(self.out.weight, gain=beta)
        nn.init.zeros_(self.out.bias)
        for table in (self.relative_query, self.relative_key, self.relative_value):
            nn.init.normal_(table, std=RELATIVE_INIT_STD)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """[N, 64, width] -> [N, heads, 64, head_width]."""
        return x.unflatten(-1, (self.heads, self.head_width)).transpose(1, 2)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Gets the attention logits e_ij [N, heads, 64, 64] of tokens ``x`` [N, 64, width]."""
        scale = 1.0 / math.sqrt(self.head_width)
        q = self._split(self.query(x)) * scale  # scaling q scales every term that holds it
        k = self._split(self.key(x))
        n, heads, _, width = q.shape
        relative_query, relative_key = self.relative_query.to(q.dtype), self.relative_key.to(q.dtype)
        logits = q @ k.transpose(-1, -2)  # q_i . k_j
        # The relative terms are batched matrix products over one square, whose
        # results are added in place through a permuted view (no copies of the
        # [N, heads, 64, 64] logits: on a CPU these passes cost as much as the products).
        # q_i . a^K_ij: for each i, [N * heads, d] x [d, 64 j].
        by_query = q.permute(2, 0, 1, 3).reshape(SQUARES, n * heads, width)
        logits += torch.bmm(by_query, relative_key.transpose(1, 2)).view(SQUARES, n, heads, SQUARES).permute(1, 2, 0, 3)
        # a^Q_ij . k_j: for each j, [N * heads, d] x [d, 64 i]. The sum runs over
        # the key's square, so this term arrives transposed: the one strided pass.
        by_key = k.permute(2, 0, 1, 3).reshape(SQUARES, n * heads, width)
        pair_to_key = torch.bmm(by_key, relative_query.permute(1, 2, 0))  # [j, N * heads, i]
        logits.add_(pair_to_key.view(SQUARES, n, heads, SQUARES).permute(1, 2, 3, 0), alpha=scale)
        # a^Q_ij . a^K_ij: the same for every position.
        logits += (relative_query * relative_key).sum(-1) * scale
        return logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.logits(x).softmax(dim=-1)
        v = self._split(self.value(x))
        weights = weights.to(v.dtype)
        n, heads = weights.shape[:2]
        z = weights @ v  # sum_j alpha_ij x_j W^V
        # sum_j alpha_ij a^V_ij: for each i, [N * heads, 64 j] x [64 j, d].
        by_query = weights.permute(2, 0, 1, 3).reshape(SQUARES, n * heads, SQUARES)
        z += torch.bmm(by_query, self.relative_value.to(v.dtype)).view(SQUARES, n, heads, -1).permute(1, 2, 0, 3)
        return self.out(z.transpose(1, 2).flatten(2))


class EncoderLayer(nn.Module):
    """Post-LN encoder layer with DeepNorm: x <- Norm(alpha x + Attention(x)); x <- Norm(alpha x + FFN(x))."""

    def __init__(self, width: int, heads: int, ffn: int, *, alpha: float, beta: float) -> None:
        super().__init__()
        self.alpha = alpha
        self.attention = RelativeSelfAttention(width, heads, beta=beta)
        self.attention_norm = nn.RMSNorm(width, eps=NORM_EPS)
        self.ffn_in = nn.Linear(width, ffn)
        self.ffn_out = nn.Linear(ffn, width)
        self.ffn_norm = nn.RMSNorm(width, eps=NORM_EPS)
        for linear in (self.ffn_in, self.ffn_out):
            nn.init.xavier_normal_(linear.weight, gain=beta)
            nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(self.alpha * x + self.attention(x))
        return self.ffn_norm(self.alpha * x + self.ffn_out(F.mish(self.ffn_in(x))))


class AttentionPolicyHead(nn.Module):
    """From-square queries x to-square keys -> 64 x 64 move logits, plus under-promotion biases -> [N, 4672]."""

    pair_index: torch.Tensor  # buffers (register_buffer below)
    bias_index: torch.Tensor

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.promotion = nn.Linear(width, UNDER_PROMOTION_PIECES, bias=False)
        pair, bias = policy_index_map()
        # Not saved with the weights: the map is fixed and rebuilt with the model.
        self.register_buffer("pair_index", torch.from_numpy(pair.copy()), persistent=False)
        self.register_buffer("bias_index", torch.from_numpy(bias.copy()), persistent=False)

    def move_matrix(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gets the move logits [N, 64, 64] (from, to) and the under-promotion biases [N, 8, 3] (file, piece)."""
        queries, keys = self.query(tokens) * (1.0 / math.sqrt(self.width)), self.key(tokens)
        moves = queries @ keys.transpose(1, 2)
        return moves, self.promotion(keys[:, PROMOTION_RANK])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        moves, promotions = float32_head(self.move_matrix, tokens)  # the logits: float32 under autocast too
        n = tokens.shape[0]
        zero = moves.new_zeros(n, 1)
        source = torch.cat([moves.flatten(1), zero, promotions.flatten(1)], dim=1)  # the map's row layout
        return (source.index_select(1, self.pair_index) + source.index_select(1, self.bias_index)).float()


class ValueHead(nn.Module):
    """Per-square embedding (Mish), flattened, a hidden layer (Mish), then ``outputs`` numbers."""

    def __init__(self, width: int, filters: int, hidden: int, outputs: int) -> None:
        super().__init__()
        self.embed = nn.Linear(width, filters)
        self.hidden = nn.Linear(SQUARES * filters, hidden)
        self.out = nn.Linear(hidden, outputs)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = F.mish(self.embed(tokens)).flatten(1)
        return float32_head(self.out, F.mish(self.hidden(x))).float()


# --- the network -------------------------------------------------------------------------


class Chessformer(nn.Module):
    """The Chessformer: square tokens, DeepNorm encoder layers, an attention policy and a value head.

    Args:
        config: the architecture (``kind`` must be 'chessformer'); kept as
            ``self.config`` and saved with the weights.

    Raises:
        ValueError: ``config.kind`` is not 'chessformer'.
    """

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        if config.kind != "chessformer":
            raise ValueError(f"Chessformer needs network.kind = 'chessformer', got {config.kind!r}")
        self.config = config
        alpha, beta = deepnorm_alpha(config.layers), deepnorm_beta(config.layers)
        self.embedding = SquareEmbedding(config.embedding)
        self.encoder = nn.Sequential(*(EncoderLayer(config.embedding, config.heads, config.ffn, alpha=alpha, beta=beta)
                                       for _ in range(config.layers)))
        self.policy_embedding = nn.Linear(config.embedding, config.policy_filters)
        self.policy = AttentionPolicyHead(config.policy_filters)
        outputs = 3 if config.value_head == "wdl" else 1
        self.value = ValueHead(config.embedding, config.value_filters, config.value_hidden, outputs)
        self.soft_policy = AttentionPolicyHead(config.policy_filters)
        self.q_value = ValueHead(config.embedding, config.value_filters, config.value_hidden, 1)
        self.action_value_embedding: nn.Linear | None = None
        self.action_value_policy: AttentionPolicyHead | None = None  # the 'policy' shape's attention head
        self.action_value_level: ValueHead | None = None  # and its level
        self.action_value: ActionValueHead | None = None
        if config.action_value_head != "none":
            self.action_value = ActionValueHead(config)
            if config.action_value_shape == "policy":
                self.action_value_embedding = nn.Linear(config.embedding, config.policy_filters)
                self.action_value_policy = AttentionPolicyHead(config.policy_filters)
                self.action_value_level = ValueHead(config.embedding, config.value_filters, config.value_hidden, 1)
            else:
                self.action_value_embedding = nn.Linear(config.embedding, 2 * config.action_value_filters)
        # Built last, so that the other layers start from the same random weights with it or without it.
        self.reply_policy = AttentionPolicyHead(config.policy_filters) if config.reply_policy_head else None
        # After the reply head, for the same reason.
        self.moves_left = ValueHead(config.embedding, MOVES_LEFT_FILTERS, MOVES_LEFT_HIDDEN, 1) \
            if config.moves_left_head else None

    def start_action_values_from_policy(self) -> bool:
        """Starts a 'policy'-shaped action-value head from the policy and value heads (a network loaded from
        weights without the head; see alphazero.nn.action_values); False, copying nothing, for any other head."""
        policy, embedding, level = self.action_value_policy, self.action_value_embedding, self.action_value_level
        if policy is None or embedding is None or level is None:
            return False
        embedding.load_state_dict(self.policy_embedding.state_dict())
        policy.load_state_dict(self.policy.state_dict())
        level.embed.load_state_dict(self.value.embed.state_dict())
        level.hidden.load_state_dict(self.value.hidden.state_dict())
        start_level_from_value(level.out, self.value.out, self.config.value_head)
        return True

    def body(self, planes: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        """Gets the encoder's output tokens [N, 64, embedding] for compact positions.

        Raises:
            ValueError: wrong input dtypes or shapes (from planes.expand_torch).
        """
        return self.encoder(self.embedding(planes, scalars))

    def _outputs(self, tokens: torch.Tensor, policy_tokens: torch.Tensor, action_values: bool) -> NetOutput:
        policy = self.policy(policy_tokens)
        out = self.value(tokens)
        if self.config.value_head == "wdl":
            probabilities = out.softmax(dim=1)
            result = NetOutput(policy, probabilities[:, 0] - probabilities[:, 2], out)
        else:
            result = NetOutput(policy, torch.tanh(out[:, 0]), None)
        if self.action_value_embedding is None:
            return result
        if self.action_value_policy is not None and self.action_value_level is not None:
            # [N, 4672] moves' terms, as the policy's logits, plus the position's level
            features = self.action_value_level(tokens) + self.action_value_policy(
                F.mish(self.action_value_embedding(tokens)))
        else:
            features = self.action_value_embedding(tokens)
        return with_action_values(result, self.action_value, features, action_values)

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor, *, action_values: bool = True) -> NetOutput:
        """Evaluates a batch of compact positions (int64 [N, 112], float32 [N, 7]) on the model's device.

        With an action-value head, ``action_values=False`` leaves NetOutput.action_values out (the
        head's features, NetOutput.action_features, come out alone, for the caller to score the moves it needs).

        Raises:
            ValueError: wrong input dtypes or shapes (from planes.expand_torch).
        """
        tokens = self.body(planes, scalars)
        return self._outputs(tokens, F.mish(self.policy_embedding(tokens)), action_values)

    def forward_with_aux(self, planes: torch.Tensor, scalars: torch.Tensor, *, reply_policy: bool = False,
                         moves_left: bool = False) -> tuple[NetOutput, AuxOutput]:
        """Evaluates positions as ``forward(..., action_values=False)`` does (training scores the moves it
        needs), plus the auxiliary heads (one pass through the body); with ``reply_policy``, the reply-policy
        head's logits too (AuxOutput.reply_policy_logits), with ``moves_left`` the plies left (AuxOutput.moves_left).

        Raises:
            ValueError: wrong input dtypes or shapes; ``reply_policy`` or ``moves_left`` without the head.
        """
        tokens = self.body(planes, scalars)
        policy_tokens = F.mish(self.policy_embedding(tokens))
        out = self._outputs(tokens, policy_tokens, False)
        reply = self._reply(policy_tokens) if reply_policy else None
        left = self._moves_left(tokens) if moves_left else None
        aux = AuxOutput(self.soft_policy(policy_tokens), torch.tanh(self.q_value(tokens)[:, 0]), reply, left)
        return out, aux

    def forward_with_reply(self, planes: torch.Tensor, scalars: torch.Tensor) -> tuple[NetOutput, torch.Tensor]:
        """Evaluates positions as ``forward(..., action_values=False)`` does, plus the reply-policy head's logits
        [N, 4672] (one pass through the body).

        Raises:
            ValueError: the network has no reply-policy head (network.reply_policy_head), or wrong inputs.
        """
        tokens = self.body(planes, scalars)
        policy_tokens = F.mish(self.policy_embedding(tokens))
        return self._outputs(tokens, policy_tokens, False), self._reply(policy_tokens)

    def forward_with_training_heads(self, planes: torch.Tensor, scalars: torch.Tensor, *, reply_policy: bool = False,
                                    moves_left: bool = False, soft_policy: bool = False
                                    ) -> tuple[NetOutput, TrainingHeads]:
        """Evaluates positions as ``forward(..., action_values=False)`` does, plus the training-only heads asked
        for (one pass through the body): the reply policy's logits, the plies left, the soft policy's logits
        (the auxiliary head's, which forward_with_aux runs too).

        Raises:
            ValueError: a head asked for that the network has not, or wrong inputs.
        """
        tokens = self.body(planes, scalars)
        policy_tokens = F.mish(self.policy_embedding(tokens))
        heads = TrainingHeads(self._reply(policy_tokens) if reply_policy else None,
                              self._moves_left(tokens) if moves_left else None,
                              self.soft_policy(policy_tokens) if soft_policy else None)
        return self._outputs(tokens, policy_tokens, False), heads

    def _reply(self, policy_tokens: torch.Tensor) -> torch.Tensor:
        if self.reply_policy is None:
            raise ValueError("this network has no reply-policy head (network.reply_policy_head = false)")
        return self.reply_policy(policy_tokens)

    def _moves_left(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.moves_left is None:
            raise ValueError("this network has no moves-left head (network.moves_left_head = false)")
        return moves_left_plies(self.moves_left(tokens))

    def no_weight_decay(self) -> set[str]:
        """Names the parameters a decoupled weight decay leaves alone: the per-square gains and offsets."""
        return {"embedding.gain", "embedding.offset"}
