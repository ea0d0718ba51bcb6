/*
 * _colscan: read integer columns straight out of archive bytes.
 *
 * Why this exists: statistics over millions of records need a few integer fields
 * per record, and msgpack-python builds a dict with a fresh str per key for every
 * record (~3 us each). Here we walk the msgpack bytes once, compare keys against
 * the record fields and copy integers into one int64 buffer — no Python object
 * per record.
 *
 * Every record is checked against the same table the Python reader uses
 * (traces/validate.py: COLSCAN_SPECS) and the same unpacking limits, and more
 * strictly where that is cheaper: anything the Python reader could reject (a
 * value of the wrong type or range, a key twice in one record, a torn tail, damage,
 * bad UTF-8, an ext type, nesting deeper than MAX_DEPTH) makes scan() stop and report where; the caller
 * then re-reads that file with the pure-Python reader, which owns every verdict,
 * error and warning. So this scanner never accepts a record Python rejects.
 *
 * scan(data, offset, names, nvalued, specs, limits[, max_records[, strings[, max_items]]])
 *     -> (end, count, values, present, status, extras, starts)
 *   data     a bytes-like object holding record maps from ``offset`` on
 *   names    a tuple of field names (bytes), each one of the specs; names[0] must
 *            be b"start_ns"
 *   nvalued  names[:nvalued] are fields whose values are copied: ints and bools as
 *            they are, str fields (kinds 2, 6, 7) as their index in ``strings``,
 *            arrays of ints (kind 4) as their length, their items in ``extras``; bin
 *            fields of a fixed size (kind 3, hi > 0) go to ``extras`` only; the rest
 *            are presence-only (value left 0)
 *   specs    a tuple of (name, kind, lo, hi) per record field: kind 0 int in
 *            lo..hi, 1 bool, 2 str, 3 bin (of exactly hi bytes when hi > 0),
 *            4 array of ints in lo..hi, 5 array of [name, value] headers (each name
 *            an HTTP token after an optional ':', each value without CR, LF or NUL),
 *            6 an HTTP token (a method), 7 an origin-form request target ('/' and
 *            no space or control byte after it, never "//")
 *   limits   (max_str, max_bin, max_array, max_map, max_record_bytes, max_objects)
 *   strings  a dict (bytes -> int) that str values are looked up in and added to,
 *            numbered in order of first sight; None (the default) copies no str
 *            value. A scan with strings holds the GIL throughout.
 *   max_items  after the record that brings an array field's items to this many,
 *            stop as after max_records (bounds the memory a call's items take)
 *   end      offset just past the last record scanned
 *   count    records scanned
 *   values   bytes: count * len(names) native int64, row-major (0 where absent)
 *   present  bytes: count * len(names) flags (1 where the record has the field)
 *   status   0 = reached the end of data cleanly, 1 = stopped at ``end``
 *            (an incomplete, damaged, invalid or unsupported object there), 2 = stopped
 *            after max_records or max_items (call again from ``end``; bounds the
 *            memory a call uses)
 *   extras   a tuple of bytes, one per valued name: for a fixed-size bin field,
 *            count * hi bytes (each record's value, zeros where absent); for an array
 *            of ints, its items as native int64, record after record; b"" otherwise
 *   starts   bytes: count native int64, the offset in ``data`` where each record begins
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 64
#define MAX_DEPTH 32

enum { K_INT, K_BOOL, K_STR, K_BIN, K_INTS, K_PAIRS, K_TOKEN, K_TARGET };

/* RFC 9110 tchar: what an HTTP method or header name is made of. */
static int tchar(uint8_t b) {
    if ((b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z')) return 1;
    return b != 0 && strchr("!#$%&'*+-.^_`|~", b) != NULL;
}

static int token_ok(const uint8_t *s, uint64_t n) {
    if (n == 0) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (!tchar(s[i])) return 0;
    return 1;
}

static int header_name_ok(const uint8_t *s, uint64_t n) {
    return n > 0 && *s == ':' ? token_ok(s + 1, n - 1) : token_ok(s, n);
}

static int header_value_ok(const uint8_t *s, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == 0) return 0;
    return 1;
}

/* Origin form: '/', then no space or control byte (UTF-8 beyond ASCII passes), and
 * not "//" (which some servers read as a host). */
static int target_ok(const uint8_t *s, uint64_t n) {
    if (n == 0 || s[0] != '/' || (n > 1 && s[1] == '/')) return 0;
    for (uint64_t i = 1; i < n; i++)
        if (s[i] <= 0x20 || s[i] == 0x7f) return 0;
    return 1;
}

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    uint64_t objects; /* containers and their entries, as the Python reader counts them */
} cursor;

