/*
 * formalgram_cfgzip.engines.native._cnative -- the native mask engine's hot paths in C.
 *
 * The compiled companion of formalgram_cfgzip/engines/native/gss.py (the pure-Python
 * reference, which documents the algorithms and why they are exact).  Plain C99 and the
 * CPython API only.
 *
 *   Tables  the immutable arrays of one grammar (push trie, transitions, domain automaton,
 *           class sets as bit rows or lists), copied in once, plus the scratch space of a
 *           byte step and of a mask walk (shared by every State of the Tables: all calls
 *           hold the GIL, so no two run at once);
 *   State   one matcher: the graph-structured stack (nodes with a symbol and a slice of a
 *           parent arena; nodes are never changed once made), the tops after every accepted
 *           token (rollback truncates the node and parent arenas back to that token).
 *
 * Nothing is allocated per step once the arenas and scratch arrays have grown to the
 * sizes a walk needs (they only grow, by doubling).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* growable arrays                                                                       */

/* grow() and GROW(): */
#include "../../_cgrow.h"
/* the expansion kernel's C-level entry (State.fill_token) */
#include "../../_cexpand_api.h"

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* ------------------------------------------------------------------------------------ */
/* Tables                                                                                */

typedef struct {
    int32_t node;  /* new node the parents go to */
    int32_t off;   /* arena offset of a parent slice, or the parent itself when len < 0 */
    int32_t len;   /* slice length, -1 for a single parent */
    int32_t next;  /* next record of the same node, -1 at the end */
} Rec;

/* The hot arrays are arrays of small structs: what one step reads together shares a cache
 * line (the kernels mostly run right after a model's forward pass has evicted the caches). */
typedef struct {
    int32_t sym, up; /* a push-trie node: its last symbol, the node of its prefix (-1: a root) */
} TrieNode;

typedef struct {
    int64_t key;    /* c * nsym + X, -1: empty slot */
    int32_t lo, hi; /* its pushed tails: trans_push[lo..hi) */
} Slot;

/* A domain state: its output set (-1: none) and its edges.  Most states have one edge, and that
 * one is held here, so that a walk through a chain of them reads no edge list: the state's line
 * holds the step below. */
typedef struct {
    int32_t out; /* output set (-1: none) */
    int32_t deg; /* number of edges */
    int32_t a, b; /* deg 1: the edge's symbol and target; else the edges dedges[a .. b) by symbol */
} DState;

typedef struct {
    int32_t sym, to;
} DEdge;

/* 64 symbols of a dense state's edges: bit x - 64 * w set when the state has an edge on symbol x,
 * and the edges on lower symbols (the rank of the first edge in this word, from the state's a) */
typedef struct {
    uint64_t bits;
    int32_t rank;
    int32_t pad;
} DenseWord;

typedef struct {
    uint32_t stamp; /* the byte step that made `node` for this trie node */
    int32_t node;
} Fresh;

typedef struct {
    uint32_t stamp;      /* the byte step the other fields belong to */
    int32_t root;        /* new node of the trie root with this symbol, -1: none */
    int32_t first, made; /* exposed nodes of this symbol without a root: the first one, and the
                            node merging them (-1: only one so far) */
} SymScratch;

typedef struct {
    uint64_t key; /* (node << 32) | state */
    uint32_t gen; /* the walk that stored it */
    uint32_t pad;
} Visit;

/* A push-trie node T whose trie below it is one path to a leaf L, with no tail ending on it but L's:
 * a stack node made for T always has one parent, the node made for the next trie node, down to the
 * node made for L (made in the same step, just before: its id is len lower).  A walk that starts at
 * such a node as a top reads the same symbols down to L whatever the stack below, so the pairs it
 * visits there are the grammar's, not the stack's: summed up once, when the tables are made. */
typedef struct {
    int32_t len;     /* edges from T down to L; 0: T is no such node */
    int32_t end;     /* the domain state at L (the walk goes on from the pair (node of L, end)); -1:
                      * the walk ends above L */
    int32_t leaf;    /* L */
    int32_t outs;    /* the output sets of the pairs above L: chain_outs[outs .. outs + nouts) */
    int32_t nouts;
    int32_t pad[3];
} Chain;

typedef struct {
    PyObject_HEAD
    int32_t nsym, start, accepts_empty, num_classes, stop_class, words;
    uint8_t byte_class[256];
    int32_t ntrie;
    TrieNode *trie;
    /* transitions: open addressing on c * nsym + X */
    Slot *slots;
    uint64_t hmask;
    int32_t *trans_push;
    /* domain automaton */
    int32_t nstates, nsets;
    DState *dstates;
    DEdge *dedges;
    int32_t *root_child; /* per symbol, the root state's edge target (-1: none): every walk starts
                          * there, once per top, and the root has an edge per symbol */
    /* per state, the first of its dense_words DenseWords in dense (-1: none; see make_dense): a
     * state of many edges, its symbols rising strictly, answers dom_child with one word instead
     * of a search of its edge list (the walks of an ambiguous code grammar ask such states for
     * hundreds of parents' symbols, most of which they have no edge on) */
    int64_t *dense_at;
    DenseWord *dense;
    int32_t dense_words;
    Chain *chain;        /* per trie node: the walk down its single path from a top (see Chain) */
    int32_t *chain_outs;
    int32_t *set_start, *set_class;
    int64_t *set_bits_at; /* offset of a set's bit row in set_bits, -1: OR its list instead */
    uint32_t *set_bits;
    /* byte-step scratch */
    uint32_t step_id;
    Fresh *fresh;     /* per trie node */
    SymScratch *symx; /* per symbol */
    Rec *recs;
    int64_t recs_cap;
    int32_t *head;
    int64_t head_cap;
    int32_t *exp_off, *exp_len;
    int64_t exp_cap;
    int32_t *alone_syms;
    int64_t alone_cap;
    int32_t *buf;
    int64_t buf_cap;
    int32_t *tops_a, *tops_b;
    int64_t tops_a_cap, tops_b_cap;
    /* walk scratch */
    uint32_t walk_id;
    uint32_t *set_stamp;
    int32_t *hits;
    Visit *visit; /* visited (node, state) pairs, open addressing */
    uint64_t vmask;
    int64_t vcount;
    int32_t *stack;
    int64_t stack_cap;
    int64_t last_pairs, last_chained; /* the last walk's pairs visited, and those chain summaries stood for */
    int64_t last_dense;               /* the last walk's edge lookups at dense states (parents asked) */
    int32_t *key;     /* scratch: the memo key of the fill under way (see fill_row) */
    int64_t key_cap;
    uint32_t *crow;   /* scratch: a class row (State.fill_token) */
    /* The prefix memo (State.remember): a trie over the class ids accepted from the start, each
     * node with the class mask of the state its path reaches.  That state, and so its mask, is a
     * function of the path alone (representatives of one class take the stack through the same
     * displacements), so every State of these tables may answer a fill from it.  Nodes are only
     * added: a node id, once given, names the same path and row for the life of the tables. */
    int32_t pm_n;       /* nodes (0: none, not even the root) */
    int64_t pm_cap;     /* rows allocated in pm_rows */
    uint32_t *pm_rows;  /* node i's class row: pm_rows[i * words .. (i + 1) * words) */
    int64_t *pm_keys;   /* the edges, open addressing on (parent << 32) | class; -1: empty slot */
    int32_t *pm_child;  /* the child of the edge in the same slot */
    uint64_t pm_hmask;  /* slots - 1; 0 before the first edge */
} Tables;

