// tensor.h - the n-dimensional array every layer of halfgrad passes around.
//
// A Tensor is a cheap handle (a shared pointer) to a TensorImpl: shape, dtype, device, a contiguous
// row-major buffer, and the autograd fields (requires_grad, grad, grad_fn). Copying a Tensor copies
// the handle, as in libtorch; `clone()` copies the data.
//
// Layout: shapes have up to 8 dimensions (volumes are 5-D: N, C, D, H, W); the buffer is dense,
// row-major in the logical order (Contiguous), or NDHWC for a 5-D tensor whose `memory_format` is
// ChannelsLast3d (the layout the CUDA convolutions read; CPU ops require Contiguous).
//
// Device: CPU or CUDA (core/cuda/runtime.h). A CUDA tensor's buffer is device memory from the CUDA
// caching allocator; data<T>() then returns a device pointer (for kernels), and the element accessors
// (item, to_float_vector, ...) copy to the host first. `to(Device)` moves a tensor (differentiable).
//
// Memory format: the shape is always the logical (N, C, D, H, W); `memory_format` says how the buffer
// orders it. Contiguous = NCDHW row-major; ChannelsLast3d = NDHWC (channel fastest, PyTorch's
// channels_last_3d), only for 5-D tensors. CUDA ops accept both and keep the input's format; CPU ops
// need Contiguous and say so. `to(MemoryFormat)` converts (differentiable).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/bfloat16.h"
#include "core/half.h"

namespace halfgrad {

namespace autograd {
struct Node;
}

using Shape = std::vector<int64_t>;

/// "[2, 3, 4]"
std::string shape_str(const Shape& s);
/// Product of the extents (1 for a 0-d shape).
int64_t shape_numel(const Shape& s);

enum class Device : uint8_t { CPU, CUDA };
const char* device_name(Device d);

enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast3d };

