/* tilejit's compiled launch path: the warm `kfn[grid](*args)` dispatch and the argument
 * conversion of a kernel launch, in C.
 *
 * Dispatcher (one per @kernel): binds positional/keyword/default arguments, builds the
 * specialisation key exactly as compiler/jit.py's `KernelFunction._key` does, looks it up in the kernel's
 * `compiled` dict, checks that the globals the kernel captured are still the objects it was
 * compiled with, evaluates a callable grid, and calls the launcher. Anything unusual (a miss, an
 * unknown keyword, a render_only block, a changed global, an error) goes to the Python `run`,
 * which is the reference implementation and raises the clear errors.
 *
 * Launcher (one per compiled specialisation of a target with a packed entry, the cpu target):
 * checks the grid against the target's limits, converts every argument (tensor -> data pointer
 * after a device, dtype and null check; ints with range checks), releases the GIL, calls the
 * kernel's `tj_launch_packed` entry and turns a status the kernel reported (a bounds-checked
 * access out of range, a run-time loop step of 0) into the Python error its owner formats.
 * Whatever it does not accept on its fast path goes to the owner's Python `prepare(grid, args)`,
 * which validates with clear messages and returns the converted launch, run through `raw`.
 *
 * signature, replay and replayed (the library ops' launch plans, kernels/op_plans.py): the plan
 * key of an op call, as op_plans.signature_py computes it (None when the call is not plain
 * eager); the replay of a plan's launches, as op_plans.replay_py does; and the whole hit path of
 * a call (key, lookup, outputs, replay), as op_plans.replayed_py does.
 *
 * The C types below must match targets/cpu/tilejit_cpu.h (tj_arg, tj_status, tj_range); the module's
 * ABI_LAYOUT exports their layout for the test that compares them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef union { void* p; int64_t i; float f; } tj_arg;
typedef struct { int32_t code, site, arg, store; int64_t offset, lo, hi; void* par; } tj_status;
typedef struct { int64_t base, lo, hi; } tj_range;
typedef int (*tj_entry_fn)(tj_status*, const int32_t*, const tj_arg*);

enum { K_PTR = 0, K_I1 = 1, K_I8 = 2, K_I16 = 3, K_I32 = 4, K_I64 = 5, K_F32 = 6 };
#define MAX_PARAMS 256

static PyObject *s_data_ptr, *s_dtype, *s_itemsize, *s_launch_key, *s_launcher, *s_captured;
static PyObject *s_requires_grad, *s_shape, *s_stride, *s_device, *s_packed, *s_layout, *s_is_cpu;

/* ------------------------------------------------------------------------------------------ */
/* Launcher                                                                                   */
/* ------------------------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    tj_entry_fn entry;
    int nparams, bounds;
    int index[MAX_PARAMS], kind[MAX_PARAMS];
    PyObject* dtypes;        /* tuple: torch dtype per param (None for scalars) */
    long long max_grid[3], max_programs;
    PyObject* plain_types;   /* tuple of exact tensor types checked here (Tensor, Parameter) */
    PyObject* device_flag;   /* attribute that must be True, e.g. "is_cpu" */
    PyObject* owner;         /* Python object with prepare(grid, args) and status(code, site, arg, store, off, lo, hi) */
    void* par;               /* the grain rule's process-wide settings (targets/cpu/parallel.py), passed in the status */
} Launcher;

static PyTypeObject LauncherType;

/* 1: g filled; 0: empty grid (nothing runs); -1: not the plain case (the slow path decides) */
static int parse_grid(Launcher* self, PyObject* grid, int32_t g[3]) {
    if (!PyTuple_CheckExact(grid) && !PyList_CheckExact(grid)) return -1;
    PyObject** items = PySequence_Fast_ITEMS(grid);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(grid);
    if (n < 1 || n > 3) return -1;
    long long total = 1;
    int empty = 0;
    g[0] = g[1] = g[2] = 1;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* v = items[i];
        if (!PyLong_CheckExact(v)) return -1;
        int of = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &of);
        if (of || x < 0 || x > self->max_grid[i]) { PyErr_Clear(); return -1; }
        if (x == 0) empty = 1;
        g[i] = (int32_t)x;
        total *= x;   /* each factor <= 2**31: no overflow in three */
    }
    if (empty) return 0;
    if (total > self->max_programs) return -1;
    return 1;
}

/* What a launch checks of each tensor besides its type: its device (the launcher's device flag) and
 * its dtype. A caller whose key already pinned them checks less: the dispatcher's key pins dtypes,
 * a launch plan's signature both. */
enum { CHECK_DEVICE = 1, CHECK_DTYPE = 2, CHECK_ALL = 3 };

/* 1: converted; 0: not the plain case (slow path) */
static int convert_tensor(Launcher* self, PyObject* t, int i, int checks, void** out) {
    PyTypeObject* tp = Py_TYPE(t);
    Py_ssize_t k, nt = PyTuple_GET_SIZE(self->plain_types);
    for (k = 0; k < nt; ++k)
        if ((PyObject*)tp == PyTuple_GET_ITEM(self->plain_types, k)) break;
    if (k == nt) return 0;
    int ok;
    if (checks & CHECK_DEVICE) {
        PyObject* flag = PyObject_GetAttr(t, self->device_flag);
        if (flag == NULL) { PyErr_Clear(); return 0; }
        ok = flag == Py_True;
        Py_DECREF(flag);
        if (!ok) return 0;
    }
    if (checks & CHECK_DTYPE) {
        PyObject* dt = PyObject_GetAttr(t, s_dtype);
        if (dt == NULL) { PyErr_Clear(); return 0; }
        ok = dt == PyTuple_GET_ITEM(self->dtypes, i);
        Py_DECREF(dt);
        if (!ok) return 0;
    }
    PyObject* dp = PyObject_CallMethodNoArgs(t, s_data_ptr);
    if (dp == NULL) { PyErr_Clear(); return 0; }
    void* p = PyLong_AsVoidPtr(dp);
    Py_DECREF(dp);
    if (p == NULL) { PyErr_Clear(); return 0; }   /* meta / fake / no elements: the slow path decides */
    *out = p;
    return 1;
}

