/*
 * formalgram_cfgzip.expand._cexpand -- class bitmask -> token bitmask expansion in C.
 *
 * The compiled kernel of formalgram_cfgzip.expand (built with the mypyc-compiled install;
 * the pure-Python build uses expand/_numpy_kernel.py; expand/_c_kernel.py wraps this
 * module for MaskExpander, and expand/plans.py names its plan codes).  One Kernel holds,
 * for one token -> class map, every precomputed structure; Kernel.expand() writes one
 * token-bitmask row (XGrammar's layout: int32 words, bit j of word w is token 32*w + j,
 * pad bits zero) from one class-bitmask row.
 *
 * The classes are split once, by size.  Each *large* class gets its token bitmask
 * precomputed: one full-vocabulary row (16 KiB at 128k logits), so that adding or removing
 * the whole class is one pass of vector ORs (or AND-NOTs, or XORs) over a row, 32 bytes at
 * a time, up to eight rows per pass.  A class is large when that pass is cheaper than
 * setting its tokens one by one, within the memory budget.  The *small* classes keep their
 * token lists (grouped by class) and are scattered token by token.  A token's bit is its
 * class's bit and the classes are disjoint, so every plan below is exact:
 *
 *   0 gather   every token reads its class's allowed byte; 32 bytes make one word;
 *   1 split    the large classes by rows, then the small tokens gathered word by word;
 *   2 set      the large classes by rows, then the tokens of the allowed small classes set;
 *   3 clear    the large classes by rows, then all small tokens minus the tokens of the
 *              disallowed small classes (the row starts from their precomputed union);
 *   4 delta    a previous row (a cached one, a kept set's, or one the caller gives) with
 *              every class whose bit differs flipped: its row XOR-ed (large) or its tokens
 *              (small).
 *
 * In plans 1-3 the large classes are the OR of the allowed classes' rows or, when fewer
 * are disallowed, the union of all large classes AND-NOT the disallowed ones' rows.
 *
 * The plan of a row is chosen by a cost model (nanoseconds; its constants are fits of
 * forced plans on the real decoding rows of bench/expand_bench.py --fit, see the constants
 * below) from one pass over the class row that counts the allowed large and small classes
 * and estimates the small tokens (the mean size of the small classes of each class word
 * times their count).  Through the row cache (expand_rows) a miss is also compared with
 * patching each of the DELTA_CANDIDATES most recently used cached rows, the nearest first:
 * consecutive masks of a decoding loop differ in a few classes; a candidate's count stops
 * once patching it would cost more than the best plan found.  It is also compared with
 * patching a kept set (keep_sets): the token rows of class sets that a grammar's masks are
 * unions of, kept beside the cache, so that a new mask holding most of a large set is a copy
 * and a few classes flipped.
 *
 * Grammars of tens of thousands of classes (JSON schemas with many names and patterns) make
 * class rows of thousands of words that allow a few classes, or disallow a few: every pass
 * over a class row (the count, the hash of the cache's key, the rows and small classes
 * applied) skips blocks of BLOCK_WORDS words that hold nothing of its set, the count takes a
 * block of every class from precomputed totals, and the small classes' token lists, which
 * lie at random in arrays of the vocabulary's size, are read in batches whose loads overlap.  With `adapt`, the rows
 * whose plan was chosen are timed and each plan's estimates scaled by its running
 * measured / modelled ratio (see learn()).
 *
 * Not thread-safe: a Kernel has per-row scratch; use one per thread (the Python wrapper
 * documents this).  All memory is allocated in the constructor.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "../_cexpand_api.h"
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
static inline int
ctz32(uint32_t x)
{
    unsigned long i;
    _BitScanForward(&i, x);
    return (int)i;
}
#define popcount32(x) ((int)__popcnt(x))
#define RESTRICT __restrict
#else
#define ctz32(x) __builtin_ctz(x)
#define popcount32(x) __builtin_popcount(x)
#define RESTRICT __restrict__
#endif

#if defined(_WIN32)
#include <windows.h>
static double
now_ns(void)
{
    static double scale = 0.0;
    LARGE_INTEGER c;
    if (scale == 0.0) {
        LARGE_INTEGER f;
        QueryPerformanceFrequency(&f);
        scale = 1e9 / (double)f.QuadPart;
    }
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart * scale;
}
#else
#include <time.h>
static double
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}
#endif

/* Cost model (ns), fitted by bench/expand_fit.py: least squares over forced plans (warm, the
 * minimum of 7 calls) on 478 class rows of real decoding walks and of the same rows with 1-20 %
 * of their classes flipped (SynCode Go, C and SQL, lark's json and csv and one JSON schema,
 * Llama-3) on the 2-core AMD EPYC (Zen 5) development VM; the listed plans' median relative error
 * is 5-13 % (two fits, the second after the first's constants chose the dense classes).  NS_FIXED is the fit's intercept minus the start of the row (NS_INIT_WORD words),
 * the call from Python included. */
#define NS_FIXED 160.0         /* a computed row: the call */
#define NS_SCAN_WORD 0.66      /* the choice's pass, per class word */
#define NS_INIT_WORD 0.03      /* memset / memcpy of one token word (the row's start) */
#define NS_ROW_WORD 0.024      /* one token word of one precomputed row, combined 8 rows a pass */
#define NS_CLASS 0.95          /* a listed tail class */
#define NS_TOKEN 0.48          /* a token of a listed tail class */
#define NS_UNPACK_CLASS 0.05   /* plans 0, 1: class bits -> allowed bytes, per class */
#define NS_GATHER_TOKEN 0.150  /* plan 0, per logit index */
#define NS_TAIL_WORD 0.38      /* plan 1, per token word */
#define NS_TAIL_TOKEN 0.37     /* plan 1, per tail token */
#define NS_DELTA_SCAN_WORD 0.4 /* a delta candidate: its class row against this one, per word */
/* Admission to the row cache.  Writing a row into a cache slot costs more than the model's warm
 * copy: the slot is rarely in the CPU's caches, so its 64-byte lines are fetched before they are
 * written (2-3 us for 16 KiB on the development VM, in the peers benchmark's cold passes).  Unless
 * the kernel admits every row, a row whose cheapest plan the model puts under NS_ADMIT_WORD per
 * token word, and whose plan (when timed: adapt) took less than that by the clock, is cached only
 * when it comes back: the second time it misses (the door keeps the hashes of such rows met
 * once), and never on the path that patches a caller's row (expand_row_over), whose caller keeps
 * its own last row and rewrites it only when it changed.  The clock overrules the model for the
 * rows it prices low and that take far longer out of the CPU's caches (most of the vocabulary
 * less a few hundred listed tokens: 2-4 us in the cold passes where the model said 1.3); on that
 * path their slots are written by streaming stores (slot_store). */
#define NS_ADMIT_WORD 0.4
#define DELTA_CANDIDATES 4     /* most recently used cached rows a miss may be patched from */
#define SET_CANDIDATES 8       /* kept sets anchored in a class row that a miss compares */
#define ROWS_PER_PASS 8        /* precomputed rows combined in one pass over the output */
#define BLOCK_WORDS 8          /* class words a scan skips at once (see block_empty) */
#define SMALL_BATCH 32         /* small classes whose token lists are read together (apply_batch) */
/* A class with a precomputed row but fewer tokens than this is listed like the small classes in
 * every plan and in the cost model (mid_rows); only the row update's in-place patch flips it by its
 * row.  A row pass reads 16 KiB of the precomputed row, a list 4 bytes a token and the output's
 * words (in the CPU's caches by then); in a decoding loop the precomputed rows are out of the
 * caches, and the rows of classes of a few hundred tokens (numbers, whitespace runs) cost more
 * than their lists (peers benchmark, cold passes: update p99 on four schemas 2-38 % lower).  A
 * kernel whose rows are forced (`rows` >= 0) keeps all of them large. */
#define ROW_LIST_TOKENS 1024
#define PIN_LINES_MAX 65536     /* distinct lines of the pinned rows (pin_rows): their numbers are uint16 */
#define VALID_HOLES_MAX 256    /* words of the valid tokens' row not all ones, written by hand (valid_into) */

enum { PLAN_GATHER = 0, PLAN_SPLIT = 1, PLAN_SET = 2, PLAN_CLEAR = 3, PLAN_DELTA = 4, PLAN_FEWER = 5 };
#define PLAN_CACHE_HIT 8
#define PLAN_UNCHANGED 9 /* expand_row_over: the output row already held this class row's tokens */
enum { OP_OR = 0, OP_ANDNOT = 1, OP_XOR = 2, OP_SET = 3 };

/* Where a class's tokens are, for the small classes' lists (apply_batch): a class of one or
 * two tokens holds them here (`a` with SPAN_INLINE set: its first token; `b` its second, or
 * SPAN_NONE), any other its offsets in csr_tok, [a, b).  Most small classes have one or two
 * tokens (62-85 % of them on the JSON schemas and code grammars of the benchmarks), and their
 * flips then wait for one read fewer: the span, then the row's word, not the span, the token
 * list, then the row's word, each out of the CPU's caches in a decoding loop. */
typedef struct {
    uint32_t a, b;
} ClassSpan;
#define SPAN_INLINE 0x80000000u
#define SPAN_NONE 0xffffffffu

typedef struct {
    PyObject_HEAD
    Py_ssize_t width;       /* logit indices */
    Py_ssize_t num_classes; /* C */
    Py_ssize_t nw;          /* words of a token row */
    Py_ssize_t cw;          /* words of a class row */
    Py_ssize_t nwp;         /* words of a precomputed row: nw rounded up to 64 bytes */
    int wide;               /* class ids stored as uint32 (else uint16) */
    void *cls_of;           /* nw*32 class ids; C for never-allowed and pad indices */
    uint8_t *allowed;       /* cw*32 + 8 bytes: 1 when the class is allowed this row */
    uint32_t *csr_start;    /* C + 1 offsets into csr_tok */
    uint32_t *csr_tok;      /* valid tokens, grouped by class, ascending in each */
    ClassSpan *span;        /* C: each class's tokens, held in place when it has one or two */
    uint32_t *valid;        /* nw words: bits of every valid token */
    int32_t *holes;         /* the words of `valid` that are not all ones, n_holes of them (see
                             * VALID_HOLES_MAX); NULL when there are more */
    Py_ssize_t n_holes;
    Py_ssize_t n_valid;
    /* large classes: one precomputed row each */
    Py_ssize_t n_rows;
    int32_t *row_of;        /* C entries: index of the class's row, -1 for a small class */
    void *rows_raw;         /* allocation holding `rows` */
    uint32_t *rows;         /* n_rows * nwp words, 64-byte aligned */
    uint32_t *big_classes;  /* cw words: bit c set for a large class: a row, combined by row passes */
    Py_ssize_t n_big;
    uint32_t *mid_rows;     /* cw words: bit c set for a class with a row that is listed like the small
                             * ones (fewer than ROW_LIST_TOKENS tokens) but for in-place patches */
    uint32_t *big_union;    /* nw words: the tokens of every large class */
    /* small classes: their tokens listed (csr), gathered (tail_*), or cleared from their union */
    uint32_t *small_classes; /* cw words: bit c set for a non-empty class without a row */
    float *small_mean;      /* cw floats: mean size of the small classes of each class word */
    float *patch_mean;      /* cw floats: the same without the classes of mid_rows (patch_in_place) */
    /* patch_in_place's scan (patch_scan): per class word, its classes flipped by their rows
     * (big_classes | mid_rows) and those listed (small_classes & ~mid_rows), both zero from cw on
     * to a whole vector past it; and scratch for the differing words, one bit each */
    uint32_t *patch_rows, *patch_lists;
    uint64_t *patch_words;
    /* per block of BLOCK_WORDS class words: its large classes, small classes and their tokens
     * (as row_stats estimates them), so that a block of all classes counts in one step */
    int32_t *block_big, *block_small;
    double *block_tokens;
    uint32_t *small_union;  /* nw words: the tokens of every small class */
    Py_ssize_t n_small_classes, n_small_tokens;
    uint32_t *tail_start;   /* nw + 1 offsets into tail_bit / tail_cls */
    uint8_t *tail_bit;
    void *tail_cls;
    const uint32_t *pass[ROWS_PER_PASS]; /* scratch: the rows of one pass */
    double cost_gather;     /* plan 0's modelled cost */
    double cost_tail;       /* plan 1's small-token part */
    uint64_t spread[256];   /* byte -> 8 bytes of 0/1 (little-endian bit order) */
    /* LRU cache of expanded rows, keyed by the class row (bits past num_classes cleared) */
    Py_ssize_t cap;         /* rows; 0: no cache */
    Py_ssize_t n_cached;
    int delta_mode;         /* 0 never patch a cached row, 1 when the cost model says so, 2 always */
    /* self-correction of the cost model (see learn): per plan, measured / modelled time */
    int adapt;
    double corr[8];
    uint64_t n_auto;        /* rows whose plan was chosen */
    void *c_block;          /* one allocation holding c_rows and c_keys (see the block pool) */
    size_t c_block_bytes;
    uint32_t *c_keys;       /* cap * cw */
    uint32_t *c_rows;       /* cap * nw */
    uint64_t *c_hash;       /* cap */
    uint32_t *c_gen;        /* cap: bumped whenever a slot's row is dropped (a hint's check) */
    uint64_t uid;           /* this kernel's number among the kernels made (a hint's check) */
    int32_t *c_prev, *c_next; /* LRU list: head = most recently used */
    int32_t c_head, c_tail;
    int32_t *c_table;       /* open addressing (linear probing), tsize slots, -1 empty */
    Py_ssize_t c_tmask;
    uint32_t *c_key;        /* cw words of scratch: the masked key being looked up */
    long long hits, misses, evictions, deltas;
    long long unchanged, in_place; /* rows left as they were / patched where they lay (expand_row_over) */
    int admit_all;                 /* 1: every miss is cached; 0: the cheap ones as NS_ADMIT_WORD says */
    uint64_t *door;                /* hashes of cheap rows met once (| 1; 0: empty), door_mask + 1 */
    Py_ssize_t door_mask;
    long long not_cached;          /* misses computed and not cached (cheap) */
    double last_ns;                /* compute_row's measured time of its last chosen plan, -1: not timed */
    /* kept sets (keep_sets): class sets whose token rows are kept beside the cache and outlive
     * it; a miss may be patched from one like from a cached row.  Set g is anchored at one of its
     * classes, the one in fewest kept sets: only a class row holding a set's anchor looks at it */
    Py_ssize_t n_sets;
    void *g_raw;            /* allocation holding g_rows */
    uint32_t *g_rows;       /* n_sets * nwp words, 64-byte aligned */
    uint32_t *g_keys;       /* n_sets * cw words: the sets' class rows */
    uint32_t *g_anchor;     /* cw words: bit c set when class c anchors a set */
    int32_t *g_first;       /* C + 1: the sets anchored at class c are g_first[c] .. g_first[c + 1) */
    int32_t *g_rank;        /* n_sets: a set's place in the order of modelled cost, dearest first */
    long long set_deltas;   /* misses patched from a kept set */
    /* pinned rows (pin_rows): class rows whose token rows are kept beside the cache and outlive
     * it, found by their exact class row (a prewarm: the class rows a grammar meets first).  A
     * token row is kept as its 64-byte lines, each distinct line once in a pool: the rows a grammar
     * meets first share most of their lines (all of a string's interior but a few words), and the
     * pool of 150-260 such rows is 7-15 % of the rows (290-420 KiB of 2.4-4.0 MiB at 128k tokens,
     * JSON schemas and code grammars), small enough to stay in the CPU's caches between two masks of
     * a decoding loop where the rows themselves came from memory */
    Py_ssize_t n_pinned;
    Py_ssize_t n_lines;     /* distinct lines in the pool, at most PIN_LINES_MAX */
    void *p_raw;            /* allocation holding p_lines */
    uint32_t *p_lines;      /* n_lines * 16 words, 64-byte aligned */
    uint16_t *p_index;      /* n_pinned * (nwp / 16): the pool line of each line of each row */
    uint32_t *p_keys;       /* n_pinned * cw words */
    uint64_t *p_hash;       /* n_pinned: key_hash of each */
    int32_t *p_table;       /* open addressing (linear probing) on p_hash, p_tmask + 1 slots, -1 empty */
    Py_ssize_t p_tmask;
} Kernel;

