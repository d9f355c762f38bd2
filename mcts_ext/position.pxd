# The chess position, legal move generation, make-move, Zobrist keys and the
# game stack (history with repetition counts). Standard chess only.
#
# Hot functions are nogil and never raise: they report failure by return code.
# Validation (FEN parsing, checked moves) happens in the Python-facing Board.

from libc.stdint cimport uint8_t, int8_t, uint16_t, uint32_t, uint64_t

# A move in 16 bits:
#   bits 0-5    from square (0 = a1 ... 63 = h8)
#   bits 6-11   to square
#   bits 12-14  promotion piece type (KNIGHT..QUEEN), 0 for none
# Castling is the king's two-square move (e1g1), en passant the pawn's
# diagonal move to the en passant square, as in UCI.
ctypedef uint16_t Move

cdef enum:
    WHITE = 0
    BLACK = 1

cdef enum:
    PAWN = 0
    KNIGHT = 1
    BISHOP = 2
    ROOK = 3
    QUEEN = 4
    KING = 5
    NO_PIECE = 6

cdef enum:
    CASTLE_WHITE_KING = 1
    CASTLE_WHITE_QUEEN = 2
    CASTLE_BLACK_KING = 4
    CASTLE_BLACK_QUEEN = 8

cdef enum:
    MAX_MOVES = 256    # no chess position has more than 218 legal moves
    NO_SQUARE = -1

# Game status, in the order python-chess's Board.outcome() checks them.
cdef enum:
    ONGOING = 0
    CHECKMATE = 1
    INSUFFICIENT_MATERIAL = 2
    STALEMATE = 3
    FIFTY_MOVES = 4
    THREEFOLD_REPETITION = 5
    PLY_LIMIT = 6


ctypedef struct Position:
    uint64_t pieces[6]         # by piece type (PAWN..KING), both colours
    uint64_t colours[2]        # by colour (WHITE, BLACK)
    uint64_t key               # Zobrist key of placement, side, castling, and ep file only when ep_legal
    uint32_t halfmove_clock    # plies since the last capture or pawn move
    uint32_t fullmove_number   # starts at 1, incremented after Black moves
    int8_t ep_square           # square passed by a pawn that just moved two (python-chess's ep_square), or NO_SQUARE
    uint8_t ep_legal           # 1 when a legal en passant capture exists (shown in the FEN, part of the key)
    uint8_t turn               # WHITE or BLACK to move
    uint8_t castling           # CASTLE_* bits, only for rights whose king and rook are at home


ctypedef struct GameStack:
    Position* positions        # [capacity]; positions[0] is where the game started, [length - 1] the current position
    uint8_t* repetitions       # [capacity]; how many earlier positions of the game equal positions[i]
    Move* moves                # [capacity]; moves[i] led from positions[i - 1] to positions[i]; moves[0] unused
    int length                 # number of positions held (at least 1 once initialised)
    int capacity


# Positions.
cdef int piece_type_on(const Position* pos, int square) noexcept nogil
cdef bint in_check(const Position* pos) noexcept nogil
cdef int generate_legal(const Position* pos, Move* moves) noexcept nogil
cdef void make_move(const Position* pos, Move move, Position* out) noexcept nogil
cdef uint64_t compute_key(const Position* pos) noexcept nogil
cdef bint insufficient_material(const Position* pos) noexcept nogil
cdef uint64_t perft(const Position* pos, int depth, bint bulk, const unsigned char* stop) noexcept nogil
cdef str format_fen(const Position* pos)

# Game stacks. Functions returning int give -1 when memory runs out.
cdef int stack_init(GameStack* stack, int capacity) noexcept nogil
cdef void stack_free(GameStack* stack) noexcept nogil
cdef int stack_reserve(GameStack* stack, int capacity) noexcept nogil
cdef int stack_copy(GameStack* dst, const GameStack* src) noexcept nogil
cdef int stack_push(GameStack* stack, Move move) noexcept nogil
cdef int stack_status(const GameStack* stack, int legal_move_count, int ply_limit) noexcept nogil


cdef class Board:
    cdef GameStack stack
    cdef readonly int ply_limit     # plies after which the game is drawn; 0 for none

    cdef Position* current(self) noexcept nogil
    cdef Move parse_legal_uci(self, str uci) except 0
