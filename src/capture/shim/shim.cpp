// The capture agent's libtorch shim: the few tensor calls the Rust core needs
// (src/capture/torch.rs declares them), compiled by build.rs against the
// headers of the torch installed in the build's Python environment, the way a
// torch C++ extension is built. Every function catches C++ exceptions and
// returns them as a malloc'ed message (NULL: success); tensors cross as
// heap-allocated at::Tensor handles that Rust frees with ads_tensor_free.
//
// Statistics (the reference tracer's `_compute_stats` and DebugMode's
// `norm_hash_fn`) and the content digest (src/capture/digest.rs documents the
// algorithm) are queued on the tensor's own device; nothing here synchronises
// with a device except ads_copy_to_host.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

char* dup(const char* s) {
  size_t n = std::strlen(s);
  char* p = static_cast<char*>(std::malloc(n + 1));
  if (p) std::memcpy(p, s, n + 1);
  return p;
}

#define ADS_TRY try {
#define ADS_CATCH                                              \
  }                                                            \
  catch (const c10::Error& e) {                                \
    return dup(e.what_without_backtrace());                    \
  }                                                            \
  catch (const std::exception& e) {                            \
    return dup(e.what());                                      \
  }                                                            \
  catch (...) {                                                \
    return dup("unknown C++ exception in the libtorch shim");  \
  }                                                            \
  return nullptr;

// Our own stable dtype codes (torch's ScalarType numbering is not a contract).
enum Kind : int32_t {
  K_F32 = 0, K_F16 = 1, K_BF16 = 2, K_F64 = 3, K_I64 = 4, K_I32 = 5, K_I16 = 6,
  K_I8 = 7, K_U8 = 8, K_BOOL = 9, K_C64 = 10, K_C128 = 11, K_C32 = 12,
  K_OTHER = 13,
};

Kind kind_of(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return K_F32;
    case at::kHalf: return K_F16;
    case at::kBFloat16: return K_BF16;
    case at::kDouble: return K_F64;
    case at::kLong: return K_I64;
    case at::kInt: return K_I32;
    case at::kShort: return K_I16;
    case at::kChar: return K_I8;
    case at::kByte: return K_U8;
    case at::kBool: return K_BOOL;
    case at::kComplexFloat: return K_C64;
    case at::kComplexDouble: return K_C128;
    case at::kComplexHalf: return K_C32;
    default: return K_OTHER;
  }
}

at::ScalarType scalar_of(int32_t k) {
  switch (k) {
    case K_F32: return at::kFloat;
    case K_F16: return at::kHalf;
    case K_BF16: return at::kBFloat16;
    case K_F64: return at::kDouble;
    case K_I64: return at::kLong;
    case K_I32: return at::kInt;
    case K_I16: return at::kShort;
    case K_I8: return at::kChar;
    case K_U8: return at::kByte;
    case K_BOOL: return at::kBool;
    case K_C64: return at::kComplexFloat;
    case K_C128: return at::kComplexDouble;
    default: TORCH_CHECK(false, "the shim has no dtype code ", k);
  }
}

// PyTorch's name of a dtype (str(torch.float32) without "torch.").
const char* dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    case at::kBool: return "bool";
    case at::kQInt8: return "qint8";
    case at::kQUInt8: return "quint8";
    case at::kQInt32: return "qint32";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat8_e5m2: return "float8_e5m2";
    case at::kFloat8_e4m3fn: return "float8_e4m3fn";
    case at::kFloat8_e5m2fnuz: return "float8_e5m2fnuz";
    case at::kFloat8_e4m3fnuz: return "float8_e4m3fnuz";
    case at::kUInt16: return "uint16";
    case at::kUInt32: return "uint32";
    case at::kUInt64: return "uint64";
    default: return "unknown";
  }
}

at::Tensor* box(at::Tensor t) { return new at::Tensor(std::move(t)); }

