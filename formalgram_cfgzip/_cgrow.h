/*
 * formalgram_cfgzip/_cgrow.h -- growable arrays, shared by the package's C kernels
 * (search/_csearch.c, engines/native/_cnative.c).  Include after Python.h.
 *
 *   GROW(ptr, cap, need)  makes the array ptr (cap items) hold at least need items,
 *                         doubling from 64; 0, or -1 with MemoryError set.
 */
#ifndef FORMALGRAM_CGROW_H
#define FORMALGRAM_CGROW_H

#include <stdint.h>
#include <stdlib.h>

static int
grow(void **buf, int64_t *cap, int64_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    int64_t n = *cap > 0 ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*buf, (size_t)n * item);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = p;
    *cap = n;
    return 0;
}

#define GROW(ptr, cap, need) grow((void **)&(ptr), &(cap), (need), sizeof(*(ptr)))

#endif
