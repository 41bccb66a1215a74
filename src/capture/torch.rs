//! The Rust side of the capture agent's libtorch shim (`shim/shim.cpp`,
//! compiled by build.rs against the installed torch): a [`Tensor`] handle and
//! the few calls the agent makes. Everything that touches tensor data lives in
//! the shim; batching, formatting and writing stay in Rust.
//!
//! Every call returns `Err(TorchError)` with libtorch's message instead of
//! unwinding a C++ exception through Rust.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::NonNull;

/// The torch release the shim was compiled against (`torch.__version__`).
pub const TORCH_VERSION: &str = env!("ACTDIFF_TORCH_VERSION");

/// An error that libtorch raised (its message, without the C++ backtrace).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TorchError(pub String);

#[repr(C)]
struct RawTensor {
    _p: [u8; 0],
}

#[repr(C)]
struct AdsInfo {
    defined: i32,
    device_type: i32,
    device_index: i32,
    kind: i32,
    dim: i32,
    strided: i32,
    contiguous: i32,
    is_neg: i32,
    is_conj: i32,
    floating: i32,
    complex: i32,
    element_size: i32,
    numel: i64,
    data: *const c_void,
    dtype_name: *const c_char,
}

extern "C" {
    fn ads_str_free(s: *mut c_char);
    fn ads_tensor_free(t: *mut RawTensor);
    fn ads_tensor_clone_handle(t: *const RawTensor) -> *mut RawTensor;
    fn ads_info(t: *const RawTensor, out: *mut AdsInfo) -> *mut c_char;
    fn ads_sizes(t: *const RawTensor, out: *mut i64, cap: i32) -> *mut c_char;
    fn ads_contiguous(t: *const RawTensor, out: *mut *mut RawTensor) -> *mut c_char;
    fn ads_scalars(
        t: *const RawTensor,
        moments: i32,
        digest: i32,
        run: i64,
        stride: i64,
        offset: i64,
        out: *mut *mut RawTensor,
    ) -> *mut c_char;
    fn ads_cat(ts: *const *const RawTensor, n: usize, out: *mut *mut RawTensor) -> *mut c_char;
    fn ads_copy_to_host(t: *const RawTensor, out: *mut f64, n: usize) -> *mut c_char;
    fn ads_from_host(
        data: *const c_void,
        kind: i32,
        sizes: *const i64,
        dim: i32,
        out: *mut *mut RawTensor,
    ) -> *mut c_char;
    fn ads_as_strided(
        t: *const RawTensor,
        sizes: *const i64,
        strides: *const i64,
        dim: i32,
        offset: i64,
        out: *mut *mut RawTensor,
    ) -> *mut c_char;
    fn ads_to_kind(t: *const RawTensor, kind: i32, out: *mut *mut RawTensor) -> *mut c_char;
    fn ads_add_scalar_(t: *mut RawTensor, v: f64) -> *mut c_char;
    fn ads_reference_stats(t: *const RawTensor, moments: i32, out: *mut f64) -> *mut c_char;
    fn ads_digest_words(t: *const RawTensor, out: *mut i64, n: usize) -> *mut c_char;
}

#[cfg(feature = "python")]
extern "C" {
    fn ads_from_python(
        obj: *mut c_void,
        is_tensor: *mut i32,
        out: *mut *mut RawTensor,
    ) -> *mut c_char;
}

/// Turns the shim's error convention (NULL or a malloc'ed message) into a Result.
fn check(e: *mut c_char) -> Result<(), TorchError> {
    if e.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL return is a NUL-terminated string the shim malloc'ed.
    let msg = unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned();
    // SAFETY: freed once, by the shim's allocator.
    unsafe { ads_str_free(e) };
    Err(TorchError(msg))
}

