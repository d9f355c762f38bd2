# cython: language_level=3
"""The compact input encoder and the 4672-move index, over the Cython board.

Hot paths (encode_stack, move_index, index_move) are nogil and used by the
search directly; the def functions below are the checked Python edge.
"""

import numpy as np

from libc.stdint cimport int8_t, int32_t, int64_t, uint64_t

from mcts_ext.bitboard cimport flip_vertical
from mcts_ext.position cimport (BISHOP, BLACK, CASTLE_BLACK_KING, CASTLE_BLACK_QUEEN, CASTLE_WHITE_KING,
                                CASTLE_WHITE_QUEEN, KNIGHT, MAX_MOVES, PAWN, QUEEN, ROOK, WHITE, Board,
                                GameStack, Move, Position, generate_legal, piece_type_on, stack_push)

from mcts_ext.errors import IllegalMoveError, MoveIndexError
from mcts_ext.position import move_to_uci

# Queen-like directions (file step, rank step), in plane order: N NE E SE S SW W NW.
cdef int8_t DIRECTION_FILE[8]
cdef int8_t DIRECTION_RANK[8]
DIRECTION_FILE[:] = [0, 1, 1, 1, 0, -1, -1, -1]
DIRECTION_RANK[:] = [1, 1, 0, -1, -1, -1, 0, 1]

# Knight moves (file step, rank step), in plane order 56..63.
cdef int8_t KNIGHT_FILE[8]
cdef int8_t KNIGHT_RANK[8]
KNIGHT_FILE[:] = [1, 2, 2, 1, -1, -2, -2, -1]
KNIGHT_RANK[:] = [2, 1, -1, -2, -2, -1, 1, 2]

# Plane of a (file step, rank step) pair, indexed [file + 7][rank + 7]; -1 for none.
cdef int8_t STEP_PLANE[15][15]


cdef void init_step_planes() noexcept:
    cdef int f, r, d, distance
    for f in range(15):
        for r in range(15):
            STEP_PLANE[f][r] = -1
    for d in range(8):
        for distance in range(1, 8):
            STEP_PLANE[7 + DIRECTION_FILE[d] * distance][7 + DIRECTION_RANK[d] * distance] = 7 * d + distance - 1
    for d in range(8):
        STEP_PLANE[7 + KNIGHT_FILE[d]][7 + KNIGHT_RANK[d]] = 56 + d


init_step_planes()


cdef inline int orient(int square, int turn) noexcept nogil:
    return square ^ 56 if turn == BLACK else square


cdef int move_index(Move move, int turn) noexcept nogil:
    cdef int from_square = orient(move & 63, turn)
    cdef int to_square = orient((move >> 6) & 63, turn)
    cdef int promotion = move >> 12
    cdef int file_step = (to_square & 7) - (from_square & 7)
    cdef int rank_step = (to_square >> 3) - (from_square >> 3)
    cdef int plane
    if KNIGHT <= promotion <= ROOK:
        if rank_step != 1 or file_step < -1 or file_step > 1:
            return -1
        plane = 64 + 3 * (promotion - KNIGHT) + file_step + 1
    else:
        plane = STEP_PLANE[7 + file_step][7 + rank_step]
        if plane < 0:
            return -1
    return plane * 64 + from_square


