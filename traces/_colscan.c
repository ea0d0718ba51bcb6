/*
 * _colscan: read integer columns straight out of archive bytes.
 *
 * Why this exists: statistics over millions of records need a few integer fields
 * per record, and msgpack-python builds a dict with a fresh str per key for every
 * record (~3 us each). Here we walk the msgpack bytes once, compare keys against
 * the requested names and copy integers into one int64 buffer — no Python object
 * per record. Anything unusual (a torn tail, damage, a float where an int belongs)
 * makes scan() stop and report where; the caller then re-reads that file with the
 * careful pure-Python reader, which owns all error handling and warnings.
 *
 * scan(data, offset, names, nvalued[, max_records]) -> (end, count, values, present, status)
 *   data     a bytes-like object holding record maps from ``offset`` on
 *   names    a tuple of field names (bytes); names[0] must be b"start_ns"
 *   nvalued  names[:nvalued] must hold integers or bools (anything else stops the
 *            scan); the rest are presence-only: any type, value left 0
 *   end      offset just past the last record scanned
 *   count    records scanned
 *   values   bytes: count * len(names) native int64, row-major (0 where absent)
 *   present  bytes: count * len(names) flags (1 where the record has the field)
 *   status   0 = reached the end of data cleanly, 1 = stopped at ``end``
 *            (an incomplete, damaged or unsupported object there), 2 = stopped
 *            after max_records (call again from ``end``; bounds the memory a call uses)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 32
#define MAX_DEPTH 32

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cursor;

static int need(cursor *c, Py_ssize_t n) { return c->end - c->p >= n; }

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Skip one object. Returns 0 on success, -1 if incomplete or invalid. */
static int skip(cursor *c, int depth) {
    if (depth > MAX_DEPTH || !need(c, 1)) return -1;
    uint8_t t = *c->p++;
    uint64_t n = 0, i;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return 0;
    if ((t & 0xe0) == 0xa0) { n = t & 0x1f; goto bytes; }
    if ((t & 0xf0) == 0x90) { n = t & 0x0f; goto array; }
    if ((t & 0xf0) == 0x80) { n = (uint64_t)(t & 0x0f) * 2; goto array; }
    switch (t) {
    case 0xcc: case 0xd0: n = 1; goto bytes;
    case 0xcd: case 0xd1: n = 2; goto bytes;
    case 0xce: case 0xd2: case 0xca: n = 4; goto bytes;
    case 0xcf: case 0xd3: case 0xcb: n = 8; goto bytes;
    case 0xc4: case 0xd9: if (!need(c, 1)) return -1; n = be(c->p, 1); c->p += 1; goto bytes;
    case 0xc5: case 0xda: if (!need(c, 2)) return -1; n = be(c->p, 2); c->p += 2; goto bytes;
    case 0xc6: case 0xdb: if (!need(c, 4)) return -1; n = be(c->p, 4); c->p += 4; goto bytes;
    case 0xdc: if (!need(c, 2)) return -1; n = be(c->p, 2); c->p += 2; goto array;
    case 0xdd: if (!need(c, 4)) return -1; n = be(c->p, 4); c->p += 4; goto array;
    case 0xde: if (!need(c, 2)) return -1; n = be(c->p, 2) * 2; c->p += 2; goto array;
    case 0xdf: if (!need(c, 4)) return -1; n = be(c->p, 4) * 2; c->p += 4; goto array;
    default: return -1; /* ext types and 0xc1 are not part of the format */
    }
bytes:
    if ((uint64_t)(c->end - c->p) < n) return -1;
    c->p += n;
    return 0;
array:
    for (i = 0; i < n; i++)
        if (skip(c, depth + 1) < 0) return -1;
    return 0;
}

/* Read an integer or bool value. 1 = got it, 0 = some other type (skipped), -1 = error. */
static int read_int(cursor *c, int64_t *out) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    if (t <= 0x7f) { *out = t; c->p++; return 1; }
    if (t >= 0xe0) { *out = (int8_t)t; c->p++; return 1; }
    if (t == 0xc2 || t == 0xc3) { *out = t == 0xc3; c->p++; return 1; }
    int n = 0, sign = 0;
    switch (t) {
    case 0xcc: n = 1; break; case 0xcd: n = 2; break; case 0xce: n = 4; break; case 0xcf: n = 8; break;
    case 0xd0: n = 1; sign = 1; break; case 0xd1: n = 2; sign = 1; break;
    case 0xd2: n = 4; sign = 1; break; case 0xd3: n = 8; sign = 1; break;
    default: return skip(c, 0) < 0 ? -1 : 0;
    }
    if (!need(c, 1 + n)) return -1;
    uint64_t v = be(c->p + 1, n);
    c->p += 1 + n;
    if (sign) {
        int shift = 64 - 8 * n;
        *out = shift ? ((int64_t)(v << shift)) >> shift : (int64_t)v;
    } else {
        if (v > INT64_MAX) return -1; /* larger than any int64 column can hold */
        *out = (int64_t)v;
    }
    return 1;
}

static int map_len(cursor *c, uint64_t *n) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    if ((t & 0xf0) == 0x80) { *n = t & 0x0f; c->p += 1; return 0; }
    if (t == 0xde && need(c, 3)) { *n = be(c->p + 1, 2); c->p += 3; return 0; }
    if (t == 0xdf && need(c, 5)) { *n = be(c->p + 1, 4); c->p += 5; return 0; }
    return -1;
}

