#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/cuda/tensor_kernels.h"
#include "core/error.h"

namespace halfgrad {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) {
    HG_CHECK(e >= 0, "shape " << shape_str(s) << " has a negative extent");
    HG_CHECK(!__builtin_mul_overflow(n, e, &n), "shape " << shape_str(s) << " has more than 2^63 elements");
  }
  return n;
}

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// CPU: 64-byte alignment (a cache line, enough for any SIMD load), through the CPU caching allocator.
// CUDA: through the CUDA caching allocator (core/cuda/runtime.h).
Storage::Storage(size_t nbytes, Device device)
    : data_(device == Device::CPU ? cpu_allocate(nbytes) : cuda::allocate(nbytes, "Tensor::empty")),
      nbytes_(nbytes),
      device_(device) {}

Storage::~Storage() {
  if (device_ == Device::CPU) cpu_free(data_, nbytes_);
  else cuda::release(data_, nbytes_);
}

double Generator::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
double Generator::normal() { return std::normal_distribution<double>(0.0, 1.0)(engine_); }
int64_t Generator::randint(int64_t n) {
  return std::uniform_int_distribution<int64_t>(0, n - 1)(engine_);
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

void throw_dtype_mismatch(Dtype have, Dtype want) {
  HG_FAIL("Tensor::data: tensor holds " << dtype_name(have) << " but " << dtype_name(want)
                                         << " was requested");
}

void Tensor::check_defined(const char* what) const {
  HG_CHECK(impl_ != nullptr, "Tensor::" << what << ": tensor is undefined (default-constructed)");
}

Tensor Tensor::empty(const Shape& shape, Dtype dtype, Device device, MemoryFormat format) {
  for (int64_t e : shape) HG_CHECK(e >= 0, "Tensor::empty: negative extent in shape " << shape_str(shape));
  HG_CHECK(shape.size() <= 8, "Tensor::empty: shape " << shape_str(shape) << " has more than 8 dimensions");
  HG_CHECK(format == MemoryFormat::Contiguous || shape.size() == 5,
           "Tensor::empty: channels-last (NDHWC) needs a 5-D shape (N, C, D, H, W), got " << shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = device;
  impl->memory_format = format;
  impl->numel = shape_numel(shape);
  size_t nbytes = 0;
  HG_CHECK(!__builtin_mul_overflow(static_cast<size_t>(impl->numel), dtype_size(dtype), &nbytes),
           "Tensor::empty: shape " << shape_str(shape) << " of " << dtype_name(dtype) << " needs more than 2^64 bytes");
  impl->storage = std::make_shared<Storage>(nbytes, device);
  return Tensor(impl);
}

Tensor Tensor::zeros(const Shape& shape, Dtype dtype, Device device, MemoryFormat format) {
  Tensor t = empty(shape, dtype, device, format);
  // all-zero bits is +0 in every dtype
  if (device == Device::CPU) std::memset(t.raw_data(), 0, t.nbytes());
  else cuda::memset_async(t.raw_data(), 0, t.nbytes());
  return t;
}
Tensor Tensor::ones(const Shape& shape, Dtype dtype, Device device) { return full(shape, 1.0, dtype, device); }
// Every element of t = value (not counted: fill_ counts, factories make version-0 tensors).
static void fill_buffer(const Tensor& t, double value) {
  const int64_t n = t.numel();
  if (t.device() == Device::CUDA) {
    cuda::fill(t.raw_data(), t.dtype(), n, value);
    return;
  }
  switch (t.dtype()) {
    case kFloat32: { float* p = t.data<float>(); float v = static_cast<float>(value); for (int64_t i = 0; i < n; ++i) p[i] = v; break; }
    case kFloat16: { uint16_t* p = t.data<uint16_t>(); uint16_t v = float_to_half_bits(static_cast<float>(value)); for (int64_t i = 0; i < n; ++i) p[i] = v; break; }
    case kFloat64: { double* p = t.data<double>(); for (int64_t i = 0; i < n; ++i) p[i] = value; break; }
    case kInt64: { int64_t* p = t.data<int64_t>(); int64_t v = static_cast<int64_t>(value); for (int64_t i = 0; i < n; ++i) p[i] = v; break; }
    case kBFloat16: { bfloat16_bits* p = t.data<bfloat16_bits>(); bfloat16_bits v{float_to_bfloat16_bits(static_cast<float>(value))}; for (int64_t i = 0; i < n; ++i) p[i] = v; break; }
  }
}

Tensor Tensor::full(const Shape& shape, double value, Dtype dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  fill_buffer(t, value);
  return t;
}
Tensor Tensor::scalar(double value, Dtype dtype) { return full({}, value, dtype); }

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, Dtype dtype) {
  HG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           "Tensor::from_vector: " << values.size() << " values for shape " << shape_str(shape));
  Tensor t = empty(shape, dtype);
  const int64_t n = t.numel();
  switch (dtype) {
    case kFloat32: std::memcpy(t.raw_data(), values.data(), n * 4); break;
    case kFloat16: float_to_half_array(values.data(), t.data<uint16_t>(), n); break;
    case kFloat64: for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = values[i]; break;
    case kInt64: for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(values[i]); break;
    case kBFloat16: float_to_bfloat16_array(values.data(), t.data<bfloat16_bits>(), n); break;
  }
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, Dtype dtype) {
  HG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           "Tensor::from_vector: " << values.size() << " values for shape " << shape_str(shape));
  Tensor t = empty(shape, kFloat64);
  std::memcpy(t.raw_data(), values.data(), values.size() * 8);
  return dtype == kFloat64 ? t : t.cast_copy(dtype);
}

