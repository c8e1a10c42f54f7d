/* The grant table's pass over reads, writes and the nemesis' ops (checker/rwpass.py) in C.
 *
 * Why: reads and writes are most ops of a history, and their branches of the pass were half of
 * build_grants' time on the 1,000,009-event benchmark history (docs/checker-speed.md). Every
 * other op, the lock operations, is handed to build_grants' `lock_op` in turn, in Python, as the
 * reference loop does. rwpass._rw_pass is the reference: this is a second implementation of
 * it, held equal to it by tests/unit/checker/test_loops.py (the same grant table, or the same
 * exception, on every shipped history, simulated ones and hand-made ops of any shape). Where a
 * value is not a dict, it is read through Python's own calls (`get`, `in`, `[]`), as there.
 *
 * configure(...) once, at rwpass' import; rw_pass(ops, lock_op, state) fills the state's
 * containers (rwpass.PassState) and returns (last_end, reads, writes, rejected, jobs), or
 * NotImplemented, having touched nothing, when an op is not exactly an Op (rwpass then runs
 * the Python loop). */

#include "_loops.h"

static PyObject *rw_op_type, *rw_nemesis, *rw_key, *rw_lock, *rw_token, *rw_job, *rw_job_key;
static PyObject *rw_columns_type, *s_read, *s_write, *s_ok, *s_fail, *s_stale, *s_job_prefix;
static PyObject *rw_zero, *rw_one;
static Py_ssize_t R_process, R_f, R_type, R_index, R_time, R_end_time, R_value, R_error;
static int rw_configured;

/* v.get(name): a new reference (None when absent), as Python's call would give */
static PyObject *
vget(PyObject *v, PyObject *name)
{
    if (PyDict_CheckExact(v)) {
        PyObject *x = PyDict_GetItemWithError(v, name);
        if (x == NULL)
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        return Py_NewRef(x);
    }
    return PyObject_CallMethod(v, "get", "O", name);
}

/* job_key(key), the checker's own function, called only for a string starting "job:" */
static int
is_job_key(PyObject *key)
{
    if (!PyUnicode_CheckExact(key) || PyUnicode_Tailmatch(key, s_job_prefix, 0, 4, -1) != 1)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *r = PyObject_CallOneArg(rw_job_key, key);
    if (r == NULL)
        return -1;
    int yes = PyObject_IsTrue(r);
    Py_DECREF(r);
    return yes;
}

/* how many jobs a write adds: `type(v[job]) is int or job_key(v.get(key))` where v has "job",
 * `job_key(v.get(key))` where it has not (has: whether it has) */
static int
job_count(PyObject *v, int has, PyObject *key)
{
    if (has) {
        PyObject *j = PyObject_GetItem(v, rw_job);
        if (j == NULL)
            return -1;
        int is_int = PyLong_CheckExact(j);
        Py_DECREF(j);
        if (is_int)
            return 1;
    }
    return is_job_key(key);
}

static int
add_count(PyObject *counts, PyObject *k)
{
    PyObject *n = PyDict_GetItemWithError(counts, k);
    if (n == NULL && PyErr_Occurred())
        return -1;
    PyObject *m = n == NULL ? Py_NewRef(rw_one) : PyNumber_Add(n, rw_one);
    if (m == NULL)
        return -1;
    int rc = PyDict_SetItem(counts, k, m);
    Py_DECREF(m);
    return rc;
}

enum { PER_F, NOT_OK, PROCESSES, UNFINISHED, NEMESIS_OPS, LAST_READS, LAST_PL, WRITE_GRANT,
       GRANTED_WRITES, GRANTED_TIMES, GRANTED_GIDS, WRITES, COLUMNS, APPENDS, N_STATE };
static const char *state_names[N_STATE] = {
    "per_f", "not_ok", "processes", "unfinished", "nemesis_ops", "last_reads", "last_pl",
    "write_grant", "granted_writes", "granted_times", "granted_gids", "writes", "columns",
    "appends"};

struct counts { long long reads, writes, rejected, jobs; };

/* (writes, inv, ok, tokens, gids) of a key, made at its first write */
static PyObject *
key_lists(PyObject **st, PyObject *rkey)
{
    PyObject *lists = PyDict_GetItemWithError(st[APPENDS], rkey);
    if (lists != NULL || PyErr_Occurred())
        return lists;
    PyObject *kw = PyList_New(0), *cols = NULL, *l[4] = {NULL, NULL, NULL, NULL};
    static const char *names[4] = {"inv", "ok", "tokens", "gids"};
    if (kw == NULL || PyDict_SetItem(st[WRITES], rkey, kw) < 0)
        goto done;
    if ((cols = PyObject_CallNoArgs(rw_columns_type)) == NULL
            || PyDict_SetItem(st[COLUMNS], rkey, cols) < 0)
        goto done;
    for (int i = 0; i < 4; i++)
        if ((l[i] = PyObject_GetAttrString(cols, names[i])) == NULL || !PyList_Check(l[i])) {
            if (l[i] != NULL)
                PyErr_SetString(PyExc_TypeError, "WriteColumns' columns are lists");
            goto done;
        }
    PyObject *t = PyTuple_Pack(5, kw, l[0], l[1], l[2], l[3]);
    if (t != NULL) {
        if (PyDict_SetItem(st[APPENDS], rkey, t) == 0)
            lists = t;  /* borrowed: the dict holds it */
        Py_DECREF(t);
    }
done:
    Py_XDECREF(kw);
    Py_XDECREF(cols);
    for (int i = 0; i < 4; i++)
        Py_XDECREF(l[i]);
    return lists;
}

