/*
 * pa_run_check: the per-layer checks of PagedAttentionRunner.run() in one C call.
 *
 * run() must check each call's query, caches and output against the plan (exact torch.Tensor, shape, dtype,
 * device, contiguity, out aliasing nothing it reads) before anything is launched.  In Python those are about
 * 0.9 µs of torch attribute reads per tensor; here they are a few loads from the C++ tensors.  The module
 * decides only "all good": on any doubt it returns False and run() takes its Python checks, which name what
 * is wrong and raise.  On success it writes the four data pointers into the launch's argument list.
 *
 *   expect = make_expect(query, cache_shape, table, iq, ik, iv, io)   # once per plan: shapes, dtype, device,
 *                                                               # bytes, table span, argument-list indices
 *   ok = check(expect, query, key_cache, value_cache, out, args)   # per call
 *
 * Built by compile.sh against the installed torch (build/lib/pa_run_check*.so); TORCH_VERSION records which,
 * and the launcher uses the module only when it matches the torch it runs with.
 */
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <exception>
#include <vector>

#define PA_STR2(x) #x
#define PA_STR(x) PA_STR2(x)

namespace {

struct Expect {
    std::vector<int64_t> queryShape, cacheShape;
    at::ScalarType dtype;
    c10::Device device{c10::kCPU};
    uint64_t queryBytes, cacheBytes, tableStart, tableEnd;
    Py_ssize_t index[4]; /* where q, k, v and o go in the launch's argument list */
};

const char *kCapsule = "pa_run_check.Expect";

void FreeExpect(PyObject *capsule)
{
    delete static_cast<Expect *>(PyCapsule_GetPointer(capsule, kCapsule));
}

bool Unpack(PyObject *obj, at::Tensor &out)
{
    if (!THPVariable_CheckExact(obj)) return false;
    out = THPVariable_Unpack(obj);
    return true;
}

/* make_expect(query, cache_shape, table, iq, ik, iv, io) -> capsule.  ``query`` is a tensor of the step's query
 * shape (the runner passes its output rows), ``cache_shape`` a tuple of ints: the caches need not exist yet. */
PyObject *MakeExpectImpl(PyObject *const *args, Py_ssize_t nargs)
{
    at::Tensor q, table;
    if (nargs != 7 || !Unpack(args[0], q) || !PyTuple_Check(args[1]) || !Unpack(args[2], table)) {
        PyErr_SetString(PyExc_TypeError, "make_expect(query, cache_shape, block_table, iq, ik, iv, io): a tensor, "
                                         "a tuple of ints, a tensor and four argument-list indices");
        return nullptr;
    }
    std::vector<int64_t> cacheShape;
    uint64_t cacheElems = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[1]); ++i) {
        const long long dim = PyLong_AsLongLong(PyTuple_GET_ITEM(args[1], i));
        if (dim < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "cache_shape entries must be >= 0");
            return nullptr;
        }
        cacheShape.push_back(int64_t(dim));
        cacheElems *= uint64_t(dim);
    }
    Py_ssize_t index[4];
    for (int i = 0; i < 4; ++i) {
        index[i] = PyLong_AsSsize_t(args[3 + i]);
        if (index[i] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "argument-list indices must be >= 0");
            return nullptr;
        }
    }
    auto *e = new Expect{q.sizes().vec(), cacheShape, q.scalar_type(), q.device(), uint64_t(q.nbytes()),
                         cacheElems * uint64_t(q.element_size()),
                         uint64_t(reinterpret_cast<uintptr_t>(table.data_ptr())), 0,
                         {index[0], index[1], index[2], index[3]}};
    e->tableEnd = e->tableStart + uint64_t(table.nbytes());
    return PyCapsule_New(e, kCapsule, FreeExpect);
}
bool Matches(const at::Tensor &t, const std::vector<int64_t> &shape, const Expect &e)
{
    return t.sizes().equals(shape) && t.scalar_type() == e.dtype && t.device() == e.device && t.is_contiguous();
}

