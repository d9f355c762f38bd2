# cython: language_level=3
"""Bitboard chess: legal move generation, make-move, Zobrist keys, FEN, perft.

The module reads top-down: tables and their set-up, attack lookups, move
generation, make-move, game status, game stacks, and last the Python-facing
Board, which validates everything that comes from outside.

Over 600 lines: the move generator's cdef functions are inlined into the
search (position.pxd declares them) and share this module's tables, so the
chess core stays one compilation unit; each section above is one concern.
"""

from libc.stdint cimport int8_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from mcts_ext.bitboard cimport flip_vertical, lsb, popcount, square_bb

from mcts_ext.errors import IllegalMoveError, InvalidFenError

STARTING_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"

SQUARE_NAMES = [f + r for r in "12345678" for f in "abcdefgh"]

cdef enum:
    # The largest half-move clock and full-move number (2**31 - 1): a FEN may
    # give any count up to it, and moves stop counting there, so that every
    # FEN a board writes reads back (and the clock fits an int everywhere).
    MAX_COUNTER = 2147483647

COUNTER_LIMIT = MAX_COUNTER
"""The largest half-move clock or full-move number a FEN may hold (2**31 - 1)."""
_PIECE_LETTERS = "pnbrqk"
_PROMOTION_LETTERS = {"n": KNIGHT, "b": BISHOP, "r": ROOK, "q": QUEEN}

# Termination codes as Python names (see the enum in position.pxd).
TERMINATIONS = {
    ONGOING: None,
    CHECKMATE: "checkmate",
    INSUFFICIENT_MATERIAL: "insufficient_material",
    STALEMATE: "stalemate",
    FIFTY_MOVES: "fifty_moves",
    THREEFOLD_REPETITION: "threefold_repetition",
    PLY_LIMIT: "ply_limit",
}

# ---------------------------------------------------------------------------
# Tables

cdef uint64_t FILE_A = 0x0101010101010101
cdef uint64_t FILE_H = FILE_A << 7
cdef uint64_t RANK_1 = 0xFF
cdef uint64_t RANK_8 = RANK_1 << 56
cdef uint64_t DARK_SQUARES = 0xAA55AA55AA55AA55
cdef uint64_t LIGHT_SQUARES = ~DARK_SQUARES

cdef uint64_t KNIGHT_ATTACKS[64]
cdef uint64_t KING_ATTACKS[64]
cdef uint64_t PAWN_ATTACKS[2][64]      # squares a pawn of that colour on that square attacks
cdef uint64_t BETWEEN[64][64]          # squares strictly between two aligned squares, else 0
cdef uint64_t LINE[64][64]             # the whole line through two aligned squares, else 0
cdef uint8_t CASTLING_KEPT[64]         # castling bits that survive a move from or to this square

ctypedef struct Magic:
    uint64_t mask       # relevant occupancy (the ray without its last square)
    uint64_t magic
    uint64_t* attacks   # this square's slice of the shared table
    int shift

cdef Magic ROOK_MAGICS[64]
cdef Magic BISHOP_MAGICS[64]
cdef uint64_t ROOK_TABLE[0x19000]
cdef uint64_t BISHOP_TABLE[0x1480]

cdef uint64_t ZOBRIST_PIECE[2][6][64]
cdef uint64_t ZOBRIST_CASTLING[16]
cdef uint64_t ZOBRIST_EP_FILE[8]
cdef uint64_t ZOBRIST_BLACK_TO_MOVE

# (file, rank) steps of the four rays, flattened.
cdef int ROOK_DELTAS[8]
cdef int BISHOP_DELTAS[8]
ROOK_DELTAS[:] = [0, 1, 0, -1, 1, 0, -1, 0]
BISHOP_DELTAS[:] = [1, 1, 1, -1, -1, 1, -1, -1]


cdef inline uint64_t xorshift64star(uint64_t* state) noexcept nogil:
    state[0] ^= state[0] >> 12
    state[0] ^= state[0] << 25
    state[0] ^= state[0] >> 27
    return state[0] * <uint64_t>2685821657736338717


cdef uint64_t slow_slider_attacks(int square, uint64_t occupied, const int* deltas) noexcept nogil:
    """Ray attacks by stepping square by square; only used to build the tables."""
    cdef uint64_t attacks = 0
    cdef int d, f, r
    for d in range(4):
        f = (square & 7) + deltas[2 * d]
        r = (square >> 3) + deltas[2 * d + 1]
        while 0 <= f < 8 and 0 <= r < 8:
            attacks |= square_bb(r * 8 + f)
            if occupied & square_bb(r * 8 + f):
                break
            f += deltas[2 * d]
            r += deltas[2 * d + 1]
    return attacks


cdef inline uint64_t magic_index(const Magic* m, uint64_t occupied) noexcept nogil:
    return ((occupied & m.mask) * m.magic) >> m.shift


cdef uint64_t _occupancy[4096]
cdef uint64_t _reference[4096]
cdef int _epoch[4096]


cdef int MAGIC_SEEDS[8]
MAGIC_SEEDS[:] = [728, 10316, 55013, 32803, 12281, 15100, 16645, 255]  # Stockfish's, one per rank


cdef void init_magics(Magic* magics, uint64_t* table, const int* deltas) noexcept nogil:
    """Finds 'fancy' magics by seeded trial, as Stockfish does at start-up (a few ms)."""
    cdef int square, size = 0, i, attempt = 0
    cdef uint64_t edges, b, idx, rng
    cdef Magic* m
    for i in range(4096):
        _epoch[i] = 0
    for square in range(64):
        edges = ((RANK_1 | RANK_8) & ~(RANK_1 << (8 * (square >> 3)))) | \
                ((FILE_A | FILE_H) & ~(FILE_A << (square & 7)))
        m = &magics[square]
        m.mask = slow_slider_attacks(square, 0, deltas) & ~edges
        m.shift = 64 - popcount(m.mask)
        m.attacks = table if square == 0 else magics[square - 1].attacks + size
        b = 0
        size = 0
        while True:  # enumerate every subset of the mask (Carry-Rippler)
            _occupancy[size] = b
            _reference[size] = slow_slider_attacks(square, b, deltas)
            size += 1
            b = (b - m.mask) & m.mask
            if b == 0:
                break
        rng = <uint64_t>MAGIC_SEEDS[square >> 3]
        i = 0
        while i < size:
            m.magic = 0
            while popcount((m.magic * m.mask) >> 56) < 6:
                m.magic = xorshift64star(&rng) & xorshift64star(&rng) & xorshift64star(&rng)
            attempt += 1
            i = 0
            while i < size:
                idx = magic_index(m, _occupancy[i])
                if _epoch[idx] < attempt:
                    _epoch[idx] = attempt
                    m.attacks[idx] = _reference[i]
                elif m.attacks[idx] != _reference[i]:
                    break
                i += 1


