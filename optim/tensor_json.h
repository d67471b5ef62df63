// tensor_json.h - a Tensor as JSON, exactly: {"dtype": "float32", "shape": [3, 4], "base64": "..."}.
//
// The data are the tensor's bytes (dense row-major, little-endian as in memory on x86 and ARM)
// encoded in base64 (RFC 4648, with '=' padding). Decimal text would need care to round-trip every
// float, NaN and signed zero; the raw bytes round-trip by construction, which is what an optimizer
// state_dict needs for a bit-identical resume.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_checked.h"
#include "core/tensor.h"

namespace halfgrad::optim {

std::string base64_encode(const uint8_t* data, size_t n);
/// Throws halfgrad::Error naming `where` on a character outside the alphabet or a bad length.
std::vector<uint8_t> base64_decode(const std::string& text, const std::string& where);

/// A CUDA or channels-last tensor is saved as its host copy in NCDHW order (the form tensor_from_json
/// returns: a contiguous CPU tensor).
nlohmann::json tensor_to_json(const Tensor& t);
/// Throws halfgrad::Error naming the file and field `j` carries when a field is missing or of the
/// wrong type, the dtype is unknown, the shape has a negative extent or more than 2^40 elements,
/// or the byte count does not match the shape and dtype (checked before allocating).
Tensor tensor_from_json(const json_checked::Field& j);
/// tensor_from_json(json_checked::Field(j, where)).
Tensor tensor_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace halfgrad::optim