static int convert_int(PyObject* v, long long lo, long long hi, int64_t* out) {
    if (!PyLong_CheckExact(v)) return 0;
    int of = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &of);
    if (of || x < lo || x > hi) { PyErr_Clear(); return 0; }
    *out = x;
    return 1;
}

/* The bytes tensor `t`'s view spans (bounds-checked mode): from its data pointer to one past its
 * last element as its sizes and strides reach (torch strides are never negative); nothing when it
 * has no elements. `dtype` is the specialisation's (checked, or known to match). The same rule as
 * compiler/target/args.py's view_range. */
static int view_range(PyObject* t, PyObject* dtype, int64_t base, tj_range* r) {
    PyObject* sh = PyObject_GetAttr(t, s_shape);
    PyObject* st = sh ? PyObject_CallMethodNoArgs(t, s_stride) : NULL;
    PyObject* isz = st ? PyObject_GetAttr(dtype, s_itemsize) : NULL;
    int ok = 0;
    if (isz != NULL && PyTuple_Check(sh) && PyTuple_Check(st) && PyTuple_GET_SIZE(sh) == PyTuple_GET_SIZE(st)) {
        int64_t last = 0, empty = 0;
        for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(sh); ++d) {
            int64_t n = PyLong_AsLongLong(PyTuple_GET_ITEM(sh, d)), s = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
            if (n == 0) empty = 1;
            else last += (n - 1) * s;
        }
        r->base = r->lo = base;
        r->hi = empty ? base : base + (last + 1) * (int64_t)PyLong_AsLongLong(isz);
        ok = !PyErr_Occurred();
    }
    Py_XDECREF(sh); Py_XDECREF(st); Py_XDECREF(isz);
    return ok;
}

static PyObject* Launcher_raw(Launcher* self, PyObject* args);

/* The owner's prepare(grid, args) checks everything with clear errors and returns the converted
 * launch (g0, g1, g2, values, ranges), or None for an empty grid. */
static PyObject* call_slow(Launcher* self, PyObject* grid, PyObject* const* args, Py_ssize_t nargs) {
    PyObject* tup = PyTuple_New(nargs);
    if (tup == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; ++i) { Py_INCREF(args[i]); PyTuple_SET_ITEM(tup, i, args[i]); }
    PyObject* prep = PyObject_CallMethod(self->owner, "prepare", "OO", grid, tup);
    Py_DECREF(tup);
    if (prep == NULL || prep == Py_None) return prep;
    PyObject* r = PyTuple_Check(prep) ? Launcher_raw(self, prep) : NULL;
    if (r == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "prepare() must return a tuple or None");
    Py_DECREF(prep);
    return r;
}

static PyObject* run_entry(Launcher* self, const int32_t g[3], tj_arg* a) {
    tj_status st;
    memset(&st, 0, sizeof st);
    st.par = self->par;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = self->entry(&st, g, a);
    Py_END_ALLOW_THREADS
    if (rc != 0 || st.code != 0)
        return PyObject_CallMethod(self->owner, "status", "iiiiLLL", st.code ? st.code : rc, st.site, st.arg,
                                   st.store, (long long)st.offset, (long long)st.lo, (long long)st.hi);
    Py_RETURN_NONE;
}

/* The launch of `args` (the kernel's whole argument list), with `checks` of each tensor (CHECK_*).
 * Returns None or NULL with an exception. */
static PyObject* launch(Launcher* self, PyObject* grid, PyObject* const* args, Py_ssize_t nargs, int checks) {
    int32_t g[3];
    int r = parse_grid(self, grid, g);
    if (r < 0) return call_slow(self, grid, args, nargs);
    if (r == 0) Py_RETURN_NONE;
    tj_arg a[MAX_PARAMS + 1];
    tj_range rng[MAX_PARAMS];
    for (int i = 0; i < self->nparams; ++i) {
        int idx = self->index[i];
        if (idx >= nargs) return call_slow(self, grid, args, nargs);
        PyObject* v = args[idx];
        int ok;
        switch (self->kind[i]) {
        case K_PTR:
            ok = convert_tensor(self, v, i, checks, &a[i].p);
            if (ok && self->bounds
                && !view_range(v, PyTuple_GET_ITEM(self->dtypes, i), (int64_t)(intptr_t)a[i].p, &rng[i])) {
                PyErr_Clear();
                ok = 0;
            }
            break;
        case K_I1: ok = v == Py_True || v == Py_False; a[i].i = v == Py_True; break;
        case K_I8: ok = convert_int(v, -128, 127, &a[i].i); break;
        case K_I16: ok = convert_int(v, -32768, 32767, &a[i].i); break;
        case K_I32: ok = convert_int(v, -2147483648LL, 2147483647LL, &a[i].i); break;
        case K_I64: ok = convert_int(v, INT64_MIN, INT64_MAX, &a[i].i); break;
        case K_F32: ok = PyFloat_CheckExact(v); if (ok) a[i].f = (float)PyFloat_AS_DOUBLE(v); break;
        default: ok = 0;
        }
        if (!ok) return call_slow(self, grid, args, nargs);
    }
    if (self->bounds) a[self->nparams].p = rng;
    return run_entry(self, g, a);
}

static PyObject* Launcher_vectorcall(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    Launcher* self = (Launcher*)op;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "launcher(grid, args) takes exactly two arguments");
        return NULL;
    }
    PyObject* seq = PySequence_Fast(args[1], "launcher(grid, args): args must be a tuple or list");
    if (seq == NULL) return NULL;
    PyObject* r = launch(self, args[0], PySequence_Fast_ITEMS(seq), PySequence_Fast_GET_SIZE(seq), CHECK_ALL);
    Py_DECREF(seq);
    return r;
}

/* raw(g0, g1, g2, values[, ranges]): values already converted by the slow path (pointers as
 * ints, scalars as Python numbers); ranges: (base, lo, hi) per pointer param in bounds mode. */
