/* Columnar scanner of a Chrome-trace event array: one pass over the JSON text of whole events, their
 * kept fields written straight into the column store's arrays, no Python object per event.
 *
 * It reproduces the per-event rules of labkit.trace.read.columns.ColumnStore.add_event on the input it
 * accepts, and declines (returns -1, having changed nothing the caller keeps) anything else: text that is
 * not strict JSON, non-ASCII bytes, escapes in a key or in a string whose value it would have to compare, a
 * float in an integer field, an event add_event would skip. The caller then decodes that batch with the
 * general decoders, whose rules define the tables. See labkit/trace/read/scan.py and docs/trace-analyzer.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__) || defined(__APPLE__)
#include <locale.h>
#if defined(__APPLE__)
#include <xlocale.h>
#endif
#define HAVE_STRTOD_L 1
static locale_t c_locale;
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { DECLINE = -1, NO_ROOM = -2 };
enum { T_MISSING, T_NULL, T_INT, T_BIGINT, T_FLOAT, T_STR, T_OBJ, T_OTHER };
enum { KIND_HOST, KIND_RUNTIME, KIND_DEVICE, KIND_IGNORED };
enum { A_CORR, A_STREAM, A_DEVICE, A_BYTES, N_ARGS };
#define MAX_DEPTH 64
#define BIG 1e308

typedef struct { int tag, esc; int64_t i; double d; Py_ssize_t off, len; } Val;
typedef struct { const unsigned char *b; Py_ssize_t n, p; int utf8; } Src;  /* utf8: the text is known valid UTF-8 */

/* ---- strict JSON tokens ---- */

static inline void ws(Src *s) {
    const unsigned char *b = s->b;
    Py_ssize_t p = s->p, n = s->n;
    while (p < n && (b[p] == ' ' || b[p] == '\n' || b[p] == '\r' || b[p] == '\t')) p++;
    s->p = p;
}

