// pool_cases.h - runs one case of tests/golden/pool.json (max_pool3d, avg_pool3d,
// adaptive_avg_pool3d, upsample; written by `/usr/bin/python3 tools/golden/make_golden.py pool`) on
// a tensor of any device, dtype and memory format, so the CPU golden tests and the CUDA tests read
// the same parameters the same way.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expanding_array.h"
#include "ops/pool/avg_pool3d.h"
#include "ops/pool/max_pool3d.h"
#include "ops/pool/upsample.h"
#include "tests/golden.h"

namespace halfgrad::testing {

/// A per-axis parameter written as one integer or a list of three.
inline ExpandingArray<3> golden_axes(const nlohmann::json& v) {
  return v.is_array() ? ExpandingArray<3>(v.get<std::vector<int64_t>>()) : ExpandingArray<3>(v.get<int64_t>());
}

/// y of the case's op with the case's parameters on x.
inline Tensor run_pool_case(const GoldenCase& c, const Tensor& x) {
  const nlohmann::json& p = c.params();
  const std::string op = c.op();
  if (op == "max_pool3d")
    return ops::max_pool3d(x, golden_axes(p.at("kernel")), golden_axes(p.at("stride")), golden_axes(p.at("padding")));
  if (op == "avg_pool3d") {
    std::optional<int64_t> divisor;
    if (!p.at("divisor_override").is_null()) divisor = p.at("divisor_override").get<int64_t>();
    return ops::avg_pool3d(x, golden_axes(p.at("kernel")), golden_axes(p.at("stride")), golden_axes(p.at("padding")),
                           p.at("ceil_mode").get<bool>(), p.at("count_include_pad").get<bool>(), divisor);
  }
  if (op == "adaptive_avg_pool3d") return ops::adaptive_avg_pool3d(x, golden_axes(p.at("output_size")));
  if (op == "upsample") {
    const ExpandingArray<3> size = golden_axes(p.at("size"));
    const std::vector<double> scales =
        p.at("scale_factor").is_null() ? std::vector<double>{} : p.at("scale_factor").get<std::vector<double>>();
    if (p.at("mode").get<std::string>() == "nearest") return ops::upsample_nearest3d(x, size, scales);
    return ops::upsample_trilinear3d(x, size, p.at("align_corners").get<bool>(), scales);
  }
  throw std::runtime_error("pool_cases.h: " + c.where() + " has an unknown op " + op);
}

}  // namespace halfgrad::testing
