# cython: language_level=3
"""Batched PUCT search over many games at once.

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
When a game's root reaches its budget, a self-play search ("autoplay") picks
and plays a move, records a training sample and goes on with the next move;
an analysis search stops and waits to be read (root_stats, best_move).

Both loops run without the GIL over flat arrays; the def methods validate.
"""

import numpy as np

from libc.math cimport isfinite, pow
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset


from mcts_ext.encode cimport COMPACT_PLANES, NUM_MOVES, NUM_SCALARS, encode_stack, move_index
from mcts_ext.memory cimport grow
from mcts_ext.position cimport (CHECKMATE, MAX_MOVES, ONGOING, WHITE, Board, GameStack, Move,
                                format_fen, generate_legal, stack_copy, stack_free, stack_init, stack_push, stack_status)
from mcts_ext.puct cimport (FPU_ABSOLUTE, FPU_REDUCTION, PuctParams, add_in_flight, backup as backup_value, logits_finite,
                            select_edge, set_priors)
from mcts_ext.rng cimport Rng, rng_gamma, rng_seed, rng_uniform
from mcts_ext.tree cimport (NO_NODE, ROOT, UNEXPANDED, Tree, tree_add_edges, tree_add_node, tree_free,
                            tree_init, tree_keep_subtree, tree_reset)

from mcts_ext.position import STARTING_FEN, TERMINATIONS, move_to_uci

cdef enum:
    RESIGNATION = 7                  # a termination beyond position.pxd's game statuses

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
    LEAF_COLLISION = 2               # the leaf is already in this batch (virtual loss mode)
    LEAF_NO_MEMORY = 3

STATE_NAMES = {IDLE: "idle", SEARCHING: "searching", READY: "ready", FINISHED: "finished"}
_TERMINATION_NAMES = dict(TERMINATIONS)
_TERMINATION_NAMES[RESIGNATION] = "resignation"

ctypedef struct Options:
    PuctParams puct
    int simulations                  # budget per move (full search)
    int leaves_per_game              # leaves gathered per game and step; >1 uses virtual loss
    bint add_noise                   # Dirichlet noise at the root of full searches
    float dirichlet_alpha
    float noise_weight
    int temperature_plies            # plies sampled in proportion to visits^(1/temperature)
    float temperature
    bint tree_reuse                  # keep the played move's subtree as the next root
    int ply_limit                    # game length (plies) that ends in a draw; 0 for none
    bint autoplay                    # self-play: choose, play and record moves
    bint record                      # keep training samples (self-play)
    bint resign                      # resignation on (resign_threshold given)
    float resign_threshold           # root value (mover's view) below which a move counts towards resigning
    int resign_consecutive           # that many moves in a row by one side resign the game
    float resign_disabled_fraction   # games played through regardless, to measure false positives
    float playout_cap_fraction       # >0: only this fraction of moves get the full budget (KataGo)
    int playout_cap_simulations      # budget of the other, cheap moves (no noise, no sample)

ctypedef struct Record:
    # Training samples of one game: one per fully searched move.
    uint64_t* planes                 # [samples * COMPACT_PLANES]
    float* scalars                   # [samples * NUM_SCALARS]
    int16_t* ply                     # [samples] ply of the position in the game
    float* root_value                # [samples] the search's value for the side to move
    int32_t* policy_start            # [samples + 1] offsets into policy_index / policy_prob
    int16_t* policy_index            # [policy_total] visited legal moves' indices
    float* policy_prob               # [policy_total] their share of the root's visits
    int samples
    int sample_capacity
    int policy_total
    int policy_capacity
    uint8_t* full_search             # [plies played] 1 when that move had the full budget
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
    bint noisy                       # this move's root gets Dirichlet noise
    int status                       # termination once FINISHED
    int winner                       # WHITE, BLACK or -1 for a draw
    bint resign_enabled              # False in the games played through to measure false positives
    int resign_streak[2]             # consecutive moves each side's value was below the threshold
    int would_resign_ply             # played-through games: first ply a resignation would have come, or -1
    int would_resign_side
    long long moves_played           # moves this slot has played, over all its games
    Record record


