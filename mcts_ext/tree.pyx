# cython: language_level=3
"""Growable flat arrays for one game's search tree (see tree.pxd for the fields and their size)."""

from libc.math cimport NAN
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

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


cdef inline size_t _node_block_bytes(int64_t capacity) noexcept nogil:
    return <size_t>capacity * tree_node_bytes()


cdef inline size_t _edge_block_bytes(int64_t capacity, bint action_values) noexcept nogil:
    return <size_t>capacity * tree_edge_bytes(action_values)


cdef void _place_nodes(Tree* tree, char* block, size_t capacity) noexcept nogil:
    """Points the node arrays into `block`, laid out for `capacity` nodes by decreasing item size: every
    array's offset is then a multiple of its item size, and malloc aligns the block for any type."""
    tree.value_sum = <double*>block
    block += capacity * sizeof(double)
    tree.first_edge = <int32_t*>block
    block += capacity * sizeof(int32_t)
    tree.visits = <int32_t*>block
    block += capacity * sizeof(int32_t)
    tree.in_flight = <int32_t*>block
    block += capacity * sizeof(int32_t)
    tree.parent = <int32_t*>block
    block += capacity * sizeof(int32_t)
    tree.raw_value = <float*>block
    block += capacity * sizeof(float)
    tree.edge_count = <int16_t*>block
    block += capacity * sizeof(int16_t)
    tree.proof_plies = <int16_t*>block
    block += capacity * sizeof(int16_t)
    tree.terminal = <int8_t*>block
    block += capacity * sizeof(int8_t)
    tree.proof = <int8_t*>block
    block += capacity * sizeof(int8_t)
    tree.pending = <uint8_t*>block


cdef void _place_edges(Tree* tree, char* block, size_t capacity, bint action_values) noexcept nogil:
    """Points the edge arrays into `block` for `capacity` edges, as _place_nodes (action_value NULL without)."""
    tree.prior = <float*>block
    block += capacity * sizeof(float)
    tree.child = <int32_t*>block
    block += capacity * sizeof(int32_t)
    tree.action_value = NULL
    if action_values:
        tree.action_value = <float*>block
        block += capacity * sizeof(float)
    tree.move = <Move*>block


cdef int _lay_nodes(Tree* tree, int64_t capacity) noexcept nogil:
    """Moves the tree's nodes into a new block of `capacity` (at least node_count) nodes; -1 (the tree as it
    was) when malloc fails."""
    cdef size_t bytes = _node_block_bytes(capacity)
    cdef char* block = <char*>malloc(bytes if bytes > 0 else 1)
    cdef Tree old = tree[0]
    cdef size_t n = <size_t>tree.node_count
    if block == NULL:
        return -1
    _place_nodes(tree, block, <size_t>capacity)
    if n > 0:
        memcpy(tree.value_sum, old.value_sum, n * sizeof(double))
        memcpy(tree.first_edge, old.first_edge, n * sizeof(int32_t))
        memcpy(tree.visits, old.visits, n * sizeof(int32_t))
        memcpy(tree.in_flight, old.in_flight, n * sizeof(int32_t))
        memcpy(tree.parent, old.parent, n * sizeof(int32_t))
        memcpy(tree.raw_value, old.raw_value, n * sizeof(float))
        memcpy(tree.edge_count, old.edge_count, n * sizeof(int16_t))
        memcpy(tree.proof_plies, old.proof_plies, n * sizeof(int16_t))
        memcpy(tree.terminal, old.terminal, n * sizeof(int8_t))
        memcpy(tree.proof, old.proof, n * sizeof(int8_t))
        memcpy(tree.pending, old.pending, n * sizeof(uint8_t))
    free(old.node_block)
    tree.node_block = block
    tree.node_capacity = capacity
    return 0


cdef int _lay_edges(Tree* tree, int64_t capacity, bint action_values) noexcept nogil:
    """Moves the tree's edges into a new block of `capacity` (at least edge_total) edges, with action values
    or without (new ones NaN: none yet); -1 (the tree as it was) when malloc fails."""
    cdef size_t bytes = _edge_block_bytes(capacity, action_values)
    cdef char* block = <char*>malloc(bytes if bytes > 0 else 1)
    cdef Tree old = tree[0]
    cdef size_t n = <size_t>tree.edge_total, i
    if block == NULL:
        return -1
    _place_edges(tree, block, <size_t>capacity, action_values)
    if n > 0:
        memcpy(tree.prior, old.prior, n * sizeof(float))
        memcpy(tree.child, old.child, n * sizeof(int32_t))
        memcpy(tree.move, old.move, n * sizeof(Move))
    if action_values and old.action_value != NULL:
        if n > 0:
            memcpy(tree.action_value, old.action_value, n * sizeof(float))
    elif action_values:
        for i in range(n):
            tree.action_value[i] = NAN
    free(old.edge_block)
    tree.edge_block = block
    tree.edge_capacity = capacity
    return 0


