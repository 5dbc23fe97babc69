/*
 * formalgram_cfgzip.search._csearch -- the displacement search over a token trie, in C.
 *
 * The compiled companion of formalgram_cfgzip/search/displacement.py (the reference, whose
 * module docstring explains the search and why it is exact) and of the level-by-level walk
 * of formalgram_cfgzip/search/driver.py (walk_trie).  Plain C99 and the CPython API only.
 *
 * A state is a set of strings  sigma_out . sep . reverse(sigma_in)  stored as a hash-consed
 * trie: node = (final flag, edges sorted by symbol), equal sets have equal ids.  The Python
 * reference stores runs of single-edge nodes as chains; here every node is unrolled, which
 * is the same canonical set (so the partition of the tokens and the number of steps are the
 * same).  Symbols: >= 0 grammar symbols, -1 the plain separator, -(label + 2) a separator
 * recording that sigma_out was emptied by popping a symbol whose set of possible symbols
 * below is the one of `label`.
 *
 *   Search   one GNF grammar's tables (rule tails per (byte class, symbol), the sets of
 *            symbols that may lie below each symbol) and the memo tables of the search
 *            (interned nodes, steps, unions, backtracks, filters, displacement keys), kept
 *            across walks until reset();
 *   walk()   one pass over a token trie given level by level (parents, labels, the tokens
 *            ending at each level), each distinct (parent state, byte class) pair stepped
 *            once per level; writes a dense displacement code per token.
 *
 * Bounds: a walk stops with a status (never a crash) when a set has more than max_states
 * top symbols or the work passes max_work (the caller raises GrammarTooLarge), and when
 * the tables hold more than max_bytes (checked every 64 steps) or pass the walk's cell
 * budget, or a union would nest deeper than max_depth (the caller then runs the Python
 * search, which compacts its tables).  Allocation failure raises MemoryError;
 * KeyboardInterrupt is honoured every few thousand steps.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(_MSC_VER)
#include <intrin.h>
#endif

#define DEAD 0
#define START 1
#define EPS 2
#define SEP (-1)
#define EXPANSION_WORK 40 /* as displacement.EXPANSION_WORK */
#define MAX_DEPTH 20000   /* default deepest union nesting before the walk hands over to Python */
#define DENSE_PAIRS (8 << 20) /* largest (states x classes) table of one level */
#define DENSE_BELOW ((int64_t)64 << 20) /* largest bit-set copy of the distinct below sets */
#define MAX_MEMBERS ((int64_t)1 << 28) /* most members of the distinct below sets together */

enum { ST_OK = 0, ST_CELLS = 1, ST_STATES = 2, ST_WORK = 3, ST_DEEP = 4, ST_MEMORY = 5 };

/* ------------------------------------------------------------------------------------ */
/* growable arrays                                                                       */

/* grow() and GROW(): */
#include "../_cgrow.h"

typedef struct {
    int32_t sym;
    int32_t child;
} Edge;

typedef struct {
    Edge *a;
    int64_t n, cap;
} EdgeVec;

typedef struct {
    int32_t *a;
    int64_t n, cap;
} IntVec;

static inline int
edge_push(EdgeVec *v, int32_t sym, int32_t child)
{
    if (v->n == v->cap && GROW(v->a, v->cap, v->n + 1) < 0)
        return -1;
    v->a[v->n].sym = sym;
    v->a[v->n].child = child;
    v->n++;
    return 0;
}

static inline int
int_push(IntVec *v, int32_t x)
{
    if (v->n == v->cap && GROW(v->a, v->cap, v->n + 1) < 0)
        return -1;
    v->a[v->n++] = x;
    return 0;
}

static inline int
lowest_bit(uint64_t x) /* x != 0 */
{
#if defined(_MSC_VER)
    unsigned long i;
    _BitScanForward64(&i, x);
    return (int)i;
#else
    return __builtin_ctzll(x);
#endif
}

static inline uint64_t
mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* ------------------------------------------------------------------------------------ */
/* int64 -> int64 hash map (keys >= 0; -1 marks an empty slot; absent reads give -1)     */

typedef struct {
    int64_t key, val;
} Slot;

typedef struct {
    Slot *s; /* key and value side by side: one cache line per probe */
    int64_t cap, n;
} Map;

static void
map_free(Map *m)
{
    free(m->s);
    m->s = NULL;
    m->cap = m->n = 0;
}

static int
map_alloc(Map *m, int64_t cap)
{
    Slot *s = malloc((size_t)cap * sizeof(Slot));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t i = 0; i < cap; i++)
        s[i].key = -1;
    m->s = s;
    m->cap = cap;
    m->n = 0;
    return 0;
}

static inline int64_t
map_get(const Map *m, int64_t key)
{
    if (m->cap == 0)
        return -1;
    uint64_t mask = (uint64_t)m->cap - 1;
    uint64_t i = mix64((uint64_t)key) & mask;
    for (;;) {
        int64_t k = m->s[i].key;
        if (k == key)
            return m->s[i].val;
        if (k < 0)
            return -1;
        i = (i + 1) & mask;
    }
}

static int
map_put(Map *m, int64_t key, int64_t val)
{
    if (2 * (m->n + 1) > m->cap) {
        Map bigger;
        if (map_alloc(&bigger, m->cap ? 2 * m->cap : 1024) < 0)
            return -1;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->s[i].key >= 0)
                map_put(&bigger, m->s[i].key, m->s[i].val);
        map_free(m);
        *m = bigger;
    }
    uint64_t mask = (uint64_t)m->cap - 1;
    uint64_t i = mix64((uint64_t)key) & mask;
    while (m->s[i].key >= 0 && m->s[i].key != key)
        i = (i + 1) & mask;
    if (m->s[i].key < 0)
        m->n++;
    m->s[i].key = key;
    m->s[i].val = val;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* the search object                                                                     */

typedef struct {
    PyObject_HEAD
    /* grammar tables (fixed) */
    int32_t n;            /* symbols */
    int32_t ncls;         /* byte classes */
    int64_t words;        /* uint64 words per below set */
    int32_t *below_index; /* symbol -> index of its below set */
    uint64_t *below_sets; /* distinct below sets, `words` words each (NULL when too large) */
    int64_t *mem_off;     /* distinct below set -> its first member in `members` (nsets + 1) */
    int32_t *members;     /* the members of each distinct below set, ascending */
    uint64_t *sym_classes; /* symbol -> the byte classes it has rules for (4 words) */
    int32_t *sep_of;      /* symbol -> its separator symbol (negative) */
    Map rows;             /* c * n + lhs -> (first << 24) | count into row_tails */
    int32_t *row_tails;   /* tail ids */
    int64_t *tail_off;    /* tail id -> offset into tail_sym */
    int32_t *tail_len;
    int32_t *tail_sym;
    int64_t *start_off; /* byte class -> offset into starters (ncls + 1 entries) */
    int32_t *starters;  /* per byte class: the symbols with a rule for it, ascending */
    uint64_t *starter_bits; /* the same as bit sets, `words` words per class */
    uint64_t *classes_below; /* symbol -> the byte classes some symbol below it has rules for
                              * (4 words, 256 bits), computed on first use */
    uint8_t *classes_known;
    int64_t max_states, max_work;
    int max_depth;
    /* interned nodes */
    uint8_t *final;
    int64_t *eoff;
    int32_t *elen;
    uint64_t *nhash;
    int64_t nn, ncap;
    Edge *edges;
    int64_t ne, ecap;
    int32_t *slots; /* open addressing over node ids, -1 empty */
    int64_t scap;
    /* unions: key arrays in ukeys */
    int32_t *ukeys;
    int64_t nk, kcap;
    int64_t *uoff;
    int32_t *ulen;
    uint64_t *uhash;
    int32_t *ures;
    int64_t nu, ucap;
    int32_t *uslots;
    int64_t uscap;
    /* memo tables */
    Map memo;  /* node * ncls + c -> node */
    Map bts;   /* (rev_in * n + last) * ncls + c -> (off << 24) | len into bte */
    Map flt;   /* rev_in * n + z -> node */
    Map belc;  /* y * ncls + c -> (off << 24) | len into zs */
    Map keys;  /* node -> key node */
    Map pops;  /* node -> its popped sequences, reversed (a node) */
    IntVec todo; /* the explicit stack of popped() */
    EdgeVec bte;
    IntVec zs;
    /* scratch (each used by one function that does not nest in itself) */
    EdgeVec sp, bp, us, bl, tmp, kt;
    IntVec ids;
    int64_t *tri; /* (tail, z, rev_in) triples of consume, 3 per entry */
    int64_t tn, tcap;
    /* counters */
    int64_t expansions, work, max_cells, max_bytes, steps_since_check;
    int status;
} Search;

static inline int
below_has(const Search *s, int32_t y, int32_t z)
{
    int64_t k = s->below_index[y];
    if (s->below_sets != NULL) {
        const uint64_t *w = s->below_sets + k * s->words;
        return (int)((w[z >> 6] >> (z & 63)) & 1u);
    }
    int64_t lo = s->mem_off[k], hi = s->mem_off[k + 1]; /* binary search of the members */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (s->members[mid] < z)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->mem_off[k + 1] && s->members[lo] == z;
}

static inline int64_t
cells(const Search *s)
{
    return s->nn + s->memo.n + s->nu + s->flt.n + s->bts.n;
}

/* Bytes held by the growing tables (what the memory budget bounds). */
static int64_t
table_bytes(const Search *s)
{
    int64_t b = s->ncap * (int64_t)(sizeof(uint8_t) + sizeof(int64_t) + sizeof(int32_t) + sizeof(uint64_t));
    b += s->ecap * (int64_t)sizeof(Edge) + s->scap * (int64_t)sizeof(int32_t);
    b += s->kcap * (int64_t)sizeof(int32_t) + s->uscap * (int64_t)sizeof(int32_t);
    b += s->ucap * (int64_t)(sizeof(int64_t) + sizeof(int32_t) + sizeof(uint64_t) + sizeof(int32_t));
    b += (s->memo.cap + s->bts.cap + s->flt.cap + s->belc.cap + s->keys.cap + s->pops.cap) * (int64_t)sizeof(Slot);
    b += s->bte.cap * (int64_t)sizeof(Edge) + s->zs.cap * (int64_t)sizeof(int32_t);
    return b;
}

