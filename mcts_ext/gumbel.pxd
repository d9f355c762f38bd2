# Gumbel AlphaZero over a Tree (header only, inlined into the search loop):
# Danihelka, Guez, Schrittwieser and Silver, "Policy improvement by planning
# with Gumbel", ICLR 2022, as DeepMind's mctx implements it
# (gumbel_muzero_policy). Like puct.pxd it knows nothing of games or slots:
# the constants come in a GumbelParams, the root's per-move state in a
# GumbelRoot that the search owns.
#
# Notation, at one node: N(a) the visits of edge a's child, q(a) its mean
# value for the node's side to move, pi(a) the prior, v the node's raw
# network value. The completed Q is q(a) for a visited edge and, for the
# others, the mixed value
#     (v + sum_b N(b) * sum_{visited b} pi(b) q(b) / sum_{visited b} pi(b)) / (1 + sum_b N(b)),
# and sigma(q) = (c_visit + max_b N(b)) * c_scale * q_hat, where q_hat is the
# completed Q rescaled to [0, 1] (see Q_TREE and Q_NODE). With
# UNVISITED_ACTION_VALUE an unvisited edge whose move has a head value
# (tree.action_value, 2p - 1 for the node's side to move, as q) completes
# with that value instead, and the mixed value stays for the others; the
# head's values then count in Q_TREE's range M too.
#
# Root: k = min(considered, legal moves) moves by Gumbel-Top-k on g + logits,
# then Sequential Halving over them with the whole budget: simulation i goes
# to the move with the highest g + logits + sigma(completed Q) among those
# with exactly considered_visits(k, budget, i) visits (the k best by
# g + logits are the first k to be taken, since unvisited moves share one
# completed Q; with the head's values, the k best by g + logits +
# sigma(head value), as mctx's score_considered would take them). The move
# played is the best by the same score among the most visited. Interior
# nodes: the deterministic argmax_a pi'(a) - N(a) / (1 +
# sum_b N(b)), pi' = softmax(logits + sigma(completed Q)), which pulls the
# visit counts towards the improved policy pi'. The training target is pi'
# at the root. Logits are log(prior): they differ from the network's by a
# constant per node, which neither softmax nor argmax sees.
#
# Batches (leaves_per_game > 1): a simulation whose leaf waits for the
# network counts as a visit of its edges (F(a) in flight, a virtual visit
# without a virtual loss) wherever the selection counts visits: the root's
# simulation index and "exactly r visits", and the interior rule's
# N(a) / (1 + sum_b N(b)); Q and pi' come from completed visits only. Since
# Sequential Halving drops moves at a phase's end by their values, a batch
# never crosses into the next phase while simulations of the last are in
# flight (gumbel_root_edge returns NO_NODE). With one leaf per batch nothing
# is ever in flight, and the search is the one above.

from libc.float cimport FLT_MIN
from libc.math cimport exp, isnan, log
from libc.stdint cimport int32_t

from mcts_ext.position cimport MAX_MOVES
from mcts_ext.rng cimport Rng, rng_uniform
from mcts_ext.tree cimport NO_NODE, ROOT, Tree

cdef enum:
    # q_hat = (q + M) / 2M, M the largest |value| backed up in this move's
    # search (network values of leaves, exact game ends): the smallest range
    # holding every Q of the tree from either player's view, since each Q is
    # a mean of such values, signed. The issue's "min/max of the tree".
    Q_TREE = 0
    # q_hat = (q - min) / (max - min) over the node's completed Qs (mctx).
    Q_NODE = 1

cdef enum:
    # An unvisited edge's completed Q (mcts_ext.params' gumbel_unvisited, in its order):
    UNVISITED_MIXED = 0          # the node's mixed value, one for all (mctx's qtransform_completed_by_mix_value)
    UNVISITED_ACTION_VALUE = 1   # the head's value of its move where the batch brought one, else the mixed value

ctypedef struct GumbelParams:
    int considered          # moves sampled at the root (k = min(considered, legal moves))
    float scale             # scale of the root's Gumbel noise: 1 in self-play, 0 for a deterministic search
    float c_visit           # sigma's visit offset
    float c_scale           # sigma's scale
    int normalisation       # Q_TREE or Q_NODE
    int unvisited           # UNVISITED_MIXED or UNVISITED_ACTION_VALUE