typedef struct {
    uint64_t max_str, max_bin, max_array, max_map, max_record, max_objects;
} limits_t;

typedef struct {
    const char *name;
    Py_ssize_t len;
    int kind;
    int64_t lo;
    uint64_t hi;
    Py_ssize_t column; /* index into the requested names, or -1 */
    int interned;      /* a str field whose values are copied as indices into ``strings`` */
    const uint8_t *last; /* this field's last string in this call, and its index */
    uint64_t last_len;
    int64_t last_code;
    Py_ssize_t extra; /* index into the extras of a copied bin or array field, or -1 */
} spec_t;

/* A growing byte buffer (an extra's bytes). Raw allocation: the scan may run without
 * the GIL. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} grow_t;

static int grow_reserve(grow_t *g, size_t more) {
    if (g->n + more <= g->cap) return 0;
    size_t cap = g->cap ? g->cap : 4096;
    while (cap < g->n + more) cap *= 2;
    uint8_t *p = PyMem_RawRealloc(g->p, cap);
    if (!p) return -1;
    g->p = p;
    g->cap = cap;
    return 0;
}

static int grow_put(grow_t *g, const void *src, size_t len) {
    if (grow_reserve(g, len) < 0) return -1;
    memcpy(g->p + g->n, src, len);
    g->n += len;
    return 0;
}

static int need(cursor *c, uint64_t n) { return (uint64_t)(c->end - c->p) >= n; }

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Well-formed UTF-8 as Python's strict decoder takes it (no surrogates, overlongs
 * or code points past U+10FFFF). */
static int utf8_ok(const uint8_t *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* ASCII, eight bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) { i += 8; continue; }
        }
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        int len;
        uint8_t lo = 0x80, hi = 0xbf;
        if (b >= 0xc2 && b <= 0xdf) len = 2;
        else if (b >= 0xe0 && b <= 0xef) {
            len = 3;
            if (b == 0xe0) lo = 0xa0;
            if (b == 0xed) hi = 0x9f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            len = 4;
            if (b == 0xf0) lo = 0x90;
            if (b == 0xf4) hi = 0x8f;
        } else return 0;
        if (n - i < (uint64_t)len) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) return 0;
        i += len;
    }
    return 1;
}

/* A str object's bytes and length, unchecked as UTF-8. 0 = got it, -1 = not a str or too long. */
static int read_raw_str(cursor *c, const limits_t *lim, const uint8_t **s, uint64_t *len) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    uint64_t n;
    int h;
    if ((t & 0xe0) == 0xa0) { n = t & 0x1f; h = 1; }
    else if (t == 0xd9 && need(c, 2)) { n = be(c->p + 1, 1); h = 2; }
    else if (t == 0xda && need(c, 3)) { n = be(c->p + 1, 2); h = 3; }
    else if (t == 0xdb && need(c, 5)) { n = be(c->p + 1, 4); h = 5; }
    else return -1;
    if (n > lim->max_str || !need(c, h + n)) return -1;
    *s = c->p + h;
    *len = n;
    c->p += h + n;
    return 0;
}

/* A str object, checked as UTF-8. 0 = got it, -1 = not a str, too long or bad UTF-8. */
static int read_str(cursor *c, const limits_t *lim, const uint8_t **s, uint64_t *len) {
    return read_raw_str(c, lim, s, len) < 0 || !utf8_ok(*s, *len) ? -1 : 0;
}

/* A bin object's bytes and length. 0 = got it (consumed), -1 = not a bin or too long. */
static int read_bin(cursor *c, const limits_t *lim, const uint8_t **s, uint64_t *len) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    int h = t == 0xc4 ? 1 : t == 0xc5 ? 2 : t == 0xc6 ? 4 : 0;
    if (!h || !need(c, 1 + h)) return -1;
    uint64_t n = be(c->p + 1, h);
    if (n > lim->max_bin || !need(c, 1 + h + n)) return -1;
    *s = c->p + 1 + h;
    *len = n;
    c->p += 1 + h + n;
    return 0;
}