/* An ok write with a value: the grant it was made under, its key's columns, or a job. */
static int
ok_write(PyObject *op, PyObject *v, PyObject **st, struct counts *c)
{
    int rc = -1;
    PyObject *gid = NULL, *token = NULL;
    PyObject *rkey = vget(v, rw_key), *wlock = rkey ? vget(v, rw_lock) : NULL;
    if (wlock == NULL)
        goto done;
    if (PyUnicode_CheckExact(wlock)) {
        PyObject *k = PyTuple_Pack(2, FIELD(op, R_process), wlock);
        if (k == NULL)
            goto done;
        gid = PyDict_GetItemWithError(st[LAST_PL], k);
        Py_DECREF(k);
        if (gid == NULL && PyErr_Occurred())
            goto done;
        Py_XINCREF(gid);
    }
    if (gid != NULL && (PyDict_SetItem(st[WRITE_GRANT], FIELD(op, R_index), gid) < 0
                        || PyList_Append(st[GRANTED_WRITES], op) < 0
                        || PyList_Append(st[GRANTED_TIMES], FIELD(op, R_time)) < 0
                        || PyList_Append(st[GRANTED_GIDS], gid) < 0))
        goto done;
    int has = PySequence_Contains(v, rw_job);
    if (has < 0)
        goto done;
    if (has) {
        int j = job_count(v, 1, rkey);
        if (j < 0)
            goto done;
        c->jobs += j;
    }
    else if (PyUnicode_CheckExact(rkey)) {
        PyObject *lists = key_lists(st, rkey);
        if (lists == NULL || (token = vget(v, rw_token)) == NULL)
            goto done;
        PyObject *add[5] = {op, FIELD(op, R_time), FIELD(op, R_end_time), token,
                            gid != NULL ? gid : Py_None};
        for (int i = 0; i < 5; i++)
            if (PyList_Append(PyTuple_GET_ITEM(lists, i), add[i]) < 0)
                goto done;
    }
    rc = 0;
done:
    Py_XDECREF(rkey);
    Py_XDECREF(wlock);
    Py_XDECREF(gid);
    Py_XDECREF(token);
    return rc;
}

/* A write not ok: a refusal of a stale token, or a job's execution. */
static int
other_write(PyObject *op, PyObject *t, PyObject *v, struct counts *c)
{
    int fail = eq_str(t, s_fail);
    if (fail < 0)
        return -1;
    if (fail) {
        int stale = eq_str(FIELD(op, R_error), s_stale);
        if (stale < 0)
            return -1;
        c->rejected += stale;
    }
    if (v == Py_None)
        return 0;
    int has = PySequence_Contains(v, rw_job);
    if (has < 0)
        return -1;
    PyObject *key = vget(v, rw_key);
    if (key == NULL)
        return -1;
    int j = job_count(v, has, key);
    Py_DECREF(key);
    if (j < 0)
        return -1;
    c->jobs += j;
    return 0;
}

static int
read_op(PyObject *op, PyObject *f, int ok, PyObject **st, struct counts *c)
{
    if (c->reads++ == 0 && PyDict_SetItem(st[PER_F], f, rw_zero) < 0)
        return -1;  /* its place in the order of first appearance; counted after */
    PyObject *v = FIELD(op, R_value);
    if (!ok || v == Py_None)
        return 0;
    PyObject *rkey = vget(v, rw_key);
    if (rkey == NULL)
        return -1;
    int rc = PyUnicode_CheckExact(rkey) ? PyDict_SetItem(st[LAST_READS], rkey, op) : 0;
    Py_DECREF(rkey);
    return rc;
}