/// A dtype as the agent distinguishes them (`Other`: any dtype the fused pass
/// and the tests do not name; the shim still handles it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Kind {
    /// float32
    Float = 0,
    /// float16
    Half = 1,
    /// bfloat16
    BFloat16 = 2,
    /// float64
    Double = 3,
    /// int64
    Int64 = 4,
    /// int32
    Int = 5,
    /// int16
    Int16 = 6,
    /// int8
    Int8 = 7,
    /// uint8
    Uint8 = 8,
    /// bool
    Bool = 9,
    /// complex64
    ComplexFloat = 10,
    /// complex128
    ComplexDouble = 11,
    /// complex32
    ComplexHalf = 12,
    /// Any other dtype (float8, quantized, unsigned 16-64 bit, ...).
    Other = 13,
}

impl Kind {
    fn from_code(c: i32) -> Kind {
        use Kind::*;
        [
            Float,
            Half,
            BFloat16,
            Double,
            Int64,
            Int,
            Int16,
            Int8,
            Uint8,
            Bool,
            ComplexFloat,
            ComplexDouble,
            ComplexHalf,
        ]
        .get(c as usize)
        .copied()
        .unwrap_or(Other)
    }
}

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// A CUDA device (index; -1: the current one).
    Cuda(i32),
    /// Another accelerator (MPS, XPU, ...; libtorch's index).
    Other(i32),
}

/// What the agent needs to know of a tensor, from one shim call.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// Whether the tensor is defined (an undefined one has nothing else).
    pub defined: bool,
    /// Its device.
    pub device: Device,
    /// Its dtype.
    pub kind: Kind,
    /// PyTorch's name of the dtype without `torch.` (`float32`, `bfloat16`).
    pub dtype_name: &'static str,
    /// Number of dimensions.
    pub dim: usize,
    /// Dense strided layout (not sparse or mkldnn).
    pub strided: bool,
    /// Row-major contiguous.
    pub contiguous: bool,
    /// Lazy negation bit set (`x.neg()` views of complex or conj tensors).
    pub is_neg: bool,
    /// Lazy conjugation bit set.
    pub is_conj: bool,
    /// A floating dtype.
    pub floating: bool,
    /// A complex dtype.
    pub complex: bool,
    /// Bytes per element.
    pub element_size: usize,
    /// Number of elements.
    pub numel: usize,
    /// First element of a dense non-empty CPU tensor, else NULL.
    pub data: *const c_void,
}

impl Info {
    /// The number of 32-bit values its digest sums ([`super::digest`], `n`
    /// of step 4): one per element of at most 32 bits, two per 64-bit
    /// element, a complex element counting its two parts.
    pub fn digest_len(&self) -> usize {
        let per = if self.complex {
            2 * (self.element_size / 8).max(1)
        } else {
            (self.element_size / 4).max(1)
        };
        self.numel * per
    }
}

/// A libtorch tensor handle (an `at::Tensor`: a reference to shared storage).
/// Cloning it makes another handle on the same tensor (no data copy).
pub struct Tensor(NonNull<RawTensor>);

// SAFETY: at::Tensor's reference count is atomic and every shim call only
// reads the tensor handle (libtorch ops are thread-safe for that); in-place
// ops (`add_scalar_`) take `&mut self`.
unsafe impl Send for Tensor {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for Tensor {}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: the handle was made by the shim and is freed once.
        unsafe { ads_tensor_free(self.0.as_ptr()) }
    }
}

impl Clone for Tensor {
    fn clone(&self) -> Tensor {
        // SAFETY: a valid handle; the shim returns a new one (never NULL).
        Tensor(NonNull::new(unsafe { ads_tensor_clone_handle(self.raw()) }).expect("new handle"))
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.info(), self.sizes()) {
            (Ok(i), Ok(s)) => write!(f, "Tensor({:?}, {}, {:?})", s, i.dtype_name, i.device),
            _ => write!(f, "Tensor(?)"),
        }
    }
}

/// Element types a host buffer can be turned into a tensor from.
pub trait Element: Copy {
    /// The dtype of a tensor of these elements.
    const KIND: Kind;
}
macro_rules! element {
    ($($t:ty => $k:ident),*) => {$(impl Element for $t { const KIND: Kind = Kind::$k; })*};
}
element!(f32 => Float, f64 => Double, i64 => Int64, i32 => Int, i16 => Int16, i8 => Int8,
         u8 => Uint8, bool => Bool, half::f16 => Half, half::bf16 => BFloat16);