/* -- nodes ------------------------------------------------------------------------------ */

static inline uint64_t
node_hash(int final, const Edge *e, int32_t m)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)final;
    for (int32_t i = 0; i < m; i++)
        h = mix64(h ^ (((uint64_t)(uint32_t)e[i].sym << 32) | (uint32_t)e[i].child)) + (uint64_t)i;
    return h;
}

/* An open-addressing index (cap a power of two, -1 empty) of the entries first..end-1,
 * placed by their hashes; NULL with MemoryError set on failure. */
static int32_t *
index_slots(const uint64_t *hashes, int64_t first, int64_t end, int64_t cap)
{
    int32_t *slots = malloc((size_t)cap * sizeof(int32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(slots, 0xff, (size_t)cap * sizeof(int32_t));
    uint64_t mask = (uint64_t)cap - 1;
    for (int64_t k = first; k < end; k++) {
        uint64_t i = hashes[k] & mask;
        while (slots[i] >= 0)
            i = (i + 1) & mask;
        slots[i] = (int32_t)k;
    }
    return slots;
}

static int
slots_rehash(Search *s, int64_t cap)
{
    int32_t *slots = index_slots(s->nhash, EPS + 1, s->nn, cap);
    if (slots == NULL)
        return -1;
    free(s->slots);
    s->slots = slots;
    s->scap = cap;
    return 0;
}

/* The node (final, e[0..m)) (edges sorted by symbol, no child DEAD): its canonical id, or -1. */
static int32_t
make_node(Search *s, int final, const Edge *e, int32_t m)
{
    if (m == 0)
        return final ? EPS : DEAD;
    uint64_t h = node_hash(final, e, m);
    uint64_t mask = (uint64_t)s->scap - 1;
    uint64_t i = h & mask;
    for (;;) {
        int32_t id = s->slots[i];
        if (id < 0)
            break;
        if (s->nhash[id] == h && s->elen[id] == m && s->final[id] == final &&
            memcmp(s->edges + s->eoff[id], e, (size_t)m * sizeof(Edge)) == 0)
            return id;
        i = (i + 1) & mask;
    }
    if (s->nn >= INT32_MAX - 1) {
        s->status = ST_CELLS;
        return -1;
    }
    int64_t id = s->nn;
    if (id == s->ncap) {
        int64_t c1 = s->ncap, c2 = s->ncap, c3 = s->ncap, c4 = s->ncap;
        if (GROW(s->final, c1, id + 1) < 0 || GROW(s->eoff, c2, id + 1) < 0 ||
            GROW(s->elen, c3, id + 1) < 0 || GROW(s->nhash, c4, id + 1) < 0)
            return -1;
        s->ncap = c1;
    }
    if (GROW(s->edges, s->ecap, s->ne + m) < 0)
        return -1;
    memcpy(s->edges + s->ne, e, (size_t)m * sizeof(Edge));
    s->final[id] = (uint8_t)final;
    s->eoff[id] = s->ne;
    s->elen[id] = m;
    s->nhash[id] = h;
    s->ne += m;
    s->nn++;
    s->slots[i] = (int32_t)id;
    if (2 * s->nn > s->scap && slots_rehash(s, 2 * s->scap) < 0)
        return -1;
    return (int32_t)id;
}

static inline int32_t
single(Search *s, int32_t sym, int32_t child)
{
    if (child == DEAD)
        return DEAD;
    Edge e = {sym, child};
    return make_node(s, 0, &e, 1);
}

/* {syms[0..len) . w : w in base} */
static int32_t
chain(Search *s, const int32_t *syms, int32_t len, int32_t base)
{
    for (int32_t i = len - 1; i >= 0 && base > 0; i--)
        base = single(s, syms[i], base);
    return base;
}

/* -- unions ----------------------------------------------------------------------------- */

static int
union_rehash(Search *s, int64_t cap)
{
    int32_t *slots = index_slots(s->uhash, 0, s->nu, cap);
    if (slots == NULL)
        return -1;
    free(s->uslots);
    s->uslots = slots;
    s->uscap = cap;
    return 0;
}

static int cmp_edge(const void *a, const void *b)
{
    const Edge *x = a, *y = b;
    if (x->sym != y->sym)
        return x->sym < y->sym ? -1 : 1;
    return (x->child > y->child) - (x->child < y->child);
}

static void
sort_edges(Edge *e, int64_t m)
{
    if (m < 24) {
        for (int64_t i = 1; i < m; i++) {
            Edge x = e[i];
            int64_t j = i;
            while (j > 0 && (e[j - 1].sym > x.sym || (e[j - 1].sym == x.sym && e[j - 1].child > x.child))) {
                e[j] = e[j - 1];
                j--;
            }
            e[j] = x;
        }
    } else {
        qsort(e, (size_t)m, sizeof(Edge), cmp_edge);
    }
}

static int32_t union_ids(Search *s, int64_t off, int32_t k, int depth);

/* Sort v[base..v->n) by (symbol, child) and replace it by one edge per symbol to the union
 * of that symbol's children; returns the number of edges left at base (v->n set after them),
 * -1 on error.  Nested unions push above v->n, so v->a is re-read after each. */
static int64_t
group_edges(Search *s, EdgeVec *v, int64_t base, int depth)
{
    int64_t end = v->n;
    sort_edges(v->a + base, end - base);
    int64_t w = base, i = base;
    while (i < end) {
        int32_t sym = v->a[i].sym;
        int64_t idoff = s->ids.n;
        int32_t last = -1;
        while (i < end && v->a[i].sym == sym) {
            int32_t child = v->a[i].child;
            if (child != DEAD && child != last) {
                if (int_push(&s->ids, child) < 0)
                    return -1;
                last = child;
            }
            i++;
        }
        int32_t cnt = (int32_t)(s->ids.n - idoff);
        int32_t u = cnt == 1 ? s->ids.a[idoff] : union_ids(s, idoff, cnt, depth + 1);
        s->ids.n = idoff;
        if (u < 0)
            return -1;
        if (u != DEAD) {
            v->a[w].sym = sym;
            v->a[w].child = u;
            w++;
        }
    }
    v->n = w;
    return w - base;
}

/* The union of the sets s->ids.a[off..off+k) (ascending, distinct, none DEAD), memoised. */
static int32_t
union_ids(Search *s, int64_t off, int32_t k, int depth)
{
    if (k == 0)
        return DEAD;
    if (k == 1)
        return s->ids.a[off];
    uint64_t h = 0x51ed270b27a5f1c3ULL;
    for (int32_t i = 0; i < k; i++)
        h = mix64(h ^ (uint32_t)s->ids.a[off + i]) + (uint64_t)i;
    uint64_t mask = (uint64_t)s->uscap - 1;
    uint64_t slot = h & mask;
    for (;;) {
        int32_t u = s->uslots[slot];
        if (u < 0)
            break;
        if (s->uhash[u] == h && s->ulen[u] == k &&
            memcmp(s->ukeys + s->uoff[u], s->ids.a + off, (size_t)k * sizeof(int32_t)) == 0)
            return s->ures[u];
        slot = (slot + 1) & mask;
    }
    if (depth > s->max_depth) {
        s->status = ST_DEEP;
        return -1;
    }
    EdgeVec *v = &s->us;
    int64_t base = v->n;
    int final = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t id = s->ids.a[off + i];
        final |= s->final[id];
        int32_t m = s->elen[id];
        if (GROW(v->a, v->cap, v->n + m) < 0)
            return -1;
        memcpy(v->a + v->n, s->edges + s->eoff[id], (size_t)m * sizeof(Edge));
        v->n += m;
    }
    int64_t cnt = group_edges(s, v, base, depth);
    if (cnt < 0)
        return -1;
    int32_t r = make_node(s, final, v->a + base, (int32_t)cnt);
    v->n = base;
    if (r < 0)
        return -1;
    /* remember it (the key may have moved with s->ids: copy by index) */
    int64_t u = s->nu;
    if (u == s->ucap) {
        int64_t c1 = s->ucap, c2 = s->ucap, c3 = s->ucap, c4 = s->ucap;
        if (GROW(s->uoff, c1, u + 1) < 0 || GROW(s->ulen, c2, u + 1) < 0 || GROW(s->uhash, c3, u + 1) < 0 ||
            GROW(s->ures, c4, u + 1) < 0)
            return -1;
        s->ucap = c1;
    }
    if (GROW(s->ukeys, s->kcap, s->nk + k) < 0)
        return -1;
    memcpy(s->ukeys + s->nk, s->ids.a + off, (size_t)k * sizeof(int32_t));
    s->uoff[u] = s->nk;
    s->ulen[u] = k;
    s->uhash[u] = h;
    s->ures[u] = r;
    s->nk += k;
    s->nu++;
    /* the slot found above may be stale after nested unions: probe again */
    mask = (uint64_t)s->uscap - 1;
    slot = h & mask;
    while (s->uslots[slot] >= 0)
        slot = (slot + 1) & mask;
    s->uslots[slot] = (int32_t)u;
    if (2 * s->nu > s->uscap && union_rehash(s, 2 * s->uscap) < 0)
        return -1;
    return r;
}

/* -- transitions ------------------------------------------------------------------------ */

/* Tails of the rules of `lhs` for byte class c: *first into row_tails, count returned. */
static inline int32_t
row_of(const Search *s, int32_t c, int32_t lhs, int64_t *first)
{
    int64_t packed = map_get(&s->rows, (int64_t)c * s->n + lhs);
    if (packed < 0)
        return 0;
    *first = packed >> 24;
    return (int32_t)(packed & 0xffffff);
}

/* The symbols that may lie below y and have a rule for class c, ascending (into s->zs). */
static int32_t
below_starting(Search *s, int32_t y, int32_t c, int64_t *off)
{
    int64_t key = (int64_t)y * s->ncls + c;
    int64_t packed = map_get(&s->belc, key);
    if (packed >= 0) {
        *off = packed >> 24;
        return (int32_t)(packed & 0xffffff);
    }
    int64_t first = s->zs.n;
    const uint64_t *has = s->starter_bits + (int64_t)c * s->words;
    int64_t k = s->below_index[y];
    if (s->below_sets != NULL) {
        const uint64_t *below = s->below_sets + k * s->words;
        for (int64_t w = 0; w < s->words; w++) {
            uint64_t bits = below[w] & has[w];
            while (bits) {
                int32_t z = (int32_t)(w * 64 + lowest_bit(bits));
                bits &= bits - 1;
                if (int_push(&s->zs, z) < 0)
                    return -1;
            }
        }
    } else {
        for (int64_t i = s->mem_off[k]; i < s->mem_off[k + 1]; i++) {
            int32_t z = s->members[i];
            if (((has[z >> 6] >> (z & 63)) & 1u) && int_push(&s->zs, z) < 0)
                return -1;
        }
    }
    int32_t len = (int32_t)(s->zs.n - first);
    if (map_put(&s->belc, key, (first << 24) | len) < 0)
        return -1;
    *off = first;
    return len;
}

/* Whether some symbol that may lie below y has a rule for byte class c. */
static inline int
any_below_starting(Search *s, int32_t y, int32_t c)
{
    uint64_t *bits = s->classes_below + 4 * (int64_t)y;
    if (!s->classes_known[y]) {
        int64_t set = s->below_index[y];
        for (int64_t i = s->mem_off[set]; i < s->mem_off[set + 1]; i++) {
            const uint64_t *of = s->sym_classes + 4 * (int64_t)s->members[i];
            for (int w = 0; w < 4; w++)
                bits[w] |= of[w];
        }
        s->classes_known[y] = 1;
    }
    return (int)((bits[c >> 6] >> (c & 63)) & 1u);
}

/* The strings of rev_in whose first symbol z may lie below (DEAD if none). */
static int32_t
kept_below(Search *s, int32_t rev_in, int32_t z)
{
    int64_t key = (int64_t)rev_in * s->n + z;
    int64_t r = map_get(&s->flt, key);
    if (r >= 0)
        return (int32_t)r;
    int32_t m = s->elen[rev_in];
    s->kt.n = 0;
    for (int32_t i = 0; i < m; i++) {
        Edge e = s->edges[s->eoff[rev_in] + i];
        if (e.sym >= 0 && below_has(s, e.sym, z) && edge_push(&s->kt, e.sym, e.child) < 0)
            return -1;
    }
    int32_t out = s->kt.n == m ? rev_in : make_node(s, 0, s->kt.a, (int32_t)s->kt.n);
    if (out < 0 || map_put(&s->flt, key, out) < 0)
        return -1;
    return out;
}

static int
cmp_tri(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Pop z with a byte of class c for each (z, rev_in) of s->bl (ascending z): add the root
 * edges of  tail . sep . z . rev_in  to out; a tail shared by several z is pushed once in
 * front of the set of all their  z . rev_in. */
static int
consume(Search *s, int32_t c, EdgeVec *out)
{
    s->tn = 0;
    for (int64_t i = 0; i < s->bl.n; i++) {
        int32_t z = s->bl.a[i].sym, rev = s->bl.a[i].child;
        int64_t first = 0;
        int32_t cnt = row_of(s, c, z, &first);
        for (int32_t t = 0; t < cnt; t++) {
            int32_t tid = s->row_tails[first + t];
            if (s->tail_len[tid] == 0) {
                int32_t item = single(s, z, rev);
                if (item < 0 || edge_push(out, s->sep_of[z], item) < 0)
                    return -1;
            } else {
                if (GROW(s->tri, s->tcap, 3 * (s->tn + 1)) < 0)
                    return -1;
                s->tri[3 * s->tn] = tid;
                s->tri[3 * s->tn + 1] = z;
                s->tri[3 * s->tn + 2] = rev;
                s->tn++;
            }
        }
    }
    if (s->tn > 1)
        qsort(s->tri, (size_t)s->tn, 3 * sizeof(int64_t), cmp_tri);
    int64_t i = 0;
    while (i < s->tn) {
        int64_t tid = s->tri[3 * i];
        s->tmp.n = 0;
        while (i < s->tn && s->tri[3 * i] == tid) {
            int32_t z = (int32_t)s->tri[3 * i + 1];
            if ((s->tmp.n == 0 || s->tmp.a[s->tmp.n - 1].sym != z) &&
                edge_push(&s->tmp, z, (int32_t)s->tri[3 * i + 2]) < 0)
                return -1;
            i++;
        }
        int32_t under = make_node(s, 0, s->tmp.a, (int32_t)s->tmp.n);
        if (under < 0)
            return -1;
        under = single(s, SEP, under);
        if (under < 0)
            return -1;
        const int32_t *syms = s->tail_sym + s->tail_off[tid];
        int32_t item = chain(s, syms + 1, s->tail_len[tid] - 1, under);
        if (item < 0 || edge_push(out, syms[0], item) < 0)
            return -1;
    }
    return 0;
}

/* Root edges of the strings reached by popping, with class c, a symbol below `last` from
 * under the separator whose child is rev_in; memoised (into s->bte). */
static int32_t
backtrack(Search *s, int32_t last, int32_t rev_in, int32_t c, int64_t *off)
{
    int64_t key = ((int64_t)rev_in * s->n + last) * s->ncls + c;
    int64_t packed = map_get(&s->bts, key);
    if (packed >= 0) {
        *off = packed >> 24;
        return (int32_t)(packed & 0xffffff);
    }
    int64_t zoff = 0;
    int32_t nz = below_starting(s, last, c, &zoff);
    if (nz < 0)
        return -1;
    s->bl.n = 0;
    for (int32_t i = 0; i < nz; i++) {
        int32_t z = s->zs.a[zoff + i];
        int32_t kept = kept_below(s, rev_in, z);
        if (kept < 0)
            return -1;
        if (kept != DEAD && edge_push(&s->bl, z, kept) < 0)
            return -1;
    }
    s->bp.n = 0;
    if (s->bl.n && consume(s, c, &s->bp) < 0)
        return -1;
    int64_t cnt = group_edges(s, &s->bp, 0, 0);
    if (cnt < 0)
        return -1;
    int64_t first = s->bte.n;
    if (GROW(s->bte.a, s->bte.cap, first + cnt) < 0)
        return -1;
    memcpy(s->bte.a + first, s->bp.a, (size_t)cnt * sizeof(Edge));
    s->bte.n += cnt;
    if (map_put(&s->bts, key, (first << 24) | cnt) < 0)
        return -1;
    *off = first;
    return (int32_t)cnt;
}

/* The set reached from `node` by one byte of class c (memoised); -1 with s->status set or
 * a Python error on failure. */
static int32_t
step(Search *s, int32_t node, int32_t c)
{
    int64_t key = (int64_t)node * s->ncls + c;
    int64_t r = map_get(&s->memo, key);
    if (r >= 0)
        return (int32_t)r;
    EdgeVec *out = &s->sp;
    out->n = 0;
    int64_t scanned = 0;
    if (node == START) {
        s->bl.n = 0;
        for (int64_t i = s->start_off[c]; i < s->start_off[c + 1]; i++)
            if (edge_push(&s->bl, s->starters[i], EPS) < 0)
                return -1;
        if (consume(s, c, out) < 0)
            return -1;
    } else if (node != DEAD) {
        int32_t m = s->elen[node];
        scanned = m;
        if (m > s->max_states) {
            s->status = ST_STATES;
            return -1;
        }
        for (int32_t i = 0; i < m; i++) {
            Edge e = s->edges[s->eoff[node] + i];
            if (e.sym >= 0) { /* pop the top of sigma_out */
                int64_t first = 0;
                int32_t cnt = row_of(s, c, e.sym, &first);
                for (int32_t t = 0; t < cnt; t++) {
                    int32_t tid = s->row_tails[first + t];
                    int32_t len = s->tail_len[tid];
                    if (len > 0) {
                        const int32_t *syms = s->tail_sym + s->tail_off[tid];
                        int32_t item = len > 1 ? chain(s, syms + 1, len - 1, e.child) : e.child;
                        if (item < 0 || edge_push(out, syms[0], item) < 0)
                            return -1;
                    } else { /* sigma_out may now be empty: label its separator */
                        int32_t m2 = s->elen[e.child];
                        for (int32_t j = 0; j < m2; j++) {
                            Edge e2 = s->edges[s->eoff[e.child] + j];
                            if (edge_push(out, e2.sym == SEP ? s->sep_of[e.sym] : e2.sym, e2.child) < 0)
                                return -1;
                        }
                    }
                }
            } else if (e.sym != SEP && any_below_starting(s, -e.sym - 2, c)) {
                /* sigma_out is empty: backtrack below the consumed input */
                int64_t off = 0;
                int32_t cnt = backtrack(s, -e.sym - 2, e.child, c, &off);
                if (cnt < 0)
                    return -1;
                for (int32_t j = 0; j < cnt; j++) {
                    Edge e2 = s->bte.a[off + j];
                    if (edge_push(out, e2.sym, e2.child) < 0)
                        return -1;
                }
            }
        }
    }
    int64_t cnt = group_edges(s, out, 0, 0);
    if (cnt < 0)
        return -1;
    int32_t res = make_node(s, 0, out->a, (int32_t)cnt);
    if (res < 0 || map_put(&s->memo, key, res) < 0)
        return -1;
    s->expansions++;
    s->work += scanned + EXPANSION_WORK;
    if (s->max_work >= 0 && s->work > s->max_work) {
        s->status = ST_WORK;
        return -1;
    }
    if (cells(s) > s->max_cells) {
        s->status = ST_CELLS;
        return -1;
    }
    if (s->max_bytes >= 0 && (s->expansions & 63) == 0 && table_bytes(s) > s->max_bytes) {
        s->status = ST_MEMORY;
        return -1;
    }
    if (++s->steps_since_check >= 4096) {
        s->steps_since_check = 0;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
    return res;
}

/* Sort and deduplicate s->ids.a[off..s->ids.n) in place; returns the count left. */
static int64_t
sort_unique_ids(Search *s, int64_t off)
{
    int32_t *a = s->ids.a + off;
    int64_t k = s->ids.n - off;
    for (int64_t i = 1; i < k; i++) {
        int32_t x = a[i];
        int64_t j = i;
        while (j > 0 && a[j - 1] > x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
    int64_t d = 0;
    for (int64_t i = 0; i < k; i++)
        if (d == 0 || a[d - 1] != a[i])
            a[d++] = a[i];
    s->ids.n = off + d;
    return d;
}

/* The canonical node of a set's displacement: its labelled separators merged into one. */
static int32_t
key_of(Search *s, int32_t node)
{
    int64_t r = map_get(&s->keys, node);
    if (r >= 0)
        return (int32_t)r;
    int32_t m = s->elen[node];
    int64_t idoff = s->ids.n;
    s->kt.n = 0;
    for (int32_t i = 0; i < m; i++) {
        Edge e = s->edges[s->eoff[node] + i];
        if (e.sym >= 0) {
            if (edge_push(&s->kt, e.sym, e.child) < 0)
                return -1;
        } else if (int_push(&s->ids, e.child) < 0) {
            return -1;
        }
    }
    int64_t k = s->ids.n - idoff;
    int32_t out;
    if (k == 0) {
        out = node;
    } else {
        int64_t d = sort_unique_ids(s, idoff); /* children ascending and distinct: the union key */
        int32_t u = union_ids(s, idoff, (int32_t)d, 0);
        s->ids.n = idoff;
        if (u < 0)
            return -1;
        /* (SEP, u) sorts before every symbol >= 0: rebuild as [sep, plain...] */
        EdgeVec *v = &s->tmp;
        v->n = 0;
        if (u != DEAD && edge_push(v, SEP, u) < 0)
            return -1;
        for (int64_t i = 0; i < s->kt.n; i++)
            if (edge_push(v, s->kt.a[i].sym, s->kt.a[i].child) < 0)
                return -1;
        out = make_node(s, s->final[node], v->a, (int32_t)v->n);
        if (out < 0)
            return -1;
    }
    if (map_put(&s->keys, node, out) < 0)
        return -1;
    return out;
}

/* The popped sequences of a set's displacement, reversed: the union of the subtries below
 * the separator edges reachable by sigma_out symbols (memoised; an iterative post-order). */
static int32_t
popped(Search *s, int32_t node)
{
    if (node == DEAD || node == START)
        return DEAD;
    int64_t r = map_get(&s->pops, node);
    if (r >= 0)
        return (int32_t)r;
    s->todo.n = 0;
    if (int_push(&s->todo, node) < 0)
        return -1;
    while (s->todo.n) {
        int32_t n = s->todo.a[s->todo.n - 1];
        if (map_get(&s->pops, n) >= 0) {
            s->todo.n--;
            continue;
        }
        int pending = 0;
        for (int32_t i = 0; i < s->elen[n]; i++) {
            Edge e = s->edges[s->eoff[n] + i];
            if (e.sym >= 0 && map_get(&s->pops, e.child) < 0) {
                if (int_push(&s->todo, e.child) < 0)
                    return -1;
                pending = 1;
            }
        }
        if (pending)
            continue;
        s->todo.n--;
        int64_t idoff = s->ids.n;
        for (int32_t i = 0; i < s->elen[n]; i++) {
            Edge e = s->edges[s->eoff[n] + i];
            int32_t part = e.sym < 0 ? e.child : (int32_t)map_get(&s->pops, e.child);
            if (part != DEAD && int_push(&s->ids, part) < 0)
                return -1;
        }
        int64_t d = sort_unique_ids(s, idoff);
        int32_t u = union_ids(s, idoff, (int32_t)d, 0);
        s->ids.n = idoff;
        if (u < 0 || map_put(&s->pops, n, u) < 0)
            return -1;
    }
    return (int32_t)map_get(&s->pops, node);
}

/* ------------------------------------------------------------------------------------ */
/* construction, reset                                                                   */

static void
free_tables(Search *s)
{
    free(s->final);
    free(s->eoff);
    free(s->elen);
    free(s->nhash);
    free(s->edges);
    free(s->slots);
    free(s->ukeys);
    free(s->uoff);
    free(s->ulen);
    free(s->uhash);
    free(s->ures);
    free(s->uslots);
    free(s->bte.a);
    free(s->zs.a);
    map_free(&s->memo);
    map_free(&s->bts);
    map_free(&s->flt);
    map_free(&s->belc);
    map_free(&s->keys);
    map_free(&s->pops);
    s->final = NULL;
    s->eoff = NULL;
    s->elen = NULL;
    s->nhash = NULL;
    s->edges = NULL;
    s->slots = NULL;
    s->ukeys = NULL;
    s->uoff = NULL;
    s->ulen = NULL;
    s->uhash = NULL;
    s->ures = NULL;
    s->uslots = NULL;
    s->bte.a = NULL;
    s->zs.a = NULL;
    s->nn = s->ncap = s->ne = s->ecap = s->scap = 0;
    s->nk = s->kcap = s->nu = s->ucap = s->uscap = 0;
    s->bte.n = s->bte.cap = s->zs.n = s->zs.cap = 0;
}

static int
init_tables(Search *s)
{
    free_tables(s);
    if (GROW(s->final, s->ncap, 1024) < 0)
        return -1;
    int64_t c2 = 0, c3 = 0, c4 = 0;
    if (GROW(s->eoff, c2, s->ncap) < 0 || GROW(s->elen, c3, s->ncap) < 0 || GROW(s->nhash, c4, s->ncap) < 0)
        return -1;
    for (int i = 0; i < 3; i++) { /* DEAD, START, EPS */
        s->final[i] = (uint8_t)(i == EPS);
        s->eoff[i] = 0;
        s->elen[i] = 0;
        s->nhash[i] = 0;
    }
    s->nn = 3;
    if (slots_rehash(s, 4096) < 0 || union_rehash(s, 4096) < 0)
        return -1;
    if (map_alloc(&s->memo, 4096) < 0 || map_alloc(&s->bts, 1024) < 0 || map_alloc(&s->flt, 1024) < 0 ||
        map_alloc(&s->belc, 1024) < 0 || map_alloc(&s->keys, 1024) < 0 || map_alloc(&s->pops, 1024) < 0)
        return -1;
    return 0;
}

static void
Search_dealloc(Search *s)
{
    free_tables(s);
    map_free(&s->rows);
    free(s->below_index);
    free(s->below_sets);
    free(s->mem_off);
    free(s->members);
    free(s->sym_classes);
    free(s->sep_of);
    free(s->row_tails);
    free(s->tail_off);
    free(s->tail_len);
    free(s->tail_sym);
    free(s->start_off);
    free(s->starters);
    free(s->starter_bits);
    free(s->classes_below);
    free(s->classes_known);
    free(s->sp.a);
    free(s->bp.a);
    free(s->us.a);
    free(s->bl.a);
    free(s->tmp.a);
    free(s->kt.a);
    free(s->ids.a);
    free(s->todo.a);
    free(s->tri);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The sets of symbols that may lie below each symbol, from Python ints (bit z of below[y]:
 * z may lie below y): stored once per distinct set as a sorted member list, and as bit sets
 * too while those fit DENSE_BELOW bytes; with each symbol's index into them and its
 * separator (labelled by the first symbol with the same set). */
static int
read_below(Search *s, PyObject *below, long long dense_below)
{
    const int32_t n = s->n;
    const int64_t words = s->words;
    if (!PyList_Check(below) || PyList_GET_SIZE(below) != n) {
        PyErr_SetString(PyExc_TypeError, "below: a list of one int per symbol");
        return -1;
    }
    s->below_index = malloc((size_t)n * sizeof(int32_t));
    s->sep_of = malloc((size_t)n * sizeof(int32_t));
    s->mem_off = malloc((size_t)(n + 1) * sizeof(int64_t));
    uint64_t *scratch = malloc((size_t)words * sizeof(uint64_t));
    int32_t *mine = malloc((size_t)n * sizeof(int32_t)); /* one set's members */
    int64_t cap = 1024, nsets = 0, mem_cap = 0, nmem = 0;
    while (cap < 2 * (int64_t)n)
        cap *= 2;
    int32_t *slots = malloc((size_t)cap * sizeof(int32_t));
    uint64_t *hashes = malloc((size_t)n * sizeof(uint64_t));
    int32_t *label = malloc((size_t)n * sizeof(int32_t));
    int ok = s->below_index != NULL && s->sep_of != NULL && s->mem_off != NULL && scratch != NULL &&
             mine != NULL && slots != NULL && hashes != NULL && label != NULL;
    if (!ok)
        PyErr_NoMemory();
    else
        memset(slots, 0xff, (size_t)cap * sizeof(int32_t));
    if (ok)
        s->mem_off[0] = 0;
    const uint64_t top = (n % 64) ? (((uint64_t)1 << (n % 64)) - 1) : ~(uint64_t)0;
    for (int32_t y = 0; ok && y < n; y++) {
        PyObject *bits = PyList_GET_ITEM(below, y);
        if (!PyLong_Check(bits)) {
            PyErr_SetString(PyExc_TypeError, "below: a list of one int per symbol");
            ok = 0;
            break;
        }
#if PY_VERSION_HEX >= 0x030D0000
        Py_ssize_t need = PyLong_AsNativeBytes(bits, scratch, (Py_ssize_t)(words * 8),
                                               Py_ASNATIVEBYTES_LITTLE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER |
                                                   Py_ASNATIVEBYTES_REJECT_NEGATIVE);
        if (need < 0 || need > (Py_ssize_t)(words * 8)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "below: a set with symbols out of range");
            ok = 0;
            break;
        }
#else
        if (_PyLong_AsByteArray((PyLongObject *)bits, (unsigned char *)scratch, (size_t)(words * 8), 1, 0) < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "below: a negative set, or one with symbols out of range");
            ok = 0;
            break;
        }
#endif
        if (scratch[words - 1] & ~top) {
            PyErr_SetString(PyExc_ValueError, "below: a set with symbols out of range");
            ok = 0;
            break;
        }
        int32_t count = 0;
        uint64_t h = 0x7f4a7c159e3779b9ULL;
        for (int64_t w = 0; w < words; w++) {
            uint64_t word = scratch[w];
            while (word) {
                int32_t z = (int32_t)(w * 64 + lowest_bit(word));
                word &= word - 1;
                mine[count++] = z;
                h = mix64(h ^ (uint64_t)z) + (uint64_t)count;
            }
        }
        uint64_t at = h & ((uint64_t)cap - 1);
        int32_t found = -1;
        for (;;) {
            int32_t k = slots[at];
            if (k < 0)
                break;
            if (hashes[k] == h && s->mem_off[k + 1] - s->mem_off[k] == count &&
                memcmp(s->members + s->mem_off[k], mine, (size_t)count * sizeof(int32_t)) == 0) {
                found = k;
                break;
            }
            at = (at + 1) & ((uint64_t)cap - 1);
        }
        if (found < 0) {
            if (nmem + count > MAX_MEMBERS) {
                PyErr_SetString(PyExc_ValueError, "the sets of symbols below each symbol are too large");
                ok = 0;
                break;
            }
            if (GROW(s->members, mem_cap, nmem + count + 1) < 0) {
                ok = 0;
                break;
            }
            memcpy(s->members + nmem, mine, (size_t)count * sizeof(int32_t));
            nmem += count;
            found = (int32_t)nsets;
            hashes[nsets] = h;
            label[nsets] = y;
            slots[at] = found;
            nsets++;
            s->mem_off[nsets] = nmem;
        }
        s->below_index[y] = found;
        s->sep_of[y] = -(label[found] + 2);
    }
    if (ok && s->members == NULL && GROW(s->members, mem_cap, 1) < 0)
        ok = 0;
    if (ok && nsets * words * 8 <= dense_below) { /* bit sets too: faster tests */
        s->below_sets = calloc((size_t)(nsets * words > 0 ? nsets * words : 1), sizeof(uint64_t));
        if (s->below_sets == NULL) {
            PyErr_NoMemory();
            ok = 0;
        }
        for (int64_t k = 0; ok && k < nsets; k++)
            for (int64_t i = s->mem_off[k]; i < s->mem_off[k + 1]; i++)
                s->below_sets[k * words + (s->members[i] >> 6)] |= (uint64_t)1 << (s->members[i] & 63);
    }
    free(scratch);
    free(mine);
    free(slots);
    free(hashes);
    free(label);
    return ok ? 0 : -1;
}

/* Search(num_symbols, num_classes, table, below, max_states, max_work, max_depth=MAX_DEPTH,
 *        dense_below=DENSE_BELOW) */
static int
Search_init(Search *s, PyObject *args, PyObject *kwds)
{
    int n, ncls;
    PyObject *table, *below;
    long long max_states, max_work;
    int max_depth = MAX_DEPTH;
    long long dense_below = DENSE_BELOW;
    static char *kwlist[] = {"num_symbols", "num_classes", "table", "below", "max_states", "max_work",
                             "max_depth", "dense_below", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiO!OLL|iL", kwlist, &n, &ncls, &PyDict_Type, &table, &below,
                                     &max_states, &max_work, &max_depth, &dense_below))
        return -1;
    if (max_depth < 1 || max_depth > 1000000) {
        PyErr_SetString(PyExc_ValueError, "max_depth must be in 1..1000000");
        return -1;
    }
    s->max_depth = max_depth;
    if (s->below_index != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Search is initialised once");
        return -1;
    }
    if (n <= 0 || n >= (1 << 20) || ncls <= 0 || ncls > 256) {
        PyErr_SetString(PyExc_ValueError, "bad table sizes");
        return -1;
    }
    s->n = n;
    s->ncls = ncls;
    s->words = (n + 63) / 64;
    s->max_states = max_states;
    s->max_work = max_work;
    s->max_cells = INT64_MAX;
    if (read_below(s, below, dense_below) < 0)
        return -1;
    /* the transition table: distinct tails interned by content */
    int64_t ntail = 0, ocap = 0, lcap = 0, scap = 0, nsym = 0, rcap = 0, ntails_rows = 0;
    int64_t tslots_cap = 1024;
    int32_t *tslots = malloc((size_t)tslots_cap * sizeof(int32_t));
    uint64_t *thash = NULL;
    int64_t thcap = 0;
    int64_t *counts = calloc((size_t)ncls, sizeof(int64_t));
    if (counts == NULL || tslots == NULL) {
        free(counts);
        free(tslots);
        PyErr_NoMemory();
        return -1;
    }
    memset(tslots, 0xff, (size_t)tslots_cap * sizeof(int32_t));
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    int ok = map_alloc(&s->rows, 1024) == 0;
    while (ok && PyDict_Next(table, &pos, &key, &value)) {
        int c, lhs;
        if (!PyTuple_Check(key) || !PyArg_ParseTuple(key, "ii", &c, &lhs) || !PyTuple_Check(value)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "table: (class, symbol) -> tuple of tails");
            ok = 0;
            break;
        }
        if (c < 0 || c >= ncls || lhs < 0 || lhs >= n) {
            PyErr_SetString(PyExc_ValueError, "table: class or symbol out of range");
            ok = 0;
            break;
        }
        Py_ssize_t count = PyTuple_GET_SIZE(value);
        if (count >= (1 << 24)) {
            PyErr_SetString(PyExc_ValueError, "table: too many tails in one row");
            ok = 0;
            break;
        }
        int64_t first = ntails_rows;
        for (Py_ssize_t i = 0; ok && i < count; i++) {
            PyObject *t = PyTuple_GET_ITEM(value, i);
            if (!PyTuple_Check(t)) {
                PyErr_SetString(PyExc_TypeError, "table: a tail is a tuple of symbols");
                ok = 0;
                break;
            }
            Py_ssize_t len = PyTuple_GET_SIZE(t);
            if (GROW(s->tail_sym, scap, nsym + len + 1) < 0) {
                ok = 0;
                break;
            }
            int32_t *syms = s->tail_sym + nsym; /* read into the arena's free end */
            uint64_t h = 0x2545f4914f6cdd1dULL ^ (uint64_t)len;
            for (Py_ssize_t j = 0; j < len; j++) {
                long sym = PyLong_AsLong(PyTuple_GET_ITEM(t, j));
                if (sym == -1 && PyErr_Occurred()) {
                    ok = 0;
                    break;
                }
                if (sym < 0 || sym >= n) {
                    PyErr_SetString(PyExc_ValueError, "table: tail symbol out of range");
                    ok = 0;
                    break;
                }
                syms[j] = (int32_t)sym;
                h = mix64(h ^ (uint64_t)sym) + (uint64_t)j;
            }
            if (!ok)
                break;
            uint64_t mask = (uint64_t)tslots_cap - 1, at = h & mask;
            int64_t tid = -1;
            for (;;) {
                int32_t known = tslots[at];
                if (known < 0)
                    break;
                if (thash[known] == h && s->tail_len[known] == len &&
                    memcmp(s->tail_sym + s->tail_off[known], syms, (size_t)len * sizeof(int32_t)) == 0) {
                    tid = known;
                    break;
                }
                at = (at + 1) & mask;
            }
            if (tid < 0) { /* a new tail: keep its symbols where they were read */
                tid = ntail;
                if (GROW(s->tail_off, ocap, ntail + 1) < 0 || GROW(s->tail_len, lcap, ntail + 1) < 0 ||
                    GROW(thash, thcap, ntail + 1) < 0) {
                    ok = 0;
                    break;
                }
                s->tail_off[ntail] = nsym;
                s->tail_len[ntail] = (int32_t)len;
                thash[ntail] = h;
                tslots[at] = (int32_t)ntail;
                nsym += len;
                ntail++;
                if (2 * ntail > tslots_cap) { /* rehash the tails' table */
                    int32_t *t2 = index_slots(thash, 0, ntail, 2 * tslots_cap);
                    if (t2 == NULL) {
                        ok = 0;
                        break;
                    }
                    free(tslots);
                    tslots = t2;
                    tslots_cap *= 2;
                }
            }
            if (!ok)
                break;
            if (GROW(s->row_tails, rcap, ntails_rows + 1) < 0) {
                ok = 0;
                break;
            }
            s->row_tails[ntails_rows++] = (int32_t)tid;
        }
        if (!ok)
            break;
        if (map_get(&s->rows, (int64_t)c * n + lhs) >= 0) {
            PyErr_SetString(PyExc_ValueError, "table: a row given twice");
            ok = 0;
            break;
        }
        if (count > 0) {
            if (map_put(&s->rows, (int64_t)c * n + lhs, (first << 24) | count) < 0) {
                ok = 0;
                break;
            }
            counts[c]++;
        }
    }
    free(tslots);
    free(thash);
    if (!ok) {
        free(counts);
        return -1;
    }
    if (s->tail_off == NULL) { /* no rules at all: keep the arrays non-NULL */
        if (GROW(s->tail_off, ocap, 1) < 0 || GROW(s->tail_len, lcap, 1) < 0 || GROW(s->tail_sym, scap, 1) < 0 ||
            GROW(s->row_tails, rcap, 1) < 0) {
            free(counts);
            return -1;
        }
    }
    if (GROW(s->tail_sym, scap, nsym + 1) < 0) {
        free(counts);
        return -1;
    }
    /* starters: per class, the symbols with a rule for it, ascending (the row keys, sorted) */
    s->start_off = malloc((size_t)(ncls + 1) * sizeof(int64_t));
    int64_t total = 0;
    for (int c = 0; c < ncls; c++)
        total += counts[c];
    s->starters = malloc((size_t)(total > 0 ? total : 1) * sizeof(int32_t));
    int64_t *row_keys = malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
    if (s->start_off == NULL || s->starters == NULL || row_keys == NULL) {
        free(counts);
        free(row_keys);
        PyErr_NoMemory();
        return -1;
    }
    int64_t nkeys = 0;
    for (int64_t i = 0; i < s->rows.cap; i++)
        if (s->rows.s[i].key >= 0)
            row_keys[nkeys++] = s->rows.s[i].key;
    qsort(row_keys, (size_t)nkeys, sizeof(int64_t), cmp_i64);
    s->start_off[0] = 0;
    for (int c = 0; c < ncls; c++)
        s->start_off[c + 1] = s->start_off[c] + counts[c];
    s->starter_bits = calloc((size_t)(ncls * s->words), sizeof(uint64_t));
    s->classes_below = calloc((size_t)n * 4, sizeof(uint64_t));
    s->classes_known = calloc((size_t)n, 1);
    if (s->starter_bits == NULL || s->classes_below == NULL || s->classes_known == NULL) {
        free(counts);
        free(row_keys);
        PyErr_NoMemory();
        return -1;
    }
    s->sym_classes = calloc((size_t)n * 4, sizeof(uint64_t));
    if (s->sym_classes == NULL) {
        free(counts);
        free(row_keys);
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t i = 0; i < nkeys; i++) {
        int32_t z = (int32_t)(row_keys[i] % n);
        int64_t c = row_keys[i] / n;
        s->starters[i] = z; /* sorted by class, then symbol */
        s->starter_bits[c * s->words + (z >> 6)] |= (uint64_t)1 << (z & 63);
        s->sym_classes[4 * (int64_t)z + (c >> 6)] |= (uint64_t)1 << (c & 63);
    }
    free(row_keys);
    free(counts);
    if (init_tables(s) < 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* the walk over a token trie                                                           */

typedef struct {
    Py_buffer b;
    int held;
} Buf;

static int
get_buf(PyObject *obj, Buf *out, Py_ssize_t item, int writable)
{
    if (PyObject_GetBuffer(obj, &out->b, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    out->held = 1;
    if (out->b.len % item) {
        PyErr_SetString(PyExc_ValueError, "buffer size is not a whole number of items");
        return -1;
    }
    return 0;
}

static void
release(Buf *b)
{
    if (b->held) {
        PyBuffer_Release(&b->b);
        b->held = 0;
    }
}

/* walk(parents, labels, end_positions, end_nodes, class_of, codes, max_cells, max_bytes, domains)
 * -> status; domains: None, or a list that receives popped(node) of each new code, in order */
static PyObject *
Search_walk(Search *s, PyObject *args)
{
    PyObject *parents, *labels, *endpos, *endnodes, *class_obj, *codes_obj, *domains;
    long long max_cells, max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOLLO", &PyList_Type, &parents, &PyList_Type, &labels, &PyList_Type,
                          &endpos, &PyList_Type, &endnodes, &class_obj, &codes_obj, &max_cells, &max_bytes,
                          &domains))
        return NULL;
    if (domains != Py_None && !PyList_Check(domains)) {
        PyErr_SetString(PyExc_TypeError, "domains: None or a list");
        return NULL;
    }
    Py_ssize_t depth = PyList_GET_SIZE(parents);
    if (PyList_GET_SIZE(labels) != depth || PyList_GET_SIZE(endpos) != depth ||
        PyList_GET_SIZE(endnodes) != depth) {
        PyErr_SetString(PyExc_ValueError, "one array per level in each list");
        return NULL;
    }
    Buf cls = {0}, codes = {0};
    int32_t *prev_comp = NULL, *cur_comp = NULL, *code_cache = NULL;
    Edge *pairs = NULL; /* (level stamp, index) per (parent state, class): never cleared */
    int32_t *stamp = NULL, *idx_of = NULL;
    int64_t stamp_cap = 0, pairs_cap = 0, cache_cap = 0, prev_cap = 0, cur_cap = 0;
    IntVec prev_nodes = {0}, cur_nodes = {0};
    Map code_of = {0}, pair_map = {0};
    PyObject *result = NULL;
    s->status = ST_OK;
    s->max_cells = max_cells;
    s->max_bytes = max_bytes;
    s->sp.n = s->bp.n = s->us.n = s->ids.n = 0;
    if (get_buf(class_obj, &cls, 1, 0) < 0 || get_buf(codes_obj, &codes, sizeof(int64_t), 1) < 0)
        goto done;
    const uint8_t *class_of = cls.b.buf;
    Py_ssize_t nlabels = cls.b.len;
    for (Py_ssize_t i = 0; i < nlabels; i++)
        if (class_of[i] >= s->ncls) {
            PyErr_SetString(PyExc_ValueError, "class_of: a class out of range");
            goto done;
        }
    int64_t *out = codes.b.buf;
    Py_ssize_t count = codes.b.len / (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t i = 0; i < count; i++)
        out[i] = -1;
    if (map_alloc(&code_of, 1024) < 0 || map_alloc(&pair_map, 1024) < 0)
        goto done;
    if (int_push(&prev_nodes, START) < 0 || GROW(prev_comp, prev_cap, 1) < 0)
        goto done;
    prev_comp[0] = 0;
    Py_ssize_t prev_live = 1;
    int64_t ncodes = 0;
    int walk_failed = 0;
    const int64_t ncls = s->ncls;
    for (Py_ssize_t k = 0; k < depth && s->status == ST_OK; k++) {
        Buf pb = {0}, lb = {0}, eb = {0}, nb = {0};
        int bad = get_buf(PyList_GET_ITEM(parents, k), &pb, sizeof(int64_t), 0) < 0 ||
                  get_buf(PyList_GET_ITEM(labels, k), &lb, 1, 0) < 0 ||
                  get_buf(PyList_GET_ITEM(endpos, k), &eb, sizeof(int64_t), 0) < 0 ||
                  get_buf(PyList_GET_ITEM(endnodes, k), &nb, sizeof(int64_t), 0) < 0;
        Py_ssize_t live = bad ? 0 : pb.b.len / (Py_ssize_t)sizeof(int64_t);
        if (!bad && lb.b.len != live) {
            PyErr_SetString(PyExc_ValueError, "parents and labels differ in length");
            bad = 1;
        }
        if (!bad && eb.b.len != nb.b.len) {
            PyErr_SetString(PyExc_ValueError, "end_positions and end_nodes differ in length");
            bad = 1;
        }
        if (!bad && GROW(cur_comp, cur_cap, live > 0 ? live : 1) < 0)
            bad = 1;
        const int64_t *P = bad ? NULL : pb.b.buf;
        const uint8_t *L = bad ? NULL : lb.b.buf;
        int64_t np = prev_nodes.n;
        int dense = !bad && np * ncls <= DENSE_PAIRS;
        if (!bad && dense && np * ncls > pairs_cap) {
            int64_t old = pairs_cap;
            if (GROW(pairs, pairs_cap, np * ncls) < 0)
                bad = 1;
            else
                for (int64_t i = old; i < pairs_cap; i++)
                    pairs[i].sym = -1;
        } else if (!bad && !dense) {
            map_free(&pair_map);
            int64_t cap = 1024;
            while (cap < 4 * (int64_t)live)
                cap *= 2;
            if (map_alloc(&pair_map, cap) < 0)
                bad = 1;
        }
        cur_nodes.n = 0;
        for (Py_ssize_t j = 0; !bad && j < live; j++) {
            int64_t p = P[j];
            if (p < 0 || p >= prev_live || L[j] >= nlabels) {
                PyErr_SetString(PyExc_ValueError, "trie: a parent or label out of range");
                bad = 1;
                break;
            }
            int64_t pc = prev_comp[p];
            int64_t pair = pc * ncls + class_of[L[j]];
            int64_t idx = dense ? (pairs[pair].sym == (int32_t)k ? pairs[pair].child : -1) : map_get(&pair_map, pair);
            if (idx < 0) {
                int32_t node = prev_nodes.a[pc];
                if (node != DEAD)
                    node = step(s, node, class_of[L[j]]);
                if (node < 0) {
                    bad = 1;
                    break;
                }
                if (node >= stamp_cap) {
                    int64_t old = stamp_cap, c2 = stamp_cap;
                    if (GROW(stamp, stamp_cap, (int64_t)node + 1) < 0 || GROW(idx_of, c2, stamp_cap) < 0) {
                        bad = 1;
                        break;
                    }
                    memset(stamp + old, 0xff, (size_t)(stamp_cap - old) * sizeof(int32_t));
                }
                if (stamp[node] != (int32_t)k) {
                    stamp[node] = (int32_t)k;
                    idx_of[node] = (int32_t)cur_nodes.n;
                    if (int_push(&cur_nodes, node) < 0) {
                        bad = 1;
                        break;
                    }
                }
                idx = idx_of[node];
                if (dense) {
                    pairs[pair].sym = (int32_t)k;
                    pairs[pair].child = (int32_t)idx;
                }
                else if (map_put(&pair_map, pair, idx) < 0) {
                    bad = 1;
                    break;
                }
            }
            cur_comp[j] = (int32_t)idx;
        }
        /* the tokens that end at this level */
        if (!bad) {
            Py_ssize_t ne = eb.b.len / (Py_ssize_t)sizeof(int64_t);
            const int64_t *E = nb.b.buf, *POS = eb.b.buf;
            if (GROW(code_cache, cache_cap, cur_nodes.n + 1) < 0)
                bad = 1;
            else
                memset(code_cache, 0, (size_t)(cur_nodes.n + 1) * sizeof(int32_t));
            for (Py_ssize_t i = 0; !bad && i < ne; i++) {
                if (E[i] < 0 || E[i] >= live || POS[i] < 0 || POS[i] >= count) {
                    PyErr_SetString(PyExc_ValueError, "trie: an ending node or position out of range");
                    bad = 1;
                    break;
                }
                int32_t idx = cur_comp[E[i]];
                int64_t code = (int64_t)code_cache[idx] - 2; /* the cache holds code + 2, 0 unset */
                if (code == -2) {
                    int32_t node = cur_nodes.a[idx];
                    code = -1;
                    if (node != DEAD) {
                        int32_t key = key_of(s, node);
                        if (key < 0) {
                            bad = 1;
                            break;
                        }
                        code = map_get(&code_of, key);
                        if (code < 0) {
                            code = ncodes++;
                            if (map_put(&code_of, key, code) < 0) {
                                bad = 1;
                                break;
                            }
                            if (domains != Py_None) {
                                int32_t root = popped(s, node);
                                PyObject *num = root < 0 ? NULL : PyLong_FromLong(root);
                                int failed = num == NULL || PyList_Append(domains, num) < 0;
                                Py_XDECREF(num);
                                if (failed) {
                                    bad = 1;
                                    break;
                                }
                            }
                        }
                    }
                    code_cache[idx] = (int32_t)(code + 2);
                }
                out[POS[i]] = code;
            }
        }
        release(&pb);
        release(&lb);
        release(&eb);
        release(&nb);
        if (bad) {
            walk_failed = 1;
            break;
        }
        /* this level becomes the previous one */
        int32_t *t = prev_comp;
        prev_comp = cur_comp;
        cur_comp = t;
        int64_t tc = prev_cap;
        prev_cap = cur_cap;
        cur_cap = tc;
        IntVec tv = prev_nodes;
        prev_nodes = cur_nodes;
        cur_nodes = tv;
        prev_live = live;
    }
    if (PyErr_Occurred())
        goto done;
    if (s->status == ST_OK && walk_failed) {
        PyErr_SetString(PyExc_SystemError, "displacement walk failed without a reason");
        goto done;
    }
    result = PyLong_FromLong(s->status);
done:
    release(&cls);
    release(&codes);
    free(prev_comp);
    free(cur_comp);
    free(pairs);
    free(code_cache);
    free(stamp);
    free(idx_of);
    free(prev_nodes.a);
    free(cur_nodes.a);
    map_free(&code_of);
    map_free(&pair_map);
    return result;
}

static int
node_arg(Search *s, PyObject *arg, int32_t *node)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= s->nn) {
        PyErr_SetString(PyExc_ValueError, "not a node of this search's tables");
        return -1;
    }
    *node = (int32_t)v;
    return 0;
}

static PyObject *
Search_edges(Search *s, PyObject *arg)
{
    int32_t node;
    if (node_arg(s, arg, &node) < 0)
        return NULL;
    int32_t m = s->elen[node];
    PyObject *out = PyTuple_New(m);
    if (out == NULL)
        return NULL;
    for (int32_t i = 0; i < m; i++) {
        Edge e = s->edges[s->eoff[node] + i];
        PyObject *pair = Py_BuildValue("(ii)", e.sym, e.child);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

static PyObject *
Search_is_final(Search *s, PyObject *arg)
{
    int32_t node;
    if (node_arg(s, arg, &node) < 0)
        return NULL;
    return PyBool_FromLong(s->final[node]);
}

static PyObject *
Search_popped(Search *s, PyObject *arg)
{
    int32_t node;
    if (node_arg(s, arg, &node) < 0)
        return NULL;
    s->ids.n = s->us.n = 0;
    int32_t r = popped(s, node);
    if (r < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "popped sequences nested too deep for the kernel");
        return NULL;
    }
    return PyLong_FromLong(r);
}

/* Never guess the given symbols as a token's first stack top or below a popped symbol (the
 * chain symbols that formalgram_cfgzip/search/symmetry.py shows need not be guessed): they
 * leave the per-class starter lists and bit sets; the memo tables are emptied. */
static PyObject *
Search_skip_guesses(Search *s, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "skip_guesses takes a sequence of symbols");
    if (seq == NULL)
        return NULL;
    uint64_t *drop = calloc((size_t)s->words, sizeof(uint64_t));
    if (drop == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < k; i++) {
        long z = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (z == -1 && PyErr_Occurred()) {
            free(drop);
            Py_DECREF(seq);
            return NULL;
        }
        if (z < 0 || z >= s->n) {
            free(drop);
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "skip_guesses: a symbol is out of range");
            return NULL;
        }
        drop[z >> 6] |= (uint64_t)1 << (z & 63);
    }
    Py_DECREF(seq);
    int64_t w = 0;
    for (int c = 0; c < s->ncls; c++) {
        int64_t from = s->start_off[c], to = s->start_off[c + 1];
        s->start_off[c] = w;
        for (int64_t i = from; i < to; i++) {
            int32_t z = s->starters[i];
            if ((drop[z >> 6] >> (z & 63)) & 1u)
                s->starter_bits[(int64_t)c * s->words + (z >> 6)] &= ~((uint64_t)1 << (z & 63));
            else
                s->starters[w++] = z;
        }
    }
    s->start_off[s->ncls] = w;
    free(drop);
    if (init_tables(s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Search_reset(Search *s, PyObject *Py_UNUSED(ignored))
{
    if (init_tables(s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Search_get_expansions(Search *s, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(s->expansions);
}

static PyObject *
Search_get_work(Search *s, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(s->work);
}

static PyObject *
Search_get_max_work(Search *s, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(s->max_work);
}

static int
Search_set_max_work(Search *s, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "max_work cannot be deleted");
        return -1;
    }
    long long w = PyLong_AsLongLong(value);
    if (w == -1 && PyErr_Occurred())
        return -1;
    s->max_work = w;
    return 0;
}

static PyObject *
Search_get_size(Search *s, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(cells(s));
}

static PyObject *
Search_get_bytes(Search *s, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(table_bytes(s));
}

/* ------------------------------------------------------------------------------------ */
/* the domain automaton: search/domains.py's domain_automaton (the reference, whose       */
/* docstring defines it), the same subset construction of the reversed tries below the    */
/* domain roots, the same numbering of states, edges and class sets                        */

typedef struct {
    IntVec pool;    /* the members of every set, one set after the other, in id order */
    int64_t *off;   /* set id -> its first member in pool */
    int32_t *len;
    uint64_t *hash;
    int64_t n, cap; /* sets, capacity of off/len/hash */
    int32_t *slots; /* open addressing over set ids, -1 empty */
    int64_t scap;
} SetTable;

static void
settab_free(SetTable *t)
{
    free(t->pool.a);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static uint64_t
hash_ints(const int32_t *a, int64_t n)
{
    uint64_t h = mix64(0x9e3779b97f4a7c15ULL ^ (uint64_t)n);
    for (int64_t i = 0; i < n; i++)
        h = mix64(h ^ (uint64_t)(uint32_t)a[i]);
    return h;
}

static int
settab_rehash(SetTable *t)
{
    int64_t cap = t->scap ? 2 * t->scap : 1024;
    int32_t *slots = malloc((size_t)cap * sizeof(int32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t i = 0; i < cap; i++)
        slots[i] = -1;
    uint64_t mask = (uint64_t)cap - 1;
    for (int64_t id = 0; id < t->n; id++) {
        uint64_t i = t->hash[id] & mask;
        while (slots[i] >= 0)
            i = (i + 1) & mask;
        slots[i] = (int32_t)id;
    }
    free(t->slots);
    t->slots = slots;
    t->scap = cap;
    return 0;
}

/* The id of the set a[0 .. n) (ascending, not inside t->pool); *added tells whether it is
 * new.  -1 with MemoryError set on allocation failure. */
static int64_t
settab_intern(SetTable *t, const int32_t *a, int64_t n, int *added)
{
    if (2 * (t->n + 1) > t->scap && settab_rehash(t) < 0)
        return -1;
    uint64_t h = hash_ints(a, n);
    uint64_t mask = (uint64_t)t->scap - 1;
    uint64_t i = h & mask;
    for (int32_t id; (id = t->slots[i]) >= 0; i = (i + 1) & mask) {
        if (t->hash[id] == h && t->len[id] == n &&
            (n == 0 || memcmp(t->pool.a + t->off[id], a, (size_t)n * sizeof(int32_t)) == 0)) {
            *added = 0;
            return id;
        }
    }
    if (t->n == t->cap) { /* the three arrays grow alike */
        int64_t c1 = t->cap, c2 = t->cap, c3 = t->cap;
        if (GROW(t->off, c1, t->n + 1) < 0 || GROW(t->len, c2, t->n + 1) < 0 || GROW(t->hash, c3, t->n + 1) < 0)
            return -1;
        t->cap = c1;
    }
    if (GROW(t->pool.a, t->pool.cap, t->pool.n + n) < 0)
        return -1;
    int64_t id = t->n++;
    t->off[id] = t->pool.n;
    t->len[id] = (int32_t)n;
    t->hash[id] = h;
    if (n)
        memcpy(t->pool.a + t->pool.n, a, (size_t)n * sizeof(int32_t));
    t->pool.n += n;
    t->slots[i] = (int32_t)id;
    *added = 1;
    return id;
}

static int
cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int64_t *a;
    int64_t n, cap;
} LongVec;

static inline int
long_push(LongVec *v, int64_t x)
{
    if (v->n == v->cap && GROW(v->a, v->cap, v->n + 1) < 0)
        return -1;
    v->a[v->n++] = x;
    return 0;
}

static PyObject *
bytes_of(const void *a, int64_t n, size_t item)
{
    return PyBytes_FromStringAndSize(n ? (const char *)a : "", (Py_ssize_t)(n * (int64_t)item));
}

enum { DOM_OK = 0, DOM_STATES = 1, DOM_EDGES = 2 };

static PyObject *
Search_domain_automaton(Search *s, PyObject *args)
{
    PyObject *roots_obj;
    long long max_states, max_edges;
    if (!PyArg_ParseTuple(args, "OLL", &roots_obj, &max_states, &max_edges))
        return NULL;
    PyObject *seq = PySequence_Fast(roots_obj, "roots must be a sequence of ints");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nk = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL;
    int status = DOM_OK;
    LongVec pairs = {0}, rev = {0}, keys = {0};
    IntVec glob = {0}, todo = {0}, finals = {0}, scratch = {0}, edge_start = {0}, edge_sym = {0}, edge_to = {0},
           out = {0};
    Map loc = {0};
    int64_t *in_off = NULL, *cls_off = NULL;
    int32_t *in_sym = NULL, *in_par = NULL, *cls = NULL;
    SetTable states = {0}, sets = {0};
    int64_t nl = 0;
    int added = 0;

    /* (root, class) of every class with a root, ascending: the classes at each root */
    for (Py_ssize_t k = 0; k < nk; k++) {
        long r = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
        if (r == -1 && PyErr_Occurred())
            goto done;
        if (r < -1 || r >= s->nn || k > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a domain root is not a node of this search's tables");
            goto done;
        }
        if (r >= 0 && long_push(&pairs, ((int64_t)r << 32) | (int64_t)k) < 0)
            goto done;
    }
    if (pairs.n)
        qsort(pairs.a, (size_t)pairs.n, sizeof(int64_t), cmp_i64);
    /* the tries below the roots: local numbers, final nodes, reversed edges (child, sym, parent) */
    if (map_alloc(&loc, 1024) < 0)
        goto done;
    for (int64_t i = 0; i < pairs.n; i++) {
        int32_t r = (int32_t)(pairs.a[i] >> 32);
        if (map_get(&loc, r) < 0) {
            if (map_put(&loc, r, glob.n) < 0 || int_push(&glob, r) < 0 || int_push(&todo, r) < 0)
                goto done;
        }
    }
    while (todo.n) {
        int32_t node = todo.a[--todo.n];
        if (s->final[node] && int_push(&finals, node) < 0)
            goto done;
        int64_t parent_local = map_get(&loc, node);
        for (int32_t e = 0; e < s->elen[node]; e++) {
            Edge edge = s->edges[s->eoff[node] + e];
            int64_t child_local = map_get(&loc, edge.child);
            if (child_local < 0) {
                child_local = glob.n;
                if (map_put(&loc, edge.child, child_local) < 0 || int_push(&glob, edge.child) < 0 ||
                    int_push(&todo, edge.child) < 0)
                    goto done;
            }
            if (long_push(&rev, child_local) < 0 || long_push(&rev, edge.sym) < 0 ||
                long_push(&rev, parent_local) < 0)
                goto done;
        }
    }
    nl = glob.n;
    /* the reversed edges into each node, and the classes at each node, as offset tables */
    in_off = calloc((size_t)nl + 1, sizeof(int64_t));
    cls_off = calloc((size_t)nl + 1, sizeof(int64_t));
    in_sym = malloc((size_t)(rev.n / 3 + 1) * sizeof(int32_t));
    in_par = malloc((size_t)(rev.n / 3 + 1) * sizeof(int32_t));
    cls = malloc((size_t)(pairs.n + 1) * sizeof(int32_t));
    if (in_off == NULL || cls_off == NULL || in_sym == NULL || in_par == NULL || cls == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; i < rev.n; i += 3)
        in_off[rev.a[i] + 1]++;
    for (int64_t i = 0; i < nl; i++)
        in_off[i + 1] += in_off[i];
    for (int64_t i = 0; i < rev.n; i += 3) {
        int64_t at = in_off[rev.a[i]]++;
        in_sym[at] = (int32_t)rev.a[i + 1];
        in_par[at] = glob.a[rev.a[i + 2]];
    }
    for (int64_t i = nl; i > 0; i--)
        in_off[i] = in_off[i - 1];
    in_off[0] = 0;
    for (int64_t i = 0; i < pairs.n; i++)
        cls_off[map_get(&loc, pairs.a[i] >> 32) + 1]++;
    for (int64_t i = 0; i < nl; i++)
        cls_off[i + 1] += cls_off[i];
    for (int64_t i = 0; i < pairs.n; i++) /* pairs ascending: each node's classes ascending */
        cls[cls_off[map_get(&loc, pairs.a[i] >> 32)]++] = (int32_t)(pairs.a[i] & 0xffffffff);
    for (int64_t i = nl; i > 0; i--)
        cls_off[i] = cls_off[i - 1];
    cls_off[0] = 0;

    /* the subset construction, states numbered as they are found */
    if (finals.n)
        qsort(finals.a, (size_t)finals.n, sizeof(int32_t), cmp_i32);
    if (settab_intern(&states, finals.a, finals.n, &added) < 0 || int_push(&edge_start, 0) < 0)
        goto done;
    for (int64_t i = 0; i < states.n; i++) {
        /* the output: the classes at the state's nodes (each class has one root) */
        scratch.n = 0;
        keys.n = 0;
        for (int32_t m = 0; m < states.len[i]; m++) {
            int64_t local = map_get(&loc, states.pool.a[states.off[i] + m]);
            for (int64_t c = cls_off[local]; c < cls_off[local + 1]; c++)
                if (int_push(&scratch, cls[c]) < 0)
                    goto done;
            for (int64_t e = in_off[local]; e < in_off[local + 1]; e++)
                if (long_push(&keys, ((int64_t)in_sym[e] << 32) | (int64_t)(uint32_t)in_par[e]) < 0)
                    goto done;
        }
        if (scratch.n) {
            qsort(scratch.a, (size_t)scratch.n, sizeof(int32_t), cmp_i32);
            int64_t set = settab_intern(&sets, scratch.a, scratch.n, &added);
            if (set < 0 || int_push(&out, (int32_t)set) < 0)
                goto done;
        } else if (int_push(&out, -1) < 0)
            goto done;
        /* one edge per symbol, to the set of the nodes above (ascending symbols) */
        if (keys.n)
            qsort(keys.a, (size_t)keys.n, sizeof(int64_t), cmp_i64);
        for (int64_t a = 0; a < keys.n;) {
            int32_t sym = (int32_t)(keys.a[a] >> 32);
            scratch.n = 0;
            int64_t b = a;
            for (; b < keys.n && (int32_t)(keys.a[b] >> 32) == sym; b++)
                if (b == a || keys.a[b] != keys.a[b - 1])
                    if (int_push(&scratch, (int32_t)(keys.a[b] & 0xffffffff)) < 0)
                        goto done;
            a = b;
            int64_t j = settab_intern(&states, scratch.a, scratch.n, &added);
            if (j < 0)
                goto done;
            if (added && j >= max_states) {
                status = DOM_STATES;
                break;
            }
            if (int_push(&edge_sym, sym) < 0 || int_push(&edge_to, (int32_t)j) < 0)
                goto done;
        }
        if (status != DOM_OK)
            break;
        if (edge_sym.n > max_edges) {
            status = DOM_EDGES;
            break;
        }
        if (int_push(&edge_start, (int32_t)edge_sym.n) < 0)
            goto done;
    }
    if (status != DOM_OK) {
        result = Py_BuildValue("(i)", status);
        goto done;
    }
    /* the class sets, in id order: their members are the pool itself */
    if (sets.pool.n > INT32_MAX || edge_sym.n > INT32_MAX) {
        result = Py_BuildValue("(i)", DOM_EDGES);
        goto done;
    }
    scratch.n = 0;
    for (int64_t k = 0; k <= sets.n; k++)
        if (int_push(&scratch, (int32_t)(k < sets.n ? sets.off[k] : sets.pool.n)) < 0)
            goto done;
    PyObject *parts[6] = {
        bytes_of(edge_start.a, edge_start.n, sizeof(int32_t)), bytes_of(edge_sym.a, edge_sym.n, sizeof(int32_t)),
        bytes_of(edge_to.a, edge_to.n, sizeof(int32_t)),       bytes_of(out.a, out.n, sizeof(int32_t)),
        bytes_of(scratch.a, scratch.n, sizeof(int32_t)),       bytes_of(sets.pool.a, sets.pool.n, sizeof(int32_t)),
    };
    int ok = 1;
    for (int p = 0; p < 6; p++)
        ok &= parts[p] != NULL;
    if (ok)
        result = Py_BuildValue("(iOOOOOO)", DOM_OK, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]);
    for (int p = 0; p < 6; p++)
        Py_XDECREF(parts[p]);
done:
    Py_DECREF(seq);
    free(pairs.a);
    free(rev.a);
    free(keys.a);
    free(glob.a);
    free(todo.a);
    free(finals.a);
    free(scratch.a);
    free(edge_start.a);
    free(edge_sym.a);
    free(edge_to.a);
    free(out.a);
    map_free(&loc);
    free(in_off);
    free(cls_off);
    free(in_sym);
    free(in_par);
    free(cls);
    settab_free(&states);
    settab_free(&sets);
    return result;
}

static PyMethodDef Search_methods[] = {
    {"walk", (PyCFunction)Search_walk, METH_VARARGS,
     "walk(parents, labels, end_positions, end_nodes, class_of, codes, max_cells, max_bytes, domains) -> status"},
    {"edges", (PyCFunction)Search_edges, METH_O, "The (symbol, child) root edges of a node, ascending."},
    {"is_final", (PyCFunction)Search_is_final, METH_O, "Whether a node's set holds the empty string."},
    {"popped", (PyCFunction)Search_popped, METH_O, "The popped sequences of a set's displacement, reversed."},
    {"domain_automaton", (PyCFunction)Search_domain_automaton, METH_VARARGS,
     "domain_automaton(roots, max_states, max_edges) -> (status,) or (0, six int32 arrays as bytes)"},
    {"reset", (PyCFunction)Search_reset, METH_NOARGS, "Forget every interned node and memo entry."},
    {"skip_guesses", (PyCFunction)Search_skip_guesses, METH_O,
     "Never guess these symbols (a token's first top, a symbol below a popped one); empties the memo."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Search_getset[] = {
    {"expansions", (getter)Search_get_expansions, NULL, "steps computed (memo misses)", NULL},
    {"work", (getter)Search_get_work, NULL, "stack tops scanned plus EXPANSION_WORK per step", NULL},
    {"max_work", (getter)Search_get_max_work, (setter)Search_set_max_work, "work budget, -1 for none", NULL},
    {"size", (getter)Search_get_size, NULL, "nodes plus memo entries", NULL},
    {"table_bytes", (getter)Search_get_bytes, NULL, "bytes held by the growing tables", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SearchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "formalgram_cfgzip.search._csearch.Search",
    .tp_basicsize = sizeof(Search),
    .tp_dealloc = (destructor)Search_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The displacement search of one GNF grammar, with its memo tables.",
    .tp_methods = Search_methods,
    .tp_getset = Search_getset,
    .tp_init = (initproc)Search_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_csearch", "The displacement search over a token trie, in C.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__csearch(void)
{
    if (PyType_Ready(&SearchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SearchType);
    if (PyModule_AddObject(m, "Search", (PyObject *)&SearchType) < 0) {
        Py_DECREF(&SearchType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "OK", ST_OK) < 0 || PyModule_AddIntConstant(m, "CELLS", ST_CELLS) < 0 ||
        PyModule_AddIntConstant(m, "STATES", ST_STATES) < 0 || PyModule_AddIntConstant(m, "WORK", ST_WORK) < 0 ||
        PyModule_AddIntConstant(m, "DEEP", ST_DEEP) < 0 || PyModule_AddIntConstant(m, "MEMORY", ST_MEMORY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