static inline int hexdigit(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* At '"': the contents' offset and length; *esc when it holds an escape. Declines control bytes, and bytes
 * beyond ASCII unless the caller has checked the text is UTF-8. */
static int string(Src *s, Py_ssize_t *off, Py_ssize_t *len, int *esc) {
    const unsigned char *b = s->b;
    Py_ssize_t n = s->n, p = s->p + 1, start = p;
    int e = 0;
    for (;;) {
#if defined(__SSE2__)
        const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (p + 16 <= n) {  /* sixteen bytes at a time to the first quote, backslash, control or high byte */
            __m128i v = _mm_loadu_si128((const __m128i *)(b + p));
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                                       _mm_cmplt_epi8(v, space));  /* signed: 0x80-0xff are below 0x20 too */
            int mask = _mm_movemask_epi8(hit);
            if (mask) { p += __builtin_ctz(mask); break; }
            p += 16;
        }
#else
        while (p + 8 <= n) {  /* eight plain bytes at a time: no quote, backslash, control or high byte */
            uint64_t v, q, k;
            memcpy(&v, b + p, 8);
            q = v ^ (ONES * '"');
            k = v ^ (ONES * '\\');
            if ((((q - ONES) & ~q) | ((k - ONES) & ~k) | ((v - ONES * 0x20) & ~v) | v) & HIGHS) break;
            p += 8;
        }
#endif
        if (p >= n) return DECLINE;
        unsigned char c = b[p];
        if (c == '"') break;
        if (c == '\\') {
            if (p + 1 >= n) return DECLINE;
            c = b[p + 1];
            if (c == 'u') {
                if (p + 5 >= n || !hexdigit(b[p + 2]) || !hexdigit(b[p + 3]) || !hexdigit(b[p + 4]) || !hexdigit(b[p + 5]))
                    return DECLINE;
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                p += 2;
            } else {
                return DECLINE;
            }
            e = 1;
            continue;
        }
        if (c < 0x20 || (c >= 0x80 && !s->utf8)) return DECLINE;
        p++;
    }
    *off = start;
    *len = p - start;
    *esc = e;
    s->p = p + 1;
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#if defined(__x86_64__) && LDBL_MANT_DIG == 64
#define HAVE_X87 1
/* powers of ten exact in the x87 format's 64-bit significand (5^27 < 2^64) */
static const long double POW10L[] = {1e0L, 1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L, 1e8L, 1e9L, 1e10L, 1e11L, 1e12L,
                                     1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L,
                                     1e24L, 1e25L, 1e26L, 1e27L};
#endif

/* A JSON number: T_INT (int64), T_BIGINT (an integer beyond int64) or T_FLOAT, the double correctly rounded
 * like Python's float() (Clinger's exact case, else the C library's correctly rounded strtod). */
static int number(Src *s, Val *v, int want) {
    const unsigned char *b = s->b;
    Py_ssize_t n = s->n, p = s->p, st = p;
    uint64_t m = 0;
    int neg = 0, over = 0, isfloat = 0, frac = 0;
    long exp = 0;
    if (b[p] == '-') { neg = 1; p++; }
    if (p >= n || b[p] < '0' || b[p] > '9') return DECLINE;
    if (b[p] == '0') {
        p++;
    } else {
        while (p < n && b[p] >= '0' && b[p] <= '9') {
            if (m < 1000000000000000000ULL) m = m * 10 + (b[p] - '0'); else over = 1;
            p++;
        }
    }
    if (p < n && b[p] == '.') {
        isfloat = 1;
        p++;
        if (p >= n || b[p] < '0' || b[p] > '9') return DECLINE;
        while (p < n && b[p] >= '0' && b[p] <= '9') {
            if (m < 1000000000000000000ULL) { m = m * 10 + (b[p] - '0'); frac++; } else over = 1;
            p++;
        }
    }
    if (p < n && (b[p] == 'e' || b[p] == 'E')) {
        int eneg = 0;
        isfloat = 1;
        p++;
        if (p < n && (b[p] == '+' || b[p] == '-')) { eneg = b[p] == '-'; p++; }
        if (p >= n || b[p] < '0' || b[p] > '9') return DECLINE;
        while (p < n && b[p] >= '0' && b[p] <= '9') {
            if (exp < 100000) exp = exp * 10 + (b[p] - '0');
            p++;
        }
        if (eneg) exp = -exp;
    }
    s->p = p;
    if (!want) return 0;
    if (!isfloat) {
        if (over || m > (uint64_t)INT64_MAX + (uint64_t)neg) { v->tag = T_BIGINT; return 0; }
        v->tag = T_INT;
        v->i = neg ? (int64_t)(0 - m) : (int64_t)m;
        v->d = (double)v->i;
        return 0;
    }
    v->tag = T_FLOAT;
    long e10 = exp - frac;
    if (!over && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)m;
        d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
        v->d = neg ? -d : d;
        return 0;
    }
#ifdef HAVE_X87
    /* up to 19 digits (a timestamp with sub-ns decimals): one x87 operation rounds to 64 bits; rounding that
     * to 53 is the correct rounding unless the dropped 11 bits sit within one unit of the halfway point */
    if (!over && m && e10 >= -27 && e10 <= 27) {
        long double q = e10 < 0 ? (long double)m / POW10L[-e10] : (long double)m * POW10L[e10];
        uint64_t bits;
        memcpy(&bits, &q, 8);  /* the significand, explicit leading bit included */
        unsigned low = (unsigned)(bits & 0x7ff);
        if (low < 0x3ff || low > 0x401) {
            v->d = neg ? -(double)q : (double)q;
            return 0;
        }
    }
#endif
#ifdef HAVE_STRTOD_L
    char tmp[128];
    if (p - st >= (Py_ssize_t)sizeof tmp || !c_locale) return DECLINE;
    memcpy(tmp, b + st, p - st);
    tmp[p - st] = 0;
    v->d = strtod_l(tmp, NULL, c_locale);
    return 0;
#else
    return DECLINE;
#endif
}

static int literal(Src *s, const char *word, Py_ssize_t len) {
    if (s->p + len > s->n || memcmp(s->b + s->p, word, len)) return DECLINE;
    s->p += len;
    return 0;
}

