# cython: language_level=3
"""Batched PUCT or Gumbel AlphaZero search over many games at once.

A MultiGameSearch holds G games ("slots"), each with its own game stack,
tree and random generator. One step is:

    n = search.gather(planes, scalars, legal_indices, legal_counts, leaf_games)
    logits, values = network(planes[:n], scalars[:n])       # any evaluator
    search.backup(logits, values)

gather() walks every game that still needs simulations down its tree to a
leaf, scores game-ending leaves exactly on the spot, and writes each other
leaf's compact input into row b of the caller's arrays. backup() masks the
illegal moves, softmaxes the legal logits into priors, and backs the values up.
backup_legal() does the same from the legal moves' logits alone (in the
order of gather()'s legal_indices), so a GPU evaluator can gather those few
logits on the device and copy ~30 floats a row to the host instead of 4672.
Both optionally take the action-value head's win probability of each legal
move, which a search reads for children it has not visited when a setting
asks (fpu_mode="action_value" or "action_value_reduction", gumbel_unvisited="action_value").
When a game's root reaches its budget, a self-play search ("autoplay") picks
and plays a move, records a training sample and goes on with the next move;
an analysis search stops and waits to be read (root_stats, best_move).
A search stops sooner when its tree fills its memory (tree_memory_mb): it
keeps what it has, as at its budget, and tree_full() says so.

The algorithm is PUCT (AlphaZero) or Gumbel AlphaZero (gumbel.pxd: Gumbel-Top-k
and Sequential Halving at the root, the deterministic improved-policy
selection inside the tree, the improved policy as the training target).

Both loops run without the GIL over flat arrays; the def methods validate.

Over 600 lines: one extension type whose nogil loops read its C struct
directly, and a Cython class cannot spread its methods over modules; the
pieces that stand alone already live beside it (tree.pxd storage, puct.pxd
and gumbel.pxd selection, encode.pyx inputs, params.py the settings).
"""

import weakref

import numpy as np

from libc.math cimport NAN, fabs, isfinite, isnan, log, pow
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset


from mcts_ext.encode cimport COMPACT_PLANES, NUM_MOVES, NUM_SCALARS, encode_stack, move_index
from mcts_ext.gumbel cimport (Q_NODE, Q_TREE, UNVISITED_ACTION_VALUE, UNVISITED_MIXED, GumbelParams, GumbelRoot,
                              gumbel_best_edge, gumbel_improved_policy, gumbel_interior_edge, gumbel_root_edge,
                              gumbel_sample)
from mcts_ext.memory cimport grow
from mcts_ext.position cimport (CHECKMATE, MAX_MOVES, ONGOING, WHITE, Board, GameStack, Move, Position,
                                format_fen, generate_legal, in_check, make_move, stack_copy, stack_free, stack_init,
                                stack_push, stack_status)
from mcts_ext.puct cimport (FPU_ABSOLUTE, FPU_ACTION_VALUE, FPU_ACTION_VALUE_REDUCTION, FPU_REDUCTION, PuctParams,
                            action_values_valid, add_in_flight, backup as backup_value, forced_edge, logits_finite,
                            proven_value, prune_forced_visits, select_edge, set_action_values, set_priors,
                            settled_q)
from mcts_ext.rng cimport Rng, rng_gamma, rng_seed, rng_uniform
from mcts_ext.tree cimport (MAX_INDEX, NO_NODE, PROVEN_DRAW, PROVEN_LOSS, PROVEN_WIN, ROOT, SUBTREE_DROPPED,
                            UNEXPANDED, UNPROVEN, Tree, tree_add_edges, tree_add_node, tree_bytes, tree_edge_bytes,
                            tree_enable_action_values, tree_free, tree_init, tree_keep_subtree, tree_node_bytes,
                            tree_reset)

from mcts_ext.params import C_INT_MAX, SearchParams, check_resign_threshold, resign_options
from mcts_ext.position import STARTING_FEN, TERMINATIONS, move_to_uci

cdef enum:
    RESIGNATION = 7                  # a termination beyond position.pxd's game statuses

cdef enum:
    # Descents per slot and gather() that may end in an exactly scored game end
    # (or proven node) before gather() returns: a tree whose every line ends
    # the game would otherwise keep gather() from returning until the budget
    # is spent, deaf to stop and deadlines. A few hundred short descents take
    # well under a millisecond.
    MAX_SCORED_DESCENTS = 256

# Search algorithms.
cdef enum:
    PUCT = 0
    GUMBEL = 1

# Slot states.
cdef enum:
    IDLE = 0                         # no game
    SEARCHING = 1                    # wants simulations
    READY = 2                        # analysis: budget reached, waiting to be read
    FINISHED = 3                     # self-play: game over, record waiting to be taken

# Outcomes of one descent.
cdef enum:
    LEAF_NEW = 0                     # an unexpanded leaf for the network
    LEAF_SCORED = 1                  # a game-ending leaf, already backed up
    LEAF_COLLISION = 2               # the leaf is already in this batch (virtual loss mode); `leaf` names it
    LEAF_NO_MEMORY = 3               # the game stack could not grow (MemoryError)
    LEAF_PHASE_END = 4               # Gumbel: the next simulation opens a Sequential Halving phase (see gumbel.pxd)
    LEAF_TREE_FULL = 5               # the leaf needs a node or edges that the tree cannot hold (left unchanged)

BYTES_PER_NODE = tree_node_bytes()
"""The bytes a node takes in a search tree (mcts_ext/tree.pxd's node arrays, from their C types)."""
BYTES_PER_EDGE = tree_edge_bytes(False)
"""The bytes an edge (a legal move of an expanded node) takes."""
BYTES_PER_ACTION_VALUE = tree_edge_bytes(True) - tree_edge_bytes(False)
"""The bytes more an edge takes in a search that keeps the head's action values (reads_action_values)."""
MAX_BATCH_LEAVES = C_INT_MAX // MAX_MOVES
"""The most leaves one batch of a MultiGameSearch holds (games x leaves_per_game): their move indices fit C ints."""
EDGES_PER_NODE = 35.0
"""Legal moves per node that nodes_that_fit() assumes by default: about the average of middlegame positions,
where long analyses spend their nodes (each simulation adds a node with its moves; endgames have fewer)."""
MAX_TREE_INDEX = MAX_INDEX
"""The most nodes, and the most edges, a tree holds (its indices are int32)."""

STATE_NAMES = {IDLE: "idle", SEARCHING: "searching", READY: "ready", FINISHED: "finished"}
PROOF_NAMES = {PROVEN_WIN: "win", PROVEN_DRAW: "draw", PROVEN_LOSS: "loss"}
ALGORITHMS = {"puct": PUCT, "gumbel": GUMBEL}  # mcts_ext.params.ALGORITHMS' names to the C enum
Q_NORMALISATIONS = {"tree": Q_TREE, "node": Q_NODE}
FPU_MODES = {"reduction": FPU_REDUCTION, "absolute": FPU_ABSOLUTE, "action_value": FPU_ACTION_VALUE,
             "action_value_reduction": FPU_ACTION_VALUE_REDUCTION}
GUMBEL_UNVISITED = {"mixed": UNVISITED_MIXED, "action_value": UNVISITED_ACTION_VALUE}
_TERMINATION_NAMES = dict(TERMINATIONS)
_TERMINATION_NAMES[RESIGNATION] = "resignation"

ctypedef struct Options:
    int algorithm                    # PUCT or GUMBEL
    PuctParams puct
    GumbelParams gumbel
    int simulations                  # budget per move (full search)
    int leaves_per_game              # leaves gathered per game and step; >1 uses virtual loss
    float visits_per_leaf            # >0: a game's leaves per step are at most its root's visits / this
    float inverse_policy_temperature # priors = softmax(logits * this)
    bint add_noise                   # Dirichlet noise at the root of full searches
    float dirichlet_alpha
    float noise_weight
    int temperature_plies            # PUCT self-play: plies sampled at `temperature` (move_temperature)
    float temperature                # ... in proportion to visits^(1/temperature); 0: the most visited
    float temperature_endgame        # the temperature after them, to the game's end
    float temperature_halflife       # plies in which the excess over temperature_endgame halves; 0: at once
    float temperature_value_cutoff   # win-probability share below the best move's beyond which no move is sampled
    bint tree_reuse                  # keep the played move's subtree as the next root
    int ply_limit                    # game length (plies) that ends in a draw; 0 for none
    bint autoplay                    # self-play: choose, play and record moves
    bint record                      # keep training samples (self-play)
    bint resign                      # resignation on for games started from now on (a threshold is set)
    double resign_threshold          # root value (mover's view) below which a move counts towards resigning
    int resign_consecutive           # that many moves in a row by one side resign the game
    float resign_disabled_fraction   # games played through regardless, to measure false positives
    float playout_cap_fraction       # >0: only this fraction of moves get the full budget (KataGo)
    int playout_cap_simulations      # budget of the other, cheap moves (no noise, no sample)
    float forced_playouts            # >0 (PUCT): KataGo's forced playouts' k at noisy roots, and the target pruned
    bint solver                      # prove results (mates, forced draws) and search around them
    uint64_t tree_memory_bytes       # the trees' arrays together may take this (split evenly); 0: no limit.
                                     # tree_memory_mb 0: the search's share of the process's default (see
                                     # _share_default_memory), which changes as such searches come and go

ctypedef struct Record:
    # Training samples of one game: one per fully searched move.
    uint64_t* planes                 # [samples * COMPACT_PLANES]
    float* scalars                   # [samples * NUM_SCALARS]
    int16_t* ply                     # [samples] ply of the position in the game
    float* root_value                # [samples] the search's value for the side to move
    float* surprise                  # [samples] KL(target || the root's prior, noised as searched), in nats
    int32_t* policy_start            # [samples + 1] offsets into policy_index / policy_prob
    int16_t* policy_index            # [policy_total] visited legal moves' indices
    float* policy_prob               # [policy_total] their share of the root's visits (root_target)
    float* policy_win                # [policy_total] the mover's win probability after each: (1 + Q) / 2 from
                                     # the search's visits of the move, NaN where it has none
    int samples
    int sample_capacity
    int policy_total
    int policy_capacity
    uint8_t* full_search             # [plies played] 1 when that move had the full budget
    float* move_value                # [searches finished] the root value of each move's search, for its mover
    int move_capacity

ctypedef struct Slot:
    GameStack stack                  # the game so far, plus the simulation's moves above root_length
    int root_length                  # stack length at the root
    Tree tree
    Rng rng
    int state
    int budget                       # simulations for the current move
    int done                         # completed simulations for the current move
    int in_flight                    # leaves of this game in the current batch
    bint full_search                 # this move has the full budget (and gives a sample)
    bint tree_full                   # this move's search ended early: its tree could not grow
    bint noisy                       # this move's root gets Dirichlet noise
    int status                       # termination once FINISHED
    int winner                       # WHITE, BLACK or -1 for a draw
    bint resign_enabled              # False in the games played through to measure false positives
    bint resign                      # this game had a threshold when it started (Options.resign then)
    double resign_threshold          # ... and this one: a game keeps the threshold it started with
    int resign_streak[2]             # consecutive moves each side's value was below the threshold
    int would_resign_ply             # played-through games: first ply a resignation would have come, or -1
    int would_resign_side
    long long moves_played           # moves this slot has played, over all its games
    Record record
    GumbelRoot gumbel                # Gumbel: the root's noise and the tree's value range
    Move root_moves[MAX_MOVES]       # analysis: the only moves this search's root may try (UCI's searchmoves)
    int root_move_count              # ... how many of them; 0: every legal move