cdef inline uint64_t rook_attacks(int square, uint64_t occupied) noexcept nogil:
    cdef const Magic* m = &ROOK_MAGICS[square]
    return m.attacks[magic_index(m, occupied)]


cdef inline uint64_t bishop_attacks(int square, uint64_t occupied) noexcept nogil:
    cdef const Magic* m = &BISHOP_MAGICS[square]
    return m.attacks[magic_index(m, occupied)]


cdef uint64_t step_attacks(int square, const int* deltas, int count) noexcept nogil:
    """Squares one step away by (file, rank) deltas, flattened as df0, dr0, df1, dr1, ..."""
    cdef uint64_t attacks = 0
    cdef int i, f, r
    for i in range(count):
        f = (square & 7) + deltas[2 * i]
        r = (square >> 3) + deltas[2 * i + 1]
        if 0 <= f < 8 and 0 <= r < 8:
            attacks |= square_bb(r * 8 + f)
    return attacks


cdef inline uint64_t splitmix64(uint64_t* state) noexcept nogil:
    state[0] += <uint64_t>0x9E3779B97F4A7C15
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef void init_tables() noexcept:
    global ZOBRIST_BLACK_TO_MOVE
    cdef int knight_deltas[16]
    cdef int king_deltas[16]
    cdef int white_pawn_deltas[4]
    cdef int black_pawn_deltas[4]
    knight_deltas[:] = [1, 2, 2, 1, 2, -1, 1, -2, -1, -2, -2, -1, -2, 1, -1, 2]
    king_deltas[:] = [0, 1, 1, 1, 1, 0, 1, -1, 0, -1, -1, -1, -1, 0, -1, 1]
    white_pawn_deltas[:] = [-1, 1, 1, 1]
    black_pawn_deltas[:] = [-1, -1, 1, -1]
    cdef int a, b, c, d
    cdef uint64_t ray
    cdef uint64_t rng = 0x5EED
    for a in range(64):
        KNIGHT_ATTACKS[a] = step_attacks(a, knight_deltas, 8)
        KING_ATTACKS[a] = step_attacks(a, king_deltas, 8)
        PAWN_ATTACKS[WHITE][a] = step_attacks(a, white_pawn_deltas, 2)
        PAWN_ATTACKS[BLACK][a] = step_attacks(a, black_pawn_deltas, 2)
        CASTLING_KEPT[a] = 15
    CASTLING_KEPT[4] = 15 & ~(CASTLE_WHITE_KING | CASTLE_WHITE_QUEEN)     # e1
    CASTLING_KEPT[0] = 15 & ~CASTLE_WHITE_QUEEN                            # a1
    CASTLING_KEPT[7] = 15 & ~CASTLE_WHITE_KING                             # h1
    CASTLING_KEPT[60] = 15 & ~(CASTLE_BLACK_KING | CASTLE_BLACK_QUEEN)    # e8
    CASTLING_KEPT[56] = 15 & ~CASTLE_BLACK_QUEEN                           # a8
    CASTLING_KEPT[63] = 15 & ~CASTLE_BLACK_KING                            # h8
    init_magics(ROOK_MAGICS, ROOK_TABLE, ROOK_DELTAS)
    init_magics(BISHOP_MAGICS, BISHOP_TABLE, BISHOP_DELTAS)
    for a in range(64):
        for b in range(64):
            BETWEEN[a][b] = 0
            LINE[a][b] = 0
            if a == b:
                continue
            if rook_attacks(a, 0) & square_bb(b):
                BETWEEN[a][b] = rook_attacks(a, square_bb(b)) & rook_attacks(b, square_bb(a))
                LINE[a][b] = (rook_attacks(a, 0) & rook_attacks(b, 0)) | square_bb(a) | square_bb(b)
            elif bishop_attacks(a, 0) & square_bb(b):
                BETWEEN[a][b] = bishop_attacks(a, square_bb(b)) & bishop_attacks(b, square_bb(a))
                LINE[a][b] = (bishop_attacks(a, 0) & bishop_attacks(b, 0)) | square_bb(a) | square_bb(b)
    for c in range(2):
        for d in range(6):
            for a in range(64):
                ZOBRIST_PIECE[c][d][a] = splitmix64(&rng)
    for a in range(16):
        ZOBRIST_CASTLING[a] = splitmix64(&rng) if a else 0
    for a in range(8):
        ZOBRIST_EP_FILE[a] = splitmix64(&rng)
    ZOBRIST_BLACK_TO_MOVE = splitmix64(&rng)


init_tables()

# ---------------------------------------------------------------------------
# Attacks

cdef inline int piece_type_on(const Position* pos, int square) noexcept nogil:
    cdef uint64_t bb = square_bb(square)
    cdef int t
    for t in range(6):
        if pos.pieces[t] & bb:
            return t
    return NO_PIECE


cdef inline int king_square(const Position* pos, int colour) noexcept nogil:
    return lsb(pos.pieces[KING] & pos.colours[colour])


cdef inline uint64_t attackers_of(const Position* pos, int square, int by, uint64_t occupied) noexcept nogil:
    """Pieces of colour `by` attacking `square`, sliders seeing through `occupied`."""
    cdef uint64_t them = pos.colours[by]
    return them & (
        (KNIGHT_ATTACKS[square] & pos.pieces[KNIGHT])
        | (PAWN_ATTACKS[by ^ 1][square] & pos.pieces[PAWN])
        | (KING_ATTACKS[square] & pos.pieces[KING])
        | (rook_attacks(square, occupied) & (pos.pieces[ROOK] | pos.pieces[QUEEN]))
        | (bishop_attacks(square, occupied) & (pos.pieces[BISHOP] | pos.pieces[QUEEN])))