/* -- the pool of row-cache blocks ------------------------------------------------------ */

/* A kernel's row cache is one block of memory (about cache_bytes: 8 MiB by default).  The
 * operating system maps a fresh block's pages when they are first written, a fault per page, and
 * a decoding loop writes a new cache slot at every row-cache miss: on a new grammar's walk that was
 * 4-6 faults per miss (a token row of 16 KiB and its key), a few microseconds each on a virtual
 * machine, so that most misses cost 2-4x their work (a 388-class schema's misses: 10-50 us in
 * the first walk, 1.5-2.5 us in the next).  Two remedies:
 *
 * - blocks are aligned to 2 MiB and advised for transparent huge pages (Linux, where the system
 *   allows them: /sys/kernel/mm/transparent_hugepage/enabled "always" or "madvise"): the first
 *   write to each 2 MiB maps all of it, a few faults per block instead of one per 4 KiB;
 * - freed kernels' blocks are kept, up to POOL_BLOCKS of them, and the next kernel whose cache
 *   fits one (not more than twice its size) takes it with its pages already mapped: a server
 *   compiling a grammar per request, or a benchmark walking one schema after another, writes
 *   mapped memory.
 *
 * The blocks hold nothing a kernel reads before writing (a slot is read only after it is
 * filled).  Taken and given under the GIL (in the constructor and the destructor). */
#define POOL_BLOCKS 4
static struct {
    void *block;
    size_t bytes;
} g_pool[POOL_BLOCKS];
static int g_pool_n = 0;
static long long g_blocks_made = 0, g_blocks_advised = 0;

/* Blocks are made in whole huge pages: caches of one byte budget differ by a few KiB with their
 * class rows' width (8 MiB budget, Llama-3: 8,322,400 bytes for a grammar of 1,000 classes,
 * 8,341,400 for one of 15,000), and a block made for one must fit the other. */
#define POOL_GRAIN ((size_t)2 << 20)

/* a new block of `bytes` (a multiple of POOL_GRAIN), aligned to it and advised for huge pages */
static void *
block_new(size_t bytes)
{
    void *block = NULL;
    if (posix_memalign(&block, POOL_GRAIN, bytes) != 0)
        return NULL;
    g_blocks_made++;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (madvise(block, bytes, MADV_HUGEPAGE) == 0)
        g_blocks_advised++;
#endif
    return block;
}

/* a block of at least `bytes` (the smallest pooled one that fits, else a new one); NULL on failure */
static void *
pool_take(size_t bytes, size_t *got)
{
    bytes = (bytes + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN;
    if (bytes == 0)
        bytes = POOL_GRAIN;
    int best = -1;
    for (int i = 0; i < g_pool_n; i++)
        if (g_pool[i].bytes >= bytes && g_pool[i].bytes / 2 <= bytes &&
            (best < 0 || g_pool[i].bytes < g_pool[best].bytes))
            best = i;
    if (best >= 0) {
        void *block = g_pool[best].block;
        *got = g_pool[best].bytes;
        g_pool[best] = g_pool[--g_pool_n];
        return block;
    }
    *got = bytes;
    return block_new(bytes);
}

/* a block back: kept while the pool has room, else freed */
static void
pool_give(void *block, size_t bytes)
{
    if (block == NULL)
        return;
    if (g_pool_n < POOL_BLOCKS) {
        g_pool[g_pool_n].block = block;
        g_pool[g_pool_n].bytes = bytes;
        g_pool_n++;
    } else {
        free(block);
    }
}

/* cache_pool_info() -> dict: the pool's blocks (kept now, made, advised for huge pages) */
static PyObject *
cache_pool_info(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    size_t kept_bytes = 0;
    for (int i = 0; i < g_pool_n; i++)
        kept_bytes += g_pool[i].bytes;
    return Py_BuildValue("{s:i,s:n,s:L,s:L}", "kept", g_pool_n, "kept_bytes", (Py_ssize_t)kept_bytes, "made",
                         g_blocks_made, "huge_page_advised", g_blocks_advised);
}

/* release_cache_pool() -> bytes freed: the pooled blocks given back to the allocator */
static PyObject *
release_cache_pool(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    size_t freed = 0;
    while (g_pool_n > 0) {
        g_pool_n--;
        freed += g_pool[g_pool_n].bytes;
        free(g_pool[g_pool_n].block);
    }
    return PyLong_FromSize_t(freed);
}

static void
Kernel_dealloc(Kernel *self)
{
    PyMem_Free(self->cls_of);
    PyMem_Free(self->allowed);
    PyMem_Free(self->csr_start);
    PyMem_Free(self->csr_tok);
    PyMem_Free(self->span);
    PyMem_Free(self->valid);
    PyMem_Free(self->holes);
    PyMem_Free(self->row_of);
    PyMem_Free(self->rows_raw);
    PyMem_Free(self->big_classes);
    PyMem_Free(self->mid_rows);
    PyMem_Free(self->big_union);
    PyMem_Free(self->small_classes);
    PyMem_Free(self->small_mean);
    PyMem_Free(self->patch_mean);
    PyMem_Free(self->patch_rows);
    PyMem_Free(self->patch_lists);
    PyMem_Free(self->patch_words);
    PyMem_Free(self->block_big);
    PyMem_Free(self->block_small);
    PyMem_Free(self->block_tokens);
    PyMem_Free(self->small_union);
    PyMem_Free(self->tail_start);
    PyMem_Free(self->tail_bit);
    PyMem_Free(self->tail_cls);
    pool_give(self->c_block, self->c_block_bytes);
    PyMem_Free(self->c_hash);
    PyMem_Free(self->c_gen);
    PyMem_Free(self->door);
    PyMem_Free(self->c_prev);
    PyMem_Free(self->c_next);
    PyMem_Free(self->c_table);
    PyMem_Free(self->c_key);
    PyMem_Free(self->g_raw);
    PyMem_Free(self->g_keys);
    PyMem_Free(self->g_anchor);
    PyMem_Free(self->g_first);
    PyMem_Free(self->g_rank);
    PyMem_Free(self->p_raw);
    PyMem_Free(self->p_index);
    PyMem_Free(self->p_keys);
    PyMem_Free(self->p_hash);
    PyMem_Free(self->p_table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static const uint32_t *g_sort_sizes;

static int
by_size_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (g_sort_sizes[x] != g_sort_sizes[y])
        return g_sort_sizes[x] > g_sort_sizes[y] ? -1 : 1;
    return x < y ? -1 : (x > y);
}

static inline uint32_t
cls_at(const Kernel *k, Py_ssize_t i)
{
    return k->wide ? ((const uint32_t *)k->cls_of)[i] : ((const uint16_t *)k->cls_of)[i];
}

/* cost of listing n small classes of `tokens` tokens in all */
static inline double
list_cost(double n, double tokens)
{
    return NS_CLASS * n + NS_TOKEN * tokens;
}

static int
Kernel_init(Kernel *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"token_class", "num_classes", "row_budget", "rows",   "cache_rows",
                             "delta",       "adapt",       "max_rows",   "admit_all", NULL};
    Py_buffer tc;
    Py_ssize_t num_classes, budget, force_rows = -1, cache_rows = 0, max_rows = -1;
    int delta_mode = 1, adapt = 1, admit_all = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*nn|nnipnp", kwlist, &tc, &num_classes, &budget,
                                     &force_rows, &cache_rows, &delta_mode, &adapt, &max_rows, &admit_all))
        return -1;
    if (self->cls_of != NULL) {
        PyBuffer_Release(&tc);
        PyErr_SetString(PyExc_RuntimeError, "Kernel is already initialised");
        return -1;
    }
    int rc = -1;
    uint32_t *sizes = NULL, *order = NULL, *fill = NULL;
    const int32_t *ids = (const int32_t *)tc.buf;
    Py_ssize_t width = tc.len / 4;
    if (tc.len % 4 != 0 || width < 1) {
        PyErr_SetString(PyExc_ValueError, "token_class must be a non-empty int32 buffer");
        goto done;
    }
    if (num_classes < 1 || num_classes >= ((Py_ssize_t)1 << 31) || width >= ((Py_ssize_t)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "num_classes or the logit width is out of range");
        goto done;
    }
    if (budget < 0 || cache_rows < 0 || cache_rows >= ((Py_ssize_t)1 << 30)) {
        PyErr_SetString(PyExc_ValueError, "row_budget and cache_rows must be >= 0");
        goto done;
    }
    if (delta_mode < 0 || delta_mode > 2) {
        PyErr_SetString(PyExc_ValueError, "delta must be 0 (never), 1 (by cost) or 2 (always)");
        goto done;
    }
    self->width = width;
    self->num_classes = num_classes;
    self->nw = (width + 31) / 32;
    self->cw = (num_classes + 31) / 32;
    self->nwp = (self->nw + 15) / 16 * 16;
    self->wide = num_classes >= 65535;
    Py_ssize_t nw = self->nw, cw = self->cw, C = num_classes;
    for (int b = 0; b < 256; b++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            if (b >> j & 1)
                v |= (uint64_t)1 << (8 * j);
        self->spread[b] = v;
    }
    /* class of every index, sizes */
    sizes = PyMem_Calloc((size_t)C + 1, sizeof(uint32_t));
    self->cls_of = PyMem_Malloc((size_t)nw * 32 * (self->wide ? 4 : 2));
    self->allowed = PyMem_Calloc((size_t)cw * 32 + 8, 1);
    self->valid = PyMem_Calloc((size_t)nw, sizeof(uint32_t));
    if (!sizes || !self->cls_of || !self->allowed || !self->valid) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nw * 32; i++) {
        int32_t c = i < width ? ids[i] : -1;
        if (c >= C) {
            PyErr_Format(PyExc_ValueError, "token_class holds class %d >= num_classes=%zd", (int)c, C);
            goto done;
        }
        uint32_t v = c < 0 ? (uint32_t)C : (uint32_t)c;
        if (self->wide)
            ((uint32_t *)self->cls_of)[i] = v;
        else
            ((uint16_t *)self->cls_of)[i] = (uint16_t)v;
        if (c >= 0) {
            sizes[c]++;
            self->valid[i >> 5] |= (uint32_t)1 << (i & 31);
            self->n_valid++;
        }
    }
    /* CSR of tokens by class */
    self->csr_start = PyMem_Malloc(((size_t)C + 1) * sizeof(uint32_t));
    self->csr_tok = PyMem_Malloc(((size_t)self->n_valid + 1) * sizeof(uint32_t));
    fill = PyMem_Malloc(((size_t)C + 1) * sizeof(uint32_t));
    if (!self->csr_start || !self->csr_tok || !fill) {
        PyErr_NoMemory();
        goto done;
    }
    self->csr_start[0] = 0;
    for (Py_ssize_t c = 0; c < C; c++)
        self->csr_start[c + 1] = self->csr_start[c] + sizes[c];
    memcpy(fill, self->csr_start, ((size_t)C + 1) * sizeof(uint32_t));
    for (Py_ssize_t i = 0; i < width; i++) {
        uint32_t c = cls_at(self, i);
        if (c < (uint32_t)C)
            self->csr_tok[fill[c]++] = (uint32_t)i;
    }
    self->span = PyMem_Malloc(((size_t)C + 1) * sizeof(ClassSpan));
    if (!self->span) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < C; c++) {
        uint32_t lo = self->csr_start[c], hi = self->csr_start[c + 1];
        ClassSpan sp = {lo, hi};
        if (hi - lo == 1 || hi - lo == 2) /* token ids lie below 2**31 (checked above) */
            sp = (ClassSpan){SPAN_INLINE | self->csr_tok[lo], hi - lo == 2 ? self->csr_tok[lo + 1] : SPAN_NONE};
        self->span[c] = sp;
    }
    Py_ssize_t holes = 0;
    for (Py_ssize_t w = 0; w < nw && holes <= VALID_HOLES_MAX; w++)
        holes += self->valid[w] != ~(uint32_t)0;
    if (holes <= VALID_HOLES_MAX) {
        if (!(self->holes = PyMem_Malloc(((size_t)holes + 1) * sizeof(int32_t)))) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t w = 0; w < nw; w++)
            if (self->valid[w] != ~(uint32_t)0)
                self->holes[self->n_holes++] = (int32_t)w;
    }
    /* the large classes: largest first, while a row pass is cheaper than listing the class
     * and the budget holds one more row; `rows` >= 0 forces their number */
    order = PyMem_Malloc((size_t)C * sizeof(uint32_t));
    self->row_of = PyMem_Malloc((size_t)C * sizeof(int32_t));
    if (!order || !self->row_of) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < C; c++) {
        order[c] = (uint32_t)c;
        self->row_of[c] = -1;
    }
    g_sort_sizes = sizes;
    qsort(order, (size_t)C, sizeof(uint32_t), by_size_desc);
    Py_ssize_t row_bytes = self->nwp * 4;
    Py_ssize_t n_rows = 0;
    double row_pass = NS_ROW_WORD * (double)nw;
    if (force_rows >= 0) {
        n_rows = force_rows < C ? force_rows : C;
    } else {
        while (n_rows < C && (n_rows + 1) * row_bytes <= budget && (max_rows < 0 || n_rows < max_rows) &&
               list_cost(1.0, (double)sizes[order[n_rows]]) > row_pass)
            n_rows++;
    }
    self->n_rows = n_rows;
    self->rows_raw = PyMem_Malloc((size_t)n_rows * (size_t)row_bytes + 64);
    self->big_classes = PyMem_Calloc((size_t)cw + 1, sizeof(uint32_t));
    self->mid_rows = PyMem_Calloc((size_t)cw + 1, sizeof(uint32_t));
    self->small_classes = PyMem_Calloc((size_t)cw + 1, sizeof(uint32_t));
    self->small_mean = PyMem_Calloc((size_t)cw + 1, sizeof(float));
    self->patch_mean = PyMem_Calloc((size_t)cw + 1, sizeof(float));
    self->big_union = PyMem_Calloc((size_t)nw, sizeof(uint32_t));
    self->small_union = PyMem_Calloc((size_t)nw, sizeof(uint32_t));
    if (!self->rows_raw || !self->big_classes || !self->mid_rows || !self->small_classes || !self->small_mean ||
        !self->patch_mean ||
        !self->big_union || !self->small_union) {
        PyErr_NoMemory();
        goto done;
    }
    self->rows = (uint32_t *)(((uintptr_t)self->rows_raw + 63) & ~(uintptr_t)63);
    memset(self->rows, 0, (size_t)n_rows * (size_t)row_bytes);
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        uint32_t c = order[r];
        uint32_t *dst = self->rows + (size_t)r * (size_t)self->nwp;
        self->row_of[c] = (int32_t)r;
        if (force_rows >= 0 || sizes[c] >= ROW_LIST_TOKENS) { /* forced rows: all of them large */
            self->big_classes[c >> 5] |= (uint32_t)1 << (c & 31);
            self->n_big++;
        } else {
            self->mid_rows[c >> 5] |= (uint32_t)1 << (c & 31);
        }
        for (uint32_t q = self->csr_start[c]; q < self->csr_start[c + 1]; q++)
            dst[self->csr_tok[q] >> 5] |= (uint32_t)1 << (self->csr_tok[q] & 31);
    }
    for (Py_ssize_t w = 0; w < cw; w++) {
        double tok = 0, listed_tok = 0;
        int n = 0, listed = 0;
        for (Py_ssize_t c = 32 * w; c < 32 * w + 32 && c < C; c++)
            if (!(self->big_classes[w] >> (c & 31) & 1) && sizes[c] > 0) {
                self->small_classes[w] |= (uint32_t)1 << (c & 31);
                tok += sizes[c];
                n++;
                if (!(self->mid_rows[w] >> (c & 31) & 1)) {
                    listed_tok += sizes[c];
                    listed++;
                }
            }
        self->n_small_classes += n;
        self->n_small_tokens += (Py_ssize_t)tok;
        self->small_mean[w] = n ? (float)(tok / n) : 0.0f;
        self->patch_mean[w] = listed ? (float)(listed_tok / listed) : 0.0f;
    }
    self->patch_rows = PyMem_Calloc((size_t)cw + 16, sizeof(uint32_t));
    self->patch_lists = PyMem_Calloc((size_t)cw + 16, sizeof(uint32_t));
    self->patch_words = PyMem_Calloc((size_t)cw / 64 + 2, sizeof(uint64_t));
    if (!self->patch_rows || !self->patch_lists || !self->patch_words) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t w = 0; w < cw; w++) {
        self->patch_rows[w] = self->big_classes[w] | self->mid_rows[w];
        self->patch_lists[w] = self->small_classes[w] & ~self->mid_rows[w];
    }
    Py_ssize_t nblocks = cw / BLOCK_WORDS;
    self->block_big = PyMem_Calloc((size_t)nblocks + 1, sizeof(int32_t));
    self->block_small = PyMem_Calloc((size_t)nblocks + 1, sizeof(int32_t));
    self->block_tokens = PyMem_Calloc((size_t)nblocks + 1, sizeof(double));
    if (!self->block_big || !self->block_small || !self->block_tokens) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t w = 0; w < nblocks * BLOCK_WORDS; w++) {
        int ns = popcount32(self->small_classes[w]);
        self->block_big[w / BLOCK_WORDS] += popcount32(self->big_classes[w]);
        self->block_small[w / BLOCK_WORDS] += ns;
        self->block_tokens[w / BLOCK_WORDS] += (double)ns * (double)self->small_mean[w];
    }
    /* the small tokens word by word (plan 1) and both unions */
    self->tail_start = PyMem_Malloc(((size_t)nw + 1) * sizeof(uint32_t));
    self->tail_bit = PyMem_Malloc((size_t)self->n_small_tokens + 1);
    self->tail_cls = PyMem_Malloc(((size_t)self->n_small_tokens + 1) * (self->wide ? 4 : 2));
    if (!self->tail_start || !self->tail_bit || !self->tail_cls) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t q = 0;
    for (Py_ssize_t w = 0; w < nw; w++) {
        self->tail_start[w] = (uint32_t)q;
        for (Py_ssize_t i = 32 * w; i < 32 * w + 32 && i < width; i++) {
            uint32_t c = cls_at(self, i);
            if (c >= (uint32_t)C)
                continue;
            if (self->big_classes[c >> 5] >> (c & 31) & 1) {
                self->big_union[w] |= (uint32_t)1 << (i & 31);
                continue;
            }
            self->small_union[w] |= (uint32_t)1 << (i & 31);
            self->tail_bit[q] = (uint8_t)(i & 31);
            if (self->wide)
                ((uint32_t *)self->tail_cls)[q] = c;
            else
                ((uint16_t *)self->tail_cls)[q] = (uint16_t)c;
            q++;
        }
    }
    self->tail_start[nw] = (uint32_t)q;
    self->cost_gather = NS_FIXED + NS_UNPACK_CLASS * (double)C + NS_GATHER_TOKEN * (double)(nw * 32);
    self->cost_tail =
        NS_UNPACK_CLASS * (double)C + NS_TAIL_WORD * (double)nw + NS_TAIL_TOKEN * (double)self->n_small_tokens;
    /* row cache */
    self->delta_mode = delta_mode;
    self->adapt = adapt;
    for (int p = 0; p < 8; p++)
        self->corr[p] = 1.0;
    self->c_head = self->c_tail = -1;
    self->c_key = PyMem_Calloc((size_t)cw + 1, sizeof(uint32_t));
    if (!self->c_key) {
        PyErr_NoMemory();
        goto done;
    }
    if (cache_rows > 0) {
        Py_ssize_t tsize = 4;
        while (tsize < 2 * cache_rows)
            tsize *= 2;
        size_t row_words = (size_t)cache_rows * (size_t)nw;
        /* the keys first: where they take a small part of 2 MiB (class rows of up to a few hundred
         * words), a walk of a few misses writes one huge page, its slots' keys and rows */
        size_t key_words = (size_t)cache_rows * (size_t)cw;
        self->c_block = pool_take(4 * (row_words + key_words), &self->c_block_bytes);
        self->c_keys = self->c_block;
        self->c_rows = self->c_keys ? self->c_keys + key_words : NULL;
        self->c_hash = PyMem_Malloc((size_t)cache_rows * sizeof(uint64_t));
        self->c_gen = PyMem_Calloc((size_t)cache_rows, sizeof(uint32_t));
        self->c_prev = PyMem_Malloc((size_t)cache_rows * sizeof(int32_t));
        self->c_next = PyMem_Malloc((size_t)cache_rows * sizeof(int32_t));
        self->c_table = PyMem_Malloc((size_t)tsize * sizeof(int32_t));
        self->door = PyMem_Calloc((size_t)tsize, sizeof(uint64_t));
        self->door_mask = tsize - 1;
        if (!self->c_keys || !self->c_rows || !self->c_hash || !self->c_gen || !self->c_prev ||
            !self->c_next || !self->c_table || !self->door) {
            PyErr_NoMemory();
            goto done;
        }
        memset(self->c_table, 0xff, (size_t)tsize * sizeof(int32_t));
        self->c_tmask = tsize - 1;
        self->cap = cache_rows;
        self->admit_all = admit_all;
    }
    static uint64_t kernels_made = 0;
    self->uid = ++kernels_made;
    rc = 0;