static PyObject* Launcher_raw(Launcher* self, PyObject* args) {
    int g0, g1, g2;
    PyObject *values, *ranges = Py_None;
    if (!PyArg_ParseTuple(args, "iiiO|O", &g0, &g1, &g2, &values, &ranges)) return NULL;
    PyObject* seq = PySequence_Fast(values, "raw: values must be a sequence");
    if (seq == NULL) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != self->nparams) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "raw: one value per kernel parameter");
        return NULL;
    }
    tj_arg a[MAX_PARAMS + 1];
    tj_range rng[MAX_PARAMS];
    for (int i = 0; i < self->nparams; ++i) {
        PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
        if (self->kind[i] == K_PTR) a[i].p = PyLong_AsVoidPtr(v);
        else if (self->kind[i] == K_F32) a[i].f = (float)PyFloat_AsDouble(v);
        else a[i].i = PyLong_AsLongLong(v);
        if (PyErr_Occurred()) { Py_DECREF(seq); return NULL; }
    }
    Py_DECREF(seq);
    if (self->bounds) {
        PyObject* rs = PySequence_Fast(ranges, "raw: bounds mode needs one (base, lo, hi) per pointer");
        if (rs == NULL) return NULL;
        if (PySequence_Fast_GET_SIZE(rs) != self->nparams) {
            Py_DECREF(rs);
            PyErr_SetString(PyExc_ValueError, "raw: one range (or None) per kernel parameter");
            return NULL;
        }
        for (int i = 0; i < self->nparams; ++i) {
            if (self->kind[i] != K_PTR) continue;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(rs, i), "LLL", &rng[i].base, &rng[i].lo, &rng[i].hi)) {
                Py_DECREF(rs);
                return NULL;
            }
        }
        Py_DECREF(rs);
        a[self->nparams].p = rng;
    }
    int32_t g[3] = {g0, g1, g2};
    return run_entry(self, g, a);
}

static int Launcher_init(Launcher* self, PyObject* args, PyObject* kw) {
    static char* names[] = {"entry", "kinds", "indices", "dtypes", "max_grid", "max_programs", "plain_types",
                            "device_flag", "owner", "bounds", "parallel", NULL};
    unsigned long long entry, par = 0;
    PyObject *kinds, *indices, *dtypes, *max_grid, *plain, *flag, *owner;
    long long max_programs;
    int bounds = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KOOOOLOOO|pK", names, &entry, &kinds, &indices, &dtypes, &max_grid,
                                     &max_programs, &plain, &flag, &owner, &bounds, &par))
        return -1;
    Py_ssize_t n = PySequence_Size(kinds);
    if (n < 0 || n > MAX_PARAMS || PySequence_Size(indices) != n || !PyTuple_Check(dtypes)
        || PyTuple_GET_SIZE(dtypes) != n || !PyTuple_Check(plain) || !PyUnicode_Check(flag) || entry == 0) {
        PyErr_SetString(PyExc_ValueError, "Launcher: inconsistent plan");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* k = PySequence_GetItem(kinds, i);
        PyObject* x = PySequence_GetItem(indices, i);
        self->kind[i] = k ? (int)PyLong_AsLong(k) : -1;
        self->index[i] = x ? (int)PyLong_AsLong(x) : -1;
        Py_XDECREF(k);
        Py_XDECREF(x);
        if (PyErr_Occurred()) return -1;
    }
    for (int i = 0; i < 3; ++i) {
        PyObject* v = PySequence_GetItem(max_grid, i);
        self->max_grid[i] = v ? PyLong_AsLongLong(v) : 0;
        Py_XDECREF(v);
        if (PyErr_Occurred()) return -1;
    }
    self->entry = (tj_entry_fn)(uintptr_t)entry;
    self->nparams = (int)n;
    self->bounds = bounds;
    self->max_programs = max_programs;
    self->par = (void*)(uintptr_t)par;
    Py_INCREF(dtypes); Py_XSETREF(self->dtypes, dtypes);
    Py_INCREF(plain); Py_XSETREF(self->plain_types, plain);
    Py_INCREF(flag); Py_XSETREF(self->device_flag, flag);
    Py_INCREF(owner); Py_XSETREF(self->owner, owner);
    self->vectorcall = Launcher_vectorcall;
    return 0;
}

static int Launcher_traverse(Launcher* self, visitproc visit, void* arg) {
    Py_VISIT(self->dtypes); Py_VISIT(self->plain_types); Py_VISIT(self->device_flag); Py_VISIT(self->owner);
    return 0;
}

static int Launcher_clear(Launcher* self) {
    Py_CLEAR(self->dtypes); Py_CLEAR(self->plain_types); Py_CLEAR(self->device_flag); Py_CLEAR(self->owner);
    return 0;
}