/* Container length for an array (pairs = 0) or a map (pairs = 1). -1 = not one, or too long. */
static int read_len(cursor *c, const limits_t *lim, int map, uint64_t *n) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    int h;
    if (!map && (t & 0xf0) == 0x90) { *n = t & 0x0f; h = 0; }
    else if (map && (t & 0xf0) == 0x80) { *n = t & 0x0f; h = 0; }
    else if (t == (map ? 0xde : 0xdc)) h = 2;
    else if (t == (map ? 0xdf : 0xdd)) h = 4;
    else return -1;
    if (h) {
        if (!need(c, 1 + h)) return -1;
        *n = be(c->p + 1, h);
    }
    if (*n > (map ? lim->max_map : lim->max_array)) return -1;
    c->p += 1 + h;
    c->objects += 1 + (map ? 2 : 1) * *n;
    return c->objects > lim->max_objects ? -1 : 0;
}

/* An integer (not a bool). 1 = got it, 0 = another type (nothing consumed), -1 = incomplete. */
static int read_int(cursor *c, int *neg, uint64_t *mag) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    *neg = 0;
    if (t <= 0x7f) { *mag = t; c->p++; return 1; }
    if (t >= 0xe0) { *neg = 1; *mag = (uint64_t)(-(int64_t)(int8_t)t); c->p++; return 1; }
    int n, sign = 0;
    switch (t) {
    case 0xcc: n = 1; break; case 0xcd: n = 2; break; case 0xce: n = 4; break; case 0xcf: n = 8; break;
    case 0xd0: n = 1; sign = 1; break; case 0xd1: n = 2; sign = 1; break;
    case 0xd2: n = 4; sign = 1; break; case 0xd3: n = 8; sign = 1; break;
    default: return 0;
    }
    if (!need(c, 1 + n)) return -1;
    uint64_t v = be(c->p + 1, n);
    c->p += 1 + n;
    if (sign) {
        int shift = 64 - 8 * n;
        int64_t s = shift ? ((int64_t)(v << shift)) >> shift : (int64_t)v;
        if (s < 0) { *neg = 1; *mag = (uint64_t)0 - (uint64_t)s; return 1; }
        v = (uint64_t)s;
    }
    *mag = v;
    return 1;
}

static int in_range(int neg, uint64_t mag, const spec_t *s) {
    if (neg) return s->lo < 0 && mag <= (uint64_t)0 - (uint64_t)s->lo;
    return (s->lo <= 0 || mag >= (uint64_t)s->lo) && mag <= s->hi;
}

/* Skip one object of a field this scanner does not know, as strictly as the Python
 * reader unpacks it. 0 = skipped, -1 = incomplete, invalid or past a limit. */
static int skip(cursor *c, const limits_t *lim, int depth) {
    if (depth > MAX_DEPTH || !need(c, 1)) return -1;
    uint8_t t = *c->p;
    uint64_t n, i;
    const uint8_t *s;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) { c->p++; return 0; }
    if ((t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb)) return read_str(c, lim, &s, &n);
    if (t >= 0xc4 && t <= 0xc6) return read_bin(c, lim, &s, &n);
    switch (t) {
    case 0xcc: case 0xd0: n = 1; break;
    case 0xcd: case 0xd1: n = 2; break;
    case 0xce: case 0xd2: case 0xca: n = 4; break;
    case 0xcf: case 0xd3: case 0xcb: n = 8; break;
    default: n = 0;
    }
    if (n) {
        if (!need(c, 1 + n)) return -1;
        c->p += 1 + n;
        return 0;
    }
    if ((t & 0xf0) == 0x90 || t == 0xdc || t == 0xdd) {
        if (read_len(c, lim, 0, &n) < 0) return -1;
        for (i = 0; i < n; i++)
            if (skip(c, lim, depth + 1) < 0) return -1;
        return 0;
    }
    if ((t & 0xf0) == 0x80 || t == 0xde || t == 0xdf) {
        if (read_len(c, lim, 1, &n) < 0) return -1;
        for (i = 0; i < n; i++) {
            uint64_t klen;
            if (!need(c, 1)) return -1;
            uint8_t k = *c->p; /* map keys: str or bin only (strict_map_key) */
            int r = (k >= 0xc4 && k <= 0xc6) ? read_bin(c, lim, &s, &klen) : read_str(c, lim, &s, &klen);
            if (r < 0 || skip(c, lim, depth + 1) < 0) return -1;
        }
        return 0;
    }
    return -1; /* ext types and 0xc1 */
}