ctypedef struct Reuse:
    # Tree reuse (tree_keep_subtree) for all the slots, one copy at a time.
    Tree scratch                     # a kept subtree is copied here, then swapped with the slot's tree
    long long dropped                # subtrees not kept: the copy would not have fit the tree's memory limit
    size_t peak_bytes                # the most a slot's tree, the scratch and the copy's queue took at one copy


cdef void record_free(Record* r) noexcept nogil:
    free(r.planes)
    free(r.scalars)
    free(r.ply)
    free(r.root_value)
    free(r.surprise)
    free(r.policy_start)
    free(r.policy_index)
    free(r.policy_prob)
    free(r.policy_win)
    free(r.full_search)
    free(r.move_value)
    memset(r, 0, sizeof(Record))


cdef int record_reserve(Record* r, int samples, int policy, int moves) noexcept nogil:
    cdef int capacity
    if samples > r.sample_capacity:
        capacity = max(2 * r.sample_capacity, samples, 64)
        if (grow(<void**>&r.planes, capacity, COMPACT_PLANES * sizeof(uint64_t)) < 0
                or grow(<void**>&r.scalars, capacity, NUM_SCALARS * sizeof(float)) < 0
                or grow(<void**>&r.ply, capacity, sizeof(int16_t)) < 0
                or grow(<void**>&r.root_value, capacity, sizeof(float)) < 0
                or grow(<void**>&r.surprise, capacity, sizeof(float)) < 0
                or grow(<void**>&r.policy_start, capacity + 1, sizeof(int32_t)) < 0):
            return -1
        r.sample_capacity = capacity
    if policy > r.policy_capacity:
        capacity = max(2 * r.policy_capacity, policy, 2048)
        if (grow(<void**>&r.policy_index, capacity, sizeof(int16_t)) < 0
                or grow(<void**>&r.policy_prob, capacity, sizeof(float)) < 0
                or grow(<void**>&r.policy_win, capacity, sizeof(float)) < 0):
            return -1
        r.policy_capacity = capacity
    if moves > r.move_capacity:
        capacity = max(2 * r.move_capacity, moves, 128)
        if (grow(<void**>&r.full_search, capacity, sizeof(uint8_t)) < 0
                or grow(<void**>&r.move_value, capacity, sizeof(float)) < 0):
            return -1
        r.move_capacity = capacity
    return 0


cdef inline float terminal_value(int status) noexcept nogil:
    """Exact value of a game-ending position for its side to move."""
    return -1.0 if status == CHECKMATE else 0.0


cdef inline int8_t terminal_proof(int status) noexcept nogil:
    """The proof of a game-ending position, for its side to move."""
    return PROVEN_LOSS if status == CHECKMATE else PROVEN_DRAW


cdef bint prove_from_children(Tree* tree, int32_t node) noexcept nogil:
    """Proves `node` from its children's proofs if they decide it; returns whether they did.

    One child that is a proven loss for its mover makes the node a win (the
    shortest such line); otherwise the node is proven only when every child
    is: a draw if one is drawn, else a loss (the longest line).
    """
    cdef int32_t first = tree.first_edge[node], count = tree.edge_count[node], edge, child
    cdef int shortest_win = -1, longest_loss = -1
    cdef bint every_child_proven = True, draw = False
    for edge in range(first, first + count):
        child = tree.child[edge]
        if child == NO_NODE or tree.proof[child] == UNPROVEN:
            every_child_proven = False
        elif tree.proof[child] == PROVEN_LOSS:
            if shortest_win < 0 or tree.proof_plies[child] < shortest_win:
                shortest_win = tree.proof_plies[child]
        elif tree.proof[child] == PROVEN_DRAW:
            draw = True
        elif tree.proof_plies[child] > longest_loss:
            longest_loss = tree.proof_plies[child]
    if shortest_win >= 0:
        tree.proof[node] = PROVEN_WIN
        tree.proof_plies[node] = <int16_t>min(shortest_win + 1, 32767)
    elif not every_child_proven or count <= 0:
        return False
    elif draw:
        tree.proof[node] = PROVEN_DRAW
        tree.proof_plies[node] = 0
    else:
        tree.proof[node] = PROVEN_LOSS
        tree.proof_plies[node] = <int16_t>min(longest_loss + 1, 32767)
    return True


cdef void prove(Tree* tree, int32_t node, int8_t proof, int plies) noexcept nogil:
    """Records `node`'s proof and proves the ancestors that now follow from it."""
    tree.proof[node] = proof
    tree.proof_plies[node] = <int16_t>plies
    node = tree.parent[node]
    while node != NO_NODE and tree.proof[node] == UNPROVEN and prove_from_children(tree, node):
        node = tree.parent[node]


cdef int32_t mating_move(Tree* tree, int32_t node, const Position* pos) noexcept nogil:
    """The first of the expanded `node`'s edges that checkmates, or NO_NODE.

    Only moves that give check are made twice over, so this costs a few
    microseconds a node; a solver search does it so that a mate in one is
    proven (and reported) at once, not after its edge happens to be visited.
    """
    cdef Move replies[MAX_MOVES]
    cdef Position after
    cdef int32_t first = tree.first_edge[node], edge
    for edge in range(first, first + tree.edge_count[node]):
        make_move(pos, tree.move[edge], &after)
        if in_check(&after) and generate_legal(&after, replies) == 0:
            return edge
    return NO_NODE


cdef inline float root_value(const Tree* tree) noexcept nogil:
    """The search's value of the root position for its side to move."""
    if tree.visits[ROOT] == 0:
        return 0.0
    return <float>(-tree.value_sum[ROOT] / tree.visits[ROOT])


cdef inline void note_leaf_value(Slot* s, int32_t node, float value) noexcept nogil:
    """Keeps a leaf's own value, from the network or a game end (Gumbel's mixed value and Q range read it)."""
    s.tree.raw_value[node] = value
    if fabs(value) > s.gumbel.value_bound:
        s.gumbel.value_bound = fabs(value)


cdef void apply_noise(Slot* s, const Options* o) noexcept nogil:
    """Mixes Dirichlet(alpha) noise into the root priors: (1 - w) p + w eta."""
    cdef Tree* tree = &s.tree
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i
    cdef double noise[MAX_MOVES]
    cdef double total = 0.0
    for i in range(count):
        noise[i] = rng_gamma(&s.rng, o.dirichlet_alpha)
        total += noise[i]
    if total <= 0.0:
        return
    for i in range(count):
        tree.prior[first + i] = (1.0 - o.noise_weight) * tree.prior[first + i] + o.noise_weight * noise[i] / total


cdef int start_move(Slot* s, const Options* o, int32_t keep, Reuse* reuse) noexcept nogil:
    """Sets up the search of the next move; `keep` is the node whose subtree becomes the
    new tree (ROOT keeps the whole tree), or NO_NODE for a fresh one. A subtree whose
    copy would not fit the tree's memory limit is not kept (reuse.dropped counts them)."""
    cdef int result = 0
    if keep == ROOT:
        pass
    elif keep != NO_NODE and s.tree.edge_count[keep] != UNEXPANDED and s.tree.terminal[keep] == ONGOING:
        result = tree_keep_subtree(&s.tree, keep, &reuse.scratch, &reuse.peak_bytes)
        if result == SUBTREE_DROPPED:
            reuse.dropped += 1
    else:
        result = tree_reset(&s.tree)
    if result < 0:
        return -1
    s.full_search = o.playout_cap_fraction <= 0.0 or rng_uniform(&s.rng) < o.playout_cap_fraction
    s.budget = o.simulations if s.full_search else o.playout_cap_simulations
    s.noisy = o.add_noise and s.full_search
    s.gumbel.value_bound = 0.0
    s.done = 0
    s.in_flight = 0
    s.tree_full = False
    s.root_move_count = 0  # a root's moves are limited for one search (set_root_moves)
    s.state = SEARCHING
    if s.noisy and s.tree.edge_count[ROOT] != UNEXPANDED:
        apply_noise(s, o)
    return 0


cdef int keep_root_moves(const Slot* s, Move* moves, int n) noexcept nogil:
    """Keeps, in their order, the moves of ``moves[:n]`` the slot's root may try (set_root_moves); returns how
    many (at least one: set_root_moves takes legal moves only)."""
    cdef int kept = 0, i, j
    for i in range(n):
        for j in range(s.root_move_count):
            if moves[i] == s.root_moves[j]:
                moves[kept] = moves[i]
                kept += 1
                break
    return kept


cdef int descend(Slot* s, const Options* o, Move* moves, int* move_count, int32_t* leaf) noexcept nogil:
    """Walks from the root to a leaf, pushing the moves on the game stack (see LEAF_*).

    A node whose own evaluation waits in the current batch is a collision
    (virtual loss mode): the walk stops there, and `leaf` names it.

    A move into a node already known to end the game (or, with the solver, a
    proven node) is not played on the stack: the node's exact value is backed
    up from where it stands, which keeps revisits cheap however long the
    game's history (every push scans it for repetitions).
    """
    cdef Tree* tree = &s.tree
    cdef int32_t node = ROOT, edge, child
    cdef int status, n
    s.stack.length = s.root_length
    while True:
        if tree.pending[node]:
            # Its evaluation is in this batch: its edges have no priors yet, so
            # nothing below it may be chosen before backup().
            leaf[0] = node
            return LEAF_COLLISION
        if tree.edge_count[node] == UNEXPANDED:
            n = generate_legal(&s.stack.positions[s.stack.length - 1], moves)
            status = stack_status(&s.stack, n, o.ply_limit)
            # The root is searched whenever it has moves (an analysis position may
            # stand on a repetition); below it, game-ending positions are exact.
            if status != ONGOING and (node != ROOT or n == 0):
                tree.terminal[node] = status
                if o.solver:
                    prove(tree, node, terminal_proof(status), 0)
                note_leaf_value(s, node, terminal_value(status))
                backup_value(tree, node, terminal_value(status))
                return LEAF_SCORED
            if node == ROOT and s.root_move_count > 0:
                n = keep_root_moves(s, moves, n)
            if tree_add_edges(tree, node, moves, n) < 0:
                return LEAF_TREE_FULL
            if o.solver and expand_proven(s, node) < 0:
                # Undone (its edges are the last ones), so that no node is left expanded without priors.
                tree.edge_count[node] = UNEXPANDED
                tree.edge_total -= n
                return LEAF_TREE_FULL
            if node != ROOT and tree.proof[node] != UNPROVEN:
                # A mate in one: exact, so the network is not asked.
                note_leaf_value(s, node, proven_value(tree.proof[node]))
                backup_value(tree, node, proven_value(tree.proof[node]))
                return LEAF_SCORED
            tree.pending[node] = 1
            move_count[0] = n
            leaf[0] = node
            return LEAF_NEW
        if o.algorithm == GUMBEL:
            edge = gumbel_root_edge(tree, &o.gumbel, &s.gumbel, s.budget) if node == ROOT else \
                gumbel_interior_edge(tree, node, &o.gumbel, s.gumbel.value_bound)
            if edge == NO_NODE:
                return LEAF_PHASE_END  # the phase's last simulations must be backed up first
        elif o.solver and node == ROOT and tree.proof[ROOT] == PROVEN_WIN:
            edge = best_edge(tree, ROOT)  # the shortest proven win; PUCT might wander off it
        else:
            edge = NO_NODE
            if node == ROOT and s.noisy and o.forced_playouts > 0.0:
                edge = forced_edge(tree, ROOT, o.forced_playouts, o.solver)
            if edge == NO_NODE:
                edge = select_edge(tree, node, &o.puct, o.solver)
        child = tree.child[edge]
        if child == NO_NODE:
            child = tree_add_node(tree, node)
            if child < 0:
                return LEAF_TREE_FULL
            tree.child[edge] = child
        elif tree.terminal[child] != ONGOING:
            backup_value(tree, child, terminal_value(tree.terminal[child]))
            return LEAF_SCORED
        elif o.solver and tree.proof[child] != UNPROVEN:
            backup_value(tree, child, proven_value(tree.proof[child]))
            return LEAF_SCORED
        if stack_push(&s.stack, tree.move[edge]) < 0:
            return LEAF_NO_MEMORY
        node = child