// DebugMode's norm_hash_fn: the L1 norm in float64 (non-floating through
// float32, complex through complex128), a 0-d tensor on t's device.
at::Tensor l1_of(const at::Tensor& t) {
  if (t.is_complex()) {
    return t.to(at::kComplexDouble).abs().sum(at::kDouble);
  }
  at::Tensor d = t.is_floating_point() ? t.to(at::kDouble)
                                       : t.to(at::kFloat).to(at::kDouble);
  return d.abs().sum(at::kDouble);
}

// The digest's 32-bit values (src/capture/digest.rs, step 1) as int64 in
// [0, 2^32), in t's logical order: one per element of at most 32 bits (zero-
// extended), two (low half, high half) per 64-bit element; complex: the real
// part's values, then the imaginary part's. Shape: t's (one value per
// element) or flat (several).
at::Tensor words_of(const at::Tensor& t) {
  at::Tensor u = t;
  if (u.is_complex()) {
    u = at::view_as_real(u.is_conj() ? u.resolve_conj() : u);
  }
  u = u.resolve_neg();
  switch (u.element_size()) {
    case 1: return u.view(at::kByte).to(at::kLong);
    case 2: return u.view(at::kShort).to(at::kLong).bitwise_and(0xffff);
    case 4:
      return u.view(at::kInt).to(at::kLong).bitwise_and(int64_t(0xffffffffLL));
    case 8:
      // Row-major flat, then each 64-bit element as two 32-bit values.
      return u.contiguous()
          .reshape({-1})
          .view(at::kInt)
          .to(at::kLong)
          .bitwise_and(int64_t(0xffffffffLL));
    default:
      TORCH_CHECK(false, "the digest has no rule for ", u.element_size(),
                  "-byte elements");
  }
}

// Logical right shift of int64 values.
at::Tensor srl(const at::Tensor& x, int s) {
  int64_t mask = int64_t((~uint64_t(0)) >> s);
  return x.bitwise_right_shift(s).bitwise_and(mask);
}

// Steps 2-3 of the digest: the wrapping sum over values u_k of
// t_k = p ^ (p >> 32), p = (u_k ^ (k*K mod 2^32)) * M, as a 0-d int64 on t's
// device (the host applies step 4 with the number of values). run > 0: t is
// a shard, k its values' index in the whole tensor (digest.rs `Index`:
// element e sits at (e / run) * stride + offset + e % run).
at::Tensor digest_sum(const at::Tensor& t, int64_t run, int64_t stride,
                      int64_t offset) {
  const int64_t K = 0x7F4A7C15LL;
  const int64_t M = 0x85EBCA6BLL;
  at::Tensor w = words_of(t);
  at::Tensor idx =
      at::arange(w.numel(), w.options().dtype(at::kLong)).view(w.sizes());
  if (run > 0 && t.numel() > 0) {
    const int64_t per = w.numel() / t.numel();  // values per element: 1 or 2
    at::Tensor e = idx.div(per, "floor");
    at::Tensor j = idx.sub(e.mul(per));
    at::Tensor g = e.div(run, "floor").mul_(stride).add_(offset).add_(e.remainder(run));
    idx = g.mul_(per).add_(j);
  }
  at::Tensor x = w.bitwise_xor(idx.mul_(K).bitwise_and_(int64_t(0xffffffffLL)));
  at::Tensor p = x.mul_(M);
  return p.bitwise_xor(srl(p, 32)).sum(at::kLong);
}

}  // namespace

