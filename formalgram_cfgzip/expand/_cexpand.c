/*
 * formalgram_cfgzip.expand._cexpand -- class bitmask -> token bitmask expansion in C.
 *
 * The compiled kernel of formalgram_cfgzip.expand (built with the mypyc-compiled install;
 * the pure-Python build uses expand/_numpy_kernel.py; expand/_c_kernel.py wraps this
 * module for MaskExpander, and expand/plans.py names its plan codes).  One Kernel holds,
 * for one token -> class map, every precomputed structure; Kernel.expand() writes one
 * token-bitmask row (XGrammar's layout: int32 words, bit j of word w is token 32*w + j,
 * pad bits zero) from one class-bitmask row, choosing per row the cheapest of seven plans
 * by a cost model (nanoseconds, measured on the development machine):
 *
 *   0 gather   every token reads its class's allowed byte; 32 bytes make one word
 *              (four independent accumulators keep the OR chain short);
 *   1 split    the largest ("head") classes, 8 at a time, have subset tables (the 256
 *              unions of their token bitmasks): one vector OR per group; the remaining
 *              ("tail") tokens are gathered one by one, word by word;
 *   2 set      the allowed classes are listed and their tokens set (few allowed tokens);
 *   3 clear    all valid tokens, minus the tokens of the listed disallowed classes;
 *   4 delta    a caller-provided row for another class row, with the tokens of every
 *              class whose bit differs flipped (a token's bit is its class's bit);
 *   6, 7       the subset tables for the head classes, then plan 2 or 3 over the tail
 *              classes only (few allowed, or few disallowed, tail classes).
 *
 * Plans 0 and 1 have a fixed cost per kernel.  The listed plans (2-4, 6, 7) are tried
 * first when a lower bound on their cost (from the number of listed classes) is under
 * it, cheapest bound first, and each is given up as soon as its running estimate passes
 * the fixed plan's; so a row never costs much more than about twice the cheaper of
 * plans 0 and 1, and often far less.
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
#else
#define ctz32(x) __builtin_ctz(x)
#define popcount32(x) __builtin_popcount(x)
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

#define GROUP_BITS 8
#define GROUP_ROWS 256

/* Cost model (ns): least-squares fits of forced-plan timings (bench/expand_bench.py rows
 * over real token-class arrays of llama3 / o200k_harmony and flat synthetic ones) on the
 * 2-core AMD EPYC development VM; median relative error 1-2 % for plans 0 and 1.  The listed
 * plans' per-class and per-token constants are fits of forced plans 2, 3, 6 and 7 on the class
 * rows of real decoding walks (SynCode SQL and Go under llama3: 1.1-1.9 ns per class,
 * 0.55-0.64 ns per token, also on random rows over the same classes; bench/expand_bench.py
 * --real-rows); above 16k classes the per-class index leaves L1 and a class costs more. */
#define NS_FIXED 550.0        /* call, unpacking overhead of plans 0 and 1 */
#define NS_UNPACK_CLASS 0.1   /* class bits -> allowed bytes, per class */
#define NS_GATHER_TOKEN 0.213 /* plan 0, per logit index */
#define NS_SPLIT_WORD 0.84    /* plan 1, per word of the row (tail loop) */
#define NS_OR_WORD 0.1        /* plan 1, one word of one subset-table row (tables may be cold) */
#define NS_TAIL_TOKEN 0.47    /* plan 1, per tail token */
#define NS_LIST_FIXED 230.0   /* plans 2-4, call */
#define NS_COPY_WORD 0.05     /* plans 2-7, memset / memcpy of one word */
#define NS_OR_ROW_FIXED 100.0 /* plans 6, 7: reading the head classes' table codes */
#define NS_LIST_CLASS 1.5     /* plans 2-4, per listed class (index in L1/L2) */
#define NS_LIST_CLASS_BIG 9.0 /* ... when the per-class index outgrows L1 (> 16k classes) */
#define NS_LIST_TOKEN 0.6     /* plans 2-4, per listed token */
#define LIST_SAMPLE 64        /* classes listed before the row estimate is rescaled (apply_listed) */