static void Launcher_dealloc(Launcher* self) {
    PyObject_GC_UnTrack(self);
    Launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* Launcher_get_owner(Launcher* self, void* closure) {
    Py_INCREF(self->owner);
    return self->owner;
}

static PyObject* Launcher_getattro(PyObject* op, PyObject* name) {
    /* attributes the owner has (name, param_names, ...) read through, so the C launcher can
     * stand wherever the Python one did */
    PyObject* r = PyObject_GenericGetAttr(op, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
    PyErr_Clear();
    return PyObject_GetAttr(((Launcher*)op)->owner, name);
}

static PyMethodDef Launcher_methods[] = {
    {"raw", (PyCFunction)Launcher_raw, METH_VARARGS, "raw(g0, g1, g2, values[, ranges]): launch pre-converted values"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Launcher_getset[] = {
    {"owner", (getter)Launcher_get_owner, NULL, "the Python object behind this launcher", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_tjfast.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "launcher(grid, args): one compiled specialisation's launch with arguments converted in C",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launcher_init,
    .tp_dealloc = (destructor)Launcher_dealloc,
    .tp_traverse = (traverseproc)Launcher_traverse,
    .tp_clear = (inquiry)Launcher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_methods = Launcher_methods,
    .tp_getset = Launcher_getset,
    .tp_getattro = Launcher_getattro,
};

/* ------------------------------------------------------------------------------------------ */
/* Dispatcher                                                                                 */
/* ------------------------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject* compiled;      /* the kernel's dict: key -> CompiledKernel */
    PyObject* run;           /* run(grid, args, kwargs): the Python reference path */
    PyObject* names;         /* tuple of parameter names */
    PyObject* defaults;      /* tuple: default per parameter, or `nodefault` */
    PyObject* nodefault;
    int nargs, nrt, nce;
    int rt[MAX_PARAMS], ce[MAX_PARAMS];
    PyObject* target_name;   /* pinned target's launch_key, or None */
    PyObject* policy;        /* pinned policy, or None */
    PyObject* current_target, *current_policy;   /* callables */
    PyObject* dry;           /* ContextVar: set inside render_only / compile_only */
    PyObject* tensor_type;
    PyObject* spec[7];       /* "i1", "i/16", "i", "i64/16", "i64", "f", "b" */
    PyObject* last_target, *last_name;
} Dispatcher;

/* An error about the user's launch (`run` marks it: jit.py's _USER_ERRORS) is shown from the
   launch line alone: the one frame `run` re-raised it from is dropped too. */
static void drop_launch_frame(void) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && PyObject_HasAttrString(value, "__tilejit_launch_error__")) {
        Py_CLEAR(tb);
        PyException_SetTraceback(value, Py_None);
    }
    PyErr_Restore(type, value, tb);
}

static PyObject* slow_run(Dispatcher* self, PyObject* grid, PyObject* const* pos, Py_ssize_t npos,
                          PyObject* kwnames) {
    PyObject* tup = PyTuple_New(npos);
    if (tup == NULL) return NULL;
    for (Py_ssize_t i = 0; i < npos; ++i) { Py_INCREF(pos[i]); PyTuple_SET_ITEM(tup, i, pos[i]); }
    PyObject* kw = PyDict_New();
    if (kw == NULL) { Py_DECREF(tup); return NULL; }
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nk; ++i)
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), pos[npos + i]) < 0) { Py_DECREF(tup); Py_DECREF(kw); return NULL; }
    PyObject* r = PyObject_CallFunctionObjArgs(self->run, grid, tup, kw, NULL);
    Py_DECREF(tup);
    Py_DECREF(kw);
    if (r == NULL) drop_launch_frame();
    return r;
}

/* The key item of one runtime argument (a new reference), or NULL for "not the plain case". */
static PyObject* spec_of(Dispatcher* self, PyObject* a) {
    if (PyLong_CheckExact(a)) {
        int of = 0;
        long long x = PyLong_AsLongLongAndOverflow(a, &of);
        if (of) { PyErr_Clear(); return NULL; }   /* outside int64: Python raises the error */
        PyObject* s;
        if (x == 1) s = self->spec[0];
        else if (x >= -2147483648LL && x <= 2147483647LL) s = self->spec[x % 16 == 0 ? 1 : 2];
        else s = self->spec[x % 16 == 0 ? 3 : 4];
        Py_INCREF(s);
        return s;
    }
    if (PyFloat_CheckExact(a)) { Py_INCREF(self->spec[5]); return self->spec[5]; }
    if (PyBool_Check(a)) { Py_INCREF(self->spec[6]); return self->spec[6]; }
    if (a == Py_None) Py_RETURN_NONE;
    if (PyObject_TypeCheck(a, (PyTypeObject*)self->tensor_type)) {
        PyObject* dt = PyObject_GetAttr(a, s_dtype);
        if (dt == NULL) PyErr_Clear();
        return dt;
    }
    Py_INCREF(Py_TYPE(a));
    return (PyObject*)Py_TYPE(a);
}

static PyObject* context_name(Dispatcher* self) {
    if (self->target_name != Py_None) { Py_INCREF(self->target_name); return self->target_name; }
    PyObject* t = PyObject_CallNoArgs(self->current_target);
    if (t == NULL) return NULL;
    if (t == self->last_target) { Py_DECREF(t); Py_INCREF(self->last_name); return self->last_name; }
    PyObject* name = PyObject_GetAttr(t, s_launch_key);
    if (name == NULL) { Py_DECREF(t); return NULL; }
    Py_XSETREF(self->last_target, t);
    Py_INCREF(name);
    Py_XSETREF(self->last_name, name);
    return name;
}

/* The key tuple for the bound arguments `full`, or NULL (with no exception: slow path). */
static PyObject* make_key(Dispatcher* self, PyObject* const* full) {
    PyObject* key = PyTuple_New(2 + self->nrt + self->nce);
    if (key == NULL) return NULL;
    PyObject* name = context_name(self);
    if (name == NULL) { PyErr_Clear(); Py_DECREF(key); return NULL; }
    PyTuple_SET_ITEM(key, 0, name);
    PyObject* pol = self->policy;
    if (pol == Py_None) pol = PyObject_CallNoArgs(self->current_policy);
    else Py_INCREF(pol);
    if (pol == NULL) { PyErr_Clear(); Py_DECREF(key); return NULL; }
    PyTuple_SET_ITEM(key, 1, pol);
    Py_ssize_t j = 2;
    for (int i = 0; i < self->nrt; ++i) {
        PyObject* s = spec_of(self, full[self->rt[i]]);
        if (s == NULL) { Py_DECREF(key); return NULL; }
        PyTuple_SET_ITEM(key, j++, s);
    }
    for (int i = 0; i < self->nce; ++i) {
        PyObject* v = full[self->ce[i]];
        PyObject* pair = PyTuple_Pack(2, (PyObject*)Py_TYPE(v), v);
        if (pair == NULL) { PyErr_Clear(); Py_DECREF(key); return NULL; }
        PyTuple_SET_ITEM(key, j++, pair);
    }
    return key;
}

/* 1 when every (container, name, value) the kernel captured still holds `value` */
static int captured_current(PyObject* captured) {
    if (captured == NULL || !PyTuple_Check(captured)) return captured == NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(captured);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* c = PyTuple_GET_ITEM(captured, i);
        if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 3) return 0;
        PyObject *where = PyTuple_GET_ITEM(c, 0), *name = PyTuple_GET_ITEM(c, 1), *value = PyTuple_GET_ITEM(c, 2);
        PyObject* now;
        if (PyCell_Check(where)) now = PyCell_GET(where);
        else if (PyDict_CheckExact(where)) {
            now = PyDict_GetItemWithError(where, name);
            if (now == NULL && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        } else return 0;
        if (now != value) return 0;
    }
    return 1;
}

