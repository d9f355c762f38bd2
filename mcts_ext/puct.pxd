# Selection, expansion priors and backup over a Tree (header only, inlined
# into the search loop). They know nothing of games, noise or temperature:
# the constants come in a PuctParams the search fills once from its options.

from libc.math cimport exp, fabs, isfinite, isnan, log, sqrt
from libc.stdint cimport int8_t, int32_t

from mcts_ext.tree cimport NO_NODE, PROVEN_DRAW, PROVEN_LOSS, PROVEN_WIN, UNPROVEN, Tree

cdef enum:
    FPU_REDUCTION = 0    # unvisited child's Q = parent's Q - fpu_value * sqrt(prior mass already visited)
    FPU_ABSOLUTE = 1     # unvisited child's Q = fpu_value
    FPU_ACTION_VALUE = 2 # unvisited child's Q = the head's value of its move (tree.action_value), where the
                         # batch brought one; FPU_REDUCTION's where it did not
    FPU_ACTION_VALUE_REDUCTION = 3  # FPU_ACTION_VALUE's Q less FPU_REDUCTION's reduction, fpu_value * sqrt(prior
                                    # mass already visited): the head's order, the reduction's pessimism

ctypedef struct PuctParams:
    float c_init          # exploration at zero visits
    float c_base          # visits over which exploration grows logarithmically
    int fpu_mode
    float fpu_value
    float virtual_loss    # value charged per in-flight simulation (from the chooser's view)


cdef inline float node_q(const Tree* tree, int32_t node, float virtual_loss) noexcept nogil:
    """Q of the move into `node` for the player who chose it, counting in-flight simulations as losses."""
    cdef int32_t n = tree.visits[node] + tree.in_flight[node]
    # The sum is a double (tree.pxd); the mean is precise in float.
    return <float>((tree.value_sum[node] - virtual_loss * tree.in_flight[node]) / n)


cdef inline float proven_value(int8_t proof) noexcept nogil:
    """Exact value of a proven node for its side to move."""
    if proof == PROVEN_WIN:
        return 1.0
    if proof == PROVEN_LOSS:
        return -1.0
    return 0.0


cdef inline float proven_q(int8_t proof) noexcept nogil:
    """The exact Q of a move into a proven node, for the player who chose it."""
    return -proven_value(proof)


cdef inline float score_head_values(const Tree* tree, int32_t node, float c_sqrt_n, float reduction, bint solver,
                                   int32_t* best, float* best_score, int32_t* best_unvisited) noexcept nogil:
    """select_edge's second pass (FPU_ACTION_VALUE, FPU_ACTION_VALUE_REDUCTION): the unvisited, unproven
    children once more.

    One whose move has a head value is scored with it less `reduction` as its
    Q (from the chooser's view, as node_q), against `best` and `best_score`, ties going
    to the first edge as in the first pass. Returns the highest prior of the
    others (-1 when there are none) and sets `best_unvisited` to the first
    with it: they share the reduction's Q.
    """
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], edge, child
    cdef const float* action_value = tree.action_value
    cdef float unvisited_prior = -1.0, score
    for edge in range(first, first + count):
        child = tree.child[edge]
        if child != NO_NODE and (tree.visits[child] + tree.in_flight[child] > 0
                                 or (solver and tree.proof[child] != UNPROVEN)):
            continue
        if isnan(action_value[edge]):
            if tree.prior[edge] > unvisited_prior:
                unvisited_prior = tree.prior[edge]
                best_unvisited[0] = edge
            continue
        score = action_value[edge] - reduction + c_sqrt_n * tree.prior[edge]
        if score > best_score[0] or (score == best_score[0] and edge < best[0]):
            best_score[0] = score
            best[0] = edge
    return unvisited_prior