fn out_tensor(f: impl FnOnce(*mut *mut RawTensor) -> *mut c_char) -> Result<Tensor, TorchError> {
    let mut p = std::ptr::null_mut();
    check(f(&mut p))?;
    NonNull::new(p)
        .map(Tensor)
        .ok_or_else(|| TorchError("the shim returned no tensor".into()))
}

impl Tensor {
    fn raw(&self) -> *const RawTensor {
        self.0.as_ptr()
    }

    /// Device, dtype, layout and element count.
    pub fn info(&self) -> Result<Info, TorchError> {
        // SAFETY: AdsInfo is plain data; the shim fills it.
        let mut i: AdsInfo = unsafe { std::mem::zeroed() };
        // SAFETY: a valid handle and a valid out pointer.
        check(unsafe { ads_info(self.raw(), &mut i) })?;
        let name = if i.dtype_name.is_null() {
            ""
        } else {
            // SAFETY: the shim returns pointers to string literals.
            unsafe { CStr::from_ptr(i.dtype_name) }
                .to_str()
                .unwrap_or("unknown")
        };
        Ok(Info {
            defined: i.defined != 0,
            device: match i.device_type {
                0 => Device::Cpu,
                1 => Device::Cuda(i.device_index),
                _ => Device::Other(i.device_index),
            },
            kind: Kind::from_code(i.kind),
            dtype_name: name,
            dim: i.dim.max(0) as usize,
            strided: i.strided != 0,
            contiguous: i.contiguous != 0,
            is_neg: i.is_neg != 0,
            is_conj: i.is_conj != 0,
            floating: i.floating != 0,
            complex: i.complex != 0,
            element_size: i.element_size.max(0) as usize,
            numel: i.numel.max(0) as usize,
            data: i.data,
        })
    }

    /// The sizes (`t.shape`).
    pub fn sizes(&self) -> Result<Vec<i64>, TorchError> {
        let mut v = [0i64; 64];
        let mut i: AdsInfo = unsafe { std::mem::zeroed() };
        // SAFETY: valid handle and out pointers; cap is the buffer's length.
        check(unsafe { ads_info(self.raw(), &mut i) })?;
        check(unsafe { ads_sizes(self.raw(), v.as_mut_ptr(), v.len() as i32) })?;
        Ok(v[..i.dim.max(0) as usize].to_vec())
    }

    /// A contiguous tensor with the same values (itself when it already is),
    /// lazy negation and conjugation resolved.
    pub fn contiguous(&self) -> Result<Tensor, TorchError> {
        // SAFETY: valid handle; out_tensor checks the result.
        out_tensor(|o| unsafe { ads_contiguous(self.raw(), o) })
    }

    /// The record scalars of this tensor, queued on its device, as a 1-d
    /// float64 tensor there: `[l1]`, or with `moments` (a non-empty floating
    /// tensor) `[l1, l2, min, max, mean, NaN count, Inf count]`; with
    /// `digest` one more value, the digest's device sum
    /// ([`super::digest`]; its values indexed by that
    /// [`super::digest::Index`]) as float64 bits. Nothing is copied to the
    /// host.
    pub fn scalars(
        &self,
        moments: bool,
        digest: Option<super::digest::Index>,
    ) -> Result<Tensor, TorchError> {
        let at = digest.unwrap_or(super::digest::Index::WHOLE);
        let (run, stride, offset) = (at.run as i64, at.stride as i64, at.offset as i64);
        let d = digest.is_some() as i32;
        // SAFETY: valid handle; out_tensor checks the result.
        out_tensor(|o| unsafe {
            ads_scalars(self.raw(), moments as i32, d, run, stride, offset, o)
        })
    }

    /// Copies this 1-d float64 tensor into `out` (its length): one
    /// device-to-host copy, which waits for the device.
    pub fn copy_to_host(&self, out: &mut [f64]) -> Result<(), TorchError> {
        // SAFETY: `out` has room for out.len() values; the shim checks numel.
        check(unsafe { ads_copy_to_host(self.raw(), out.as_mut_ptr(), out.len()) })
    }