static PyObject* meta_grid(Dispatcher* self, PyObject* grid, PyObject* const* full) {
    PyObject* meta = PyDict_New();
    if (meta == NULL) return NULL;
    for (int i = 0; i < self->nargs; ++i)
        if (PyDict_SetItem(meta, PyTuple_GET_ITEM(self->names, i), full[i]) < 0) { Py_DECREF(meta); return NULL; }
    PyObject* g = PyObject_CallOneArg(grid, meta);
    Py_DECREF(meta);
    return g;
}

/* Binds positional + keyword arguments into full[]: 1 on success, 0 for the slow path. */
static int bind(Dispatcher* self, PyObject* const* pos, Py_ssize_t npos, PyObject* kwnames, PyObject** full) {
    if (npos > self->nargs) return 0;
    for (int i = 0; i < self->nargs; ++i) full[i] = i < npos ? pos[i] : NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nk; ++k) {
        PyObject* kn = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < self->nargs; ++i) {
            PyObject* n = PyTuple_GET_ITEM(self->names, i);
            if (n == kn || PyUnicode_Compare(n, kn) == 0) { found = i; break; }
        }
        if (found < 0 || full[found] != NULL) return 0;
        full[found] = pos[npos + k];
    }
    for (int i = 0; i < self->nargs; ++i) {
        if (full[i] != NULL) continue;
        PyObject* d = PyTuple_GET_ITEM(self->defaults, i);
        if (d == self->nodefault) return 0;
        full[i] = d;
    }
    return 1;
}

static PyObject* Dispatcher_vectorcall(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    Dispatcher* self = (Dispatcher*)op;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "dispatch(grid, *args, **kwargs) needs a grid");
        return NULL;
    }
    PyObject* grid = args[0];
    PyObject* const* pos = args + 1;
    Py_ssize_t npos = n - 1;
    PyObject* dry = NULL;
    if (PyContextVar_Get(self->dry, Py_None, &dry) < 0) return NULL;
    int is_dry = dry != Py_None;
    Py_DECREF(dry);
    PyObject* fullbuf[MAX_PARAMS];
    PyObject* const* full = pos;
    if (is_dry || self->nargs > MAX_PARAMS) return slow_run(self, grid, pos, npos, kwnames);
    if ((kwnames && PyTuple_GET_SIZE(kwnames)) || npos != self->nargs) {
        if (!bind(self, pos, npos, kwnames, fullbuf)) return slow_run(self, grid, pos, npos, kwnames);
        full = fullbuf;
    }
    PyObject* key = make_key(self, full);
    if (key == NULL) {
        if (PyErr_Occurred()) return NULL;
        return slow_run(self, grid, pos, npos, kwnames);
    }
    PyObject* ck = PyDict_GetItemWithError(self->compiled, key);   /* borrowed */
    Py_DECREF(key);
    if (ck == NULL) { PyErr_Clear(); return slow_run(self, grid, pos, npos, kwnames); }
    Py_INCREF(ck);
    PyObject* captured = PyObject_GetAttr(ck, s_captured);
    if (captured == NULL) PyErr_Clear();
    int current = captured_current(captured);
    Py_XDECREF(captured);
    PyObject* launcher = current ? PyObject_GetAttr(ck, s_launcher) : NULL;
    if (launcher == NULL) {
        PyErr_Clear();
        Py_DECREF(ck);
        return slow_run(self, grid, pos, npos, kwnames);
    }
    PyObject* g = grid;
    Py_INCREF(g);
    if (!PyTuple_CheckExact(grid) && !PyList_CheckExact(grid) && PyCallable_Check(grid)) {
        Py_DECREF(g);
        g = meta_grid(self, grid, full);
    }
    PyObject* r = NULL;
    if (g != NULL) {
        if (Py_TYPE(launcher) == &LauncherType) r = launch((Launcher*)launcher, g, full, self->nargs, CHECK_DEVICE);
        else {
            PyObject* tup = PyTuple_New(self->nargs);
            if (tup != NULL) {
                for (int i = 0; i < self->nargs; ++i) { Py_INCREF(full[i]); PyTuple_SET_ITEM(tup, i, full[i]); }
                r = PyObject_CallFunctionObjArgs(launcher, g, tup, NULL);
                Py_DECREF(tup);
            }
        }
        Py_DECREF(g);
    }
    Py_DECREF(launcher);
    if (r == NULL) { Py_DECREF(ck); return NULL; }
    Py_DECREF(r);
    return ck;
}

/* key(*args, **kwargs): the key the warm path would look up (None: it would take the slow path) */
static PyObject* Dispatcher_key(PyObject* op, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    Dispatcher* self = (Dispatcher*)op;
    PyObject* fullbuf[MAX_PARAMS];
    if (self->nargs > MAX_PARAMS || !bind(self, args, nargs, kwnames, fullbuf)) Py_RETURN_NONE;
    PyObject* key = make_key(self, fullbuf);
    if (key == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return key;
}

static int int_list(PyObject* seq, int* out, int* n) {
    Py_ssize_t len = PySequence_Size(seq);
    if (len < 0 || len > MAX_PARAMS) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "too many parameters"); return 0; }
    for (Py_ssize_t i = 0; i < len; ++i) {
        PyObject* v = PySequence_GetItem(seq, i);
        out[i] = v ? (int)PyLong_AsLong(v) : -1;
        Py_XDECREF(v);
        if (PyErr_Occurred()) return 0;
    }
    *n = (int)len;
    return 1;
}

