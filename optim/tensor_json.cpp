#include "optim/tensor_json.h"

#include <cstring>

#include "core/error.h"

namespace halfgrad::optim {

static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const uint8_t* data, size_t n) {
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    // Three bytes -> 24 bits -> four 6-bit digits; a short last group is padded with '='.
    uint32_t v = uint32_t{data[i]} << 16;
    if (i + 1 < n) v |= uint32_t{data[i + 1]} << 8;
    if (i + 2 < n) v |= data[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::vector<uint8_t> base64_decode(const std::string& text, const std::string& where) {
  HG_CHECK(text.size() % 4 == 0, where << ": base64 text of length " << text.size() << " is not a multiple of 4");
  int8_t digit[256];
  std::memset(digit, -1, sizeof digit);
  for (int i = 0; i < 64; ++i) digit[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      int8_t d = (k >= 4 - pad) ? 0 : digit[static_cast<uint8_t>(c)];
      HG_CHECK(d >= 0, where << ": '" << c << "' at position " << i + k << " is not a base64 digit");
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (pad < 2) out.push_back(static_cast<uint8_t>(v >> 8));
    if (pad < 1) out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

static Dtype dtype_from_name(const std::string& name, const std::string& where) {
  for (Dtype d : kAllDtypes)
    if (name == dtype_name(d)) return d;
  HG_FAIL(where << ": unknown dtype \"" << name << "\"; expected float32, float16, bfloat16, float64 or int64");
}

nlohmann::json tensor_to_json(const Tensor& t) {
  // The bytes of the host, NCDHW form (a CUDA or channels-last tensor is copied there first).
  const Tensor h = t.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
  return {{"dtype", dtype_name(h.dtype())},
          {"shape", h.shape()},
          {"base64", base64_encode(static_cast<const uint8_t*>(h.raw_data()), h.nbytes())}};
}

Tensor tensor_from_json(const json_checked::Field& j) {
  j.require_object("a tensor object {\"dtype\", \"shape\", \"base64\"}");
  const std::string where = j.where() + ": " + (j.path().empty() ? std::string("the tensor") : "'" + j.path() + "'");
  const Dtype d = dtype_from_name(j["dtype"].as_string(), where);
  const json_checked::Field shape_field = j["shape"];
  const Shape shape = shape_field.as_int_list();
  constexpr int64_t kMaxNumel = int64_t{1} << 40;  // far beyond any state; keeps numel * 8 from overflowing
  if (shape.size() > 8) shape_field.fail("has " + std::to_string(shape.size()) + " dimensions; expected at most 8");
  // The product of the non-zero extents is bounded too, as in nn/checkpoint.cpp's reader: a 0 extent
  // must not hide a product that overflows when the extents are multiplied in another order.
  int64_t numel_nonzero = 1;
  bool has_zero = false;
  for (int64_t e : shape) {
    if (e < 0) shape_field.fail("holds the negative extent " + std::to_string(e) + "; expected extents >= 0");
    if (e == 0) { has_zero = true; continue; }
    if (numel_nonzero > kMaxNumel / e) shape_field.fail("is too large (more than 2^40 elements)");
    numel_nonzero *= e;
  }
  const int64_t numel = has_zero ? 0 : numel_nonzero;
  const std::string text = j["base64"].as_string();
  const uint64_t want = static_cast<uint64_t>(numel) * dtype_size(d);
  HG_CHECK(text.size() / 4 * 3 >= want && text.size() / 4 * 3 <= want + 2,
           where << ": " << text.size() << " base64 characters cannot hold the " << want << " bytes of a "
                 << dtype_name(d) << " tensor of shape " << shape_str(shape));
  const std::vector<uint8_t> bytes = base64_decode(text, where);
  HG_CHECK(bytes.size() == want, where << ": " << bytes.size() << " bytes of data for a " << dtype_name(d)
                                       << " tensor of shape " << shape_str(shape) << " (" << want << " bytes)");
  Tensor t = Tensor::empty(shape, d);
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

Tensor tensor_from_json(const nlohmann::json& j, const std::string& where) {
  return tensor_from_json(json_checked::Field(j, where));
}

}  // namespace halfgrad::optim