cdef int expand_proven(Slot* s, int32_t node) noexcept nogil:
    """Solver: proves the just-expanded `node` a win if one of its moves mates (-1 when the tree cannot grow)."""
    cdef Tree* tree = &s.tree
    cdef int32_t edge = mating_move(tree, node, &s.stack.positions[s.stack.length - 1]), child
    if edge == NO_NODE:
        return 0
    child = tree_add_node(tree, node)
    if child < 0:
        return -1
    tree.child[edge] = child
    tree.terminal[child] = CHECKMATE
    prove(tree, child, PROVEN_LOSS, 0)
    return 0


cdef int leaf_limit(Slot* s, const Options* o) noexcept nogil:
    """The most leaves a game gathers in this step: leaves_per_game, or with visits_per_leaf (PUCT) its
    root's visits over visits_per_leaf (at least 1) when that is fewer.

    Virtual loss sends a batch's descents to moves the search would not have
    tried yet; in a tree of a few hundred visits a batch of 32 is a tenth of
    the search and turns it breadth-first (in equal-time matches the engine
    with 32 leaves a call lost most games to one leaf a call). Growing the
    batch with the tree keeps that share small.
    """
    cdef double allowed
    if o.visits_per_leaf <= 0.0 or o.leaves_per_game == 1 or o.algorithm == GUMBEL:
        return o.leaves_per_game  # Gumbel's batches follow its Sequential Halving phases instead
    allowed = s.tree.visits[ROOT] / o.visits_per_leaf
    if allowed < 1.0:
        return 1
    return o.leaves_per_game if allowed >= o.leaves_per_game else <int>allowed


cdef enum:
    SAMPLED = -1                     # move_weights: the move is drawn from the weights (edges are >= 0)


cdef double move_temperature(const Options* o, int ply) noexcept nogil:
    """The temperature of PUCT self-play's move choice at `ply` (0: the first move): `temperature` for the
    first temperature_plies plies, then temperature_endgame, at once or by an excess that halves every
    temperature_halflife plies. The twin of mcts_ext.params.SearchSettings.move_temperature."""
    cdef double excess
    if ply < o.temperature_plies:
        return o.temperature
    if o.temperature_halflife <= 0.0:
        return o.temperature_endgame
    excess = <double>o.temperature - o.temperature_endgame
    return o.temperature_endgame + excess * pow(0.5, (ply - o.temperature_plies) / <double>o.temperature_halflife)


cdef double sampling_weights(const Tree* tree, const Options* o, double temperature, double* weights) noexcept nogil:
    """Fills weights[i] for the root's edge first + i with its unnormalised chance of being played at
    `temperature` (> 0), and returns their sum (0 when no child was visited).

    A visited move weighs (visits / most visits)^(1/T): dividing by the most
    visits before the power keeps every weight in [0, 1], where raw visits
    would overflow a double at small temperatures (800^(1/0.005)). lc0's
    value cutoff (GetBestRootChildWithTemperature, src/search/classic/
    search.cc) then weighs 0 any move whose Q lies more than
    2 * temperature_value_cutoff (a win-probability share, Q's scale halved)
    below the Q of the move best_edge picks, the one greedy play would make.
    A cutoff of 1 puts that floor at or below -1, so nothing is excluded.
    """
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i, child
    cdef int32_t best_child = tree.child[best_edge(tree, ROOT)]
    cdef double most = 0.0, floor, total = 0.0, exponent = 1.0 / temperature
    for i in range(count):
        weights[i] = 0.0
        child = tree.child[first + i]
        if child != NO_NODE and tree.visits[child] > most:
            most = tree.visits[child]
    if most == 0.0 or best_child == NO_NODE or tree.visits[best_child] == 0:
        return 0.0
    floor = settled_q(tree, best_child, o.solver) - 2.0 * o.temperature_value_cutoff
    for i in range(count):
        child = tree.child[first + i]
        if child == NO_NODE or tree.visits[child] == 0 or settled_q(tree, child, o.solver) < floor:
            continue
        weights[i] = pow(tree.visits[child] / most, exponent)
        total += weights[i]
    return total


cdef int32_t move_weights(const Slot* s, const Options* o, double* weights, double* total) noexcept nogil:
    """The root edge self-play plays when its choice is certain: a solved root's best (best_edge); Gumbel's
    Sequential Halving choice; PUCT's best at temperature 0. Else SAMPLED, with weights[i] and `total` filled
    by sampling_weights at the ply's move_temperature."""
    cdef const Tree* tree = &s.tree
    cdef double temperature
    if o.solver and tree.proof[ROOT] != UNPROVEN:
        return best_edge(tree, ROOT)  # a solved position: no sampling away from its result
    if o.algorithm == GUMBEL:
        return gumbel_best_edge(tree, &o.gumbel, &s.gumbel)
    temperature = move_temperature(o, s.root_length - 1)
    if temperature <= 0.0:
        return best_edge(tree, ROOT)
    total[0] = sampling_weights(tree, o, temperature, weights)
    return SAMPLED if total[0] > 0.0 else best_edge(tree, ROOT)


cdef int32_t choose_edge(Slot* s, const Options* o) noexcept nogil:
    """The root edge to play: move_weights' certain choice, else one drawn in proportion to its weights (one
    uniform number from the slot's generator, drawn only then: self-play at temperature 0 stays
    deterministic given the seed)."""
    cdef double weights[MAX_MOVES]
    cdef double total = 0.0, target
    cdef int32_t first = s.tree.first_edge[ROOT], edge = move_weights(s, o, weights, &total), i, last = NO_NODE
    if edge != SAMPLED:
        return edge
    target = rng_uniform(&s.rng) * total
    for i in range(s.tree.edge_count[ROOT]):
        if weights[i] > 0.0:
            if target < weights[i]:
                return first + i
            target -= weights[i]
            last = first + i  # rounding at the end of the range falls back to the last weighed edge
    return last


cdef inline int edge_rank(const Tree* tree, int32_t edge) noexcept nogil:
    """2 for a proven win for the player choosing the edge, 0 for a proven loss, else 1."""
    cdef int32_t child = tree.child[edge]
    if child == NO_NODE or tree.proof[child] == UNPROVEN or tree.proof[child] == PROVEN_DRAW:
        return 1
    return 2 if tree.proof[child] == PROVEN_LOSS else 0


cdef bint better_edge(const Tree* tree, int32_t a, int32_t b) noexcept nogil:
    """Whether edge `a` is a better move than edge `b` (see best_edge)."""
    cdef int rank_a = edge_rank(tree, a), rank_b = edge_rank(tree, b)
    cdef int32_t child_a = tree.child[a], child_b = tree.child[b]
    cdef int visits_a, visits_b
    if rank_a != rank_b:
        return rank_a > rank_b
    if rank_a == 2:
        return tree.proof_plies[child_a] < tree.proof_plies[child_b]
    if rank_a == 0:
        return tree.proof_plies[child_a] > tree.proof_plies[child_b]
    visits_a = tree.visits[child_a] if child_a != NO_NODE else 0
    visits_b = tree.visits[child_b] if child_b != NO_NODE else 0
    return visits_a > visits_b or (visits_a == visits_b and tree.prior[a] > tree.prior[b])


cdef int32_t best_edge(const Tree* tree, int32_t node) noexcept nogil:
    """The node's best move: a proven win (the shortest), else the most visited move
    that is not a proven loss, else the longest proven loss; visit ties go to the
    higher prior, then the first edge. Without proofs: the most visited edge."""
    cdef int32_t first = tree.first_edge[node], i, best = first
    for i in range(first + 1, first + tree.edge_count[node]):
        if better_edge(tree, i, best):
            best = i
    return best


cdef void root_target(const Slot* s, const Options* o, float* target) noexcept nogil:
    """The root's training target over its edges: Gumbel's improved policy, PUCT's share of the visits.

    With forced playouts, at a root they applied to (a noisy one), the visits
    are counted after policy target pruning (prune_forced_visits) takes the
    forced ones back; the move played is chosen from the visits as they are.
    """
    cdef const Tree* tree = &s.tree
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i, child
    cdef int total = 0
    cdef int visits[MAX_MOVES]
    if o.algorithm == GUMBEL:
        gumbel_improved_policy(tree, ROOT, &o.gumbel, s.gumbel.value_bound, target)
        return
    for i in range(count):
        child = tree.child[first + i]
        visits[i] = tree.visits[child] if child != NO_NODE else 0
    if s.noisy and o.forced_playouts > 0.0:
        prune_forced_visits(tree, ROOT, &o.puct, o.forced_playouts, o.solver, visits)
    for i in range(count):
        total += visits[i]
    for i in range(count):
        target[i] = <float>visits[i] / total if total > 0 else 0.0


cdef float policy_surprise(const Tree* tree, const float* target) noexcept nogil:
    """KL(target || prior) over the root's edges, in nats: how much the search's training target differs from the
    prior it started from (the prior with the root's noise, as KataGo's policy surprise weighting reads it)."""
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i
    cdef double kl = 0.0, prior
    for i in range(count):
        if target[i] > 0.0:
            prior = tree.prior[first + i] if tree.prior[first + i] > 1e-30 else 1e-30
            kl += target[i] * (log(target[i]) - log(prior))
    return <float>kl if kl > 0.0 else 0.0


cdef int record_sample(Slot* s, const Options* o) noexcept nogil:
    """Appends the root's compact input and its training target over the legal moves to the record."""
    cdef Record* r = &s.record
    cdef Tree* tree = &s.tree
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i, child
    cdef int k = r.samples
    cdef int turn = s.stack.positions[s.root_length - 1].turn
    cdef float target[MAX_MOVES]
    if record_reserve(r, k + 1, r.policy_total + count, 0) < 0:
        return -1
    root_target(s, o, target)
    s.stack.length = s.root_length
    encode_stack(&s.stack, &r.planes[k * COMPACT_PLANES], &r.scalars[k * NUM_SCALARS])
    r.ply[k] = <int16_t>(s.root_length - 1)
    r.root_value[k] = root_value(tree)
    r.surprise[k] = policy_surprise(tree, target)
    if k == 0:
        r.policy_start[0] = 0
    # Every legal move is listed (PUCT's unvisited ones with 0): the learner
    # masks the policy to these moves before its softmax.
    for i in range(count):
        r.policy_index[r.policy_total] = <int16_t>move_index(tree.move[first + i], turn)
        r.policy_prob[r.policy_total] = target[i]
        # The search's value of each move it visited, for the learner's action-value head (selfplay.worker
        # keeps it where the run's network has one).
        child = tree.child[first + i]
        r.policy_win[r.policy_total] = <float>(0.5 + 0.5 * tree.value_sum[child] / tree.visits[child]) \
            if child != NO_NODE and tree.visits[child] > 0 else NAN
        r.policy_total += 1
    r.samples = k + 1
    r.policy_start[k + 1] = r.policy_total
    return 0


