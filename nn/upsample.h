// upsample.h - Upsample layer (torch.nn.Upsample) over ops/pool/upsample.h (math, PyTorch's
// coordinate rules, dtypes and errors there). No parameters.
//   x (N, C, D, H, W) -> y (N, C, od, oh, ow): od = size[0], or floor(D * scale_factor[0]) (as
//   F.interpolate; the scale factor itself then sets the coordinate mapping, as F.interpolate with
//   recompute_scale_factor unset).
//   mode kNearest: y = x at floor(o * D / od) (PyTorch's legacy "nearest", not "nearest-exact").
//   mode kTrilinear: linear interpolation along each axis, align_corners false (default) or true.
// Usage: Upsample(UpsampleOptions().scale_factor({2, 2, 2}).mode(kTrilinear).align_corners(false)),
//        Upsample(UpsampleOptions().size({16, 32, 32})).
// Errors (halfgrad::Error from the constructor): neither or both of size and scale_factor set; a
// size < 1 or scale factor <= 0; align_corners set with kNearest (PyTorch: "align_corners option can
// only be set with the interpolating modes"). From forward: a non-5-D input; a scale factor that gives
// an output extent < 1.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/arg.h"
#include "core/expanding_array.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// The interpolation modes halfgrad has (torch::kNearest, torch::kTrilinear).
enum class UpsampleMode { Nearest, Trilinear };
inline constexpr UpsampleMode kNearest = UpsampleMode::Nearest;
inline constexpr UpsampleMode kTrilinear = UpsampleMode::Trilinear;

/// As torch::nn::UpsampleOptions (mode defaults to kNearest, align_corners unset; the setters take the
/// lists themselves, so that `.scale_factor({2, 2, 2})` reads as in libtorch).
struct UpsampleOptions {
  // size and scale_factor are written by hand, not HG_ARG: their setters take the list and store it
  // in the optional (an HG_ARG setter would take the optional, and `.size({16, 32, 32})` would not
  // compile).
  UpsampleOptions& size(std::vector<int64_t> s) { size_ = std::move(s); return *this; }
  UpsampleOptions& scale_factor(std::vector<double> f) { scale_factor_ = std::move(f); return *this; }
  const std::optional<std::vector<int64_t>>& size() const { return size_; }
  const std::optional<std::vector<double>>& scale_factor() const { return scale_factor_; }
  std::optional<std::vector<int64_t>> size_;
  std::optional<std::vector<double>> scale_factor_;

  HG_ARG(UpsampleMode, mode) = kNearest;
  HG_ARG(std::optional<bool>, align_corners);
};

class Upsample : public Module {
 public:
  explicit Upsample(const UpsampleOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  UpsampleOptions options;
};

}  // namespace halfgrad::nn