static void
Tables_dealloc(Tables *t)
{
    free(t->trie);
    free(t->slots);
    free(t->trans_push);
    free(t->dstates);
    free(t->dedges);
    free(t->root_child);
    free(t->dense_at);
    free(t->dense);
    free(t->chain);
    free(t->chain_outs);
    free(t->set_start);
    free(t->set_class);
    free(t->set_bits_at);
    free(t->set_bits);
    free(t->key);
    free(t->crow);
    free(t->pm_rows);
    free(t->pm_keys);
    free(t->pm_child);
    free(t->fresh);
    free(t->symx);
    free(t->recs);
    free(t->head);
    free(t->exp_off);
    free(t->exp_len);
    free(t->alone_syms);
    free(t->buf);
    free(t->tops_a);
    free(t->tops_b);
    free(t->set_stamp);
    free(t->hits);
    free(t->visit);
    free(t->stack);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* a copy of a 1-D buffer of `item`-byte items; its length in *n */
static void *
copy_buffer(PyObject *obj, size_t item, int64_t *n, const char *what)
{
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (v.len % (Py_ssize_t)item != 0) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zu-byte items", what, item);
        PyBuffer_Release(&v);
        return NULL;
    }
    *n = v.len / (Py_ssize_t)item;
    void *p = malloc(v.len > 0 ? (size_t)v.len : 1);
    if (p == NULL) {
        PyErr_NoMemory();
        PyBuffer_Release(&v);
        return NULL;
    }
    memcpy(p, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return p;
}

static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static int
bad(const char *msg)
{
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
}

static int make_chains(Tables *t, int64_t npush);
static int make_dense(Tables *t);

static int
Tables_init(Tables *t, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"num_symbols", "start_symbol", "accepts_empty", "num_classes", "stop_class",
                            "byte_class",  "trie_sym",     "trie_up",       "trans_key",   "trans_start",
                            "trans_push",  "edge_start",   "edge_sym",      "edge_to",     "out",
                            "set_start",   "set_class",    NULL};
    int nsym, start, accepts_empty, num_classes, stop_class;
    PyObject *o[12];
    if (t->trie != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Tables is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iipiiOOOOOOOOOOOO", names, &nsym, &start, &accepts_empty,
                                     &num_classes, &stop_class, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                                     &o[6], &o[7], &o[8], &o[9], &o[10], &o[11]))
        return -1;
    if (nsym < 1 || start < 0 || start >= nsym || num_classes < 1 || stop_class < -1 || stop_class >= num_classes)
        return bad("bad symbol or class counts");
    t->nsym = nsym;
    t->start = start;
    t->accepts_empty = accepts_empty;
    t->num_classes = num_classes;
    t->stop_class = stop_class;
    t->words = (num_classes + 31) / 32;
    int64_t n[12];
    void *a[12] = {NULL};
    static const size_t item[12] = {1, 4, 4, 8, 4, 4, 4, 4, 4, 4, 4, 4};
    static const char *what[12] = {"byte_class", "trie_sym", "trie_up", "trans_key", "trans_start", "trans_push",
                                   "edge_start", "edge_sym", "edge_to",  "out",         "set_start",   "set_class"};
    int rc = -1;
    for (int i = 0; i < 12; i++)
        if ((a[i] = copy_buffer(o[i], item[i], &n[i], what[i])) == NULL)
            goto done;
    const uint8_t *bc = a[0];
    const int32_t *tsym = a[1], *tup = a[2], *tstart = a[4], *tpush = a[5];
    const int64_t *keys = a[3];
    const int32_t *estart = a[6], *esym = a[7], *eto = a[8], *out = a[9];
    int64_t n_ts = n[1], n_tk = n[3], n_tp = n[5], n_out = n[9], n_ss = n[10], n_sc = n[11];
    /* every index the kernels follow is checked here, once */
    if (n[0] != 256) {
        bad("byte_class must have 256 entries");
        goto done;
    }
    memcpy(t->byte_class, bc, 256);
    int nbc = 0;
    for (int b = 0; b < 256; b++)
        if (t->byte_class[b] + 1 > nbc)
            nbc = t->byte_class[b] + 1;
    if (n_ts != n[2] || n_ts > INT32_MAX) {
        bad("trie arrays differ in length");
        goto done;
    }
    for (int64_t i = 0; i < n_ts; i++)
        if (tsym[i] < 0 || tsym[i] >= nsym || tup[i] < -1 || tup[i] >= i) {
            bad("push trie out of range");
            goto done;
        }
    if (n[4] != n_tk + 1 || tstart[0] != 0 || tstart[n_tk] != n_tp) {
        bad("trans_start has the wrong shape");
        goto done;
    }
    for (int64_t j = 0; j < n_tk; j++)
        if (tstart[j + 1] <= tstart[j] || keys[j] < 0 || keys[j] >= (int64_t)nbc * nsym ||
            (j > 0 && keys[j] <= keys[j - 1])) {
            bad("transitions are inconsistent");
            goto done;
        }
    for (int64_t e = 0; e < n_tp; e++)
        if (tpush[e] < -1 || tpush[e] >= n_ts) {
            bad("trans_push out of range");
            goto done;
        }
    if (n_out > INT32_MAX || n[6] != n_out + 1 || n_out < 1 || estart[0] != 0 || estart[n_out] != n[7] ||
        n[8] != n[7]) {
        bad("domain automaton arrays have the wrong shape");
        goto done;
    }
    if (n_ss < 1 || ((const int32_t *)a[10])[0] != 0 || ((const int32_t *)a[10])[n_ss - 1] != n_sc) {
        bad("set_start has the wrong shape");
        goto done;
    }
    t->nstates = (int32_t)n_out;
    t->nsets = (int32_t)(n_ss - 1);
    for (int64_t s = 0; s < n_out; s++) {
        if (estart[s + 1] < estart[s] || out[s] < -1 || out[s] >= t->nsets) {
            bad("domain automaton out of range");
            goto done;
        }
        for (int32_t e = estart[s]; e < estart[s + 1]; e++)
            if (eto[e] < 0 || eto[e] >= n_out || esym[e] < 0 || esym[e] >= nsym ||
                (e > estart[s] && esym[e] <= esym[e - 1])) {
                bad("domain automaton edges out of range or unsorted");
                goto done;
            }
    }
    t->set_start = a[10];
    t->set_class = a[11];
    a[10] = a[11] = NULL; /* kept */
    for (int64_t s = 0; s + 1 < n_ss; s++)
        if (t->set_start[s + 1] < t->set_start[s]) {
            bad("set_start is not increasing");
            goto done;
        }
    for (int64_t i = 0; i < n_sc; i++)
        if (t->set_class[i] < 0 || t->set_class[i] >= num_classes) {
            bad("set class out of range");
            goto done;
        }
    /* the structs */
    t->ntrie = (int32_t)n_ts;
    t->trie = malloc((size_t)(n_ts > 0 ? n_ts : 1) * sizeof(TrieNode));
    t->trans_push = a[5];
    a[5] = NULL; /* kept */
    uint64_t hsize = 16;
    while (hsize < 2 * (uint64_t)n_tk + 2)
        hsize *= 2;
    t->hmask = hsize - 1;
    t->slots = malloc(hsize * sizeof(Slot));
    t->dstates = malloc((size_t)n_out * sizeof(DState));
    t->dedges = malloc((size_t)(n[7] > 0 ? n[7] : 1) * sizeof(DEdge));
    if (t->trie == NULL || t->slots == NULL || t->dstates == NULL || t->dedges == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; i < n_ts; i++) {
        t->trie[i].sym = tsym[i];
        t->trie[i].up = tup[i];
    }
    for (uint64_t i = 0; i < hsize; i++)
        t->slots[i].key = -1;
    for (int64_t j = 0; j < n_tk; j++) {
        uint64_t h = mix64((uint64_t)keys[j]) & t->hmask;
        while (t->slots[h].key >= 0)
            h = (h + 1) & t->hmask;
        t->slots[h].key = keys[j];
        t->slots[h].lo = tstart[j];
        t->slots[h].hi = tstart[j + 1];
    }
    for (int64_t s = 0; s < n_out; s++) {
        DState *ds = &t->dstates[s];
        ds->out = out[s];
        ds->deg = estart[s + 1] - estart[s];
        ds->a = ds->deg == 1 ? esym[estart[s]] : estart[s];
        ds->b = ds->deg == 1 ? eto[estart[s]] : estart[s + 1];
    }
    for (int64_t e = 0; e < n[7]; e++) {
        t->dedges[e].sym = esym[e];
        t->dedges[e].to = eto[e];
    }
    t->root_child = malloc((size_t)nsym * sizeof(int32_t));
    if (t->root_child == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t x = 0; x < nsym; x++)
        t->root_child[x] = -1;
    if (n_out > 0) /* backwards: where a symbol had two edges, the first is the one dom_child finds */
        for (int64_t e = estart[1] - 1; e >= estart[0]; e--)
            t->root_child[esym[e]] = eto[e];
    if (make_dense(t) < 0)
        goto done;
    if (make_chains(t, n_tp) < 0)
        goto done;
    /* class sets: a bit row when ORing it is cheaper than setting its classes one by one */
    t->set_bits_at = malloc(((size_t)t->nsets + 1) * sizeof(int64_t));
    if (t->set_bits_at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t nbits = 0;
    for (int32_t s = 0; s < t->nsets; s++) {
        int64_t size = t->set_start[s + 1] - t->set_start[s];
        if (4 * size > t->words) {
            t->set_bits_at[s] = nbits;
            nbits += t->words;
        } else {
            t->set_bits_at[s] = -1;
        }
    }
    t->set_bits = calloc(nbits > 0 ? (size_t)nbits : 1, sizeof(uint32_t));
    if (t->set_bits == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t s = 0; s < t->nsets; s++)
        if (t->set_bits_at[s] >= 0) {
            uint32_t *row = t->set_bits + t->set_bits_at[s];
            for (int32_t i = t->set_start[s]; i < t->set_start[s + 1]; i++)
                row[t->set_class[i] >> 5] |= (uint32_t)1 << (t->set_class[i] & 31);
        }
    /* scratch sized by the tables */
    t->fresh = calloc((size_t)(n_ts > 0 ? n_ts : 1), sizeof(Fresh));
    t->symx = calloc((size_t)nsym, sizeof(SymScratch));
    t->set_stamp = calloc((size_t)(t->nsets > 0 ? t->nsets : 1), sizeof(uint32_t));
    t->hits = calloc((size_t)(t->nsets > 0 ? t->nsets : 1), sizeof(int32_t));
    t->vmask = 1023;
    t->visit = calloc(t->vmask + 1, sizeof(Visit));
    if (t->fresh == NULL || t->symx == NULL || t->set_stamp == NULL || t->hits == NULL || t->visit == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    t->step_id = 0;
    t->walk_id = 0;
    rc = 0;
done:
    for (int i = 0; i < 12; i++)
        free(a[i]);
    return rc;
}

static inline const Slot *
trans_lookup(const Tables *t, int64_t key)
{
    uint64_t h = mix64((uint64_t)key) & t->hmask;
    for (;;) {
        const Slot *slot = &t->slots[h];
        if (slot->key == key)
            return slot;
        if (slot->key < 0)
            return NULL;
        h = (h + 1) & t->hmask;
    }
}

/* set bits of x (no instruction set assumed) */
static inline int
popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (int)((x * 0x0101010101010101ULL) >> 56);
}

/* Whether dom_child reads the dense states' words (see Tables.dense_at); `dense_edges(on)` switches
 * them (tests compare both); the states found do not depend on it. */
static int g_dense_edges = 1;

/* the first of state d's dense words in t->dense, -1 when it has none or they are switched off */
static inline int64_t
dense_first(const Tables *t, int32_t d)
{
    return g_dense_edges && t->dense_at != NULL ? t->dense_at[d] : -1;
}

static inline int32_t
dom_child(const Tables *t, int32_t d, int32_t sym)
{
    if (d == 0)
        return (uint32_t)sym < (uint32_t)t->nsym ? t->root_child[sym] : -1;
    const DState *ds = &t->dstates[d];
    if (ds->deg == 1)
        return ds->a == sym ? ds->b : -1;
    int64_t at = dense_first(t, d);
    if (at >= 0) {
        if ((uint32_t)sym >= (uint32_t)t->nsym)
            return -1;
        const DenseWord *dw = &t->dense[at + (sym >> 6)];
        uint64_t below = ((uint64_t)1 << (sym & 63)) - 1;
        if (!(dw->bits >> (sym & 63) & 1))
            return -1;
        return t->dedges[ds->a + dw->rank + popcount64(dw->bits & below)].to;
    }
    int32_t lo = ds->a, hi = ds->b;
    const DEdge *es = t->dedges;
    while (hi - lo > 8) {
        int32_t mid = lo + (hi - lo) / 2;
        if (es[mid].sym <= sym)
            lo = mid;
        else
            hi = mid;
    }
    for (; lo < hi; lo++) {
        if (es[lo].sym == sym)
            return es[lo].to;
        if (es[lo].sym > sym)
            return -1;
    }
    return -1;
}

/* The dense states (see Tables.dense_at): those of DENSE_MIN edges or more whose words take at
 * most twice the memory of their edge list (a DenseWord per 64 symbols against 8 bytes an edge: at
 * least as many edges as words), so the words never take more than twice the edges' memory; -1
 * on MemoryError */
#define DENSE_MIN 9
static int
make_dense(Tables *t)
{
    int32_t words = (t->nsym + 63) / 64;
    int64_t n = 0;
    t->dense_words = words;
    t->dense_at = malloc(((size_t)t->nstates + 1) * sizeof(int64_t));
    if (t->dense_at == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t d = 0; d < t->nstates; d++) {
        const DState *ds = &t->dstates[d];
        int rising = d > 0 && ds->deg >= DENSE_MIN && ds->deg >= words;
        for (int32_t e = ds->a + 1; rising && e < ds->b; e++)
            rising = t->dedges[e - 1].sym < t->dedges[e].sym;
        t->dense_at[d] = rising ? n++ * words : -1;
    }
    t->dense = calloc(n > 0 ? (size_t)(n * words) : 1, sizeof(DenseWord));
    if (t->dense == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t d = 0; d < t->nstates; d++) {
        if (t->dense_at[d] < 0)
            continue;
        DenseWord *dw = t->dense + t->dense_at[d];
        const DState *ds = &t->dstates[d];
        for (int32_t e = ds->a; e < ds->b; e++) {
            int32_t x = t->dedges[e].sym;
            dw[x >> 6].bits |= (uint64_t)1 << (x & 63);
        }
        int32_t rank = 0;
        for (int32_t w = 0; w < words; w++) {
            dw[w].rank = rank;
            rank += popcount64(dw[w].bits);
        }
    }
    return 0;
}

/* The longest walk a chain summary is made of: longer chains are walked pair by pair (it bounds the
 * work of making the summaries by CHAIN_WALK_MAX per trie node). */
#define CHAIN_WALK_MAX 64