cdef void check_resignation(Slot* s, const Options* o, int mover, float value) noexcept nogil:
    if not s.resign:
        return
    # Compared in double, as Python compares a recorded value with a threshold
    # (alphazero.store.resign), so both agree on every game.
    if <double>value < s.resign_threshold:
        s.resign_streak[mover] += 1
    else:
        s.resign_streak[mover] = 0
    if s.resign_streak[mover] < o.resign_consecutive:
        return
    if s.resign_enabled:
        s.status = RESIGNATION
        s.winner = mover ^ 1
        s.state = FINISHED
    elif s.would_resign_ply < 0:
        s.would_resign_ply = s.root_length - 1
        s.would_resign_side = mover


cdef inline void end_search_full(Slot* s) noexcept nogil:
    """The slot's tree cannot grow: the move's search ends with the simulations it has started. Once those in
    the batch are backed up it finishes as at its budget (analysis: ready to read; self-play: plays); the root's
    own evaluation, when in the batch, is not one of them."""
    s.tree_full = True
    s.budget = s.done + s.in_flight - (1 if s.tree.pending[ROOT] else 0)


cdef inline bint solved(const Slot* s, const Options* o) noexcept nogil:
    """Whether an analysis search can stop early: the solver has proven the root's result."""
    return o.solver and not o.autoplay and s.tree.proof[ROOT] != UNPROVEN


cdef int finish_move(Slot* s, const Options* o, Reuse* reuse) noexcept nogil:
    """The root reached its budget: stop (analysis) or play, record and go on (self-play)."""
    cdef Move moves[MAX_MOVES]
    cdef int32_t edge, keep
    cdef int mover, n, status
    cdef float value
    if not o.autoplay:
        s.state = READY
        return 0
    mover = s.stack.positions[s.root_length - 1].turn
    value = root_value(&s.tree)
    if s.full_search and o.record and record_sample(s, o) < 0:
        return -1
    if record_reserve(&s.record, 0, 0, s.root_length) < 0:
        return -1
    # Every move's value, so that Python can tell for ANY threshold whether a
    # side would have resigned (resignation calibration, alphazero.store.resign).
    s.record.move_value[s.root_length - 1] = value
    check_resignation(s, o, mover, value)
    if s.state == FINISHED:
        return 0
    edge = choose_edge(s, o)
    keep = s.tree.child[edge]
    s.record.full_search[s.root_length - 1] = s.full_search
    s.stack.length = s.root_length
    if stack_push(&s.stack, s.tree.move[edge]) < 0:
        return -1
    s.root_length += 1
    s.moves_played += 1
    n = generate_legal(&s.stack.positions[s.root_length - 1], moves)
    status = stack_status(&s.stack, n, o.ply_limit)
    if status != ONGOING:
        s.status = status
        s.winner = mover if status == CHECKMATE else -1
        s.state = FINISHED
        return 0
    return start_move(s, o, keep if o.tree_reuse else NO_NODE, reuse)