cdef void record_free(Record* r) noexcept nogil:
    free(r.planes)
    free(r.scalars)
    free(r.ply)
    free(r.root_value)
    free(r.policy_start)
    free(r.policy_index)
    free(r.policy_prob)
    free(r.full_search)
    memset(r, 0, sizeof(Record))


cdef int record_reserve(Record* r, int samples, int policy, int moves) noexcept nogil:
    cdef int capacity
    if samples > r.sample_capacity:
        capacity = max(2 * r.sample_capacity, samples, 64)
        if (grow(<void**>&r.planes, capacity, COMPACT_PLANES * sizeof(uint64_t)) < 0
                or grow(<void**>&r.scalars, capacity, NUM_SCALARS * sizeof(float)) < 0
                or grow(<void**>&r.ply, capacity, sizeof(int16_t)) < 0
                or grow(<void**>&r.root_value, capacity, sizeof(float)) < 0
                or grow(<void**>&r.policy_start, capacity + 1, sizeof(int32_t)) < 0):
            return -1
        r.sample_capacity = capacity
    if policy > r.policy_capacity:
        capacity = max(2 * r.policy_capacity, policy, 2048)
        if (grow(<void**>&r.policy_index, capacity, sizeof(int16_t)) < 0
                or grow(<void**>&r.policy_prob, capacity, sizeof(float)) < 0):
            return -1
        r.policy_capacity = capacity
    if moves > r.move_capacity:
        capacity = max(2 * r.move_capacity, moves, 128)
        if grow(<void**>&r.full_search, capacity, sizeof(uint8_t)) < 0:
            return -1
        r.move_capacity = capacity
    return 0


cdef inline float terminal_value(int status) noexcept nogil:
    """Exact value of a game-ending position for its side to move."""
    return -1.0 if status == CHECKMATE else 0.0


cdef inline float root_value(const Tree* tree) noexcept nogil:
    """The search's value of the root position for its side to move."""
    if tree.visits[ROOT] == 0:
        return 0.0
    return -tree.value_sum[ROOT] / tree.visits[ROOT]


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


cdef int start_move(Slot* s, const Options* o, int32_t keep, Tree* scratch) noexcept nogil:
    """Sets up the search of the next move; `keep` is the played child to reuse, or NO_NODE."""
    cdef int result
    if o.tree_reuse and keep != NO_NODE and s.tree.edge_count[keep] != UNEXPANDED:
        result = tree_keep_subtree(&s.tree, keep, scratch)
    else:
        result = tree_reset(&s.tree)
    if result < 0:
        return -1
    s.full_search = o.playout_cap_fraction <= 0.0 or rng_uniform(&s.rng) < o.playout_cap_fraction
    s.budget = o.simulations if s.full_search else o.playout_cap_simulations
    s.noisy = o.add_noise and s.full_search
    s.done = 0
    s.in_flight = 0
    s.state = SEARCHING
    if s.noisy and s.tree.edge_count[ROOT] != UNEXPANDED:
        apply_noise(s, o)
    return 0


cdef int descend(Slot* s, const Options* o, Move* moves, int* move_count, int32_t* leaf) noexcept nogil:
    """Walks from the root to a leaf, pushing the moves on the game stack (see LEAF_*)."""
    cdef Tree* tree = &s.tree
    cdef int32_t node = ROOT, edge, child
    cdef int status, n
    s.stack.length = s.root_length
    while True:
        if tree.terminal[node] != ONGOING:
            backup_value(tree, node, terminal_value(tree.terminal[node]))
            return LEAF_SCORED
        if tree.edge_count[node] == UNEXPANDED:
            if tree.pending[node]:
                return LEAF_COLLISION
            n = generate_legal(&s.stack.positions[s.stack.length - 1], moves)
            status = stack_status(&s.stack, n, o.ply_limit)
            # The root is searched whenever it has moves (an analysis position may
            # stand on a repetition); below it, game-ending positions are exact.
            if status != ONGOING and (node != ROOT or n == 0):
                tree.terminal[node] = status
                backup_value(tree, node, terminal_value(status))
                return LEAF_SCORED
            if tree_add_edges(tree, node, moves, n) < 0:
                return LEAF_NO_MEMORY
            tree.pending[node] = 1
            move_count[0] = n
            leaf[0] = node
            return LEAF_NEW
        edge = select_edge(tree, node, &o.puct)
        child = tree.child[edge]
        if child == NO_NODE:
            child = tree_add_node(tree, node)
            if child < 0:
                return LEAF_NO_MEMORY
            tree.child[edge] = child
        if stack_push(&s.stack, tree.move[edge]) < 0:
            return LEAF_NO_MEMORY
        node = child