static int str_key(cursor *c, const uint8_t **s, Py_ssize_t *len) {
    if (!need(c, 1)) return -1;
    uint8_t t = *c->p;
    uint64_t n;
    int h;
    if ((t & 0xe0) == 0xa0) { n = t & 0x1f; h = 1; }
    else if (t == 0xd9 && need(c, 2)) { n = be(c->p + 1, 1); h = 2; }
    else if (t == 0xda && need(c, 3)) { n = be(c->p + 1, 2); h = 3; }
    else return -1;
    if ((uint64_t)(c->end - c->p - h) < n) return -1;
    *s = c->p + h;
    *len = (Py_ssize_t)n;
    c->p += h + n;
    return 0;
}

/* Scan records into rows [*count, cap). Returns 0 at the end of data, 1 when stopped
 * by an incomplete or invalid object, 2 when the buffers are full. Runs without the GIL. */
static int scan_rows(cursor *c, const uint8_t **done, Py_ssize_t nf, Py_ssize_t nvalued,
                     const char **fname, const Py_ssize_t *flen, int64_t *values,
                     uint8_t *present, Py_ssize_t cap, Py_ssize_t *count) {
    while (c->p < c->end) {
        if (*count == cap) return 2;
        int64_t *row = values + *count * nf;
        uint8_t *mark = present + *count * nf;
        memset(row, 0, sizeof(int64_t) * nf);
        memset(mark, 0, nf);
        uint64_t pairs;
        if (map_len(c, &pairs) < 0) return 1;
        for (uint64_t k = 0; k < pairs; k++) {
            const uint8_t *key;
            Py_ssize_t klen, j;
            if (str_key(c, &key, &klen) < 0) return 1;
            for (j = 0; j < nf; j++)
                if (flen[j] == klen && memcmp(fname[j], key, klen) == 0) break;
            if (j == nf) {
                if (skip(c, 0) < 0) return 1;
                continue;
            }
            if (c->p < c->end && *c->p == 0xc0) { c->p++; continue; } /* nil: absent */
            int r = read_int(c, &row[j]);
            if (r < 0 || (r == 0 && j < nvalued)) return 1; /* e.g. a float: Python decides */
            mark[j] = 1;
        }
        if (!mark[0]) return 1;
        *done = c->p;
        (*count)++;
    }
    return 0;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf;
    Py_ssize_t offset, nvalued, max_records = PY_SSIZE_T_MAX;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*nO!n|n", &buf, &offset, &PyTuple_Type, &names, &nvalued,
                          &max_records))
        return NULL;

    Py_ssize_t nf = PyTuple_GET_SIZE(names);
    const char *fname[MAX_FIELDS];
    Py_ssize_t flen[MAX_FIELDS];
    if (nf < 1 || nf > MAX_FIELDS || nvalued < 1 || nvalued > nf || offset < 0 ||
        offset > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "bad arguments to scan()");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < nf; j++) {
        PyObject *o = PyTuple_GET_ITEM(names, j);
        if (!PyBytes_Check(o)) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            return NULL;
        }
        fname[j] = PyBytes_AS_STRING(o);
        flen[j] = PyBytes_GET_SIZE(o);
    }

    Py_ssize_t cap = max_records < 4096 ? max_records : 4096, count = 0;
    int64_t *values = PyMem_Malloc(sizeof(int64_t) * nf * cap);
    uint8_t *present = PyMem_Malloc(nf * cap);
    cursor c = {(const uint8_t *)buf.buf + offset, (const uint8_t *)buf.buf + buf.len};
    const uint8_t *done = c.p;
    int status;
    for (;;) {
        if (!values || !present) goto nomem;
        Py_BEGIN_ALLOW_THREADS
        status = scan_rows(&c, &done, nf, nvalued, fname, flen, values, present, cap, &count);
        Py_END_ALLOW_THREADS
        if (status != 2 || count >= max_records) break;
        cap = cap * 2 > max_records ? max_records : cap * 2; /* grow (needs the GIL), go on */
        int64_t *nv = PyMem_Realloc(values, sizeof(int64_t) * nf * cap);
        if (nv) values = nv;
        uint8_t *npres = PyMem_Realloc(present, nf * cap);
        if (npres) present = npres;
        if (!nv || !npres) goto nomem;
    }

    Py_ssize_t end = done - (const uint8_t *)buf.buf;
    PyBuffer_Release(&buf);
    PyObject *v = PyBytes_FromStringAndSize((const char *)values, sizeof(int64_t) * nf * count);
    PyObject *p = PyBytes_FromStringAndSize((const char *)present, nf * count);
    PyMem_Free(values);
    PyMem_Free(present);
    if (!v || !p) { Py_XDECREF(v); Py_XDECREF(p); return NULL; }
    return Py_BuildValue("nnNNi", end, count, v, p, status);

nomem:
    PyBuffer_Release(&buf);
    PyMem_Free(values);
    PyMem_Free(present);
    return PyErr_NoMemory();
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, offset, names, nvalued[, max_records]) -> (end, count, values, present, status)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_colscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__colscan(void) { return PyModule_Create(&module); }