cdef class MultiGameSearch:
    """PUCT or Gumbel AlphaZero search over many games at once, for self-play (autoplay) or analysis.

    Built from one mcts_ext.params.SearchParams (checked when it was made;
    every field below is one of its fields) and a seed for the slots' random
    generators: ``MultiGameSearch(games, params, seed=0)``.

    Self-play: every slot starts a game from the initial position (or a FEN),
    plays it to the end with `simulations` per move, and keeps its training
    samples; take_finished() hands back the records. Analysis: set_position()
    loads a position with its history (set_root_moves() then limits its root
    to some moves, UCI's searchmoves); the search stops at the budget and
    root_stats(), best_move() and principal_variation() read the result.

    With `solver=True` the search proves results as it meets game ends (see
    tree.pxd): a proven node is scored exactly and not searched below, a
    proven child's Q is exact, the best move is a proven win when there is one
    (the shortest) and never a proven loss when there is another move, and an
    analysis search stops as soon as its root is proven. proof() reads them.


    algorithm="gumbel" (gumbel.pxd): the root samples k = min(gumbel_considered,
    legal moves) moves by Gumbel-Top-k (noise scale gumbel_scale: default 1 in
    self-play, 0 in analysis, which makes the search deterministic) and spends
    the whole budget on them by Sequential Halving; inner nodes use the
    paper's deterministic selection; sigma(q_hat) = (gumbel_c_visit +
    max_b N(b)) * gumbel_c_scale * q_hat, with q_hat normalised over the tree's
    value range ("tree") or the node's completed Qs ("node", as mctx). The
    move played (and best_move()) is Sequential Halving's choice, not the
    most visited; the recorded target is the improved policy
    softmax(logits + sigma(completed Q)). Dirichlet noise and temperature
    sampling do not apply (the Gumbel noise explores); SearchParams refuses
    add_noise=True or tree_reuse=True with gumbel. With
    leaves_per_game > 1 a leaf in flight counts as a visit in Gumbel's
    selection, and a batch stops at a Sequential Halving phase's end
    (gumbel.pxd). With playout-cap randomisation the cheap moves are Gumbel
    searches of the cheap budget (with noise, without a training sample).

    Forced playouts (PUCT, forced_playouts = k > 0; KataGo, Wu 2019 section
    3.1): at the root of a search with Dirichlet noise (self-play's full
    searches; not the playout cap's cheap ones), a child that has visits but
    fewer than sqrt(k * prior * the root's children's visits) is searched
    before PUCT chooses (puct.pxd forced_edge). The recorded target (and
    improved_policy()) then counts the visits after policy target pruning
    (prune_forced_visits): each child but the most visited gives back what
    forcing gave it beyond the PUCT score of the most visited, and one left
    with a single visit gives back all. The move played is chosen from the
    visits as they are. k = 0 leaves the search as it was.

    Action values: backup() and backup_legal() take, optionally, the
    network's win probability p in [0, 1] of each legal move for the
    leaf's side to move. A search reads them only when a setting asks
    (``reads_action_values``): PUCT with fpu_mode="action_value" values an
    unvisited child at 2p - 1 instead of the first-play reduction (with
    "action_value_reduction", 2p - 1 less the reduction); Gumbel
    with gumbel_unvisited="action_value" completes an unvisited move's Q
    with 2p - 1 instead of the mixed value (root selection and the improved
    policy). Where a batch brought none, both fall back to the default.
    A search that does not read them checks them and keeps nothing.

    Memory: the trees' arrays together take at most tree_memory_mb
    (SearchParams), split evenly between the slots (tree_memory_limit, in
    bytes; bytes_per_node and bytes_per_edge say what a tree holds within
    it, nodes_that_fit() about how many nodes). tree_memory_mb 0 is half
    of the machine's memory for all the process's searches with 0 together,
    split evenly between them, each share changing as such searches are
    made and deleted (a tree already past its smaller share grows no
    further). A slot whose tree cannot grow ends its move's search there,
    as at its budget, with what it has (tree_full() says so): an analysis
    slot turns 'ready' and reads as after any search, instead of raising
    MemoryError. The head's action values count in it (a tree with no room
    for them is full), and so does tree reuse's copy of the kept subtree,
    made beside the tree: a subtree whose copy would not fit is not kept,
    the next search starting afresh (reuse_dropped counts them;
    peak_tree_bytes is the most a tree and its copy took together).

    Raises ValueError for games < 1, TypeError for params that are not a
    SearchParams and, in gather()/backup(), for arrays of the wrong shape or
    non-finite network output (the search is left as it was, so the call can
    be repeated).
    """
    cdef Slot* slots
    cdef int n_slots
    cdef Options options
    cdef Reuse reuse
    cdef bint default_memory         # tree_memory_mb 0: a share of the process's default (_share_default_memory)
    cdef object __weakref__          # for _DEFAULT_MEMORY_SEARCHES
    cdef uint64_t seed
    cdef uint64_t games_started
    cdef readonly int max_batch
    cdef readonly object params      # the SearchParams it was built from
    # the leaves of the batch handed out by the last gather(), waiting for backup()
    cdef int32_t* leaf_slot          # [max_batch]
    cdef int32_t* leaf_node          # [max_batch]
    cdef int32_t* leaf_indices       # [max_batch * MAX_MOVES] legal moves' policy indices
    cdef int32_t* collision_node     # [leaves_per_game] one slot's collisions of the current gather()
    cdef int pending_leaves
    cdef readonly long long total_simulations
    cdef readonly long long total_collisions  # descents that met a leaf already in their batch (see _gather)
    cdef readonly bint reads_action_values    # a setting reads the head's action values (backup keeps them)
    cdef readonly unsigned long long tree_memory_limit  # the bytes each slot's tree may take (0: no limit)

    def __cinit__(self, *args, **kwargs):
        self.slots = NULL
        self.n_slots = 0
        self.leaf_slot = NULL
        self.leaf_node = NULL
        self.collision_node = NULL
        self.leaf_indices = NULL
        self.pending_leaves = 0
        self.default_memory = False
        # An empty scratch (no arrays): tree_keep_subtree gives it the room each copy needs.
        memset(&self.reuse, 0, sizeof(Reuse))

    def __init__(self, int games, params: SearchParams, *, seed: int = 0):
        if games < 1:
            raise ValueError(f"games must be at least 1, got {games}")
        if not isinstance(params, SearchParams):
            raise TypeError(f"MultiGameSearch needs a mcts_ext.params.SearchParams, got {type(params).__name__}")
        self.params = params  # checked when it was made; copied into the C struct below
        # Each leaf of a batch holds MAX_MOVES move indices, counted in C ints: a larger batch would overflow them.
        if games * params.leaves_per_game > MAX_BATCH_LEAVES:
            raise ValueError(f"games x leaves_per_game must be at most {MAX_BATCH_LEAVES:,} leaves a batch, got "
                             f"{games} x {params.leaves_per_game}")
        # Every field from its one definition (mcts_ext.params); Cython refuses a dict that lacks one.
        self.options = params.c_options()
        cdef Options* o = &self.options
        self.seed = <uint64_t>(seed & 0xFFFFFFFFFFFFFFFF)
        self.games_started = 0
        self.total_simulations = 0
        self.total_collisions = 0
        self.reads_action_values = ((o.algorithm == PUCT and (o.puct.fpu_mode == FPU_ACTION_VALUE
                                                             or o.puct.fpu_mode == FPU_ACTION_VALUE_REDUCTION))
                                    or (o.algorithm == GUMBEL and o.gumbel.unvisited == UNVISITED_ACTION_VALUE))
        self.max_batch = games * o.leaves_per_game
        self.slots = <Slot*>malloc(games * sizeof(Slot))
        self.leaf_slot = <int32_t*>malloc(self.max_batch * sizeof(int32_t))
        self.leaf_node = <int32_t*>malloc(self.max_batch * sizeof(int32_t))
        self.leaf_indices = <int32_t*>malloc(self.max_batch * MAX_MOVES * sizeof(int32_t))
        self.collision_node = <int32_t*>malloc(o.leaves_per_game * sizeof(int32_t))
        if (self.slots == NULL or self.leaf_slot == NULL or self.leaf_node == NULL or self.leaf_indices == NULL
                or self.collision_node == NULL):
            raise MemoryError()
        memset(self.slots, 0, games * sizeof(Slot))
        cdef int g
        for g in range(games):
            self.n_slots = g + 1
            if stack_init(&self.slots[g].stack, 256) < 0 or tree_init(&self.slots[g].tree) < 0:
                raise MemoryError()
            self.slots[g].state = IDLE
        if params.tree_memory_mb == 0:
            # The process's default, measured now (params: tree_memory_bytes(0)), shared with its other such searches.
            global _default_memory_bytes
            _default_memory_bytes = o.tree_memory_bytes
            self.default_memory = True
            _DEFAULT_MEMORY_SEARCHES.add(self)
            _share_default_memory()
        else:
            self._set_tree_memory(o.tree_memory_bytes)
        if o.autoplay:
            for g in range(games):
                self.start_game(g)

    def __dealloc__(self):
        cdef int g
        if self.slots != NULL:
            for g in range(self.n_slots):
                stack_free(&self.slots[g].stack)
                tree_free(&self.slots[g].tree)
                record_free(&self.slots[g].record)
            free(self.slots)
        free(self.leaf_slot)
        free(self.leaf_node)
        free(self.leaf_indices)
        free(self.collision_node)
        tree_free(&self.reuse.scratch)
        if self.default_memory:
            # Its share goes back to the others. Its weak reference is already gone; an exception here could
            # only be reported, and at the interpreter's exit the module's names may be gone before it.
            try:
                _share_default_memory()
            except Exception:
                pass

    cdef void _set_tree_memory(self, uint64_t total) noexcept:
        """Lets the search's trees take `total` bytes together (0: no limit): each slot's tree an even share, at
        least a byte (0 being none). A tree already past a smaller share keeps what it has and grows no further."""
        cdef int g
        self.options.tree_memory_bytes = total
        self.tree_memory_limit = total // <uint64_t>self.n_slots
        if total and self.tree_memory_limit == 0:
            self.tree_memory_limit = 1  # 0 would be no limit
        for g in range(self.n_slots):
            self.slots[g].tree.memory_limit = self.tree_memory_limit
        # The scratch only ever holds a copy of a subtree of one of them, counted in that tree's limit.
        self.reuse.scratch.memory_limit = self.tree_memory_limit

    @property
    def reuse_dropped(self) -> int:
        """Kept subtrees (tree reuse) dropped since the search was made, their copy beside the tree not fitting
        the tree's memory limit (tree_memory_limit): the search of that move started afresh."""
        return self.reuse.dropped

    @property
    def peak_tree_bytes(self) -> int:
        """The most that a slot's tree, the copy of its kept subtree and the copy's queue took together at one
        copy (tree reuse) since the search was made, within the tree's limit at the time (tree_memory_limit)
        when there is one; 0 before any copy."""
        return self.reuse.peak_bytes

    @property
    def c_options(self) -> dict:
        """The C ``Options`` struct the search runs with, as a dict of its fields (nested structs as dicts)."""
        return self.options

    # -- slots ---------------------------------------------------------------

    cdef Slot* _slot(self, int slot) except NULL:
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} is outside 0..{self.n_slots - 1}")
        if self.pending_leaves:
            raise RuntimeError("a batch is waiting for backup(); call it before changing slots")
        return &self.slots[slot]

    cdef void _load(self, Slot* s, Board board, int32_t keep=NO_NODE) except *:
        cdef Move moves[MAX_MOVES]
        if stack_copy(&s.stack, &board.stack) < 0:
            raise MemoryError()
        if generate_legal(&s.stack.positions[s.stack.length - 1], moves) == 0:
            raise ValueError(f"the game is over ({board.termination()}): {board.fen()}")
        s.root_length = s.stack.length
        s.status = ONGOING
        s.winner = -1
        s.would_resign_ply = -1
        s.would_resign_side = -1
        s.resign_streak[0] = 0
        s.resign_streak[1] = 0
        s.record.samples = 0
        s.record.policy_total = 0
        rng_seed(&s.rng, self.seed ^ (self.games_started * <uint64_t>0xD1B54A32D192ED03))
        self.games_started += 1
        s.resign_enabled = rng_uniform(&s.rng) >= self.options.resign_disabled_fraction
        s.resign = self.options.resign
        s.resign_threshold = self.options.resign_threshold
        if start_move(s, &self.options, keep, &self.reuse) < 0:
            raise MemoryError()

    def start_game(self, int slot, fen: str = STARTING_FEN) -> None:
        """Starts a new self-play game in `slot` from `fen` (default: the initial position)."""
        cdef Slot* s = self._slot(slot)
        cdef Board board = Board(fen, ply_limit=self.options.ply_limit or None)
        self._load(s, board)

    def set_position(self, int slot, Board board, *, simulations: int | None = None, reuse: bool = False) -> bool:
        """Loads `board` (with its history) into `slot` for a search of one move.

        `simulations` sets this search's budget (default: the search's
        `simulations`). With `reuse`, when `board`'s game continues the game
        the slot searched last (same first position, the same moves up to that
        root, then any moves), the subtree of the moves played since is kept,
        visits and all; otherwise the tree starts afresh. Returns whether a
        subtree was kept.

        Raises ValueError when the position has no legal move or simulations < 1.
        """
        if board is None:
            raise TypeError("set_position needs a Board")
        if simulations is not None and simulations < 1:
            raise ValueError(f"simulations must be at least 1, got {simulations}")
        cdef Slot* s = self._slot(slot)
        cdef int32_t keep = self._reusable_node(s, board) if reuse else NO_NODE
        self._load(s, board, keep)
        if simulations is not None:
            s.budget = simulations
        return keep != NO_NODE and s.tree.edge_count[ROOT] != UNEXPANDED

    def set_root_moves(self, int slot, moves) -> None:
        """Limits the search of `slot`'s root to `moves` (UCI strings: UCI's `go searchmoves`), for this
        search only: the root's other moves are never tried, ranked or played, and the next search's
        set_position keeps nothing of this tree.

        Call it after set_position without reuse, before the search's first batch.

        Raises ValueError: no move, a move not legal at the root, or a root already expanded (a kept tree,
        or a search under way).
        """
        cdef Slot* s = self._slot(slot)
        cdef Move legal[MAX_MOVES]
        if s.state != SEARCHING or s.tree.edge_count[ROOT] != UNEXPANDED:
            raise ValueError("set_root_moves needs a root not searched yet: call it after set_position(reuse=False)")
        cdef int n = generate_legal(&s.stack.positions[s.root_length - 1], legal)
        by_uci = {move_to_uci(legal[i]): legal[i] for i in range(n)}
        chosen = list(dict.fromkeys(moves))
        if not chosen:
            raise ValueError("set_root_moves needs at least one move")
        for uci in chosen:
            if uci not in by_uci:
                raise ValueError(f"{uci!r} is not a legal move at the root")
        for i, uci in enumerate(chosen):
            s.root_moves[i] = by_uci[uci]
        s.root_move_count = len(chosen)

    cdef int32_t _reusable_node(self, Slot* s, Board board):
        """The node of `s`'s tree standing for `board`'s position when `board` continues the
        slot's searched game, else NO_NODE."""
        cdef const GameStack* old = &s.stack
        cdef const GameStack* new = &board.stack
        cdef Tree* tree = &s.tree
        cdef int32_t node = ROOT, edge, found
        cdef int i
        if s.state == IDLE or tree.edge_count[ROOT] == UNEXPANDED or new.length < s.root_length:
            return NO_NODE
        if s.root_move_count > 0:
            return NO_NODE  # its root holds only the moves that search was limited to
        if (old.positions[0].key != new.positions[0].key
                or old.positions[0].halfmove_clock != new.positions[0].halfmove_clock
                or old.positions[0].fullmove_number != new.positions[0].fullmove_number):
            return NO_NODE
        for i in range(1, s.root_length):
            if old.moves[i] != new.moves[i]:
                return NO_NODE
        for i in range(s.root_length, new.length):
            if tree.edge_count[node] <= 0:
                return NO_NODE
            found = NO_NODE
            for edge in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node]):
                if tree.move[edge] == new.moves[i]:
                    found = tree.child[edge]
                    break
            if found == NO_NODE:
                return NO_NODE
            node = found
        return node

    def clear(self, int slot) -> None:
        """Leaves `slot` idle (its game, if any, is dropped)."""
        self._slot(slot).state = IDLE

    def stop(self, int slot) -> None:
        """Ends the current search of `slot` now (analysis: it becomes ready to read)."""
        cdef Slot* s = self._slot(slot)
        if s.state == SEARCHING and s.tree.edge_count[ROOT] != UNEXPANDED:
            s.state = READY

    def state(self, int slot) -> str:
        """'idle', 'searching', 'ready' or 'finished'."""
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} is outside 0..{self.n_slots - 1}")
        return STATE_NAMES[self.slots[slot].state]

    @property
    def games(self) -> int:
        """The number of slots."""
        return self.n_slots

    @property
    def total_moves(self) -> int:
        """Moves played by autoplay in all slots since the search was made."""
        cdef int g
        cdef long long total = 0
        for g in range(self.n_slots):
            total += self.slots[g].moves_played
        return total

    def game_plies(self) -> np.ndarray:
        """Each slot's plies played so far in its game (the ply of the position it searches), int32 [games];
        0 for an idle slot. A sample of the game's record at this ply or later was searched from here on."""
        plies = np.zeros(self.n_slots, dtype=np.int32)
        cdef int[::1] view = plies
        cdef int g
        for g in range(self.n_slots):
            if self.slots[g].state != IDLE:
                view[g] = self.slots[g].root_length - 1
        return plies

    def searching(self) -> int:
        """How many slots still want simulations."""
        cdef int g, count = 0
        for g in range(self.n_slots):
            count += self.slots[g].state == SEARCHING
        return count

    # -- resignation ---------------------------------------------------------

    @property
    def resign_threshold(self) -> float | None:
        """The threshold that games started from now on get (None: they never resign)."""
        return self.options.resign_threshold if self.options.resign else None

    def set_resign_threshold(self, threshold: float | None) -> None:
        """Sets the resignation threshold of the games started from now on; None: they never resign.

        A game in progress keeps the threshold it started with (its record
        says which), so a record's threshold is the one its moves were
        played under. Raises ValueError outside [-1, 1].
        """
        check_resign_threshold(threshold)
        self._set_resign_threshold(threshold)

    cdef void _set_resign_threshold(self, object threshold) except *:
        fields = resign_options(threshold)
        self.options.resign = fields["resign"]
        self.options.resign_threshold = fields["resign_threshold"]

    # -- the batch -----------------------------------------------------------

    def new_batch(self) -> tuple:
        """Arrays sized for this search: planes, scalars, legal_indices, legal_counts, leaf_games."""
        return (np.zeros((self.max_batch, COMPACT_PLANES), dtype=np.uint64),
                np.zeros((self.max_batch, NUM_SCALARS), dtype=np.float32),
                np.zeros((self.max_batch, MAX_MOVES), dtype=np.int32),
                np.zeros(self.max_batch, dtype=np.int32),
                np.zeros(self.max_batch, dtype=np.int32))

    def gather(self, uint64_t[:, ::1] planes not None, float[:, ::1] scalars not None,
               int32_t[:, ::1] legal_indices=None, int32_t[::1] legal_counts=None,
               int32_t[::1] leaf_games=None) -> int:
        """Collects the next leaves of every searching game; returns how many rows it wrote.

        Row b gets the leaf's compact input (planes [B, 112], scalars [B, 7]) and,
        when the arrays are given, its legal moves' policy indices
        (legal_indices [B, 256]; only the first legal_counts[b] are written) and its slot
        (leaf_games [B]). 0 rows with searching() > 0 means every simulation of
        this step ended in a scored game end: call gather() again. One call
        scores at most MAX_SCORED_DESCENTS (256) game ends a slot before it
        returns, so a caller's deadline or stop is heard however the tree looks.
        """
        if self.pending_leaves:
            raise RuntimeError(f"{self.pending_leaves} leaves from the last gather() wait for backup()")
        _check_rows(planes, COMPACT_PLANES, self.max_batch, "planes")
        _check_rows(scalars, NUM_SCALARS, self.max_batch, "scalars")
        if legal_indices is not None:
            _check_rows(legal_indices, MAX_MOVES, self.max_batch, "legal_indices")
        if legal_counts is not None and legal_counts.shape[0] < self.max_batch:
            raise ValueError(f"legal_counts needs {self.max_batch} rows, got {legal_counts.shape[0]}")
        if leaf_games is not None and leaf_games.shape[0] < self.max_batch:
            raise ValueError(f"leaf_games needs {self.max_batch} rows, got {leaf_games.shape[0]}")
        cdef int rows, g
        cdef bint out_of_memory = False
        with nogil:
            rows = self._gather(&planes[0, 0], &scalars[0, 0], &out_of_memory)
        if out_of_memory:
            raise MemoryError("the search ran out of memory")
        cdef int count
        for g in range(rows):
            count = self.slots[self.leaf_slot[g]].tree.edge_count[self.leaf_node[g]]
            if legal_counts is not None:
                legal_counts[g] = count
            if legal_indices is not None:
                memcpy(&legal_indices[g, 0], &self.leaf_indices[g * MAX_MOVES], count * sizeof(int32_t))
            if leaf_games is not None:
                leaf_games[g] = self.leaf_slot[g]
        self.pending_leaves = rows
        return rows

    cdef int _gather(self, uint64_t* planes, float* scalars, bint* out_of_memory) noexcept nogil:
        """Descends each searching slot up to leaves_per_game times; returns the rows written.

        With leaves_per_game > 1 each leaf charges virtual loss (add_in_flight)
        to its path until backup(), so the next descent looks elsewhere. A
        descent that ends on a leaf already in the batch (a collision) adds no
        row: as lc0 does, it charges virtual loss to its path too, so that the
        next descents avoid it, and gathering goes on; after at most
        leaves_per_game collisions the slot's gathering stops, and its
        collisions' virtual loss is taken back before gather() returns
        (Gumbel, whose selection is deterministic and counts visits, stops at
        the first collision, and at a Sequential Halving phase's end). So the
        rows of one gather() are distinct nodes (distinct game histories), and
        collisions never count as visits.
        """
        cdef Move moves[MAX_MOVES]
        cdef int rows = 0, g, added, scored, collisions, outcome, count, i, turn
        cdef int32_t leaf
        cdef Slot* s
        cdef Options* o = &self.options
        for g in range(self.n_slots):
            s = &self.slots[g]
            added = 0
            scored = 0
            collisions = 0
            while s.state == SEARCHING:
                if s.done >= s.budget:
                    if s.in_flight > 0:
                        break  # the rest of this move's simulations are in the batch
                    if finish_move(s, o, &self.reuse) < 0:
                        out_of_memory[0] = True
                        break
                    continue
                if (added >= leaf_limit(s, o) or s.done + s.in_flight >= s.budget or scored == MAX_SCORED_DESCENTS
                        or collisions == o.leaves_per_game):
                    break
                outcome = descend(s, o, moves, &count, &leaf)
                if outcome == LEAF_NO_MEMORY:
                    out_of_memory[0] = True
                    break
                if outcome == LEAF_TREE_FULL:
                    if s.tree.edge_count[ROOT] == UNEXPANDED:
                        out_of_memory[0] = True  # not even the root's moves fit: there is nothing to answer with
                        break
                    end_search_full(s)
                    continue
                if outcome == LEAF_PHASE_END:
                    break
                if outcome == LEAF_COLLISION and o.algorithm == GUMBEL:
                    break  # Gumbel's selection is deterministic: the next descent would collide again
                if outcome == LEAF_COLLISION:
                    add_in_flight(&s.tree, leaf, 1)
                    self.collision_node[collisions] = leaf
                    collisions += 1
                    if leaf == ROOT:
                        break  # the root waits for its evaluation: every descent would end there
                    continue
                if outcome == LEAF_SCORED:
                    s.done += 1
                    scored += 1
                    self.total_simulations += 1
                    if solved(s, o):
                        s.state = READY
                    continue
                encode_stack(&s.stack, planes + rows * COMPACT_PLANES, scalars + rows * NUM_SCALARS)
                turn = s.stack.positions[s.stack.length - 1].turn
                for i in range(count):
                    self.leaf_indices[rows * MAX_MOVES + i] = move_index(moves[i], turn)
                self.leaf_slot[rows] = g
                self.leaf_node[rows] = leaf
                if o.leaves_per_game > 1:
                    add_in_flight(&s.tree, leaf, 1)
                s.in_flight += 1
                added += 1
                rows += 1
                if solved(s, o):
                    s.state = READY  # the root was proven at its expansion (a mate in one)
            for i in range(collisions):
                add_in_flight(&s.tree, self.collision_node[i], -1)
            self.total_collisions += collisions
            s.stack.length = s.root_length
            if out_of_memory[0]:
                return rows
        return rows

    def batch_paths(self) -> list:
        """The leaves of the batch waiting for backup(), in row order, as (slot, moves from the root in UCI).

        For inspection and tests: the rows of one gather() are distinct nodes,
        none below another (see _gather). Empty when no batch waits.
        """
        cdef int b
        cdef int32_t node, parent, edge
        cdef Tree* tree
        paths = []
        for b in range(self.pending_leaves):
            tree = &self.slots[self.leaf_slot[b]].tree
            node = self.leaf_node[b]
            moves = []
            while node != ROOT:
                parent = tree.parent[node]
                for edge in range(tree.first_edge[parent], tree.first_edge[parent] + tree.edge_count[parent]):
                    if tree.child[edge] == node:
                        moves.append(move_to_uci(tree.move[edge]))
                        break
                node = parent
            paths.append((self.leaf_slot[b], moves[::-1]))
        return paths

    def in_flight(self, int slot) -> int:
        """Virtual-loss simulations through the slot's root: its leaves in the batch waiting for backup()
        when leaves_per_game > 1 (collisions are taken back before gather() returns), else 0."""
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} is outside 0..{self.n_slots - 1}")
        if self.slots[slot].state == IDLE:
            return 0
        return self.slots[slot].tree.in_flight[ROOT]

    def backup(self, const float[:, ::1] policy_logits not None, const float[::1] values not None,
               const float[:, ::1] action_values=None) -> None:
        """Hands back the network's output for the last gather()'s rows.

        policy_logits: float32 [B, 4672] (any values at illegal moves; they are
        masked out); values: float32 [B] in [-1, 1] for each leaf's side to move;
        action_values (optional): float32 [B, 4672] indexed like the logits,
        each legal move's win probability in [0, 1] for the leaf's side to
        move after that move (the action-value head; any values at illegal
        moves). Kept only when a setting reads them (reads_action_values).
        Raises ValueError on a shape mismatch, a NaN/inf among the values or
        the legal moves' logits, or a legal move's action value that is not a
        number in [0, 1], before changing anything.
        """
        cdef int rows = self.pending_leaves
        if policy_logits.shape[0] != rows or policy_logits.shape[1] != NUM_MOVES or values.shape[0] != rows:
            raise ValueError(f"expected policy_logits [{rows}, {NUM_MOVES}] and values [{rows}] for the "
                             f"{rows} leaves of the last gather(), got [{policy_logits.shape[0]}, "
                             f"{policy_logits.shape[1]}] and [{values.shape[0]}]")
        if action_values is not None and (action_values.shape[0] != rows or action_values.shape[1] != NUM_MOVES):
            raise ValueError(f"expected action_values [{rows}, {NUM_MOVES}] for the {rows} leaves of the last "
                             f"gather(), got [{action_values.shape[0]}, {action_values.shape[1]}]")
        cdef const float* av = &action_values[0, 0] if action_values is not None and rows else NULL
        self._check_output(&policy_logits[0, 0] if rows else NULL, NUM_MOVES, False, values)
        self._check_action_values(av, NUM_MOVES, False)
        self._backup_checked(&policy_logits[0, 0] if rows else NULL, NUM_MOVES, False, values, av, NUM_MOVES)

    def backup_legal(self, const float[:, ::1] legal_logits not None, const float[::1] values not None,
                     const float[:, ::1] legal_action_values=None) -> None:
        """Hands back the network's output for the last gather()'s rows, as the legal moves' logits only.

        legal_logits: float32 [B, W]; legal_logits[b, i] is the logit of the
        i-th move of row b as gather() listed it in legal_indices[b, i]. Only
        the first legal_counts[b] columns of row b are read, so W may be any
        width that holds the longest row (at most 256 = MAX_MOVES is ever
        needed) and the columns beyond a row's count may hold anything.
        values: as in backup(). Gives exactly the priors backup() gives for
        full logits with the same values at the legal moves.
        legal_action_values (optional): float32 [B, W'], the legal moves'
        win probabilities (see backup()) in the same order, W' (which need
        not be W) holding the longest row.

        Raises ValueError on a shape mismatch, a row longer than W (or W'), a
        NaN/inf among the values or the read logits, or a read action value
        that is not a number in [0, 1], before changing anything.
        """
        cdef int rows = self.pending_leaves, width = legal_logits.shape[1], b, count
        cdef int av_width = legal_action_values.shape[1] if legal_action_values is not None else 0
        if legal_logits.shape[0] != rows or values.shape[0] != rows:
            raise ValueError(f"expected legal_logits [{rows}, W] and values [{rows}] for the {rows} leaves "
                             f"of the last gather(), got [{legal_logits.shape[0]}, {width}] and [{values.shape[0]}]")
        if legal_action_values is not None and legal_action_values.shape[0] != rows:
            raise ValueError(f"expected legal_action_values [{rows}, W] for the {rows} leaves of the last "
                             f"gather(), got [{legal_action_values.shape[0]}, {av_width}]")
        for b in range(rows):
            count = self.slots[self.leaf_slot[b]].tree.edge_count[self.leaf_node[b]]
            if count > width:
                raise ValueError(f"legal_logits has {width} columns but row {b} has {count} legal moves")
            if legal_action_values is not None and count > av_width:
                raise ValueError(f"legal_action_values has {av_width} columns but row {b} has {count} legal moves")
        cdef const float* av = &legal_action_values[0, 0] if legal_action_values is not None and rows else NULL
        self._check_output(&legal_logits[0, 0] if rows else NULL, width, True, values)
        self._check_action_values(av, av_width, True)
        self._backup_checked(&legal_logits[0, 0] if rows else NULL, width, True, values, av, av_width)

    cdef void _check_output(self, const float* logits, int width, bint compact, const float[::1] values) except *:
        """Raises ValueError for a non-finite value or legal move's logit among the pending rows."""
        cdef int b
        for b in range(self.pending_leaves):
            if not isfinite(values[b]):
                raise ValueError(f"the network returned a non-finite value ({values[b]}) for row {b}")
            if not logits_finite(logits + <size_t>b * width, NULL if compact else &self.leaf_indices[b * MAX_MOVES],
                                 self.slots[self.leaf_slot[b]].tree.edge_count[self.leaf_node[b]]):
                raise ValueError(f"the network returned non-finite policy logits for a legal move in row {b}")

    cdef void _check_action_values(self, const float* action_values, int width, bint compact) except *:
        """Raises ValueError for a legal move's action value that is not a number in [0, 1] (NULL: none given)."""
        cdef int b
        if action_values == NULL:
            return
        for b in range(self.pending_leaves):
            if not action_values_valid(action_values + <size_t>b * width,
                                       NULL if compact else &self.leaf_indices[b * MAX_MOVES],
                                       self.slots[self.leaf_slot[b]].tree.edge_count[self.leaf_node[b]]):
                raise ValueError(f"the network returned an action value outside [0, 1] (or not a number) for a "
                                 f"legal move in row {b}")

    cdef void _backup_checked(self, const float* logits, int width, bint compact, const float[::1] values,
                              const float* action_values, int action_width) except *:
        cdef int rows = self.pending_leaves, b
        cdef bint out_of_memory = False
        cdef Slot* s
        if not self.reads_action_values:
            action_values = NULL  # checked, and read by nothing: the tree keeps none
        elif action_values != NULL:
            # Before anything changes: the trees that first get values get their array (all NaN) now. One with no
            # room for them (its memory limit, or malloc) is full: its move's search ends with what it has, and
            # _backup skips their values.
            for b in range(rows):
                s = &self.slots[self.leaf_slot[b]]
                if tree_enable_action_values(&s.tree) < 0:
                    end_search_full(s)
        if rows:
            with nogil:
                self._backup(logits, width, compact, &values[0], action_values, action_width, rows, &out_of_memory)
        self.pending_leaves = 0
        if out_of_memory:
            raise MemoryError("the search ran out of memory")

    cdef void _backup(self, const float* logits, int width, bint compact, const float* values,
                      const float* action_values, int action_width, int rows, bint* out_of_memory) noexcept nogil:
        """Backs up `rows` leaves; row b's logits start at logits + b * width, compact (legal moves only) or full,
        and its action values (when not NULL) at action_values + b * action_width, the same way."""
        cdef int b
        cdef int32_t node
        cdef float value, largest
        cdef Slot* s
        cdef Options* o = &self.options
        if action_values != NULL:
            # A loop of its own, so that the one below stays as it is for a search without them.
            for b in range(rows):
                s = &self.slots[self.leaf_slot[b]]
                if s.tree.action_value == NULL:
                    continue  # no room for them (_backup_checked): the tree is full
                largest = set_action_values(&s.tree, self.leaf_node[b], action_values + <size_t>b * action_width,
                                            NULL if compact else &self.leaf_indices[b * MAX_MOVES])
                # Gumbel's completed Qs now hold these values: Q_TREE's range must hold them too.
                if largest > s.gumbel.value_bound:
                    s.gumbel.value_bound = largest
        for b in range(rows):
            s = &self.slots[self.leaf_slot[b]]
            node = self.leaf_node[b]
            set_priors(&s.tree, node, logits + <size_t>b * width, NULL if compact else &self.leaf_indices[b * MAX_MOVES],
                       o.inverse_policy_temperature)
            s.tree.pending[node] = 0
            if o.leaves_per_game > 1:
                add_in_flight(&s.tree, node, -1)
            value = values[b]
            if value > 1.0:
                value = 1.0
            elif value < -1.0:
                value = -1.0
            note_leaf_value(s, node, value)
            backup_value(&s.tree, node, value)
            s.in_flight -= 1
            if node == ROOT:
                # The root's own evaluation is not one of the move's simulations:
                # the root's children's visits add up to the budget.
                if s.noisy:
                    apply_noise(s, o)
                elif o.algorithm == GUMBEL:
                    gumbel_sample(&s.rng, s.gumbel.noise, s.tree.edge_count[ROOT], o.gumbel.scale)
            else:
                s.done += 1
                self.total_simulations += 1
        for b in range(rows):
            s = &self.slots[self.leaf_slot[b]]
            if s.state == SEARCHING and s.done >= s.budget and s.in_flight == 0:
                if finish_move(s, o, &self.reuse) < 0:
                    out_of_memory[0] = True
                    return

    # -- reading results -----------------------------------------------------

    cdef Slot* _readable(self, int slot) except NULL:
        cdef Slot* s = self._slot(slot)
        if s.state == IDLE or s.tree.edge_count[ROOT] == UNEXPANDED:
            raise ValueError(f"slot {slot} has no searched position")
        return s

    def root_stats(self, int slot) -> list:
        """(uci, policy index, visits, Q for the side to move or None, prior) for each legal move."""
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t first = tree.first_edge[ROOT], i, child
        cdef int turn = s.stack.positions[s.root_length - 1].turn
        stats = []
        for i in range(first, first + tree.edge_count[ROOT]):
            child = tree.child[i]
            visits = tree.visits[child] if child != NO_NODE else 0
            q = tree.value_sum[child] / visits if visits > 0 else None
            stats.append((move_to_uci(tree.move[i]), move_index(tree.move[i], turn), visits, q, tree.prior[i]))
        return stats

    def root_value(self, int slot) -> float:
        """The search's value of the position for its side to move, in [-1, 1]."""
        return root_value(&self._readable(slot).tree)

    def simulations(self, int slot) -> int:
        """Simulations completed for the slot's current move."""
        return self._slot(slot).done

    # -- the tree's memory ---------------------------------------------------

    def tree_full(self, int slot) -> bool:
        """Whether the slot's current search ended before its budget because its tree could not grow: the
        tree reached its share of tree_memory_mb (tree_memory_limit; the action values a search keeps count in
        it), the 2^31 nodes or edges its int32 indices address, or malloc failed.

        The search then stops as at its budget, with what it has: an analysis
        slot turns 'ready', its best move, visits and principal variation
        readable as after any search (a self-play slot plays its move). It
        does not grow the tree again before the next set_position(). False for
        an idle slot.
        """
        cdef Slot* s = self._any_slot(slot)
        return bool(s.state != IDLE and s.tree_full)

    def tree_size(self, int slot) -> tuple:
        """(nodes, edges) in the slot's tree."""
        cdef Slot* s = self._any_slot(slot)
        return s.tree.node_count, s.tree.edge_total

    def tree_bytes(self, int slot) -> int:
        """The bytes the slot's tree's arrays take now (their capacities, which grow ahead of the counts),
        at most tree_memory_limit when there is one (beyond the first arrays a tree starts with, and a tree
        grown before its share of the default shrank)."""
        return tree_bytes(&self._any_slot(slot).tree)

    cdef Slot* _any_slot(self, int slot) except NULL:
        """The slot, for reading what may be read while a batch waits for backup()."""
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} is outside 0..{self.n_slots - 1}")
        return &self.slots[slot]

    @property
    def bytes_per_node(self) -> int:
        """The bytes a node takes in a tree (BYTES_PER_NODE)."""
        return tree_node_bytes()

    @property
    def bytes_per_edge(self) -> int:
        """The bytes an edge (a legal move of an expanded node) takes in this search's trees: BYTES_PER_EDGE,
        and BYTES_PER_ACTION_VALUE more when the search keeps the head's action values."""
        return tree_edge_bytes(self.reads_action_values)

    def nodes_that_fit(self, edges_per_node: float = EDGES_PER_NODE) -> int:
        """About how many nodes one slot's tree holds within tree_memory_limit, at `edges_per_node` legal moves
        a node (each simulation adds a node and its moves); the 2^31 - 1 its indices address when there is
        no limit."""
        if not edges_per_node >= 0.0:
            raise ValueError(f"edges_per_node must be at least 0, got {edges_per_node}")
        if self.tree_memory_limit == 0:
            return MAX_INDEX
        nodes = int(self.tree_memory_limit / (tree_node_bytes() + edges_per_node * tree_edge_bytes(
            self.reads_action_values)))
        return min(nodes, MAX_INDEX)

    def repeat_backup(self, int slot, moves, float value, int times) -> None:
        """For tests only: backs `value` up `times` times from the node reached from the root by `moves`
        (UCI), as that many network evaluations of it (from its side to move) would, without a search.

        Raises ValueError when the path leaves the tree or times < 0.
        """
        if times < 0:
            raise ValueError(f"times must be at least 0, got {times}")
        cdef Slot* s = self._readable(slot)
        cdef int32_t node = ROOT, i, found
        for uci in moves:
            found = NO_NODE
            if s.tree.edge_count[node] > 0:
                for i in range(s.tree.first_edge[node], s.tree.first_edge[node] + s.tree.edge_count[node]):
                    if move_to_uci(s.tree.move[i]) == uci:
                        found = s.tree.child[i]
            if found == NO_NODE:
                raise ValueError(f"the path {list(moves)} leaves the tree at {uci!r}")
            node = found
        with nogil:
            for i in range(times):
                backup_value(&s.tree, node, value)

    cdef int32_t _best_root_edge(self, Slot* s) noexcept:
        # A solved root plays its proof (the shortest win, the longest loss), whatever the algorithm.
        if self.options.algorithm == GUMBEL and not (self.options.solver and s.tree.proof[ROOT] != UNPROVEN):
            return gumbel_best_edge(&s.tree, &self.options.gumbel, &s.gumbel)
        return best_edge(&s.tree, ROOT)

    def best_move(self, int slot) -> str:
        """The move to play, in UCI: PUCT's most visited (ties to the higher prior), Gumbel's
        Sequential Halving choice (the highest g + logits + sigma among the most visited); with the
        solver, a proven win first (the shortest) and a proven loss last (the longest)."""
        cdef Slot* s = self._readable(slot)
        return move_to_uci(s.tree.move[self._best_root_edge(s)])

    def ranked_moves(self, int slot) -> list:
        """Every legal move at the root, in UCI, best first, in best_move's order."""
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t first = tree.first_edge[ROOT], i, j, edge
        cdef list order = []
        for i in range(first, first + tree.edge_count[ROOT]):
            # Insertion sort keeps ties in best_edge's order (the first edge wins).
            j = len(order)
            while j > 0 and better_edge(tree, i, <int32_t>order[j - 1]):
                j -= 1
            order.insert(j, i)
        return [move_to_uci(tree.move[<int32_t>edge]) for edge in order]

    def principal_variation(self, int slot, int max_length=32, *, first: str | None = None) -> list:
        """The line of best moves (best_edge) from the root, in UCI, as far as the tree has
        searched it; with `first`, the line that starts with that root move.

        Raises ValueError when `first` is not a legal move at the root.
        """
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t node = ROOT, best, child
        line = []
        while len(line) < max_length and tree.edge_count[node] > 0:
            if node == ROOT and first is not None:
                best = self._root_edge(s, first)
            else:
                best = self._best_root_edge(s) if node == ROOT else best_edge(tree, node)
            child = tree.child[best]
            if node == ROOT and first is not None:
                line.append(first)
            elif child == NO_NODE or (tree.visits[child] == 0 and tree.proof[child] == UNPROVEN):
                break
            else:
                line.append(move_to_uci(tree.move[best]))
            if child == NO_NODE:
                break
            node = child
        return line

    cdef int32_t _root_edge(self, Slot* s, str uci) except -1:
        cdef Tree* tree = &s.tree
        cdef int32_t i
        for i in range(tree.first_edge[ROOT], tree.first_edge[ROOT] + tree.edge_count[ROOT]):
            if move_to_uci(tree.move[i]) == uci:
                return i
        raise ValueError(f"{uci!r} is not a legal move at the root")

    def proof(self, int slot, moves=()) -> tuple | None:
        """The solver's proven result of the position reached from the root by `moves` (UCI).

        Returns (result, plies) for that position's side to move, result being
        'win', 'draw' or 'loss' and plies the length of the line to the game's
        end under best play (0: the position itself ends the game), or None
        while unproven (always without the solver, and for moves not searched
        yet). A mate in one for the side to move is ('win', 1); the position
        after the mating move is ('loss', 0).

        Raises ValueError when a move of the path is not legal where it is played.
        """
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t node = ROOT, i, found
        for uci in moves:
            if node == NO_NODE or tree.edge_count[node] == UNEXPANDED:
                return None  # below a move not searched yet: unproven
            found = -2  # not a legal move here
            for i in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node]):
                if move_to_uci(tree.move[i]) == uci:
                    found = tree.child[i]
            if found == -2:
                raise ValueError(f"the path {list(moves)} leaves the tree at {uci!r}")
            node = found
        if node == NO_NODE or tree.proof[node] == UNPROVEN:
            return None
        return PROOF_NAMES[tree.proof[node]], tree.proof_plies[node]

    def priors(self, int slot, moves=()) -> dict:
        """The priors of the node reached from the root by `moves` (UCI), as {uci: prior}.

        For inspection and tests (e.g. noise appears at the root only).
        Raises ValueError when the path leaves the expanded tree.
        """
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t node = self._expanded_node(s, moves), i
        return {move_to_uci(tree.move[i]): tree.prior[i]
                for i in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node])}

    cdef int32_t _expanded_node(self, Slot* s, moves) except -2:
        """The expanded node reached from the root by `moves` (UCI); ValueError when the path leaves the expanded
        tree."""
        cdef Tree* tree = &s.tree
        cdef int32_t node = ROOT, i, found
        for uci in moves:
            found = NO_NODE
            if tree.edge_count[node] > 0:
                for i in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node]):
                    if move_to_uci(tree.move[i]) == uci:
                        found = tree.child[i]
            if found == NO_NODE or tree.edge_count[found] == UNEXPANDED:
                raise ValueError(f"the path {list(moves)} leaves the expanded tree at {uci!r}")
            node = found
        return node

    def action_values(self, int slot, moves=()) -> dict:
        """The head's values the search keeps at the node reached from the root by `moves` (UCI), as
        {uci: 2p - 1 for the node's side to move, or None where none was kept} (see backup()).

        For inspection and tests; every value is None unless reads_action_values.
        Raises ValueError when the path leaves the expanded tree.
        """
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t node = self._expanded_node(s, moves), i
        values = {}
        for i in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node]):
            kept = tree.action_value != NULL and not isnan(tree.action_value[i])
            values[move_to_uci(tree.move[i])] = tree.action_value[i] if kept else None
        return values

    def improved_policy(self, int slot) -> dict:
        """The root's training target as {uci: probability} over the legal moves, as self-play records it.

        Gumbel: softmax(logits + sigma(completed Q)); PUCT: each move's share of the root's visits (with
        forced playouts at a noisy root, of its visits after policy target pruning).
        """
        cdef Slot* s = self._readable(slot)
        cdef float target[MAX_MOVES]
        cdef int32_t first = s.tree.first_edge[ROOT], i
        root_target(s, &self.options, target)
        return {move_to_uci(s.tree.move[first + i]): target[i] for i in range(s.tree.edge_count[ROOT])}

    def move_distribution(self, int slot) -> dict:
        """The chance self-play would play each root move of the slot's search now, as {uci: probability}
        over the legal moves: at the temperature of the root's ply (move_temperature; a position set with its
        history counts those plies), the visited moves the value cutoff keeps in proportion to
        visits^(1/T); 1 for the one move played when the choice is certain (temperature 0, a solved root,
        Gumbel's Sequential Halving choice).
        """
        cdef Slot* s = self._readable(slot)
        cdef double weights[MAX_MOVES]
        cdef double total = 0.0
        cdef int32_t first = s.tree.first_edge[ROOT], count = s.tree.edge_count[ROOT], i
        cdef int32_t edge = move_weights(s, &self.options, weights, &total)
        if edge != SAMPLED:
            return {move_to_uci(s.tree.move[first + i]): float(first + i == edge) for i in range(count)}
        return {move_to_uci(s.tree.move[first + i]): weights[i] / total for i in range(count)}

    def move_temperature(self, int ply) -> float:
        """The temperature of self-play's move choice at `ply` (0: the first move) with this search's options,
        as the search computes it (mcts_ext.params.SearchSettings.move_temperature is its twin)."""
        if ply < 0:
            raise ValueError(f"ply must be at least 0, got {ply}")
        return move_temperature(&self.options, ply)

    def gumbel_noise(self, int slot) -> dict:
        """The Gumbel noise g of each root move of the current search, as {uci: g} (for inspection and tests).

        Raises ValueError for a PUCT search.
        """
        if self.options.algorithm != GUMBEL:
            raise ValueError("gumbel_noise() needs algorithm='gumbel'")
        cdef Slot* s = self._readable(slot)
        cdef int32_t first = s.tree.first_edge[ROOT], i
        return {move_to_uci(s.tree.move[first + i]): s.gumbel.noise[i] for i in range(s.tree.edge_count[ROOT])}

    @property
    def algorithm(self) -> str:
        """'puct' or 'gumbel'."""
        return "gumbel" if self.options.algorithm == GUMBEL else "puct"

    def board(self, int slot) -> Board:
        """A copy of the slot's game (its position at the root, with history)."""
        cdef Slot* s = self._slot(slot)
        if s.state == IDLE:
            raise ValueError(f"slot {slot} is idle")
        cdef Board board = Board.__new__(Board)
        s.stack.length = s.root_length
        if stack_copy(&board.stack, &s.stack) < 0:
            raise MemoryError()
        board.ply_limit = self.options.ply_limit
        return board

    # -- self-play records ---------------------------------------------------

    def finished(self) -> list:
        """Slots whose self-play game has ended and waits in take_record()."""
        return [g for g in range(self.n_slots) if self.slots[g].state == FINISHED]

    def take_record(self, int slot) -> dict:
        """The finished game's record; the slot becomes idle (start_game() to reuse it).

        Keys: start_fen, moves (UCI), result ('1-0', '0-1', '1/2-1/2'), winner
        ('white', 'black' or None), termination, plies, resign_threshold (the
        threshold the game started with, None when it could not resign),
        resign_enabled (False when the game could not resign: played through,
        or no threshold), would_resign_ply / would_resign_side (played-through
        games with a threshold, else -1 / None), full_search (uint8 [plies]),
        move_values (float32 [plies, +1 when the game ended by resignation]:
        every move's root value for its mover, in order) and the training samples:
        planes uint64 [S, 112], scalars float32 [S, 7], plies_of_samples int16 [S],
        root_values float32 [S], policy_surprise float32 [S] (KL(target || the
        root's prior, noised as searched), in nats), policy_offsets int32 [S + 1], policy_indices
        int16 [P] (every legal move of each sample), policy_probs float32 [P]
        (its share of the root's visits, 0 when unvisited; pruned with forced playouts,
        see improved_policy()), policy_wins float32 [P]
        (the mover's win probability after the move, (1 + Q) / 2 of the search's
        visits to it, NaN when unvisited), and results int8 [S]: the game's
        result from each sample's side to move (+1 win, 0 draw, -1 loss).
        """
        cdef Slot* s = self._slot(slot)
        if s.state != FINISHED:
            raise ValueError(f"slot {slot} has no finished game (it is {STATE_NAMES[s.state]})")
        cdef Record* r = &s.record
        cdef int k = r.samples, p = r.policy_total, plies = s.root_length - 1
        planes = np.empty((k, COMPACT_PLANES), dtype=np.uint64)
        scalars = np.empty((k, NUM_SCALARS), dtype=np.float32)
        sample_plies = np.empty(k, dtype=np.int16)
        root_values = np.empty(k, dtype=np.float32)
        surprise = np.empty(k, dtype=np.float32)
        offsets = np.zeros(k + 1, dtype=np.int32)
        indices = np.empty(p, dtype=np.int16)
        probs = np.empty(p, dtype=np.float32)
        wins = np.empty(p, dtype=np.float32)
        full = np.zeros(plies, dtype=np.uint8)
        searched = plies + (s.status == RESIGNATION)
        move_values = np.zeros(searched, dtype=np.float32)
        _copy_into(planes, r.planes, k * COMPACT_PLANES * sizeof(uint64_t))
        _copy_into(scalars, r.scalars, k * NUM_SCALARS * sizeof(float))
        _copy_into(sample_plies, r.ply, k * sizeof(int16_t))
        _copy_into(root_values, r.root_value, k * sizeof(float))
        _copy_into(surprise, r.surprise, k * sizeof(float))
        if k:
            _copy_into(offsets, r.policy_start, (k + 1) * sizeof(int32_t))
        _copy_into(indices, r.policy_index, p * sizeof(int16_t))
        _copy_into(probs, r.policy_prob, p * sizeof(float))
        _copy_into(wins, r.policy_win, p * sizeof(float))
        if plies and r.move_capacity:
            _copy_into(full, r.full_search, min(plies, r.move_capacity) * sizeof(uint8_t))
        if searched and r.move_capacity:
            _copy_into(move_values, r.move_value, min(searched, r.move_capacity) * sizeof(float))
        # White moves at even plies of games started from a White-to-move position.
        first_turn = self.slots[slot].stack.positions[0].turn
        sample_turns = (sample_plies.astype(np.int64) + first_turn) % 2  # 0 White, 1 Black
        if s.winner < 0:
            results = np.zeros(k, dtype=np.int8)
        else:
            results = np.where(sample_turns == s.winner, 1, -1).astype(np.int8)
        s.stack.length = s.root_length
        record = {
            "start_fen": format_fen(&s.stack.positions[0]),
            "moves": [move_to_uci(s.stack.moves[i]) for i in range(1, s.root_length)],
            "result": "1/2-1/2" if s.winner < 0 else ("1-0" if s.winner == WHITE else "0-1"),
            "winner": None if s.winner < 0 else ("white" if s.winner == WHITE else "black"),
            "termination": _TERMINATION_NAMES[s.status],
            "plies": plies,
            "resign_threshold": s.resign_threshold if s.resign else None,
            "resign_enabled": bool(s.resign_enabled and s.resign),
            "would_resign_ply": s.would_resign_ply,
            "would_resign_side": None if s.would_resign_side < 0 else
                                 ("white" if s.would_resign_side == WHITE else "black"),
            "full_search": full,
            "move_values": move_values,
            "planes": planes,
            "scalars": scalars,
            "plies_of_samples": sample_plies,
            "root_values": root_values,
            "policy_surprise": surprise,
            "policy_offsets": offsets,
            "policy_indices": indices,
            "policy_probs": probs,
            "policy_wins": wins,
            "results": results,
        }
        s.state = IDLE
        return record

    def take_finished(self) -> list:
        """take_record() for every finished slot, as (slot, record) pairs."""
        return [(g, self.take_record(g)) for g in self.finished()]


