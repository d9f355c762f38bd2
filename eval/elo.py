"""Elo arithmetic: match summaries with intervals, and anchored rating fits.

Pure math and numpy; nothing here knows about chess.

- `elo_from_score` / `score_from_elo`: the logistic Elo curve,
  score = 1 / (1 + 10^(-diff / 400)).
- `match_summary`: one head-to-head match (wins, draws, losses) to an Elo
  difference with a 95% interval and the likelihood of superiority.
- `fit_ratings`: many players, many games, some players anchored at known
  ratings (e.g. Stockfish UCI_Elo levels) -> maximum-likelihood ratings with
  95% intervals, using BayesElo's draw model; a player who lost (or won)
  every game against the anchors it met gets a Bound instead of a number
  its games support (`rating_text` prints it: "below 1320").

Example::

    >>> s = match_summary(60, 20, 20)
    >>> round(s.elo), round(s.elo_low), round(s.elo_high)
    (147, 86, 218)
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054
"""Two-sided 95% quantile of the standard normal distribution."""

ELO_PER_NAT = 400.0 / math.log(10.0)
"""Elo points per natural-log unit of odds: f(x) = sigmoid(x / ELO_PER_NAT)."""

_CP_TAIL = 0.025  # the exact binomial bound uses 2.5% in each tail, like Z95


# --- the Elo curve ---------------------------------------------------------


def score_from_elo(diff: float) -> float:
    """Returns the expected score (0..1) of a player `diff` Elo above the opponent."""
    return 1.0 / (1.0 + 10.0 ** (-diff / 400.0))


def elo_from_score(score: float) -> float:
    """Returns the Elo difference that gives an expected `score`; +-inf at 1 and 0.

    Raises ValueError if score is outside [0, 1].
    """
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"a score must lie in [0, 1], got {score!r}")
    if score == 1.0:
        return math.inf
    if score == 0.0:
        return -math.inf
    return 400.0 * math.log10(score / (1.0 - score))


# --- one match ---------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """A head-to-head result from the first player's side.

    `score` is the mean points per game (win 1, draw 1/2), `elo` the matching
    Elo difference, `elo_low..elo_high` its 95% interval, `los` the likelihood
    of superiority. With zero games, `score`, `elo` and both bounds are None and
    `los` is 0.5. A 100% score gives elo = elo_high = +inf and a finite
    elo_low (an exact binomial bound); 0% is the mirror image. See match_summary.
    """

    games: int
    score: float | None
    elo: float | None
    elo_low: float | None
    elo_high: float | None
    los: float


def likelihood_of_superiority(wins: int, losses: int) -> float:
    """Returns LOS = 0.5 * (1 + erf((W - L) / sqrt(2 (W + L)))); 0.5 with no decisive games.

    Draws carry no information on who is stronger, so they do not enter.
    """
    if wins + losses == 0:
        return 0.5
    return 0.5 * (1.0 + math.erf((wins - losses) / math.sqrt(2.0 * (wins + losses))))


def match_summary(wins: int, draws: int, losses: int) -> Summary:
    """Summarises a match: score, Elo difference, its 95% interval, and LOS.

    The interval is the normal approximation on the per-game score: with mean s
    and variance var = (W (1-s)^2 + D (1/2-s)^2 + L s^2) / n, the score lies in
    s +- 1.96 sqrt(var / n), mapped through elo_from_score (a bound that leaves
    [0, 1] becomes +-inf).

    Edge cases, where that variance is zero:
    - zero games: score, elo and bounds are None, LOS 0.5;
    - every game won: elo = elo_high = +inf and elo_low comes from the exact
      (Clopper-Pearson) 97.5% lower bound on the win rate, 0.025^(1/n); every
      game lost is the mirror image;
    - every game drawn: elo 0 with a zero-width interval (the normal
      approximation has nothing to go on; play more games).

    Raises ValueError on negative counts.
    """
    if min(wins, draws, losses) < 0:
        raise ValueError(f"game counts must be non-negative, got +{wins} ={draws} -{losses}")
    n = wins + draws + losses
    los = likelihood_of_superiority(wins, losses)
    if n == 0:
        return Summary(0, None, None, None, None, los)
    score = (wins + 0.5 * draws) / n
    if wins == n:
        low = elo_from_score(_CP_TAIL ** (1.0 / n))
        return Summary(n, score, math.inf, low, math.inf, los)
    if losses == n:
        high = elo_from_score(1.0 - _CP_TAIL ** (1.0 / n))
        return Summary(n, score, -math.inf, -math.inf, high, los)
    var = (wins * (1.0 - score) ** 2 + draws * (0.5 - score) ** 2 + losses * score**2) / n
    half = Z95 * math.sqrt(var / n)
    low = elo_from_score(max(score - half, 0.0))
    high = elo_from_score(min(score + half, 1.0))
    return Summary(n, score, elo_from_score(score), low, high, los)


# --- many players --------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """What the games of a player support when it lost every game against the anchors it met (`side`
    "below" the weakest of them, `elo`) or won every one ("above" the strongest).

    The fit still gives such a player a number (its prior keeps it finite),
    but that number and its interval come from the prior, not the games.
    """

    side: str
    elo: float

    def text(self) -> str:
        """'below 1320' or 'above 800'."""
        return f"{self.side} {self.elo:.0f}"


@dataclass(frozen=True)
class Rating:
    """A fitted rating: `elo` with its 95% interval `low..high`, from `games` games; `bound` (None when the
    games support the number) when every game against the anchors was lost, or every one won.

    Anchors have low == high == elo (they are held fixed).
    """

    elo: float
    low: float
    high: float
    games: int
    bound: Bound | None = None


def rating_text(rating: Rating, *, interval: bool = True) -> str:
    """Writes a rating as its games support it: '1136 (95%: 878..1393)' ('1136' without the interval), or
    its bound ('below 1320') when every game against the anchors was lost or every one won.

    >>> rating_text(Rating(1136.4, 878.0, 1393.2, 40))
    '1136 (95%: 878..1393)'
    >>> rating_text(Rating(900.0, 500.0, 1250.0, 4, Bound("below", 1320)))
    'below 1320'
    """
    if rating.bound is not None:
        return rating.bound.text()
    if not interval or rating.low == rating.high:
        return f"{rating.elo:.0f}"
    return f"{rating.elo:.0f} (95%: {rating.low:.0f}..{rating.high:.0f})"


def anchor_bounds(games: Iterable[tuple[str, str, float]], anchors: Mapping[str, float]) -> dict[str, Bound]:
    """Finds the players whose games against the anchors were all lost or all won, and their bounds.

    A player who lost every game against the anchors it met is below the
    weakest of them; one who won every game is above the strongest. Players
    with no game against an anchor, or with mixed results, get none.

    >>> anchor_bounds([("net", "sf", 0.0), ("net", "sf", 0.0), ("net", "random", 1.0)], {"sf": 1320.0})
    {'net': Bound(side='below', elo=1320.0)}
    """
    met: dict[str, list[tuple[float, float]]] = defaultdict(list)  # player -> (anchor's Elo, player's score)
    for a, b, score in games:
        if b in anchors and a not in anchors:
            met[a].append((anchors[b], score))
        if a in anchors and b not in anchors:
            met[b].append((anchors[a], 1.0 - score))
    bounds = {}
    for player, results in met.items():
        if all(score == 0.0 for _, score in results):
            bounds[player] = Bound("below", min(elo for elo, _ in results))
        elif all(score == 1.0 for _, score in results):
            bounds[player] = Bound("above", max(elo for elo, _ in results))
    return bounds


class Ratings(dict[str, Rating]):
    """The result of fit_ratings: player name -> Rating, plus the fitted `draw_elo`."""

    def __init__(self, ratings: Mapping[str, Rating], draw_elo: float) -> None:
        super().__init__(ratings)
        self.draw_elo = draw_elo


@dataclass
class _Pairs:
    """Games aggregated by pair of players: index arrays and result counts, shape [P]."""

    i: np.ndarray  # [P] int, first player's index
    j: np.ndarray  # [P] int, second player's index
    wins: np.ndarray  # [P] float, wins of i over j
    draws: np.ndarray  # [P] float
    losses: np.ndarray  # [P] float, wins of j over i


@dataclass
class _Terms:
    """A log-likelihood and its derivatives in (delta, theta), per pair, shape [P]."""

    ll: float
    d_delta: np.ndarray
    d_theta: np.ndarray
    h_dd: np.ndarray
    h_tt: np.ndarray
    h_dt: np.ndarray


@dataclass
class _Problem:
    """What the optimizer needs: real games, prior games, and which ratings are free.

    x, the vector of every rating in natural units, has one entry per player
    and a last one for the prior's virtual opponent. `free[k]` is player k's
    slot in the parameter vector, -1 when the rating is fixed (anchors, the
    virtual opponent). When theta (draw_elo in natural units) is fitted it
    takes the last slot.
    """

    games: _Pairs
    prior: _Pairs  # virtual draws of each free player against the virtual opponent
    free: np.ndarray  # [players + 1] int
    fit_theta: bool

    @property
    def n_free(self) -> int:
        return int((self.free >= 0).sum())

    @property
    def size(self) -> int:
        return self.n_free + (1 if self.fit_theta else 0)


# The draw_elo prior: one virtual draw and one virtual decisive game (half a
# win, half a loss) between equal players; alone it puts P(draw) at 1/2, i.e.
# draw_elo = 400 log10(3) = 191. It keeps draw_elo finite and positive when
# the data hold no draws or nothing but draws.
_THETA_PRIOR = _Pairs(np.zeros(1, int), np.zeros(1, int), np.full(1, 0.5), np.ones(1), np.full(1, 0.5))


def _aggregate(
    games: Iterable[tuple[str, str, float]],
) -> tuple[dict[tuple[str, str], list[float]], dict[str, int]]:
    """Counts [wins, draws, losses] per (a, b) pair with a < b, and games per player."""
    counts: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    played: dict[str, int] = defaultdict(int)
    for a, b, score in games:
        if a == b:
            raise ValueError(f"a player cannot play itself: {a!r}")
        if score not in (0.0, 0.5, 1.0):
            raise ValueError(f"a game's score must be 1, 0.5 or 0, got {score!r} for {a!r} vs {b!r}")
        if b < a:
            a, b, score = b, a, 1.0 - score
        counts[(a, b)][{1.0: 0, 0.5: 1, 0.0: 2}[score]] += 1.0
        played[a] += 1
        played[b] += 1
    return counts, played


def _check_connected(
    counts: Mapping[tuple[str, str], list[float]], players: Iterable[str], anchors: Mapping[str, float]
) -> None:
    """Raises ValueError naming the players that no chain of games links to an anchor."""
    neighbours: dict[str, set[str]] = defaultdict(set)
    for a, b in counts:
        neighbours[a].add(b)
        neighbours[b].add(a)
    seen = set(anchors)
    queue = deque(anchors)
    while queue:
        for other in neighbours[queue.popleft()] - seen:
            seen.add(other)
            queue.append(other)
    lost = sorted(set(players) - seen)
    if lost:
        raise ValueError(
            f"no chain of games links {', '.join(map(repr, lost))} to an anchor "
            f"({', '.join(map(repr, sorted(anchors)))}); their ratings are undetermined"
        )


def _build_problem(
    counts: Mapping[tuple[str, str], list[float]],
    players: list[str],
    anchors: Mapping[str, float],
    prior_draws: float,
    fit_theta: bool,
) -> _Problem:
    """Turns pair counts (players indexed in list order) into arrays, with the prior's games.

    The virtual prior opponent gets index len(players).
    """
    index = {p: k for k, p in enumerate(players)}
    free = np.full(len(players) + 1, -1)
    movable = [index[p] for p in players if p not in anchors]
    free[movable] = np.arange(len(movable))
    rows = np.array([(index[a], index[b], *c) for (a, b), c in counts.items()], dtype=float).reshape(-1, 5)
    games = _Pairs(rows[:, 0].astype(int), rows[:, 1].astype(int), rows[:, 2], rows[:, 3], rows[:, 4])
    m = len(movable)
    prior = _Pairs(np.array(movable, int), np.full(m, len(players)), np.zeros(m), np.full(m, prior_draws), np.zeros(m))
    return _Problem(games, prior, free, fit_theta)


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)  # finite for large |x|, unlike log(1 / (1 + exp(-x)))


def _pair_terms(delta: np.ndarray, theta: float, pairs: _Pairs) -> _Terms:
    """Evaluates BayesElo's log-likelihood and its derivatives, natural units, theta > 0.

    P(win) = sigmoid(delta - theta), P(loss) = sigmoid(-delta - theta), and
    P(draw) = sinh(theta) / (2 cosh((theta - delta)/2) cosh((theta + delta)/2)),
    which is 1 - P(win) - P(loss) rewritten to keep its precision when theta
    is small (the subtraction would cancel).
    """
    w, d, lo = pairs.wins, pairs.draws, pairs.losses
    a, b = delta - theta, -delta - theta
    u, v = (theta - delta) / 2.0, (theta + delta) / 2.0
    log_cosh_u = np.logaddexp(u, -u) - math.log(2.0)
    log_cosh_v = np.logaddexp(v, -v) - math.log(2.0)
    ll = (w * _log_sigmoid(a) + lo * _log_sigmoid(b)).sum()
    ll += (d * (math.log(math.sinh(theta) / 2.0) - log_cosh_u - log_cosh_v)).sum()
    pw, pl = 1.0 / (1.0 + np.exp(-a)), 1.0 / (1.0 + np.exp(-b))
    hw, hl = pw * (1.0 - pw), pl * (1.0 - pl)
    tu, tv = np.tanh(u), np.tanh(v)
    su, sv = 0.25 * (1.0 - tu**2), 0.25 * (1.0 - tv**2)
    return _Terms(
        ll=float(ll),
        d_delta=w * (1.0 - pw) - lo * (1.0 - pl) + d * 0.5 * (tu - tv),
        d_theta=-w * (1.0 - pw) - lo * (1.0 - pl) + d * (1.0 / math.tanh(theta) - 0.5 * (tu + tv)),
        h_dd=-w * hw - lo * hl - d * (su + sv),
        h_tt=-w * hw - lo * hl - d * (1.0 / math.sinh(theta) ** 2 + su + sv),
        h_dt=w * hw - lo * hl + d * (su - sv),
    )


def _prior_terms(delta: np.ndarray, pairs: _Pairs) -> _Terms:
    """Evaluates the rating prior: each virtual draw counts as half a win and half a loss.

    That is the plain logistic model, free of draw_elo, so the prior holds a
    rating finite whatever draw_elo does (a virtual draw under the draw model
    would not: with no real losses, draw_elo and the rating could both run off).
    """
    c = pairs.draws
    p, q = 1.0 / (1.0 + np.exp(-delta)), 1.0 / (1.0 + np.exp(delta))
    zero = np.zeros_like(delta)
    ll = float((0.5 * c * (_log_sigmoid(delta) + _log_sigmoid(-delta))).sum())
    return _Terms(ll, 0.5 * c * (q - p), zero, -c * p * q, zero, zero)


def _scatter(grad: np.ndarray, hess: np.ndarray, prob: _Problem, pairs: _Pairs, terms: _Terms) -> None:
    """Adds per-pair derivatives into the gradient and Hessian of the free parameters."""
    k = prob.n_free
    fi, fj = prob.free[pairs.i], prob.free[pairs.j]
    for idx, sign in ((fi, 1.0), (fj, -1.0)):  # d delta / d x_i = +1, d delta / d x_j = -1
        ok = idx >= 0
        np.add.at(grad, idx[ok], sign * terms.d_delta[ok])
        np.add.at(hess, (idx[ok], idx[ok]), terms.h_dd[ok])
        if prob.fit_theta:
            np.add.at(hess, (idx[ok], k), sign * terms.h_dt[ok])
            np.add.at(hess, (k, idx[ok]), sign * terms.h_dt[ok])
    both = (fi >= 0) & (fj >= 0)
    np.add.at(hess, (fi[both], fj[both]), -terms.h_dd[both])
    np.add.at(hess, (fj[both], fi[both]), -terms.h_dd[both])
    if prob.fit_theta:
        grad[k] += terms.d_theta.sum()
        hess[k, k] += terms.h_tt.sum()


def _objective(x: np.ndarray, theta: float, prob: _Problem) -> tuple[float, np.ndarray, np.ndarray]:
    """Returns the log-posterior and its gradient and Hessian in the free parameters."""
    grad = np.zeros(prob.size)
    hess = np.zeros((prob.size, prob.size))
    games = _pair_terms(x[prob.games.i] - x[prob.games.j], theta, prob.games)
    prior = _prior_terms(x[prob.prior.i] - x[prob.prior.j], prob.prior)
    _scatter(grad, hess, prob, prob.games, games)
    _scatter(grad, hess, prob, prob.prior, prior)
    ll = games.ll + prior.ll
    if prob.fit_theta:
        theta_prior = _pair_terms(np.zeros(1), theta, _THETA_PRIOR)
        ll += theta_prior.ll
        grad[-1] += theta_prior.d_theta[0]
        hess[-1, -1] += theta_prior.h_tt[0]
    return ll, grad, hess


def _take_step(x: np.ndarray, theta: float, step: np.ndarray, prob: _Problem) -> tuple[np.ndarray, float]:
    """Returns (x, theta) moved by `step` in the free parameters."""
    nx = x.copy()
    mask = prob.free >= 0
    nx[mask] += step[prob.free[mask]]
    return nx, theta + (float(step[-1]) if prob.fit_theta else 0.0)


def _newton(x: np.ndarray, theta: float, prob: _Problem, max_iter: int) -> tuple[np.ndarray, float]:
    """Maximises the (concave) log-posterior by Newton steps with backtracking.

    The model is log-concave in (ratings, theta): each outcome is the
    probability of an interval under the logistic density, whose log is
    concave in the interval's ends. So Newton converges; backtracking keeps
    theta > 0 and every step uphill. Returns the optimal x and theta.
    """
    if prob.size == 0:
        return x, theta  # every rating is an anchor and draw_elo is given
    ll, grad, hess = _objective(x, theta, prob)
    for _ in range(max_iter):
        step = np.linalg.solve(hess, -grad)
        t = 1.0
        while t > 1e-10:
            nx, nt = _take_step(x, theta, t * step, prob)
            if nt > 0.0:
                nll, ngrad, nhess = _objective(nx, nt, prob)
                if nll >= ll - 1e-12 * abs(ll):
                    break
            t *= 0.5
        else:
            break  # no uphill step left: at the optimum to rounding
        x, theta, ll, grad, hess = nx, nt, nll, ngrad, nhess
        if np.abs(t * step).max() < 1e-10:
            break
    return x, theta


def fit_ratings(
    games: Iterable[tuple[str, str, float]],
    anchors: Mapping[str, float],
    *,
    draw_elo: float | None = None,
    prior_draws: float = 1.0,
    max_iter: int = 100,
) -> Ratings:
    """Fits anchored maximum-likelihood Elo ratings with BayesElo's draw model.

    Each game is (player_a, player_b, score of a: 1, 0.5 or 0). With
    d = elo_a - elo_b and f(x) = 1 / (1 + 10^(-x/400)):
    P(a wins) = f(d - draw_elo), P(b wins) = f(-d - draw_elo), else a draw.
    Colours are not modelled (our matches pair every opening with both).
    `draw_elo` is fitted unless given. Anchor players keep their given rating.

    Priors (BayesElo's priors are virtual draws too):
    - each non-anchor player gets `prior_draws` virtual draws against a virtual
      player rated at the mean of the anchors, each counted as half a win and
      half a loss. Without it a player who won (or lost) every game would get
      an infinite rating; with it the rating is large but finite, and for a
      player with hundreds of games the pull is a few Elo. prior_draws=0 turns
      it off (a perfect score then diverges).
    - a fitted draw_elo gets one virtual draw and one virtual decisive game
      between equal players, so it stays finite with no draws or only draws.

    Intervals are +-1.96 standard errors from the observed Fisher information:
    the inverse of the negative Hessian of the log-posterior (draw_elo
    included) at the optimum. Anchors get a zero-width interval. A player
    who lost (or won) every game against the anchors it met gets a `bound`
    (anchor_bounds): its number then comes from the prior, not the games.

    Example::

        >>> r = fit_ratings([("a", "b", 1.0), ("a", "b", 0.5), ("a", "b", 0.0)], {"b": 1500})
        >>> round(r["a"].elo)
        1500

    Raises ValueError if there are no anchors, draw_elo is not positive, a
    score is not 1/0.5/0, a player plays itself, or some player is not linked
    to an anchor by a chain of games.
    """
    if not anchors:
        raise ValueError("fit_ratings needs at least one anchor (a player with a known rating)")
    if draw_elo is not None and not draw_elo > 0.0:
        raise ValueError(f"draw_elo must be positive, got {draw_elo!r}")
    games = list(games)
    counts, played = _aggregate(games)
    _check_connected(counts, played, anchors)
    players = sorted(set(played) | set(anchors))
    prob = _build_problem(counts, players, anchors, prior_draws, fit_theta=draw_elo is None)
    mean = float(np.mean(list(anchors.values())))
    # Free players start at the anchor mean; the last entry is the virtual opponent.
    x = np.array([anchors.get(p, mean) for p in players] + [mean]) / ELO_PER_NAT
    theta = (100.0 if draw_elo is None else draw_elo) / ELO_PER_NAT
    x, theta = _newton(x, theta, prob, max_iter)
    sd = _standard_errors(x, theta, prob)
    bounds = anchor_bounds(games, anchors)
    out = {}
    for k, p in enumerate(players):
        elo, half = float(x[k] * ELO_PER_NAT), float(Z95 * sd[k] * ELO_PER_NAT)
        out[p] = Rating(elo, elo - half, elo + half, played.get(p, 0), bounds.get(p))
    return Ratings(out, float(theta * ELO_PER_NAT))


def _standard_errors(x: np.ndarray, theta: float, prob: _Problem) -> np.ndarray:
    """Returns each player's standard error (natural units, 0 for anchors) from the inverse Hessian."""
    sd = np.zeros(len(x))
    if prob.n_free:
        _, _, hess = _objective(x, theta, prob)
        var = np.diag(np.linalg.inv(-hess))
        mask = prob.free >= 0
        sd[mask] = np.sqrt(np.maximum(var[prob.free[mask]], 0.0))
    return sd