extern "C" {

struct AdsInfo {
  int32_t defined;
  int32_t device_type;  // 0: CPU, 1: CUDA, 2: another device
  int32_t device_index;
  int32_t kind;  // Kind above
  int32_t dim;
  int32_t strided;  // dense strided layout
  int32_t contiguous;
  int32_t is_neg;
  int32_t is_conj;
  int32_t floating;
  int32_t complex;
  int32_t element_size;
  int64_t numel;
  const void* data;  // NULL unless a dense CPU tensor
  const char* dtype_name;
};

void ads_str_free(char* s) { std::free(s); }
void ads_tensor_free(at::Tensor* t) { delete t; }
at::Tensor* ads_tensor_clone_handle(const at::Tensor* t) { return new at::Tensor(*t); }

char* ads_info(const at::Tensor* t, AdsInfo* o) {
  ADS_TRY
  std::memset(o, 0, sizeof(*o));
  o->defined = t->defined();
  if (!o->defined) return nullptr;
  at::Device d = t->device();
  o->device_type = d.is_cpu() ? 0 : (d.is_cuda() ? 1 : 2);
  o->device_index = d.has_index() ? d.index() : -1;
  at::ScalarType s = t->scalar_type();
  o->kind = kind_of(s);
  o->dtype_name = dtype_name(s);
  o->dim = int32_t(t->dim());
  o->strided = t->layout() == at::kStrided;
  o->is_neg = t->is_neg();
  o->is_conj = t->is_conj();
  o->floating = t->is_floating_point();
  o->complex = t->is_complex();
  o->element_size = int32_t(t->element_size());
  o->numel = t->numel();
  if (o->strided) {
    o->contiguous = t->is_contiguous();
    // A view whose storage no longer holds it (FSDP1 frees an unsharded
    // flat parameter's storage after use; the views made of it keep their
    // sizes): reading it would read freed memory. An error, not a read.
    if (o->numel > 0 && t->has_storage()) {
      int64_t last = t->storage_offset();
      for (int64_t i = 0; i < t->dim(); i++) last += (t->size(i) - 1) * t->stride(i);
      int64_t need = (last + 1) * int64_t(t->element_size());
      int64_t have = int64_t(t->storage().nbytes());
      TORCH_CHECK(need <= have, "a tensor of shape ", t->sizes(), " needs ", need,
                  " bytes of its storage, which holds ", have,
                  " (its memory was freed: a view of an FSDP1 flat parameter after resharding?)");
    }
    if (o->device_type == 0 && o->numel > 0) o->data = t->const_data_ptr();
  }
  ADS_CATCH
}

// Sizes (cap at least dim entries).
char* ads_sizes(const at::Tensor* t, int64_t* out, int32_t cap) {
  ADS_TRY
  auto s = t->sizes();
  TORCH_CHECK(int32_t(s.size()) <= cap, "too many dimensions");
  for (size_t i = 0; i < s.size(); i++) out[i] = s[i];
  ADS_CATCH
}

char* ads_contiguous(const at::Tensor* t, at::Tensor** out) {
  ADS_TRY
  at::NoGradGuard g;
  *out = box(t->resolve_neg().resolve_conj().contiguous());
  ADS_CATCH
}

// The record scalars of one tensor as a 1-d float64 tensor on its device:
// [l1] (moments 0) or [l1, l2, min, max, mean, nan count, inf count]
// (moments 1: a non-empty floating tensor), then (digest 1) the digest's
// device sum reinterpreted as float64 bits.
char* ads_scalars(const at::Tensor* tp, int32_t moments, int32_t digest,
                  int64_t run, int64_t stride, int64_t offset,
                  at::Tensor** out) {
  ADS_TRY
  at::NoGradGuard g;
  const at::Tensor& t = *tp;
  std::vector<at::Tensor> parts;
  if (moments) {
    at::Tensor t64 = t.to(at::kDouble);
    at::Tensor t32 = t.to(at::kFloat);
    parts.push_back(t64.abs().sum(at::kDouble));
    parts.push_back(at::linalg_vector_norm(t64, 2));
    parts.push_back(t32.min().to(at::kDouble));
    parts.push_back(t32.max().to(at::kDouble));
    parts.push_back(t64.mean(at::kDouble));
    parts.push_back(t.isnan().sum(at::kDouble));
    parts.push_back(t.isinf().sum(at::kDouble));
  } else {
    parts.push_back(l1_of(t));
  }
  if (digest) {
    parts.push_back(digest_sum(t, run, stride, offset).view(at::kDouble));
  }
  *out = box(at::stack(parts, 0));
  ADS_CATCH
}

// One 1-d tensor of the n 1-d float64 tensors, on their device.
char* ads_cat(const at::Tensor* const* ts, size_t n, at::Tensor** out) {
  ADS_TRY
  at::NoGradGuard g;
  std::vector<at::Tensor> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++) v.push_back(*ts[i]);
  *out = box(at::cat(v, 0));
  ADS_CATCH
}

