# The two AlphaZero encodings: the compact input (112 bitboards + 7 scalars per
# position) and the 4672-move policy index. Exact definitions: docs/encodings.md.
# Both are seen from the side to move (ranks mirrored for Black).

from libc.stdint cimport int32_t, uint64_t

from mcts_ext.position cimport GameStack, Move, Position

cpdef enum:
    NUM_MOVES = 4672          # 73 planes x 64 from-squares
    HISTORY_STEPS = 8
    PLANES_PER_STEP = 14
    COMPACT_PLANES = 112      # HISTORY_STEPS * PLANES_PER_STEP bitboards
    NUM_SCALARS = 7

# Writes the current position of `stack` and its 7 predecessors:
# planes[COMPACT_PLANES], scalars[NUM_SCALARS].
cdef void encode_stack(const GameStack* stack, uint64_t* planes, float* scalars) noexcept nogil

# The policy index of a move by `turn`, or -1 for a move no index expresses.
cdef int move_index(Move move, int turn) noexcept nogil

# The move an index names in `pos` (not checked for legality), or 0 when it
# leaves the board. Queen-like pawn moves to the last rank promote to a queen.
cdef Move index_move(const Position* pos, int index) noexcept nogil