typedef struct {
    PyObject_HEAD
    Py_ssize_t width;       /* logit indices */
    Py_ssize_t num_classes; /* C */
    Py_ssize_t nw;          /* words of a token row */
    Py_ssize_t cw;          /* words of a class row */
    int wide;               /* class ids stored as uint32 (else uint16) */
    void *cls_of;           /* nw*32 class ids; C for never-allowed and pad indices */
    uint8_t *allowed;       /* cw*32 + 8 bytes: 1 when the class is allowed this row */
    uint32_t *csr_start;    /* C + 1 offsets into csr_tok */
    uint32_t *csr_tok;      /* valid tokens, grouped by class, ascending in each */
    uint32_t *valid;        /* nw words: bits of every valid token */
    Py_ssize_t groups;
    int32_t *members;       /* groups*8 class ids, -1 for padding */
    uint32_t *tables;       /* groups*256 rows of nw words */
    uint8_t *codes;         /* groups bytes of scratch */
    uint32_t *tail_start;   /* nw + 1 offsets into tail_bit / tail_cls */
    uint32_t *tail_classes; /* cw words: bit c set for a class without a subset table */
    uint32_t *tail_union;   /* nw words: bits of every tail token */
    Py_ssize_t n_tail_classes;
    float *tail_mean;       /* cw floats: mean size of the tail classes of each class word */
    uint8_t *tail_bit;
    void *tail_cls;
    Py_ssize_t n_tail;
    Py_ssize_t n_valid;
    double cost_gather;
    double cost_split;
    double ns_list_class;   /* NS_LIST_CLASS or NS_LIST_CLASS_BIG */
    uint64_t spread[256];   /* byte -> 8 bytes of 0/1 (little-endian bit order) */
    /* LRU cache of expanded rows, keyed by the class row (bits past num_classes cleared) */
    Py_ssize_t cap;         /* rows; 0: no cache */
    Py_ssize_t n_cached;
    int delta_mode;         /* 0 never patch the MRU row, 1 when the cost model says so, 2 always */
    /* self-correction of the cost model (see learn): per plan, measured / modelled time */
    int adapt;
    double corr[8];
    uint64_t n_auto;        /* rows whose plan was chosen */
    uint32_t *c_keys;       /* cap * cw */
    uint32_t *c_rows;       /* cap * nw */
    uint64_t *c_hash;       /* cap */
    int32_t *c_prev, *c_next; /* LRU list: head = most recently used */
    int32_t c_head, c_tail;
    int32_t *c_table;       /* open addressing (linear probing), tsize slots, -1 empty */
    Py_ssize_t c_tmask;
    uint32_t *c_key;        /* cw words of scratch: the masked key being looked up */
    long long hits, misses, evictions, deltas;
} Kernel;