cdef uint64_t attacked_squares(const Position* pos, int by, uint64_t occupied) noexcept nogil:
    """Every square colour `by` attacks, sliders seeing through `occupied`."""
    cdef uint64_t them = pos.colours[by]
    cdef uint64_t pawns = pos.pieces[PAWN] & them
    cdef uint64_t attacks, bb
    if by == WHITE:
        attacks = ((pawns & ~FILE_A) << 7) | ((pawns & ~FILE_H) << 9)
    else:
        attacks = ((pawns & ~FILE_A) >> 9) | ((pawns & ~FILE_H) >> 7)
    attacks |= KING_ATTACKS[king_square(pos, by)]
    bb = pos.pieces[KNIGHT] & them
    while bb:
        attacks |= KNIGHT_ATTACKS[lsb(bb)]
        bb &= bb - 1
    bb = (pos.pieces[BISHOP] | pos.pieces[QUEEN]) & them
    while bb:
        attacks |= bishop_attacks(lsb(bb), occupied)
        bb &= bb - 1
    bb = (pos.pieces[ROOK] | pos.pieces[QUEEN]) & them
    while bb:
        attacks |= rook_attacks(lsb(bb), occupied)
        bb &= bb - 1
    return attacks


cdef bint in_check(const Position* pos) noexcept nogil:
    cdef uint64_t occupied = pos.colours[WHITE] | pos.colours[BLACK]
    return attackers_of(pos, king_square(pos, pos.turn), pos.turn ^ 1, occupied) != 0


cdef bint en_passant_is_legal(const Position* pos, int from_square) noexcept nogil:
    """Whether the pawn on from_square may capture en passant without exposing its king.

    Covers the horizontal pin (king and enemy rook on the rank both pawns leave)
    and checks the capture does not resolve (a knight's or a second piece's check).
    """
    cdef int us = pos.turn
    cdef int target = pos.ep_square
    cdef int captured = target - 8 if us == WHITE else target + 8
    cdef uint64_t occupied = ((pos.colours[WHITE] | pos.colours[BLACK])
                              ^ square_bb(from_square) ^ square_bb(captured)) | square_bb(target)
    cdef uint64_t them = pos.colours[us ^ 1] & ~square_bb(captured)
    cdef int king = king_square(pos, us)
    return (them & (
        (rook_attacks(king, occupied) & (pos.pieces[ROOK] | pos.pieces[QUEEN]))
        | (bishop_attacks(king, occupied) & (pos.pieces[BISHOP] | pos.pieces[QUEEN]))
        | (KNIGHT_ATTACKS[king] & pos.pieces[KNIGHT])
        | (PAWN_ATTACKS[us][king] & pos.pieces[PAWN]))) == 0


cdef bint has_legal_en_passant(const Position* pos) noexcept nogil:
    if pos.ep_square == NO_SQUARE:
        return False
    cdef uint64_t pawns = PAWN_ATTACKS[pos.turn ^ 1][pos.ep_square] & pos.pieces[PAWN] & pos.colours[pos.turn]
    while pawns:
        if en_passant_is_legal(pos, lsb(pawns)):
            return True
        pawns &= pawns - 1
    return False

# ---------------------------------------------------------------------------
# Move generation

cdef inline Move make_move_code(int from_square, int to_square, int promotion) noexcept nogil:
    return <Move>(from_square | (to_square << 6) | (promotion << 12))


cdef inline int add_moves(Move* moves, int n, int from_square, uint64_t targets) noexcept nogil:
    while targets:
        moves[n] = make_move_code(from_square, lsb(targets), 0)
        n += 1
        targets &= targets - 1
    return n


cdef inline int add_pawn_moves(Move* moves, int n, int from_square, uint64_t targets) noexcept nogil:
    cdef int to_square
    while targets:
        to_square = lsb(targets)
        targets &= targets - 1
        if square_bb(to_square) & (RANK_1 | RANK_8):
            moves[n] = make_move_code(from_square, to_square, QUEEN)
            moves[n + 1] = make_move_code(from_square, to_square, ROOK)
            moves[n + 2] = make_move_code(from_square, to_square, BISHOP)
            moves[n + 3] = make_move_code(from_square, to_square, KNIGHT)
            n += 4
        else:
            moves[n] = make_move_code(from_square, to_square, 0)
            n += 1
    return n