done:
    PyMem_Free(sizes);
    PyMem_Free(order);
    PyMem_Free(fill);
    PyBuffer_Release(&tc);
    return rc;
}

/* -- the rows' passes ----------------------------------------------------------------- */

/* out[i] = L[i] OP (r[0][i] | ... | r[n-1][i]) for every word i < nw; 1 <= n <= 8, where the
 * left operand L is `src` (a row other than `out`) or, with src NULL, `out` itself; OP_SET
 * writes the rows' union alone.  The combination of disjoint rows by OR is also their XOR.
 * Compiled twice on x86: with AVX2 (32 bytes per vector) when the CPU has it, and for the
 * baseline (16 bytes). */
#define ROWS_LOOP(OP, EXPR)                                                                \
    do {                                                                                   \
        for (Py_ssize_t i = 0; i < nw; i++) {                                              \
            uint32_t v = EXPR;                                                             \
            out[i] = OP;                                                                   \
        }                                                                                  \
    } while (0)
#define ROWS_OPS(EXPR)                                                                     \
    do {                                                                                   \
        if (op == OP_SET)                                                                  \
            ROWS_LOOP(v, EXPR);                                                            \
        else if (src != NULL && op == OP_OR)                                               \
            ROWS_LOOP(src[i] | v, EXPR);                                                   \
        else if (src != NULL && op == OP_ANDNOT)                                           \
            ROWS_LOOP(src[i] & ~v, EXPR);                                                  \
        else if (src != NULL)                                                              \
            ROWS_LOOP(src[i] ^ v, EXPR);                                                   \
        else if (op == OP_OR)                                                              \
            ROWS_LOOP(out[i] | v, EXPR);                                                   \
        else if (op == OP_ANDNOT)                                                          \
            ROWS_LOOP(out[i] & ~v, EXPR);                                                  \
        else                                                                               \
            ROWS_LOOP(out[i] ^ v, EXPR);                                                   \
    } while (0)
#define ROWS_BODY                                                                          \
    {                                                                                      \
        const uint32_t *RESTRICT a = r[0], *RESTRICT b = r[n > 1 ? 1 : 0],                  \
                                 *RESTRICT c = r[n > 2 ? 2 : 0], *RESTRICT d = r[n > 3 ? 3 : 0]; \
        const uint32_t *RESTRICT e = r[n > 4 ? 4 : 0], *RESTRICT f = r[n > 5 ? 5 : 0],     \
                                 *RESTRICT g = r[n > 6 ? 6 : 0], *RESTRICT h = r[n > 7 ? 7 : 0]; \
        switch (n) {                                                                       \
        case 1:                                                                            \
            ROWS_OPS(a[i]);                                                                \
            break;                                                                         \
        case 2:                                                                            \
            ROWS_OPS(a[i] | b[i]);                                                         \
            break;                                                                         \
        case 3:                                                                            \
            ROWS_OPS(a[i] | b[i] | c[i]);                                                  \
            break;                                                                         \
        case 4:                                                                            \
            ROWS_OPS(a[i] | b[i] | c[i] | d[i]);                                           \
            break;                                                                         \
        case 5:                                                                            \
            ROWS_OPS(a[i] | b[i] | c[i] | d[i] | e[i]);                                    \
            break;                                                                         \
        case 6:                                                                            \
            ROWS_OPS(a[i] | b[i] | c[i] | d[i] | e[i] | f[i]);                             \
            break;                                                                         \
        case 7:                                                                            \
            ROWS_OPS(a[i] | b[i] | c[i] | d[i] | e[i] | f[i] | g[i]);                      \
            break;                                                                         \
        default:                                                                           \
            ROWS_OPS(a[i] | b[i] | c[i] | d[i] | e[i] | f[i] | g[i] | h[i]);               \
            break;                                                                         \
        }                                                                                  \
    }

static void
rows_pass_generic(uint32_t *RESTRICT out, const uint32_t *RESTRICT src, const uint32_t *const *r, int n,
                  Py_ssize_t nw, int op)
    ROWS_BODY

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
__attribute__((target("avx2"))) static void
rows_pass_avx2(uint32_t *RESTRICT out, const uint32_t *RESTRICT src, const uint32_t *const *r, int n,
               Py_ssize_t nw, int op)
    ROWS_BODY

__attribute__((target("popcnt"))) static inline int
popcount_hw(uint32_t x)
{
    return __builtin_popcount(x);
}

static int g_has_avx2 = -1, g_has_popcnt = -1, g_cpu_avx2 = 0;

static void
cpu_features(void)
{
    if (g_has_avx2 < 0) {
        __builtin_cpu_init();
        g_cpu_avx2 = g_has_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
        g_has_popcnt = __builtin_cpu_supports("popcnt") ? 1 : 0;
    }
}

static void
rows_pass(uint32_t *out, const uint32_t *src, const uint32_t *const *r, int n, Py_ssize_t nw, int op)
{
    if (g_has_avx2)
        rows_pass_avx2(out, src, r, n, nw, op);
    else
        rows_pass_generic(out, src, r, n, nw, op);
}

/* A row into a row-cache slot with streaming stores: the slot is rarely in the CPU's caches, and
 * a plain copy fetches each of its 64-byte lines before writing it (16 KiB: 2-3 us in the cold
 * peers benchmark, more than computing most rows); these stores write the lines without reading
 * them, and leave them out of the caches: for a row not read again soon. */
__attribute__((target("avx2"))) static void
slot_store_avx2(uint32_t *dst, const uint32_t *src, Py_ssize_t nw)
{
    Py_ssize_t i = 0;
    for (; i < nw && ((uintptr_t)(dst + i) & 31) != 0; i++)
        dst[i] = src[i];
    for (; i + 8 <= nw; i += 8)
        _mm256_stream_si256((__m256i *)(dst + i), _mm256_loadu_si256((const __m256i *)(src + i)));
    for (; i < nw; i++)
        dst[i] = src[i];
    _mm_sfence();
}

static void
slot_store(uint32_t *dst, const uint32_t *src, Py_ssize_t nw)
{
    if (g_has_avx2)
        slot_store_avx2(dst, src, nw);
    else
        memcpy(dst, src, (size_t)nw * 4);
}
#else
static int g_has_avx2 = 0, g_cpu_avx2 = 0;

static void
cpu_features(void)
{
}
#define rows_pass rows_pass_generic

static void
slot_store(uint32_t *dst, const uint32_t *src, Py_ssize_t nw)
{
    memcpy(dst, src, (size_t)nw * 4);
}
#endif

/* Word w of a class set, by mode: 0 the allowed classes (row), 1 the disallowed ones
 * (~row), 2 the classes that differ from another row (row ^ other); masked by `part` (the
 * large or the small classes, both zero past num_classes). */
static inline uint32_t
set_word(const uint32_t *row, const uint32_t *other, int mode, const uint32_t *part, Py_ssize_t w)
{
    uint32_t x = mode == 0 ? row[w] : mode == 1 ? ~row[w] : row[w] ^ other[w];
    return x & part[w];
}

/* Class rows are scanned BLOCK_WORDS words at a time, and a block none of whose words can
 * hold a class of the set is skipped: a test on four 64-bit loads of the class rows alone
 * (mode 0: all words zero, 1: all ones, 2: equal to `other`'s).  A class row of a grammar of
 * tens of thousands of classes allows a few classes (or disallows a few), and consecutive
 * rows differ in a few, so most of its blocks are skipped. */