/* Any JSON value, checked and passed over. */
static int skip(Src *s, int depth) {
    Py_ssize_t off, len;
    int esc;
    Val v;
    ws(s);
    if (s->p >= s->n) return DECLINE;
    switch (s->b[s->p]) {
    case '"': return string(s, &off, &len, &esc);
    case 't': return literal(s, "true", 4);
    case 'f': return literal(s, "false", 5);
    case 'n': return literal(s, "null", 4);
    case '{': case '[': {
        unsigned char close = s->b[s->p] == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return DECLINE;
        s->p++;
        ws(s);
        if (s->p < s->n && s->b[s->p] == close) { s->p++; return 0; }
        for (;;) {
            if (close == '}') {
                ws(s);
                if (s->p >= s->n || s->b[s->p] != '"' || string(s, &off, &len, &esc)) return DECLINE;
                ws(s);
                if (s->p >= s->n || s->b[s->p] != ':') return DECLINE;
                s->p++;
            }
            if (skip(s, depth + 1)) return DECLINE;
            ws(s);
            if (s->p >= s->n) return DECLINE;
            if (s->b[s->p] == ',') { s->p++; continue; }
            if (s->b[s->p] == close) { s->p++; return 0; }
            return DECLINE;
        }
    }
    default:
        return number(s, &v, 0);
    }
}

/* A value into a tagged slot: strings, null and numbers kept; true, false, arrays and objects as T_OTHER. */
static int value(Src *s, Val *v) {
    ws(s);
    if (s->p >= s->n) return DECLINE;
    unsigned char c = s->b[s->p];
    if (c == '"') { v->tag = T_STR; return string(s, &v->off, &v->len, &v->esc); }
    if (c == 'n') { v->tag = T_NULL; return literal(s, "null", 4); }
    if (c == '-' || (c >= '0' && c <= '9')) return number(s, v, 1);
    v->tag = T_OTHER;
    return skip(s, 1);
}

/* ---- the rules of columns.int_or ---- */

/* int(text) of a string of printable ASCII (no escapes): spaces, a sign, digits with single underscores
 * between them, spaces; -1 where it is not an int or not int64-sized. DECLINE for other text (int() reads
 * digits and spaces of other scripts too). */
static int int_of_text(const unsigned char *t, Py_ssize_t n, int64_t *out) {
    Py_ssize_t p = 0;
    int neg = 0, over = 0;
    uint64_t m = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (t[k] >= 0x80) return DECLINE;
    *out = -1;
    while (p < n && t[p] == ' ') p++;
    if (p < n && (t[p] == '+' || t[p] == '-')) { neg = t[p] == '-'; p++; }
    if (p >= n || t[p] < '0' || t[p] > '9') return 0;
    for (;;) {
        if (m < 1000000000000000000ULL) m = m * 10 + (t[p] - '0'); else over = 1;
        p++;
        if (p < n && t[p] >= '0' && t[p] <= '9') continue;
        if (p + 1 < n && t[p] == '_' && t[p + 1] >= '0' && t[p + 1] <= '9') { p++; continue; }
        break;
    }
    while (p < n && t[p] == ' ') p++;
    if (p != n || over || m > (uint64_t)INT64_MAX + (uint64_t)neg) return 0;
    *out = neg ? (int64_t)(0 - m) : (int64_t)m;
    return 0;
}

/* int_or(v) of a slot; DECLINE where the slot holds what is not worth reproducing here (a float, an escape). */
static int int_or(const Src *s, const Val *v, int64_t *out) {
    switch (v->tag) {
    case T_INT: *out = v->i; return 0;
    case T_STR:
        if (v->esc) return DECLINE;
        return int_of_text(s->b + v->off, v->len, out);
    case T_FLOAT: return DECLINE;
    default: *out = -1; return 0;  /* missing, null, beyond int64, true/false/arrays/objects */
    }
}

/* ---- strings of one batch, numbered in order of first appearance ---- */

typedef struct { Py_ssize_t off, len; uint64_t h; int esc; } Str;
/* open addressing: slots hold numbers into strs (-1: empty), at most half of them used */
typedef struct { int32_t *slots; Py_ssize_t cap; Str *strs; Py_ssize_t used; } Table;

typedef struct { char *text; Py_ssize_t len; int kind; } KnownCat;
static KnownCat *known;
static Py_ssize_t n_known;