cdef int generate_legal(const Position* pos, Move* moves) noexcept nogil:
    """Writes the legal moves into `moves` (room for MAX_MOVES) and returns their count.

    Legal by construction: a check mask restricts non-king moves to capturing or
    blocking a single checker, pinned pieces stay on the line through their king,
    and the king avoids every square the opponent attacks with the king itself
    lifted off the board (so it cannot step back along a slider's ray).
    """
    cdef int us = pos.turn
    cdef int them = us ^ 1
    cdef uint64_t own = pos.colours[us]
    cdef uint64_t enemy = pos.colours[them]
    cdef uint64_t occupied = own | enemy
    cdef int king = king_square(pos, us)
    cdef uint64_t enemy_diagonal = (pos.pieces[BISHOP] | pos.pieces[QUEEN]) & enemy
    cdef uint64_t enemy_straight = (pos.pieces[ROOK] | pos.pieces[QUEEN]) & enemy
    cdef uint64_t danger = attacked_squares(pos, them, occupied ^ square_bb(king))
    cdef int n = add_moves(moves, 0, king, KING_ATTACKS[king] & ~own & ~danger)

    cdef uint64_t checkers = enemy & (
        (KNIGHT_ATTACKS[king] & pos.pieces[KNIGHT])
        | (PAWN_ATTACKS[us][king] & pos.pieces[PAWN])
        | (rook_attacks(king, occupied) & enemy_straight)
        | (bishop_attacks(king, occupied) & enemy_diagonal))
    if checkers & (checkers - 1):
        return n  # double check: only the king moves
    cdef uint64_t check_mask = ~(<uint64_t>0)
    if checkers:
        check_mask = BETWEEN[king][lsb(checkers)] | checkers

    cdef uint64_t pinned = 0, between
    cdef uint64_t snipers = (rook_attacks(king, 0) & enemy_straight) | (bishop_attacks(king, 0) & enemy_diagonal)
    while snipers:
        between = BETWEEN[king][lsb(snipers)] & occupied
        if between and not (between & (between - 1)) and (between & own):
            pinned |= between
        snipers &= snipers - 1

    cdef uint64_t targets_allowed = ~own & check_mask
    cdef uint64_t bb, targets
    cdef int square
    bb = pos.pieces[KNIGHT] & own & ~pinned  # a pinned knight can never move
    while bb:
        square = lsb(bb)
        n = add_moves(moves, n, square, KNIGHT_ATTACKS[square] & targets_allowed)
        bb &= bb - 1
    bb = (pos.pieces[BISHOP] | pos.pieces[QUEEN]) & own
    while bb:
        square = lsb(bb)
        targets = bishop_attacks(square, occupied) & targets_allowed
        if pinned & square_bb(square):
            targets &= LINE[king][square]
        n = add_moves(moves, n, square, targets)
        bb &= bb - 1
    bb = (pos.pieces[ROOK] | pos.pieces[QUEEN]) & own
    while bb:
        square = lsb(bb)
        targets = rook_attacks(square, occupied) & targets_allowed
        if pinned & square_bb(square):
            targets &= LINE[king][square]
        n = add_moves(moves, n, square, targets)
        bb &= bb - 1

    cdef int forward = 8 if us == WHITE else -8
    cdef uint64_t start_rank = (RANK_1 << 8) if us == WHITE else (RANK_8 >> 8)
    bb = pos.pieces[PAWN] & own
    while bb:
        square = lsb(bb)
        bb &= bb - 1
        targets = PAWN_ATTACKS[us][square] & enemy
        if not (occupied & square_bb(square + forward)):
            targets |= square_bb(square + forward)
            if (start_rank & square_bb(square)) and not (occupied & square_bb(square + 2 * forward)):
                targets |= square_bb(square + 2 * forward)
        targets &= check_mask
        if pinned & square_bb(square):
            targets &= LINE[king][square]
        n = add_pawn_moves(moves, n, square, targets)

    if pos.ep_square != NO_SQUARE:
        bb = PAWN_ATTACKS[them][pos.ep_square] & pos.pieces[PAWN] & own
        while bb:
            square = lsb(bb)
            if en_passant_is_legal(pos, square):
                moves[n] = make_move_code(square, pos.ep_square, 0)
                n += 1
            bb &= bb - 1

    if not checkers:
        n = add_castling(pos, moves, n, occupied, danger)
    return n


cdef inline int add_castling(const Position* pos, Move* moves, int n, uint64_t occupied,
                             uint64_t danger) noexcept nogil:
    # Rights are only held while king and rook stand at home (see CASTLING_KEPT),
    # so emptiness of the squares between and safety of the king's path suffice.
    cdef int home = 4 if pos.turn == WHITE else 60
    cdef int king_side = CASTLE_WHITE_KING if pos.turn == WHITE else CASTLE_BLACK_KING
    cdef int queen_side = CASTLE_WHITE_QUEEN if pos.turn == WHITE else CASTLE_BLACK_QUEEN
    if (pos.castling & king_side) \
            and not (occupied & (square_bb(home + 1) | square_bb(home + 2))) \
            and not (danger & (square_bb(home + 1) | square_bb(home + 2))):
        moves[n] = make_move_code(home, home + 2, 0)
        n += 1
    if (pos.castling & queen_side) \
            and not (occupied & (square_bb(home - 1) | square_bb(home - 2) | square_bb(home - 3))) \
            and not (danger & (square_bb(home - 1) | square_bb(home - 2))):
        moves[n] = make_move_code(home, home - 2, 0)
        n += 1
    return n

# ---------------------------------------------------------------------------
# Make-move

cdef inline void toggle(Position* pos, uint64_t* key, int colour, int piece, int square) noexcept nogil:
    pos.pieces[piece] ^= square_bb(square)
    pos.colours[colour] ^= square_bb(square)
    key[0] ^= ZOBRIST_PIECE[colour][piece][square]


cdef void make_move(const Position* pos, Move move, Position* out) noexcept nogil:
    """Writes the position after `move` into `out` (copy-make). `move` must be legal."""
    cdef int from_square = move & 63
    cdef int to_square = (move >> 6) & 63
    cdef int promotion = move >> 12
    cdef int us = pos.turn
    cdef int them = us ^ 1
    cdef int piece = piece_type_on(pos, from_square)
    cdef int captured = NO_PIECE
    cdef uint64_t key = pos.key
    memcpy(out, pos, sizeof(Position))
    if pos.ep_legal:
        key ^= ZOBRIST_EP_FILE[pos.ep_square & 7]
    out.ep_square = NO_SQUARE
    out.ep_legal = 0
    out.halfmove_clock = pos.halfmove_clock + 1 if pos.halfmove_clock < MAX_COUNTER else MAX_COUNTER

    if pos.colours[them] & square_bb(to_square):
        captured = piece_type_on(pos, to_square)
        toggle(out, &key, them, captured, to_square)
        out.halfmove_clock = 0
    toggle(out, &key, us, piece, from_square)
    toggle(out, &key, us, piece if promotion == 0 else promotion, to_square)

    if piece == PAWN:
        out.halfmove_clock = 0
        if to_square == pos.ep_square:
            toggle(out, &key, them, PAWN, to_square - 8 if us == WHITE else to_square + 8)
        elif to_square - from_square == 16 or from_square - to_square == 16:
            out.ep_square = <int8_t>((from_square + to_square) >> 1)
    elif piece == KING and (to_square - from_square == 2 or from_square - to_square == 2):
        if to_square > from_square:
            toggle(out, &key, us, ROOK, from_square + 3)
            toggle(out, &key, us, ROOK, from_square + 1)
        else:
            toggle(out, &key, us, ROOK, from_square - 4)
            toggle(out, &key, us, ROOK, from_square - 1)

    out.castling = pos.castling & CASTLING_KEPT[from_square] & CASTLING_KEPT[to_square]
    key ^= ZOBRIST_CASTLING[pos.castling] ^ ZOBRIST_CASTLING[out.castling]
    out.turn = them
    key ^= ZOBRIST_BLACK_TO_MOVE
    if us == BLACK and pos.fullmove_number < MAX_COUNTER:
        out.fullmove_number = pos.fullmove_number + 1
    if out.ep_square != NO_SQUARE and has_legal_en_passant(out):
        out.ep_legal = 1
        key ^= ZOBRIST_EP_FILE[out.ep_square & 7]
    out.key = key