static inline int
block_empty(const uint32_t *row, const uint32_t *other, int mode, Py_ssize_t w)
{
    uint64_t a[4];
    memcpy(a, row + w, sizeof a);
    if (mode == 0)
        return (a[0] | a[1] | a[2] | a[3]) == 0;
    if (mode == 1)
        return (a[0] & a[1] & a[2] & a[3]) == ~(uint64_t)0;
    uint64_t b[4];
    memcpy(b, other + w, sizeof b);
    return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

/* The first word >= w of a class row of cw words that is not in a skipped block (cw if none);
 * a scan goes `for (w = next_word(.., 0, cw); w < cw; w = next_word(.., w + 1, cw))`. */
static inline Py_ssize_t
next_word(const uint32_t *row, const uint32_t *other, int mode, Py_ssize_t w, Py_ssize_t cw)
{
    if (w % BLOCK_WORDS)
        return w;
    while (w + BLOCK_WORDS <= cw && block_empty(row, other, mode, w))
        w += BLOCK_WORDS;
    return w;
}

/* `out` := the valid tokens' row, written without reading it when it is all ones but for a few
 * words (k->holes): most vocabularies have no token a grammar's classes leave out but the
 * special ones, and a row of most of the vocabulary (a string's interior) starts from it, where
 * reading 16 KiB out of the CPU's caches cost more than the rest of the row. */
static void
valid_into(const Kernel *k, uint32_t *out)
{
    if (k->holes == NULL) {
        memcpy(out, k->valid, (size_t)k->nw * 4);
        return;
    }
    memset(out, 0xff, (size_t)k->nw * 4);
    for (Py_ssize_t i = 0; i < k->n_holes; i++)
        out[k->holes[i]] = k->valid[k->holes[i]];
}

/* One pass of apply_rows over the n rows in k->pass: the first (`used` 0) reads `start`. */
static inline void
first_or_next_pass(Kernel *k, uint32_t *out, const uint32_t *start, Py_ssize_t used, int n, int op)
{
    if (used == 0 && start == k->valid && k->holes != NULL) { /* written, then the pass in place */
        valid_into(k, out);
        rows_pass(out, NULL, k->pass, n, k->nw, op);
    } else if (used == 0 && start != out)
        rows_pass(out, start, k->pass, n, k->nw, start == NULL ? OP_SET : op);
    else
        rows_pass(out, NULL, k->pass, n, k->nw, op);
}

/* out = start OP (the rows of the large classes of the set of `mode`), eight rows per pass, where
 * `start` is `out` itself (in place), another row, or NULL for a row of zeros (then `op` is
 * OP_OR); the first pass reads `start` and writes `out`, so that no pass only initialises it.
 * Returns the number of rows. */
static Py_ssize_t
apply_rows(Kernel *k, const uint32_t *row, const uint32_t *other, int mode, int op, uint32_t *out,
           const uint32_t *start)
{
    int n = 0;
    Py_ssize_t used = 0;
    Py_ssize_t cw = k->n_big ? k->cw : 0; /* no large class: nothing to scan */
    for (Py_ssize_t w = next_word(row, other, mode, 0, cw); w < cw; w = next_word(row, other, mode, w + 1, cw)) {
        uint32_t x = set_word(row, other, mode, k->big_classes, w);
        while (x) {
            uint32_t c = (uint32_t)(32 * w) + (uint32_t)ctz32(x);
            x &= x - 1;
            k->pass[n++] = k->rows + (size_t)k->row_of[c] * (size_t)k->nwp;
            if (n == ROWS_PER_PASS) {
                first_or_next_pass(k, out, start, used, n, op);
                used += n;
                n = 0;
            }
        }
    }
    if (n) {
        first_or_next_pass(k, out, start, used, n, op);
        used += n;
    }
    if (used == 0 && start != out) {
        if (start == NULL)
            memset(out, 0, (size_t)k->nw * 4);
        else if (start == k->valid)
            valid_into(k, out);
        else
            memcpy(out, start, (size_t)k->nw * 4);
    }
    return used;
}

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

static inline void
apply_token(uint32_t *out, uint32_t tok, int op)
{
    uint32_t bit = (uint32_t)1 << (tok & 31);
    if (op == OP_OR)
        out[tok >> 5] |= bit;
    else if (op == OP_ANDNOT)
        out[tok >> 5] &= ~bit;
    else
        out[tok >> 5] ^= bit;
}

/* Small classes are listed in batches of SMALL_BATCH, and each batch's token lists are read in
 * three passes (their offsets fetched, then their tokens, then the tokens applied): a class's
 * offsets and tokens lie at random in arrays of the vocabulary's size, out of the CPU's caches
 * in a decoding loop, and the passes let those reads overlap instead of waiting one by one. */
static void
apply_batch(const Kernel *k, const uint32_t *ids, int n, int op, uint32_t *out)
{
    const ClassSpan *span = k->span;
    const uint32_t *toks = k->csr_tok;
    ClassSpan sp[SMALL_BATCH];
    for (int j = 0; j < n; j++)
        PREFETCH(span + ids[j]);
    for (int j = 0; j < n; j++) {
        sp[j] = span[ids[j]];
        if (!(sp[j].a & SPAN_INLINE))
            PREFETCH(toks + sp[j].a);
    }
    for (int j = 0; j < n; j++) {
        if (sp[j].a & SPAN_INLINE) {
            apply_token(out, sp[j].a & ~SPAN_INLINE, op);
            if (sp[j].b != SPAN_NONE)
                apply_token(out, sp[j].b, op);
        } else {
            for (uint32_t q = sp[j].a; q < sp[j].b; q++)
                apply_token(out, toks[q], op);
        }
    }
}

/* Set (op OP_OR), clear (OP_ANDNOT) or flip (OP_XOR) in `out` the tokens of the small classes
 * of the set of `mode`. */
static void
apply_small(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode, int op, uint32_t *out)
{
    uint32_t ids[SMALL_BATCH];
    int n = 0;
    for (Py_ssize_t w = next_word(row, other, mode, 0, k->cw); w < k->cw;
         w = next_word(row, other, mode, w + 1, k->cw)) {
        uint32_t x = set_word(row, other, mode, k->small_classes, w);
        while (x) {
            ids[n++] = (uint32_t)(32 * w) + (uint32_t)ctz32(x);
            x &= x - 1;
            if (n == SMALL_BATCH) {
                apply_batch(k, ids, n, op, out);
                n = 0;
            }
        }
    }
    if (n)
        apply_batch(k, ids, n, op, out);
}

/* allowed[c] = bit c of the class row, for every c < C; allowed[C..] = 0 */
static void
unpack_row(Kernel *k, const uint32_t *row)
{
    const uint8_t *bytes = (const uint8_t *)row;
    uint8_t *a = k->allowed;
    Py_ssize_t nb = k->cw * 4;
    for (Py_ssize_t i = 0; i < nb; i++)
        memcpy(a + 8 * i, &k->spread[bytes[i]], 8);
    memset(a + k->num_classes, 0, (size_t)(k->cw * 32 + 8 - k->num_classes));
}

#define GATHER_BODY(T)                                                                   \
    do {                                                                                 \
        const T *ids = (const T *)k->cls_of;                                             \
        for (Py_ssize_t w = 0; w < k->nw; w++) {                                         \
            const T *t = ids + 32 * w;                                                   \
            uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;                                     \
            for (int b = 0; b < 8; b++) {                                                \
                a0 |= (uint32_t)a[t[b]] << b;                                            \
                a1 |= (uint32_t)a[t[b + 8]] << b;                                        \
                a2 |= (uint32_t)a[t[b + 16]] << b;                                       \
                a3 |= (uint32_t)a[t[b + 24]] << b;                                       \
            }                                                                            \
            out[w] = a0 | a1 << 8 | a2 << 16 | a3 << 24;                                 \
        }                                                                                \
    } while (0)

/* plan 0 (after unpack_row) */
static void
plan_gather(Kernel *k, uint32_t *out)
{
    const uint8_t *a = k->allowed;
    if (k->wide)
        GATHER_BODY(uint32_t);
    else
        GATHER_BODY(uint16_t);
}

/* The small tokens word by word (after unpack_row): the OR of a word's bits, then one OR. */
#define TAIL_BODY(T)                                                                     \
    do {                                                                                 \
        const T *tcl = (const T *)k->tail_cls;                                           \
        for (Py_ssize_t w = 0; w < k->nw; w++) {                                         \
            uint32_t s = ts[w], e = ts[w + 1];                                           \
            uint32_t acc = 0;                                                            \
            for (uint32_t j = s; j < e; j++)                                             \
                acc |= (uint32_t)a[tcl[j]] << bit[j];                                    \
            out[w] |= acc;                                                               \
        }                                                                                \
    } while (0)

static void
gather_small(Kernel *k, uint32_t *out)
{
    const uint8_t *a = k->allowed;
    const uint8_t *bit = k->tail_bit;
    const uint32_t *ts = k->tail_start;
    if (k->wide)
        TAIL_BODY(uint32_t);
    else
        TAIL_BODY(uint16_t);
}

/* Plans 1-3: the large classes by rows (`big`: 0 OR the allowed ones' rows, 1 their union AND-NOT
 * the disallowed ones' rows), the small ones gathered (1), set (2) or cleared (3). */
static void
plan_compose(Kernel *k, int plan, int big, const uint32_t *row, uint32_t *out)
{
    int small_clear = plan == PLAN_CLEAR;
    const uint32_t *start = big && small_clear ? k->valid : big ? k->big_union : small_clear ? k->small_union : NULL;
    apply_rows(k, row, NULL, big, big ? OP_ANDNOT : OP_OR, out, start);
    if (plan == PLAN_SPLIT) {
        unpack_row(k, row);
        gather_small(k, out);
    } else if (plan == PLAN_SET) {
        apply_small(k, row, NULL, 0, OP_OR, out);
    } else {
        apply_small(k, row, NULL, 1, OP_ANDNOT, out);
    }
}

/* Plan 4: `base_out` (the token row of the class row `base_cls`) with every differing class flipped. */
static void
plan_delta(Kernel *k, const uint32_t *row, const uint32_t *base_cls, const uint32_t *base_out, uint32_t *out)
{
    if (out != base_out && base_out < out + k->nw && out < base_out + k->nw) { /* overlapping */
        memmove(out, base_out, (size_t)k->nw * 4);
        base_out = out;
    }
    apply_rows(k, row, base_cls, 2, OP_XOR, out, base_out);
    apply_small(k, row, base_cls, 2, OP_XOR, out);
}

/* -- the choice ---------------------------------------------------------------------- */

/* A class set's large classes (exact) and small classes, with the small tokens estimated at
 * the mean size of the small classes of each class word (exact in sum over a word's small
 * classes; a word holds 32 neighbouring class ids, so this follows any drift of class size
 * with class id, as in classes numbered by size). */
typedef struct {
    Py_ssize_t big, small;
    double small_tokens;
} Stats;

/* The stats of the classes of `row` (other NULL) or of those differing from `other`, block by
 * block (empty blocks skipped, full ones counted from their totals, four partial sums of the
 * token estimate).  With a finite `limit` the scan stops as soon as patching the differing
 * classes counted so far would cost more by the model (delta_cost without the row's start):
 * st.big is then -1. */
#define STATS_BODY(POPCOUNT)                                                             \
    {                                                                                    \
        Stats st = {0, 0, 0.0};                                                          \
        double acc[4] = {0.0, 0.0, 0.0, 0.0};                                            \
        double per_big = NS_ROW_WORD * (double)k->nw;                                    \
        Py_ssize_t cw = k->cw, w = 0;                                                    \
        for (; w + BLOCK_WORDS <= cw; w += BLOCK_WORDS) {                                \
            uint64_t a[4], b[4] = {0, 0, 0, 0};                                          \
            memcpy(a, row + w, sizeof a);                                                \
            if (other)                                                                   \
                memcpy(b, other + w, sizeof b);                                          \
            uint64_t x0 = a[0] ^ b[0], x1 = a[1] ^ b[1], x2 = a[2] ^ b[2], x3 = a[3] ^ b[3]; \
            if ((x0 | x1 | x2 | x3) == 0)                                                \
                continue;                                                                \
            if ((x0 & x1 & x2 & x3) == ~(uint64_t)0) { /* every class of the block */    \
                st.big += k->block_big[w / BLOCK_WORDS];                                 \
                st.small += k->block_small[w / BLOCK_WORDS];                             \
                acc[0] += k->block_tokens[w / BLOCK_WORDS];                              \
            } else {                                                                     \
                for (int j = 0; j < BLOCK_WORDS; j++) {                                  \
                    uint32_t x = other ? row[w + j] ^ other[w + j] : row[w + j];         \
                    int ns = POPCOUNT(x & k->small_classes[w + j]);                      \
                    st.big += POPCOUNT(x & k->big_classes[w + j]);                       \
                    st.small += ns;                                                      \
                    acc[j & 3] += (double)ns * (double)k->small_mean[w + j];             \
                }                                                                        \
            }                                                                            \
            if (per_big * (double)st.big +                                               \
                    list_cost((double)st.small, acc[0] + acc[1] + acc[2] + acc[3]) >     \
                limit) {                                                                 \
                st.big = -1;                                                             \
                return st;                                                               \
            }                                                                            \
        }                                                                                \
        for (; w < cw; w++) {                                                            \
            uint32_t x = other ? row[w] ^ other[w] : row[w];                             \
            int ns = POPCOUNT(x & k->small_classes[w]);                                  \
            st.big += POPCOUNT(x & k->big_classes[w]);                                   \
            st.small += ns;                                                              \
            acc[0] += (double)ns * (double)k->small_mean[w];                             \
        }                                                                                \
        st.small_tokens = acc[0] + acc[1] + acc[2] + acc[3];                             \
        if (per_big * (double)st.big + list_cost((double)st.small, st.small_tokens) > limit) \
            st.big = -1;                                                                 \
        return st;                                                                       \
    }

static Stats
row_stats_generic(const Kernel *k, const uint32_t *row, const uint32_t *other, double limit)
    STATS_BODY(popcount32)

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* Without -mpopcnt, __builtin_popcount is a library call; this copy uses the instruction
 * and is taken only when the CPU has it. */
__attribute__((target("popcnt"))) static Stats
row_stats_popcnt(const Kernel *k, const uint32_t *row, const uint32_t *other, double limit)
    STATS_BODY(popcount_hw)

static Stats
bounded_stats(const Kernel *k, const uint32_t *row, const uint32_t *other, double limit)
{
    return g_has_popcnt ? row_stats_popcnt(k, row, other, limit) : row_stats_generic(k, row, other, limit);
}
#else
#define bounded_stats row_stats_generic
#endif

/* the allowed classes of `row` (other NULL), or those differing from `other` */
static inline Stats
row_stats(const Kernel *k, const uint32_t *row, const uint32_t *other)
{
    return bounded_stats(k, row, other, HUGE_VAL);
}

/* Modelled cost of plan 2 or 3 (without NS_FIXED) for a row of `st`, and its large-class mode. */
static double
compose_cost(const Kernel *k, int plan, const Stats *st, int *big)
{
    Py_ssize_t nb = st->big, nb_off = k->n_big - st->big;
    *big = nb_off < nb;
    double cost = NS_INIT_WORD * (double)k->nw + NS_ROW_WORD * (double)k->nw * (double)(*big ? nb_off : nb);
    if (plan == PLAN_SPLIT)
        return cost + k->cost_tail;
    if (plan == PLAN_SET)
        return cost + list_cost((double)st->small, st->small_tokens);
    return cost + list_cost((double)(k->n_small_classes - st->small), (double)k->n_small_tokens - st->small_tokens);
}

/* Modelled cost of plan 4 (without NS_FIXED) from the stats of the differing classes. */
static double
delta_cost(const Kernel *k, const Stats *diff)
{
    return NS_INIT_WORD * (double)k->nw + NS_ROW_WORD * (double)k->nw * (double)diff->big +
           list_cost((double)diff->small, diff->small_tokens);
}

/* Self-correction of the cost model.  Its constants were fitted on one machine; in a decoding
 * loop the engine's own work runs between two rows and may evict the kernel's rows and lists,
 * and other CPUs differ.  So every row whose plan is chosen is timed, and corr[plan], a running
 * mean (weight 1/8) of measured over modelled time, scales that plan's estimates.  One row in 32
 * is chosen by the uncorrected model, so that a plan the corrections rule out is measured again.
 * The rows themselves never depend on the choice. */
static void
learn(Kernel *k, int plan, double ns, double model)
{
    if (!k->adapt || model <= 0.0)
        return;
    double r = ns / model;
    r = r < 0.2 ? 0.2 : r > 5.0 ? 5.0 : r;
    k->corr[plan] += 0.125 * (r - k->corr[plan]);
}

/* Run plan `plan` (0-4; `big` -1: the large-class mode of fewer rows). */
static void
run_plan(Kernel *k, int plan, int big, const uint32_t *row, const uint32_t *base_cls, const uint32_t *base_out,
         uint32_t *out)
{
    if (plan == PLAN_GATHER) {
        unpack_row(k, row);
        plan_gather(k, out);
    } else if (plan == PLAN_DELTA) {
        plan_delta(k, row, base_cls, base_out, out);
    } else {
        if (big < 0) {
            Stats st = row_stats(k, row, NULL);
            big = k->n_big - st.big < st.big;
        }
        plan_compose(k, plan, big, row, out);
    }
}

/* The modelled costs (without NS_FIXED) of plans 0-3 for a row of stats `st`, their large-class
 * modes in bigs[]. */
static void
plan_costs(const Kernel *k, const Stats *st, double *model, int *bigs)
{
    model[PLAN_GATHER] = k->cost_gather - NS_FIXED;
    for (int p = PLAN_SPLIT; p <= PLAN_CLEAR; p++)
        model[p] = compose_cost(k, p, st, &bigs[p]);
}

/* The least of the modelled costs of plans 0-3 in `model` */
static double
min_plan_cost(const double *model)
{
    double cost = HUGE_VAL;
    for (int p = 0; p < PLAN_DELTA; p++)
        cost = model[p] < cost ? model[p] : cost;
    return cost;
}

/* The most a delta may cost by the model (delta_cost) and still be chosen over plans 0-3 of
 * modelled costs `model` (without `pre`, the part every plan pays), whether the choice is
 * corrected (see learn) or not. */
static double
delta_limit(const Kernel *k, const double *model, double pre)
{
    double raw = min_plan_cost(model), corrected = HUGE_VAL;
    for (int p = 0; p < PLAN_DELTA; p++) {
        double c = (model[p] + pre) * k->corr[p];
        corrected = c < corrected ? c : corrected;
    }
    corrected = corrected / k->corr[PLAN_DELTA] - pre;
    return raw > corrected ? raw : corrected;
}

/* One row by plan `force` (-1: chosen by cost; 5: set or clear, whichever lists fewer small
 * classes), its large classes by mode `big` (-1: fewer rows).  With base_cls / base_out (may be
 * NULL) plan 4 is possible; `diff` (may be NULL) is then row_stats(row, base_cls) if the caller
 * has it, and `allowed` (may be NULL) row_stats(row, NULL).  Returns the plan used. */
static int
compute_row(Kernel *k, const uint32_t *row, const uint32_t *base_cls, const uint32_t *base_out,
            const Stats *diff, const Stats *allowed, uint32_t *out, int force, int big)
{
    if (force == PLAN_FEWER) {
        Stats st = allowed ? *allowed : row_stats(k, row, NULL);
        force = 2 * st.small <= k->n_small_classes ? PLAN_SET : PLAN_CLEAR;
    }
    k->last_ns = -1.0;
    if (force >= 0) {
        run_plan(k, force, big, row, base_cls, base_out, out);
        return force;
    }
    int explore = !k->adapt || (k->n_auto++ & 31) == 0;
    double t0 = k->adapt ? now_ns() : 0.0;
    Stats st = allowed ? *allowed : row_stats(k, row, NULL), d;
    double model[5];
    int bigs[5] = {0, 0, 0, 0, 0};
    double pre = NS_FIXED + NS_SCAN_WORD * (double)k->cw; /* spent whatever the plan */
    int n_plans = 4;
    plan_costs(k, &st, model, bigs);
    if (base_cls != NULL) {
        if (diff == NULL) {
            d = row_stats(k, row, base_cls);
            diff = &d;
        }
        pre += NS_DELTA_SCAN_WORD * (double)k->cw;
        model[PLAN_DELTA] = delta_cost(k, diff);
        if (base_out == out) /* patched where it lies: no copy of the base */
            model[PLAN_DELTA] -= NS_INIT_WORD * (double)k->nw;
        n_plans = 5;
    }
    int best = 0;
    double best_cost = HUGE_VAL;
    for (int p = 0; p < n_plans; p++) {
        model[p] += pre;
        double c = model[p] * (explore ? 1.0 : k->corr[p]);
        if (c < best_cost) {
            best_cost = c;
            best = p;
        }
    }
    if (best == PLAN_GATHER || best == PLAN_DELTA)
        run_plan(k, best, -1, row, base_cls, base_out, out);
    else
        plan_compose(k, best, bigs[best], row, out);
    if (k->adapt) {
        k->last_ns = now_ns() - t0;
        learn(k, best, k->last_ns, model[best]);
    }
    return best;
}

/* -- row cache ---------------------------------------------------------------------- */

/* the bits of a class row's last word that name classes */
static uint32_t
last_word_mask(const Kernel *k)
{
    return (k->num_classes & 31) ? ((uint32_t)1 << (k->num_classes & 31)) - 1 : ~(uint32_t)0;
}

/* c_key = row with the bits past num_classes cleared */
static void
copy_key(Kernel *k, const uint32_t *row)
{
    Py_ssize_t cw = k->cw;
    memcpy(k->c_key, row, (size_t)cw * 4);
    k->c_key[cw - 1] &= last_word_mask(k);
    k->c_key[cw] = 0; /* the pad word: a 64-bit load of the last word */
}

/* The hash of c_key: a sum of one independent mix per 64-bit word (no chain through the words:
 * their mixes overlap in the CPU), the blocks of zero words left out; equal keys have equal
 * hashes, and a hit is confirmed by comparing the keys. */
static uint64_t
key_hash(const Kernel *k)
{
    Py_ssize_t cw = k->cw;
    uint64_t h = 0x243f6a8885a308d3ULL ^ (uint64_t)cw;
    for (Py_ssize_t w = next_word(k->c_key, NULL, 0, 0, cw); w < cw; w = next_word(k->c_key, NULL, 0, w + 2, cw)) {
        uint64_t x;
        memcpy(&x, k->c_key + w, 8);
        x ^= (uint64_t)(w + 1) * 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 32)) * 0xd6e8feb86659fd93ULL;
        h += x ^ (x >> 32);
    }
    return h;
}

