/* What the checker's two loops in C share (checker/_pairing.c, checker/_rwpass.c): reading
 * a msgspec Struct's field at its slot's offset, and comparing with a string as Python does.
 * Each is a module of its own, built by setup.py, with the digest of its source and this header
 * compiled in (checker/native.py uses a build only while they match). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#ifndef SOURCE_DIGEST
#define SOURCE_DIGEST "unknown"
#endif

/* a field of a msgspec Struct: an object slot at a fixed offset (found by slot_offset) */
#define FIELD(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static inline int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL)
        return -1;
    if (Py_TYPE(d) != &PyMemberDescr_Type
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    *out = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

static inline int
str_eq(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b))
        return 0;
    return PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) && PyUnicode_Compare(a, b) == 0;
}

/* a == b for a string b: as Python's == (an object of another type compares as it does) */
static inline int
eq_str(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (PyUnicode_CheckExact(a))
        return PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) && PyUnicode_Compare(a, b) == 0;
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* The module, with SOURCE_DIGEST as a constant. */
static inline PyObject *
module_with_digest(PyModuleDef *def)
{
    PyObject *m = PyModule_Create(def);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