bool Overlap(uint64_t a, uint64_t aBytes, uint64_t b, uint64_t bBytes) { return a < b + bBytes && b < a + aBytes; }

/* check(expect, query, key_cache, value_cache, out, args) -> bool; on True the four data pointers are in
 * args at the indices make_expect was given. */
PyObject *CheckImpl(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "check(expect, query, key_cache, value_cache, out, args)");
        return nullptr;
    }
    auto *e = static_cast<Expect *>(PyCapsule_GetPointer(args[0], kCapsule));
    if (e == nullptr) return nullptr;
    at::Tensor q, k, v, o;
    if (!Unpack(args[1], q) || !Unpack(args[2], k) || !Unpack(args[3], v) || !Unpack(args[4], o)) Py_RETURN_FALSE;
    if (!Matches(q, e->queryShape, *e) || !Matches(k, e->cacheShape, *e) || !Matches(v, e->cacheShape, *e) ||
        !Matches(o, e->queryShape, *e)) {
        Py_RETURN_FALSE;
    }
    const uint64_t pq = uint64_t(reinterpret_cast<uintptr_t>(q.data_ptr()));
    const uint64_t pk = uint64_t(reinterpret_cast<uintptr_t>(k.data_ptr()));
    const uint64_t pv = uint64_t(reinterpret_cast<uintptr_t>(v.data_ptr()));
    const uint64_t po = uint64_t(reinterpret_cast<uintptr_t>(o.data_ptr()));
    if (!pq || !pk || !pv || !po) Py_RETURN_FALSE;
    if (Overlap(po, e->queryBytes, pq, e->queryBytes) || Overlap(po, e->queryBytes, pk, e->cacheBytes) ||
        Overlap(po, e->queryBytes, pv, e->cacheBytes) ||
        Overlap(po, e->queryBytes, e->tableStart, e->tableEnd - e->tableStart)) {
        Py_RETURN_FALSE;
    }
    PyObject *list = args[5];
    if (!PyList_CheckExact(list)) Py_RETURN_FALSE;
    const uint64_t ptrs[4] = {pq, pk, pv, po};
    for (int i = 0; i < 4; ++i) {
        if (e->index[i] >= PyList_GET_SIZE(list)) {
            PyErr_SetString(PyExc_IndexError, "argument-list index out of range");
            return nullptr;
        }
        PyObject *value = PyLong_FromUnsignedLongLong(ptrs[i]);
        if (value == nullptr) return nullptr;
        PyList_SetItem(list, e->index[i], value); /* steals the reference, releases the old item */
    }
    Py_RETURN_TRUE;
}

/* No C++ exception (a c10::Error from a tensor without storage, say) may cross into CPython: make_expect
 * raises RuntimeError with its message, check answers "look again" and lets the Python checks speak. */
PyObject *MakeExpect(PyObject *, PyObject *const *args, Py_ssize_t nargs)
{
    try {
        return MakeExpectImpl(args, nargs);
    } catch (const std::exception &err) {
        PyErr_SetString(PyExc_RuntimeError, err.what());
        return nullptr;
    }
}

PyObject *Check(PyObject *, PyObject *const *args, Py_ssize_t nargs)
{
    try {
        return CheckImpl(args, nargs);
    } catch (const std::exception &) {
        Py_RETURN_FALSE;
    }
}

PyMethodDef kMethods[] = {
    {"make_expect", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(MakeExpect)), METH_FASTCALL,
     "make_expect(query, cache_shape, block_table, iq, ik, iv, io) -> what check() compares against"},
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Check)), METH_FASTCALL,
     "check(expect, query, key_cache, value_cache, out, args) -> True when all is good"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "pa_run_check", "run() checks in C (see the source)", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit_pa_run_check(void)
{
    PyObject *m = PyModule_Create(&kModule);
    if (m != nullptr) PyModule_AddStringConstant(m, "TORCH_VERSION", PA_STR(PA_TORCH_VERSION));
    return m;
}