cdef inline int32_t select_edge(const Tree* tree, int32_t node, const PuctParams* params,
                                bint solver) noexcept nogil:
    """The edge maximising Q + U (AlphaZero's PUCT); ties go to the first edge.

    One pass over the edges: visited children are scored as they come; every
    unvisited child shares one Q (the first-play urgency), so the best of them
    is the first with the highest prior, scored once the prior mass of the
    visited children is known. With FPU_ACTION_VALUE, once the tree holds head
    values, a second pass (score_head_values) scores each unvisited child
    whose move has one with that value as its Q (less the reduction with
    FPU_ACTION_VALUE_REDUCTION), and the others share the
    reduction's as above (a search without head values skips it, its first
    pass unchanged). With `solver`, a proven child's Q is its exact result
    instead of the mean of its simulations (which may predate the proof).
    """
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node]
    cdef int32_t parent_visits = tree.visits[node] + tree.in_flight[node]
    cdef float c_sqrt_n = (log((1.0 + parent_visits + params.c_base) / params.c_base) + params.c_init) \
        * sqrt(<float>parent_visits)
    cdef float visited_prior = 0.0, best_score = -1e30, unvisited_prior = -1.0, score, fpu, reduction
    cdef int32_t edge, child, n, best = first, best_unvisited = first
    for edge in range(first, first + count):
        child = tree.child[edge]
        n = 0 if child == NO_NODE else tree.visits[child] + tree.in_flight[child]
        if solver and child != NO_NODE and tree.proof[child] != UNPROVEN:
            # A proven child may have no visits yet (a mate seen at its parent's expansion).
            visited_prior += tree.prior[edge] if n > 0 else 0.0
            score = proven_q(tree.proof[child]) + c_sqrt_n * tree.prior[edge] / (1 + n)
            if score > best_score:
                best_score = score
                best = edge
            continue
        if n == 0:
            if tree.prior[edge] > unvisited_prior:
                unvisited_prior = tree.prior[edge]
                best_unvisited = edge
            continue
        visited_prior += tree.prior[edge]
        score = node_q(tree, child, params.virtual_loss) + c_sqrt_n * tree.prior[edge] / (1 + n)
        if score > best_score:
            best_score = score
            best = edge
    if unvisited_prior < 0.0:
        return best
    if params.fpu_mode == FPU_ABSOLUTE:
        fpu = params.fpu_value
    else:
        reduction = params.fpu_value * sqrt(visited_prior)
        if ((params.fpu_mode == FPU_ACTION_VALUE or params.fpu_mode == FPU_ACTION_VALUE_REDUCTION)
                and tree.action_value != NULL):
            # The tree holds head values (a batch brought some): the children with one are scored on their own.
            unvisited_prior = score_head_values(tree, node, c_sqrt_n,
                                                reduction if params.fpu_mode == FPU_ACTION_VALUE_REDUCTION else 0.0,
                                                solver, &best, &best_score, &best_unvisited)
            if unvisited_prior < 0.0:
                return best
        # The node's own value is seen by its parent's mover; its side to move sees the negation.
        fpu = -tree.value_sum[node] / tree.visits[node] if tree.visits[node] > 0 else 0.0
        fpu -= reduction
    score = fpu + c_sqrt_n * unvisited_prior
    if score > best_score or (score == best_score and best_unvisited < best):
        return best_unvisited
    return best


cdef inline int32_t forced_edge(const Tree* tree, int32_t node, double k, bint solver) noexcept nogil:
    """KataGo's forced playouts (Wu 2019, section 3.1): the edge whose child is furthest below its forced
    visits n_forced = sqrt(k * prior * the node's children's visits), among the children that have visits (or
    simulations in flight) and fewer than that; NO_NODE when there is none, and PUCT chooses.

    Only children the search has tried are forced, as KataGo forces them: an
    untried child's n_forced is above 0 for any prior, so forcing those would
    try every legal move. With `solver` a proven child is left to PUCT (its
    value is exact). Ties go to the first edge.
    """
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], edge, child, best = NO_NODE
    cdef double total = 0.0, shortfall, most = 0.0
    for edge in range(first, first + count):
        child = tree.child[edge]
        if child != NO_NODE:
            total += tree.visits[child] + tree.in_flight[child]
    for edge in range(first, first + count):
        child = tree.child[edge]
        if child == NO_NODE or tree.visits[child] + tree.in_flight[child] == 0 or (
                solver and tree.proof[child] != UNPROVEN):
            continue
        shortfall = sqrt(k * tree.prior[edge] * total) - (tree.visits[child] + tree.in_flight[child])
        if shortfall > most:
            most = shortfall
            best = edge
    return best


cdef inline double settled_q(const Tree* tree, int32_t child, bint solver) noexcept nogil:
    """The Q of a visited child once its search is over (no simulation in flight), for the player who chose
    it: a proven child's exact value with `solver`, else the mean of its simulations."""
    if solver and tree.proof[child] != UNPROVEN:
        return proven_q(tree.proof[child])
    return tree.value_sum[child] / tree.visits[child]