ctypedef struct GumbelRoot:
    float noise[MAX_MOVES]  # g of each root edge, in edge order (all 0 when the scale is 0)
    float value_bound       # M of Q_TREE: the largest |value| backed up since the move's search began

ctypedef struct CompletedQ:
    # One node's statistics behind its completed Qs (completed_q() fills it).
    double visit_sum        # sum_b N(b)
    double mixed            # the completed Q of the unvisited edges
    double top              # the largest completed Q
    double low              # q_hat = (q - low) / span
    double span
    double sigma_scale      # (c_visit + max_b N(b)) * c_scale
    const float* action_value  # the tree's head values when UNVISITED_ACTION_VALUE reads them, else NULL


cdef inline void gumbel_sample(Rng* rng, float* noise, int count, float scale) noexcept nogil:
    """Draws scale * Gumbel(0, 1) = -scale * log(-log(U)) for each of `count` root edges (no draws at scale 0)."""
    cdef int i
    for i in range(count):
        noise[i] = -scale * log(-log(rng_uniform(rng))) if scale > 0.0 else 0.0


cdef inline int considered_visits(int k, int budget, int index, int* phase=NULL) noexcept nogil:
    """The visit count that Sequential Halving gives the root's simulation `index` (0-based) of `budget`.

    Phase after phase, each of the m considered moves gets
    max(1, budget // (ceil(log2 k) * m)) more visits, one round at a time,
    then m halves (never below 2); round r of a phase is m simulations that
    each go to a move with exactly r earlier visits. With k <= 1 the one move
    takes every simulation. O(log) per call: no table, so a budget of
    millions (a timed analysis) costs no memory. `phase`, when given, gets
    the 0-based phase of the simulation.
    """
    cdef int phases = 0, considered = k, visits = 0, start = 0, extra, span, current = 0
    if phase != NULL:
        phase[0] = 0
    if k <= 1:
        return index
    while (1 << phases) < k:
        phases += 1
    while True:
        extra = budget // (phases * considered)
        if extra < 1:
            extra = 1
        span = extra * considered
        if index < start + span:
            if phase != NULL:
                phase[0] = current
            return visits + (index - start) // considered
        start += span
        visits += extra
        considered = max(2, considered // 2)
        current += 1


cdef inline double floored_prior(const Tree* tree, int32_t edge) noexcept nogil:
    # A prior that underflowed to 0 still gives a finite logit and keeps every
    # sum below positive (mctx floors the mixed value's priors the same way).
    return tree.prior[edge] if tree.prior[edge] > FLT_MIN else FLT_MIN


cdef inline bint has_head_value(const CompletedQ* c, int32_t edge) noexcept nogil:
    """Whether the edge completes with the head's value of its move while it has no visits."""
    return c.action_value != NULL and not isnan(c.action_value[edge])


cdef inline bint head_value_range(const Tree* tree, int32_t node, const float* action_value, double* low,
                                  double* high) noexcept nogil:
    """Widens [low, high] to the head's values of the node's unvisited edges; returns whether one of them has
    none (and so completes with the mixed value)."""
    cdef int32_t edge, child
    cdef bint mixed_used = False
    cdef double q
    for edge in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node]):
        child = tree.child[edge]
        if child != NO_NODE and tree.visits[child] > 0:
            continue
        if isnan(action_value[edge]):
            mixed_used = True
            continue
        q = action_value[edge]
        if q < low[0]:
            low[0] = q
        if q > high[0]:
            high[0] = q
    return mixed_used


