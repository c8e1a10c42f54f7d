/* The pairing loop of checker/fastload.py in C: one block of history lines, decoded by
 * msgspec and paired invoke with completion, by the same rules in the same order.
 *
 * Why: on the 1,000,009-event benchmark history the loop's bytecode was a third of the load's
 * time (docs/checker-speed.md); the decoding (msgspec's), the ops (msgspec Structs) and every
 * rule stay as they are. fastload.py's Python loop is the reference: this file is a second
 * implementation of it, held equal to it by tests/unit/checker/test_fastload.py (every shipped
 * history, simulated ones, every block size, every irregular input), and a line either file
 * would not judge is handed back the same way (fastload._Irregular), so the exact reader still
 * names it.
 *
 * configure(...) is called at fastload's import (again only to replace what it holds) with
 * the types and constants the loop uses; pair_chunk(chunk, last, ops, share, n, shown) pairs one block's lines and returns
 * (n, shown, start, stop): start and stop are -1, or the bounds of a line msgspec would not
 * decode (fastload then decides whether it is the blank end of the file).
 *
 * The fields of a decoded Line and of an Op are read at their slots' offsets, found from the
 * types' member descriptors at configure: msgspec keeps each field in an object slot. */

#include "_loops.h"

static PyTypeObject *line_type, *op_type;
static PyObject *decode, *decode_error, *irregular, *nemesis, *f_read, *f_write;
static PyObject *key_name, *lock_name, *token_name, *usual, *line_keys, *checked;
static PyObject *s_invoke, *s_info;
static const char *null_end;
static Py_ssize_t null_end_len;
static PyObject *null_end_obj;
static int configured;

/* slot offsets of Line's and Op's fields */
static Py_ssize_t L_index, L_time, L_process, L_type, L_f, L_value, L_error;
static Py_ssize_t O_type, O_end_time;

static int
fail_irregular(void)
{
    PyErr_SetNone(irregular);
    return -1;
}

static int
ends_null(PyObject *raw)
{
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    return n >= null_end_len
        && memcmp(PyBytes_AS_STRING(raw) + n - null_end_len, null_end, null_end_len) == 0;
}

/* shown += line_keys(raw, d) */
static int
add_line_keys(PyObject *raw, PyObject *d, long long *shown)
{
    PyObject *r = PyObject_CallFunctionObjArgs(line_keys, raw, d, NULL);
    if (r == NULL)
        return -1;
    long long k = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (k == -1 && PyErr_Occurred())
        return -1;
    *shown += k;
    return 0;
}

