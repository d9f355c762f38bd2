# cython: language_level=3
"""Growable flat arrays for one game's search tree (see tree.pxd for the fields and their size)."""

from libc.math cimport NAN
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from mcts_ext.memory cimport grow

from mcts_ext.position cimport ONGOING, Move

cdef enum:
    INITIAL_NODES = 256
    INITIAL_EDGES = 4096

# A scratch tree (tree_keep_subtree) left holding more than this is given back to the system: an analysis tree
# of gigabytes would otherwise stay allocated twice, while self-play's trees of a few hundred kilobytes keep theirs.
cdef size_t SCRATCH_KEPT_BYTES = 16 << 20


cdef size_t tree_node_bytes() noexcept nogil:
    return (4 * sizeof(int32_t) + 2 * sizeof(int16_t) + sizeof(double) + 2 * sizeof(int8_t) + sizeof(uint8_t)
            + sizeof(float))  # first_edge visits in_flight parent, edge_count proof_plies, value_sum, ...


cdef size_t tree_edge_bytes(bint action_values) noexcept nogil:
    return sizeof(Move) + sizeof(float) + sizeof(int32_t) + (sizeof(float) if action_values else 0)


cdef size_t tree_bytes(const Tree* tree) noexcept nogil:
    return (<size_t>tree.node_capacity * tree_node_bytes()
            + <size_t>tree.edge_capacity * tree_edge_bytes(tree.action_value != NULL))


cdef int64_t _grown(const Tree* tree, int64_t capacity, int64_t needed, size_t item_bytes) noexcept nogil:
    """The capacity to grow an array of `capacity` items to so that it holds `needed`: twice as many, but
    at most MAX_INDEX, and within the tree's memory limit; -1 when `needed` does not fit.

    Within a limit an array takes at most its share of the room left, its
    share of the tree's bytes (or what it needs, if more): each array grows
    by the factor that would bring the whole tree to its limit, so nodes and
    edges keep their proportions (whatever the moves per node) and fill the
    limit together, neither taking room the other will need. Far from the
    limit (room left at least the tree's bytes) that is doubling.
    """
    cdef int64_t target = 2 * capacity if 2 * capacity > needed else needed, share
    cdef size_t used, room
    if needed > MAX_INDEX:
        return -1
    if target > MAX_INDEX:
        target = MAX_INDEX
    if tree.memory_limit == 0:
        return target
    used = tree_bytes(tree)
    room = tree.memory_limit - used if used < tree.memory_limit else 0
    if <size_t>(needed - capacity) * item_bytes > room:
        return -1
    # In double: room * capacity may not fit 64 bits. Rounded down, so the tree stays within its limit.
    share = <int64_t>(<double>room * <double>capacity / <double>used) if used > 0 else capacity
    if capacity + share < target:
        target = capacity + share if capacity + share > needed else needed
    return target


cdef int _reserve_nodes(Tree* tree, int64_t capacity) noexcept nogil:
    """Grows the node arrays to exactly `capacity` (callers check MAX_INDEX and the limit: _grown)."""
    if capacity <= tree.node_capacity:
        return 0
    if (grow(<void**>&tree.first_edge, capacity, sizeof(int32_t)) < 0
            or grow(<void**>&tree.edge_count, capacity, sizeof(int16_t)) < 0
            or grow(<void**>&tree.visits, capacity, sizeof(int32_t)) < 0
            or grow(<void**>&tree.value_sum, capacity, sizeof(double)) < 0
            or grow(<void**>&tree.in_flight, capacity, sizeof(int32_t)) < 0
            or grow(<void**>&tree.parent, capacity, sizeof(int32_t)) < 0
            or grow(<void**>&tree.terminal, capacity, sizeof(int8_t)) < 0
            or grow(<void**>&tree.pending, capacity, sizeof(uint8_t)) < 0
            or grow(<void**>&tree.proof, capacity, sizeof(int8_t)) < 0
            or grow(<void**>&tree.proof_plies, capacity, sizeof(int16_t)) < 0
            or grow(<void**>&tree.raw_value, capacity, sizeof(float)) < 0):
        return -1
    tree.node_capacity = capacity
    return 0


cdef int _reserve_edges(Tree* tree, int64_t capacity) noexcept nogil:
    """Grows the edge arrays to exactly `capacity` (as _reserve_nodes)."""
    if capacity <= tree.edge_capacity:
        return 0
    if (grow(<void**>&tree.move, capacity, sizeof(Move)) < 0
            or grow(<void**>&tree.prior, capacity, sizeof(float)) < 0
            or grow(<void**>&tree.child, capacity, sizeof(int32_t)) < 0
            or (tree.action_value != NULL and grow(<void**>&tree.action_value, capacity, sizeof(float)) < 0)):
        return -1
    tree.edge_capacity = capacity
    return 0