cdef inline void prune_forced_visits(const Tree* tree, int32_t node, const PuctParams* params, double k,
                                     bint solver, int* visits) noexcept nogil:
    """KataGo's policy target pruning (Wu 2019, section 3.1): takes back from `visits` (the node's children's
    visit counts, one per edge, as the training target would count them) the forced visits that PUCT would
    not have given.

    c* is the most visited child (ties to the higher prior, then the first
    edge). Every other visited child c gives back one visit at a time, at most
    n_forced(c) = sqrt(k * prior(c) * sum of `visits`) of them, while its PUCT
    score with the visits it keeps, Q(c) + C * prior(c) / (1 + kept), stays at
    most c*'s, Q(c*) + C * prior(c*) / (1 + N(c*)); C = (log((1 + N + c_base) /
    c_base) + c_init) * sqrt(N) of the node's own N, unchanged. Its score grows
    as its visits shrink, so the first visit that would lift it above c*'s
    ends it. A child left with one visit or none is pruned to 0. Computed in
    double after the search (no simulation in flight).
    """
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], i, best = -1, child
    cdef int total = 0, kept
    cdef double parent = tree.visits[node] + tree.in_flight[node], c_sqrt_n, best_score, forced, q, prior
    for i in range(count):
        total += visits[i]
        if visits[i] > 0 and (best < 0 or visits[i] > visits[best] or (
                visits[i] == visits[best] and tree.prior[first + i] > tree.prior[first + best])):
            best = i
    if best < 0:
        return
    c_sqrt_n = (log((1.0 + parent + params.c_base) / params.c_base) + params.c_init) * sqrt(parent)
    best_score = settled_q(tree, tree.child[first + best], solver) \
        + c_sqrt_n * tree.prior[first + best] / (1.0 + visits[best])
    for i in range(count):
        if i == best or visits[i] == 0:
            continue
        child = tree.child[first + i]
        prior = tree.prior[first + i]
        q = settled_q(tree, child, solver)
        forced = sqrt(k * prior * total)
        kept = visits[i]
        while kept > 0 and visits[i] - kept + 1 <= forced and q + c_sqrt_n * prior / kept <= best_score:
            kept -= 1  # the score with kept - 1 visits: Q + C * prior / (1 + kept - 1)
        visits[i] = kept if kept > 1 else 0


cdef inline void add_in_flight(Tree* tree, int32_t node, int32_t delta) noexcept nogil:
    while node != NO_NODE:
        tree.in_flight[node] += delta
        node = tree.parent[node]


cdef inline void backup(Tree* tree, int32_t leaf, float value) noexcept nogil:
    """Adds one simulation's `value` (from the leaf's side to move) up the path to the root."""
    cdef int32_t node = leaf
    cdef float v = -value  # seen by the player who moved into the leaf
    while node != NO_NODE:
        tree.visits[node] += 1
        tree.value_sum[node] += v
        v = -v
        node = tree.parent[node]


cdef inline float legal_logit(const float* logits, const int32_t* indices, int i) noexcept nogil:
    """The logit of the i-th legal move: logits[indices[i]] of a full policy row, or logits[i] of a
    compact row that holds the legal moves' logits only (indices NULL)."""
    return logits[i] if indices == NULL else logits[indices[i]]


cdef inline bint logits_finite(const float* logits, const int32_t* indices, int count) noexcept nogil:
    """Whether the `count` legal moves' logits (see legal_logit) are all finite."""
    cdef int i
    for i in range(count):
        if not isfinite(legal_logit(logits, indices, i)):
            return False
    return True


cdef inline bint action_values_valid(const float* values, const int32_t* indices, int count) noexcept nogil:
    """Whether the `count` legal moves' action values (win probabilities, read as legal_logit reads logits)
    all lie in [0, 1] (NaN does not)."""
    cdef int i
    cdef float p
    for i in range(count):
        p = legal_logit(values, indices, i)
        if not (p >= 0.0 and p <= 1.0):
            return False
    return True


cdef inline float set_action_values(Tree* tree, int32_t node, const float* values,
                                    const int32_t* indices) noexcept nogil:
    """Stores the legal moves' action values (read as legal_logit reads logits) in the node's edges; returns
    the largest |stored value|.

    The head gives p, the win probability of the player to move at `node`
    after the move; that player chooses among the node's edges, and an
    edge's Q is seen from its chooser (node_q), so the edge keeps 2p - 1, on
    the value head's scale [-1, 1]: with a draw as half a win (ChessBench's
    win probability is an expected score), 2p - 1 = P(win) - P(loss).
    """
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], i
    cdef float q, largest = 0.0
    for i in range(count):
        q = 2.0 * legal_logit(values, indices, i) - 1.0
        tree.action_value[first + i] = q
        if fabs(q) > largest:
            largest = fabs(q)
    return largest


cdef inline void set_priors(Tree* tree, int32_t node, const float* logits, const int32_t* indices,
                            float inverse_temperature) noexcept nogil:
    """Softmax of the legal moves' logits times inverse_temperature (see legal_logit; the rest are masked out)
    into the node's edge priors."""
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], i
    cdef float top = -1e30, total = 0.0, p, logit
    for i in range(count):
        logit = legal_logit(logits, indices, i)
        if logit > top:
            top = logit
    for i in range(count):
        # Subtracting the maximum keeps exp() from overflowing; the result is unchanged.
        p = exp((legal_logit(logits, indices, i) - top) * inverse_temperature)
        tree.prior[first + i] = p
        total += p
    for i in range(count):
        tree.prior[first + i] /= total
