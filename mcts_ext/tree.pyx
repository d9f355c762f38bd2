# cython: language_level=3
"""Growable flat arrays for one game's search tree (see tree.pxd for the fields)."""

from libc.math cimport NAN
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from mcts_ext.memory cimport grow

from mcts_ext.position cimport ONGOING, Move

cdef enum:
    INITIAL_NODES = 256
    INITIAL_EDGES = 4096


cdef int _reserve_nodes(Tree* tree, int32_t capacity) noexcept nogil:
    if capacity <= tree.node_capacity:
        return 0
    if (grow(<void**>&tree.first_edge, capacity, sizeof(int32_t)) < 0
            or grow(<void**>&tree.edge_count, capacity, sizeof(int16_t)) < 0
            or grow(<void**>&tree.visits, capacity, sizeof(int32_t)) < 0
            or grow(<void**>&tree.value_sum, capacity, sizeof(float)) < 0
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


cdef int _reserve_edges(Tree* tree, int32_t capacity) noexcept nogil:
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
    """Appends an unexpanded node and returns its index."""
    if tree.node_count == tree.node_capacity and _reserve_nodes(tree, 2 * tree.node_capacity) < 0:
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
    """Gives `node` one edge per move (priors 0, no children) and returns the first edge."""
    cdef int32_t needed = tree.edge_total + count
    cdef int32_t capacity = tree.edge_capacity
    while capacity < needed:
        capacity *= 2
    if capacity > tree.edge_capacity and _reserve_edges(tree, capacity) < 0:
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
    tree.edge_total = needed
    return first


cdef int tree_enable_action_values(Tree* tree) noexcept nogil:
    """Gives the tree its per-edge action values (NaN: none yet) unless it has them; -1 when memory runs out."""
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


cdef int tree_keep_subtree(Tree* tree, int32_t new_root, Tree* scratch) noexcept nogil:
    """Replaces the tree by the subtree under `new_root` (which becomes ROOT).

    Copies breadth-first into `scratch` and swaps the two, so the memory of
    discarded branches is reused. Nodes waiting for the network are not kept
    (call between moves, when nothing is in flight).
    """
    cdef int32_t node, copy, edge, first, i, child
    cdef Tree swap
    scratch.node_count = 0
    scratch.edge_total = 0
    if tree.action_value != NULL and tree_enable_action_values(scratch) < 0:
        return -1
    if _copy_node(tree, new_root, scratch, NO_NODE) < 0:
        return -1
    # scratch node k is the copy of the k-th node in breadth-first order; map back through `queue`
    cdef int32_t* queue = <int32_t*>malloc(tree.node_count * sizeof(int32_t))
    if queue == NULL:
        return -1
    queue[0] = new_root
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
                    queue[child] = tree.child[edge]
        copy += 1
    free(queue)
    swap = tree[0]
    tree[0] = scratch[0]
    scratch[0] = swap
    return 0