    /// A CPU tensor holding a copy of `data` with shape `sizes` (row-major).
    pub fn from_slice<T: Element>(data: &[T], sizes: &[i64]) -> Result<Tensor, TorchError> {
        let n: i64 = sizes.iter().product();
        if n as usize != data.len() {
            return Err(TorchError(format!(
                "{} elements for shape {sizes:?}",
                data.len()
            )));
        }
        // SAFETY: data holds numel elements of T's dtype.
        out_tensor(|o| unsafe {
            ads_from_host(
                data.as_ptr() as *const c_void,
                T::KIND as i32,
                sizes.as_ptr(),
                sizes.len() as i32,
                o,
            )
        })
    }

    /// `t.as_strided(sizes, strides, offset)` (strides and offset in elements).
    pub fn as_strided(
        &self,
        sizes: &[i64],
        strides: &[i64],
        offset: i64,
    ) -> Result<Tensor, TorchError> {
        if sizes.len() != strides.len() {
            return Err(TorchError("sizes and strides differ in length".into()));
        }
        // SAFETY: both arrays have `dim` entries.
        out_tensor(|o| unsafe {
            ads_as_strided(
                self.raw(),
                sizes.as_ptr(),
                strides.as_ptr(),
                sizes.len() as i32,
                offset,
                o,
            )
        })
    }

    /// `t.to(dtype)`.
    pub fn to_kind(&self, k: Kind) -> Result<Tensor, TorchError> {
        // SAFETY: valid handle; the shim rejects unknown codes.
        out_tensor(|o| unsafe { ads_to_kind(self.raw(), k as i32, o) })
    }

    /// In place: `t += v`.
    pub fn add_scalar_(&mut self, v: f64) -> Result<(), TorchError> {
        // SAFETY: valid handle, exclusive borrow.
        check(unsafe { ads_add_scalar_(self.0.as_ptr(), v) })
    }

    /// What torch's Python API computes, one op and one `.item()` at a time
    /// (the reference tracer's `_compute_stats`, DebugMode's `norm_hash_fn`):
    /// `[l1, l2, min, max, mean, NaN count, Inf count]`, only `[0]` without
    /// `moments`. For tests.
    pub fn reference_stats(&self, moments: bool) -> Result<[f64; 7], TorchError> {
        let mut v = [f64::NAN; 7];
        // SAFETY: room for 7 values.
        check(unsafe { ads_reference_stats(self.raw(), moments as i32, v.as_mut_ptr()) })?;
        Ok(v)
    }

    /// The 32-bit values the digest reads, in logical order, as libtorch
    /// reads them out (tests).
    pub fn digest_words(&self) -> Result<Vec<u32>, TorchError> {
        let n = self.info()?.digest_len();
        let mut v = vec![0i64; n];
        // SAFETY: room for n values; the shim checks the count.
        check(unsafe { ads_digest_words(self.raw(), v.as_mut_ptr(), n) })?;
        Ok(v.into_iter().map(|x| x as u32).collect())
    }

    /// A handle on the tensor behind a Python `torch.Tensor` (no copy);
    /// `Ok(None)` when the object is not a tensor.
    ///
    /// # Safety
    /// `obj` is a live Python object and the caller holds the GIL.
    #[cfg(feature = "python")]
    pub unsafe fn from_python(obj: *mut c_void) -> Result<Option<Tensor>, TorchError> {
        let mut is = 0;
        let mut p = std::ptr::null_mut();
        // SAFETY: the caller's guarantee; out pointers are valid.
        check(unsafe { ads_from_python(obj, &mut is, &mut p) })?;
        Ok(NonNull::new(p).map(Tensor))
    }
}

/// One 1-d tensor of the given 1-d float64 tensors (all on one device).
pub fn cat(ts: &[&Tensor]) -> Result<Tensor, TorchError> {
    let raw: Vec<*const RawTensor> = ts.iter().map(|t| t.raw()).collect();
    // SAFETY: `raw` holds ts.len() valid handles.
    out_tensor(|o| unsafe { ads_cat(raw.as_ptr(), raw.len(), o) })
}