/* c_key = row with the bits past num_classes cleared; returns its hash (key_hash) */
static uint64_t
load_key(Kernel *k, const uint32_t *row)
{
    copy_key(k, row);
    return key_hash(k);
}

/* table position holding slot `s`, or of the first empty position when s < 0 (for key) */
static Py_ssize_t
find_pos(const Kernel *k, uint64_t h, int32_t *slot_out)
{
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)k->c_tmask);
    for (;;) {
        int32_t s = k->c_table[i];
        if (s < 0) {
            *slot_out = -1;
            return i;
        }
        if (k->c_hash[s] == h &&
            memcmp(k->c_keys + (size_t)s * (size_t)k->cw, k->c_key, (size_t)k->cw * 4) == 0) {
            *slot_out = s;
            return i;
        }
        i = (i + 1) & k->c_tmask;
    }
}

static void
lru_unlink(Kernel *k, int32_t s)
{
    int32_t p = k->c_prev[s], n = k->c_next[s];
    if (p >= 0)
        k->c_next[p] = n;
    else
        k->c_head = n;
    if (n >= 0)
        k->c_prev[n] = p;
    else
        k->c_tail = p;
}

static void
lru_push_front(Kernel *k, int32_t s)
{
    k->c_prev[s] = -1;
    k->c_next[s] = k->c_head;
    if (k->c_head >= 0)
        k->c_prev[k->c_head] = s;
    k->c_head = s;
    if (k->c_tail < 0)
        k->c_tail = s;
}

/* remove slot s from the hash table (backward-shift deletion keeps probe chains intact) */
static void
table_remove(Kernel *k, int32_t s)
{
    Py_ssize_t mask = k->c_tmask;
    Py_ssize_t j = (Py_ssize_t)(k->c_hash[s] & (uint64_t)mask);
    while (k->c_table[j] != s)
        j = (j + 1) & mask;
    for (;;) {
        k->c_table[j] = -1;
        Py_ssize_t i = j;
        for (;;) {
            i = (i + 1) & mask;
            int32_t t = k->c_table[i];
            if (t < 0)
                return;
            Py_ssize_t ideal = (Py_ssize_t)(k->c_hash[t] & (uint64_t)mask);
            /* t may move back to j unless its ideal position lies cyclically in (j, i] */
            int stays = j <= i ? (ideal > j && ideal <= i) : (ideal > j || ideal <= i);
            if (!stays) {
                k->c_table[j] = t;
                j = i;
                break;
            }
        }
    }
}

/* The cached row nearest to c_key among the DELTA_CANDIDATES most recently used ones (the
 * cheapest to patch by the cost model), with its differing classes' stats; -1 if none costs at
 * most `limit` to patch (a candidate's scan stops once it costs more than that or than the best
 * so far). */
static int32_t
nearest_cached(Kernel *k, Stats *best_diff, double limit)
{
    int32_t best = -1;
    double best_cost = limit - NS_INIT_WORD * (double)k->nw;
    int32_t s = k->c_head;
    for (int i = 0; i < DELTA_CANDIDATES && s >= 0; i++, s = k->c_next[s]) {
        Stats d = bounded_stats(k, k->c_key, k->c_keys + (size_t)s * (size_t)k->cw, best_cost);
        if (d.big < 0)
            continue;
        double c = delta_cost(k, &d) - NS_INIT_WORD * (double)k->nw;
        if (best < 0 ? c <= best_cost : c < best_cost) {
            best_cost = c;
            best = s;
            *best_diff = d;
        }
    }
    return best;
}

/* The kept set nearest to c_key among the SET_CANDIDATES dearest of those anchored in it, with
 * its differing classes' stats; -1 if none costs less than `limit` to patch (delta_cost without
 * the copy, as in nearest_cached). */
static int32_t
nearest_set(Kernel *k, Stats *best_diff, double limit)
{
    int32_t pick[SET_CANDIDATES];
    int n = 0;
    for (Py_ssize_t w = 0; w < k->cw; w++)
        for (uint32_t x = k->c_key[w] & k->g_anchor[w]; x; x &= x - 1) {
            Py_ssize_t c = 32 * w + ctz32(x);
            for (int32_t g = k->g_first[c]; g < k->g_first[c + 1]; g++) { /* kept in rank order */
                int32_t r = k->g_rank[g];
                if (n == SET_CANDIDATES && r >= k->g_rank[pick[n - 1]])
                    continue;
                int i = n < SET_CANDIDATES ? n++ : n - 1;
                for (; i > 0 && k->g_rank[pick[i - 1]] > r; i--)
                    pick[i] = pick[i - 1];
                pick[i] = g;
            }
        }
    int32_t best = -1;
    double best_cost = limit;
    for (int i = 0; i < n; i++) {
        int32_t g = pick[i];
        Stats d = bounded_stats(k, k->c_key, k->g_keys + (size_t)g * (size_t)k->cw, best_cost);
        if (d.big < 0)
            continue;
        double cost = delta_cost(k, &d) - NS_INIT_WORD * (double)k->nw;
        if (cost < best_cost) {
            best_cost = cost;
            best = g;
            *best_diff = d;
        }
    }
    return best;
}

/* The hash of a 64-byte line of a pinned row (pin_rows: equal lines are pooled). */
static uint64_t
line_hash(const uint32_t *line)
{
    uint64_t h = 0x3c6ef372fe94f82bULL;
    for (int w = 0; w < 16; w += 2) {
        uint64_t x;
        memcpy(&x, line + w, 8);
        x = (x ^ (x >> 31) ^ (uint64_t)(w + 1)) * 0x9e3779b97f4a7c15ULL;
        h = (h ^ x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ULL;
    }
    return h ^ (h >> 32);
}

/* out[16 j .. 16 j + 16) := line ix[j] of the pool `lines`, for j < n */
static void
gather_lines_generic(const uint32_t *RESTRICT lines, const uint16_t *RESTRICT ix, Py_ssize_t n,
                     uint32_t *RESTRICT out)
{
    for (Py_ssize_t j = 0; j < n; j++)
        memcpy(out + 16 * j, lines + 16 * (size_t)ix[j], 64);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* gather_lines_generic, two lines a step in 32-byte moves (the pool's lines are 64-byte aligned):
 * compiled without AVX2 and with the pool's address read again for every line (`out` might have
 * been the kernel), each line took 15 instructions, a hit's 251 lines some 3,800; here 8.5 */
__attribute__((target("avx2"))) static void
gather_lines_avx2(const uint32_t *RESTRICT lines, const uint16_t *RESTRICT ix, Py_ssize_t n, uint32_t *RESTRICT out)
{
    Py_ssize_t j = 0;
    for (; j + 2 <= n; j += 2) {
        const __m256i *a = (const __m256i *)(lines + 16 * (size_t)ix[j]);
        const __m256i *b = (const __m256i *)(lines + 16 * (size_t)ix[j + 1]);
        __m256i a0 = _mm256_load_si256(a), a1 = _mm256_load_si256(a + 1);
        __m256i b0 = _mm256_load_si256(b), b1 = _mm256_load_si256(b + 1);
        _mm256_storeu_si256((__m256i *)(out + 16 * j), a0);
        _mm256_storeu_si256((__m256i *)(out + 16 * j + 8), a1);
        _mm256_storeu_si256((__m256i *)(out + 16 * j + 16), b0);
        _mm256_storeu_si256((__m256i *)(out + 16 * j + 24), b1);
    }
    gather_lines_generic(lines, ix + j, n - j, out + 16 * j); /* an odd line left */
}
#endif

/* `out` := the token row of pinned row p, line by line out of the pool. */
static void
pinned_copy(const Kernel *k, int32_t p, uint32_t *out)
{
    Py_ssize_t nl = k->nwp / 16, nw = k->nw;
    const uint16_t *ix = k->p_index + (size_t)p * (size_t)nl;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (g_has_avx2)
        gather_lines_avx2(k->p_lines, ix, nl - 1, out);
    else
#endif
        gather_lines_generic(k->p_lines, ix, nl - 1, out);
    memcpy(out + 16 * (nl - 1), k->p_lines + 16 * (size_t)ix[nl - 1], (size_t)(nw - 16 * (nl - 1)) * 4);
}

/* The pinned row whose class row is c_key (of hash h), -1 if none. */
static int32_t
pinned_at(const Kernel *k, uint64_t h)
{
    if (k->n_pinned == 0)
        return -1;
    for (Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)k->p_tmask);; i = (i + 1) & k->p_tmask) {
        int32_t p = k->p_table[i];
        if (p < 0)
            return -1;
        if (k->p_hash[p] == h && memcmp(k->p_keys + (size_t)p * (size_t)k->cw, k->c_key, (size_t)k->cw * 4) == 0)
            return p;
    }
}

/* One row through the cache; returns the plan (PLAN_CACHE_HIT for a hit).  *slot_out (may be
 * NULL) is the cache slot now holding the row, -1 without a cache.  With base_row (may be NULL),
 * `out` holds the tokens of that class row, and a miss may be patched from it where it lies.
 * `loaded` (may be NULL) is load_key(k, row) when the caller has just run it. */
static int
cached_row_at(Kernel *k, const uint32_t *row, uint32_t *out, int32_t *slot_out, const uint32_t *base_row,
              const uint64_t *loaded)
{
    Py_ssize_t nw = k->nw, cw = k->cw;
    if (slot_out)
        *slot_out = -1;
    if (k->cap == 0) /* no cache: nothing is counted */
        return compute_row(k, row, NULL, NULL, NULL, NULL, out, -1, -1);
    uint64_t h = loaded ? *loaded : load_key(k, row);
    int32_t s;
    Py_ssize_t pos = find_pos(k, h, &s);
    if (s >= 0) {
        memcpy(out, k->c_rows + (size_t)s * (size_t)nw, (size_t)nw * 4);
        if (k->c_head != s) {
            lru_unlink(k, s);
            lru_push_front(k, s);
        }
        k->hits++;
        if (slot_out)
            *slot_out = s;
        return PLAN_CACHE_HIT;
    }
    int32_t pinned = pinned_at(k, h);
    if (pinned >= 0) { /* a hit outside the cache: the row is copied, not cached again */
        pinned_copy(k, pinned, out);
        k->hits++;
        return PLAN_CACHE_HIT;
    }
    k->misses++;
    int plan;
    Stats diff;
    Stats st = row_stats(k, k->c_key, NULL);
    double model[5];
    int bigs[5];
    plan_costs(k, &st, model, bigs);
    double limit = delta_limit(k, model, NS_FIXED + (NS_SCAN_WORD + NS_DELTA_SCAN_WORD) * (double)cw);
    int32_t base = -1, kept = -1;
    double copy = NS_INIT_WORD * (double)k->nw;
    double best = k->delta_mode == 2 ? HUGE_VAL : limit; /* what a patch may cost (delta_cost) */
    if (k->delta_mode > 0 && base_row == NULL) {
        base = nearest_cached(k, &diff, best);
        if (base >= 0)
            best = delta_cost(k, &diff);
    }
    if (base_row != NULL) { /* `out` holds the tokens of base_row: a delta there needs no copy */
        diff = bounded_stats(k, k->c_key, base_row, limit); /* the patch's cost: delta_cost less the copy */
        if (diff.big >= 0)
            best = delta_cost(k, &diff) - copy;
    }
    Stats gdiff;
    if (k->n_sets > 0 && k->delta_mode > 0)
        kept = nearest_set(k, &gdiff, best - copy);
    if (kept >= 0) {
        plan = compute_row(k, k->c_key, k->g_keys + (size_t)kept * (size_t)cw,
                           k->g_rows + (size_t)kept * (size_t)k->nwp, &gdiff, &st, out,
                           k->delta_mode == 2 ? PLAN_DELTA : -1, -1);
        if (plan == PLAN_DELTA)
            k->set_deltas++;
    } else if (base_row != NULL) {
        plan = diff.big >= 0 ? compute_row(k, k->c_key, base_row, out, &diff, &st, out, -1, -1)
                             : compute_row(k, k->c_key, NULL, NULL, NULL, &st, out, -1, -1);
    } else if (base >= 0)
        plan = compute_row(k, k->c_key, k->c_keys + (size_t)base * (size_t)cw,
                           k->c_rows + (size_t)base * (size_t)nw, &diff, &st, out,
                           k->delta_mode == 2 ? PLAN_DELTA : -1, -1);
    else
        plan = compute_row(k, k->c_key, NULL, NULL, NULL, &st, out, -1, -1);
    if (plan == PLAN_DELTA)
        k->deltas++;
    /* cheap by the model, and by the clock where the row's plan was timed: cached when it comes
     * back (a row the model prices low may take far longer out of the CPU's caches) */
    double cheap = NS_ADMIT_WORD * (double)nw;
    if (!k->admit_all && min_plan_cost(model) < cheap && k->last_ns < cheap) {
        uint64_t *door = &k->door[(h >> 17) & (uint64_t)k->door_mask];
        if (base_row != NULL || *door != (h | 1)) {
            if (base_row == NULL)
                *door = h | 1;
            k->not_cached++;
            return plan;
        }
        *door = 0;
    }
    if (k->n_cached < k->cap) {
        s = (int32_t)k->n_cached++;
    } else {
        s = k->c_tail;
        lru_unlink(k, s);
        table_remove(k, s);
        k->c_gen[s]++;
        k->evictions++;
        int32_t dummy;
        pos = find_pos(k, h, &dummy); /* the removal may have moved the empty position */
    }
    k->c_table[pos] = s;
    k->c_hash[s] = h;
    memcpy(k->c_keys + (size_t)s * (size_t)cw, k->c_key, (size_t)cw * 4);
    if (base_row != NULL) /* the row update's: its own row stays with the caller, so the slot is
                           * read again only when the row comes back, out of the caches anyway */
        slot_store(k->c_rows + (size_t)s * (size_t)nw, out, nw);
    else /* a fill's: the next fill often copies it right back (a state that stays) */
        memcpy(k->c_rows + (size_t)s * (size_t)nw, out, (size_t)nw * 4);
    lru_push_front(k, s);
    if (slot_out)
        *slot_out = s;
    return plan;
}