cdef inline void completed_q(const Tree* tree, int32_t node, const GumbelParams* params, float value_bound,
                             CompletedQ* out) noexcept nogil:
    """Fills `out` from one pass over the node's edges (see the notation above), and a second over the
    unvisited ones when they may complete with the head's values (head_value_range; a search without them
    skips it)."""
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], edge, child
    cdef int n, visited = 0, max_visits = 0
    cdef double q, prior, prior_sum = 0.0, weighted = 0.0, low = 1e300, high = -1e300
    cdef bint mixed_used
    out.visit_sum = 0.0
    out.action_value = tree.action_value if params.unvisited == UNVISITED_ACTION_VALUE else NULL
    for edge in range(first, first + count):
        child = tree.child[edge]
        n = tree.visits[child] if child != NO_NODE else 0
        if n == 0:
            continue
        q = <double>tree.value_sum[child] / n
        prior = floored_prior(tree, edge)
        prior_sum += prior
        weighted += prior * q
        out.visit_sum += n
        if n > max_visits:
            max_visits = n
        if q < low:
            low = q
        if q > high:
            high = q
        visited += 1
    out.mixed = (tree.raw_value[node] + (out.visit_sum * weighted / prior_sum if visited else 0.0)) \
        / (1.0 + out.visit_sum)
    mixed_used = visited < count  # some edge completes with the mixed value
    if out.action_value != NULL and mixed_used:
        mixed_used = head_value_range(tree, node, out.action_value, &low, &high)
    if mixed_used:
        if out.mixed < low:
            low = out.mixed
        if out.mixed > high:
            high = out.mixed
    out.top = high
    if params.normalisation == Q_TREE:
        low = -value_bound
        high = value_bound
    out.low = low
    # A node whose completed Qs are all equal gets q_hat 0 everywhere, as in mctx.
    out.span = high - low if high - low > 1e-8 else 1e-8
    out.sigma_scale = (params.c_visit + max_visits) * params.c_scale


cdef inline double sigma(const CompletedQ* c, double q) noexcept nogil:
    return c.sigma_scale * (q - c.low) / c.span


cdef inline double edge_q(const Tree* tree, int32_t edge, const CompletedQ* c) noexcept nogil:
    """The edge's completed Q."""
    cdef int32_t child = tree.child[edge]
    if child == NO_NODE or tree.visits[child] == 0:
        return c.action_value[edge] if has_head_value(c, edge) else c.mixed
    return <double>tree.value_sum[child] / tree.visits[child]


cdef inline int32_t gumbel_interior_edge(const Tree* tree, int32_t node, const GumbelParams* params,
                                         float value_bound) noexcept nogil:
    """argmax_a pi'(a) - (N(a) + F(a)) / (1 + sum_b N(b) + F(b)); ties go to the first edge.

    pi'(a) = pi(a) w(a) / Z with w = exp(sigma(completed Q) - sigma(top)):
    the softmax of logits + sigma without a log per edge. Every edge without
    visits shares the mixed value, so the best of those with nothing in
    flight either (F(a) = 0) is the first with the highest prior, scored once.
    With the head's values a second pass sorts those edges again: one with a
    value is scored on its own, the others share the mixed value as before
    (a search without them skips it, its first pass unchanged).
    """
    cdef CompletedQ c
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], edge, child, best = first
    cdef int32_t best_unvisited = NO_NODE
    # The edges scored on their own, and their weights: the visited ones (or in flight), then the second
    # pass's unvisited ones with a head value.
    cdef int32_t visited_edges[MAX_MOVES]
    cdef double weights[MAX_MOVES]
    cdef int i, visited = 0, valued = 0
    cdef double top, unvisited_weight, unvisited_prior = 0.0, best_prior = -1.0, total = 0.0, prior
    cdef double score, best_score = -1e300, counted
    completed_q(tree, node, params, value_bound, &c)
    # The penalty's visits: the completed ones and those in flight below the node (it is not pending itself).
    counted = 1.0 + c.visit_sum + tree.in_flight[node]
    top = sigma(&c, c.top)  # subtracting the largest sigma keeps exp() from overflowing
    unvisited_weight = exp(sigma(&c, c.mixed) - top)
    for edge in range(first, first + count):
        child = tree.child[edge]
        prior = floored_prior(tree, edge)
        if child == NO_NODE or (tree.visits[child] == 0 and tree.in_flight[child] == 0):
            unvisited_prior += prior
            if prior > best_prior:
                best_prior = prior
                best_unvisited = edge
            continue
        weights[visited] = prior * exp(sigma(&c, edge_q(tree, edge, &c)) - top)
        total += weights[visited]
        visited_edges[visited] = edge
        visited += 1
    if c.action_value != NULL:
        unvisited_prior = 0.0
        best_prior = -1.0
        best_unvisited = NO_NODE
        for edge in range(first, first + count):
            child = tree.child[edge]
            if child != NO_NODE and (tree.visits[child] != 0 or tree.in_flight[child] != 0):
                continue
            prior = floored_prior(tree, edge)
            if isnan(c.action_value[edge]):
                unvisited_prior += prior
                if prior > best_prior:
                    best_prior = prior
                    best_unvisited = edge
                continue
            weights[visited + valued] = prior * exp(sigma(&c, c.action_value[edge]) - top)
            total += weights[visited + valued]
            visited_edges[visited + valued] = edge
            valued += 1
    total += unvisited_prior * unvisited_weight
    for i in range(visited):
        edge = visited_edges[i]
        child = tree.child[edge]
        score = weights[i] / total - (tree.visits[child] + tree.in_flight[child]) / counted
        if score > best_score:
            best_score = score
            best = edge
    for i in range(visited, visited + valued):
        score = weights[i] / total  # no visits, none in flight
        if score > best_score or (score == best_score and visited_edges[i] < best):
            best_score = score
            best = visited_edges[i]
    if best_unvisited != NO_NODE:
        score = best_prior * unvisited_weight / total
        if score > best_score or (score == best_score and best_unvisited < best):
            best = best_unvisited
    return best