/* A str value as its index in ``strings``, added there when new; a field's values mostly
 * repeat, so the last one is compared first (no object made). Needs the GIL.
 * 0 = done, -1 = out of memory (the file is then left to the Python reader). */
static int intern(PyObject *strings, spec_t *s, const uint8_t *str, uint64_t n, int64_t *out) {
    if (s->last && s->last_len == n && memcmp(s->last, str, n) == 0) {
        *out = s->last_code;
        return 0;
    }
    PyObject *key = PyBytes_FromStringAndSize((const char *)str, (Py_ssize_t)n);
    if (!key) goto fail;
    PyObject *code = PyDict_GetItemWithError(strings, key); /* borrowed */
    if (code) {
        *out = PyLong_AsLongLong(code);
    } else {
        PyObject *v = PyErr_Occurred() ? NULL : PyLong_FromSsize_t(PyDict_GET_SIZE(strings));
        if (!v || PyDict_SetItem(strings, key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(key);
            goto fail;
        }
        *out = PyLong_AsLongLong(v);
        Py_DECREF(v);
    }
    Py_DECREF(key);
    s->last = str;
    s->last_len = n;
    s->last_code = *out;
    return 0;
fail:
    PyErr_Clear();
    return -1;
}

/* A checked str value: its index in ``strings`` when the field is copied, else nothing. */
static int str_value(PyObject *strings, spec_t *s, const uint8_t *str, uint64_t n, int64_t *out) {
    return s->interned ? intern(strings, s, str, n, out) : 0;
}

/* Check one value of a known field against its spec; *out gets an int or bool value,
 * a str's index or an array's length. A copied bin's bytes go to ``slot`` (reserved in
 * its extra), a copied array's items to the end of its extra ``g``. 0 = valid
 * (consumed), -1 = anything else (or out of memory: the file is then left to Python). */
static int check_value(cursor *c, const limits_t *lim, spec_t *s, PyObject *strings,
                       grow_t *g, uint8_t *slot, int64_t *out) {
    int neg;
    uint64_t mag, n, i;
    const uint8_t *str;
    switch (s->kind) {
    case K_INT:
        if (read_int(c, &neg, &mag) != 1 || !in_range(neg, mag, s)) return -1;
        *out = neg ? -(int64_t)mag : (int64_t)mag;
        return 0;
    case K_BOOL:
        if (!need(c, 1) || (*c->p != 0xc2 && *c->p != 0xc3)) return -1;
        *out = *c->p++ == 0xc3;
        return 0;
    case K_STR:
        return read_str(c, lim, &str, &n) < 0 ? -1 : str_value(strings, s, str, n, out);
    case K_TOKEN:
        if (read_str(c, lim, &str, &n) < 0 || !token_ok(str, n)) return -1;
        return str_value(strings, s, str, n, out);
    case K_TARGET:
        if (read_str(c, lim, &str, &n) < 0 || !target_ok(str, n)) return -1;
        return str_value(strings, s, str, n, out);
    case K_BIN:
        if (read_bin(c, lim, &str, &n) < 0 || (s->hi && n != s->hi)) return -1;
        if (slot) memcpy(slot, str, n);
        return 0;
    case K_INTS:
        if (read_len(c, lim, 0, &n) < 0 || (g && grow_reserve(g, n * sizeof(int64_t)) < 0))
            return -1;
        for (i = 0; i < n; i++) {
            if (read_int(c, &neg, &mag) != 1 || !in_range(neg, mag, s)) return -1;
            if (g) {
                int64_t v = neg ? -(int64_t)mag : (int64_t)mag;
                memcpy(g->p + g->n, &v, sizeof v);
                g->n += sizeof v;
            }
        }
        *out = (int64_t)n;
        return 0;
    case K_PAIRS:
        if (read_len(c, lim, 0, &n) < 0) return -1;
        for (i = 0; i < n; i++) {
            uint64_t two;
            if (read_len(c, lim, 0, &two) < 0 || two != 2) return -1;
            if (read_str(c, lim, &str, &two) < 0 || !header_name_ok(str, two)) return -1;
            if (read_str(c, lim, &str, &two) < 0 || !header_value_ok(str, two)) return -1;
        }
        return 0;
    }
    return -1;
}

/* The spec of a key: ``hint`` (the field at this key position in the previous record,
 * which the next record almost always repeats) first, then every spec. */
static Py_ssize_t find_spec(const spec_t *specs, Py_ssize_t ns, const uint8_t *key,
                            uint64_t klen, Py_ssize_t hint) {
    if (hint >= 0 && (uint64_t)specs[hint].len == klen && memcmp(specs[hint].name, key, klen) == 0)
        return hint;
    for (Py_ssize_t j = 0; j < ns; j++)
        if ((uint64_t)specs[j].len == klen && memcmp(specs[j].name, key, klen) == 0) return j;
    return -1;
}

typedef struct {
    spec_t *specs;
    Py_ssize_t ns, nf, start_col;
    const limits_t *lim;
    PyObject *strings; /* NULL: no str value is copied (and the GIL may be released) */
    grow_t *extras;    /* one per valued name (used by copied bin and array fields) */
    size_t max_items;  /* stop once an array field's extra holds this many items */
    Py_ssize_t hints[256];
    const uint8_t *unknown[256]; /* this record's keys that no spec names (a map holds <= 256) */
    uint64_t unknown_len[256];
} scan_ctx;

/* Whether ``key`` is one of the record's first ``n`` unknown keys. Records rarely hold
 * any, so comparing each with the ones before costs nothing in practice. */
static int unknown_repeated(const scan_ctx *x, Py_ssize_t n, const uint8_t *key, uint64_t klen) {
    if (n >= 256) return 1; /* more keys than a map may hold: let Python decide */
    for (Py_ssize_t i = 0; i < n; i++)
        if (x->unknown_len[i] == klen && memcmp(x->unknown[i], key, klen) == 0) return 1;
    return 0;
}

/* Reserve a zeroed slot in each copied bin field's extra for this record (its value, or
 * zeros where it has none). 0 = done, -1 = out of memory. */
static int reserve_slots(scan_ctx *x) {
    for (Py_ssize_t j = 0; j < x->ns; j++) {
        spec_t *s = &x->specs[j];
        if (s->extra < 0 || s->kind != K_BIN) continue;
        grow_t *g = &x->extras[s->extra];
        if (grow_reserve(g, s->hi) < 0) return -1;
        memset(g->p + g->n, 0, s->hi);
        g->n += s->hi;
    }
    return 0;
}

/* Scan one record into (row, mark) and the extras. 0 = a valid record, -1 = stop
 * before it (the caller takes back what it added to the extras). */
static int scan_record(cursor *c, scan_ctx *x, int64_t *row, uint8_t *mark) {
    const uint8_t *begin = c->p;
    uint64_t pairs;
    c->objects = 0;
    if (read_len(c, x->lim, 1, &pairs) < 0 || reserve_slots(x) < 0) return -1;
    memset(row, 0, sizeof(int64_t) * x->nf);
    memset(mark, 0, x->nf);
    int has_start = 0;
    uint64_t seen = 0; /* the specs met in this record: a key twice is damage */
    Py_ssize_t nunknown = 0;
    for (uint64_t k = 0; k < pairs; k++) {
        const uint8_t *key;
        uint64_t klen;
        if (read_raw_str(c, x->lim, &key, &klen) < 0) return -1; /* a bin key: Python decides */
        Py_ssize_t hint = k < 256 ? x->hints[k] : -1;
        Py_ssize_t j = find_spec(x->specs, x->ns, key, klen, hint);
        if (k < 256) x->hints[k] = j;
        if (j < 0) { /* a known name is ASCII; any other key must be valid UTF-8 */
            if (!utf8_ok(key, klen) || unknown_repeated(x, nunknown, key, klen) ||
                skip(c, x->lim, 1) < 0)
                return -1;
            x->unknown[nunknown] = key;
            x->unknown_len[nunknown++] = klen;
            continue;
        }
        if (seen >> j & 1) return -1;
        seen |= (uint64_t)1 << j;
        if (need(c, 1) && *c->p == 0xc0) { c->p++; continue; } /* nil: absent */
        int64_t v = 0;
        spec_t *s = &x->specs[j];
        grow_t *g = s->extra >= 0 ? &x->extras[s->extra] : NULL;
        uint8_t *slot = g && s->kind == K_BIN ? g->p + g->n - s->hi : NULL;
        if (check_value(c, x->lim, s, x->strings, g, slot, &v) < 0) return -1;
        Py_ssize_t col = x->specs[j].column;
        if (col == x->start_col) has_start = 1;
        if (col >= 0) { row[col] = v; mark[col] = 1; }
    }
    if (!has_start || (uint64_t)(c->p - begin) > x->lim->max_record) return -1;
    return 0;
}

/* Whether an array field's extra holds max_items items or more. */
static int items_full(const scan_ctx *x) {
    for (Py_ssize_t j = 0; j < x->ns; j++) {
        const spec_t *s = &x->specs[j];
        if (s->extra >= 0 && s->kind == K_INTS &&
            x->extras[s->extra].n / sizeof(int64_t) >= x->max_items)
            return 1;
    }
    return 0;
}

/* Scan records into rows [*count, cap), noting where each begins. Returns 0 at the end
 * of data, 1 when stopped by an incomplete, invalid or unsupported object, 2 when the
 * buffers are full, 3 when an array field's items reached max_items. Runs without the
 * GIL unless str values are copied. */
static int scan_rows(cursor *c, const uint8_t **done, scan_ctx *x, int64_t *values,
                     uint8_t *present, int64_t *starts, const uint8_t *base, Py_ssize_t cap,
                     Py_ssize_t *count) {
    size_t kept[MAX_FIELDS];
    while (c->p < c->end) {
        if (*count == cap) return 2;
        for (Py_ssize_t i = 0; i < x->nf; i++) kept[i] = x->extras[i].n;
        starts[*count] = c->p - base;
        if (scan_record(c, x, values + *count * x->nf, present + *count * x->nf) < 0) {
            for (Py_ssize_t i = 0; i < x->nf; i++) x->extras[i].n = kept[i];
            return 1;
        }
        *done = c->p;
        (*count)++;
        if (items_full(x)) return 3;
    }
    return 0;
}

/* Fill specs from the Python table and tie each requested name to its spec. */
static int parse_specs(PyObject *names, Py_ssize_t nvalued, int strings, PyObject *table,
                       spec_t *specs, Py_ssize_t *ns) {
    Py_ssize_t nf = PyTuple_GET_SIZE(names);
    *ns = PyTuple_GET_SIZE(table);
    if (*ns < 1 || *ns > MAX_FIELDS || nf < 1 || nf > *ns) goto bad;
    for (Py_ssize_t j = 0; j < *ns; j++) {
        const char *name;
        Py_ssize_t len;
        long long lo;
        unsigned long long hi;
        int kind;
        PyObject *row = PyTuple_GET_ITEM(table, j);
        if (!PyTuple_Check(row) || !PyArg_ParseTuple(row, "y#iLK", &name, &len, &kind, &lo, &hi))
            goto bad;
        specs[j] = (spec_t){name, len, kind, (int64_t)lo, (uint64_t)hi, -1, 0, NULL, 0, 0, -1};
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *o = PyTuple_GET_ITEM(names, i);
        Py_ssize_t j;
        if (!PyBytes_Check(o)) goto bad;
        for (j = 0; j < *ns; j++)
            if (specs[j].len == PyBytes_GET_SIZE(o) &&
                memcmp(specs[j].name, PyBytes_AS_STRING(o), specs[j].len) == 0)
                break;
        if (j == *ns || specs[j].column >= 0) goto bad;
        specs[j].column = i;
        int text = specs[j].kind == K_STR || specs[j].kind == K_TOKEN || specs[j].kind == K_TARGET;
        specs[j].interned = strings && text && i < nvalued;
        int fixed_bin = specs[j].kind == K_BIN && specs[j].hi > 0;
        if (i < nvalued && (fixed_bin || specs[j].kind == K_INTS)) specs[j].extra = i;
    }
    return 0;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad names or specs for scan()");
    return -1;
}

/* The extras of the valued names as a tuple of bytes (b"" where a name has none). */
static PyObject *extras_tuple(const grow_t *extras, Py_ssize_t nvalued) {
    PyObject *out = PyTuple_New(nvalued);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < nvalued; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)extras[i].p, (Py_ssize_t)extras[i].n);
        if (!b) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, b);
    }
    return out;
}

