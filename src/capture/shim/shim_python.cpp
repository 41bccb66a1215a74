// The Python half of the libtorch shim (feature `python` only): a
// torch.Tensor object to an at::Tensor handle, without a copy, through
// libtorch_python's THPVariable_Unpack. The caller holds the GIL.

#include <torch/csrc/autograd/python_variable.h>

#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {

// *out: a new handle on the tensor behind `obj` (shared storage), or NULL
// with *is_tensor 0 when `obj` is not a torch.Tensor.
char* ads_from_python(PyObject* obj, int32_t* is_tensor, at::Tensor** out) {
  try {
    *out = nullptr;
    *is_tensor = THPVariable_Check(obj) ? 1 : 0;
    if (*is_tensor) *out = new at::Tensor(THPVariable_Unpack(obj));
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_Clear();
    const char* w = e.what();
    size_t n = std::strlen(w);
    char* p = static_cast<char*>(std::malloc(n + 1));
    if (p) std::memcpy(p, w, n + 1);
    return p;
  }
}

}  // extern "C"
