# Search tree storage: flat, growable arrays of nodes and edges, one Tree per
# game. No Python object per node. Selection and backup live in puct.pxd
# (PUCT) and gumbel.pxd (Gumbel AlphaZero).
#
# A node's value_sum is seen from the player who moved INTO the node (the
# player choosing among its parent's edges), so a parent maximises its
# children's Q directly; the node's own side to move sees -value_sum.
#
# An edge's action_value is the network's own value of its move (the
# action-value head, MultiGameSearch.backup's action_values), from the view
# of the player choosing the move, as node_q (puct.pxd) sees its Q: a win
# probability p for that player is stored as 2p - 1. PUCT (fpu_mode
# "action_value") and Gumbel (gumbel_unvisited "action_value") read it for
# children without visits. It costs 4 bytes an edge (the edge's other arrays
# take 10: move, prior, child), so it is NULL until a batch brings values
# for a search that reads them (tree_enable_action_values), and a search
# that never does allocates, grows and writes nothing for it. They count in
# the memory limit like the rest: a tree whose edges leave no room for them
# keeps none and is full (the search ends that move with what it has).
#
# A node's proof (kept only by a search with the solver on) is the game's
# result under best play, from the view of the node's OWN side to move, with
# the plies to the game's end (the winner mating as fast as it can, the loser
# holding out as long as it can). Game ends are proven on the spot; a parent
# is proven once one child is a proven loss for that child's mover, or every
# child is proven (MCTS-solver, Winands et al. 2008).
#
# Size. Node and edge indices are int32_t: an edge costs 10 bytes (move 2,
# prior 4, child 4) and int64_t indices would make it 14, for trees that no
# machine here can hold (2^31 edges are 21 GB of edges alone), so the arrays
# stop growing at MAX_INDEX items instead; their capacities are worked out in
# 64 bits, so that doubling never overflows. A tree may also be given a
# memory_limit: the bytes its arrays may take (tree_bytes), which their
# growth never exceeds. A tree that cannot grow (the limit, the indices, or
# malloc failing) makes tree_add_node / tree_add_edges return -1 and is left
# as it was; the search then stops that move's search with what it has
# (MultiGameSearch.tree_full).
#
# Blocks. The node arrays lie in one malloc'd block (node_block), the edge
# arrays (action_value among them when kept) in another, each laid out by
# decreasing item size so that every array is aligned for its type. A
# growth allocates the new block whole before it touches the tree, so it
# either succeeds or leaves the tree as it was: tree_bytes is always what
# the two blocks hold (array by array, a failed realloc half way left some
# arrays longer than the capacity tree_bytes counts).

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t

from mcts_ext.position cimport Move

cdef enum:
    ROOT = 0
    NO_NODE = -1
    UNEXPANDED = -1    # edge_count before the node's legal moves are known
    MAX_INDEX = 2147483647  # INT32_MAX: the most nodes, and the most edges, a tree holds

# Proofs, from the view of the node's side to move.
cdef enum:
    UNPROVEN = 0
    PROVEN_WIN = 1
    PROVEN_DRAW = 2
    PROVEN_LOSS = 3

ctypedef struct Tree:
    char* node_block        # the node arrays below, one after another (see Blocks above); NULL when none
    char* edge_block        # the edge arrays below, likewise
    # nodes [node_capacity], in node_block
    int32_t* first_edge     # index of the node's first edge
    int16_t* edge_count     # number of legal moves, or UNEXPANDED
    int32_t* visits         # completed simulations through the node
    double* value_sum       # sum of their values, from the view of the player who moved into the node; in
                            # double, as float32 rounds each added value to 1/8 once |sum| passes 2^20
    int32_t* in_flight      # simulations through the node still waiting for the network (virtual loss)
    int32_t* parent         # parent node, NO_NODE for the root
    int8_t* terminal        # game status (position.pxd) when the node ends the game, else ONGOING
    uint8_t* pending        # 1 while the node's own evaluation is in the current batch
    int8_t* proof           # UNPROVEN or PROVEN_* for the node's side to move
    int16_t* proof_plies    # plies to the game's end under best play, when proven
    float* raw_value        # the node's own value for its side to move (network, or exact at a game end)
    # edges [edge_capacity], in edge_block
    Move* move
    float* prior            # policy prior (with Dirichlet noise at a noisy root)
    int32_t* child          # node reached by the edge, NO_NODE until first visited
    float* action_value     # the head's value of the move for its chooser (2p - 1), NaN where the batch brought
                            # none; NULL until the first values come (then 4 bytes an edge, grown with the edges)
    int32_t node_count
    int64_t node_capacity   # at most MAX_INDEX (64 bits so that growth arithmetic cannot overflow)
    int32_t edge_total
    int64_t edge_capacity
    size_t memory_limit     # the most bytes the arrays may take (tree_bytes); 0: no limit but MAX_INDEX

# What tree_keep_subtree did besides failing (-1).
cdef enum:
    SUBTREE_KEPT = 0
    SUBTREE_DROPPED = 1  # its copy would not fit the tree's memory limit: the tree starts afresh instead

# All return -1 when memory runs out (or the tree may not grow: see Size above).
cdef int tree_init(Tree* tree) noexcept nogil  # memory_limit 0: set it after
cdef void tree_free(Tree* tree) noexcept nogil  # gives both blocks back (capacities 0), keeping memory_limit
cdef int tree_reset(Tree* tree) noexcept nogil
cdef int tree_add_node(Tree* tree, int32_t parent) noexcept nogil
cdef int tree_add_edges(Tree* tree, int32_t node, const Move* moves, int count) noexcept nogil
cdef int tree_keep_subtree(Tree* tree, int32_t new_root, Tree* scratch, size_t* peak_bytes) noexcept nogil
cdef int tree_enable_action_values(Tree* tree) noexcept nogil  # gives the edges action_value (all NaN) if NULL
cdef size_t tree_node_bytes() noexcept nogil  # bytes a node takes in the arrays
cdef size_t tree_edge_bytes(bint action_values) noexcept nogil  # bytes an edge takes (with action values or not)
cdef size_t tree_bytes(const Tree* tree) noexcept nogil  # bytes the tree's arrays take now (their capacities)