static int
cached_row(Kernel *k, const uint32_t *row, uint32_t *out)
{
    return cached_row_at(k, row, out, NULL, NULL, NULL);
}

/* The start of a Kernel method: 0, or -1 with RuntimeError for a kernel never initialised and
 * TypeError (`usage`) for fewer than `lo` or more than `hi` positional arguments */
static int
kernel_call(const Kernel *k, Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *usage)
{
    if (k->cls_of == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel is not initialised");
        return -1;
    }
    if (nargs < lo || nargs > hi) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    return 0;
}

/* Kernel.expand_rows(class_bitmask, out, indices=None) -> last row's plan (8: cache hit);
 * `indices` is an int64 buffer (one output row per class row) or, for one class row, an int */
static PyObject *
Kernel_expand_rows(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    if (kernel_call(k, nargs, 2, 3, "expand_rows(class_bitmask, out, indices=None)") < 0)
        return NULL;
    Py_buffer cv = {0}, ov = {0}, iv = {0};
    int have_idx = nargs == 3 && args[2] != Py_None;
    int64_t single = 0; /* an int index: one class row into that output row */
    int idx_is_int = have_idx && PyLong_Check(args[2]);
    if (idx_is_int) {
        single = PyLong_AsLongLong(args[2]);
        if (single == -1 && PyErr_Occurred())
            return NULL;
        have_idx = 0;
    }
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &cv, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(args[1], &ov, PyBUF_WRITABLE) < 0 ||
        (have_idx && PyObject_GetBuffer(args[2], &iv, PyBUF_SIMPLE) < 0))
        goto done;
    Py_ssize_t crow = k->cw * 4, orow = k->nw * 4;
    Py_ssize_t batch = cv.len / crow, out_rows = ov.len / orow;
    if (cv.len % crow != 0 || ov.len % orow != 0) {
        PyErr_Format(PyExc_ValueError,
                     "class bitmask / token bitmask must be whole rows of %zd / %zd int32 words",
                     k->cw, k->nw);
        goto done;
    }
    if (idx_is_int ? batch != 1 : have_idx ? iv.len != batch * 8 : batch > out_rows) {
        PyErr_SetString(PyExc_ValueError, "one int64 output index per class row is needed");
        goto done;
    }
    const int64_t *idx = have_idx ? (const int64_t *)iv.buf : idx_is_int ? &single : NULL;
    for (Py_ssize_t b = 0; b < batch; b++) {
        int64_t dst = idx ? idx[b] : b;
        if (dst < 0 || dst >= out_rows) {
            PyErr_Format(PyExc_IndexError, "batch index %lld out of range for a bitmask of %zd rows",
                         (long long)dst, out_rows);
            goto done;
        }
    }
    int plan = PLAN_CACHE_HIT;
    for (Py_ssize_t b = 0; b < batch; b++) {
        int64_t dst = idx ? idx[b] : b;
        plan = cached_row(k, (const uint32_t *)cv.buf + b * k->cw, (uint32_t *)ov.buf + dst * k->nw);
    }
    result = PyLong_FromLong(plan);
done:
    PyBuffer_Release(&cv);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&iv);
    return result;
}

static PyObject *
Kernel_cache_info(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:n,s:n}", "hits", k->hits, "misses", k->misses,
                         "evictions", k->evictions, "deltas", k->deltas, "set_deltas", k->set_deltas,
                         "unchanged", k->unchanged, "in_place", k->in_place, "not_cached", k->not_cached,
                         "entries", k->n_cached, "capacity", k->cap);
}

static PyObject *
Kernel_clear_cache(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    if (k->cap > 0) {
        memset(k->c_table, 0xff, (size_t)(k->c_tmask + 1) * sizeof(int32_t));
        memset(k->door, 0, (size_t)(k->door_mask + 1) * sizeof(uint64_t));
    }
    for (Py_ssize_t i = 0; i < k->n_cached; i++)
        k->c_gen[i]++;
    k->n_cached = 0;
    k->c_head = k->c_tail = -1;
    k->hits = k->misses = k->evictions = k->deltas = k->set_deltas = k->unchanged = k->in_place = 0;
    k->not_cached = 0;
    Py_RETURN_NONE;
}

static int
get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t words, const char *what)
{
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len != words * 4) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd int32 words, got %zd bytes", what, words,
                     view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Kernel.expand(class_row, out, base_out=None, base_class=None, plan=-1, big=-1) -> plan used */
static PyObject *
Kernel_expand(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    const char *usage = "expand(class_row, out, base_out=None, base_class=None, plan=-1, big=-1)";
    if (kernel_call(k, nargs, 2, 6, usage) < 0)
        return NULL;
    long force = -1, big = -1;
    if (nargs >= 5) {
        force = PyLong_AsLong(args[4]);
        if (force == -1 && PyErr_Occurred())
            return NULL;
        if (force < -1 || force > 5) {
            PyErr_SetString(PyExc_ValueError, "plan must be -1 (choose) or 0..5");
            return NULL;
        }
    }
    if (nargs == 6) {
        big = PyLong_AsLong(args[5]);
        if (big == -1 && PyErr_Occurred())
            return NULL;
        if (big < -1 || big > 1) {
            PyErr_SetString(PyExc_ValueError, "big must be -1 (fewer rows), 0 (OR) or 1 (AND-NOT)");
            return NULL;
        }
    }
    int have_base = nargs >= 4 && args[2] != Py_None && args[3] != Py_None;
    if (force == PLAN_DELTA && !have_base) {
        PyErr_SetString(PyExc_ValueError, "plan 4 (delta) needs base_out and base_class");
        return NULL;
    }
    /* zeroed views: PyBuffer_Release does nothing for a view that was never filled */
    Py_buffer rowv = {0}, outv = {0}, bov = {0}, bcv = {0};
    int plan = -1;
    if (get_buffer(args[0], &rowv, 0, k->cw, "class row") < 0 ||
        get_buffer(args[1], &outv, 1, k->nw, "token row") < 0 ||
        (have_base && (get_buffer(args[2], &bov, 0, k->nw, "base token row") < 0 ||
                       get_buffer(args[3], &bcv, 0, k->cw, "base class row") < 0)))
        goto done;
    plan = compute_row(k, (const uint32_t *)rowv.buf, have_base ? (const uint32_t *)bcv.buf : NULL,
                       have_base ? (const uint32_t *)bov.buf : NULL, NULL, NULL, (uint32_t *)outv.buf, (int)force,
                       (int)big);
done:
    PyBuffer_Release(&rowv);
    PyBuffer_Release(&outv);
    PyBuffer_Release(&bov);
    PyBuffer_Release(&bcv);
    if (plan < 0)
        return NULL;
    return PyLong_FromLong(plan);
}

static int patch_in_place(Kernel *k, const uint32_t *row, const uint32_t *base, uint32_t *out, double limit);

/* Kernel.patch(class_row, base_class, out, limit_ns=inf) -> bool: patch_in_place, the step of
 * the C-level expand_row_over that flips the differing classes where `out` (the token row of
 * base_class) lies, for tests and benchmarks: True when done, False with `out` untouched */
static PyObject *
Kernel_patch(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    if (kernel_call(k, nargs, 3, 4, "patch(class_row, base_class, out, limit_ns=inf)") < 0)
        return NULL;
    double limit = HUGE_VAL;
    if (nargs == 4 && (limit = PyFloat_AsDouble(args[3])) == -1.0 && PyErr_Occurred())
        return NULL;
    Py_buffer rowv = {0}, basev = {0}, outv = {0};
    int done = -1;
    if (get_buffer(args[0], &rowv, 0, k->cw, "class row") < 0 ||
        get_buffer(args[1], &basev, 0, k->cw, "base class row") < 0 ||
        get_buffer(args[2], &outv, 1, k->nw, "token row") < 0)
        goto end;
    done = patch_in_place(k, (const uint32_t *)rowv.buf, (const uint32_t *)basev.buf, (uint32_t *)outv.buf, limit);
end:
    PyBuffer_Release(&rowv);
    PyBuffer_Release(&basev);
    PyBuffer_Release(&outv);
    if (done < 0)
        return NULL;
    return PyBool_FromLong(done);
}

typedef struct {
    double cost;
    Py_ssize_t i;
} SetCand;

static int
by_cost_desc(const void *a, const void *b)
{
    const SetCand *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* The budget arguments of keep_sets and pin_rows: args[0] a count (of rows or sets) and args[1]
 * a least modelled cost in ns, both >= 0; -1 with the error set otherwise. */
static int
budget_args(PyObject *const *args, Py_ssize_t *most, double *min_ns, const char *what)
{
    *most = PyLong_AsSsize_t(args[0]);
    if (*most == -1 && PyErr_Occurred())
        return -1;
    *min_ns = PyFloat_AsDouble(args[1]);
    if (*min_ns == -1.0 && PyErr_Occurred())
        return -1;
    if (*most < 0 || *most >= ((Py_ssize_t)1 << 30) || !(*min_ns >= 0.0)) {
        PyErr_Format(PyExc_ValueError, "%s and min_ns must be >= 0", what);
        return -1;
    }
    return 0;
}

/* The modelled cost of building a row of stats `st` by its cheapest plan (0-3), the call and
 * the choice's pass included: what keeping its token row saves on a miss. */
static double
cheapest_cost(const Kernel *k, const Stats *st)
{
    double model[5];
    int bigs[5];
    plan_costs(k, st, model, bigs);
    return min_plan_cost(model) + NS_FIXED + NS_SCAN_WORD * (double)k->cw;
}

/* Kernel.keep_sets(set_start, set_class, max_sets, min_ns) -> int: the kept sets (see the
 * Kernel's fields) replaced by those of the class sets set_class[set_start[s] ..
 * set_start[s + 1]) (int32 buffers; start non-decreasing, classes below num_classes) whose
 * cheapest plan costs at least min_ns by the cost model, the dearest first, at most max_sets,
 * each class set once; their token rows are computed now.  Returns how many were kept.  A set's
 * cost comes from its class list (no class row is made for a set that is not kept). */
static PyObject *
Kernel_keep_sets(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    if (kernel_call(k, nargs, 4, 4, "keep_sets(set_start, set_class, max_sets, min_ns)") < 0)
        return NULL;
    Py_ssize_t max_sets;
    double min_ns;
    if (budget_args(args + 2, &max_sets, &min_ns, "max_sets") < 0)
        return NULL;
    Py_buffer sv = {0}, cv = {0};
    if (PyObject_GetBuffer(args[0], &sv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &cv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    Py_ssize_t cw = k->cw, C = k->num_classes, crow = cw * 4;
    PyObject *result = NULL;
    SetCand *cand = NULL;
    uint32_t *keys = NULL, *anchor = NULL, *scratch = NULL;
    int32_t *first = NULL, *count = NULL, *anchor_of = NULL, *slot = NULL, *rank = NULL;
    void *raw = NULL;
    const int32_t *start = sv.buf, *cls = cv.buf;
    Py_ssize_t n = sv.len / 4 - 1, total = cv.len / 4, m = 0, ng = 0;
    if (sv.len % 4 != 0 || cv.len % 4 != 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "set_start (at least one item) and set_class must be int32 buffers");
        goto done;
    }
    if (start[0] < 0 || start[n] > total) {
        PyErr_SetString(PyExc_ValueError, "set_start must lie within set_class");
        goto done;
    }
    cand = PyMem_Malloc(((size_t)n + 1) * sizeof(SetCand));
    if (cand == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (start[i + 1] < start[i]) {
            PyErr_SetString(PyExc_ValueError, "set_start must not decrease");
            goto done;
        }
        Stats st = {0, 0, 0.0};
        for (int32_t q = start[i]; q < start[i + 1]; q++) {
            int32_t c = cls[q];
            if (c < 0 || c >= C) {
                PyErr_Format(PyExc_ValueError, "set_class holds class %d, not below num_classes=%zd", (int)c, C);
                goto done;
            }
            if (k->big_classes[c >> 5] >> (c & 31) & 1)
                st.big++;
            else if (k->csr_start[c + 1] > k->csr_start[c]) {
                st.small++;
                st.small_tokens += (double)(k->csr_start[c + 1] - k->csr_start[c]);
            }
        }
        if (st.big + st.small == 0)
            continue;
        double cost = cheapest_cost(k, &st);
        if (cost >= min_ns) {
            cand[m].cost = cost;
            cand[m++].i = i;
        }
    }
    qsort(cand, (size_t)m, sizeof(SetCand), by_cost_desc);
    keys = PyMem_Malloc(((size_t)(m < max_sets ? m : max_sets) * (size_t)cw + 1) * 4);
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < m && ng < max_sets; j++) { /* equal class sets model equal costs */
        uint32_t *key = keys + (size_t)ng * (size_t)cw;
        memset(key, 0, (size_t)crow);
        for (int32_t q = start[cand[j].i]; q < start[cand[j].i + 1]; q++)
            key[cls[q] >> 5] |= (uint32_t)1 << (cls[q] & 31);
        int dup = 0;
        for (Py_ssize_t q = ng - 1; q >= 0 && !dup && cand[q].cost == cand[j].cost; q--)
            dup = memcmp(keys + (size_t)q * (size_t)cw, key, (size_t)crow) == 0;
        if (!dup)
            cand[ng++] = cand[j]; /* cand[0 .. ng) now the kept ones, in order */
    }
    /* anchors: per set its class in fewest kept sets; the sets ordered by anchor */
    count = PyMem_Calloc((size_t)C + 1, sizeof(int32_t));
    first = PyMem_Calloc((size_t)C + 2, sizeof(int32_t));
    anchor = PyMem_Calloc((size_t)cw + 1, sizeof(uint32_t));
    anchor_of = PyMem_Malloc(((size_t)ng + 1) * sizeof(int32_t));
    slot = PyMem_Malloc(((size_t)ng + 1) * sizeof(int32_t));
    scratch = PyMem_Malloc(((size_t)ng * (size_t)cw + 1) * 4);
    raw = PyMem_Malloc((size_t)ng * (size_t)k->nwp * 4 + 64);
    rank = PyMem_Malloc(((size_t)ng + 1) * sizeof(int32_t));
    if (!count || !first || !anchor || !anchor_of || !slot || !scratch || !raw || !rank) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t g = 0; g < ng; g++)
        for (Py_ssize_t w = 0; w < cw; w++)
            for (uint32_t x = keys[(size_t)g * (size_t)cw + (size_t)w]; x; x &= x - 1)
                count[32 * w + ctz32(x)]++;
    for (Py_ssize_t g = 0; g < ng; g++) {
        int32_t a = -1;
        for (Py_ssize_t w = 0; w < cw; w++)
            for (uint32_t x = keys[(size_t)g * (size_t)cw + (size_t)w]; x; x &= x - 1) {
                int32_t c = (int32_t)(32 * w + ctz32(x));
                if (a < 0 || count[c] < count[a])
                    a = c;
            }
        anchor_of[g] = a;
        first[a + 1]++;
        anchor[a >> 5] |= (uint32_t)1 << (a & 31);
    }
    for (Py_ssize_t c = 0; c < C; c++)
        first[c + 1] += first[c];
    memcpy(count, first, ((size_t)C + 1) * sizeof(int32_t)); /* the next place per anchor */
    for (Py_ssize_t g = 0; g < ng; g++) {
        slot[g] = count[anchor_of[g]]++;
        rank[slot[g]] = (int32_t)g;
    }
    uint32_t *grow = (uint32_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    for (Py_ssize_t g = 0; g < ng; g++) {
        const uint32_t *key = keys + (size_t)g * (size_t)cw;
        memcpy(scratch + (size_t)slot[g] * (size_t)cw, key, (size_t)crow);
        uint32_t *out = grow + (size_t)slot[g] * (size_t)k->nwp;
        memset(out, 0, (size_t)k->nwp * 4);
        compute_row(k, key, NULL, NULL, NULL, NULL, out, -1, -1);
    }
    PyMem_Free(k->g_raw);
    PyMem_Free(k->g_keys);
    PyMem_Free(k->g_anchor);
    PyMem_Free(k->g_first);
    PyMem_Free(k->g_rank);
    k->g_raw = raw;
    k->g_rank = rank;
    k->g_rows = grow;
    k->g_keys = scratch;
    k->g_anchor = anchor;
    k->g_first = first;
    k->n_sets = ng;
    raw = NULL;
    scratch = NULL;
    anchor = NULL;
    first = NULL;
    rank = NULL;
    result = PyLong_FromSsize_t(ng);
done:
    PyMem_Free(cand);
    PyMem_Free(keys);
    PyMem_Free(anchor);
    PyMem_Free(first);
    PyMem_Free(count);
    PyMem_Free(anchor_of);
    PyMem_Free(slot);
    PyMem_Free(rank);
    PyMem_Free(scratch);
    PyMem_Free(raw);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&cv);
    return result;
}