static int Dispatcher_init(Dispatcher* self, PyObject* args, PyObject* kw) {
    static char* kwl[] = {"compiled", "run", "names", "defaults", "nodefault", "runtime", "constexprs",
                          "target_name", "policy", "current_target", "current_policy", "dry", "tensor_type", NULL};
    PyObject *compiled, *run, *names, *defaults, *nodefault, *rt, *ce, *tname, *pol, *ct, *cp, *dry, *tt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO!O!OOOOOOOOO", kwl, &PyDict_Type, &compiled, &run, &PyTuple_Type,
                                     &names, &PyTuple_Type, &defaults, &nodefault, &rt, &ce, &tname, &pol, &ct, &cp,
                                     &dry, &tt))
        return -1;
    if (PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(defaults) || PyTuple_GET_SIZE(names) > MAX_PARAMS
        || !PyContextVar_CheckExact(dry) || !PyType_Check(tt)) {
        PyErr_SetString(PyExc_ValueError, "Dispatcher: inconsistent arguments");
        return -1;
    }
    if (!int_list(rt, self->rt, &self->nrt) || !int_list(ce, self->ce, &self->nce)) return -1;
    self->nargs = (int)PyTuple_GET_SIZE(names);
    PyObject* objs[] = {compiled, run, names, defaults, nodefault, tname, pol, ct, cp, dry, tt};
    PyObject** slots[] = {&self->compiled, &self->run, &self->names, &self->defaults, &self->nodefault,
                          &self->target_name, &self->policy, &self->current_target, &self->current_policy,
                          &self->dry, &self->tensor_type};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; ++i) { Py_INCREF(objs[i]); Py_XSETREF(*slots[i], objs[i]); }
    static const char* specs[7] = {"i1", "i/16", "i", "i64/16", "i64", "f", "b"};
    for (int i = 0; i < 7; ++i) {
        PyObject* s = PyUnicode_InternFromString(specs[i]);
        if (s == NULL) return -1;
        Py_XSETREF(self->spec[i], s);
    }
    self->vectorcall = Dispatcher_vectorcall;
    return 0;
}

#define DISPATCHER_FIELDS(X) X(compiled) X(run) X(names) X(defaults) X(nodefault) X(target_name) X(policy) \
    X(current_target) X(current_policy) X(dry) X(tensor_type) X(last_target) X(last_name)

static int Dispatcher_traverse(Dispatcher* self, visitproc visit, void* arg) {
#define V(f) Py_VISIT(self->f);
    DISPATCHER_FIELDS(V)
#undef V
    return 0;
}

static int Dispatcher_clear(Dispatcher* self) {
#define C(f) Py_CLEAR(self->f);
    DISPATCHER_FIELDS(C)
#undef C
    for (int i = 0; i < 7; ++i) Py_CLEAR(self->spec[i]);
    return 0;
}