static int
call_checked(PyObject *op)
{
    PyObject *r = PyObject_CallOneArg(checked, op);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* v[name] = share.setdefault(s, s) */
static int
share_name(PyObject *v, PyObject *name, PyObject *s, PyObject *share)
{
    PyObject *one = PyDict_SetDefault(share, s, s);
    if (one == NULL)
        return -1;
    Py_INCREF(one);
    int rc = PyDict_SetItem(v, name, one);
    Py_DECREF(one);
    return rc;
}

/* A read's or write's value: its shape checked inline (reader.USUAL's test), its key and lock
 * names made the one string of each; anything else goes to fastload._checked. */
static int
read_or_write(PyObject *op, PyObject *v, PyObject *share)
{
    if (v == Py_None)
        return call_checked(op);
    PyObject *k = PyDict_GetItemWithError(v, key_name);
    if (k == NULL && PyErr_Occurred())
        return -1;
    if (k == NULL || !PyUnicode_CheckExact(k))
        return call_checked(op);
    PyObject *lk = PyDict_GetItemWithError(v, lock_name);
    if (lk == NULL && PyErr_Occurred())
        return -1;
    if (lk != NULL && lk != Py_None && !PyUnicode_CheckExact(lk))
        return call_checked(op);
    PyObject *tk = PyDict_GetItemWithError(v, token_name);
    if (tk == NULL && PyErr_Occurred())
        return -1;
    if (tk != NULL && tk != Py_None && !PyLong_CheckExact(tk))
        return call_checked(op);
    Py_INCREF(k);
    Py_XINCREF(lk);
    int rc = share_name(v, key_name, k, share);
    if (rc == 0 && lk != NULL && lk != Py_None)
        rc = share_name(v, lock_name, lk, share);
    Py_DECREF(k);
    Py_XDECREF(lk);
    return rc;
}

/* Any other f: reader.USUAL's test for it, if it has one, else fastload._checked. */
static int
other_value(PyObject *op, PyObject *f, PyObject *v)
{
    PyObject *check = PyDict_GetItemWithError(usual, f);
    if (check == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int good = 0;
    if (v != Py_None) {
        PyObject *r = PyObject_CallOneArg(check, v);
        if (r == NULL)
            return -1;
        good = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (good < 0)
            return -1;
    }
    return good ? 0 : call_checked(op);
}

static int
invoke(PyObject *raw, PyObject *d, PyObject *p, PyObject *slot_obj, PyObject *last,
       PyObject *ops, long long *shown)
{
    if (slot_obj != NULL) {
        PyObject *prev = PyList_GET_ITEM(ops, PyLong_AsSsize_t(slot_obj));
        if (Py_TYPE(prev) != op_type)  /* busy: its last invoke is pending */
            return fail_irregular();
        int back = PyObject_RichCompareBool(FIELD(d, L_time), FIELD(prev, O_end_time), Py_LT);
        if (back != 0)  /* going back in time */
            return back < 0 ? -1 : fail_irregular();
        if (str_eq(FIELD(prev, O_type), s_info)) {  /* retired by an info */
            int other = PyObject_RichCompareBool(p, nemesis, Py_NE);
            if (other != 0)
                return other < 0 ? -1 : fail_irregular();
        }
    }
    if (FIELD(d, L_value) == Py_None && !ends_null(raw) && add_line_keys(raw, d, shown) < 0)
        return -1;
    PyObject *slot = PyLong_FromSsize_t(PyList_GET_SIZE(ops));
    if (slot == NULL)
        return -1;
    int rc = PyDict_SetItem(last, p, slot);
    Py_DECREF(slot);
    return rc < 0 ? -1 : PyList_Append(ops, d);
}

static int
complete(PyObject *raw, PyObject *d, PyObject *p, PyObject *slot_obj, PyObject *ops,
         PyObject *share, long long *shown)
{
    if (slot_obj == NULL)
        return fail_irregular();
    Py_ssize_t slot = PyLong_AsSsize_t(slot_obj);
    PyObject *inv = PyList_GET_ITEM(ops, slot);
    if (Py_TYPE(inv) != line_type)
        return fail_irregular();
    PyObject *f = FIELD(d, L_f);
    Py_INCREF(f);
    PyUnicode_InternInPlace(&f);  /* one shared string per name */
    PyObject *op = NULL;
    int rc = -1;
    if (!str_eq(FIELD(inv, L_f), f)) {
        fail_irregular();
        goto done;
    }
    int back = PyObject_RichCompareBool(FIELD(d, L_time), FIELD(inv, L_time), Py_LT);
    if (back != 0) {
        if (back > 0)
            fail_irregular();
        goto done;
    }
    PyObject *v = FIELD(inv, L_value), *cv = FIELD(d, L_value), *error = FIELD(d, L_error);
    if ((v != Py_None && !PyDict_CheckExact(v)) || (cv != Py_None && !PyDict_CheckExact(cv))) {
        fail_irregular();
        goto done;
    }
    if (cv != Py_None) {
        if (v == Py_None) {
            v = cv;
            *shown += PyDict_GET_SIZE(cv);
        }
        else {
            *shown += PyDict_GET_SIZE(v) + PyDict_GET_SIZE(cv);
            if (PyDict_Update(v, cv) < 0)  /* both fresh from the decoder: ours */
                goto done;
        }
        if (error != Py_None && add_line_keys(raw, d, shown) < 0)
            goto done;
    }
    else {
        if (v != Py_None)
            *shown += PyDict_GET_SIZE(v);
        if ((error != Py_None || !ends_null(raw)) && add_line_keys(raw, d, shown) < 0)
            goto done;
    }
    PyObject *args[9] = {p, f, FIELD(d, L_type), FIELD(inv, L_index), FIELD(inv, L_time),
                         FIELD(d, L_index), FIELD(d, L_time), v, error};
    op = PyObject_Vectorcall((PyObject *)op_type, args, 9, NULL);
    if (op == NULL)
        goto done;
    if (f == f_read || f == f_write)
        rc = read_or_write(op, v, share);
    else
        rc = other_value(op, f, v);
    if (rc == 0) {
        PyList_SET_ITEM(ops, slot, op);  /* the op takes the invoke's place */
        op = NULL;
        Py_DECREF(inv);
    }
done:
    Py_XDECREF(op);
    Py_DECREF(f);
    return rc;
}

static int
one_line(PyObject *raw, PyObject *d, PyObject *last, PyObject *ops, PyObject *share,
         long long *n, long long *shown)
{
    if (Py_TYPE(d) != line_type)
        return fail_irregular();
    /* every field set (a decoded Line's are; a slot left empty would be NULL) */
    if (!FIELD(d, L_index) || !FIELD(d, L_time) || !FIELD(d, L_process) || !FIELD(d, L_type)
            || !FIELD(d, L_f) || !FIELD(d, L_value) || !FIELD(d, L_error))
        return fail_irregular();
    int overflow = 0;
    long long index = PyLong_AsLongLongAndOverflow(FIELD(d, L_index), &overflow);
    if (index == -1 && PyErr_Occurred())
        return -1;
    if (overflow || index != *n)
        return fail_irregular();
    *n += 1;
    PyObject *p = FIELD(d, L_process);
    PyObject *slot = PyDict_GetItemWithError(last, p);
    if (slot == NULL && PyErr_Occurred())
        return -1;
    if (str_eq(FIELD(d, L_type), s_invoke))
        return invoke(raw, d, p, slot, last, ops, shown);
    return complete(raw, d, p, slot, ops, share, shown);
}

static PyObject *
pair_chunk(PyObject *self, PyObject *args)
{
    PyObject *chunk, *last, *ops, *share;
    long long n, shown;
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "_loops.configure was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!O!LL", &PyBytes_Type, &chunk, &PyDict_Type, &last,
                          &PyList_Type, &ops, &PyDict_Type, &share, &n, &shown))
        return NULL;
    const char *buf = PyBytes_AS_STRING(chunk);
    Py_ssize_t size = PyBytes_GET_SIZE(chunk), pos = 0;
    while (pos < size) {
        const char *nl = memchr(buf + pos, '\n', (size_t)(size - pos));
        Py_ssize_t stop = nl != NULL ? (nl - buf) + 1 : size;
        PyObject *raw = PyBytes_FromStringAndSize(buf + pos, stop - pos);
        if (raw == NULL)
            return NULL;
        PyObject *d = PyObject_CallOneArg(decode, raw);
        if (d == NULL) {
            Py_DECREF(raw);
            if (!PyErr_ExceptionMatches(decode_error))
                return NULL;
            PyErr_Clear();  /* not JSON: fastload decides whether it is the blank end */
            return Py_BuildValue("LLnn", n, shown, pos, stop);
        }
        int rc = one_line(raw, d, last, ops, share, &n, &shown);
        Py_DECREF(d);
        Py_DECREF(raw);
        if (rc < 0)
            return NULL;
        pos = stop;
    }
    return Py_BuildValue("LLnn", n, shown, (Py_ssize_t)-1, (Py_ssize_t)-1);
}