/* Kernel.pin_rows(class_rows, max_rows, min_ns) -> int: the pinned rows (see the Kernel's
 * fields) replaced by the token rows of the class rows in `class_rows` (an int32 buffer of whole
 * class rows; bits past num_classes ignored) whose cheapest plan costs at least min_ns by the
 * cost model, in their order, each class row once, at most max_rows, and while their distinct
 * lines fit in the pool (PIN_LINES_MAX); their token rows are computed now.  Returns how many
 * were pinned. */
static PyObject *
Kernel_pin_rows(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    if (kernel_call(k, nargs, 3, 3, "pin_rows(class_rows, max_rows, min_ns)") < 0)
        return NULL;
    Py_ssize_t max_rows;
    double min_ns;
    if (budget_args(args + 1, &max_rows, &min_ns, "max_rows") < 0)
        return NULL;
    Py_buffer rv = {0};
    if (PyObject_GetBuffer(args[0], &rv, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t cw = k->cw, crow = cw * 4;
    PyObject *result = NULL;
    uint32_t *keys = NULL, *rows = NULL, *first = NULL;
    uint64_t *hash = NULL;
    int32_t *table = NULL, *lines = NULL;
    uint16_t *index = NULL;
    void *raw = NULL;
    if (rv.len % crow != 0) {
        PyErr_Format(PyExc_ValueError, "class_rows must hold whole class rows of %zd int32 words", cw);
        goto done;
    }
    Py_ssize_t n = rv.len / crow, cap = n < max_rows ? n : max_rows, m = 0, tsize = 4;
    while (tsize < 2 * cap)
        tsize *= 2;
    /* each row taken: its key in the table, its token row computed and its lines pooled (each
     * distinct line once: `first` names the rows' line it came from, `lines` hashes them) */
    Py_ssize_t nl = k->nwp / 16, nlines = 0, lsize = 4;
    while (lsize < 2 * cap * nl)
        lsize *= 2;
    keys = PyMem_Malloc(((size_t)cap * (size_t)cw + 1) * 4);
    hash = PyMem_Malloc(((size_t)cap + 1) * sizeof(uint64_t));
    table = PyMem_Malloc((size_t)tsize * sizeof(int32_t));
    rows = PyMem_Malloc(((size_t)cap * (size_t)k->nwp + 1) * 4);
    index = PyMem_Malloc(((size_t)cap * (size_t)nl + 1) * sizeof(uint16_t));
    first = PyMem_Malloc(((size_t)(cap * nl < PIN_LINES_MAX ? cap * nl : PIN_LINES_MAX) + 1) * sizeof(uint32_t));
    lines = PyMem_Malloc((size_t)lsize * sizeof(int32_t));
    if (!keys || !hash || !table || !rows || !index || !first || !lines) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < tsize; i++)
        table[i] = -1;
    for (Py_ssize_t i = 0; i < lsize; i++)
        lines[i] = -1;
    int full = 0;
    for (Py_ssize_t r = 0; r < n && m < cap && !full; r++) {
        const uint32_t *row = (const uint32_t *)rv.buf + (size_t)r * (size_t)cw;
        copy_key(k, row);
        Stats st = row_stats(k, k->c_key, NULL);
        if (st.big + st.small == 0 || cheapest_cost(k, &st) < min_ns)
            continue;
        uint64_t h = key_hash(k);
        Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(tsize - 1));
        int dup = 0;
        for (; table[i] >= 0 && !dup; i = dup ? i : (i + 1) & (tsize - 1))
            dup = hash[table[i]] == h && memcmp(keys + (size_t)table[i] * (size_t)cw, k->c_key, (size_t)crow) == 0;
        if (dup)
            continue;
        uint32_t *key = keys + (size_t)m * (size_t)cw, *out = rows + (size_t)m * (size_t)k->nwp;
        memcpy(key, k->c_key, (size_t)crow);
        memset(out, 0, (size_t)k->nwp * 4);
        compute_row(k, key, NULL, NULL, NULL, NULL, out, -1, -1);
        Py_ssize_t before = nlines;
        for (Py_ssize_t j = 0; j < nl && !full; j++) {
            const uint32_t *line = out + 16 * j;
            Py_ssize_t q = (Py_ssize_t)(line_hash(line) & (uint64_t)(lsize - 1));
            while (lines[q] >= 0 && memcmp(rows + 16 * (size_t)first[lines[q]], line, 64) != 0)
                q = (q + 1) & (lsize - 1);
            if (lines[q] < 0 && nlines == PIN_LINES_MAX) { /* the pool is full: this row and the rest are not pinned */
                nlines = before;
                full = 1;
            } else {
                if (lines[q] < 0) {
                    first[nlines] = (uint32_t)(m * nl + j);
                    lines[q] = (int32_t)nlines++;
                }
                index[m * nl + j] = (uint16_t)lines[q];
            }
        }
        if (!full) {
            hash[m] = h;
            table[i] = (int32_t)m++;
        }
    }
    raw = PyMem_Malloc((size_t)nlines * 64 + 64);
    if (raw == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t *pool = (uint32_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    for (Py_ssize_t q = 0; q < nlines; q++)
        memcpy(pool + 16 * q, rows + 16 * (size_t)first[q], 64);
    PyMem_Free(k->p_raw);
    PyMem_Free(k->p_index);
    PyMem_Free(k->p_keys);
    PyMem_Free(k->p_hash);
    PyMem_Free(k->p_table);
    k->p_raw = raw;
    k->p_lines = pool;
    k->n_lines = nlines;
    k->p_index = index;
    index = NULL;
    k->p_keys = keys;
    k->p_hash = hash;
    k->p_table = table;
    k->p_tmask = tsize - 1;
    k->n_pinned = m;
    raw = NULL;
    keys = NULL;
    hash = NULL;
    table = NULL;
    result = PyLong_FromSsize_t(m);
done:
    PyMem_Free(raw);
    PyMem_Free(keys);
    PyMem_Free(hash);
    PyMem_Free(table);
    PyMem_Free(rows);
    PyMem_Free(index);
    PyMem_Free(first);
    PyMem_Free(lines);
    PyBuffer_Release(&rv);
    return result;
}

static PyObject *
Kernel_info(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    const double *c = k->corr;
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:d,s:d,s:i,s:i,s:{s:d,s:d,s:d,s:d,s:d}}", "rows",
                         k->n_rows, "large", k->n_big, "row_bytes", (Py_ssize_t)(k->n_rows * k->nwp * 4), "sets",
                         k->n_sets,
                         "set_bytes", (Py_ssize_t)(k->n_sets * k->nwp * 4), "pinned", k->n_pinned,
                         "pinned_bytes", (Py_ssize_t)(k->n_lines * 64 + k->n_pinned * (k->nwp / 16) * 2),
                         "pinned_lines", k->n_lines, "small_classes",
                         k->n_small_classes, "small_tokens", k->n_small_tokens, "valid_tokens", k->n_valid,
                         "cost_gather_ns", k->cost_gather, "last_plan_ns", k->last_ns, "adapt", k->adapt,
                         "avx2", g_has_avx2 > 0,
                         "corrections", "gather", c[0], "split", c[1], "set", c[2], "clear", c[3], "delta",
                         c[4]);
}

/* apply_bitmask(bits, values, itemsize, pattern): values[i] = pattern (the -inf bit pattern of
 * a float type of `itemsize` bytes) for every i whose bit is 0; values beyond the bits, too */
#define APPLY_BODY(T)                                                                    \
    do {                                                                                 \
        T *v = (T *)vv.buf, pat = (T)pattern;                                            \
        Py_ssize_t covered = n < nbits ? n : nbits;                                      \
        for (Py_ssize_t w = 0; 32 * w < covered; w++) {                                  \
            uint32_t x = ~bits[w];                                                       \
            if (32 * w + 32 > covered)                                                   \
                x &= covered - 32 * w >= 32 ? 0xffffffffu                                \
                                            : (((uint32_t)1 << (covered - 32 * w)) - 1); \
            while (x) {                                                                  \
                v[32 * w + ctz32(x)] = pat;                                              \
                x &= x - 1;                                                              \
            }                                                                            \
        }                                                                                \
        for (Py_ssize_t i = covered; i < n; i++)                                         \
            v[i] = pat;                                                                  \
    } while (0)

static PyObject *
apply_bitmask(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "apply_bitmask(bits, values, itemsize, pattern)");
        return NULL;
    }
    Py_ssize_t itemsize = PyLong_AsSsize_t(args[2]);
    if (itemsize == -1 && PyErr_Occurred())
        return NULL;
    unsigned long long pattern = PyLong_AsUnsignedLongLong(args[3]);
    if (pattern == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (itemsize != 2 && itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "itemsize must be 2, 4 or 8");
        return NULL;
    }
    Py_buffer bv = {0}, vv = {0};
    if (PyObject_GetBuffer(args[0], &bv, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(args[1], &vv, PyBUF_WRITABLE) < 0 ||
        bv.len % 4 != 0 || vv.len % itemsize != 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "bits must be int32 words and values whole items");
        PyBuffer_Release(&bv);
        PyBuffer_Release(&vv);
        return NULL;
    }
    const uint32_t *bits = (const uint32_t *)bv.buf;
    Py_ssize_t nbits = bv.len / 4 * 32, n = vv.len / itemsize;
    if (itemsize == 2)
        APPLY_BODY(uint16_t);
    else if (itemsize == 4)
        APPLY_BODY(uint32_t);
    else
        APPLY_BODY(uint64_t);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&vv);
    Py_RETURN_NONE;
}

/* avx2(on) -> previous: whether the kernel takes its AVX2 paths (row passes, streaming stores, the
 * in-place patch's scan) where the CPU has them; off, the portable ones (tests run both) */
static PyObject *
avx2_paths(PyObject *Py_UNUSED(module), PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    int was = g_has_avx2;
    g_has_avx2 = on ? g_cpu_avx2 : 0;
    return PyBool_FromLong(was);
}