cdef uint64_t compute_key(const Position* pos) noexcept nogil:
    """The Zobrist key from scratch (make_move keeps it incrementally)."""
    cdef uint64_t key = 0, bb
    cdef int colour, piece
    for colour in range(2):
        for piece in range(6):
            bb = pos.pieces[piece] & pos.colours[colour]
            while bb:
                key ^= ZOBRIST_PIECE[colour][piece][lsb(bb)]
                bb &= bb - 1
    key ^= ZOBRIST_CASTLING[pos.castling]
    if pos.ep_legal:
        key ^= ZOBRIST_EP_FILE[pos.ep_square & 7]
    if pos.turn == BLACK:
        key ^= ZOBRIST_BLACK_TO_MOVE
    return key

# ---------------------------------------------------------------------------
# Game status

cdef bint side_has_insufficient_material(const Position* pos, int colour) noexcept nogil:
    # python-chess's Board.has_insufficient_material, rule for rule.
    cdef uint64_t own = pos.colours[colour]
    cdef uint64_t other = pos.colours[colour ^ 1]
    cdef uint64_t bishops = pos.pieces[BISHOP]
    if own & (pos.pieces[PAWN] | pos.pieces[ROOK] | pos.pieces[QUEEN]):
        return False
    if own & pos.pieces[KNIGHT]:
        # A lone knight, and the opponent has nothing that could allow a selfmate.
        return popcount(own) <= 2 and not (other & ~pos.pieces[KING] & ~pos.pieces[QUEEN])
    if own & bishops:
        # Bishops all on one colour, and no pawns or knights anywhere.
        return (not (bishops & DARK_SQUARES) or not (bishops & LIGHT_SQUARES)) \
            and not pos.pieces[PAWN] and not pos.pieces[KNIGHT]
    return True


cdef bint insufficient_material(const Position* pos) noexcept nogil:
    return side_has_insufficient_material(pos, WHITE) and side_has_insufficient_material(pos, BLACK)


cdef int stack_status(const GameStack* stack, int legal_move_count, int ply_limit) noexcept nogil:
    """The game's status (ONGOING or a termination), in python-chess's order of checks.

    Threefold repetition means the current position stands for the third time
    (python-chess's is_repetition(3)); the fifty-move rule, a half-move clock of
    100 or more with a legal move left (is_fifty_moves()). Both end the game
    without a claim, as in AlphaZero's self-play.
    """
    cdef const Position* pos = &stack.positions[stack.length - 1]
    if legal_move_count == 0 and in_check(pos):
        return CHECKMATE
    if insufficient_material(pos):
        return INSUFFICIENT_MATERIAL
    if legal_move_count == 0:
        return STALEMATE
    if pos.halfmove_clock >= 100:
        return FIFTY_MOVES
    if stack.repetitions[stack.length - 1] >= 2:
        return THREEFOLD_REPETITION
    if ply_limit > 0 and stack.length - 1 >= ply_limit:
        return PLY_LIMIT
    return ONGOING

# ---------------------------------------------------------------------------
# Perft

cdef extern from *:
    """
    /* Another thread sets the flag while the count runs: read it from memory at every look. */
    static inline int perft_stop_set(const unsigned char* stop) {
        return stop != NULL && *(const volatile unsigned char*)stop != 0;
    }
    """
    bint perft_stop_set(const unsigned char* stop) noexcept nogil


cdef uint64_t perft(const Position* pos, int depth, bint bulk, const unsigned char* stop) noexcept nogil:
    """Counts leaf nodes; `bulk` counts the last ply's moves without making them. A non-zero `*stop` (NULL: none)
    ends the count at the next inner node, the count then partial."""
    cdef Move moves[MAX_MOVES]
    cdef Position child
    cdef uint64_t nodes = 0
    cdef int n, i
    if depth <= 0:
        return 1
    if perft_stop_set(stop):
        return 0
    n = generate_legal(pos, moves)
    if bulk and depth == 1:
        return n
    for i in range(n):
        make_move(pos, moves[i], &child)
        nodes += perft(&child, depth - 1, bulk, stop)
    return nodes

# ---------------------------------------------------------------------------
# Game stacks

cdef int stack_init(GameStack* stack, int capacity) noexcept nogil:
    stack.positions = NULL
    stack.repetitions = NULL
    stack.moves = NULL
    stack.length = 0
    stack.capacity = 0
    return stack_reserve(stack, capacity)


cdef void stack_free(GameStack* stack) noexcept nogil:
    free(stack.positions)
    free(stack.repetitions)
    free(stack.moves)
    stack.positions = NULL
    stack.repetitions = NULL
    stack.moves = NULL
    stack.length = 0
    stack.capacity = 0


cdef int stack_reserve(GameStack* stack, int capacity) noexcept nogil:
    if capacity <= stack.capacity:
        return 0
    cdef Position* positions = <Position*>realloc(stack.positions, capacity * sizeof(Position))
    if positions == NULL:
        return -1
    stack.positions = positions
    cdef uint8_t* repetitions = <uint8_t*>realloc(stack.repetitions, capacity * sizeof(uint8_t))
    if repetitions == NULL:
        return -1
    stack.repetitions = repetitions
    cdef Move* moves = <Move*>realloc(stack.moves, capacity * sizeof(Move))
    if moves == NULL:
        return -1
    stack.moves = moves
    stack.capacity = capacity
    return 0