/* t->chain and t->chain_outs (see Chain) from the trie and the domain automaton; -1 on MemoryError */
static int
make_chains(Tables *t, int64_t npush)
{
    int32_t n = t->ntrie;
    size_t m = (size_t)(n > 0 ? n : 1);
    int32_t *kids = calloc(m, sizeof(int32_t)), *only = malloc(m * sizeof(int32_t));
    int32_t *len = malloc(m * sizeof(int32_t)), *leaf = malloc(m * sizeof(int32_t));
    uint8_t *tail = calloc(m, 1);
    int64_t cap = 0, nouts = 0;
    int rc = -1;
    t->chain = calloc(m, sizeof(Chain));
    if (kids == NULL || only == NULL || len == NULL || leaf == NULL || tail == NULL || t->chain == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        only[i] = -1;
    for (int32_t i = 0; i < n; i++)
        if (t->trie[i].up >= 0) {
            kids[t->trie[i].up]++;
            only[t->trie[i].up] = i;
        }
    for (int64_t e = 0; e < npush; e++)
        if (t->trans_push[e] >= 0)
            tail[t->trans_push[e]] = 1;
    /* len: edges down the single path to a leaf with no tail ending above the leaf, -1: none (a node's
     * children come after it, so backwards sees them first) */
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t c = only[i];
        if (kids[i] == 0) {
            len[i] = 0;
            leaf[i] = i;
        } else if (kids[i] == 1 && len[c] >= 0 && (len[c] == 0 || !tail[c])) {
            len[i] = len[c] + 1;
            leaf[i] = leaf[c];
        } else {
            len[i] = -1;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        if (len[i] < 1 || len[i] > CHAIN_WALK_MAX || tail[i]) /* a tail ending here: more parents */
            continue;
        int32_t d = t->root_child[t->trie[i].sym];
        if (d < 0)
            continue;
        Chain *ch = &t->chain[i];
        int64_t first = nouts;
        int32_t end = -1, cur = i;
        for (int32_t k = 0; k < len[i]; k++) {
            const DState *ds = &t->dstates[d];
            int seen = ds->out < 0;
            for (int64_t j = first; j < nouts && !seen; j++)
                seen = t->chain_outs[j] == ds->out;
            if (!seen) {
                if (GROW(t->chain_outs, cap, nouts + 1) < 0)
                    goto done;
                t->chain_outs[nouts++] = ds->out;
            }
            if (ds->deg == 0)
                break;
            cur = only[cur];
            if ((d = dom_child(t, d, t->trie[cur].sym)) < 0)
                break;
            if (k == len[i] - 1)
                end = d;
        }
        if (nouts > INT32_MAX) {
            PyErr_SetString(PyExc_MemoryError, "chain summaries too large");
            goto done;
        }
        ch->len = len[i];
        ch->end = end;
        ch->leaf = leaf[i];
        ch->outs = (int32_t)first;
        ch->nouts = (int32_t)(nouts - first);
    }
    rc = 0;
done:
    free(kids);
    free(only);
    free(len);
    free(leaf);
    free(tail);
    return rc;
}

static uint32_t
next_step_id(Tables *t)
{
    if (++t->step_id == 0) {
        memset(t->fresh, 0, (size_t)(t->ntrie > 0 ? t->ntrie : 1) * sizeof(Fresh));
        memset(t->symx, 0, (size_t)t->nsym * sizeof(SymScratch));
        t->step_id = 1;
    }
    return t->step_id;
}

/* ------------------------------------------------------------------------------------ */
/* State                                                                                 */

typedef struct {
    int32_t sym, plen; /* symbol (-1 for the bottom), number of parents */
    int32_t poff;      /* the parents: arena[poff .. poff + plen) (the arena stays under INT32_MAX) */
    int32_t p0;        /* arena[poff] when plen > 0 (else 0): a chain's walk reads no arena */
    int32_t tn;        /* the push-trie node it was made for, -1: none (the start, a merge) */
} Node;

/* node v's parents: arena[off .. off + len), the first kept in the node (set every node's parents
 * through this, so that p0 always agrees with the arena) */
static inline void
set_parents(Node *v, const int32_t *arena, int32_t off, int32_t len)
{
    v->poff = off;
    v->plen = len;
    v->p0 = len > 0 ? arena[off] : 0;
}

typedef struct {
    PyObject_HEAD
    Tables *t;
    /* nodes: symbol, parent slice [poff, poff + plen) of the arena; node 0 is the bottom */
    Node *nodes;
    uint32_t *nstamp; /* per node, for de-duplication */
    uint32_t mark;
    int64_t ncap, nn, stamp_cap;
    int32_t *arena;
    int64_t acap, an;
    /* history: per accepted token, its tops (slice of tops_arena) and the arena sizes */
    int64_t *h_toff, *h_nodes, *h_arena;
    int32_t *h_ntops;
    uint8_t *h_term;
    /* per entry, its node in the tables' prefix memo (-1: off it, or not known to be on it) and the
     * class of the token that made it (-1: bytes of no known class; entry 0: the start) */
    int32_t *h_pnode, *h_eid;
    int64_t hcap, hn;
    int32_t *tarena;
    int64_t tcap, tn;
    /* memo of the last fill (see fill_row): its key, the largest node id the key names, the row */
    int32_t *mkey;
    int64_t mkey_cap, mkey_len, mmax;
    uint32_t *mrow;
    int mvalid, from_memo; /* from_memo: the last fill was the memo's */
    uint64_t mgen;         /* rows stored in the memo so far */
    long long memo_hits, rows_kept, prefix_hits;
    CExpandHint khint; /* where the expansion kernel keeps the memo's token row (fill_token) */
    /* the bitmask of the last fill_token / update_token: its buffer, kept exported (so its memory
     * stays where it is, and the next call on it skips the export and its checks; r_view.obj NULL:
     * none), the row written, the kernel (a reference) and the class row whose tokens that row
     * holds (for update_token) */
    Py_buffer r_view;
    PyObject *r_kernel;
    Py_ssize_t r_index;
    uint32_t *r_crow;
    uint64_t r_mgen; /* mgen when r_crow was the memo's row (0: it was not): while mgen stays, a memo
                      * hit is that row */
    PyObject *b_kernel, *b_fallback; /* bind(kernel, fallback): fill_bound / update_bound's (NULL: none) */
} State;

static void
State_dealloc(State *s)
{
    free(s->nodes);
    free(s->nstamp);
    free(s->arena);
    free(s->h_toff);
    free(s->h_nodes);
    free(s->h_arena);
    free(s->h_ntops);
    free(s->h_term);
    free(s->h_pnode);
    free(s->h_eid);
    free(s->tarena);
    free(s->mkey);
    free(s->mrow);
    free(s->r_crow);
    if (s->r_view.obj != NULL)
        PyBuffer_Release(&s->r_view);
    Py_XDECREF(s->r_kernel);
    Py_XDECREF(s->b_kernel);
    Py_XDECREF(s->b_fallback);
    Py_XDECREF(s->t);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject TablesType;
static PyTypeObject StateType;

/* append a history entry whose tops are tops[0..ntops) (tops may not point into tarena) */
static int
history_push(State *s, const int32_t *tops, int32_t ntops, uint8_t term)
{
    if (s->hn >= s->hcap) {
        int64_t cap = s->hcap;
        if (GROW(s->h_toff, cap, s->hn + 1) < 0)
            return -1;
        void *p;
        if ((p = realloc(s->h_nodes, (size_t)cap * sizeof(int64_t))) == NULL)
            return PyErr_NoMemory(), -1;
        s->h_nodes = p;
        if ((p = realloc(s->h_arena, (size_t)cap * sizeof(int64_t))) == NULL)
            return PyErr_NoMemory(), -1;
        s->h_arena = p;
        if ((p = realloc(s->h_ntops, (size_t)cap * sizeof(int32_t))) == NULL)
            return PyErr_NoMemory(), -1;
        s->h_ntops = p;
        if ((p = realloc(s->h_term, (size_t)cap)) == NULL)
            return PyErr_NoMemory(), -1;
        s->h_term = p;
        if ((p = realloc(s->h_pnode, (size_t)cap * sizeof(int32_t))) == NULL)
            return PyErr_NoMemory(), -1;
        s->h_pnode = p;
        if ((p = realloc(s->h_eid, (size_t)cap * sizeof(int32_t))) == NULL)
            return PyErr_NoMemory(), -1;
        s->h_eid = p;
        s->hcap = cap;
    }
    if (GROW(s->tarena, s->tcap, s->tn + ntops) < 0)
        return -1;
    memcpy(s->tarena + s->tn, tops, (size_t)ntops * sizeof(int32_t));
    s->h_toff[s->hn] = s->tn;
    s->h_ntops[s->hn] = ntops;
    s->h_nodes[s->hn] = s->nn;
    s->h_arena[s->hn] = s->an;
    s->h_term[s->hn] = term;
    s->h_pnode[s->hn] = -1;
    s->h_eid[s->hn] = -1;
    s->tn += ntops;
    s->hn++;
    return 0;
}

static int
new_node(State *s, int32_t symbol)
{
    if (s->nn >= s->ncap) {
        int64_t cap = s->ncap;
        if (GROW(s->nodes, cap, s->nn + 1) < 0)
            return -1;
        void *p;
        if ((p = realloc(s->nstamp, (size_t)cap * sizeof(uint32_t))) == NULL)
            return PyErr_NoMemory(), -1;
        s->nstamp = p;
        memset(s->nstamp + s->ncap, 0, (size_t)(cap - s->ncap) * sizeof(uint32_t));
        s->ncap = cap;
    }
    int64_t i = s->nn++;
    s->nodes[i].sym = symbol;
    s->nodes[i].tn = -1;
    set_parents(&s->nodes[i], s->arena, 0, 0);
    s->nstamp[i] = 0;
    return (int)i;
}

static int
state_reset(State *s)
{
    Tables *t = s->t;
    s->nn = 0;
    s->an = 0;
    s->hn = 0;
    s->tn = 0;
    s->mvalid = 0;
    if (new_node(s, -1) < 0 || new_node(s, t->start) < 0 || GROW(s->arena, s->acap, 1) < 0)
        return -1;
    s->arena[0] = 0; /* node 1 lies on the bottom */
    s->an = 1;
    set_parents(&s->nodes[1], s->arena, 0, 1);
    int32_t tops[2] = {0, 1};
    if ((t->accepts_empty ? history_push(s, tops, 2, 0) : history_push(s, tops + 1, 1, 0)) < 0)
        return -1;
    s->h_pnode[0] = 0; /* the prefix memo's root, once it has one */
    return 0;
}

static int
State_init(State *s, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"tables", NULL};
    PyObject *tables;
    if (s->t != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "State is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", names, &TablesType, &tables))
        return -1;
    if (((Tables *)tables)->trie == NULL) {
        PyErr_SetString(PyExc_ValueError, "Tables is not initialised");
        return -1;
    }
    Py_INCREF(tables);
    s->t = (Tables *)tables;
    return state_reset(s);
}

static int
add_rec(Tables *t, int64_t *nrec, int32_t first_new, int32_t node, int32_t off, int32_t len)
{
    if (GROW(t->recs, t->recs_cap, *nrec + 1) < 0)
        return -1;
    int32_t slot = node - first_new;
    Rec *r = &t->recs[*nrec];
    r->node = node;
    r->off = off;
    r->len = len;
    r->next = t->head[slot];
    t->head[slot] = (int32_t)*nrec;
    (*nrec)++;
    return 0;
}

/* a new node made during a step: room for its record list */
static int
step_node(State *s, int32_t symbol, int32_t first_new)
{
    Tables *t = s->t;
    int g = new_node(s, symbol);
    if (g < 0)
        return -1;
    if (GROW(t->head, t->head_cap, (int64_t)(g - first_new) + 1) < 0)
        return -1;
    t->head[g - first_new] = -1;
    return g;
}