static void
Kernel_dealloc(Kernel *self)
{
    PyMem_Free(self->cls_of);
    PyMem_Free(self->allowed);
    PyMem_Free(self->csr_start);
    PyMem_Free(self->csr_tok);
    PyMem_Free(self->valid);
    PyMem_Free(self->members);
    PyMem_Free(self->tables);
    PyMem_Free(self->codes);
    PyMem_Free(self->tail_start);
    PyMem_Free(self->tail_classes);
    PyMem_Free(self->tail_union);
    PyMem_Free(self->tail_mean);
    PyMem_Free(self->c_keys);
    PyMem_Free(self->c_rows);
    PyMem_Free(self->c_hash);
    PyMem_Free(self->c_prev);
    PyMem_Free(self->c_next);
    PyMem_Free(self->c_table);
    PyMem_Free(self->c_key);
    PyMem_Free(self->tail_bit);
    PyMem_Free(self->tail_cls);
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

static int
Kernel_init(Kernel *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"token_class", "num_classes", "table_budget", "groups", "cache_rows",
                             "delta", "adapt", NULL};
    Py_buffer tc;
    Py_ssize_t num_classes, budget, force_groups = -1, cache_rows = 0;
    int delta_mode = 1, adapt = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*nn|nnip", kwlist, &tc, &num_classes, &budget,
                                     &force_groups, &cache_rows, &delta_mode, &adapt))
        return -1;
    if (self->cls_of != NULL) {
        PyBuffer_Release(&tc);
        PyErr_SetString(PyExc_RuntimeError, "Kernel is already initialised");
        return -1;
    }
    int rc = -1;
    uint32_t *sizes = NULL, *order = NULL, *fill = NULL, *crow = NULL;
    uint8_t *is_head = NULL;
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
        PyErr_SetString(PyExc_ValueError, "table_budget and cache_rows must be >= 0");
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
    self->wide = num_classes >= 65535;
    Py_ssize_t nw = self->nw, C = num_classes;
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
    self->allowed = PyMem_Calloc((size_t)self->cw * 32 + 8, 1);
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
    /* subset tables for the largest classes */
    order = PyMem_Malloc((size_t)C * sizeof(uint32_t));
    is_head = PyMem_Calloc((size_t)C + 1, 1);
    if (!order || !is_head) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < C; c++)
        order[c] = (uint32_t)c;
    g_sort_sizes = sizes;
    qsort(order, (size_t)C, sizeof(uint32_t), by_size_desc);
    Py_ssize_t table_bytes = (Py_ssize_t)GROUP_ROWS * nw * 4;
    Py_ssize_t max_groups = budget / table_bytes;
    Py_ssize_t groups = 0;
    double or_row = NS_OR_WORD * (double)nw;
    while (groups < max_groups && groups * GROUP_BITS < C) {
        double part = 0;
        for (Py_ssize_t j = groups * GROUP_BITS; j < (groups + 1) * GROUP_BITS && j < C; j++)
            part += sizes[order[j]];
        if (part * NS_TAIL_TOKEN < or_row)
            break;
        groups++;
    }
    if (force_groups >= 0)
        groups = force_groups < (C + GROUP_BITS - 1) / GROUP_BITS ? force_groups
                                                                 : (C + GROUP_BITS - 1) / GROUP_BITS;
    self->groups = groups;
    self->members = PyMem_Malloc(((size_t)groups * GROUP_BITS + 1) * sizeof(int32_t));
    self->codes = PyMem_Calloc((size_t)groups + 1, 1);
    self->tables = PyMem_Calloc((size_t)groups * GROUP_ROWS * (size_t)nw + 1, sizeof(uint32_t));
    if (!self->members || !self->codes || !self->tables) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < groups * GROUP_BITS; j++) {
        int32_t c = j < C ? (int32_t)order[j] : -1;
        self->members[j] = c;
        if (c >= 0)
            is_head[c] = 1;
    }
    crow = PyMem_Malloc((size_t)nw * sizeof(uint32_t));
    if (!crow) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t g = 0; g < groups; g++) {
        /* rows 2^j .. 2^(j+1) - 1 are rows 0 .. 2^j - 1 with member j's tokens added */
        uint32_t *t = self->tables + (size_t)g * GROUP_ROWS * (size_t)nw;
        for (int j = 0; j < GROUP_BITS; j++) {
            int32_t c = self->members[g * GROUP_BITS + j];
            memset(crow, 0, (size_t)nw * sizeof(uint32_t));
            if (c >= 0)
                for (uint32_t q = self->csr_start[c]; q < self->csr_start[c + 1]; q++)
                    crow[self->csr_tok[q] >> 5] |= (uint32_t)1 << (self->csr_tok[q] & 31);
            for (uint32_t r = 0; r < (1u << j); r++) {
                const uint32_t *lo = t + (size_t)r * (size_t)nw;
                uint32_t *hi = t + ((size_t)r + ((size_t)1 << j)) * (size_t)nw;
                for (Py_ssize_t w = 0; w < nw; w++)
                    hi[w] = lo[w] | crow[w];
            }
        }
    }
    /* tail: the tokens of the other classes, word by word */
    Py_ssize_t n_tail = 0;
    for (Py_ssize_t i = 0; i < width; i++) {
        uint32_t c = cls_at(self, i);
        if (c < (uint32_t)C && !is_head[c])
            n_tail++;
    }
    self->n_tail = n_tail;
    self->tail_start = PyMem_Malloc(((size_t)nw + 1) * sizeof(uint32_t));
    self->tail_bit = PyMem_Malloc((size_t)n_tail + 1);
    self->tail_cls = PyMem_Malloc(((size_t)n_tail + 1) * (self->wide ? 4 : 2));
    if (!self->tail_start || !self->tail_bit || !self->tail_cls) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t q = 0;
    for (Py_ssize_t w = 0; w < nw; w++) {
        self->tail_start[w] = (uint32_t)q;
        for (Py_ssize_t i = 32 * w; i < 32 * w + 32 && i < width; i++) {
            uint32_t c = cls_at(self, i);
            if (c < (uint32_t)C && !is_head[c]) {
                self->tail_bit[q] = (uint8_t)(i & 31);
                if (self->wide)
                    ((uint32_t *)self->tail_cls)[q] = c;
                else
                    ((uint16_t *)self->tail_cls)[q] = (uint16_t)c;
                q++;
            }
        }
    }
    self->tail_start[nw] = (uint32_t)q;
    self->tail_classes = PyMem_Calloc((size_t)self->cw, sizeof(uint32_t));
    self->tail_union = PyMem_Calloc((size_t)nw, sizeof(uint32_t));
    if (!self->tail_classes || !self->tail_union) {
        PyErr_NoMemory();
        goto done;
    }
    self->tail_mean = PyMem_Calloc((size_t)self->cw, sizeof(float));
    if (!self->tail_mean) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t w = 0; w < self->cw; w++) {
        double tok = 0;
        int n = 0;
        for (Py_ssize_t c = 32 * w; c < 32 * w + 32 && c < C; c++)
            if (!is_head[c]) {
                self->tail_classes[w] |= (uint32_t)1 << (c & 31);
                tok += sizes[c];
                n++;
            }
        self->n_tail_classes += n;
        self->tail_mean[w] = n ? (float)(tok / n) : 0.0f;
    }
    for (Py_ssize_t i = 0; i < width; i++) {
        uint32_t c = cls_at(self, i);
        if (c < (uint32_t)C && !is_head[c])
            self->tail_union[i >> 5] |= (uint32_t)1 << (i & 31);
    }
    self->ns_list_class = C > 16384 ? NS_LIST_CLASS_BIG : NS_LIST_CLASS;
    double unpack = NS_FIXED + NS_UNPACK_CLASS * (double)C;
    self->cost_gather = unpack + NS_GATHER_TOKEN * (double)(nw * 32);
    self->cost_split = groups ? unpack + NS_SPLIT_WORD * (double)nw + (double)groups * or_row +
                                    NS_TAIL_TOKEN * (double)n_tail
                              : self->cost_gather * 2 + 1.0;
    /* row cache */
    self->delta_mode = delta_mode;
    self->adapt = adapt;
    for (int p = 0; p < 8; p++)
        self->corr[p] = 1.0;
    self->c_head = self->c_tail = -1;
    self->c_key = PyMem_Calloc((size_t)self->cw + 1, sizeof(uint32_t));
    if (!self->c_key) {
        PyErr_NoMemory();
        goto done;
    }
    if (cache_rows > 0) {
        Py_ssize_t tsize = 4;
        while (tsize < 2 * cache_rows)
            tsize *= 2;
        self->c_keys = PyMem_Malloc((size_t)cache_rows * (size_t)self->cw * sizeof(uint32_t));
        self->c_rows = PyMem_Malloc((size_t)cache_rows * (size_t)nw * sizeof(uint32_t));
        self->c_hash = PyMem_Malloc((size_t)cache_rows * sizeof(uint64_t));
        self->c_prev = PyMem_Malloc((size_t)cache_rows * sizeof(int32_t));
        self->c_next = PyMem_Malloc((size_t)cache_rows * sizeof(int32_t));
        self->c_table = PyMem_Malloc((size_t)tsize * sizeof(int32_t));
        if (!self->c_keys || !self->c_rows || !self->c_hash || !self->c_prev || !self->c_next ||
            !self->c_table) {
            PyErr_NoMemory();
            goto done;
        }
        memset(self->c_table, 0xff, (size_t)tsize * sizeof(int32_t));
        self->c_tmask = tsize - 1;
        self->cap = cache_rows;
    }
    rc = 0;