cdef int stack_copy(GameStack* dst, const GameStack* src) noexcept nogil:
    if stack_reserve(dst, src.length + 16) < 0:
        return -1
    memcpy(dst.positions, src.positions, src.length * sizeof(Position))
    memcpy(dst.repetitions, src.repetitions, src.length * sizeof(uint8_t))
    memcpy(dst.moves, src.moves, src.length * sizeof(Move))
    dst.length = src.length
    return 0


cdef int stack_push(GameStack* stack, Move move) noexcept nogil:
    """Plays a legal move on top of the stack, counting repetitions of the new position."""
    if stack.length == stack.capacity and stack_reserve(stack, 2 * stack.capacity + 16) < 0:
        return -1
    cdef int n = stack.length
    cdef Position* new = &stack.positions[n]
    make_move(&stack.positions[n - 1], move, new)
    stack.moves[n] = move
    stack.repetitions[n] = 0
    # An equal position has the same side to move and lies after the last
    # capture or pawn move; the nearest one already counts the earlier ones.
    cdef int i = n - 2
    cdef int oldest = n - <int>new.halfmove_clock
    while i >= 0 and i >= oldest:
        if stack.positions[i].key == new.key:
            stack.repetitions[n] = stack.repetitions[i] + 1 if stack.repetitions[i] < 255 else 255
            break
        i -= 2
    stack.length = n + 1
    return 0

# ---------------------------------------------------------------------------
# FEN

cdef int _parse_square(str text) except -2:
    if len(text) != 2 or text[0] not in "abcdefgh" or text[1] not in "12345678":
        return -1
    return "abcdefgh".index(text[0]) + 8 * "12345678".index(text[1])


cdef long _parse_counter(str text, str what) except -1:
    # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
    if not (text.isascii() and text.isdigit()) or len(text) > 20 or int(text) > MAX_COUNTER:
        raise InvalidFenError(f"{what} must be a whole number from 0 to {MAX_COUNTER}, got {text!r}")
    return int(text)


cdef void _parse_placement(str placement, Position* pos) except *:
    cdef list ranks = placement.split("/")
    cdef int rank, file, square, piece
    cdef str ch
    if len(ranks) != 8:
        raise InvalidFenError(f"expected 8 ranks separated by '/', got {len(ranks)} in {placement!r}")
    for rank in range(8):
        file = 0
        for ch in ranks[7 - rank]:
            if ch in "12345678":
                file += int(ch)
                continue
            if ch.lower() not in _PIECE_LETTERS:
                raise InvalidFenError(f"bad piece letter {ch!r} on rank {rank + 1}")
            if file >= 8:
                raise InvalidFenError(f"rank {rank + 1} ({ranks[7 - rank]!r}) has more than 8 files")
            square = rank * 8 + file
            piece = _PIECE_LETTERS.index(ch.lower())
            pos.pieces[piece] |= square_bb(square)
            pos.colours[WHITE if ch.isupper() else BLACK] |= square_bb(square)
            file += 1
        if file != 8:
            raise InvalidFenError(f"rank {rank + 1} ({ranks[7 - rank]!r}) does not describe exactly 8 files")


cdef void _check_placement(const Position* pos) except *:
    cdef int colour
    cdef str name
    cdef uint64_t back_ranks
    for colour in range(2):
        name = "white" if colour == WHITE else "black"
        kings = popcount(pos.pieces[KING] & pos.colours[colour])
        if kings != 1:
            raise InvalidFenError(f"{name} has {kings} kings, expected exactly 1")
        if popcount(pos.colours[colour]) > 16:
            raise InvalidFenError(f"{name} has more than 16 pieces")
    back_ranks = pos.pieces[PAWN] & (RANK_1 | RANK_8)
    if back_ranks:
        raise InvalidFenError(f"pawn on the first or last rank ({SQUARE_NAMES[lsb(back_ranks)]})")


cdef void _parse_castling(str text, Position* pos) except *:
    # Rights without their king and rook at home are dropped, as python-chess's
    # clean_castling_rights does.
    cdef dict bits = {"K": (CASTLE_WHITE_KING, WHITE, 4, 7), "Q": (CASTLE_WHITE_QUEEN, WHITE, 4, 0),
                      "k": (CASTLE_BLACK_KING, BLACK, 60, 63), "q": (CASTLE_BLACK_QUEEN, BLACK, 60, 56)}
    pos.castling = 0
    if text == "-":
        return
    if not text or len(set(text)) != len(text) or any(ch not in bits for ch in text):
        raise InvalidFenError(f"bad castling field {text!r}: expected '-' or letters from 'KQkq'")
    for ch in text:
        bit, colour, king, rook = bits[ch]
        if (pos.pieces[KING] & pos.colours[colour] & square_bb(king)) and \
                (pos.pieces[ROOK] & pos.colours[colour] & square_bb(rook)):
            pos.castling |= bit


cdef void _parse_en_passant(str text, Position* pos) except *:
    pos.ep_square = NO_SQUARE
    if text == "-":
        return
    cdef int square = _parse_square(text)
    if square < 0:
        raise InvalidFenError(f"bad en passant square {text!r}")
    cdef int expected_rank = 5 if pos.turn == WHITE else 2
    cdef int pawn_square = square - 8 if pos.turn == WHITE else square + 8
    cdef int origin = square + 8 if pos.turn == WHITE else square - 8
    cdef uint64_t occupied = pos.colours[WHITE] | pos.colours[BLACK]
    if square >> 3 != expected_rank:
        raise InvalidFenError(f"en passant square {text} is not on rank {expected_rank + 1}")
    if not (pos.pieces[PAWN] & pos.colours[pos.turn ^ 1] & square_bb(pawn_square)):
        raise InvalidFenError(f"en passant square {text} has no pawn that just moved two squares")
    if occupied & (square_bb(square) | square_bb(origin)):
        raise InvalidFenError(f"en passant square {text}: the pawn's path is not empty")
    pos.ep_square = <int8_t>square