cdef int32_t choose_edge(Slot* s, const Options* o) noexcept nogil:
    """The root edge to play: sampled by visits^(1/T) early in the game, else the most visited."""
    cdef Tree* tree = &s.tree
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i, best = first, child
    cdef double weight, total = 0.0, target
    cdef int ply = s.root_length - 1
    if ply < o.temperature_plies and o.temperature > 0.0:
        for i in range(first, first + count):
            child = tree.child[i]
            if child != NO_NODE and tree.visits[child] > 0:
                total += pow(tree.visits[child], 1.0 / o.temperature)
        if total > 0.0:
            target = rng_uniform(&s.rng) * total
            for i in range(first, first + count):
                child = tree.child[i]
                if child != NO_NODE and tree.visits[child] > 0:
                    weight = pow(tree.visits[child], 1.0 / o.temperature)
                    if target < weight:
                        return i
                    target -= weight
                    best = i  # rounding at the end of the range falls back to the last visited edge
            return best
    return most_visited_edge(tree, ROOT)


cdef int32_t most_visited_edge(const Tree* tree, int32_t node) noexcept nogil:
    """The node's most visited edge; ties go to the higher prior, then the first."""
    cdef int32_t first = tree.first_edge[node], i, best = first, child
    cdef int visits, best_visits = -1
    for i in range(first, first + tree.edge_count[node]):
        child = tree.child[i]
        visits = tree.visits[child] if child != NO_NODE else 0
        if visits > best_visits or (visits == best_visits and tree.prior[i] > tree.prior[best]):
            best_visits = visits
            best = i
    return best


cdef int record_sample(Slot* s) noexcept nogil:
    """Appends the root's compact input and its visit distribution over the legal moves to the record."""
    cdef Record* r = &s.record
    cdef Tree* tree = &s.tree
    cdef int32_t first = tree.first_edge[ROOT], count = tree.edge_count[ROOT], i, child
    cdef int total = 0, k = r.samples
    cdef int turn = s.stack.positions[s.root_length - 1].turn
    if record_reserve(r, k + 1, r.policy_total + count, 0) < 0:
        return -1
    for i in range(first, first + count):
        child = tree.child[i]
        if child != NO_NODE:
            total += tree.visits[child]
    s.stack.length = s.root_length
    encode_stack(&s.stack, &r.planes[k * COMPACT_PLANES], &r.scalars[k * NUM_SCALARS])
    r.ply[k] = <int16_t>(s.root_length - 1)
    r.root_value[k] = root_value(tree)
    if k == 0:
        r.policy_start[0] = 0
    # Every legal move is listed, unvisited ones with 0: the learner masks the
    # policy to these moves before its softmax.
    for i in range(first, first + count):
        child = tree.child[i]
        r.policy_index[r.policy_total] = <int16_t>move_index(tree.move[i], turn)
        r.policy_prob[r.policy_total] = <float>tree.visits[child] / total \
            if child != NO_NODE and total > 0 else 0.0
        r.policy_total += 1
    r.samples = k + 1
    r.policy_start[k + 1] = r.policy_total
    return 0


cdef void check_resignation(Slot* s, const Options* o, int mover, float value) noexcept nogil:
    if not o.resign:
        return
    if value < o.resign_threshold:
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


cdef int finish_move(Slot* s, const Options* o, Tree* scratch) noexcept nogil:
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
    if s.full_search and o.record and record_sample(s) < 0:
        return -1
    check_resignation(s, o, mover, value)
    if s.state == FINISHED:
        return 0
    edge = choose_edge(s, o)
    keep = s.tree.child[edge]
    if record_reserve(&s.record, 0, 0, s.root_length) < 0:
        return -1
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
    return start_move(s, o, keep, scratch)


