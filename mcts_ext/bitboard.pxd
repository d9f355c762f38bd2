# Bit helpers shared by every module of the chess core (header only, inlined).
#
# A bitboard is a uint64 with bit s set for square s, where a1 = 0, b1 = 1,
# ..., h1 = 7, a2 = 8, ..., h8 = 63 (python-chess's numbering).

from libc.stdint cimport uint64_t

cdef extern from *:
    """
    #if defined(_MSC_VER)
    #include <intrin.h>
    static inline int az_lsb(unsigned long long b) { unsigned long i; _BitScanForward64(&i, b); return (int)i; }
    static inline int az_popcount(unsigned long long b) { return (int)__popcnt64(b); }
    #else
    static inline int az_lsb(unsigned long long b) { return __builtin_ctzll(b); }
    static inline int az_popcount(unsigned long long b) { return __builtin_popcountll(b); }
    #endif
    """
    int az_lsb(uint64_t b) noexcept nogil
    int az_popcount(uint64_t b) noexcept nogil


cdef inline int lsb(uint64_t b) noexcept nogil:
    """Index of the lowest set bit; undefined for b == 0."""
    return az_lsb(b)


cdef inline int popcount(uint64_t b) noexcept nogil:
    return az_popcount(b)


cdef inline uint64_t square_bb(int square) noexcept nogil:
    return (<uint64_t>1) << square


cdef inline uint64_t flip_vertical(uint64_t b) noexcept nogil:
    """Mirrors ranks (a1 <-> a8): the byte order of the 64-bit word reversed."""
    b = ((b >> 8) & <uint64_t>0x00FF00FF00FF00FF) | ((b & <uint64_t>0x00FF00FF00FF00FF) << 8)
    b = ((b >> 16) & <uint64_t>0x0000FFFF0000FFFF) | ((b & <uint64_t>0x0000FFFF0000FFFF) << 16)
    return (b >> 32) | (b << 32)