cdef int tree_init(Tree* tree) noexcept nogil:
    tree.first_edge = NULL
    tree.edge_count = NULL
    tree.visits = NULL
    tree.value_sum = NULL
    tree.in_flight = NULL
    tree.parent = NULL
    tree.terminal = NULL
    tree.pending = NULL
    tree.proof = NULL
    tree.proof_plies = NULL
    tree.raw_value = NULL
    tree.move = NULL
    tree.prior = NULL
    tree.child = NULL
    tree.action_value = NULL
    tree.node_capacity = 0
    tree.edge_capacity = 0
    tree.memory_limit = 0
    if _reserve_nodes(tree, INITIAL_NODES) < 0 or _reserve_edges(tree, INITIAL_EDGES) < 0:
        return -1
    return tree_reset(tree)


cdef void tree_free(Tree* tree) noexcept nogil:
    free(tree.first_edge)
    free(tree.edge_count)
    free(tree.visits)
    free(tree.value_sum)
    free(tree.in_flight)
    free(tree.parent)
    free(tree.terminal)
    free(tree.pending)
    free(tree.proof)
    free(tree.proof_plies)
    free(tree.raw_value)
    free(tree.move)
    free(tree.prior)
    free(tree.child)
    free(tree.action_value)
    tree.action_value = NULL
    tree.node_capacity = 0
    tree.edge_capacity = 0
    tree.node_count = 0
    tree.edge_total = 0


cdef int tree_reset(Tree* tree) noexcept nogil:
    """Empties the tree down to a fresh, unexpanded root."""
    tree.node_count = 0
    tree.edge_total = 0
    return tree_add_node(tree, NO_NODE)


cdef int tree_add_node(Tree* tree, int32_t parent) noexcept nogil:
    """Appends an unexpanded node and returns its index; -1 when the tree cannot grow (unchanged)."""
    cdef int64_t capacity
    if tree.node_count == tree.node_capacity:
        capacity = _grown(tree, tree.node_capacity, <int64_t>tree.node_count + 1, tree_node_bytes())
        if capacity < 0 or _reserve_nodes(tree, capacity) < 0:
            return -1
    cdef int32_t node = tree.node_count
    tree.first_edge[node] = 0
    tree.edge_count[node] = UNEXPANDED
    tree.visits[node] = 0
    tree.value_sum[node] = 0.0
    tree.in_flight[node] = 0
    tree.parent[node] = parent
    tree.terminal[node] = ONGOING
    tree.pending[node] = 0
    tree.proof[node] = UNPROVEN
    tree.proof_plies[node] = 0
    tree.raw_value[node] = 0.0
    tree.node_count += 1
    return node


cdef int tree_add_edges(Tree* tree, int32_t node, const Move* moves, int count) noexcept nogil:
    """Gives `node` one edge per move (priors 0, no children) and returns the first edge; -1 when the tree
    cannot grow (unchanged)."""
    cdef int64_t needed = <int64_t>tree.edge_total + count, capacity
    if needed > tree.edge_capacity:
        capacity = _grown(tree, tree.edge_capacity, needed, tree_edge_bytes(tree.action_value != NULL))
        if capacity < 0 or _reserve_edges(tree, capacity) < 0:
            return -1
    cdef int32_t first = tree.edge_total
    cdef int i
    for i in range(count):
        tree.move[first + i] = moves[i]
        tree.prior[first + i] = 0.0
        tree.child[first + i] = NO_NODE
    if tree.action_value != NULL:
        for i in range(count):
            tree.action_value[first + i] = NAN
    tree.first_edge[node] = first
    tree.edge_count[node] = <int16_t>count
    tree.edge_total = <int32_t>needed
    return first


cdef int tree_enable_action_values(Tree* tree) noexcept nogil:
    """Gives the tree its per-edge action values (NaN: none yet) unless it has them; -1 when memory runs out.

    Not checked against the memory limit: a search that reads them enables
    them at its first batch, when the tree is small, and from then on the
    limit counts them (tree_edge_bytes) in every growth.
    """
    cdef int32_t i
    if tree.action_value != NULL:
        return 0
    tree.action_value = <float*>malloc(tree.edge_capacity * sizeof(float))
    if tree.action_value == NULL:
        return -1
    for i in range(tree.edge_total):
        tree.action_value[i] = NAN
    return 0