Tensor Tensor::from_labels(const std::vector<int64_t>& values, const Shape& shape) {
  HG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           "Tensor::from_labels: " << values.size() << " values for shape " << shape_str(shape));
  Tensor t = empty(shape, kInt64);
  std::memcpy(t.raw_data(), values.data(), values.size() * 8);
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, Dtype dtype, double std) {
  std::vector<double> v(shape_numel(shape));
  for (auto& x : v) x = gen.normal() * std;
  return from_vector(v, shape, dtype);
}

Tensor Tensor::uniform(const Shape& shape, double lo, double hi, Generator& gen, Dtype dtype) {
  std::vector<double> v(shape_numel(shape));
  for (auto& x : v) x = lo + (hi - lo) * gen.uniform();
  return from_vector(v, shape, dtype);
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  HG_CHECK(d >= -n && d < n, "Tensor::size: dimension " << d << " out of range for shape " << shape_str(shape()));
  return shape()[d < 0 ? d + n : d];
}
int64_t Tensor::numel() const {
  check_defined("numel");
  return impl_->numel;
}
Dtype Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined("device");
  return impl_->device;
}
MemoryFormat Tensor::memory_format() const {
  check_defined("memory_format");
  return impl_->memory_format;
}
void* Tensor::raw_data() const {
  check_defined("raw_data");
  return impl_->storage->data();
}

double Tensor::item_at(int64_t i) const {
  HG_CHECK(i >= 0 && i < numel(), "Tensor::item_at: index " << i << " out of range for " << numel() << " elements");
  if (device() == Device::CUDA && !is_channels_last()) {  // one element over the bus, not the tensor
    Tensor one = empty({1}, dtype());
    cuda::copy_d2h(one.raw_data(), static_cast<const char*>(raw_data()) + i * dtype_size(dtype()), dtype_size(dtype()));
    return one.item_at(0);
  }
  if (device() == Device::CUDA || is_channels_last()) return copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous).item_at(i);
  switch (dtype()) {
    case kFloat32: return data<float>()[i];
    case kFloat16: return half_bits_to_float(data<uint16_t>()[i]);
    case kFloat64: return data<double>()[i];
    case kInt64: return static_cast<double>(data<int64_t>()[i]);
    case kBFloat16: return bfloat16_bits_to_float(data<bfloat16_bits>()[i].bits);
  }
  return 0;
}

double Tensor::item() const {
  HG_CHECK(numel() == 1, "Tensor::item: tensor of shape " << shape_str(shape()) << " has " << numel()
                                                         << " elements; expected exactly 1");
  return item_at(0);
}