done:
    PyMem_Free(sizes);
    PyMem_Free(order);
    PyMem_Free(fill);
    PyMem_Free(is_head);
    PyMem_Free(crow);
    PyBuffer_Release(&tc);
    return rc;
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

static void
plan_gather(Kernel *k, uint32_t *out)
{
    const uint8_t *a = k->allowed;
    if (k->wide)
        GATHER_BODY(uint32_t);
    else
        GATHER_BODY(uint16_t);
}

/* Tail tokens word by word: the OR of a word's tail bits, then one store. */
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

/* out = the union of the subset-table rows of the head classes allowed by `row`; returns
 * the number of tables read */
static Py_ssize_t
head_rows(Kernel *k, const uint32_t *row, uint32_t *out)
{
    Py_ssize_t nw = k->nw, used = 0;
    for (Py_ssize_t g = 0; g < k->groups; g++) {
        unsigned code = 0;
        for (int j = 0; j < GROUP_BITS; j++) {
            int32_t c = k->members[g * GROUP_BITS + j];
            if (c >= 0 && (row[c >> 5] >> (c & 31) & 1))
                code |= 1u << j;
        }
        if (!code)
            continue;
        const uint32_t *t = k->tables + ((size_t)g * GROUP_ROWS + code) * (size_t)nw;
        if (!used) {
            memcpy(out, t, (size_t)nw * 4);
        } else {
            for (Py_ssize_t w = 0; w < nw; w++)
                out[w] |= t[w];
        }
        used++;
    }
    if (!used)
        memset(out, 0, (size_t)nw * 4);
    return used;
}

static void
plan_split(Kernel *k, const uint32_t *row, uint32_t *out)
{
    head_rows(k, row, out);
    if (k->n_tail == 0)
        return;
    const uint8_t *a = k->allowed;
    const uint8_t *bit = k->tail_bit;
    const uint32_t *ts = k->tail_start;
    if (k->wide)
        TAIL_BODY(uint32_t);
    else
        TAIL_BODY(uint16_t);
}

/* Word w of a listed class set, by mode: 0 the allowed classes (row), 1 the disallowed ones
 * (~row), 2 the classes that differ from another row (row ^ other), 3 and 4 as 0 and 1 but
 * tail classes only (those without a subset table).  Bits past num_classes are cleared. */
static inline uint32_t
listed_word(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode, Py_ssize_t w)
{
    uint32_t x;
    switch (mode) {
    case 0:
        x = row[w];
        break;
    case 1:
        x = ~row[w];
        break;
    case 2:
        x = row[w] ^ other[w];
        break;
    case 3:
        x = row[w] & k->tail_classes[w];
        break;
    default:
        x = ~row[w] & k->tail_classes[w];
        break;
    }
    if (w == k->cw - 1 && (k->num_classes & 31))
        x &= ((uint32_t)1 << (k->num_classes & 31)) - 1;
    return x;
}

/* The listed set of `mode` (see listed_word): its classes, its tail classes, and the tokens
 * of those tail classes estimated at the mean class size of each class word (exact in sum
 * over all the classes of a word; a word holds 32 neighbouring class ids, so this follows
 * any drift of class size with class id, as in classes numbered by size). */
typedef struct {
    Py_ssize_t n, n_tail;
    double tail_tokens;
} ListedStats;

#define STATS_BODY                                                                       \
    ListedStats st = {0, 0, 0.0};                                                        \
    for (Py_ssize_t w = 0; w < k->cw; w++) {                                             \
        uint32_t x = listed_word(k, row, other, mode, w);                                \
        if (!x)                                                                          \
            continue;                                                                    \
        int nt = popcount32(x & k->tail_classes[w]);                                     \
        st.n += popcount32(x);                                                           \
        st.n_tail += nt;                                                                 \
        st.tail_tokens += (double)nt * (double)k->tail_mean[w];                          \
    }                                                                                    \
    return st;

