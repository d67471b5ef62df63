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
  for (Dtype d : {kFloat32, kFloat16, kFloat64, kInt64})
    if (name == dtype_name(d)) return d;
  HG_FAIL(where << ": unknown dtype \"" << name << "\"; expected float32, float16, float64 or int64");
}

nlohmann::json tensor_to_json(const Tensor& t) {
  // The bytes of the host, NCDHW form (a CUDA or channels-last tensor is copied there first).
  const Tensor h = t.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
  return {{"dtype", dtype_name(h.dtype())},
          {"shape", h.shape()},
          {"base64", base64_encode(static_cast<const uint8_t*>(h.raw_data()), h.nbytes())}};
}

Tensor tensor_from_json(const nlohmann::json& j, const std::string& where) {
  HG_CHECK(j.is_object() && j.contains("dtype") && j.contains("shape") && j.contains("base64"),
           where << ": expected a tensor object {\"dtype\", \"shape\", \"base64\"}, got " << j.dump().substr(0, 80));
  const Dtype d = dtype_from_name(j.at("dtype").get<std::string>(), where);
  const Shape shape = j.at("shape").get<Shape>();
  const std::vector<uint8_t> bytes = base64_decode(j.at("base64").get<std::string>(), where);
  Tensor t = Tensor::empty(shape, d);
  HG_CHECK(bytes.size() == t.nbytes(), where << ": " << bytes.size() << " bytes of data for a " << dtype_name(d)
                                             << " tensor of shape " << shape_str(shape) << " (" << t.nbytes()
                                             << " bytes)");
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace halfgrad::optim