cdef int _copy_node(Tree* src, int32_t node, Tree* dst, int32_t parent) noexcept nogil:
    cdef int32_t copy = tree_add_node(dst, parent)
    if copy < 0:
        return -1
    dst.visits[copy] = src.visits[node]
    dst.value_sum[copy] = src.value_sum[node]
    dst.terminal[copy] = src.terminal[node]
    dst.proof[copy] = src.proof[node]
    dst.proof_plies[copy] = src.proof_plies[node]
    dst.raw_value[copy] = src.raw_value[node]
    return copy


cdef int32_t _subtree_order(const Tree* tree, int32_t new_root, int32_t* queue, int64_t* edges) noexcept nogil:
    """Lists the nodes tree_keep_subtree keeps, breadth-first from `new_root`, in `queue` (room for the tree's
    nodes); returns how many, and sets `edges` to the edges they keep."""
    cdef int32_t count = 1, head = 0, node, edge
    edges[0] = 0
    queue[0] = new_root
    while head < count:
        node = queue[head]
        if tree.edge_count[node] != UNEXPANDED and not tree.pending[node]:
            edges[0] += tree.edge_count[node]
            for edge in range(tree.first_edge[node], tree.first_edge[node] + tree.edge_count[node]):
                if tree.child[edge] != NO_NODE:
                    queue[count] = tree.child[edge]
                    count += 1
        head += 1
    return count


cdef int _release(Tree* tree) noexcept nogil:
    """Gives a tree's arrays back and makes it a fresh one with the same memory limit."""
    cdef size_t limit = tree.memory_limit
    tree_free(tree)
    cdef int result = tree_init(tree)
    tree.memory_limit = limit
    return result


cdef int tree_keep_subtree(Tree* tree, int32_t new_root, Tree* scratch) noexcept nogil:
    """Replaces the tree by the subtree under `new_root` (which becomes ROOT).

    Copies breadth-first into `scratch` and swaps the two, so the memory of
    discarded branches is reused. Nodes waiting for the network are not kept
    (call between moves, when nothing is in flight). The scratch is first
    given room for exactly the subtree (which fits: the tree held it), and a
    scratch left holding a large tree gives its memory back, so that a tree
    at its memory limit is not held twice (while copying it may be).
    """
    cdef int32_t node, copy, edge, first, i, child, nodes
    cdef int64_t edges
    cdef Tree swap
    # scratch node k is the copy of the k-th node in breadth-first order; map back through `queue`
    cdef int32_t* queue = <int32_t*>malloc(tree.node_count * sizeof(int32_t))
    if queue == NULL:
        return -1
    nodes = _subtree_order(tree, new_root, queue, &edges)
    scratch.node_count = 0
    scratch.edge_total = 0
    if ((tree.action_value != NULL and tree_enable_action_values(scratch) < 0)
            or _reserve_nodes(scratch, nodes) < 0 or _reserve_edges(scratch, edges) < 0
            or _copy_node(tree, new_root, scratch, NO_NODE) < 0):
        free(queue)
        return -1
    copy = 0
    while copy < scratch.node_count:
        node = queue[copy]
        if tree.edge_count[node] != UNEXPANDED and not tree.pending[node]:
            first = tree_add_edges(scratch, copy, &tree.move[tree.first_edge[node]], tree.edge_count[node])
            if first < 0:
                free(queue)
                return -1
            memcpy(&scratch.prior[first], &tree.prior[tree.first_edge[node]], tree.edge_count[node] * sizeof(float))
            if tree.action_value != NULL:
                memcpy(&scratch.action_value[first], &tree.action_value[tree.first_edge[node]],
                       tree.edge_count[node] * sizeof(float))
            for i in range(tree.edge_count[node]):
                edge = tree.first_edge[node] + i
                if tree.child[edge] != NO_NODE:
                    child = _copy_node(tree, tree.child[edge], scratch, copy)
                    if child < 0:
                        free(queue)
                        return -1
                    scratch.child[first + i] = child
        copy += 1
    free(queue)
    swap = tree[0]
    tree[0] = scratch[0]
    scratch[0] = swap
    if tree_bytes(scratch) > SCRATCH_KEPT_BYTES:
        return _release(scratch)
    return 0


def grown_capacity(capacity: int, needed: int, memory_limit: int = 0) -> int:
    """For tests only: the capacity a tree's node arrays of `capacity` nodes (the tree holding no edges) grow to
    so that they hold `needed`, within `memory_limit` bytes (0: none); -1 when they may not (past MAX_INDEX or
    the limit). Works the arithmetic out alone, allocating nothing."""
    cdef Tree tree
    tree.node_capacity = capacity
    tree.edge_capacity = 0
    tree.action_value = NULL
    tree.memory_limit = memory_limit
    return _grown(&tree, capacity, needed, tree_node_bytes())