static void free_extras(grow_t *extras, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) PyMem_RawFree(extras[i].p);
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf;
    Py_ssize_t offset, nvalued, max_records = PY_SSIZE_T_MAX, max_items = PY_SSIZE_T_MAX, ns;
    PyObject *names, *table, *strings = Py_None;
    limits_t lim;
    spec_t specs[MAX_FIELDS];
    grow_t extras[MAX_FIELDS] = {{0}};
    if (!PyArg_ParseTuple(args, "y*nO!nO!(KKKKKK)|nOn", &buf, &offset, &PyTuple_Type, &names,
                          &nvalued, &PyTuple_Type, &table, &lim.max_str, &lim.max_bin,
                          &lim.max_array, &lim.max_map, &lim.max_record, &lim.max_objects,
                          &max_records, &strings, &max_items))
        return NULL;
    Py_ssize_t nf = PyTuple_GET_SIZE(names);
    if (strings == Py_None) strings = NULL;
    if ((strings && !PyDict_CheckExact(strings)) ||
        parse_specs(names, nvalued, strings != NULL, table, specs, &ns) < 0 || nvalued < 1 ||
        nvalued > nf || offset < 0 || offset > buf.len || max_records < 1 || max_items < 1) {
        PyBuffer_Release(&buf);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad arguments to scan()");
        return NULL;
    }
    scan_ctx x = {specs, ns, nf, 0, &lim, strings, extras, (size_t)max_items, {0}};
    for (int k = 0; k < 256; k++) x.hints[k] = -1;

    Py_ssize_t cap = max_records < 4096 ? max_records : 4096, count = 0;
    int64_t *values = PyMem_Malloc(sizeof(int64_t) * nf * cap);
    uint8_t *present = PyMem_Malloc(nf * cap);
    int64_t *starts = PyMem_Malloc(sizeof(int64_t) * cap);
    const uint8_t *base = (const uint8_t *)buf.buf;
    cursor c = {base + offset, base + buf.len, 0};
    const uint8_t *done = c.p;
    int status;
    for (;;) {
        if (!values || !present || !starts) goto nomem;
        if (strings) {
            status = scan_rows(&c, &done, &x, values, present, starts, base, cap, &count);
        } else {
            Py_BEGIN_ALLOW_THREADS
            status = scan_rows(&c, &done, &x, values, present, starts, base, cap, &count);
            Py_END_ALLOW_THREADS
        }
        int items_done = status == 3; /* the caller calls again, as after max_records */
        if (items_done) status = 2;
        if (status != 2 || items_done || count >= max_records) break;
        cap = cap * 2 > max_records ? max_records : cap * 2; /* grow (needs the GIL), go on */
        int64_t *nv = PyMem_Realloc(values, sizeof(int64_t) * nf * cap);
        if (nv) values = nv;
        uint8_t *npres = PyMem_Realloc(present, nf * cap);
        if (npres) present = npres;
        int64_t *nstarts = PyMem_Realloc(starts, sizeof(int64_t) * cap);
        if (nstarts) starts = nstarts;
        if (!nv || !npres || !nstarts) goto nomem;
    }

    Py_ssize_t end = done - base;
    PyBuffer_Release(&buf);
    PyObject *v = PyBytes_FromStringAndSize((const char *)values, sizeof(int64_t) * nf * count);
    PyObject *p = PyBytes_FromStringAndSize((const char *)present, nf * count);
    PyObject *st = PyBytes_FromStringAndSize((const char *)starts, sizeof(int64_t) * count);
    PyObject *ex = extras_tuple(extras, nvalued);
    PyMem_Free(values);
    PyMem_Free(present);
    PyMem_Free(starts);
    free_extras(extras, nf);
    if (!v || !p || !st || !ex) {
        Py_XDECREF(v);
        Py_XDECREF(p);
        Py_XDECREF(st);
        Py_XDECREF(ex);
        return NULL;
    }
    return Py_BuildValue("nnNNiNN", end, count, v, p, status, ex, st);

nomem:
    PyBuffer_Release(&buf);
    PyMem_Free(values);
    PyMem_Free(present);
    PyMem_Free(starts);
    free_extras(extras, nf);
    return PyErr_NoMemory();
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, offset, names, nvalued, specs, limits[, max_records[, strings[, max_items]]])"
     " -> (end, count, values, present, status, extras, starts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_colscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__colscan(void) { return PyModule_Create(&module); }