static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    while (n >= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int table_init(Table *t) {
    t->cap = 256;
    t->used = 0;
    t->slots = malloc(t->cap * sizeof(int32_t));
    t->strs = malloc(t->cap / 2 * sizeof(Str));
    if (!t->slots || !t->strs) return DECLINE;
    memset(t->slots, 0xff, t->cap * sizeof(int32_t));
    return 0;
}

static void table_free(Table *t) {
    free(t->slots);
    free(t->strs);
}

static int kind_of(const unsigned char *text, Py_ssize_t len) {
    for (Py_ssize_t k = 0; k < n_known; k++)
        if (known[k].len == len && !memcmp(known[k].text, text, len)) return known[k].kind;
    return KIND_HOST;
}

/* The batch's number of a string, numbering it when new; -1 when out of memory. */
static int32_t intern(Table *t, const unsigned char *b, Py_ssize_t off, Py_ssize_t len, int esc) {
    uint64_t h = hash_bytes(b + off, len);
    Py_ssize_t mask = t->cap - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    for (int32_t id; (id = t->slots[j]) >= 0; j = (j + 1) & mask) {
        const Str *e = &t->strs[id];
        if (e->h == h && e->len == len && !memcmp(b + e->off, b + off, len)) return id;
    }
    if (2 * (t->used + 1) > t->cap) {  /* twice the room, the slots rebuilt */
        Str *strs = realloc(t->strs, t->cap * sizeof(Str));
        int32_t *slots = malloc(2 * t->cap * sizeof(int32_t));
        if (strs) t->strs = strs;
        if (!strs || !slots) { free(slots); return -1; }
        free(t->slots);
        t->slots = slots;
        t->cap *= 2;
        mask = t->cap - 1;
        memset(slots, 0xff, t->cap * sizeof(int32_t));
        for (Py_ssize_t k = 0; k < t->used; k++) {
            Py_ssize_t r = (Py_ssize_t)(t->strs[k].h & (uint64_t)mask);
            while (slots[r] >= 0) r = (r + 1) & mask;
            slots[r] = (int32_t)k;
        }
        for (j = (Py_ssize_t)(h & (uint64_t)mask); slots[j] >= 0; j = (j + 1) & mask) {}
    }
    Str *e = &t->strs[t->used];
    e->off = off; e->len = len; e->h = h; e->esc = esc;
    t->slots[j] = (int32_t)t->used;
    return (int32_t)t->used++;
}

/* ---- the batch ---- */

typedef struct {
    int32_t *cat, *name;
    int64_t *pid, *tid, *stream, *device, *corr, *bytes, *index;
    double *ts, *dur;
    Py_ssize_t room;  /* rows that fit */
} Out;

typedef struct {
    Py_ssize_t events, rows, flows, other;
    int ts_float, ts_missing;
    Table cats, names;
    PyObject *aside;  /* (event, start, end) of metadata events, read by the general decoder */
} Acc;

static int key_is(const unsigned char *k, Py_ssize_t len, const char *word) {
    return (Py_ssize_t)strlen(word) == len && !memcmp(k, word, len);
}

static int bounded_number(const Val *v) {
    return (v->tag == T_INT || v->tag == T_FLOAT) && v->d > -BIG && v->d < BIG;
}

static int event(Src *s, Out *o, Acc *a, int64_t index) {
    Val ph = {0}, cat = {0}, name = {0}, pid = {0}, tid = {0}, ts = {0}, dur = {0}, args = {0}, av[N_ARGS] = {{0}};
    Py_ssize_t start = s->p, off, len;
    unsigned seen = 0;
    int esc;
    s->p++;  /* '{' */
    ws(s);
    if (s->p < s->n && s->b[s->p] == '}') {
        s->p++;
    } else {
        for (;;) {
            ws(s);
            if (s->p >= s->n || s->b[s->p] != '"' || string(s, &off, &len, &esc) || esc) return DECLINE;
            ws(s);
            if (s->p >= s->n || s->b[s->p] != ':') return DECLINE;
            s->p++;
            const unsigned char *k = s->b + off;
            Val *slot = NULL;
            unsigned bit = 0;
            if (len == 2 && key_is(k, len, "ph")) { slot = &ph; bit = 1; }
            else if (len == 3 && key_is(k, len, "cat")) { slot = &cat; bit = 2; }
            else if (len == 4 && key_is(k, len, "name")) { slot = &name; bit = 4; }
            else if (len == 3 && key_is(k, len, "pid")) { slot = &pid; bit = 8; }
            else if (len == 3 && key_is(k, len, "tid")) { slot = &tid; bit = 16; }
            else if (len == 2 && key_is(k, len, "ts")) { slot = &ts; bit = 32; }
            else if (len == 3 && key_is(k, len, "dur")) { slot = &dur; bit = 64; }
            else if (len == 4 && key_is(k, len, "args")) { slot = &args; bit = 128; }
            if (bit & seen) return DECLINE;  /* a repeated key: the last one wins in json; not reproduced */
            seen |= bit;
            if (slot == &args) {
                ws(s);
                if (s->p < s->n && s->b[s->p] == '{') {  /* the object: the keys the columns read */
                    unsigned aseen = 0;
                    args.tag = T_OBJ;
                    s->p++;
                    ws(s);
                    if (s->p < s->n && s->b[s->p] == '}') {
                        s->p++;
                    } else {
                        for (;;) {
                            ws(s);
                            if (s->p >= s->n || s->b[s->p] != '"' || string(s, &off, &len, &esc) || esc) return DECLINE;
                            ws(s);
                            if (s->p >= s->n || s->b[s->p] != ':') return DECLINE;
                            s->p++;
                            const unsigned char *q = s->b + off;
                            int which = -1;
                            if (key_is(q, len, "correlation")) which = A_CORR;
                            else if (key_is(q, len, "stream")) which = A_STREAM;
                            else if (key_is(q, len, "device")) which = A_DEVICE;
                            else if (key_is(q, len, "bytes")) which = A_BYTES;
                            if (which >= 0) {
                                if (aseen & (1u << which)) return DECLINE;
                                aseen |= 1u << which;
                                if (value(s, &av[which])) return DECLINE;
                            } else if (skip(s, 2)) {
                                return DECLINE;
                            }
                            ws(s);
                            if (s->p >= s->n) return DECLINE;
                            if (s->b[s->p] == ',') { s->p++; continue; }
                            if (s->b[s->p] == '}') { s->p++; break; }
                            return DECLINE;
                        }
                    }
                } else if (value(s, &args)) {
                    return DECLINE;
                }
            } else if (slot) {
                if (value(s, slot)) return DECLINE;
            } else if (skip(s, 1)) {
                return DECLINE;
            }
            ws(s);
            if (s->p >= s->n) return DECLINE;
            if (s->b[s->p] == ',') { s->p++; continue; }
            if (s->b[s->p] == '}') { s->p++; break; }
            return DECLINE;
        }
    }
    a->events++;
    if (ts.tag == T_FLOAT) a->ts_float = 1;
    else if (ts.tag == T_MISSING || ts.tag == T_NULL) a->ts_missing = 1;
    char phase = 0;  /* 0: a phase with no rule of its own (counted) */
    if (ph.tag == T_STR) {
        if (ph.esc) return DECLINE;
        if (ph.len == 1) phase = (char)s->b[ph.off];
    }
    if (phase == 's' || phase == 'f' || phase == 't') {
        if (!bounded_number(&ts)) return DECLINE;
        a->flows++;
        return 0;
    }
    if (phase == 'M') {
        PyObject *item = Py_BuildValue("(Lnn)", (long long)index, start, s->p);
        if (!item || PyList_Append(a->aside, item)) { Py_XDECREF(item); return DECLINE; }
        Py_DECREF(item);
        return 0;
    }
    if (phase != 'X') {
        a->other++;
        return 0;
    }
    /* a complete event: the checks add_event skips it on are declines here */
    if (!bounded_number(&ts) || !bounded_number(&dur) || dur.d < 0) return DECLINE;
    if (name.tag != T_STR) return DECLINE;
    if (!(args.tag == T_OBJ || args.tag == T_NULL || args.tag == T_MISSING)) return DECLINE;
    Py_ssize_t coff = 0, clen = 0;  /* no category, or null: the empty string */
    if (cat.tag == T_STR) {
        if (cat.esc) return DECLINE;
        coff = cat.off;
        clen = cat.len;
    } else if (cat.tag != T_MISSING && cat.tag != T_NULL) {
        return DECLINE;
    }
    int kind = kind_of(s->b + coff, clen);
    if (kind == KIND_IGNORED) {  /* the profiler's own span: counted, not kept */
        a->other++;
        return 0;
    }
    int64_t p_, t_, corr = -1, stream = -1, device = -1, bytes = -1;
    if (int_or(s, &pid, &p_) || int_or(s, &tid, &t_)) return DECLINE;
    if (kind != KIND_HOST && int_or(s, &av[A_CORR], &corr)) return DECLINE;
    if (kind == KIND_DEVICE) {
        if (int_or(s, &av[A_STREAM], &stream) || int_or(s, &av[A_BYTES], &bytes)) return DECLINE;
        if (av[A_DEVICE].tag == T_MISSING || av[A_DEVICE].tag == T_NULL) device = p_;
        else if (int_or(s, &av[A_DEVICE], &device)) return DECLINE;
    }
    Py_ssize_t r = a->rows;
    if (r >= o->room) return NO_ROOM;
    int32_t c = intern(&a->cats, s->b, coff, clen, 0);
    int32_t nm = intern(&a->names, s->b, name.off, name.len, name.esc);
    if (c < 0 || nm < 0) return DECLINE;
    o->cat[r] = c; o->name[r] = nm; o->pid[r] = p_; o->tid[r] = t_; o->ts[r] = ts.d; o->dur[r] = dur.d;
    o->stream[r] = stream; o->device[r] = device; o->corr[r] = corr; o->bytes[r] = bytes; o->index[r] = index;
    a->rows = r + 1;
    return 0;
}

/* The batch's strings, as str (the contents as written: the caller decodes those listed in ``escaped``). */
static PyObject *strings(const Src *s, const Table *t) {
    PyObject *out = PyList_New(t->used);
    if (!out) return NULL;
    for (Py_ssize_t k = 0; k < t->used; k++) {
        PyObject *u = PyUnicode_DecodeUTF8((const char *)s->b + t->strs[k].off, t->strs[k].len, "strict");
        if (!u) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, k, u);
    }
    return out;
}