static void
insertion_sort(int32_t *a, int64_t n)
{
    for (int64_t i = 1; i < n; i++) {
        int32_t x = a[i];
        int64_t j = i;
        while (j > 0 && a[j - 1] > x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Whether nodes u and w have the same stacks below them, as far as `depth` levels of parents show:
 * u == w, or (depth > 0) one symbol and as many parents, the parents at each position the same
 * node or (depth > 1) again such nodes, one level down.  The stacks below a node are its symbol on
 * each stack below each of its parents, so by induction such nodes have the same stacks.  Nodes
 * that pass at depth 1 (one symbol, the same parents) are *copies*.  Each pair of distinct nodes
 * compared takes one from *budget; none left: 0. */
static int
same_paths(const State *s, int32_t u, int32_t w, int depth, int *budget)
{
    if (u == w)
        return 1;
    if (depth <= 0 || --*budget < 0)
        return 0;
    const Node *a = &s->nodes[u], *b = &s->nodes[w];
    if (a->sym != b->sym || a->plen != b->plen)
        return 0;
    const int32_t *x = s->arena + a->poff, *y = s->arena + b->poff;
    for (int32_t i = 0; i < a->plen; i++)
        if (!same_paths(s, x[i], y[i], depth - 1, budget))
            return 0;
    return 1;
}

/* Parents of node g (a list of its own) that are copies of an earlier one (see same_paths) dropped: a copy adds no
 * stack below g.  A field of a loop read byte by byte makes such copies (one node per byte for the
 * field's symbol, on the same parents), and without this the parents of the node above it would
 * grow with the field, and with them the walk and the memo key (which then never repeats).  Lists
 * longer than DROP_COPIES_MAX are left as they are (the comparison is quadratic). */
#define DROP_COPIES_MAX 16
static void
drop_copies(State *s, int32_t g)
{
    Node *v = &s->nodes[g];
    if (v->plen < 2 || v->plen > DROP_COPIES_MAX)
        return;
    /* the kept parents' symbol, first parent and count, compared before their lists */
    uint64_t head[DROP_COPIES_MAX];
    int32_t *p = s->arena + v->poff, n = 0;
    for (int32_t k = 0; k < v->plen; k++) {
        const Node *nu = &s->nodes[p[k]];
        uint64_t h = ((uint64_t)(uint32_t)nu->sym << 32 | (uint32_t)nu->p0) ^ ((uint64_t)(uint32_t)nu->plen << 20);
        int32_t j = 0;
        for (; j < n; j++) {
            int budget = 1; /* one pair: their parents compared by id */
            if (head[j] == h && same_paths(s, p[j], p[k], 1, &budget))
                break;
        }
        if (j == n) {
            head[n] = h;
            p[n++] = p[k];
        }
    }
    if (n < v->plen)
        set_parents(v, s->arena, v->poff, n);
}

/* one byte of class c from the tops cur[0..ncur) into *out (t->tops_b or t->tops_a), count in *nout */
static int
state_step(State *s, const int32_t *cur, int64_t ncur, int c, int32_t **out, int64_t *out_cap, int64_t *nout)
{
    Tables *t = s->t;
    uint32_t id = next_step_id(t);
    int32_t first_new = (int32_t)s->nn;
    int64_t nrec = 0, nexp = 0, nalone = 0, ntop = 0;
    int bottom = 0;
    int64_t base = (int64_t)c * t->nsym;
    for (int64_t i = 0; i < ncur; i++) {
        int32_t v = cur[i];
        if (v == 0)
            continue;
        const Slot *slot = trans_lookup(t, base + s->nodes[v].sym);
        if (slot == NULL)
            continue;
        int32_t voff = (int32_t)s->nodes[v].poff, vlen = s->nodes[v].plen;
        for (int32_t e = slot->lo; e < slot->hi; e++) {
            int32_t tau = t->trans_push[e];
            if (tau < 0) {
                int64_t before = t->exp_cap;
                if (GROW(t->exp_off, t->exp_cap, nexp + 1) < 0)
                    return -1;
                if (t->exp_cap != before) { /* exp_len follows exp_off's capacity */
                    void *p = realloc(t->exp_len, (size_t)t->exp_cap * sizeof(int32_t));
                    if (p == NULL) {
                        t->exp_cap = before; /* both arrays still hold `before` entries */
                        return PyErr_NoMemory(), -1;
                    }
                    t->exp_len = p;
                }
                t->exp_off[nexp] = voff;
                t->exp_len[nexp] = vlen;
                nexp++;
                continue;
            }
            int32_t g;
            if (t->fresh[tau].stamp == id) {
                g = t->fresh[tau].node;
            } else {
                if ((g = step_node(s, t->trie[tau].sym, first_new)) < 0)
                    return -1;
                s->nodes[g].tn = tau;
                t->fresh[tau].stamp = id;
                t->fresh[tau].node = g;
                int32_t tt = tau, child = g;
                for (;;) { /* the nodes above, up to the trie root */
                    int32_t up = t->trie[tt].up;
                    if (up < 0) {
                        SymScratch *sx = &t->symx[t->trie[tt].sym];
                        sx->stamp = id;
                        sx->root = child;
                        if (GROW(*out, *out_cap, ntop + 1) < 0)
                            return -1;
                        (*out)[ntop++] = child;
                        break;
                    }
                    if (t->fresh[up].stamp == id) {
                        if (add_rec(t, &nrec, first_new, t->fresh[up].node, child, -1) < 0)
                            return -1;
                        break;
                    }
                    int32_t h = step_node(s, t->trie[up].sym, first_new);
                    if (h < 0)
                        return -1;
                    s->nodes[h].tn = up;
                    t->fresh[up].stamp = id;
                    t->fresh[up].node = h;
                    if (add_rec(t, &nrec, first_new, h, child, -1) < 0)
                        return -1;
                    tt = up;
                    child = h;
                }
            }
            if (add_rec(t, &nrec, first_new, g, voff, vlen) < 0)
                return -1;
        }
    }
    /* exposed nodes: merged into the new root of their symbol, or with each other */
    if (nexp) {
        uint32_t m = ++s->mark;
        if (m == 0) {
            memset(s->nstamp, 0, (size_t)s->ncap * sizeof(uint32_t));
            m = s->mark = 1;
        }
        for (int64_t i = 0; i < nexp; i++) {
            for (int32_t k = 0; k < t->exp_len[i]; k++) {
                int32_t u = s->arena[t->exp_off[i] + k];
                if (u == 0) {
                    bottom = 1;
                    continue;
                }
                if (s->nstamp[u] == m)
                    continue;
                s->nstamp[u] = m;
                SymScratch *sx = &t->symx[s->nodes[u].sym];
                int32_t uoff = (int32_t)s->nodes[u].poff, ulen = s->nodes[u].plen;
                if (sx->stamp == id) {
                    if (sx->root >= 0) {
                        if (add_rec(t, &nrec, first_new, sx->root, uoff, ulen) < 0)
                            return -1;
                    } else if (sx->made >= 0) {
                        if (add_rec(t, &nrec, first_new, sx->made, uoff, ulen) < 0)
                            return -1;
                    } else { /* a second exposed node of this symbol: merge both into a new one */
                        int32_t first = sx->first;
                        int32_t g = step_node(s, s->nodes[u].sym, first_new);
                        if (g < 0)
                            return -1;
                        sx = &t->symx[s->nodes[u].sym];
                        sx->made = g;
                        if (add_rec(t, &nrec, first_new, g, (int32_t)s->nodes[first].poff, s->nodes[first].plen) < 0 ||
                            add_rec(t, &nrec, first_new, g, uoff, ulen) < 0)
                            return -1;
                    }
                } else {
                    sx->stamp = id;
                    sx->root = -1;
                    sx->first = u;
                    sx->made = -1;
                    if (GROW(t->alone_syms, t->alone_cap, nalone + 1) < 0)
                        return -1;
                    t->alone_syms[nalone++] = s->nodes[u].sym;
                }
            }
        }
        for (int64_t i = 0; i < nalone; i++) {
            int32_t x = t->alone_syms[i];
            if (GROW(*out, *out_cap, ntop + 1) < 0)
                return -1;
            (*out)[ntop++] = t->symx[x].made >= 0 ? t->symx[x].made : t->symx[x].first;
        }
    }
    /* parents of the new nodes */
    int64_t own = s->an; /* the lists made here, not shared slices, lie from here on */
    for (int32_t g = first_new; g < (int32_t)s->nn; g++) {
        int32_t r = t->head[g - first_new];
        if (r < 0)
            continue; /* cannot happen: every new node gets a record */
        Rec *rec = &t->recs[r];
        if (rec->next < 0 && rec->len >= 0) { /* one slice: shared, not copied */
            set_parents(&s->nodes[g], s->arena, rec->off, rec->len);
            continue;
        }
        uint32_t m = ++s->mark;
        if (m == 0) {
            memset(s->nstamp, 0, (size_t)s->ncap * sizeof(uint32_t));
            m = s->mark = 1;
        }
        int64_t nb = 0;
        for (; r >= 0; r = t->recs[r].next) {
            rec = &t->recs[r];
            int32_t len = rec->len < 0 ? 1 : rec->len;
            if (GROW(t->buf, t->buf_cap, nb + len) < 0)
                return -1;
            for (int32_t k = 0; k < len; k++) {
                int32_t u = rec->len < 0 ? rec->off : s->arena[rec->off + k];
                if (s->nstamp[u] != m) {
                    s->nstamp[u] = m;
                    t->buf[nb++] = u;
                }
            }
        }
        if (GROW(s->arena, s->acap, s->an + nb) < 0)
            return -1;
        if (s->an + nb > INT32_MAX) {
            PyErr_SetString(PyExc_MemoryError, "graph-structured stack too large");
            return -1;
        }
        memcpy(s->arena + s->an, t->buf, (size_t)nb * sizeof(int32_t));
        set_parents(&s->nodes[g], s->arena, (int32_t)s->an, (int32_t)nb);
        s->an += nb;
    }
    for (int32_t g = first_new; g < (int32_t)s->nn; g++)
        if (s->nodes[g].poff >= own)
            drop_copies(s, g);
    if (bottom) {
        if (GROW(*out, *out_cap, ntop + 1) < 0)
            return -1;
        (*out)[ntop++] = 0;
    }
    insertion_sort(*out, ntop);
    *nout = ntop;
    return 0;
}

static inline const int32_t *
cur_tops(const State *s, int32_t *n)
{
    *n = s->h_ntops[s->hn - 1];
    return s->tarena + s->h_toff[s->hn - 1];
}

/* 1: accepted, 0: rejected (state unchanged), -1: error (state unchanged) */
static int
accept_bytes(State *s, const uint8_t *data, Py_ssize_t len)
{
    Tables *t = s->t;
    if (s->h_term[s->hn - 1] || len == 0)
        return 0;
    int32_t n0;
    const int32_t *tops = cur_tops(s, &n0);
    int64_t ncur = n0;
    int64_t mark_nodes = s->nn, mark_arena = s->an;
    /* the first byte reads from the history's tops, later ones ping-pong between two buffers */
    int32_t **bufs[2] = {&t->tops_a, &t->tops_b};
    int64_t *caps[2] = {&t->tops_a_cap, &t->tops_b_cap};
    const int32_t *cur = tops;
    int which = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        int64_t nout = 0;
        if (state_step(s, cur, ncur, t->byte_class[data[i]], bufs[which], caps[which], &nout) < 0 || nout == 0) {
            s->nn = mark_nodes;
            s->an = mark_arena;
            return PyErr_Occurred() ? -1 : 0;
        }
        cur = *bufs[which];
        ncur = nout;
        which ^= 1;
    }
    if (history_push(s, cur, (int32_t)ncur, 0) < 0) {
        s->nn = mark_nodes;
        s->an = mark_arena;
        return -1;
    }
    return 1;
}

static int
stop_allowed(const State *s)
{
    int32_t n;
    const int32_t *tops = cur_tops(s, &n);
    return !s->h_term[s->hn - 1] && n > 0 && tops[0] == 0;
}

/* The memo key of the current tops: their number, then per top its symbol, its number of
 * parents and the parents.  The class mask is a function of the stack below the tops, i.e. of
 * this key: nodes never change once made, and the nodes older than a history entry are closed
 * under "parent of" (a node's parents exist when it is made), so a rollback keeps the memo
 * exactly when every node the key names survives it.  Returns the key's length (in t->key), or
 * -1 (MemoryError); *max is the largest node id it names. */
static int64_t
memo_key(State *s, const int32_t *tops, int32_t ntops, int64_t *max)
{
    Tables *t = s->t;
    int64_t len = 1;
    for (int32_t i = 0; i < ntops; i++)
        len += 2 + s->nodes[tops[i]].plen;
    if (GROW(t->key, t->key_cap, len) < 0)
        return -1;
    int32_t *key = t->key;
    int64_t q = 0, m = 0;
    key[q++] = ntops;
    for (int32_t i = 0; i < ntops; i++) {
        const Node *v = &s->nodes[tops[i]];
        if (v->tn >= 0) /* the chain summary a walk from this top reads first (see fill_walk) */
            PREFETCH(&t->chain[v->tn]);
        key[q++] = v->sym;
        key[q++] = v->plen;
        for (int32_t k = 0; k < v->plen; k++) {
            int32_t u = s->arena[v->poff + k];
            key[q++] = u;
            if (u > m)
                m = u;
        }
    }
    *max = m;
    return len;
}

static int fill_walk(State *s, uint32_t *row, const int32_t *tops, int32_t ntops);

/* the prefix memo's edge key of (parent, cls) */
static inline int64_t
pm_key(int32_t parent, int32_t cls)
{
    return ((int64_t)parent << 32) | (uint32_t)cls;
}

/* the slot of `key` in an edge table of mask + 1 slots (keys -1: empty), or of the empty slot where
 * it would go */
static inline uint64_t
pm_slot(const int64_t *keys, uint64_t mask, int64_t key)
{
    uint64_t h = mix64((uint64_t)key) & mask;
    while (keys[h] >= 0 && keys[h] != key)
        h = (h + 1) & mask;
    return h;
}

/* the prefix memo's child of node `parent` by class `cls`, -1: none */
static int32_t
pm_find(const Tables *t, int32_t parent, int32_t cls)
{
    if (t->pm_hmask == 0 || parent < 0)
        return -1;
    int64_t key = pm_key(parent, cls);
    uint64_t h = pm_slot(t->pm_keys, t->pm_hmask, key);
    return t->pm_keys[h] == key ? t->pm_child[h] : -1;
}

/* the edge (parent, cls) -> child into the prefix memo's table (absent before); -1 on MemoryError */
static int
pm_link(Tables *t, int32_t parent, int32_t cls, int32_t child)
{
    if (2 * ((int64_t)child + 1) > (int64_t)t->pm_hmask) { /* (re)built at twice the edges' room */
        uint64_t size = 64;
        while (size < 4 * ((uint64_t)child + 1))
            size *= 2;
        int64_t *keys = malloc(size * sizeof(int64_t));
        int32_t *kids = malloc(size * sizeof(int32_t));
        if (keys == NULL || kids == NULL) {
            free(keys);
            free(kids);
            PyErr_NoMemory();
            return -1;
        }
        memset(keys, 0xff, size * sizeof(int64_t));
        for (uint64_t i = 0; t->pm_hmask != 0 && i <= t->pm_hmask; i++)
            if (t->pm_keys[i] >= 0) {
                uint64_t h = pm_slot(keys, size - 1, t->pm_keys[i]);
                keys[h] = t->pm_keys[i];
                kids[h] = t->pm_child[i];
            }
        free(t->pm_keys);
        free(t->pm_child);
        t->pm_keys = keys;
        t->pm_child = kids;
        t->pm_hmask = size - 1;
    }
    int64_t key = pm_key(parent, cls);
    uint64_t h = pm_slot(t->pm_keys, t->pm_hmask, key);
    t->pm_keys[h] = key;
    t->pm_child[h] = child;
    return 0;
}

/* Whether two memo keys of one length (see memo_key) describe the same stacks: the same number of
 * tops, each with the same symbol and number of parents, and at each position the same parent or
 * one with the same stacks below it (same_paths, up to MEMO_DEPTH levels, MEMO_BUDGET pairs of
 * nodes in all).  A text in one field of a loop makes a new node per byte for the field's symbol
 * on the same parents (copies), and the nodes above them differ from the last key's only by those:
 * such keys differ a few levels down.  The comparison stops at the first difference it cannot
 * match. */
#define MEMO_DEPTH 4
#define MEMO_BUDGET 256
static int
same_below(const State *s, const int32_t *a, const int32_t *b, int64_t len)
{
    if (a[0] != b[0])
        return 0;
    int budget = MEMO_BUDGET;
    int64_t q = 1;
    for (int32_t i = 0; i < a[0]; i++) {
        if (q + 2 > len || a[q] != b[q] || a[q + 1] != b[q + 1])
            return 0;
        int32_t plen = a[q + 1];
        q += 2;
        if (q + plen > len)
            return 0;
        for (int32_t k = 0; k < plen; k++, q++)
            if (!same_paths(s, a[q], b[q], MEMO_DEPTH, &budget))
                return 0;
    }
    return q == len;
}

/* The class mask: the memo's row (from_memo set, nothing copied) when the tops' key is the last
 * fill's, else written into `row` (words words) and kept as the memo's; NULL on MemoryError. */
static const uint32_t *
class_row(State *s, uint32_t *row)
{
    Tables *t = s->t;
    size_t bytes = (size_t)t->words * sizeof(uint32_t);
    if (s->h_term[s->hn - 1]) {
        memset(row, 0, bytes);
        s->from_memo = 0;
        return row;
    }
    int32_t p = s->h_pnode[s->hn - 1];
    if (p >= 0 && p < t->pm_n) { /* the prefix memo's row: no walk */
        s->prefix_hits++;
        /* the state's own memo is dropped, so that the row update_token finds in place (this one) is
         * never taken for the memo's */
        s->mvalid = 0;
        s->from_memo = 0;
        memset(&s->khint, 0, sizeof(s->khint));
        return t->pm_rows + (int64_t)p * t->words;
    }
    int32_t ntops;
    const int32_t *tops = cur_tops(s, &ntops);
    int64_t max = 0, len = memo_key(s, tops, ntops, &max);
    if (len < 0)
        return NULL;
    if (s->mvalid && s->mkey_len == len) {
        int same = memcmp(s->mkey, t->key, (size_t)len * sizeof(int32_t)) == 0;
        if (!same && same_below(s, s->mkey, t->key, len)) {
            /* the same stacks under other nodes: the key now names these (a rollback checks them) */
            memcpy(s->mkey, t->key, (size_t)len * sizeof(int32_t));
            s->mmax = max;
            same = 1;
        }
        if (same) {
            s->memo_hits++;
            s->from_memo = 1;
            return s->mrow;
        }
    }
    s->mvalid = 0;
    s->from_memo = 0;
    memset(&s->khint, 0, sizeof(s->khint)); /* it was for the memo's row */
    if (fill_walk(s, row, tops, ntops) < 0)
        return NULL;
    if (GROW(s->mkey, s->mkey_cap, len) < 0)
        return NULL;
    if (s->mrow == NULL && (s->mrow = malloc(bytes > 0 ? bytes : 1)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(s->mkey, t->key, (size_t)len * sizeof(int32_t));
    memcpy(s->mrow, row, bytes);
    s->mkey_len = len;
    s->mmax = max;
    s->mvalid = 1;
    s->mgen++;
    return row;
}

/* the class mask into row[0..words) (class_row, the memo's row copied); -1 on MemoryError */
static int
fill_row(State *s, uint32_t *row)
{
    const uint32_t *r = class_row(s, row);
    if (r == NULL)
        return -1;
    if (r != row)
        memcpy(row, r, (size_t)s->t->words * sizeof(uint32_t));
    return 0;
}

/* Pairs a walk keeps in a list before it moves them to the table: most walks visit a handful, and
 * a list that fits a few cache lines is found faster than the table, whose slots lie out of the
 * CPU's caches once a wide walk has grown it.  The list is found through SMALL_SLOTS one-byte slots
 * on the stack (a pair's place in the list + 1, by its hash, probed linearly; 0: empty): a search
 * of the list end to end took most of the CPU time of a code grammar's walks of 20-35 pairs.  The
 * limit is SMALL_WALK_MAX; `small_walk(n)` lowers it (tests move every walk across the boundary). */
#define SMALL_WALK_MAX 32
#define SMALL_SLOTS 64 /* a power of two, at least twice SMALL_WALK_MAX */
static int g_small_walk = SMALL_WALK_MAX;

/* Whether a walk takes the chain summaries at its tops (see Chain); `chain_walks(on)` switches them
 * (tests compare both, and walks of the small list's size across its limit); masks do not depend on it. */
static int g_chain_walks = 1;

/* `key` into this walk's (generation w) visited table: 1 when new, 0 when there already, -1 on
 * MemoryError (the table doubles, rehashing this walk's pairs, when half full) */
static int
visit_add(Tables *t, uint64_t key, uint32_t w)
{
    uint64_t h = mix64(key) & t->vmask;
    while (t->visit[h].gen == w) {
        if (t->visit[h].key == key)
            return 0;
        h = (h + 1) & t->vmask;
    }
    t->visit[h].gen = w;
    t->visit[h].key = key;
    if (2 * ++t->vcount > (int64_t)t->vmask) {
        uint64_t nsize = 2 * (t->vmask + 1), nmask = nsize - 1;
        Visit *nv = calloc(nsize, sizeof(Visit));
        if (nv == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (uint64_t i = 0; i <= t->vmask; i++)
            if (t->visit[i].gen == w) {
                uint64_t j = mix64(t->visit[i].key) & nmask;
                while (nv[j].gen == w)
                    j = (j + 1) & nmask;
                nv[j] = t->visit[i];
            }
        free(t->visit);
        t->visit = nv;
        t->vmask = nmask;
    }
    return 1;
}

/* The walk of the stack below `tops` through the domain automaton: the class mask.  It goes level
 * by level (the pairs one edge further down), so that the memory of a level's pairs -- their nodes,
 * states, parent lists, the parents' nodes -- is requested together before it is read: a walk
 * whose tables and stack were evicted by other work between two fills waits for a few rounds of
 * cache misses instead of one per pair.  The pairs visited, and so the mask, do not depend on the
 * order. */
static int
fill_walk(State *s, uint32_t *row, const int32_t *tops, int32_t ntops)
{
    Tables *t = s->t;
    memset(row, 0, (size_t)t->words * sizeof(uint32_t));
    uint32_t w = ++t->walk_id;
    if (w == 0) {
        memset(t->set_stamp, 0, (size_t)(t->nsets > 0 ? t->nsets : 1) * sizeof(uint32_t));
        memset(t->visit, 0, (size_t)(t->vmask + 1) * sizeof(Visit));
        w = t->walk_id = 1;
    }
    int64_t nhits = 0, n = 0, pairs = 0, chained = 0, dense = 0;
    uint64_t small[SMALL_WALK_MAX];
    uint8_t slot[SMALL_SLOTS];
    memset(slot, 0, sizeof slot);
    const int limit = g_small_walk;
    int nsmall = 0; /* limit + 1: the walk's pairs are in the table */
    t->vcount = 0;
    /* a level: n (node, state) pairs in stack[0 .. 2n), each state already past its node's symbol */
    if (GROW(t->stack, t->stack_cap, 2 * (int64_t)ntops + 2) < 0)
        return -1;
    const Node *nodes = s->nodes;
    for (int32_t i = 0; i < ntops; i++) {
        int32_t v = tops[i];
        if (v == 0)
            continue;
        int32_t d = dom_child(t, 0, nodes[v].sym);
        if (d < 0)
            continue;
        int32_t tn = nodes[v].tn;
        if (tn >= 0 && g_chain_walks && nodes[v].plen == 1) {
            const Chain *ch = &t->chain[tn];
            int32_t low = v - ch->len; /* the node made for the chain's leaf, if it is one */
            if (ch->len > 0 && low > 0 && nodes[low].tn == ch->leaf) {
                for (int32_t k = ch->outs; k < ch->outs + ch->nouts; k++) {
                    int32_t o = t->chain_outs[k];
                    PREFETCH(&t->set_bits_at[o]); /* read when the sets are ORed into the row */
                    if (t->set_stamp[o] != w) {
                        t->set_stamp[o] = w;
                        t->hits[nhits++] = o;
                    }
                }
                chained += ch->len;
                if (ch->end < 0)
                    continue;
                v = low;
                d = ch->end;
            }
        }
        t->stack[2 * n] = v;
        t->stack[2 * n + 1] = d;
        n++;
    }
    while (n) {
        int32_t *st = t->stack;
        for (int64_t i = 0; i < n; i++) {
            PREFETCH(&nodes[st[2 * i]]);
            PREFETCH(&t->dstates[st[2 * i + 1]]);
        }
        /* the level's new pairs: their outputs, and those with edges kept in stack[0 .. 2m) */
        int64_t m = 0, below = 0;
        for (int64_t i = 0; i < n; i++) {
            int32_t v = st[2 * i], d = st[2 * i + 1];
            uint64_t key = ((uint64_t)(uint32_t)v << 32) | (uint32_t)d;
            if (nsmall <= limit) { /* a small walk: its pairs in a list, found by their slots */
                uint32_t h = (uint32_t)mix64(key) & (SMALL_SLOTS - 1);
                while (slot[h] != 0 && small[slot[h] - 1] != key)
                    h = (h + 1) & (SMALL_SLOTS - 1);
                if (slot[h] != 0)
                    continue;
                if (nsmall < limit) {
                    small[nsmall++] = key;
                    slot[h] = (uint8_t)nsmall;
                } else { /* it outgrew the list: the pairs so far into the table, then this one */
                    for (int j = 0; j < nsmall; j++)
                        if (visit_add(t, small[j], w) < 0)
                            return -1;
                    nsmall = limit + 1;
                    if (visit_add(t, key, w) < 0)
                        return -1;
                }
            } else {
                int added = visit_add(t, key, w);
                if (added < 0)
                    return -1;
                if (added == 0)
                    continue;
            }
            pairs++;
            const DState *ds = &t->dstates[d];
            int32_t o = ds->out;
            if (o >= 0 && t->set_stamp[o] != w) {
                PREFETCH(&t->set_bits_at[o]);
                t->set_stamp[o] = w;
                t->hits[nhits++] = o;
            }
            if (ds->deg == 0 || nodes[v].plen == 0)
                continue;
            if (nodes[v].plen == 1)
                PREFETCH(&nodes[nodes[v].p0]);
            else
                PREFETCH(s->arena + nodes[v].poff);
            if (ds->deg > 1)
                PREFETCH(&t->dedges[ds->a]);
            below += nodes[v].plen;
            st[2 * m] = v;
            st[2 * m + 1] = d;
            m++;
        }
        for (int64_t i = 0; i < m; i++) {
            const Node *nv = &nodes[st[2 * i]];
            if (nv->plen > 1) /* one parent: asked for above */
                for (int32_t k = 0; k < nv->plen; k++)
                    PREFETCH(&nodes[s->arena[nv->poff + k]]);
        }
        /* the next level after them, then moved to the front */
        if (GROW(t->stack, t->stack_cap, 2 * (m + below)) < 0)
            return -1;
        st = t->stack;
        int64_t q = 2 * m;
        for (int64_t i = 0; i < m; i++) {
            int32_t v = st[2 * i], d = st[2 * i + 1];
            int32_t len = nodes[v].plen;
            const int32_t *par = len == 1 ? &nodes[v].p0 : s->arena + nodes[v].poff;
            if (dense_first(t, d) >= 0)
                dense += len;
            for (int32_t k = 0; k < len; k++) {
                int32_t u = par[k];
                if (u == 0)
                    continue;
                int32_t d2 = dom_child(t, d, nodes[u].sym);
                if (d2 >= 0) {
                    st[q++] = u;
                    st[q++] = d2;
                }
            }
        }
        n = (q - 2 * m) / 2;
        memmove(st, st + 2 * m, (size_t)(q - 2 * m) * sizeof(int32_t));
    }
    t->last_pairs = pairs;
    t->last_chained = chained;
    t->last_dense = dense;
    int32_t words = t->words;
    for (int64_t i = 0; i < nhits; i++) {
        int32_t o = t->hits[i];
        int64_t at = t->set_bits_at[o];
        if (at >= 0) {
            const uint32_t *b = t->set_bits + at;
            for (int32_t k = 0; k < words; k++)
                row[k] |= b[k];
        } else {
            for (int32_t k = t->set_start[o]; k < t->set_start[o + 1]; k++) {
                int32_t cl = t->set_class[k];
                row[cl >> 5] |= (uint32_t)1 << (cl & 31);
            }
        }
    }
    if (t->stop_class >= 0 && ntops > 0 && tops[0] == 0)
        row[t->stop_class >> 5] |= (uint32_t)1 << (t->stop_class & 31);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Python methods                                                                        */

/* accept_bytes with the bytes of a buffer object: 1, 0 or -1 (an error set) */
static int
accept_buffer(State *s, PyObject *data)
{
    Py_buffer v;
    if (PyObject_GetBuffer(data, &v, PyBUF_SIMPLE) < 0)
        return -1;
    int r = accept_bytes(s, (const uint8_t *)v.buf, v.len);
    PyBuffer_Release(&v);
    return r;
}

static PyObject *
State_accept_bytes(State *s, PyObject *arg)
{
    int r = accept_buffer(s, arg);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* accept_class(data, cls): accept_bytes(data), the token being one of class cls: the state follows
 * the prefix memo while its path is there */
static PyObject *
State_accept_class(State *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "accept_class(data, cls)");
        return NULL;
    }
    long cls = PyLong_AsLong(args[1]);
    if (cls == -1 && PyErr_Occurred())
        return NULL;
    if (cls < 0 || cls >= s->t->num_classes) {
        PyErr_Format(PyExc_ValueError, "class %ld is outside 0..%d", cls, s->t->num_classes - 1);
        return NULL;
    }
    int r = accept_buffer(s, args[0]);
    if (r < 0)
        return NULL;
    if (r) {
        int64_t i = s->hn - 1;
        s->h_eid[i] = (int32_t)cls;
        s->h_pnode[i] = pm_find(s->t, s->h_pnode[i - 1], (int32_t)cls);
    }
    return PyBool_FromLong(r);
}

/* remember(max_nodes): the current state's class mask into the tables' prefix memo, under the path
 * of classes from the start that reached it, while the memo has fewer than max_nodes nodes.
 * Returns its node (>= 0; also when it was there), or -1: not stored (the memo is full, the state
 * is terminated, or its path is not known: a token accepted by bytes alone, a parent not stored,
 * a compacted history). */
static PyObject *
State_remember(State *s, PyObject *arg)
{
    long most = PyLong_AsLong(arg);
    if (most == -1 && PyErr_Occurred())
        return NULL;
    Tables *t = s->t;
    int64_t i = s->hn - 1;
    int32_t p = s->h_pnode[i];
    if (p >= 0 && p < t->pm_n)
        return PyLong_FromLong(p);
    int root = i == 0 && p == 0 && t->pm_n == 0;
    int32_t parent = i > 0 ? s->h_pnode[i - 1] : -1, cls = s->h_eid[i];
    if (s->h_term[i] || t->pm_n >= most || t->pm_n >= INT32_MAX - 1 ||
        !(root || (i > 0 && parent >= 0 && parent < t->pm_n && cls >= 0)))
        return PyLong_FromLong(-1);
    size_t bytes = (size_t)(t->words > 0 ? t->words : 1) * sizeof(uint32_t);
    if (t->crow == NULL && (t->crow = malloc(bytes)) == NULL)
        return PyErr_NoMemory();
    const uint32_t *row = class_row(s, t->crow);
    if (row == NULL)
        return NULL;
    if (t->pm_n >= t->pm_cap) {
        int64_t cap = t->pm_cap > 0 ? 2 * t->pm_cap : 16;
        uint32_t *rows = realloc(t->pm_rows, (size_t)cap * bytes);
        if (rows == NULL)
            return PyErr_NoMemory();
        t->pm_rows = rows;
        t->pm_cap = cap;
    }
    int32_t node = t->pm_n;
    if (!root && pm_link(t, parent, cls, node) < 0)
        return NULL;
    memcpy(t->pm_rows + (int64_t)node * t->words, row, (size_t)t->words * sizeof(uint32_t));
    t->pm_n = node + 1;
    s->h_pnode[i] = node;
    return PyLong_FromLong(node);
}

static PyObject *
State_accept_stop(State *s, PyObject *Py_UNUSED(ignored))
{
    if (!stop_allowed(s))
        Py_RETURN_FALSE;
    Tables *t = s->t;
    int32_t n;
    const int32_t *tops = cur_tops(s, &n);
    /* copied out first: growing the tops arena may move `tops` */
    if (GROW(t->tops_a, t->tops_a_cap, n) < 0)
        return NULL;
    memcpy(t->tops_a, tops, (size_t)n * sizeof(int32_t));
    if (history_push(s, t->tops_a, n, 1) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *
State_rollback(State *s, PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (k < 0 || k > s->hn - 1) {
        PyErr_Format(PyExc_ValueError, "cannot roll back %zd tokens: %zd were accepted", k, (Py_ssize_t)(s->hn - 1));
        return NULL;
    }
    if (k) {
        s->hn -= k;
        s->nn = s->h_nodes[s->hn - 1];
        s->an = s->h_arena[s->hn - 1];
        s->tn = s->h_toff[s->hn - 1] + s->h_ntops[s->hn - 1];
        if (s->mmax >= s->nn) /* a node the memo names is gone (see memo_key) */
            s->mvalid = 0;
    }
    Py_RETURN_NONE;
}

static PyObject *
State_reset(State *s, PyObject *Py_UNUSED(ignored))
{
    if (state_reset(s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
State_fill(State *s, PyObject *arg)
{
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (v.len != (Py_ssize_t)s->t->words * 4) {
        PyErr_Format(PyExc_ValueError, "class row must have %d int32 words", s->t->words);
        PyBuffer_Release(&v);
        return NULL;
    }
    int r = fill_row(s, (uint32_t *)v.buf);
    PyBuffer_Release(&v);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* compact(keep): forget all but the last `keep` accepted tokens.  The history entries before
   them are dropped (rollback reaches back `keep` tokens at most), the nodes that no kept entry's
   tops reach are freed, and the kept nodes are renumbered in their order (so every kept entry's
   nodes stay below its node count) with their parents copied into a fresh, dense arena. */
static PyObject *
State_compact(State *s, PyObject *arg)
{
    Py_ssize_t keep = PyLong_AsSsize_t(arg);
    if (keep == -1 && PyErr_Occurred())
        return NULL;
    if (keep < 0) {
        PyErr_SetString(PyExc_ValueError, "keep must be >= 0");
        return NULL;
    }
    int64_t first = s->hn - 1 - (int64_t)keep; /* first kept history entry */
    if (first <= 0)
        Py_RETURN_NONE;
    int64_t nn = s->nn;
    int32_t *newid = malloc((size_t)nn * sizeof(int32_t));
    int32_t *stack = malloc((size_t)nn * sizeof(int32_t));
    int64_t *below = malloc((size_t)(nn + 1) * sizeof(int64_t)); /* kept nodes with a smaller id */
    if (newid == NULL || stack == NULL || below == NULL) {
        free(newid);
        free(stack);
        free(below);
        return PyErr_NoMemory();
    }
    for (int64_t i = 0; i < nn; i++)
        newid[i] = -1;
    int64_t sp = 0;
    newid[0] = 0; /* the bottom always stays */
    for (int64_t j = first; j < s->hn; j++) {
        const int32_t *tops = s->tarena + s->h_toff[j];
        for (int32_t i = 0; i < s->h_ntops[j]; i++)
            if (newid[tops[i]] < 0) {
                newid[tops[i]] = 0;
                stack[sp++] = tops[i];
            }
    }
    while (sp > 0) {
        int32_t v = stack[--sp];
        const int32_t *par = s->arena + s->nodes[v].poff;
        for (int32_t i = 0; i < s->nodes[v].plen; i++)
            if (newid[par[i]] < 0) {
                newid[par[i]] = 0;
                stack[sp++] = par[i];
            }
    }
    int64_t kept = 0, an = 0;
    for (int64_t i = 0; i < nn; i++) {
        below[i] = kept;
        if (newid[i] >= 0) {
            newid[i] = (int32_t)kept++;
            an += s->nodes[i].plen;
        }
    }
    below[nn] = kept;
    int32_t *arena = malloc((size_t)(an > 0 ? an : 1) * sizeof(int32_t));
    if (arena == NULL) {
        free(newid);
        free(stack);
        free(below);
        return PyErr_NoMemory();
    }
    int64_t off = 0;
    for (int64_t i = 0; i < nn; i++) { /* ascending: node newid[i] <= i is written after it was read */
        if (newid[i] < 0)
            continue;
        Node v = s->nodes[i];
        const int32_t *par = s->arena + v.poff;
        for (int32_t k = 0; k < v.plen; k++)
            arena[off + k] = newid[par[k]];
        Node *w = &s->nodes[newid[i]];
        w->sym = v.sym;
        w->tn = v.tn;
        set_parents(w, arena, (int32_t)off, v.plen); /* off <= the old arena's size */
        off += v.plen;
    }
    free(s->arena);
    s->arena = arena;
    s->acap = an > 0 ? an : 1;
    /* history: entries first .. hn-1 become 0 .. ; their tops renumbered (order kept) */
    int64_t tn = 0;
    for (int64_t j = first; j < s->hn; j++) {
        int64_t d = j - first;
        const int32_t *tops = s->tarena + s->h_toff[j];
        int32_t nt = s->h_ntops[j];
        for (int32_t i = 0; i < nt; i++) /* tn <= h_toff[j]: never overwrites what is still read */
            s->tarena[tn + i] = newid[tops[i]];
        int64_t nodes_then = below[s->h_nodes[j] < nn ? s->h_nodes[j] : nn];
        s->h_toff[d] = tn;
        s->h_ntops[d] = nt;
        s->h_term[d] = s->h_term[j];
        s->h_pnode[d] = s->h_pnode[j];
        s->h_eid[d] = s->h_eid[j];
        s->h_nodes[d] = nodes_then;
        s->h_arena[d] = nodes_then < kept ? s->nodes[nodes_then].poff : an;
        tn += nt;
    }
    s->hn -= first;
    s->tn = tn;
    s->nn = kept;
    s->mvalid = 0; /* renumbered: the memo's key names other nodes */
    s->an = an;
    memset(s->nstamp, 0, (size_t)s->ncap * sizeof(uint32_t));
    s->mark = 0;
    free(newid);
    free(stack);
    free(below);
    Py_RETURN_NONE;
}

/* fill_into(bitmask, index): the class mask into row index of a C-contiguous int32 (rows, words) buffer */
static PyObject *
State_fill_into(State *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fill_into(bitmask, index)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t row_bytes = (Py_ssize_t)s->t->words * 4;
    if (row_bytes <= 0 || v.len % row_bytes != 0) {
        PyErr_Format(PyExc_ValueError, "bitmask rows must have %d int32 words", s->t->words);
        PyBuffer_Release(&v);
        return NULL;
    }
    if (index < 0 || index >= v.len / row_bytes) {
        PyErr_Format(PyExc_IndexError, "row %zd is outside a bitmask of %zd rows", index, v.len / row_bytes);
        PyBuffer_Release(&v);
        return NULL;
    }
    int r = fill_row(s, (uint32_t *)v.buf + index * s->t->words);
    PyBuffer_Release(&v);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static const CExpandAPI *g_expand_api;

/* the expansion kernel's C API, imported on first use; NULL with ImportError */
static const CExpandAPI *
expand_api(void)
{
    if (g_expand_api == NULL) {
        const CExpandAPI *api = PyCapsule_Import(CEXPAND_CAPSULE, 0);
        if (api == NULL)
            return NULL;
        if (api->version != CEXPAND_API_VERSION) {
            PyErr_SetString(PyExc_ImportError, "the expansion kernel's C API has another version");
            return NULL;
        }
        g_expand_api = api;
    }
    return g_expand_api;
}

/* forget the row update_token may patch */
static void
forget_row(State *s)
{
    if (s->r_view.obj != NULL)
        PyBuffer_Release(&s->r_view); /* sets r_view.obj to NULL */
    Py_CLEAR(s->r_kernel);
    s->r_index = -1;
    s->r_mgen = 0;
}

/* fill_token(kernel, fallback, bitmask, index=0): the class mask, expanded by the expansion Kernel
 * `kernel` (through its row cache) into row index of a writable C-contiguous 2-D int32 bitmask
 * (native byte order) of the kernel's token width, in one call: so under the GIL throughout, and
 * no other thread uses the kernel in between.  Any other argument -- another object or layout, an
 * index that is not a plain int in range, keyword arguments -- goes to fallback(bitmask, index)
 * instead (with the arguments as given), which raises the typed error or takes the general
 * path.  Returns None.  The row written is remembered for update_token (fallback: forgotten).
 *
 * update_token(...), the same arguments: when bitmask is the object, and index the row, of this
 * state's last fill_token / update_token, with the same kernel, the row is taken to hold what that
 * call wrote (the caller's promise) and only what changed is written (nothing when the class mask
 * is the same); otherwise as fill_token. */
static PyObject *
fused_fill(State *s, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames, int update)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const char *usage = update ? "update_token(kernel, fallback, bitmask, index=0)"
                               : "fill_token(kernel, fallback, bitmask, index=0)";
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || nargs < 3 || nargs > 4) { /* the fallback sorts them out */
        forget_row(s);
        return PyObject_Vectorcall(args[1], args + 2, (size_t)(nargs - 2), kwnames);
    }
    if (expand_api() == NULL)
        return NULL;
    Tables *t = s->t;
    Py_ssize_t cw, nw;
    if (g_expand_api->sizes(args[0], &cw, &nw) < 0)
        return NULL;
    if (cw != t->words) {
        PyErr_Format(PyExc_ValueError, "the kernel's class rows have %zd words, the tables' %d", cw, t->words);
        return NULL;
    }
    PyObject *bitmask = args[2], *index_obj = nargs == 4 ? args[3] : NULL;
    Py_ssize_t index = 0;
    if (index_obj != NULL) {
        if (!PyLong_CheckExact(index_obj))
            goto fallback;
        index = PyLong_AsSsize_t(index_obj);
        if (index == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto fallback;
        }
    }
    if (s->r_view.obj != bitmask) { /* a new bitmask: exported, checked and kept */
        Py_buffer v;
        if (PyObject_GetBuffer(bitmask, &v, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            goto fallback;
        }
        const char *f = v.format ? v.format : "B";
        int int32 = v.itemsize == 4 && (!strcmp(f, "i") || !strcmp(f, "=i") || (sizeof(long) == 4 && !strcmp(f, "l")));
        if (!int32 || v.ndim != 2 || v.shape[1] != nw) {
            PyBuffer_Release(&v);
            goto fallback;
        }
        forget_row(s);
        s->r_view = v;
    }
    if (index < 0 || index >= s->r_view.shape[0] || s->r_view.shape[1] != nw)
        goto fallback;
    size_t crow_bytes = (size_t)(cw > 0 ? cw : 1) * sizeof(uint32_t);
    if ((t->crow == NULL && (t->crow = malloc(crow_bytes)) == NULL) ||
        (s->r_crow == NULL && (s->r_crow = malloc(crow_bytes)) == NULL)) {
        forget_row(s);
        return PyErr_NoMemory();
    }
    uint32_t *out = (uint32_t *)s->r_view.buf + index * nw;
    int over = update && s->r_kernel == args[0] && s->r_index == index;
    const uint32_t *crow = class_row(s, t->crow);
    if (crow != NULL && over && s->from_memo && s->r_mgen != 0 && s->r_mgen == s->mgen) {
        s->rows_kept++; /* the memo's row, the one last written there: nothing to do */
        Py_RETURN_NONE;
    }
    int plan = -1;
    if (crow != NULL)
        plan = over ? g_expand_api->expand_row_over(args[0], crow, out, s->r_crow, &s->khint, s->from_memo)
                    : g_expand_api->expand_row(args[0], crow, out, &s->khint, s->from_memo);
    if (plan < 0) {
        forget_row(s);
        return NULL;
    }
    memcpy(s->r_crow, crow, (size_t)cw * sizeof(uint32_t));
    s->r_mgen = s->h_term[s->hn - 1] ? 0 : s->mgen; /* class_row left its row in the memo */
    if (s->r_kernel != args[0]) {
        Py_INCREF(args[0]);
        Py_XSETREF(s->r_kernel, args[0]);
    }
    s->r_index = index;
    Py_RETURN_NONE;
fallback:;
    forget_row(s);
    PyObject *call[2] = {bitmask, index_obj != NULL ? index_obj : NULL};
    if (index_obj == NULL) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL)
            return NULL;
        call[1] = zero;
        PyObject *r = PyObject_Vectorcall(args[1], call, 2, NULL);
        Py_DECREF(zero);
        return r;
    }
    return PyObject_Vectorcall(args[1], call, 2, NULL);
}

static PyObject *
State_fill_token(State *s, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    return fused_fill(s, args, nargsf, kwnames, 0);
}

static PyObject *
State_update_token(State *s, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    return fused_fill(s, args, nargsf, kwnames, 1);
}

/* bind(kernel, fallback): the first two arguments of fill_token / update_token, kept for
 * fill_bound / update_bound (a matcher binds those as its fill methods: one call from Python
 * into fused_fill, no partial in between).  The state holds both; neither may hold the state
 * (the fallback holds its matcher weakly), or the three would wait for the cyclic collector. */
static PyObject *
State_bind(State *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bind(kernel, fallback)");
        return NULL;
    }
    Py_ssize_t cw, nw;
    if (expand_api() == NULL || g_expand_api->sizes(args[0], &cw, &nw) < 0)
        return NULL;
    if (!PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind(kernel, fallback): fallback must be callable");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(s->b_kernel, args[0]);
    Py_XSETREF(s->b_fallback, args[1]);
    Py_RETURN_NONE;
}

/* fill_bound(bitmask, index=0) / update_bound(...): fill_token / update_token(kernel, fallback,
 * bitmask, index) with the bound kernel and fallback */
static PyObject *
bound_fill(State *s, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames, int update)
{
    PyObject *kernel = s->b_kernel, *fallback = s->b_fallback;
    if (kernel == NULL) {
        PyErr_SetString(PyExc_TypeError, "the state is not bound: bind(kernel, fallback) first");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t all = nargs + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0);
    if (all > 4) /* the fallback's own error */
        return PyObject_Vectorcall(fallback, args, (size_t)nargs, kwnames);
    PyObject *argv[6] = {kernel, fallback};
    memcpy(argv + 2, args, (size_t)all * sizeof(PyObject *));
    Py_INCREF(kernel); /* a fallback may bind others while it runs */
    Py_INCREF(fallback);
    PyObject *r = fused_fill(s, argv, nargs + 2, kwnames, update);
    Py_DECREF(kernel);
    Py_DECREF(fallback);
    return r;
}

static PyObject *
State_fill_bound(State *s, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    return bound_fill(s, args, nargsf, kwnames, 0);
}

static PyObject *
State_update_bound(State *s, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    return bound_fill(s, args, nargsf, kwnames, 1);
}

static PyObject *
State_forget_row(State *s, PyObject *Py_UNUSED(ignored))
{
    forget_row(s);
    Py_RETURN_NONE;
}

static PyObject *
State_stop_allowed(State *s, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(stop_allowed(s));
}

static PyObject *
State_is_terminated(State *s, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(s->h_term[s->hn - 1]);
}

static PyObject *
State_tops(State *s, PyObject *Py_UNUSED(ignored))
{
    int32_t n;
    const int32_t *tops = cur_tops(s, &n);
    PyObject *r = PyTuple_New(n);
    if (r == NULL)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong(tops[i]);
        if (x == NULL) {
            Py_DECREF(r);
            return NULL;
        }
        PyTuple_SET_ITEM(r, i, x);
    }
    return r;
}

static PyObject *
State_node(State *s, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= s->nn) {
        PyErr_Format(PyExc_IndexError, "node %zd does not exist", i);
        return NULL;
    }
    PyObject *par = PyTuple_New(s->nodes[i].plen);
    if (par == NULL)
        return NULL;
    for (int32_t k = 0; k < s->nodes[i].plen; k++) {
        PyObject *x = PyLong_FromLong(s->arena[s->nodes[i].poff + k]);
        if (x == NULL) {
            Py_DECREF(par);
            return NULL;
        }
        PyTuple_SET_ITEM(par, k, x);
    }
    return Py_BuildValue("(iN)", s->nodes[i].sym, par);
}

static PyObject *
State_info(State *s, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "nodes", (long long)s->nn, "parents",
                         (long long)s->an, "position", (long long)(s->hn - 1), "last_pairs",
                         (long long)s->t->last_pairs, "last_chained", (long long)s->t->last_chained,
                         "last_dense", (long long)s->t->last_dense,
                         "memo_hits", s->memo_hits, "rows_kept", s->rows_kept, "prefix_hits", s->prefix_hits,
                         "prefixes", (long long)s->t->pm_n);
}

/* fill_batch(states, bitmask): row i of a C-contiguous int32 (batch, words) bitmask from states[i] */
static PyObject *
fill_batch(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fill_batch(states, bitmask)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "states must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer v;
    if (PyObject_GetBuffer(args[1], &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t words = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(items[i], &StateType) || ((State *)items[i])->t == NULL) {
            PyErr_SetString(PyExc_TypeError, "states must be initialised State objects");
            goto done;
        }
        Py_ssize_t wi = ((State *)items[i])->t->words;
        if (words >= 0 && wi != words) {
            PyErr_SetString(PyExc_ValueError, "states of different widths");
            goto done;
        }
        words = wi;
    }
    if (n > 0 && v.len < n * words * 4) {
        PyErr_SetString(PyExc_ValueError, "bitmask has too few rows or words for the states");
        goto done;
    }
    if (n > 0 && v.len % (words * 4) != 0) {
        PyErr_SetString(PyExc_ValueError, "bitmask rows must have the class width");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (fill_row((State *)items[i], (uint32_t *)v.buf + i * words) < 0)
            goto done;
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&v);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef State_methods[] = {
    {"accept_bytes", (PyCFunction)State_accept_bytes, METH_O,
     "accept_bytes(data) -> bool\n\nRead a token's bytes; False (state unchanged) if no stack survives."},
    {"accept_class", (PyCFunction)(void (*)(void))State_accept_class, METH_FASTCALL,
     "accept_class(data, cls) -> bool\n\naccept_bytes(data) for a token of class cls: the state follows the\n"
     "tables' prefix memo while the classes accepted from the start are a path of it."},
    {"remember", (PyCFunction)State_remember, METH_O,
     "remember(max_nodes) -> int\n\nStore the class mask in the tables' prefix memo under the classes\n"
     "accepted from the start (accept_class), while it has fewer than max_nodes nodes: the node, or -1\n"
     "when not stored.  Every State of the tables whose path reaches that node then fills from it."},
    {"accept_stop", (PyCFunction)State_accept_stop, METH_NOARGS,
     "accept_stop() -> bool\n\nAccept a stop token (terminates) when the prefix is in the language."},
    {"rollback", (PyCFunction)State_rollback, METH_O, "rollback(num_tokens)\n\nUndo the last accepted tokens."},
    {"reset", (PyCFunction)State_reset, METH_NOARGS, "reset()\n\nBack to the empty prefix."},
    {"fill", (PyCFunction)State_fill, METH_O,
     "fill(row)\n\nWrite the class mask into a writable int32 buffer of ceil(num_classes/32) words."},
    {"compact", (PyCFunction)State_compact, METH_O,
     "compact(keep)\n\nForget all but the last keep accepted tokens and free the nodes no kept token reaches."},
    {"fill_into", (PyCFunction)(void (*)(void))State_fill_into, METH_FASTCALL,
     "fill_into(bitmask, index)\n\nWrite the class mask into row index of a writable C-contiguous int32 bitmask."},
    {"fill_token", (PyCFunction)(void (*)(void))State_fill_token, METH_FASTCALL | METH_KEYWORDS,
     "fill_token(kernel, fallback, bitmask, index=0)\n\nThe class mask expanded by the expansion Kernel\n"
     "`kernel` (formalgram_cfgzip.expand._cexpand, through its row cache) into row index of a\n"
     "writable C-contiguous 2-D int32 token bitmask, in one call; any other bitmask or index is\n"
     "handed to fallback(bitmask, index).  The row is remembered for update_token."},
    {"update_token", (PyCFunction)(void (*)(void))State_update_token, METH_FASTCALL | METH_KEYWORDS,
     "update_token(kernel, fallback, bitmask, index=0)\n\nAs fill_token; when bitmask and index are the\n"
     "object and row of this state's last fill_token / update_token (same kernel), the row must still\n"
     "hold what that call wrote, and only what changed is written."},
    {"bind", (PyCFunction)(void (*)(void))State_bind, METH_FASTCALL,
     "bind(kernel, fallback)\n\nKeep the first two arguments of fill_token / update_token for\n"
     "fill_bound / update_bound."},
    {"fill_bound", (PyCFunction)(void (*)(void))State_fill_bound, METH_FASTCALL | METH_KEYWORDS,
     "fill_bound(bitmask, index=0)\n\nfill_token with the kernel and fallback of bind()."},
    {"update_bound", (PyCFunction)(void (*)(void))State_update_bound, METH_FASTCALL | METH_KEYWORDS,
     "update_bound(bitmask, index=0)\n\nupdate_token with the kernel and fallback of bind()."},
    {"forget_row", (PyCFunction)State_forget_row, METH_NOARGS,
     "forget_row()\n\nForget the row update_token may patch (the next call writes a whole row)."},
    {"stop_allowed", (PyCFunction)State_stop_allowed, METH_NOARGS, "Whether the prefix is in the language."},
    {"is_terminated", (PyCFunction)State_is_terminated, METH_NOARGS, "Whether a stop token was accepted."},
    {"tops", (PyCFunction)State_tops, METH_NOARGS, "The current top nodes, ascending (0: the bottom)."},
    {"node", (PyCFunction)State_node, METH_O, "node(i) -> (symbol, parents)"},
    {"info", (PyCFunction)State_info, METH_NOARGS,
     "Sizes: nodes, parents (arena entries), position, last_pairs (pairs of the last walk of the tables),\n"
     "last_chained (the pairs of that walk that chain summaries stood for, not visited), last_dense (the\n"
     "parents of that walk's pairs whose edge a dense state's bit words gave),\n"
     "memo_hits (fills answered by the memo of the last fill), rows_kept (update_token calls that found\n"
     "the memo's row already in place and wrote nothing), prefix_hits (fills answered by the tables'\n"
     "prefix memo), prefixes (its nodes)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "formalgram_cfgzip.engines.native._cnative.State",
    .tp_doc = PyDoc_STR("State(tables)\n\nOne matcher's graph-structured stack over shared Tables."),
    .tp_basicsize = sizeof(State),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)State_init,
    .tp_dealloc = (destructor)State_dealloc,
    .tp_methods = State_methods,
};

static PyTypeObject TablesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "formalgram_cfgzip.engines.native._cnative.Tables",
    .tp_doc = PyDoc_STR("Tables(num_symbols, start_symbol, accepts_empty, num_classes, stop_class, byte_class,\n"
                        "       trie_sym, trie_up, trans_key, trans_start, trans_push, edge_start, edge_sym,\n"
                        "       edge_to, out, set_start, set_class)\n\n"
                        "The immutable arrays of one grammar (copied; every index checked)."),
    .tp_basicsize = sizeof(Tables),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tables_init,
    .tp_dealloc = (destructor)Tables_dealloc,
};

static PyObject *
small_walk(PyObject *self, PyObject *arg)
{
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > SMALL_WALK_MAX) {
        PyErr_Format(PyExc_ValueError, "small_walk takes 0..%d pairs, got %ld", SMALL_WALK_MAX, n);
        return NULL;
    }
    int old = g_small_walk;
    g_small_walk = (int)n;
    return PyLong_FromLong(old);
}

/* a module switch set to the truth of arg; returns its previous setting */
static PyObject *
set_switch(int *flag, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    int old = *flag;
    *flag = on;
    return PyBool_FromLong(old);
}

static PyObject *
chain_walks(PyObject *self, PyObject *arg)
{
    (void)self;
    return set_switch(&g_chain_walks, arg);
}

static PyObject *
dense_edges(PyObject *self, PyObject *arg)
{
    (void)self;
    return set_switch(&g_dense_edges, arg);
}

static PyMethodDef module_methods[] = {
    {"fill_batch", (PyCFunction)(void (*)(void))fill_batch, METH_FASTCALL,
     "fill_batch(states, bitmask)\n\nRow i of a C-contiguous int32 bitmask := class mask of states[i]."},
    {"small_walk", (PyCFunction)small_walk, METH_O,
     "small_walk(n) -> previous n\n\nThe pairs a class walk keeps in a list before it moves them to a hash\n"
     "table (0..32, default 32; the masks do not depend on it)."},
    {"dense_edges", (PyCFunction)dense_edges, METH_O,
     "dense_edges(on) -> previous\n\nWhether class walks find a many-edged domain state's edge by its bit\n"
     "words instead of a search of its edge list (default True; the masks do not depend on it)."},
    {"chain_walks", (PyCFunction)chain_walks, METH_O,
     "chain_walks(on) -> previous\n\nWhether walks take the chain summaries at their tops (default True;\n"
     "the masks do not depend on it)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "formalgram_cfgzip.engines.native._cnative",
    "The native mask engine's graph-structured stack and mask walk in C.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cnative(void)
{
    if (PyType_Ready(&TablesType) < 0 || PyType_Ready(&StateType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&TablesType);
    if (PyModule_AddObject(m, "Tables", (PyObject *)&TablesType) < 0) {
        Py_DECREF(&TablesType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&StateType);
    if (PyModule_AddObject(m, "State", (PyObject *)&StateType) < 0) {
        Py_DECREF(&StateType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