/* One op (not the nemesis'): tallied, then a read, a write, or lock_op's. */
static int
client_op(PyObject *op, PyObject *lock_op, PyObject **st, struct counts *c)
{
    PyObject *f = FIELD(op, R_f), *t = FIELD(op, R_type);
    if (PySet_Add(st[PROCESSES], FIELD(op, R_process)) < 0)
        return -1;
    int ok = eq_str(t, s_ok);
    if (ok < 0)
        return -1;
    if (!ok) {
        PyObject *k = PyTuple_Pack(2, f, t);
        int rc = k == NULL ? -1 : add_count(st[NOT_OK], k);
        Py_XDECREF(k);
        if (rc < 0)
            return -1;
    }
    int is = eq_str(f, s_read);
    if (is != 0)
        return is < 0 ? -1 : read_op(op, f, ok, st, c);
    if ((is = eq_str(f, s_write)) == 0) {
        PyObject *r = PyObject_CallOneArg(lock_op, op);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    if (is < 0 || (c->writes++ == 0 && PyDict_SetItem(st[PER_F], f, rw_zero) < 0))
        return -1;
    PyObject *v = FIELD(op, R_value);
    if (!ok)
        return other_write(op, t, v, c);
    return v == Py_None ? 0 : ok_write(op, v, st, c);
}

static PyObject *
rw_pass(PyObject *self, PyObject *args)
{
    PyObject *ops, *lock_op, *state, *st[N_STATE] = {NULL}, *last_end = NULL, *out = NULL;
    struct counts c = {0, 0, 0, 0};
    if (!rw_configured) {
        PyErr_SetString(PyExc_RuntimeError, "_rwpass.configure was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &ops, &lock_op, &state))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    for (Py_ssize_t i = 0; i < n; i++)  /* ops of another type: the Python loop reads them */
        if (Py_TYPE(PyList_GET_ITEM(ops, i)) != (PyTypeObject *)rw_op_type)
            Py_RETURN_NOTIMPLEMENTED;
    for (int i = 0; i < N_STATE; i++)
        if ((st[i] = PyObject_GetAttrString(state, state_names[i])) == NULL)
            goto done;
    last_end = Py_NewRef(rw_zero);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ops); i++) {
        PyObject *op = PyList_GET_ITEM(ops, i), *end = FIELD(op, R_end_time);
        Py_INCREF(op);  /* lock_op may run any code: the op is ours while we use it */
        int rc = 0;
        if (end == Py_None)
            rc = PyList_Append(st[UNFINISHED], op);
        else if ((rc = PyObject_RichCompareBool(end, last_end, Py_GT)) > 0) {
            Py_SETREF(last_end, Py_NewRef(end));
            rc = 0;
        }
        PyObject *p = FIELD(op, R_process);
        int nem = rc < 0 ? -1 : PyLong_CheckExact(p) ? 0 : eq_str(p, rw_nemesis);
        if (nem > 0)
            rc = PyList_Append(st[NEMESIS_OPS], op);
        else if (nem == 0)
            rc = client_op(op, lock_op, st, &c);
        Py_DECREF(op);
        if (rc < 0 || nem < 0)
            goto done;
    }
    out = Py_BuildValue("OLLLL", last_end, c.reads, c.writes, c.rejected, c.jobs);
done:
    Py_XDECREF(last_end);
    for (int i = 0; i < N_STATE; i++)
        Py_XDECREF(st[i]);
    return out;
}

static PyObject *rw_held[8];

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "O!OOOOOOO!", &PyType_Type, &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &PyType_Type, &o[7]))
        return NULL;
    PyTypeObject *ot = (PyTypeObject *)o[0];
    Py_ssize_t off[8];
    static const char *names[8] = {"process", "f", "type", "index", "time", "end_time", "value",
                                   "error"};
    for (int i = 0; i < 8; i++)
        if (slot_offset(ot, names[i], &off[i]))
            return NULL;
    if (s_read == NULL) {
        if ((s_read = PyUnicode_InternFromString("read")) == NULL
                || (s_write = PyUnicode_InternFromString("write")) == NULL
                || (s_ok = PyUnicode_InternFromString("ok")) == NULL
                || (s_fail = PyUnicode_InternFromString("fail")) == NULL
                || (s_stale = PyUnicode_InternFromString("stale-token")) == NULL
                || (s_job_prefix = PyUnicode_InternFromString("job:")) == NULL
                || (rw_zero = PyLong_FromLong(0)) == NULL
                || (rw_one = PyLong_FromLong(1)) == NULL)
            return NULL;
    }
    PyObject *old[8];
    memcpy(old, rw_held, sizeof rw_held);
    for (int i = 0; i < 8; i++)
        rw_held[i] = Py_NewRef(o[i]);
    for (int i = 0; i < 8; i++)
        Py_XDECREF(old[i]);
    rw_op_type = o[0], rw_nemesis = o[1], rw_key = o[2], rw_lock = o[3], rw_token = o[4];
    rw_job = o[5], rw_job_key = o[6], rw_columns_type = o[7];
    R_process = off[0], R_f = off[1], R_type = off[2], R_index = off[3], R_time = off[4];
    R_end_time = off[5], R_value = off[6], R_error = off[7];
    rw_configured = 1;
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(op_type, nemesis, key, lock, token, job, job_key, write_columns): before "
     "rw_pass."},
    {"rw_pass", rw_pass, METH_VARARGS,
     "rw_pass(ops, lock_op, state) -> (last_end, reads, writes, rejected, jobs), or "
     "NotImplemented for ops not all of the op type"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rwpass",
    "checker/rwpass.py's pass in C (checker/_rwpass.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__rwpass(void)
{
    return module_with_digest(&module);
}