/// Owned bytes: 64-byte aligned host memory, or 256-byte aligned device memory (CUDA caching allocator),
/// and the version counter of every tensor that reads them (see Tensor::version).
class Storage {
 public:
  explicit Storage(size_t nbytes, Device device = Device::CPU);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  /// In-place writes so far (Tensor::version); a plain counter, bumped once per in-place API call.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  /// Continue another storage's count: Module::to swaps a parameter's storage for a converted copy,
  /// and the parameter's version goes on from where the old storage left it.
  void set_version(uint64_t v) { version_.store(v, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_ = Device::CPU;
  std::atomic<uint64_t> version_{0};  // atomic: a data-loader thread may fill a tensor another thread saved
};

struct TensorImpl {
  Shape shape;
  Dtype dtype = kFloat32;
  Device device = Device::CPU;
  MemoryFormat memory_format = MemoryFormat::Contiguous;
  std::shared_ptr<Storage> storage;
  int64_t numel = 0;

  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;              // accumulated gradient of a leaf (same shape)
  std::shared_ptr<autograd::Node> grad_fn;       // the op that produced this tensor (non-leaf)
};

/// Seeded random source; every random thing in halfgrad takes one (or uses the global one).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void manual_seed(uint64_t seed) { engine_.seed(seed); }
  std::mt19937_64& engine() { return engine_; }
  /// Uniform in [0, 1).
  double uniform();
  /// Standard normal.
  double normal();
  /// Uniform integer in [0, n).
  int64_t randint(int64_t n);

 private:
  std::mt19937_64 engine_;
};

/// The process-wide default generator (seed it with manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories ----------------------------------------------------------------------------
  /// Uninitialised tensor on `device`. ChannelsLast3d needs a 5-D shape (throws otherwise).
  static Tensor empty(const Shape& shape, Dtype dtype = kFloat32, Device device = Device::CPU,
                      MemoryFormat format = MemoryFormat::Contiguous);
  static Tensor zeros(const Shape& shape, Dtype dtype = kFloat32, Device device = Device::CPU,
                      MemoryFormat format = MemoryFormat::Contiguous);
  static Tensor ones(const Shape& shape, Dtype dtype = kFloat32, Device device = Device::CPU);
  static Tensor full(const Shape& shape, double value, Dtype dtype = kFloat32, Device device = Device::CPU);
  /// A 0-d tensor holding `value`.
  static Tensor scalar(double value, Dtype dtype = kFloat32);
  /// Copies `values` (numel must match the shape) and converts to `dtype` (half rounds to nearest even).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, Dtype dtype = kFloat32);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, Dtype dtype = kFloat64);
  static Tensor from_labels(const std::vector<int64_t>& values, const Shape& shape);
  /// N(0, std^2) values from `gen`.
  static Tensor randn(const Shape& shape, Generator& gen, Dtype dtype = kFloat32, double std = 1.0);
  /// U[lo, hi) values from `gen`.
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, Dtype dtype = kFloat32);

  // ---- metadata -----------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  /// Extent of dimension d (negative counts from the end).
  int64_t size(int64_t d) const;
  int64_t numel() const;
  Dtype dtype() const;
  Device device() const;
  bool is_cuda() const { return device() == Device::CUDA; }
  MemoryFormat memory_format() const;
  bool is_channels_last() const { return memory_format() == MemoryFormat::ChannelsLast3d; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles point at the same TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- data access ------------------------------------------------------------------------------
  /// Typed pointer to the buffer (a device pointer for CUDA tensors, in the physical memory format);
  /// T must match the dtype: float, double, int64_t, uint16_t for Float16, bfloat16_bits for BFloat16.
  template <typename T>
  T* data() const;
  void* raw_data() const;
  /// Element i (flat index in the logical NCDHW order) converted to double; for tests and printing.
  /// On a CUDA tensor each call copies to the host: use to_double_vector for many elements.
  double item_at(int64_t i) const;
  /// The single value of a 1-element tensor, as double.
  double item() const;
  /// All values converted to float / double, in logical (NCDHW) order, copied to the host if needed.
  std::vector<float> to_float_vector() const;
  std::vector<double> to_double_vector() const;

  // ---- copies ---------------------------------------------------------------------------------
  /// Deep copy of the data; the copy is a leaf with requires_grad false.
  Tensor clone() const;
  /// Shares the data, drops autograd history: a leaf with requires_grad false.
  Tensor detach() const;
  /// Same data, new shape (numel must match; throws otherwise); not differentiable - use ops::reshape
  /// for that. A channels-last tensor whose shape changes is first copied to Contiguous, so the
  /// result then does not share its buffer.
  Tensor view_as_shape(const Shape& shape) const;
  /// Non-differentiable dtype conversion (copy); ops::to / Tensor::to is the differentiable one.
  Tensor cast_copy(Dtype dtype) const;
  /// Copy `src` (same numel) into this tensor's storage, converting dtype, device and memory format.
  void copy_from(const Tensor& src);
  /// Non-differentiable copies to another device / memory format (the identity returns *this).
  Tensor copy_to(Device device) const;
  Tensor format_copy(MemoryFormat format) const;
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // ---- version counter (as PyTorch's `tensor._version`) ------------------------------------------
  /// How many in-place writes this tensor's storage has had (0 from every factory: empty, zeros,
  /// ones, full, from_vector, randn, ...). Shared by every tensor on the storage:
  /// views (view_as_shape, ops::reshape) and detach() copies count together; clone(), and a
  /// cast_copy, copy_to, format_copy or to() that converts, make a new storage at version 0. Ops that save a tensor for
  /// backward record its version, and backward throws if it changed (autograd/node.h).
  ///
  /// What bumps it (once per call, CPU and CUDA alike): the explicit in-place APIs, as in PyTorch -
  /// fill_, zero_, copy_from; the optimizers' step() (each parameter with a gradient, and its state:
  /// master copy, momentum, exp_avg, exp_avg_sq; the CUDA step too, even when a found_inf flag makes
  /// the kernel skip it, since the host cannot know); zero_grad without set_to_none (the .grad);
  /// GradScaler::unscale_ and clip_grad_norm_ (every .grad they were given); backward's in-place
  /// accumulation into an existing .grad; nn::init's fills; batch_norm's running-statistics update;
  /// nn::load_checkpoint (through copy_from); Module::to (a storage swap that continues the count, +1);
  /// gradcheck's perturbations. What does not: data<T>() and raw_data() (a plain pointer: code that
  /// writes through it into a tensor others hold calls bump_version itself), reading, and ops that
  /// write only into the fresh tensors they return.
  uint64_t version() const;
  /// Count one in-place write (see version()). Const like fill_: it changes the buffer, not the handle.
  void bump_version() const;

  // ---- autograd (defined in autograd/) -------------------------------------------------------------
  bool requires_grad() const;
  /// Mark a leaf as needing a gradient. Throws if the tensor is not a leaf or not floating point.
  Tensor& set_requires_grad(bool r);
  /// Accumulated gradient of a leaf (undefined Tensor until backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& g);
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  /// Backpropagate from this tensor. Without `grad_output` the tensor must hold one element and the
  /// seed is 1. With retain_graph false the graph's saved tensors are freed afterwards, and a second
  /// backward through it throws. Gradients accumulate (+=) into leaves' .grad.
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false) const;

  /// Differentiable dtype conversion (defined in ops/cast.cpp); the identity when dtype matches.
  Tensor to(Dtype dtype) const;
  /// Differentiable device move (ops/cast.cpp): the gradient is moved back. Identity on the same device.
  Tensor to(Device device) const;
  Tensor cuda() const { return to(Device::CUDA); }
  Tensor cpu() const { return to(Device::CPU); }
  /// Differentiable memory-format conversion (ops/cast.cpp); identity when already in `format`.
  Tensor to(MemoryFormat format) const;
  Tensor contiguous() const { return to(MemoryFormat::Contiguous); }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

/// Type trait from C++ type to Dtype (uint16_t stands for Float16 bits, bfloat16_bits for BFloat16).
template <typename T>
struct DtypeOf;
template <> struct DtypeOf<float> { static constexpr Dtype value = kFloat32; };
template <> struct DtypeOf<double> { static constexpr Dtype value = kFloat64; };
template <> struct DtypeOf<uint16_t> { static constexpr Dtype value = kFloat16; };
template <> struct DtypeOf<int64_t> { static constexpr Dtype value = kInt64; };
template <> struct DtypeOf<bfloat16_bits> { static constexpr Dtype value = kBFloat16; };

[[noreturn]] void throw_dtype_mismatch(Dtype have, Dtype want);

template <typename T>
T* Tensor::data() const {
  check_defined("data");
  if (impl_->dtype != DtypeOf<T>::value) throw_dtype_mismatch(impl_->dtype, DtypeOf<T>::value);
  return static_cast<T*>(impl_->storage->data());
}

}  // namespace halfgrad