static ListedStats
listed_stats_generic(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode)
{
    STATS_BODY
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* Without -mpopcnt, __builtin_popcount is a library call; this copy may use the
 * instruction and is taken only when the CPU has it. */
__attribute__((target("popcnt"))) static ListedStats
listed_stats_popcnt(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode)
{
    STATS_BODY
}

static ListedStats
listed_stats(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode)
{
    static int has_popcnt = -1;
    if (has_popcnt < 0) {
        __builtin_cpu_init();
        has_popcnt = __builtin_cpu_supports("popcnt") ? 1 : 0;
    }
    return has_popcnt ? listed_stats_popcnt(k, row, other, mode)
                      : listed_stats_generic(k, row, other, mode);
}
#else
#define listed_stats listed_stats_generic
#endif

/* Set (op 0), clear (1) or flip (2) in `out` the bits of the tokens of the listed classes
 * of `mode` (n_list of them, est_tokens tokens expected).  Returns 0, or -1 once the running
 * cost estimate passes `bound` ns: `out` is then partly written and the caller computes the
 * row by another plan.  From LIST_SAMPLE classes on, the tokens met so far against those
 * expected so far (tail classes at their word's mean size, head classes exactly) also
 * rescale the whole row's estimate, and the row is given up when that passes 1.25 * bound;
 * so a row whose classes are larger than expected is left early, not at the bound. */
static int
apply_listed(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode, int op,
             uint32_t *out, Py_ssize_t n_list, double est_tokens, double bound, double *model)
{
    double fixed = NS_LIST_FIXED + NS_COPY_WORD * (double)k->nw;
    Py_ssize_t classes = 0;
    uint64_t tokens = 0;
    double expected = 0.0;
#define RUNNING (fixed + k->ns_list_class * (double)classes + NS_LIST_TOKEN * (double)tokens)
    for (Py_ssize_t w = 0; w < k->cw; w++) {
        uint32_t x = listed_word(k, row, other, mode, w);
        if (!x)
            continue;
        uint32_t head = x & ~k->tail_classes[w];
        expected += (double)popcount32(x & k->tail_classes[w]) * (double)k->tail_mean[w];
        while (x) {
            int bit = ctz32(x);
            uint32_t c = (uint32_t)(32 * w) + (uint32_t)bit;
            x &= x - 1;
            const uint32_t *tok = k->csr_tok + k->csr_start[c];
            const uint32_t *end = k->csr_tok + k->csr_start[c + 1];
            uint64_t size = (uint64_t)(end - tok);
            /* checked before the class is written: a huge class is never started */
            if (RUNNING + k->ns_list_class + NS_LIST_TOKEN * (double)size >= bound) {
                *model = RUNNING;
                return -1;
            }
            classes++;
            tokens += size;
            if (head >> bit & 1)
                expected += (double)size;
            if (op == 0)
                for (; tok < end; tok++)
                    out[*tok >> 5] |= (uint32_t)1 << (*tok & 31);
            else if (op == 1)
                for (; tok < end; tok++)
                    out[*tok >> 5] &= ~((uint32_t)1 << (*tok & 31));
            else
                for (; tok < end; tok++)
                    out[*tok >> 5] ^= (uint32_t)1 << (*tok & 31);
        }
        if (classes >= LIST_SAMPLE && expected > 0.0 &&
            fixed + k->ns_list_class * (double)n_list +
                    NS_LIST_TOKEN * est_tokens * ((double)tokens / expected) >
                1.25 * bound) {
            *model = RUNNING;
            return -1;
        }
    }
    *model = RUNNING;
    return 0;
#undef RUNNING
}

/* plan 2, 3, 4, 6 or 7 within `bound` ns: 0, or -1 when given up (out partly written);
 * *model is the modelled cost of the work done */
static int
plan_listed(Kernel *k, int plan, const uint32_t *row, const uint32_t *base_cls,
            const uint32_t *base_out, uint32_t *out, Py_ssize_t n_list, double est_tokens, double bound,
            double *model)
{
    Py_ssize_t nw = k->nw;
    double tables = 0.0;
    int mode = 3, op = 0, rc;
    switch (plan) {
    case 2:
        memset(out, 0, (size_t)nw * 4);
        return apply_listed(k, row, NULL, 0, 0, out, n_list, est_tokens, bound, model);
    case 3:
        memcpy(out, k->valid, (size_t)nw * 4);
        return apply_listed(k, row, NULL, 1, 1, out, n_list, est_tokens, bound, model);
    case 4:
        if (out != base_out)
            memmove(out, base_out, (size_t)nw * 4);
        return apply_listed(k, row, base_cls, 2, 2, out, n_list, est_tokens, bound, model);
    default: /* 6, 7: the head classes' table rows, then the tail classes set (or cleared) */
        tables = NS_OR_ROW_FIXED + (double)head_rows(k, row, out) * NS_OR_WORD * (double)nw;
        if (plan == 7) {
            for (Py_ssize_t w = 0; w < nw; w++)
                out[w] |= k->tail_union[w];
            mode = 4;
            op = 1;
        }
        break;
    }
    rc = apply_listed(k, row, NULL, mode, op, out, n_list, est_tokens, bound - tables, model);
    *model += tables;
    return rc;
}

/* classes of the listed set of `mode` among the head classes: count and tokens */
static void
head_listed(const Kernel *k, const uint32_t *row, const uint32_t *other, int mode, Py_ssize_t *n,
            double *tokens)
{
    *n = 0;
    *tokens = 0;
    for (Py_ssize_t j = 0; j < k->groups * GROUP_BITS; j++) {
        int32_t c = k->members[j];
        if (c < 0)
            continue;
        if (listed_word(k, row, other, mode, c >> 5) >> (c & 31) & 1) {
            (*n)++;
            *tokens += (double)(k->csr_start[c + 1] - k->csr_start[c]);
        }
    }
}

/* Self-correction of the cost model.  Its constants were fitted with warm caches on one
 * machine; in a decoding loop the engine's own fill runs between two rows and may evict
 * the kernel's tables (a plan that reads them at random suffers more than the streaming
 * gather), and other CPUs differ.  So every row whose plan is chosen is timed, and
 * corr[plan], a running mean (weight 1/8) of measured over modelled time, scales that
 * plan's estimates; given-up attempts count with the modelled cost of the work they did.
 * One row in 32 is chosen by the uncorrected model, so that a plan the corrections rule
 * out is measured again.  The rows themselves never depend on the choice. */
static void
learn(Kernel *k, int plan, double ns, double model)
{
    if (!k->adapt || model <= 0.0)
        return;
    double r = ns / model;
    r = r < 0.2 ? 0.2 : r > 5.0 ? 5.0 : r;
    k->corr[plan] += 0.125 * (r - k->corr[plan]);
}

/* Plan -1: the cheaper fixed plan (0 or 1), unless a listed plan does better.  Each listed
 * candidate gets an estimate: its listed classes counted exactly, the tokens of the head
 * classes among them exactly and those of the tail classes at their class word's mean size
 * (see ListedStats); all estimates are scaled by the plans' corrections (see learn).
 * Candidates under the fixed plan's cost are tried cheapest first, each given up once its
 * running cost passes min(fixed cost, 2 * estimate + 1 µs).  Returns the plan used (rows
 * of plans 0 and 1 are left to the caller). */
static int
choose_and_list(Kernel *k, const uint32_t *row, const uint32_t *base_cls, const uint32_t *base_out,
                uint32_t *out)
{
    int explore = !k->adapt || (k->n_auto++ & 31) == 0;
    double cg = k->cost_gather * (explore ? 1.0 : k->corr[0]);
    double cs = k->cost_split * (explore ? 1.0 : k->corr[1]);
    int fixed_plan = cs < cg ? 1 : 0;
    double best = fixed_plan ? cs : cg;
    double lfixed = NS_LIST_FIXED + NS_COPY_WORD * (double)k->nw;
    int tries[3], order[3];
    Py_ssize_t counts[3];
    double est[3], toks[3], adj[3];
    int n_try = 0;
    Py_ssize_t n_head;
    double head_tok;
    /* plan 2 or 3: every class */
    ListedStats all = listed_stats(k, row, NULL, 0);
    int mode = 2 * all.n <= k->num_classes ? 0 : 1;
    head_listed(k, row, NULL, mode, &n_head, &head_tok);
    tries[n_try] = 2 + mode;
    counts[n_try] = mode == 0 ? all.n : k->num_classes - all.n;
    toks[n_try] = head_tok + (mode == 0 ? all.tail_tokens : (double)k->n_tail - all.tail_tokens);
    n_try++;
    if (base_cls != NULL) { /* plan 4 */
        ListedStats flip = listed_stats(k, row, base_cls, 2);
        head_listed(k, row, base_cls, 2, &n_head, &head_tok);
        tries[n_try] = 4;
        counts[n_try] = flip.n;
        toks[n_try] = head_tok + flip.tail_tokens;
        n_try++;
    }
    if (k->groups && k->n_tail_classes) { /* plan 6 or 7 */
        int setm = 2 * all.n_tail <= k->n_tail_classes;
        tries[n_try] = setm ? 6 : 7;
        counts[n_try] = setm ? all.n_tail : k->n_tail_classes - all.n_tail;
        toks[n_try] = setm ? all.tail_tokens : (double)k->n_tail - all.tail_tokens;
        n_try++;
    }
    double tables = NS_OR_ROW_FIXED + (double)k->groups * NS_OR_WORD * (double)k->nw;
    for (int i = 0; i < n_try; i++) {
        est[i] = lfixed + (tries[i] >= 6 ? tables : 0.0) + k->ns_list_class * (double)counts[i] +
                 NS_LIST_TOKEN * toks[i];
        adj[i] = est[i] * (explore ? 1.0 : k->corr[tries[i]]);
        order[i] = i;
    }
    for (int i = 1; i < n_try; i++) /* insertion sort by corrected estimate */
        for (int j = i; j > 0 && adj[order[j]] < adj[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (int r = 0; r < n_try && adj[order[r]] < best; r++) {
        int i = order[r];
        double c = explore ? 1.0 : k->corr[tries[i]];
        double bound = 2 * est[i] + 1000.0 < best / c ? 2 * est[i] + 1000.0 : best / c;
        double model = 0.0, t0 = k->adapt ? now_ns() : 0.0;
        int rc = plan_listed(k, tries[i], row, base_cls, base_out, out, counts[i], toks[i], bound, &model);
        if (k->adapt)
            learn(k, tries[i], now_ns() - t0, model);
        if (rc == 0)
            return tries[i];
    }
    return fixed_plan;
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

/* Kernel.expand(class_row, out, base_out=None, base_class=None, plan=-1) -> plan used */
/* One row by plan `force` (-1: chosen by cost); base_cls / base_out may be NULL. */
static int
compute_row(Kernel *k, const uint32_t *row, const uint32_t *base_cls, const uint32_t *base_out,
            uint32_t *out, int force)
{
    int plan = force;
    if (plan == 5) { /* the listed plan with fewer classes: set or clear */
        plan = 2 * listed_stats(k, row, NULL, 0).n <= k->num_classes ? 2 : 3;
    }
    int chosen = plan < 0;
    double model;
    if (plan >= 2) {
        plan_listed(k, plan, row, base_cls, base_out, out, 0, 0.0, HUGE_VAL, &model);
    } else if (chosen) {
        plan = choose_and_list(k, row, base_cls, base_out, out);
    }
    if (plan <= 1) {
        double t0 = chosen && k->adapt ? now_ns() : 0.0;
        unpack_row(k, row);
        if (plan == 0)
            plan_gather(k, out);
        else
            plan_split(k, row, out);
        if (chosen && k->adapt)
            learn(k, plan, now_ns() - t0, plan == 0 ? k->cost_gather : k->cost_split);
    }
    return plan;
}

/* -- row cache ---------------------------------------------------------------------- */

/* c_key = row with the bits past num_classes cleared; returns its hash */
static uint64_t
load_key(Kernel *k, const uint32_t *row)
{
    uint64_t h = 0x243f6a8885a308d3ULL;
    for (Py_ssize_t w = 0; w < k->cw; w++) {
        uint32_t x = listed_word(k, row, NULL, 0, w);
        k->c_key[w] = x;
        h = (h ^ x) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    return h;
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

#define PLAN_CACHE_HIT 8

/* One row through the cache; returns the plan (PLAN_CACHE_HIT for a hit). */
static int
cached_row(Kernel *k, const uint32_t *row, uint32_t *out)
{
    Py_ssize_t nw = k->nw, cw = k->cw;
    if (k->cap == 0) /* no cache: nothing is counted */
        return compute_row(k, row, NULL, NULL, out, -1);
    uint64_t h = load_key(k, row);
    int32_t s;
    Py_ssize_t pos = find_pos(k, h, &s);
    if (s >= 0) {
        memcpy(out, k->c_rows + (size_t)s * (size_t)nw, (size_t)nw * 4);
        if (k->c_head != s) {
            lru_unlink(k, s);
            lru_push_front(k, s);
        }
        k->hits++;
        return PLAN_CACHE_HIT;
    }
    k->misses++;
    int plan;
    int32_t base = k->c_head;
    if (base >= 0 && k->delta_mode > 0)
        plan = compute_row(k, k->c_key, k->c_keys + (size_t)base * (size_t)cw,
                           k->c_rows + (size_t)base * (size_t)nw, out, k->delta_mode == 2 ? 4 : -1);
    else
        plan = compute_row(k, k->c_key, NULL, NULL, out, -1);
    if (plan == 4)
        k->deltas++;
    if (k->n_cached < k->cap) {
        s = (int32_t)k->n_cached++;
    } else {
        s = k->c_tail;
        lru_unlink(k, s);
        table_remove(k, s);
        k->evictions++;
        int32_t dummy;
        pos = find_pos(k, h, &dummy); /* the removal may have moved the empty position */
    }
    k->c_table[pos] = s;
    k->c_hash[s] = h;
    memcpy(k->c_keys + (size_t)s * (size_t)cw, k->c_key, (size_t)cw * 4);
    memcpy(k->c_rows + (size_t)s * (size_t)nw, out, (size_t)nw * 4);
    lru_push_front(k, s);
    return plan;
}

/* Kernel.expand_rows(class_bitmask, out, indices=None) -> last row's plan (8: cache hit);
 * `indices` is an int64 buffer (one output row per class row) or, for one class row, an int */
static PyObject *
Kernel_expand_rows(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    if (k->cls_of == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel is not initialised");
        return NULL;
    }
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "expand_rows(class_bitmask, out, indices=None)");
        return NULL;
    }
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
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:n,s:n}", "hits", k->hits, "misses", k->misses,
                         "evictions", k->evictions, "deltas", k->deltas, "entries", k->n_cached,
                         "capacity", k->cap);
}

static PyObject *
Kernel_clear_cache(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    if (k->cap > 0)
        memset(k->c_table, 0xff, (size_t)(k->c_tmask + 1) * sizeof(int32_t));
    k->n_cached = 0;
    k->c_head = k->c_tail = -1;
    k->hits = k->misses = k->evictions = k->deltas = 0;
    Py_RETURN_NONE;
}

static PyObject *
Kernel_expand(Kernel *k, PyObject *const *args, Py_ssize_t nargs)
{
    if (k->cls_of == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel is not initialised");
        return NULL;
    }
    if (nargs < 2 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "expand(class_row, out, base_out=None, base_class=None, plan=-1)");
        return NULL;
    }
    long force = -1;
    if (nargs == 5) {
        force = PyLong_AsLong(args[4]);
        if (force == -1 && PyErr_Occurred())
            return NULL;
        if (force < -1 || force > 7) {
            PyErr_SetString(PyExc_ValueError, "plan must be -1 (choose) or 0..7");
            return NULL;
        }
    }
    int have_base = nargs >= 4 && args[2] != Py_None && args[3] != Py_None;
    if (force == 4 && !have_base) {
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
                       have_base ? (const uint32_t *)bov.buf : NULL, (uint32_t *)outv.buf, (int)force);
done:
    PyBuffer_Release(&rowv);
    PyBuffer_Release(&outv);
    PyBuffer_Release(&bov);
    PyBuffer_Release(&bcv);
    if (plan < 0)
        return NULL;
    return PyLong_FromLong(plan);
}

static PyObject *
Kernel_info(Kernel *k, PyObject *Py_UNUSED(ignored))
{
    const double *c = k->corr;
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:d,s:d,s:i,s:{s:d,s:d,s:d,s:d,s:d,s:d,s:d}}", "groups",
                         k->groups, "tail_tokens", k->n_tail, "valid_tokens", k->n_valid, "table_bytes",
                         (Py_ssize_t)(k->groups * GROUP_ROWS * k->nw * 4), "cost_gather_ns",
                         k->cost_gather, "cost_split_ns", k->cost_split, "adapt", k->adapt,
                         "corrections", "gather", c[0], "split", c[1], "set", c[2], "clear", c[3],
                         "delta", c[4], "split/set", c[6], "split/clear", c[7]);
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