// Copies a 1-d float64 tensor of exactly n elements to `out` (one
// device-to-host copy; waits for the device).
char* ads_copy_to_host(const at::Tensor* t, double* out, size_t n) {
  ADS_TRY
  at::NoGradGuard g;
  TORCH_CHECK(t->scalar_type() == at::kDouble && size_t(t->numel()) == n,
              "ads_copy_to_host: expected ", n, " float64 values");
  at::Tensor h = t->to(at::kCPU).contiguous();
  if (n) std::memcpy(out, h.const_data_ptr(), n * sizeof(double));
  ADS_CATCH
}

// --- Tensors for tests and benchmarks -------------------------------------

// A CPU tensor of dtype `kind` and shape `sizes` holding a copy of `data`
// (numel * element size bytes, row-major).
char* ads_from_host(const void* data, int32_t kind, const int64_t* sizes,
                    int32_t dim, at::Tensor** out) {
  ADS_TRY
  std::vector<int64_t> s(sizes, sizes + dim);
  at::Tensor t = at::empty(s, at::TensorOptions().dtype(scalar_of(kind)));
  if (t.numel()) std::memcpy(t.data_ptr(), data, t.numel() * t.element_size());
  *out = box(t);
  ADS_CATCH
}

// A view with the given sizes, strides (in elements) and storage offset.
char* ads_as_strided(const at::Tensor* t, const int64_t* sizes,
                     const int64_t* strides, int32_t dim, int64_t offset,
                     at::Tensor** out) {
  ADS_TRY
  *out = box(t->as_strided(at::IntArrayRef(sizes, dim),
                           at::IntArrayRef(strides, dim), offset));
  ADS_CATCH
}

char* ads_to_kind(const at::Tensor* t, int32_t kind, at::Tensor** out) {
  ADS_TRY
  at::NoGradGuard g;
  *out = box(t->to(scalar_of(kind)));
  ADS_CATCH
}

// In place: t += v.
char* ads_add_scalar_(at::Tensor* t, double v) {
  ADS_TRY
  at::NoGradGuard g;
  t->add_(v);
  ADS_CATCH
}

// What torch's Python API computes for a tensor, one op at a time as the
// reference tracer calls them (tests check both paths against it):
// out = [l1, l2, min, max, mean, nan count, inf count]; with moments 0 only
// out[0].
char* ads_reference_stats(const at::Tensor* tp, int32_t moments, double* out) {
  ADS_TRY
  at::NoGradGuard g;
  const at::Tensor& t = *tp;
  out[0] = l1_of(t).item<double>();
  if (moments) {
    out[1] = t.to(at::kDouble).norm().item<double>();
    out[2] = t.to(at::kFloat).min().item<double>();
    out[3] = t.to(at::kFloat).max().item<double>();
    out[4] = t.to(at::kDouble).mean().item<double>();
    out[5] = double(t.isnan().sum().item<int64_t>());
    out[6] = double(t.isinf().sum().item<int64_t>());
  }
  ADS_CATCH
}

// The 32-bit values ads_scalars's digest reads (in logical row-major
// order), for tests.
char* ads_digest_words(const at::Tensor* t, int64_t* out, size_t n) {
  ADS_TRY
  at::NoGradGuard g;
  at::Tensor b = words_of(*t).contiguous();
  TORCH_CHECK(size_t(b.numel()) == n, "ads_digest_words: ", b.numel(), " values, not ", n);
  if (n) std::memcpy(out, b.const_data_ptr(), n * sizeof(int64_t));
  ADS_CATCH
}

}  // extern "C"