cdef Move index_move(const Position* pos, int index) noexcept nogil:
    cdef int plane = index >> 6
    cdef int from_square = index & 63
    cdef int file_step, rank_step, promotion = 0, distance, to_file, to_rank, to_square
    if plane < 56:
        distance = plane % 7 + 1
        file_step = DIRECTION_FILE[plane // 7] * distance
        rank_step = DIRECTION_RANK[plane // 7] * distance
    elif plane < 64:
        file_step = KNIGHT_FILE[plane - 56]
        rank_step = KNIGHT_RANK[plane - 56]
    else:
        file_step = (plane - 64) % 3 - 1
        rank_step = 1
        promotion = KNIGHT + (plane - 64) // 3
    to_file = (from_square & 7) + file_step
    to_rank = (from_square >> 3) + rank_step
    if to_file < 0 or to_file > 7 or to_rank < 0 or to_rank > 7:
        return 0
    to_square = to_rank * 8 + to_file
    from_square = orient(from_square, pos.turn)
    if promotion == 0 and plane < 56 and to_rank == 7 and piece_type_on(pos, from_square) == PAWN:
        promotion = QUEEN
    to_square = orient(to_square, pos.turn)
    return <Move>(from_square | (to_square << 6) | (promotion << 12))


cdef void encode_stack(const GameStack* stack, uint64_t* planes, float* scalars) noexcept nogil:
    cdef const Position* now = &stack.positions[stack.length - 1]
    cdef int us = now.turn
    cdef int them = us ^ 1
    cdef int step, piece, index
    cdef const Position* pos
    cdef uint64_t* out
    for step in range(HISTORY_STEPS):
        out = planes + PLANES_PER_STEP * step
        index = stack.length - 1 - step
        if index < 0:
            for piece in range(PLANES_PER_STEP):
                out[piece] = 0
            continue
        pos = &stack.positions[index]
        for piece in range(6):
            out[piece] = pos.pieces[piece] & pos.colours[us]
            out[6 + piece] = pos.pieces[piece] & pos.colours[them]
            if us == BLACK:
                out[piece] = flip_vertical(out[piece])
                out[6 + piece] = flip_vertical(out[6 + piece])
        out[12] = ~(<uint64_t>0) if stack.repetitions[index] >= 1 else 0
        out[13] = ~(<uint64_t>0) if stack.repetitions[index] >= 2 else 0
    cdef int us_king = CASTLE_WHITE_KING if us == WHITE else CASTLE_BLACK_KING
    cdef int us_queen = CASTLE_WHITE_QUEEN if us == WHITE else CASTLE_BLACK_QUEEN
    cdef int them_king = CASTLE_BLACK_KING if us == WHITE else CASTLE_WHITE_KING
    cdef int them_queen = CASTLE_BLACK_QUEEN if us == WHITE else CASTLE_WHITE_QUEEN
    scalars[0] = 1.0 if us == WHITE else 0.0
    scalars[1] = now.fullmove_number
    scalars[2] = 1.0 if now.castling & us_king else 0.0
    scalars[3] = 1.0 if now.castling & us_queen else 0.0
    scalars[4] = 1.0 if now.castling & them_king else 0.0
    scalars[5] = 1.0 if now.castling & them_queen else 0.0
    scalars[6] = now.halfmove_clock

# ---------------------------------------------------------------------------
# The Python edge


def encode_board(Board board, uint64_t[:, ::1] planes, float[:, ::1] scalars, Py_ssize_t row=0) -> None:
    """Writes the board's compact input into row `row` of caller-supplied arrays.

    planes: uint64 [N, 112] and scalars: float32 [N, 7], C-contiguous.
    Raises ValueError for wrong widths and IndexError for a row out of range.
    """
    _check_batch(planes, scalars, row + 1)
    if row < 0:
        raise IndexError(f"row {row} is out of range")
    encode_stack(&board.stack, &planes[row, 0], &scalars[row, 0])


def encode_boards(list boards, uint64_t[:, ::1] planes, float[:, ::1] scalars) -> None:
    """Writes boards[i] into row i of caller-supplied arrays (see encode_board)."""
    _check_batch(planes, scalars, len(boards))
    cdef Py_ssize_t i
    cdef Board board
    for i in range(len(boards)):
        board = boards[i]
        encode_stack(&board.stack, &planes[i, 0], &scalars[i, 0])


def new_batch(Py_ssize_t size) -> tuple:
    """Empty (planes uint64 [size, 112], scalars float32 [size, 7]) arrays to encode into."""
    return (np.zeros((size, COMPACT_PLANES), dtype=np.uint64), np.zeros((size, NUM_SCALARS), dtype=np.float32))


cdef void _check_batch(uint64_t[:, ::1] planes, float[:, ::1] scalars, Py_ssize_t rows) except *:
    if planes.shape[1] != COMPACT_PLANES or scalars.shape[1] != NUM_SCALARS:
        raise ValueError(f"expected planes [N, {COMPACT_PLANES}] and scalars [N, {NUM_SCALARS}], "
                         f"got [{planes.shape[0]}, {planes.shape[1]}] and [{scalars.shape[0]}, {scalars.shape[1]}]")
    if planes.shape[0] < rows or scalars.shape[0] < rows:
        raise IndexError(f"the batch holds {min(planes.shape[0], scalars.shape[0])} rows, {rows} are needed")


def legal_move_indices(Board board) -> np.ndarray:
    """The policy indices of the legal moves (int64), in legal_moves() order."""
    cdef Move moves[MAX_MOVES]
    cdef const Position* pos = board.current()
    cdef int n = generate_legal(pos, moves), i
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] view = out
    for i in range(n):
        view[i] = move_index(moves[i], pos.turn)
    return out


def uci_to_index(Board board, str uci) -> int:
    """The policy index of a legal move given in UCI (index_to_uci the other way); IllegalMoveError otherwise.

    alphazero.chess.moves.move_to_index does the same for a python-chess move, from geometry alone.
    """
    return move_index(board.parse_legal_uci(uci), board.current().turn)


cdef Move _legal_index_move(Board board, object index) except 0:
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
        raise MoveIndexError(f"a move index must be an integer, got {index!r}")
    if not 0 <= index < NUM_MOVES:
        raise MoveIndexError(f"move index {index} is outside 0..{NUM_MOVES - 1}")
    cdef Move moves[MAX_MOVES]
    cdef const Position* pos = board.current()
    cdef int n = generate_legal(pos, moves), i
    cdef Move move = index_move(pos, int(index))
    for i in range(n):
        if move != 0 and moves[i] == move:
            return move
    raise IllegalMoveError(f"move index {index} names no legal move in {board.fen()}")


def index_to_uci(Board board, index) -> str:
    """The legal move named by a policy index, in UCI.

    Raises MoveIndexError outside 0..4671 and IllegalMoveError when the index
    names no legal move of the board.
    """
    return move_to_uci(_legal_index_move(board, index))


def push_index(Board board, index) -> str:
    """Plays the legal move named by a policy index and returns it in UCI (errors as index_to_uci)."""
    cdef Move move = _legal_index_move(board, index)
    if stack_push(&board.stack, move) < 0:
        raise MemoryError()
    return move_to_uci(move)