std::vector<float> Tensor::to_float_vector() const {
  if (device() == Device::CUDA || is_channels_last()) return copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous).to_float_vector();
  std::vector<float> v(numel());
  if (dtype() == kFloat32) std::memcpy(v.data(), raw_data(), nbytes());
  else if (is_reduced_float(dtype())) reduced_to_float_array(dtype(), raw_data(), v.data(), v.size());
  else for (int64_t i = 0; i < numel(); ++i) v[i] = static_cast<float>(item_at(i));
  return v;
}

std::vector<double> Tensor::to_double_vector() const {
  if (device() == Device::CUDA || is_channels_last()) return copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous).to_double_vector();
  std::vector<double> v(numel());
  for (int64_t i = 0; i < numel(); ++i) v[i] = item_at(i);
  return v;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device(), memory_format());
  if (device() == Device::CPU) std::memcpy(t.raw_data(), raw_data(), nbytes());
  else cuda::copy_d2d(t.raw_data(), raw_data(), nbytes());
  return t;
}

Tensor Tensor::copy_to(Device d) const {
  check_defined("copy_to");
  if (d == device()) return *this;
  Tensor t = empty(shape(), dtype(), d, memory_format());
  if (d == Device::CUDA) cuda::copy_h2d(t.raw_data(), raw_data(), nbytes());
  else cuda::copy_d2h(t.raw_data(), raw_data(), nbytes());
  return t;
}

// CPU twin of cuda::permute_channels: (N, R, Q) -> (N, Q, R) for any element size.
static void permute_cpu(const char* src, char* dst, size_t es, int64_t N, int64_t R, int64_t Q) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t q = 0; q < Q; ++q) std::memcpy(dst + ((n * Q + q) * R + r) * es, src + ((n * R + r) * Q + q) * es, es);
}

Tensor Tensor::format_copy(MemoryFormat f) const {
  check_defined("format_copy");
  if (f == memory_format()) return *this;
  HG_CHECK(dim() == 5, "Tensor::to(memory_format): channels-last (NDHWC) needs a 5-D tensor, got " << shape_str(shape()));
  Tensor t = empty(shape(), dtype(), device(), f);
  const int64_t N = shape()[0], C = shape()[1], S = shape()[2] * shape()[3] * shape()[4];
  const bool to_cl = f == MemoryFormat::ChannelsLast3d;
  if (device() == Device::CUDA) {
    cuda::permute_channels(raw_data(), t.raw_data(), static_cast<int64_t>(dtype_size(dtype())), N, C, S, to_cl);
  } else {
    permute_cpu(static_cast<const char*>(raw_data()), static_cast<char*>(t.raw_data()), dtype_size(dtype()), N,
                to_cl ? C : S, to_cl ? S : C);
  }
  return t;
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  impl->device = impl_->device;
  impl->memory_format = impl_->memory_format;
  impl->storage = impl_->storage;
  impl->numel = impl_->numel;
  return Tensor(impl);
}

Tensor Tensor::view_as_shape(const Shape& s) const {
  HG_CHECK(shape_numel(s) == numel(), "Tensor::view_as_shape: cannot view " << shape_str(shape()) << " as "
                                                                          << shape_str(s) << " (numel differs)");
  // A view re-reads the buffer in logical order, so a channels-last tensor is made contiguous first
  // (unless the shape is unchanged, which keeps its format).
  const bool keep = s == shape();
  Tensor t = (is_channels_last() && !keep) ? format_copy(MemoryFormat::Contiguous).detach() : detach();
  t.impl_->shape = s;
  if (!keep) t.impl_->memory_format = MemoryFormat::Contiguous;
  return t;
}

template <typename Src, typename Dst>
static void convert_loop(const Src* s, Dst* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<Dst>(s[i]);
}

