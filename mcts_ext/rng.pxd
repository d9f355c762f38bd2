# A small seeded random generator for the search (header only, inlined).
# Each game owns its state, so a game's randomness does not depend on which
# other games share its batch: the same seed gives the same game.

from libc.math cimport cos, log, pow, sqrt
from libc.stdint cimport uint64_t

ctypedef struct Rng:
    uint64_t state


cdef inline void rng_seed(Rng* rng, uint64_t seed) noexcept nogil:
    rng.state = seed * <uint64_t>0x9E3779B97F4A7C15 + <uint64_t>0x632BE59BD9B4E019


cdef inline uint64_t rng_next(Rng* rng) noexcept nogil:
    # splitmix64: passes BigCrush, one add and three multiply-xorshifts.
    rng.state += <uint64_t>0x9E3779B97F4A7C15
    cdef uint64_t z = rng.state
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef inline double rng_uniform(Rng* rng) noexcept nogil:
    """Uniform in (0, 1): never exactly 0, so log() is safe."""
    return ((rng_next(rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0)


cdef inline double rng_normal(Rng* rng) noexcept nogil:
    # Box-Muller; one of the pair is enough here.
    return sqrt(-2.0 * log(rng_uniform(rng))) * cos(6.283185307179586 * rng_uniform(rng))


cdef inline double rng_gamma(Rng* rng, double shape) noexcept nogil:
    """Gamma(shape, 1) by Marsaglia and Tsang; shape < 1 via the U^(1/shape) boost."""
    cdef double boost = 1.0, d, c, x, v, u
    if shape < 1.0:
        boost = pow(rng_uniform(rng), 1.0 / shape)
        shape += 1.0
    d = shape - 1.0 / 3.0
    c = 1.0 / sqrt(9.0 * d)
    while True:
        x = rng_normal(rng)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = rng_uniform(rng)
        if u < 1.0 - 0.0331 * x * x * x * x or log(u) < 0.5 * x * x + d * (1.0 - v + log(v)):
            return d * v * boost