cdef int _reserve_nodes(Tree* tree, int64_t capacity) noexcept nogil:
    """Grows the node arrays to exactly `capacity` (callers check MAX_INDEX and the limit: _grown)."""
    if capacity <= tree.node_capacity:
        return 0
    return _lay_nodes(tree, capacity)


cdef int _reserve_edges(Tree* tree, int64_t capacity) noexcept nogil:
    """Grows the edge arrays to exactly `capacity` (as _reserve_nodes)."""
    if capacity <= tree.edge_capacity:
        return 0
    return _lay_edges(tree, capacity, tree.action_value != NULL)


cdef int tree_init(Tree* tree) noexcept nogil:
    memset(tree, 0, sizeof(Tree))  # no blocks, no arrays, no limit
    if _reserve_nodes(tree, INITIAL_NODES) < 0 or _reserve_edges(tree, INITIAL_EDGES) < 0:
        tree_free(tree)
        return -1
    return tree_reset(tree)


cdef void tree_free(Tree* tree) noexcept nogil:
    cdef size_t limit = tree.memory_limit
    free(tree.node_block)
    free(tree.edge_block)
    memset(tree, 0, sizeof(Tree))  # every array NULL, capacities and counts 0
    tree.memory_limit = limit


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
    """Gives the tree its per-edge action values (NaN: none yet) unless it has them; -1 (the tree as it was)
    when they do not fit: not within its memory limit beside its nodes, even for only the edges it holds, or
    malloc fails.

    They join the edge block, which is laid out again: within a limit, with
    room for fewer edges than before when the old room with action values
    would pass it (a search enables them at its first batch, when the tree
    holds few edges; a tree that had grown without them may be too big).
    """
    cdef int64_t capacity = tree.edge_capacity, fit
    cdef size_t nodes, room
    if tree.action_value != NULL:
        return 0
    if tree.memory_limit != 0:
        nodes = _node_block_bytes(tree.node_capacity)
        room = tree.memory_limit - nodes if nodes < tree.memory_limit else 0
        fit = <int64_t>(room // tree_edge_bytes(True))
        if fit < tree.edge_total:
            return -1
        if fit < capacity:
            capacity = fit
    return _lay_edges(tree, capacity, True)


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


cdef bint _copy_fits(const Tree* tree, const Tree* scratch, int64_t nodes, int64_t edges,
                     size_t queue_bytes) noexcept nogil:
    """Whether the tree, the scratch grown to hold `nodes` and `edges` (at its capacities when those are more,
    its edges laid out as the tree's) and the copy's queue of `queue_bytes` fit the tree's memory limit together."""
    cdef bint action_values = tree.action_value != NULL
    if tree.memory_limit == 0:
        return True
    if nodes < scratch.node_capacity:
        nodes = scratch.node_capacity
    if edges < scratch.edge_capacity:
        edges = scratch.edge_capacity
    return (tree_bytes(tree) + _node_block_bytes(nodes) + _edge_block_bytes(edges, action_values) + queue_bytes
            <= tree.memory_limit)


cdef int _fresh(Tree* tree) noexcept nogil:
    """tree_keep_subtree's answer when the copy does not fit: the tree starts afresh."""
    return SUBTREE_DROPPED if tree_reset(tree) >= 0 else -1


cdef int tree_keep_subtree(Tree* tree, int32_t new_root, Tree* scratch, size_t* peak_bytes) noexcept nogil:
    """Replaces the tree by the subtree under `new_root` (which becomes ROOT); returns SUBTREE_KEPT, or
    SUBTREE_DROPPED when the tree started afresh instead (its copy would not fit the tree's memory limit),
    or -1 when malloc fails.

    Copies breadth-first into `scratch` and swaps the two, so the memory of
    discarded branches is reused. Nodes waiting for the network are not kept
    (call between moves, when nothing is in flight). The copy counts in the
    tree's limit: the tree, the scratch (grown to hold the subtree, if it
    must) and the queue listing the subtree must fit in it together, and a
    scratch still holding an old tree gives its memory back first when they
    would not; so a tree near its limit is not kept (its search starts
    afresh, as without reuse). `peak_bytes` keeps the most that the three
    took together (for tests and reports). A scratch left holding a large
    tree gives its memory back, so that a large tree is not held twice.
    """
    cdef int32_t node, copy, edge, first, i, child, nodes
    cdef int64_t edges, node_room, edge_room
    cdef size_t queue_bytes = <size_t>tree.node_count * sizeof(int32_t), limit, scratch_limit, used
    cdef int32_t* queue
    cdef Tree swap
    scratch.node_count = 0
    scratch.edge_total = 0
    # The queue before the subtree's size is known (listing it takes the queue): it must fit first.
    if not _copy_fits(tree, scratch, 0, 0, queue_bytes):
        tree_free(scratch)
        if not _copy_fits(tree, scratch, 0, 0, queue_bytes):
            return _fresh(tree)
    # scratch node k is the copy of the k-th node in breadth-first order; map back through `queue`
    queue = <int32_t*>malloc(queue_bytes)
    if queue == NULL:
        return -1
    nodes = _subtree_order(tree, new_root, queue, &edges)
    if not _copy_fits(tree, scratch, nodes, edges, queue_bytes):
        tree_free(scratch)
        if not _copy_fits(tree, scratch, nodes, edges, queue_bytes):
            free(queue)
            return _fresh(tree)
    # Room for the whole subtree now (what the check above counted), so that the copy below never grows it. The
    # scratch's arrays hold nothing to keep: they are given back before the new ones are taken, not after.
    node_room = nodes if nodes > scratch.node_capacity else scratch.node_capacity
    edge_room = edges if edges > scratch.edge_capacity else scratch.edge_capacity
    if (node_room > scratch.node_capacity or edge_room > scratch.edge_capacity
            or (scratch.action_value != NULL) != (tree.action_value != NULL)):
        tree_free(scratch)
        if _lay_nodes(scratch, node_room) < 0 or _lay_edges(scratch, edge_room, tree.action_value != NULL) < 0:
            free(queue)
            return -1
    used = tree_bytes(tree) + tree_bytes(scratch) + queue_bytes
    if peak_bytes != NULL and used > peak_bytes[0]:
        peak_bytes[0] = used
    if _copy_node(tree, new_root, scratch, NO_NODE) < 0:
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
    # Each keeps its own limit: only the arrays change hands.
    limit = tree.memory_limit
    scratch_limit = scratch.memory_limit
    swap = tree[0]
    tree[0] = scratch[0]
    scratch[0] = swap
    tree.memory_limit = limit
    scratch.memory_limit = scratch_limit
    if tree_bytes(scratch) > SCRATCH_KEPT_BYTES:
        tree_free(scratch)
    return SUBTREE_KEPT


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


def tree_layout(nodes: int, edges: int, action_values: bool) -> dict:
    """For tests only: where a tree with room for `nodes` nodes and `edges` edges (with action values or not)
    puts its arrays, as {"nodes": [(array, item bytes, offset in node_block)] in block order, "edges": the
    same for edge_block, "nodes_bytes" and "edges_bytes": what each block was allocated with, "tree_bytes"}.

    Raises MemoryError when the blocks cannot be allocated.
    """
    cdef Tree tree
    memset(&tree, 0, sizeof(Tree))
    if _lay_nodes(&tree, nodes) < 0 or _lay_edges(&tree, edges, action_values) < 0:
        tree_free(&tree)
        raise MemoryError()
    cdef size_t n = <size_t>tree.node_block, e = <size_t>tree.edge_block
    node_arrays = [("value_sum", sizeof(double), <size_t>tree.value_sum - n),
                   ("first_edge", sizeof(int32_t), <size_t>tree.first_edge - n),
                   ("visits", sizeof(int32_t), <size_t>tree.visits - n),
                   ("in_flight", sizeof(int32_t), <size_t>tree.in_flight - n),
                   ("parent", sizeof(int32_t), <size_t>tree.parent - n),
                   ("raw_value", sizeof(float), <size_t>tree.raw_value - n),
                   ("edge_count", sizeof(int16_t), <size_t>tree.edge_count - n),
                   ("proof_plies", sizeof(int16_t), <size_t>tree.proof_plies - n),
                   ("terminal", sizeof(int8_t), <size_t>tree.terminal - n),
                   ("proof", sizeof(int8_t), <size_t>tree.proof - n),
                   ("pending", sizeof(uint8_t), <size_t>tree.pending - n)]
    edge_arrays = [("prior", sizeof(float), <size_t>tree.prior - e), ("child", sizeof(int32_t), <size_t>tree.child - e)]
    if tree.action_value != NULL:
        edge_arrays.append(("action_value", sizeof(float), <size_t>tree.action_value - e))
    edge_arrays.append(("move", sizeof(Move), <size_t>tree.move - e))
    layout = {"nodes": node_arrays, "edges": edge_arrays, "nodes_bytes": _node_block_bytes(tree.node_capacity),
              "edges_bytes": _edge_block_bytes(tree.edge_capacity, tree.action_value != NULL),
              "tree_bytes": tree_bytes(&tree)}
    tree_free(&tree)
    return layout


cdef bint _same_tree(const Tree* tree, const Tree* before, const uint8_t* nodes, const uint8_t* edges) noexcept nogil:
    """Whether `tree` is `before` (its blocks, capacities and counts) and its blocks still hold these bytes."""
    return (tree.node_block == before.node_block and tree.edge_block == before.edge_block
            and tree.action_value == before.action_value and tree.node_capacity == before.node_capacity
            and tree.edge_capacity == before.edge_capacity and tree.node_count == before.node_count
            and tree.edge_total == before.edge_total and tree_bytes(tree) == tree_bytes(before)
            and memcmp(tree.node_block, nodes, _node_block_bytes(tree.node_capacity)) == 0
            and memcmp(tree.edge_block, edges, _edge_block_bytes(tree.edge_capacity, tree.action_value != NULL)) == 0)


def failed_growth_leaves_the_tree(arrays: str) -> bool:
    """For tests only: whether a tree holding a few nodes and edges is left exactly as it was (its blocks, their
    bytes, its capacities, tree_bytes) by a growth that fails: of its "nodes" or "edges" arrays to more than
    malloc can give, or enabling its "action_values" that its memory limit has no room for.

    Raises ValueError for another `arrays`.
    """
    if arrays not in ("nodes", "edges", "action_values"):
        raise ValueError(f"arrays must be 'nodes', 'edges' or 'action_values', got {arrays!r}")
    cdef Tree tree
    cdef Tree before
    cdef Move moves[3]
    cdef int32_t node
    cdef uint8_t* nodes = NULL
    cdef uint8_t* edges = NULL
    cdef bint failed, same = False
    cdef int64_t impossible = <int64_t>1 << 45  # items: more bytes than a 64-bit address space maps
    moves[0], moves[1], moves[2] = 11, 22, 33
    if tree_init(&tree) < 0:
        raise MemoryError()
    try:
        for node in range(1, 6):
            if tree_add_node(&tree, node - 1) < 0 or tree_add_edges(&tree, node - 1, moves, 3) < 0:
                raise MemoryError()
            tree.visits[node] = node
            tree.value_sum[node] = 0.5 * node
            tree.prior[3 * node - 1] = 0.25
        # A byte short of the nodes and the edges held, with action values: none fit, even in a smaller block.
        tree.memory_limit = _node_block_bytes(tree.node_capacity) + _edge_block_bytes(tree.edge_total, True) - 1
        before = tree
        nodes = <uint8_t*>malloc(_node_block_bytes(tree.node_capacity))
        edges = <uint8_t*>malloc(_edge_block_bytes(tree.edge_capacity, False))
        if nodes == NULL or edges == NULL:
            raise MemoryError()
        memcpy(nodes, tree.node_block, _node_block_bytes(tree.node_capacity))
        memcpy(edges, tree.edge_block, _edge_block_bytes(tree.edge_capacity, False))
        if arrays == "nodes":
            failed = _reserve_nodes(&tree, impossible) < 0
        elif arrays == "edges":
            failed = _reserve_edges(&tree, impossible) < 0
        else:
            failed = tree_enable_action_values(&tree) < 0
        same = failed and _same_tree(&tree, &before, nodes, edges)
    finally:
        free(nodes)
        free(edges)
        tree_free(&tree)
    return same