static PyObject *held[16];  /* what configure was given, held until the next configure */

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *lt, *ot, *o[13];
    if (!PyArg_ParseTuple(args, "O!O!" "OOOOOOOOO" "O!OOO!", &PyType_Type, &lt, &PyType_Type,
                          &ot, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &PyDict_Type, &o[9], &o[10], &o[11], &PyBytes_Type, &o[12]))
        return NULL;
    Py_ssize_t off[9];
    if (slot_offset((PyTypeObject *)lt, "index", &off[0])
            || slot_offset((PyTypeObject *)lt, "time", &off[1])
            || slot_offset((PyTypeObject *)lt, "process", &off[2])
            || slot_offset((PyTypeObject *)lt, "type", &off[3])
            || slot_offset((PyTypeObject *)lt, "f", &off[4])
            || slot_offset((PyTypeObject *)lt, "value", &off[5])
            || slot_offset((PyTypeObject *)lt, "error", &off[6])
            || slot_offset((PyTypeObject *)ot, "type", &off[7])
            || slot_offset((PyTypeObject *)ot, "end_time", &off[8]))
        return NULL;
    if (s_invoke == NULL && (s_invoke = PyUnicode_InternFromString("invoke")) == NULL)
        return NULL;
    if (s_info == NULL && (s_info = PyUnicode_InternFromString("info")) == NULL)
        return NULL;
    PyObject *old[16];
    memcpy(old, held, sizeof held);
    held[0] = Py_NewRef(lt);
    held[1] = Py_NewRef(ot);
    for (int i = 0; i < 13; i++)
        held[i + 2] = Py_NewRef(o[i]);
    for (int i = 0; i < 15; i++)
        Py_XDECREF(old[i]);
    line_type = (PyTypeObject *)lt;
    op_type = (PyTypeObject *)ot;
    decode = o[0], decode_error = o[1], irregular = o[2], nemesis = o[3];
    f_read = o[4], f_write = o[5], key_name = o[6], lock_name = o[7], token_name = o[8];
    usual = o[9], line_keys = o[10], checked = o[11], null_end_obj = o[12];
    L_index = off[0], L_time = off[1], L_process = off[2], L_type = off[3], L_f = off[4];
    L_value = off[5], L_error = off[6], O_type = off[7], O_end_time = off[8];
    null_end = PyBytes_AS_STRING(null_end_obj);
    null_end_len = PyBytes_GET_SIZE(null_end_obj);
    configured = 1;
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(line_type, op_type, decode, decode_error, irregular, nemesis, f_read, f_write, "
     "key, lock, token, usual, line_keys, checked, null_end): before pair_chunk."},
    {"pair_chunk", pair_chunk, METH_VARARGS,
     "pair_chunk(chunk, last, ops, share, n, shown) -> (n, shown, start, stop)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pairing",
    "checker/fastload.py's pairing loop in C (checker/_pairing.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__pairing(void)
{
    return module_with_digest(&module);
}