cdef class MultiGameSearch:
    """PUCT search over many games at once, for self-play (autoplay) or analysis.

    Self-play: every slot starts a game from the initial position (or a FEN),
    plays it to the end with `simulations` per move, and keeps its training
    samples; take_finished() hands back the records. Analysis: set_position()
    loads a position with its history; the search stops at the budget and
    root_stats(), best_move() and principal_variation() read the result.

    Raises ValueError for bad options (a budget of 0, an unknown FPU mode) and,
    in gather()/backup(), for arrays of the wrong shape or non-finite network
    output (the search is left as it was, so the call can be repeated).
    """
    cdef Slot* slots
    cdef int n_slots
    cdef Options options
    cdef Tree scratch
    cdef uint64_t seed
    cdef uint64_t games_started
    cdef readonly int max_batch
    # the leaves of the batch handed out by the last gather(), waiting for backup()
    cdef int32_t* leaf_slot          # [max_batch]
    cdef int32_t* leaf_node          # [max_batch]
    cdef int32_t* leaf_indices       # [max_batch * MAX_MOVES] legal moves' policy indices
    cdef int pending_leaves
    cdef readonly long long total_simulations

    def __cinit__(self, *args, **kwargs):
        self.slots = NULL
        self.n_slots = 0
        self.leaf_slot = NULL
        self.leaf_node = NULL
        self.leaf_indices = NULL
        self.pending_leaves = 0
        if tree_init(&self.scratch) < 0:
            raise MemoryError()

    def __init__(self, int games, *, simulations: int = 800, c_init: float = 1.25, c_base: float = 19652.0,
                 fpu_mode: str = "reduction", fpu_value: float = 0.25, dirichlet_alpha: float = 0.3,
                 noise_weight: float = 0.25, add_noise: bool | None = None, temperature_plies: int = 30,
                 temperature: float = 1.0, leaves_per_game: int = 1, virtual_loss: float = 1.0,
                 tree_reuse: bool = False, ply_limit: int | None = 512, autoplay: bool = True,
                 record: bool | None = None, resign_threshold: float | None = None, resign_consecutive: int = 3,
                 resign_disabled_fraction: float = 0.1, playout_cap_fraction: float = 0.0,
                 playout_cap_simulations: int = 100, seed: int = 0):
        if games < 1:
            raise ValueError(f"games must be at least 1, got {games}")
        if simulations < 1:
            raise ValueError(f"simulations must be at least 1, got {simulations}")
        if leaves_per_game < 1:
            raise ValueError(f"leaves_per_game must be at least 1, got {leaves_per_game}")
        if fpu_mode not in ("reduction", "absolute"):
            raise ValueError(f"fpu_mode must be 'reduction' or 'absolute', got {fpu_mode!r}")
        if c_base <= 0 or c_init < 0:
            raise ValueError(f"need c_base > 0 and c_init >= 0, got c_base={c_base}, c_init={c_init}")
        if not 0.0 <= noise_weight <= 1.0 or dirichlet_alpha <= 0:
            raise ValueError(f"need 0 <= noise_weight <= 1 and dirichlet_alpha > 0, "
                             f"got {noise_weight} and {dirichlet_alpha}")
        if temperature < 0 or temperature_plies < 0:
            raise ValueError(f"temperature and temperature_plies must be >= 0, got {temperature}, {temperature_plies}")
        if not 0.0 <= playout_cap_fraction <= 1.0 or playout_cap_simulations < 1:
            raise ValueError(f"need 0 <= playout_cap_fraction <= 1 and playout_cap_simulations >= 1, "
                             f"got {playout_cap_fraction} and {playout_cap_simulations}")
        if resign_threshold is not None and (not -1.0 <= resign_threshold <= 1.0 or resign_consecutive < 1):
            raise ValueError(f"need -1 <= resign_threshold <= 1 and resign_consecutive >= 1, "
                             f"got {resign_threshold} and {resign_consecutive}")
        if not 0.0 <= resign_disabled_fraction <= 1.0:
            raise ValueError(f"resign_disabled_fraction must be in [0, 1], got {resign_disabled_fraction}")
        if ply_limit is not None and ply_limit < 1:
            raise ValueError(f"ply_limit must be at least 1 or None, got {ply_limit}")
        cdef Options* o = &self.options
        o.puct.c_init = c_init
        o.puct.c_base = c_base
        o.puct.fpu_mode = FPU_REDUCTION if fpu_mode == "reduction" else FPU_ABSOLUTE
        o.puct.fpu_value = fpu_value
        o.puct.virtual_loss = virtual_loss
        o.simulations = simulations
        o.leaves_per_game = leaves_per_game
        o.add_noise = autoplay if add_noise is None else add_noise
        o.dirichlet_alpha = dirichlet_alpha
        o.noise_weight = noise_weight
        o.temperature_plies = temperature_plies
        o.temperature = temperature
        o.tree_reuse = tree_reuse
        o.ply_limit = ply_limit or 0
        o.autoplay = autoplay
        o.record = autoplay if record is None else record
        o.resign = resign_threshold is not None
        o.resign_threshold = resign_threshold if resign_threshold is not None else -2.0
        o.resign_consecutive = resign_consecutive
        o.resign_disabled_fraction = resign_disabled_fraction
        o.playout_cap_fraction = playout_cap_fraction
        o.playout_cap_simulations = playout_cap_simulations
        self.seed = <uint64_t>(seed & 0xFFFFFFFFFFFFFFFF)
        self.games_started = 0
        self.total_simulations = 0
        self.max_batch = games * leaves_per_game
        self.slots = <Slot*>malloc(games * sizeof(Slot))
        self.leaf_slot = <int32_t*>malloc(self.max_batch * sizeof(int32_t))
        self.leaf_node = <int32_t*>malloc(self.max_batch * sizeof(int32_t))
        self.leaf_indices = <int32_t*>malloc(self.max_batch * MAX_MOVES * sizeof(int32_t))
        if self.slots == NULL or self.leaf_slot == NULL or self.leaf_node == NULL or self.leaf_indices == NULL:
            raise MemoryError()
        memset(self.slots, 0, games * sizeof(Slot))
        cdef int g
        for g in range(games):
            self.n_slots = g + 1
            if stack_init(&self.slots[g].stack, 256) < 0 or tree_init(&self.slots[g].tree) < 0:
                raise MemoryError()
            self.slots[g].state = IDLE
        if autoplay:
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
        tree_free(&self.scratch)

    # -- slots ---------------------------------------------------------------

    cdef Slot* _slot(self, int slot) except NULL:
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} is outside 0..{self.n_slots - 1}")
        if self.pending_leaves:
            raise RuntimeError("a batch is waiting for backup(); call it before changing slots")
        return &self.slots[slot]

    cdef void _load(self, Slot* s, Board board) except *:
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
        if start_move(s, &self.options, NO_NODE, &self.scratch) < 0:
            raise MemoryError()

    def start_game(self, int slot, fen: str = STARTING_FEN) -> None:
        """Starts a new self-play game in `slot` from `fen` (default: the initial position)."""
        cdef Slot* s = self._slot(slot)
        cdef Board board = Board(fen, ply_limit=self.options.ply_limit or None)
        self._load(s, board)

    def set_position(self, int slot, Board board) -> None:
        """Loads `board` (with its history) into `slot` for a search of one move.

        Raises ValueError when the position has no legal move.
        """
        if board is None:
            raise TypeError("set_position needs a Board")
        self._load(self._slot(slot), board)

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

    def searching(self) -> int:
        """How many slots still want simulations."""
        cdef int g, count = 0
        for g in range(self.n_slots):
            count += self.slots[g].state == SEARCHING
        return count

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
        this step ended in a scored game end: call gather() again.
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
        cdef Move moves[MAX_MOVES]
        cdef int rows = 0, g, added, outcome, count, i, turn
        cdef int32_t leaf
        cdef Slot* s
        cdef Options* o = &self.options
        for g in range(self.n_slots):
            s = &self.slots[g]
            added = 0
            while s.state == SEARCHING:
                if s.done >= s.budget:
                    if s.in_flight > 0:
                        break  # the rest of this move's simulations are in the batch
                    if finish_move(s, o, &self.scratch) < 0:
                        out_of_memory[0] = True
                        return rows
                    continue
                if added == o.leaves_per_game or s.done + s.in_flight >= s.budget:
                    break
                outcome = descend(s, o, moves, &count, &leaf)
                if outcome == LEAF_NO_MEMORY:
                    out_of_memory[0] = True
                    return rows
                if outcome == LEAF_COLLISION:
                    break
                if outcome == LEAF_SCORED:
                    s.done += 1
                    self.total_simulations += 1
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
            s.stack.length = s.root_length
        return rows

    def backup(self, const float[:, ::1] policy_logits not None, const float[::1] values not None) -> None:
        """Hands back the network's output for the last gather()'s rows.

        policy_logits: float32 [B, 4672] (any values at illegal moves; they are
        masked out); values: float32 [B] in [-1, 1] for each leaf's side to move.
        Raises ValueError on a shape mismatch or a NaN/inf among the values or
        the legal moves' logits, before changing anything.
        """
        cdef int rows = self.pending_leaves
        if policy_logits.shape[0] != rows or policy_logits.shape[1] != NUM_MOVES or values.shape[0] != rows:
            raise ValueError(f"expected policy_logits [{rows}, {NUM_MOVES}] and values [{rows}] for the "
                             f"{rows} leaves of the last gather(), got [{policy_logits.shape[0]}, "
                             f"{policy_logits.shape[1]}] and [{values.shape[0]}]")
        self._check_output(&policy_logits[0, 0] if rows else NULL, NUM_MOVES, False, values)
        self._backup_checked(&policy_logits[0, 0] if rows else NULL, NUM_MOVES, False, values)

    def backup_legal(self, const float[:, ::1] legal_logits not None, const float[::1] values not None) -> None:
        """Hands back the network's output for the last gather()'s rows, as the legal moves' logits only.

        legal_logits: float32 [B, W]; legal_logits[b, i] is the logit of the
        i-th move of row b as gather() listed it in legal_indices[b, i]. Only
        the first legal_counts[b] columns of row b are read, so W may be any
        width that holds the longest row (at most 256 = MAX_MOVES is ever
        needed) and the columns beyond a row's count may hold anything.
        values: as in backup(). Gives exactly the priors backup() gives for
        full logits with the same values at the legal moves.

        Raises ValueError on a shape mismatch, a row longer than W, or a
        NaN/inf among the values or the read logits, before changing anything.
        """
        cdef int rows = self.pending_leaves, width = legal_logits.shape[1], b, count
        if legal_logits.shape[0] != rows or values.shape[0] != rows:
            raise ValueError(f"expected legal_logits [{rows}, W] and values [{rows}] for the {rows} leaves "
                             f"of the last gather(), got [{legal_logits.shape[0]}, {width}] and [{values.shape[0]}]")
        for b in range(rows):
            count = self.slots[self.leaf_slot[b]].tree.edge_count[self.leaf_node[b]]
            if count > width:
                raise ValueError(f"legal_logits has {width} columns but row {b} has {count} legal moves")
        self._check_output(&legal_logits[0, 0] if rows else NULL, width, True, values)
        self._backup_checked(&legal_logits[0, 0] if rows else NULL, width, True, values)

    cdef void _check_output(self, const float* logits, int width, bint compact, const float[::1] values) except *:
        """Raises ValueError for a non-finite value or legal move's logit among the pending rows."""
        cdef int b
        for b in range(self.pending_leaves):
            if not isfinite(values[b]):
                raise ValueError(f"the network returned a non-finite value ({values[b]}) for row {b}")
            if not logits_finite(logits + <size_t>b * width, NULL if compact else &self.leaf_indices[b * MAX_MOVES],
                                 self.slots[self.leaf_slot[b]].tree.edge_count[self.leaf_node[b]]):
                raise ValueError(f"the network returned non-finite policy logits for a legal move in row {b}")

    cdef void _backup_checked(self, const float* logits, int width, bint compact, const float[::1] values) except *:
        cdef int rows = self.pending_leaves
        cdef bint out_of_memory = False
        if rows:
            with nogil:
                self._backup(logits, width, compact, &values[0], rows, &out_of_memory)
        self.pending_leaves = 0
        if out_of_memory:
            raise MemoryError("the search ran out of memory")

    cdef void _backup(self, const float* logits, int width, bint compact, const float* values, int rows,
                      bint* out_of_memory) noexcept nogil:
        """Backs up `rows` leaves; row b's logits start at logits + b * width, compact (legal moves only) or full."""
        cdef int b
        cdef int32_t node
        cdef float value
        cdef Slot* s
        cdef Options* o = &self.options
        for b in range(rows):
            s = &self.slots[self.leaf_slot[b]]
            node = self.leaf_node[b]
            set_priors(&s.tree, node, logits + <size_t>b * width, NULL if compact else &self.leaf_indices[b * MAX_MOVES])
            s.tree.pending[node] = 0
            if o.leaves_per_game > 1:
                add_in_flight(&s.tree, node, -1)
            value = values[b]
            if value > 1.0:
                value = 1.0
            elif value < -1.0:
                value = -1.0
            backup_value(&s.tree, node, value)
            s.in_flight -= 1
            if node == ROOT:
                # The root's own evaluation is not one of the move's simulations:
                # the root's children's visits add up to the budget.
                if s.noisy:
                    apply_noise(s, o)
            else:
                s.done += 1
                self.total_simulations += 1
        for b in range(rows):
            s = &self.slots[self.leaf_slot[b]]
            if s.state == SEARCHING and s.done >= s.budget and s.in_flight == 0:
                if finish_move(s, o, &self.scratch) < 0:
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

    def best_move(self, int slot) -> str:
        """The most visited move (ties to the higher prior), in UCI."""
        cdef Slot* s = self._readable(slot)
        return move_to_uci(s.tree.move[most_visited_edge(&s.tree, ROOT)])

    def principal_variation(self, int slot, int max_length=32) -> list:
        """The line of most visited moves from the root, in UCI."""
        cdef Slot* s = self._readable(slot)
        cdef Tree* tree = &s.tree
        cdef int32_t node = ROOT, best
        line = []
        while len(line) < max_length and tree.edge_count[node] > 0:
            best = most_visited_edge(tree, node)
            if tree.child[best] == NO_NODE or tree.visits[tree.child[best]] == 0:
                break
            line.append(move_to_uci(tree.move[best]))
            node = tree.child[best]
        return line

    def priors(self, int slot, moves=()) -> dict:
        """The priors of the node reached from the root by `moves` (UCI), as {uci: prior}.

        For inspection and tests (e.g. noise appears at the root only).
        Raises ValueError when the path leaves the expanded tree.
        """
        cdef Slot* s = self._readable(slot)
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
        return {move_to_uci(tree.move[i]): tree.prior[i]
                for i in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node])}

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
        ('white', 'black' or None), termination, plies, resign_enabled,
        would_resign_ply / would_resign_side (played-through games, else -1 /
        None), full_search (uint8 [plies]) and the training samples:
        planes uint64 [S, 112], scalars float32 [S, 7], plies_of_samples int16 [S],
        root_values float32 [S], policy_offsets int32 [S + 1], policy_indices
        int16 [P] (every legal move of each sample) and policy_probs float32 [P]
        (its share of the root's visits, 0 when unvisited), and results int8 [S]: the game's
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
        offsets = np.zeros(k + 1, dtype=np.int32)
        indices = np.empty(p, dtype=np.int16)
        probs = np.empty(p, dtype=np.float32)
        full = np.zeros(plies, dtype=np.uint8)
        _copy_into(planes, r.planes, k * COMPACT_PLANES * sizeof(uint64_t))
        _copy_into(scalars, r.scalars, k * NUM_SCALARS * sizeof(float))
        _copy_into(sample_plies, r.ply, k * sizeof(int16_t))
        _copy_into(root_values, r.root_value, k * sizeof(float))
        if k:
            _copy_into(offsets, r.policy_start, (k + 1) * sizeof(int32_t))
        _copy_into(indices, r.policy_index, p * sizeof(int16_t))
        _copy_into(probs, r.policy_prob, p * sizeof(float))
        if plies and r.move_capacity:
            _copy_into(full, r.full_search, min(plies, r.move_capacity) * sizeof(uint8_t))
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
            "resign_enabled": bool(s.resign_enabled),
            "would_resign_ply": s.would_resign_ply,
            "would_resign_side": None if s.would_resign_side < 0 else
                                 ("white" if s.would_resign_side == WHITE else "black"),
            "full_search": full,
            "planes": planes,
            "scalars": scalars,
            "plies_of_samples": sample_plies,
            "root_values": root_values,
            "policy_offsets": offsets,
            "policy_indices": indices,
            "policy_probs": probs,
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