static PyMethodDef module_methods[] = {
    {"apply_bitmask", (PyCFunction)(void (*)(void))apply_bitmask, METH_FASTCALL,
     "apply_bitmask(bits, values, itemsize, pattern)\n\n"
     "Write `pattern` (an unsigned int: the bit pattern of -inf in a float type of\n"
     "`itemsize` = 2, 4 or 8 bytes) into every item of the writable buffer `values` whose\n"
     "bit in the int32 bitmask `bits` is 0, and into every item past the bits."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Kernel_methods[] = {
    {"expand", (PyCFunction)(void (*)(void))Kernel_expand, METH_FASTCALL,
     "expand(class_row, out, base_out=None, base_class=None, plan=-1) -> int\n\n"
     "Write the token-bitmask row of one class-bitmask row into `out` (int32 buffers of\n"
     "ceil(num_classes/32) and ceil(width/32) words).  With `base_out` / `base_class` (a\n"
     "token row and the class row it was expanded from) the row may be patched from it.\n"
     "`plan` forces 0 gather, 1 split, 2 set, 3 clear, 4 delta, 5 (set or clear,\n"
     "whichever lists fewer classes), 6 tables + set tail or 7 tables + clear tail;\n"
     "-1 chooses by cost.\n"
     "Returns the plan used."},
    {"expand_rows", (PyCFunction)(void (*)(void))Kernel_expand_rows, METH_FASTCALL,
     "expand_rows(class_bitmask, out, indices=None) -> int\n\n"
     "Expand every row of a C-contiguous int32 class bitmask into row indices[i] (int64\n"
     "buffer; default i; an int for a single class row) of the token bitmask `out`,\n"
     "through the LRU row cache (a miss\n"
     "may patch the most recently used cached row).  Returns the last row's plan, 8\n"
     "for a cache hit."},
    {"cache_info", (PyCFunction)Kernel_cache_info, METH_NOARGS,
     "Row-cache counters: hits, misses, evictions, deltas, entries, capacity."},
    {"clear_cache", (PyCFunction)Kernel_clear_cache, METH_NOARGS,
     "Drop every cached row and reset the counters."},
    {"info", (PyCFunction)Kernel_info, METH_NOARGS,
     "Sizes of the precomputed structures, the modelled costs of plans 0 and 1, and the\n"
     "cost-model corrections learnt so far (measured / modelled time per plan)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "formalgram_cfgzip.expand._cexpand.Kernel",
    .tp_doc = PyDoc_STR("Kernel(token_class, num_classes, table_budget, groups=-1, cache_rows=0,\n"
                        "       delta=1)\n\n"
                        "Precomputed class -> token expansion for one int32 token-class array\n"
                        "(negative ids: never allowed); subset tables use at most\n"
                        "`table_budget` bytes (`groups` >= 0 forces their number); an LRU\n"
                        "cache of `cache_rows` expanded rows serves expand_rows(); on a miss\n"
                        "the most recently used row is patched never (delta=0), when cheaper\n"
                        "(1) or always (2)."),
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

PyMODINIT_FUNC
PyInit__cexpand(void)
{
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
    return m;
}