cdef void parse_fen(object fen, Position* pos) except *:
    """Fills `pos` from a FEN (4 to 6 fields), raising InvalidFenError with the reason (also for a non-str)."""
    if not isinstance(fen, str):
        raise InvalidFenError(f"a FEN must be a string, got {type(fen).__name__}")
    cdef list fields = fen.split()
    if not 4 <= len(fields) <= 6:
        raise InvalidFenError(f"expected 4 to 6 space-separated fields, got {len(fields)} in {fen!r}")
    cdef int i
    for i in range(6):
        pos.pieces[i] = 0
    pos.colours[WHITE] = 0
    pos.colours[BLACK] = 0
    _parse_placement(fields[0], pos)
    _check_placement(pos)
    if fields[1] not in ("w", "b"):
        raise InvalidFenError(f"side to move must be 'w' or 'b', got {fields[1]!r}")
    pos.turn = WHITE if fields[1] == "w" else BLACK
    _parse_castling(fields[2], pos)
    _parse_en_passant(fields[3], pos)
    pos.halfmove_clock = _parse_counter(fields[4], "the half-move clock") if len(fields) > 4 else 0
    # python-chess reads a full-move number of 0 as 1; so do we.
    pos.fullmove_number = max(_parse_counter(fields[5], "the full-move number"), 1) if len(fields) > 5 else 1
    cdef uint64_t occupied = pos.colours[WHITE] | pos.colours[BLACK]
    if attackers_of(pos, king_square(pos, pos.turn ^ 1), pos.turn, occupied):
        raise InvalidFenError(f"the side not to move ({'black' if pos.turn == WHITE else 'white'}) is in check")
    pos.ep_legal = has_legal_en_passant(pos)
    pos.key = compute_key(pos)


cdef str format_fen(const Position* pos):
    cdef list rows = []
    cdef int rank, file, empty, square, piece
    cdef str row, letter
    for rank in range(7, -1, -1):
        row = ""
        empty = 0
        for file in range(8):
            square = rank * 8 + file
            piece = piece_type_on(pos, square)
            if piece == NO_PIECE:
                empty += 1
                continue
            if empty:
                row += str(empty)
                empty = 0
            letter = _PIECE_LETTERS[piece]
            row += letter.upper() if pos.colours[WHITE] & square_bb(square) else letter
        if empty:
            row += str(empty)
        rows.append(row)
    castling = ""
    for letter, bit in zip("KQkq", (1, 2, 4, 8)):
        if pos.castling & bit:
            castling += letter
    castling = castling or "-"
    ep = SQUARE_NAMES[pos.ep_square] if pos.ep_legal else "-"
    return (f"{'/'.join(rows)} {'w' if pos.turn == WHITE else 'b'} {castling} {ep} "
            f"{pos.halfmove_clock} {pos.fullmove_number}")


def move_to_uci(int move) -> str:
    """The UCI text of a move code ('e2e4', 'e7e8q')."""
    cdef int promotion = (move >> 12) & 7
    text = SQUARE_NAMES[move & 63] + SQUARE_NAMES[(move >> 6) & 63]
    return text + _PIECE_LETTERS[promotion] if promotion else text

# ---------------------------------------------------------------------------
# The Python-facing board