static PyMethodDef module_methods[] = {
    {"avx2", (PyCFunction)avx2_paths, METH_O,
     "avx2(on) -> previous\n\n"
     "Whether the kernel takes its AVX2 paths (row passes, streaming stores, the in-place\n"
     "patch's scan) where the CPU has them (default True; off: the portable ones; the masks\n"
     "do not depend on it). Returns whether it took them before."},
    {"apply_bitmask", (PyCFunction)(void (*)(void))apply_bitmask, METH_FASTCALL,
     "apply_bitmask(bits, values, itemsize, pattern)\n\n"
     "Write `pattern` (an unsigned int: the bit pattern of -inf in a float type of\n"
     "`itemsize` = 2, 4 or 8 bytes) into every item of the writable buffer `values` whose\n"
     "bit in the int32 bitmask `bits` is 0, and into every item past the bits."},
    {"release_cache_pool", (PyCFunction)release_cache_pool, METH_NOARGS,
     "release_cache_pool() -> int\n\n"
     "Free the row-cache blocks that dropped kernels left for the next ones (at most four,\n"
     "about 8 MiB each with MaskExpander's default cache); returns the bytes freed."},
    {"cache_pool_info", (PyCFunction)cache_pool_info, METH_NOARGS,
     "cache_pool_info() -> dict\n\n"
     "The row-cache blocks: 'kept' (left by dropped kernels for the next ones) and their\n"
     "'kept_bytes', 'made' (blocks allocated in this process) and 'huge_page_advised' (of\n"
     "those, the ones the system took advice for transparent huge pages on)."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Kernel_methods[] = {
    {"patch", (PyCFunction)(void (*)(void))Kernel_patch, METH_FASTCALL,
     "patch(class_row, base_class, out, limit_ns=inf) -> bool\n\n"
     "Flip the tokens of the classes where class_row and base_class differ in `out`, which\n"
     "holds base_class's token row (the step of the native engine's row update that patches\n"
     "a row where it lies), when the cost model prices that under limit_ns and it differs in\n"
     "at most 256 small and 64 large classes; else leave `out` as it is.  Returns whether it\n"
     "patched."},
    {"expand", (PyCFunction)(void (*)(void))Kernel_expand, METH_FASTCALL,
     "expand(class_row, out, base_out=None, base_class=None, plan=-1, big=-1) -> int\n\n"
     "Write the token-bitmask row of one class-bitmask row into `out` (int32 buffers of\n"
     "ceil(num_classes/32) and ceil(width/32) words).  With `base_out` / `base_class` (a\n"
     "token row and the class row it was expanded from) the row may be patched from it.\n"
     "`plan` forces 0 gather, 1 split, 2 set, 3 clear, 4 delta, 5 (set or clear,\n"
     "whichever lists fewer small classes); -1 chooses by cost.  `big` forces how plans\n"
     "1-3 treat the large classes: 0 OR the allowed ones' rows, 1 their union AND-NOT the\n"
     "disallowed ones' rows, -1 whichever needs fewer rows.\n"
     "Returns the plan used."},
    {"expand_rows", (PyCFunction)(void (*)(void))Kernel_expand_rows, METH_FASTCALL,
     "expand_rows(class_bitmask, out, indices=None) -> int\n\n"
     "Expand every row of a C-contiguous int32 class bitmask into row indices[i] (int64\n"
     "buffer; default i; an int for a single class row) of the token bitmask `out`,\n"
     "through the LRU row cache (a miss\n"
     "may patch one of the most recently used cached rows).  Returns the last row's plan, 8\n"
     "for a cache hit."},
    {"cache_info", (PyCFunction)Kernel_cache_info, METH_NOARGS,
     "Row-cache counters: hits, misses, evictions, deltas (set_deltas of them from a kept set),\n"
     "unchanged and in_place (rows the C-level expand_row_over left or patched where they\n"
     "lay), not_cached (misses of rows cheap to compute, not cached: see admit_all),\n"
     "entries, capacity."},
    {"clear_cache", (PyCFunction)Kernel_clear_cache, METH_NOARGS,
     "Drop every cached row and reset the counters."},
    {"pin_rows", (PyCFunction)(void (*)(void))Kernel_pin_rows, METH_FASTCALL,
     "pin_rows(class_rows, max_rows, min_ns) -> int\n\n"
     "Keep the token rows of given class rows beside the row cache (not dropped by clear_cache):\n"
     "a miss whose class row is one of them copies its row.  Of the class rows in `class_rows`\n"
     "(an int32 buffer of whole class rows), those whose cheapest plan costs at least `min_ns` ns\n"
     "by the cost model, in their order, each once, at most `max_rows`, replacing the rows\n"
     "pinned so far; each distinct 64-byte line of their token rows is kept once, at most\n"
     "65,536 of them (the rows past the last that fits are not pinned).  Returns how many\n"
     "were pinned."},
    {"keep_sets", (PyCFunction)(void (*)(void))Kernel_keep_sets, METH_FASTCALL,
     "keep_sets(set_start, set_class, max_sets, min_ns) -> int\n\n"
     "Keep the token rows of class sets beside the row cache (not dropped by clear_cache),\n"
     "so that a miss may be patched from the nearest one anchored in its class row: of the\n"
     "sets set_class[set_start[s]:set_start[s + 1]] (int32 buffers), those whose cheapest\n"
     "plan costs at least `min_ns` ns by the cost model, the dearest first, at most\n"
     "`max_sets` (each class set once), replacing the sets kept so far.  Returns how many\n"
     "were kept."},
    {"info", (PyCFunction)Kernel_info, METH_NOARGS,
     "Sizes of the precomputed structures (rows, of which `large` are combined as rows by\n"
     "every plan and the rest only by in-place patches; small classes and\n"
     "tokens), the modelled cost of plan 0, whether AVX2 is used, and the cost-model\n"
     "corrections learnt so far (measured / modelled time per plan)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "formalgram_cfgzip.expand._cexpand.Kernel",
    .tp_doc = PyDoc_STR("Kernel(token_class, num_classes, row_budget, rows=-1, cache_rows=0,\n"
                        "       delta=1, adapt=True, max_rows=-1, admit_all=False)\n\n"
                        "Precomputed class -> token expansion for one int32 token-class array\n"
                        "(negative ids: never allowed).  The largest classes get one precomputed\n"
                        "token row each, within `row_budget` bytes and at most `max_rows` of them\n"
                        "(-1: no bound; `rows` >= 0 forces their number); an LRU cache of\n"
                        "`cache_rows` expanded rows serves expand_rows(); on a miss the nearest of\n"
                        "the most recently used rows is patched never (delta=0), when cheaper (1)\n"
                        "or always (2).  Without admit_all, a row the cost model finds cheap to\n"
                        "compute (under 0.4 ns per token word) is cached the second time it misses,\n"
                        "and never by the C-level expand_row_over."),
    .tp_basicsize = sizeof(Kernel),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "formalgram_cfgzip.expand._cexpand",
    "Class bitmask -> token bitmask expansion in C (see formalgram_cfgzip.expand).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

/* -- the C-level entry (see _cexpand_api.h) -------------------------------------------- */

static int
api_sizes(PyObject *obj, Py_ssize_t *class_words, Py_ssize_t *token_words)
{
    if (!PyObject_TypeCheck(obj, &KernelType) || ((Kernel *)obj)->cls_of == NULL) {
        PyErr_SetString(PyExc_TypeError, "an initialised formalgram_cfgzip.expand._cexpand.Kernel is needed");
        return -1;
    }
    *class_words = ((Kernel *)obj)->cw;
    *token_words = ((Kernel *)obj)->nw;
    return 0;
}

/* A hint (see _cexpand_api.h) is taken when it names this kernel and a slot whose row was not
 * dropped since: the caller vouches that the class row is the one the hint was made for. */
static int
hinted_row(Kernel *k, const uint32_t *class_row, uint32_t *out, CExpandHint *hint, int same_row,
           const uint32_t *base_row, const uint64_t *loaded)
{
    if (hint != NULL && same_row && hint->kernel == k->uid && hint->slot < (uint64_t)k->n_cached &&
        hint->gen == k->c_gen[hint->slot]) {
        int32_t s = (int32_t)hint->slot;
        memcpy(out, k->c_rows + (size_t)s * (size_t)k->nw, (size_t)k->nw * 4);
        if (k->c_head != s) {
            lru_unlink(k, s);
            lru_push_front(k, s);
        }
        k->hits++;
        return PLAN_CACHE_HIT;
    }
    int32_t slot;
    int plan = cached_row_at(k, class_row, out, &slot, base_row, loaded);
    if (hint != NULL) {
        hint->kernel = slot >= 0 ? k->uid : 0;
        hint->slot = slot >= 0 ? (uint64_t)slot : 0;
        hint->gen = slot >= 0 ? k->c_gen[slot] : 0;
    }
    return plan;
}

static int
api_expand_row(PyObject *obj, const uint32_t *class_row, uint32_t *out, CExpandHint *hint, int same_row)
{
    return hinted_row((Kernel *)obj, class_row, out, hint, same_row, NULL, NULL);
}

/* The differing classes of `row` and `base` flipped in `out`, which holds base's tokens, when the
 * cost model prices that under `limit`; returns 1, or 0 having written nothing (the patch would
 * cost more, or differs in more classes than one pass lists).  The patch is priced as
 * bounded_stats prices it (a large class's row pass, a small class at its word's mean size), and
 * one scan of the class words (patch_scan) counts the classes to flip and marks the words where
 * they lie; the flips are listed from those words alone, and follow without the two scans of
 * plan_delta: this is the step of a decoding loop that moves through a bounded string or a
 * format.  The scan does not branch on the words: a scan that went word by word, branching on each
 * differing word and bit, took 60-70 ns of its CPU time even with the words in the caches
 * (timed between fenced time-stamp reads, 691-746 classes), most of the patch's own work. */
#define PATCH_SMALL_MAX 256
#define PATCH_ROWS_MAX 64

/* Whether a patch of nb classes flipped by rows and ns listed ones, of `tokens` tokens in all,
 * is refused: more classes than one pass lists, or priced at `limit` or more.  The scans ask it
 * with tokens 0 (their classes alone, a lower bound), patch_in_place with the marked words' tokens. */
static inline int
patch_refused(const Kernel *k, int64_t nb, int64_t ns, double tokens, double limit)
{
    return ns > PATCH_SMALL_MAX || nb > PATCH_ROWS_MAX ||
           NS_ROW_WORD * (double)k->nw * (double)nb + list_cost((double)ns, tokens) >= limit;
}

/* patch_in_place's scan over the class words: the words where a class to flip lies marked in
 * patch_words (bit w % 64 of word w / 64), the classes flipped by rows and by lists counted into
 * *n_big and *n_small; -1 as soon as there are more than PATCH_SMALL_MAX / PATCH_ROWS_MAX of them
 * or their classes alone (without their tokens) are priced at `limit` or more, else 0. */
static int
patch_scan_generic(const Kernel *k, const uint32_t *row, const uint32_t *base, double limit, int *n_big,
                   int *n_small)
{
    int ns = 0, nb = 0;
    Py_ssize_t cw = k->cw;
    for (Py_ssize_t w0 = 0; w0 < cw; w0 += 64) {
        Py_ssize_t end = w0 + 64 < cw ? w0 + 64 : cw;
        uint64_t marks = 0;
        for (Py_ssize_t w = w0; w < end; w++) {
            uint32_t x = row[w] ^ base[w], xb = x & k->patch_rows[w], xs = x & k->patch_lists[w];
            nb += popcount32(xb);
            ns += popcount32(xs);
            marks |= (uint64_t)((xb | xs) != 0) << (w - w0);
        }
        k->patch_words[w0 / 64] = marks;
        if (patch_refused(k, nb, ns, 0.0, limit))
            return -1;
    }
    *n_big = nb;
    *n_small = ns;
    return 0;
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* the number of bits of each byte of v, by its two nibbles */
__attribute__((target("avx2"))) static inline __m256i
byte_counts(__m256i v)
{
    const __m256i table = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3,
                                           1, 2, 2, 3, 2, 3, 3, 4);
    const __m256i low = _mm256_set1_epi8(0x0f);
    return _mm256_add_epi8(_mm256_shuffle_epi8(table, _mm256_and_si256(v, low)),
                           _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low)));
}

/* patch_scan_generic, 8 class words a step (AVX2): the same marks and counts */
__attribute__((target("avx2"))) static int
patch_scan_avx2(const Kernel *k, const uint32_t *row, const uint32_t *base, double limit, int *n_big,
                int *n_small)
{
    Py_ssize_t cw = k->cw;
    const __m256i zero = _mm256_setzero_si256(), lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i big = zero, small = zero; /* counts in 64-bit lanes */
    uint64_t marks = 0;
    for (Py_ssize_t w = 0; w < cw; w += 8) {
        __m256i a, b;
        if (w + 8 <= cw) {
            a = _mm256_loadu_si256((const __m256i *)(row + w));
            b = _mm256_loadu_si256((const __m256i *)(base + w));
        } else { /* the last words: the rows end at cw */
            __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(cw - w)), lane);
            a = _mm256_maskload_epi32((const int *)(row + w), in);
            b = _mm256_maskload_epi32((const int *)(base + w), in);
        }
        __m256i x = _mm256_xor_si256(a, b);
        __m256i xb = _mm256_and_si256(x, _mm256_loadu_si256((const __m256i *)(k->patch_rows + w)));
        __m256i xs = _mm256_and_si256(x, _mm256_loadu_si256((const __m256i *)(k->patch_lists + w)));
        big = _mm256_add_epi64(big, _mm256_sad_epu8(byte_counts(xb), zero));
        small = _mm256_add_epi64(small, _mm256_sad_epu8(byte_counts(xs), zero));
        __m256i same = _mm256_cmpeq_epi32(_mm256_or_si256(xb, xs), zero);
        marks |= (uint64_t)(~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(same)) & 0xffu) << (w & 63);
        if ((w & 63) == 56 || w + 8 >= cw) { /* 64 words done, or all: marked, counted and priced */
            k->patch_words[w / 64] = marks;
            marks = 0;
            uint64_t nbs[4], nss[4];
            _mm256_storeu_si256((__m256i *)nbs, big);
            _mm256_storeu_si256((__m256i *)nss, small);
            uint64_t nb = nbs[0] + nbs[1] + nbs[2] + nbs[3], ns = nss[0] + nss[1] + nss[2] + nss[3];
            if (patch_refused(k, (int64_t)nb, (int64_t)ns, 0.0, limit))
                return -1;
            *n_big = (int)nb;
            *n_small = (int)ns;
        }
    }
    if (cw == 0)
        *n_big = *n_small = 0;
    return 0;
}

static int
patch_scan(const Kernel *k, const uint32_t *row, const uint32_t *base, double limit, int *n_big, int *n_small)
{
    return g_has_avx2 ? patch_scan_avx2(k, row, base, limit, n_big, n_small)
                      : patch_scan_generic(k, row, base, limit, n_big, n_small);
}
#else
#define patch_scan patch_scan_generic
#endif

static int
patch_in_place(Kernel *k, const uint32_t *row, const uint32_t *base, uint32_t *out, double limit)
{
    uint32_t ids[PATCH_SMALL_MAX + 1], big[PATCH_ROWS_MAX];
    int nb = 0, ns = 0;
    if (patch_scan(k, row, base, limit, &nb, &ns) < 0)
        return 0;
    /* the classes of the marked words, and their tokens at each word's mean size: the price */
    int a = 0, b = 0;
    double tokens = 0.0;
    for (Py_ssize_t g = 0; g * 64 < k->cw; g++)
        for (uint64_t m = k->patch_words[g]; m; m &= m - 1) {
            Py_ssize_t w = 64 * g + (Py_ssize_t)__builtin_ctzll(m);
            uint32_t x = row[w] ^ base[w], at = (uint32_t)(32 * w);
            uint32_t xs = x & k->patch_lists[w], xb = x & k->patch_rows[w];
            int before = a;
            /* most marked words flip one small class: it is written whether there or not */
            ids[a] = at + (uint32_t)ctz32(xs | 0x80000000u);
            a += xs != 0;
            for (xs &= xs - 1; xs; xs &= xs - 1)
                ids[a++] = at + (uint32_t)ctz32(xs);
            for (; xb; xb &= xb - 1)
                big[b++] = at + (uint32_t)ctz32(xb);
            tokens += (double)(a - before) * (double)k->patch_mean[w];
        }
    if (patch_refused(k, nb, ns, tokens, limit))
        return 0;
    for (int i = 0; i < nb; i += ROWS_PER_PASS) {
        int n = nb - i < ROWS_PER_PASS ? nb - i : ROWS_PER_PASS;
        for (int j = 0; j < n; j++)
            k->pass[j] = k->rows + (size_t)k->row_of[big[i + j]] * (size_t)k->nwp;
        rows_pass(out, NULL, k->pass, n, k->nw, OP_XOR);
    }
    for (int i = 0; i < ns; i += SMALL_BATCH)
        apply_batch(k, ids + i, ns - i < SMALL_BATCH ? ns - i : SMALL_BATCH, OP_XOR, out);
    return 1;
}

/* The output row already holds the tokens of `base_row`: nothing is written when the class rows
 * are equal; the differing classes are flipped where the row lies when that costs less by the cost
 * model than copying a whole row (the least a row from the cache costs); otherwise the row comes
 * from the cache as in api_expand_row, or on a miss by the cheapest plan, patching in place among
 * them. */
static int
api_expand_row_over(PyObject *obj, const uint32_t *class_row, uint32_t *out, const uint32_t *base_row,
                    CExpandHint *hint, int same_row)
{
    Kernel *k = (Kernel *)obj;
    copy_key(k, class_row); /* the class row without the bits past num_classes; hashed only for the cache */
    Py_ssize_t last = k->cw - 1;
    if (memcmp(k->c_key, base_row, (size_t)last * 4) == 0 && k->c_key[last] == (base_row[last] & last_word_mask(k))) {
        k->unchanged++;
        return PLAN_UNCHANGED;
    }
    if (patch_in_place(k, k->c_key, base_row, out, NS_INIT_WORD * (double)k->nw)) {
        k->in_place++;
        return PLAN_DELTA;
    }
    uint64_t h = key_hash(k);
    return hinted_row(k, class_row, out, hint, same_row, base_row, &h);
}

static CExpandAPI c_api = {CEXPAND_API_VERSION, api_sizes, api_expand_row, api_expand_row_over};

PyMODINIT_FUNC
PyInit__cexpand(void)
{
    cpu_features();
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(&c_api, CEXPAND_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