static const char COLUMN_FORMAT[] = "iiqqddqqqqq";  /* cat name pid tid ts dur stream device correlation bytes index */
#define N_COLUMNS 11

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *buffer, *columns;
    Py_ssize_t start, end, at;
    long long first;
    int utf8 = 0;
    if (!PyArg_ParseTuple(args, "OnnLOn|p", &buffer, &start, &end, &first, &columns, &at, &utf8)) return NULL;
    if (!PySequence_Check(columns) || PySequence_Size(columns) != N_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "scan: columns must be the store's 11 arrays");
        return NULL;
    }
    Py_buffer in, col[N_COLUMNS];
    int got = 0, rc = 0;
    PyObject *result = NULL;
    Acc acc;
    Src s = {NULL, 0, 0, 0};
    memset(&acc, 0, sizeof acc);
    if (PyObject_GetBuffer(buffer, &in, PyBUF_SIMPLE)) return NULL;
    Out o;
    void *ptr[N_COLUMNS];
    o.room = PY_SSIZE_T_MAX;
    for (; got < N_COLUMNS; got++) {
        PyObject *c = PySequence_GetItem(columns, got);
        if (!c) goto done;
        rc = PyObject_GetBuffer(c, &col[got], PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
        Py_DECREF(c);
        if (rc) goto done;
        char want = COLUMN_FORMAT[got];
        const char *f = col[got].format ? col[got].format : "B";
        while (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!') f++;
        Py_ssize_t size = want == 'i' ? 4 : 8;
        int ok = col[got].itemsize == size && (want == 'd' ? f[0] == 'd' : (f[0] != 'd' && f[0] != 'f' && f[0] != 'e'));
        if (!ok || at < 0 || at > col[got].len / size) {
            got++;
            PyErr_SetString(PyExc_ValueError, "scan: a column of the wrong type or shorter than its start");
            goto done;
        }
        ptr[got] = (char *)col[got].buf + at * size;
        if (col[got].len / size - at < o.room) o.room = col[got].len / size - at;
    }
    o.cat = ptr[0]; o.name = ptr[1]; o.pid = ptr[2]; o.tid = ptr[3]; o.ts = ptr[4]; o.dur = ptr[5];
    o.stream = ptr[6]; o.device = ptr[7]; o.corr = ptr[8]; o.bytes = ptr[9]; o.index = ptr[10];
    if (start < 0 || end > in.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "scan: byte range outside the buffer");
        goto done;
    }
    acc.aside = PyList_New(0);
    if (!acc.aside || table_init(&acc.cats) || table_init(&acc.names)) { rc = DECLINE; goto finish; }
    s.b = (const unsigned char *)in.buf;
    s.utf8 = utf8;
    s.n = end;
    s.p = start;
    rc = 0;
    for (;;) {  /* events separated by commas, the last one ending at ``end`` */
        ws(&s);
        if (s.p >= s.n || s.b[s.p] != '{') { rc = DECLINE; break; }
        rc = event(&s, &o, &acc, (int64_t)first + acc.events);
        if (rc) break;
        if (s.p == s.n) break;
        ws(&s);
        if (s.p >= s.n || s.b[s.p] != ',') { rc = DECLINE; break; }
        s.p++;
    }
finish:
    if (PyErr_Occurred()) goto done;
    if (rc) {
        result = PyLong_FromLong(rc);
    } else {
        PyObject *cats = strings(&s, &acc.cats), *names = cats ? strings(&s, &acc.names) : NULL;
        PyObject *esc = names ? PyList_New(0) : NULL;
        for (Py_ssize_t k = 0; esc && k < acc.names.used; k++) {
            if (!acc.names.strs[k].esc) continue;
            PyObject *i = PyLong_FromSsize_t(k);
            if (!i || PyList_Append(esc, i)) { Py_XDECREF(i); Py_CLEAR(esc); }
            else Py_DECREF(i);
        }
        if (esc)
            result = Py_BuildValue("(nnnnOOOOOO)", acc.events, acc.rows, acc.flows, acc.other,
                                   acc.ts_float ? Py_True : Py_False, acc.ts_missing ? Py_True : Py_False,
                                   cats, names, esc, acc.aside);
        Py_XDECREF(cats); Py_XDECREF(names); Py_XDECREF(esc);
    }
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&col[k]);
    PyBuffer_Release(&in);
    Py_XDECREF(acc.aside);
    table_free(&acc.cats);
    table_free(&acc.names);
    return result;
}