cdef void _copy_into(object array, const void* source, size_t size) except *:
    cdef unsigned char[::1] view
    if size == 0:
        return
    view = array.reshape(-1).view(np.uint8)
    memcpy(&view[0], source, size)


cdef void _check_rows(object array, int width, int rows, str name) except *:
    if array.shape[1] != width or array.shape[0] < rows:
        raise ValueError(f"{name} must have at least {rows} rows of {width}, got {tuple(array.shape)[:2]}")


_DEFAULT_MEMORY_SEARCHES = weakref.WeakSet()
"""The live searches made with tree_memory_mb 0: they share the process's default tree memory evenly."""
_default_memory_bytes = 0
"""That default (half the machine: mcts_ext.params.default_tree_memory_bytes), as measured when the latest of them
was made."""


def default_memory_searches() -> int:
    """How many live searches of this process share the default tree memory (made with tree_memory_mb 0)."""
    return len(_DEFAULT_MEMORY_SEARCHES)


def _share_default_memory() -> None:
    """Splits the default tree memory evenly between the live searches made with tree_memory_mb 0, each splitting
    its share between its slots: two searches of one process (a match's two players) may otherwise each take half
    the machine. Called when such a search is made and when one is deallocated."""
    searches = list(_DEFAULT_MEMORY_SEARCHES)
    for search in searches:
        (<MultiGameSearch>search)._set_tree_memory(_default_memory_bytes // len(searches))