static void Dispatcher_dealloc(Dispatcher* self) {
    PyObject_GC_UnTrack(self);
    Dispatcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyMethodDef Dispatcher_methods[] = {
    {"key", (PyCFunction)(void (*)(void))Dispatcher_key, METH_FASTCALL | METH_KEYWORDS,
     "key(*args, **kwargs): the specialisation key the warm path computes (None: it would go to Python)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_tjfast.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "dispatch(grid, *args, **kwargs): a kernel's warm launch path",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Dispatcher_init,
    .tp_dealloc = (destructor)Dispatcher_dealloc,
    .tp_traverse = (traverseproc)Dispatcher_traverse,
    .tp_clear = (inquiry)Dispatcher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
    .tp_methods = Dispatcher_methods,
};

/* ------------------------------------------------------------------------------------------ */
/* signature                                                                                  */
/* ------------------------------------------------------------------------------------------ */
/* The (dtype, shape, strides, device) of a plain tensor, or NULL (no exception) when it needs a
 * gradient, is not strided or has no strides (sparse, mkldnn, nested: the operator path explains)
 * or is on the meta device. devices = (meta, cpu): a cpu tensor's device is the cpu constant (a
 * bool read, where `device` makes a new object). */
static PyObject* tensor_item(PyObject* t, int grad, PyObject* strided, PyObject* devices) {
    PyObject* lay = PyObject_GetAttr(t, s_layout);
    if (lay == NULL) return NULL;
    Py_DECREF(lay);
    if (lay != strided) return NULL;
    if (grad) {
        PyObject* rg = PyObject_GetAttr(t, s_requires_grad);
        if (rg == NULL) return NULL;
        int needs = rg == Py_True;
        Py_DECREF(rg);
        if (needs) return NULL;
    }
    PyObject* st = PyObject_CallMethodNoArgs(t, s_stride);
    if (st == NULL) { PyErr_Clear(); return NULL; }
    PyObject* cpu = PyObject_GetAttr(t, s_is_cpu);
    PyObject* dv = NULL;
    int is_meta = -1;
    if (cpu == Py_True) { dv = PyTuple_GET_ITEM(devices, 1); Py_INCREF(dv); is_meta = 0; }
    else if (cpu != NULL && (dv = PyObject_GetAttr(t, s_device)) != NULL)
        is_meta = PyObject_RichCompareBool(dv, PyTuple_GET_ITEM(devices, 0), Py_EQ);
    Py_XDECREF(cpu);
    PyObject* dt = is_meta == 0 ? PyObject_GetAttr(t, s_dtype) : NULL;
    PyObject* sh = dt ? PyObject_GetAttr(t, s_shape) : NULL;
    PyObject* item = sh ? PyTuple_Pack(4, dt, sh, st, dv) : NULL;
    Py_DECREF(st); Py_XDECREF(dv); Py_XDECREF(dt); Py_XDECREF(sh);
    return item;
}

/* signature(args, context, not_plain, grad_enabled, plain_types, tensor_type, strided, devices) */
static PyObject* signature(PyObject* mod, PyObject* const* a, Py_ssize_t n) {
    if (n != 8 || !PyTuple_Check(a[0]) || !PyTuple_Check(a[2]) || !PyTuple_Check(a[4]) || !PyType_Check(a[5])
        || !PyTuple_Check(a[7]) || PyTuple_GET_SIZE(a[7]) != 2) {
        PyErr_SetString(PyExc_TypeError, "signature(args, context, not_plain, grad_enabled, plain_types, tensor_type, "
                                         "strided, devices: (meta, cpu))");
        return NULL;
    }
    PyObject *args = a[0], *checks = a[2], *plain = a[4];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(checks); ++i) {   /* each is falsy in plain eager mode */
        PyObject* r = PyObject_CallNoArgs(PyTuple_GET_ITEM(checks, i));
        if (r == NULL) return NULL;
        int t = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (t < 0) return NULL;
        if (t) Py_RETURN_NONE;
    }
    PyObject* g = PyObject_CallNoArgs(a[3]);
    if (g == NULL) return NULL;
    int grad = g == Py_True;
    Py_DECREF(g);
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), np = PyTuple_GET_SIZE(plain);
    PyObject* key = PyTuple_New(nargs + 1);
    if (key == NULL) return NULL;
    Py_INCREF(a[1]);
    PyTuple_SET_ITEM(key, 0, a[1]);
    for (Py_ssize_t i = 0; i < nargs; ++i) {
        PyObject* v = PyTuple_GET_ITEM(args, i);
        PyTypeObject* tp = Py_TYPE(v);
        Py_ssize_t k;
        for (k = 0; k < np; ++k)
            if ((PyObject*)tp == PyTuple_GET_ITEM(plain, k)) break;
        PyObject* item;
        if (k < np) {
            item = tensor_item(v, grad, a[6], a[7]);
            if (item == NULL) { Py_DECREF(key); if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
        } else if (PyObject_TypeCheck(v, (PyTypeObject*)a[5])) {
            Py_DECREF(key);
            Py_RETURN_NONE;   /* a tensor subclass: the operator path */
        } else if ((item = PyTuple_Pack(2, (PyObject*)tp, v)) == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i + 1, item);
    }
    return key;
}

/* replay(launches, tensors): each launch is (launcher, grid, template, slots, captured) with
 * slots = (arg index, tensor index, ...) flat; the template's items are the launch's arguments,
 * the slots' replaced by tensors[tensor index]. False (nothing ran) when a kernel's captured
 * globals changed, None once every launch ran. `checks`: what each launch checks of its tensors. */
static PyObject* replay_launches(PyObject* launches, PyObject* tensors, int checks) {
    Py_ssize_t nl = PyTuple_GET_SIZE(launches), nt = PyTuple_GET_SIZE(tensors);
    for (Py_ssize_t k = 0; k < nl; ++k) {
        PyObject* L = PyTuple_GET_ITEM(launches, k);
        if (!PyTuple_Check(L) || PyTuple_GET_SIZE(L) != 5) { PyErr_SetString(PyExc_TypeError, "replay: bad launch"); return NULL; }
        if (!captured_current(PyTuple_GET_ITEM(L, 4))) Py_RETURN_FALSE;
    }
    for (Py_ssize_t k = 0; k < nl; ++k) {
        PyObject* L = PyTuple_GET_ITEM(launches, k);
        PyObject *launcher = PyTuple_GET_ITEM(L, 0), *grid = PyTuple_GET_ITEM(L, 1);
        PyObject *tmpl = PyTuple_GET_ITEM(L, 2), *slots = PyTuple_GET_ITEM(L, 3);
        if (!PyTuple_Check(tmpl) || !PyTuple_Check(slots) || PyTuple_GET_SIZE(tmpl) > MAX_PARAMS) {
            PyErr_SetString(PyExc_TypeError, "replay: bad launch");
            return NULL;
        }
        Py_ssize_t na = PyTuple_GET_SIZE(tmpl), ns = PyTuple_GET_SIZE(slots);
        PyObject* vals[MAX_PARAMS];
        for (Py_ssize_t i = 0; i < na; ++i) vals[i] = PyTuple_GET_ITEM(tmpl, i);
        for (Py_ssize_t j = 0; j + 1 < ns; j += 2) {
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, j)), t = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, j + 1));
            if (i < 0 || i >= na || t < 0 || t >= nt) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "replay: slot out of range");
                return NULL;
            }
            vals[i] = PyTuple_GET_ITEM(tensors, t);
        }
        PyObject* r;
        if (Py_TYPE(launcher) == &LauncherType) r = launch((Launcher*)launcher, grid, vals, na, checks);
        else {
            PyObject* tup = PyTuple_New(na);
            if (tup == NULL) return NULL;
            for (Py_ssize_t i = 0; i < na; ++i) { Py_INCREF(vals[i]); PyTuple_SET_ITEM(tup, i, vals[i]); }
            r = PyObject_CallFunctionObjArgs(launcher, grid, tup, NULL);
            Py_DECREF(tup);
        }
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyObject* replay(PyObject* mod, PyObject* const* a, Py_ssize_t n) {
    if (n != 2 || !PyTuple_Check(a[0]) || !PyTuple_Check(a[1])) {
        PyErr_SetString(PyExc_TypeError, "replay(launches: tuple, tensors: tuple)");
        return NULL;
    }
    return replay_launches(a[0], a[1], CHECK_ALL);
}

/* replayed(context, not_plain, grad_enabled, plain_types, tensor_type, strided, devices, dry,
 * miss, plans, args): the whole hit path of a library op call (kernels/op_plans.py `replayed_py`):
 * the signature, the plan lookup, the outputs' allocation and the replay. `miss` when any of it
 * is not the plain case (no plan, a plan with views, a dry block, a kernel to recompile). The
 * launches check no tensor's device or dtype: the signature pinned the arguments' and the plan
 * allocates the others as recorded. The constants come first, so that functools.partial binds
 * them and an op's plans (kernels/op_plans.py `hit_path`). */
