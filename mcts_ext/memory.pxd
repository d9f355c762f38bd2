# Growable C arrays (header only, inlined): the tree and the search's records use it.

from libc.stdlib cimport realloc


cdef inline int grow(void** array, size_t count, size_t item_size) noexcept nogil:
    """Reallocates *array to `count` items; -1 (array untouched) when memory runs out."""
    cdef void* grown = realloc(array[0], count * item_size)
    if grown == NULL:
        return -1
    array[0] = grown
    return 0