// dst[i] = src[i] converted; both CPU, same numel. Float16 and BFloat16 go through float (exact for
// f32 -> f16/bf16 rounding; f64 -> f16/bf16 rounds twice, which can differ from a direct rounding only
// in ties that are not exactly representable in f32; PyTorch rounds f64 -> f16 the same way).
// f16 <-> bf16 goes through float too (f16 -> float is exact, so it rounds once).
static void convert(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  const Dtype a = src.dtype(), b = dst.dtype();
  if (a == b) { std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes()); return; }
  constexpr int64_t kChunk = 1 << 16;  // elements per parallel chunk of the 16-bit conversions
  if (is_reduced_float(a) && b == kFloat32) {
    const char* s = static_cast<const char*>(src.raw_data());
    float* d = dst.data<float>();
#pragma omp parallel for if (n >= 4 * kChunk)
    for (int64_t i = 0; i < n; i += kChunk) reduced_to_float_array(a, s + 2 * i, d + i, std::min(kChunk, n - i));
    return;
  }
  if (a == kFloat32 && is_reduced_float(b)) {
    const float* s = src.data<float>();
    char* d = static_cast<char*>(dst.raw_data());
#pragma omp parallel for if (n >= 4 * kChunk)
    for (int64_t i = 0; i < n; i += kChunk) float_to_reduced_array(b, s + i, d + 2 * i, std::min(kChunk, n - i));
    return;
  }
  if (is_reduced_float(a) && is_reduced_float(b)) {
    std::vector<float> tmp(n);
    reduced_to_float_array(a, src.raw_data(), tmp.data(), n);
    float_to_reduced_array(b, tmp.data(), dst.raw_data(), n);
    return;
  }
  if (is_reduced_float(a)) {
    std::vector<float> tmp(n);
    reduced_to_float_array(a, src.raw_data(), tmp.data(), n);
    if (b == kFloat64) convert_loop(tmp.data(), dst.data<double>(), n);
    else convert_loop(tmp.data(), dst.data<int64_t>(), n);
    return;
  }
  if (is_reduced_float(b)) {
    std::vector<float> tmp(n);
    if (a == kFloat64) convert_loop(src.data<double>(), tmp.data(), n);
    else convert_loop(src.data<int64_t>(), tmp.data(), n);
    float_to_reduced_array(b, tmp.data(), dst.raw_data(), n);
    return;
  }
  auto dispatch_dst = [&](auto* s) {
    if (b == kFloat32) convert_loop(s, dst.data<float>(), n);
    else if (b == kFloat64) convert_loop(s, dst.data<double>(), n);
    else convert_loop(s, dst.data<int64_t>(), n);
  };
  if (a == kFloat32) dispatch_dst(src.data<float>());
  else if (a == kFloat64) dispatch_dst(src.data<double>());
  else dispatch_dst(src.data<int64_t>());
}

Tensor Tensor::cast_copy(Dtype d) const {
  Tensor t = empty(shape(), d, device(), memory_format());
  if (device() == Device::CUDA) cuda::convert(raw_data(), dtype(), t.raw_data(), d, numel());
  else convert(*this, t);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  HG_CHECK(src.numel() == numel(), "Tensor::copy_from: source " << shape_str(src.shape()) << " and destination "
                                                               << shape_str(shape()) << " differ in numel");
  Tensor s = src;
  if (s.memory_format() != memory_format()) {
    HG_CHECK(s.shape() == shape(), "Tensor::copy_from: memory formats differ, so the shapes must match; got "
                                       << shape_str(s.shape()) << " and " << shape_str(shape()));
    s = s.format_copy(memory_format());
  }
  if (s.device() != device()) s = s.copy_to(device());  // same dtype move, then convert on the destination
  bump_version();
  if (device() == Device::CUDA) {
    if (s.is_same(*this) || s.raw_data() == raw_data()) return;
    cuda::convert(s.raw_data(), s.dtype(), raw_data(), dtype(), numel());
  } else {
    convert(s, *this);
  }
}

uint64_t Tensor::version() const {
  check_defined("version");
  return impl_->storage->version();
}

void Tensor::bump_version() const {
  check_defined("bump_version");
  impl_->storage->bump_version();
}

void Tensor::fill_(double value) {
  check_defined("fill_");
  bump_version();
  fill_buffer(*this, value);
}

}  // namespace halfgrad