/* The category kinds the scanner knows (any other category is a host one): {str: kind}. */
static PyObject *configure(PyObject *self, PyObject *kinds) {
    if (!PyDict_Check(kinds)) { PyErr_SetString(PyExc_TypeError, "configure: a dict of category -> kind"); return NULL; }
    Py_ssize_t n = PyDict_Size(kinds), pos = 0, k = 0;
    KnownCat *table = calloc(n ? n : 1, sizeof(KnownCat));
    PyObject *key, *val;
    if (!table) return PyErr_NoMemory();
    while (PyDict_Next(kinds, &pos, &key, &val)) {
        Py_ssize_t len;
        const char *text = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
        long kind = PyLong_AsLong(val);
        if (!text || (kind == -1 && PyErr_Occurred())) {
            for (Py_ssize_t q = 0; q < k; q++) free(table[q].text);
            free(table);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "configure: a dict of category -> kind");
            return NULL;
        }
        table[k].text = malloc(len ? len : 1);
        memcpy(table[k].text, text, len);
        table[k].len = len;
        table[k].kind = (int)kind;
        k++;
    }
    for (Py_ssize_t q = 0; q < n_known; q++) free(known[q].text);
    free(known);
    known = table;
    n_known = k;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, start, end, first_index, columns, at, utf8=False) -> tuple | int\n\n"
     "Read the whole events in buffer[start:end] (separated by commas) into the column arrays from row ``at``\n"
     "(utf8: the caller has checked the text is UTF-8; else only ASCII is taken):\n"
     "(events, rows, flows, other, ts_float, ts_missing, categories, names, escaped, metadata events), the\n"
     "category and name columns holding each row's number in ``categories``/``names``; -1: declined, -2: no room."},
    {"configure", configure, METH_O, "configure({category: kind}): the categories that are not host ones."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Columnar scanner of Chrome-trace events.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
#ifdef HAVE_STRTOD_L
    if (!c_locale) c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
#endif
    return PyModule_Create(&module);
}