cdef inline int32_t halving_choice(const Tree* tree, const GumbelRoot* root, const CompletedQ* c,
                                   int visits, bint in_flight=False) noexcept nogil:
    """The root edge with exactly `visits` visits (with `in_flight`, counting those waiting in the
    batch) and the highest g + logits + sigma; NO_NODE if none."""
    cdef int32_t first = tree.first_edge[ROOT], edge, child, best = NO_NODE
    cdef int n
    cdef double score, best_score = -1e300
    for edge in range(first, first + tree.edge_count[ROOT]):
        child = tree.child[edge]
        n = 0 if child == NO_NODE else tree.visits[child] + (tree.in_flight[child] if in_flight else 0)
        if n != visits:
            continue
        score = root.noise[edge - first] + log(floored_prior(tree, edge)) + sigma(c, edge_q(tree, edge, c))
        if score > best_score:
            best_score = score
            best = edge
    return best


cdef inline int32_t gumbel_best_edge(const Tree* tree, const GumbelParams* params,
                                     const GumbelRoot* root) noexcept nogil:
    """The move to play: the highest g + logits + sigma among the most visited root edges."""
    cdef CompletedQ c
    cdef int32_t first = tree.first_edge[ROOT], edge, child
    cdef int most = 0
    completed_q(tree, ROOT, params, root.value_bound, &c)
    for edge in range(first, first + tree.edge_count[ROOT]):
        child = tree.child[edge]
        if child != NO_NODE and tree.visits[child] > most:
            most = tree.visits[child]
    return halving_choice(tree, root, &c, most)


cdef inline int32_t gumbel_root_edge(const Tree* tree, const GumbelParams* params, const GumbelRoot* root,
                                     int budget) noexcept nogil:
    """The root edge of the next simulation (Sequential Halving; see considered_visits), or NO_NODE
    when that simulation opens a phase while simulations of the last are still in flight."""
    cdef CompletedQ c
    cdef int k = params.considered if params.considered < tree.edge_count[ROOT] else tree.edge_count[ROOT]
    cdef int32_t edge
    cdef int done_phase, next_phase, visits
    completed_q(tree, ROOT, params, root.value_bound, &c)
    # At the root the children's visits are the simulations done so far; those in flight come next.
    if tree.in_flight[ROOT] > 0:
        considered_visits(k, budget, <int>c.visit_sum, &done_phase)
        visits = considered_visits(k, budget, <int>c.visit_sum + tree.in_flight[ROOT], &next_phase)
        if next_phase != done_phase:
            return NO_NODE
        edge = halving_choice(tree, root, &c, visits, True)
    else:
        edge = halving_choice(tree, root, &c, considered_visits(k, budget, <int>c.visit_sum))
    return edge if edge != NO_NODE else gumbel_best_edge(tree, params, root)


cdef inline void gumbel_improved_policy(const Tree* tree, int32_t node, const GumbelParams* params,
                                        float value_bound, float* out) noexcept nogil:
    """Writes pi' = softmax(logits + sigma(completed Q)) over the node's edges, in edge order."""
    cdef CompletedQ c
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], i
    cdef double top, total = 0.0
    cdef double weights[MAX_MOVES]
    completed_q(tree, node, params, value_bound, &c)
    top = sigma(&c, c.top)
    for i in range(count):
        weights[i] = floored_prior(tree, first + i) * exp(sigma(&c, edge_q(tree, first + i, &c)) - top)
        total += weights[i]
    for i in range(count):
        out[i] = <float>(weights[i] / total)