cdef class Board:
    """A chess game: the current position and every position since the start.

    Moves from outside are checked (push_uci raises IllegalMoveError); the
    position is validated when read from a FEN (InvalidFenError says why).
    Draws by threefold repetition, the fifty-move rule and the ply limit end the
    game without a claim.

    >>> board = Board()
    >>> board.push_uci("e2e4")
    >>> board.fen()
    'rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1'
    """

    def __cinit__(self):
        if stack_init(&self.stack, 64) < 0:
            raise MemoryError()

    def __dealloc__(self):
        stack_free(&self.stack)

    def __init__(self, fen: object = STARTING_FEN, *, ply_limit: int | None = 512):
        if ply_limit is not None and ply_limit < 1:
            raise ValueError(f"ply_limit must be at least 1 or None, got {ply_limit}")
        self.ply_limit = ply_limit or 0
        parse_fen(fen, &self.stack.positions[0])
        self.stack.repetitions[0] = 0
        self.stack.moves[0] = 0
        self.stack.length = 1

    @classmethod
    def from_moves(cls, moves, fen: object = STARTING_FEN, *, ply_limit: int | None = 512) -> Board:
        """A board after playing UCI `moves` (checked) from `fen`."""
        board = cls(fen, ply_limit=ply_limit)
        for uci in moves:
            board.push_uci(uci)
        return board

    cdef Position* current(self) noexcept nogil:
        return &self.stack.positions[self.stack.length - 1]

    def copy(self) -> Board:
        cdef Board other = Board.__new__(Board)
        other.ply_limit = self.ply_limit
        if stack_copy(&other.stack, &self.stack) < 0:
            raise MemoryError()
        return other

    def __repr__(self) -> str:
        return f"Board({self.fen()!r})"

    def __reduce__(self):
        # Pickled as its first position and the moves played, so Ray can ship it.
        return (_board_from_moves, (format_fen(&self.stack.positions[0]), self.move_stack, self.ply_limit))

    def fen(self) -> str:
        """The FEN, with an en passant square only when the capture is legal (as python-chess)."""
        return format_fen(self.current())

    @property
    def turn(self) -> bool:
        """True when White is to move (python-chess's chess.WHITE)."""
        return self.current().turn == WHITE

    @property
    def halfmove_clock(self) -> int:
        return self.current().halfmove_clock

    @property
    def fullmove_number(self) -> int:
        return self.current().fullmove_number

    @property
    def ply(self) -> int:
        """Plies played on this board since its first position."""
        return self.stack.length - 1

    @property
    def zobrist_key(self) -> int:
        return self.current().key

    def recomputed_key(self) -> int:
        """The Zobrist key computed from scratch (equal to zobrist_key; for tests)."""
        return compute_key(self.current())

    @property
    def move_stack(self) -> list[str]:
        """The moves played on this board, in UCI."""
        return [move_to_uci(self.stack.moves[i]) for i in range(1, self.stack.length)]

    def legal_move_codes(self) -> list[int]:
        cdef Move moves[MAX_MOVES]
        cdef int n = generate_legal(self.current(), moves)
        return [moves[i] for i in range(n)]

    def legal_moves(self) -> list[str]:
        """The legal moves in UCI ('e1g1' for castling)."""
        return [move_to_uci(m) for m in self.legal_move_codes()]

    cdef Move parse_legal_uci(self, str uci) except 0:
        cdef Move moves[MAX_MOVES]
        cdef int n = generate_legal(self.current(), moves)
        cdef int from_square, to_square, promotion = 0, i
        if len(uci) in (4, 5):
            from_square = _parse_square(uci[0:2])
            to_square = _parse_square(uci[2:4])
            if len(uci) == 5:
                promotion = _PROMOTION_LETTERS.get(uci[4], -1)
            if from_square >= 0 and to_square >= 0 and promotion >= 0:
                for i in range(n):
                    if moves[i] == make_move_code(from_square, to_square, promotion):
                        return moves[i]
                raise IllegalMoveError(f"illegal move {uci!r} in {self.fen()}")
        raise IllegalMoveError(f"not a UCI move: {uci!r} (expected e.g. 'e2e4' or 'e7e8q')")

    def push_uci(self, uci: str) -> None:
        """Plays a move given in UCI, raising IllegalMoveError unless it is legal here."""
        if not isinstance(uci, str):
            raise IllegalMoveError(f"a UCI move must be a string, got {type(uci).__name__}")
        self.push_code(self.parse_legal_uci(uci))

    def push_code(self, int move) -> None:
        """Plays a move code from legal_move_codes(), raising IllegalMoveError otherwise."""
        if move not in self.legal_move_codes():
            raise IllegalMoveError(f"illegal move code {move} in {self.fen()}")
        if stack_push(&self.stack, <Move>move) < 0:
            raise MemoryError()

    def pop(self) -> str:
        """Takes back the last move and returns it in UCI; IndexError when none is left."""
        if self.stack.length <= 1:
            raise IndexError("pop from a board with no moves played")
        self.stack.length -= 1
        return move_to_uci(self.stack.moves[self.stack.length])

    def is_check(self) -> bool:
        return in_check(self.current())

    def _legal_count(self) -> int:
        cdef Move moves[MAX_MOVES]
        return generate_legal(self.current(), moves)

    def is_checkmate(self) -> bool:
        return self._legal_count() == 0 and in_check(self.current())

    def is_stalemate(self) -> bool:
        return self._legal_count() == 0 and not in_check(self.current())

    def is_insufficient_material(self) -> bool:
        return insufficient_material(self.current())

    def is_fifty_moves(self) -> bool:
        """A half-move clock of 100 or more with a legal move left (python-chess's is_fifty_moves)."""
        return self.current().halfmove_clock >= 100 and self._legal_count() > 0

    def repetition_count(self) -> int:
        """How many times the current position has stood in this game, itself included."""
        return self.stack.repetitions[self.stack.length - 1] + 1

    def is_repetition(self, int count=3) -> bool:
        return self.repetition_count() >= count

    def status(self) -> int:
        """ONGOING (0) or the termination code; see TERMINATIONS for names."""
        return stack_status(&self.stack, self._legal_count(), self.ply_limit)

    def termination(self) -> str | None:
        """None while the game goes on, else 'checkmate', 'stalemate', 'insufficient_material',
        'fifty_moves', 'threefold_repetition' or 'ply_limit'."""
        return TERMINATIONS[self.status()]

    def is_game_over(self) -> bool:
        return self.status() != ONGOING

    def result(self) -> str:
        """'1-0', '0-1', '1/2-1/2', or '*' while the game goes on."""
        cdef int status = self.status()
        if status == ONGOING:
            return "*"
        if status == CHECKMATE:
            return "0-1" if self.current().turn == WHITE else "1-0"
        return "1/2-1/2"

    def perft(self, int depth, *, bint bulk=True, stop: bytearray | None = None) -> int:
        """Leaf nodes at `depth`; bulk=False also makes every last-ply move.

        The count runs without the GIL. `stop`, one byte that another thread may set to non-zero, ends it early
        (a command's Ctrl-C, which only the main thread sees); a count so ended raises InterruptedError, since a
        partial count is no count.
        """
        if depth < 0:
            raise ValueError(f"perft depth must be at least 0, got {depth}")
        cdef const unsigned char[::1] flag
        cdef const unsigned char* stop_at = NULL
        if stop is not None:
            flag = _stop_flag(stop)
            stop_at = &flag[0]
        cdef Position* pos = self.current()
        cdef uint64_t nodes
        with nogil:
            nodes = perft(pos, depth, bulk, stop_at)
        _raise_if_stopped(stop)
        return nodes

    def perft_divide(self, int depth, *, stop: bytearray | None = None) -> list[tuple[str, int]]:
        """(UCI move, leaf count below it) for each legal move, as Stockfish's `go perft`; `stop` as perft's."""
        if depth < 1:
            raise ValueError(f"perft --divide needs a depth of at least 1, got {depth}")
        cdef const unsigned char[::1] flag
        cdef const unsigned char* stop_at = NULL
        if stop is not None:
            flag = _stop_flag(stop)
            stop_at = &flag[0]
        cdef Move moves[MAX_MOVES]
        cdef Position child
        cdef int n = generate_legal(self.current(), moves), i
        cdef uint64_t nodes
        result = []
        for i in range(n):
            make_move(self.current(), moves[i], &child)
            with nogil:
                nodes = perft(&child, depth - 1, True, stop_at)
            _raise_if_stopped(stop)
            result.append((move_to_uci(moves[i]), nodes))
        return result


def _stop_flag(stop: object) -> bytearray:
    if not isinstance(stop, bytearray) or len(stop) != 1:
        raise TypeError(f"stop must be a bytearray of one byte, got {stop!r}")
    return stop


def _raise_if_stopped(stop: bytearray | None) -> None:
    if stop is not None and stop[0]:
        raise InterruptedError("perft was stopped before its count ended")


def _board_from_moves(fen: str, moves: list, ply_limit: int) -> Board:
    return Board.from_moves(moves, fen, ply_limit=ply_limit or None)