static PyObject* replayed(PyObject* mod, PyObject* const* a, Py_ssize_t n) {
    if (n != 11 || !PyDict_Check(a[9]) || !PyTuple_Check(a[10])) {
        PyErr_SetString(PyExc_TypeError, "replayed(context, not_plain, grad_enabled, plain_types, tensor_type, "
                                         "strided, devices, dry, miss, plans: dict, args: tuple)");
        return NULL;
    }
    PyObject *plans = a[9], *args = a[10], *miss = a[8];
    PyObject* ctx = PyObject_CallNoArgs(a[0]);
    if (ctx == NULL) return NULL;
    PyObject* sa[8] = {args, ctx, a[1], a[2], a[3], a[4], a[5], a[6]};
    PyObject* key = signature(mod, sa, 8);
    Py_DECREF(ctx);
    if (key == NULL) return NULL;
    if (key == Py_None) { Py_DECREF(key); Py_INCREF(miss); return miss; }
    PyObject* plan = PyDict_GetItemWithError(plans, key);   /* borrowed */
    Py_DECREF(key);
    if (plan == NULL) { PyErr_Clear(); Py_INCREF(miss); return miss; }   /* absent, or an unhashable key */
    Py_INCREF(plan);
    PyObject* packed = plan == Py_None ? NULL : PyObject_GetAttr(plan, s_packed);
    Py_DECREF(plan);
    if (packed == NULL || !PyTuple_Check(packed) || PyTuple_GET_SIZE(packed) != 3) {
        PyErr_Clear();
        Py_XDECREF(packed);
        Py_INCREF(miss);
        return miss;
    }
    PyObject *allocs = PyTuple_GET_ITEM(packed, 0), *launches = PyTuple_GET_ITEM(packed, 2);
    Py_ssize_t n_out = PyLong_AsSsize_t(PyTuple_GET_ITEM(packed, 1));
    PyObject* dry = PyObject_CallNoArgs(a[7]);
    int is_dry = dry == NULL ? -1 : PyObject_IsTrue(dry);
    Py_XDECREF(dry);
    if (is_dry != 0 || !PyTuple_Check(allocs) || n_out < 1 || n_out > PyTuple_GET_SIZE(allocs)) {
        Py_DECREF(packed);
        if (is_dry < 0) return NULL;
        Py_INCREF(miss);
        return miss;
    }
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), nal = PyTuple_GET_SIZE(allocs);
    PyObject* tensors = PyTuple_New(nargs + nal);
    if (tensors == NULL) { Py_DECREF(packed); return NULL; }
    for (Py_ssize_t i = 0; i < nargs; ++i) { PyObject* v = PyTuple_GET_ITEM(args, i); Py_INCREF(v); PyTuple_SET_ITEM(tensors, i, v); }
    for (Py_ssize_t j = 0; j < nal; ++j) {   /* each output's maker (kernels/outputs.py) */
        PyObject* t = PyObject_CallNoArgs(PyTuple_GET_ITEM(allocs, j));
        if (t == NULL) { Py_DECREF(tensors); Py_DECREF(packed); return NULL; }
        PyTuple_SET_ITEM(tensors, nargs + j, t);
    }
    PyObject* r = replay_launches(launches, tensors, 0);
    Py_DECREF(packed);
    if (r == NULL) { Py_DECREF(tensors); return NULL; }
    int stale = r == Py_False;
    Py_DECREF(r);
    PyObject* out;
    if (stale) { Py_INCREF(miss); out = miss; }
    else if (n_out == 1) { out = PyTuple_GET_ITEM(tensors, nargs); Py_INCREF(out); }
    else out = PyTuple_GetSlice(tensors, nargs, nargs + n_out);
    Py_DECREF(tensors);
    return out;
}

static PyMethodDef module_methods[] = {
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL,
     "signature(args, context, not_plain, grad_enabled, plain_types, tensor_type, strided, devices): an op call's "
     "plan key, or None"},
    {"replayed", (PyCFunction)(void (*)(void))replayed, METH_FASTCALL,
     "replayed(context, not_plain, grad_enabled, plain_types, tensor_type, strided, devices, dry, miss, plans, "
     "args): a library op call's outputs through its plan, or miss"},
    {"replay", (PyCFunction)(void (*)(void))replay, METH_FASTCALL,
     "replay(launches, tensors): runs a launch plan; False when a kernel must recompile (nothing ran)"},
    {NULL, NULL, 0, NULL},
};

/* The launch ABI's layouts as this file declares them, {name: (size, field offsets...)}:
   tests/test_cpu_target.py compares them with tilejit_cpu.h's and targets/cpu/launcher.py's. */
static PyObject* abi_layout(void) {
    return Py_BuildValue("{s:(n),s:(nnnnnnnnn),s:(nnnn)}", "tj_arg", (Py_ssize_t)sizeof(tj_arg),
                         "tj_status", (Py_ssize_t)sizeof(tj_status), (Py_ssize_t)offsetof(tj_status, code),
                         (Py_ssize_t)offsetof(tj_status, site), (Py_ssize_t)offsetof(tj_status, arg),
                         (Py_ssize_t)offsetof(tj_status, store), (Py_ssize_t)offsetof(tj_status, offset),
                         (Py_ssize_t)offsetof(tj_status, lo), (Py_ssize_t)offsetof(tj_status, hi),
                         (Py_ssize_t)offsetof(tj_status, par),
                         "tj_range", (Py_ssize_t)sizeof(tj_range), (Py_ssize_t)offsetof(tj_range, base),
                         (Py_ssize_t)offsetof(tj_range, lo), (Py_ssize_t)offsetof(tj_range, hi));
}

/* ------------------------------------------------------------------------------------------ */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tjfast", "tilejit's compiled launch path", -1, module_methods};

PyMODINIT_FUNC PyInit__tjfast(void) {
    if (PyType_Ready(&LauncherType) < 0 || PyType_Ready(&DispatcherType) < 0) return NULL;
    PyObject** slots[] = {&s_data_ptr, &s_dtype, &s_itemsize, &s_launch_key, &s_launcher, &s_captured,
                          &s_requires_grad, &s_shape, &s_stride, &s_device, &s_packed, &s_layout, &s_is_cpu};
    const char* names[] = {"data_ptr", "dtype", "itemsize", "launch_key", "launcher", "captured",
                           "requires_grad", "shape", "stride", "device", "packed", "layout", "is_cpu"};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; ++i)
        if ((*slots[i] = PyUnicode_InternFromString(names[i])) == NULL) return NULL;
    PyObject* m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&LauncherType);
    Py_INCREF(&DispatcherType);
    if (PyModule_AddObject(m, "Launcher", (PyObject*)&LauncherType) < 0
        || PyModule_AddObject(m, "Dispatcher", (PyObject*)&DispatcherType) < 0
        || PyModule_AddIntConstant(m, "MAX_PARAMS", MAX_PARAMS) < 0
        || PyModule_AddIntConstant(m, "ABI", 5) < 0
        || PyModule_AddObject(m, "ABI_LAYOUT", abi_layout()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
