/*
 * The C-level entry of formalgram_cfgzip.expand._cexpand for other extensions.
 *
 * The expansion kernel exports this struct in a capsule (CEXPAND_CAPSULE), so that the native
 * engine's kernel (formalgram_cfgzip/engines/native/_cnative.c) fills a class row and expands it
 * through the same Kernel, row cache included, in one call from Python: no buffers to
 * re-acquire, no Python frame between the two steps.
 */
#ifndef FORMALGRAM_CEXPAND_API_H
#define FORMALGRAM_CEXPAND_API_H

#include <Python.h>
#include <stdint.h>

#define CEXPAND_CAPSULE "formalgram_cfgzip.expand._cexpand._C_API"
#define CEXPAND_API_VERSION 3

/* Where a kernel's row cache put the row of a class row: a caller that knows its next class row is
 * the same (the native engine's memo) hands the hint back, and the row is copied from that slot
 * without hashing the class row, as long as the slot still holds it.  Zeroed: no hint. */
typedef struct {
    uint64_t kernel; /* the kernel's number (0: none) */
    uint64_t slot;
    uint32_t gen;    /* the slot's generation when the hint was made */
} CExpandHint;

typedef struct {
    int version; /* CEXPAND_API_VERSION */
    /* the words of a class row and of a token row of `kernel`; -1 with a TypeError when it is
     * not an initialised Kernel */
    int (*sizes)(PyObject *kernel, Py_ssize_t *class_words, Py_ssize_t *token_words);
    /* one class row into one token row through the kernel's row cache (Kernel.expand_rows);
     * returns the plan code (8: a cache hit).  `hint` (may be NULL) is used when `same_row` says
     * that class_row is the row it was made for, and is updated to where the row now is. */
    int (*expand_row)(PyObject *kernel, const uint32_t *class_row, uint32_t *out, CExpandHint *hint,
                      int same_row);
    /* the same, when `out` already holds the token row of the class row `base_row` (what the
     * kernel wrote there for it, untouched since): returns 9 and writes nothing when the class rows
     * are equal, 4 when it flipped the differing classes in place (cheaper by the cost model than
     * copying a whole row), else expand_row's plan */
    int (*expand_row_over)(PyObject *kernel, const uint32_t *class_row, uint32_t *out, const uint32_t *base_row,
                           CExpandHint *hint, int same_row);
} CExpandAPI;

#endif
