// expanding_array.h - ExpandingArray<D>: D per-axis integers (kernel size, stride, padding,
// dilation, output size) that a single integer fills on every axis, as libtorch's
// torch::ExpandingArray<D> (torch/csrc/api/include/torch/expanding_array.h):
//
//   ExpandingArray<3> k = 3;          // {3, 3, 3}
//   ExpandingArray<3> s = {1, 2, 2};  // nnU-Net's in-plane-only stride for anisotropic scans
//
// The axes are in the tensor's order: (D, H, W) for a 5-D NCDHW tensor. A list of the wrong length
// throws halfgrad::Error from the constructor ("ExpandingArray<3>: expected 3 values, got 2"); the
// value range (stride >= 1, padding >= 0, ...) is checked by the op that uses it, which knows its name.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace halfgrad {

template <size_t D>
class ExpandingArray {
 public:
  /// Every axis the same value (an implicit conversion, so `options.stride(2)` reads as in libtorch).
  ExpandingArray(int64_t value) { values_.fill(value); }  // NOLINT(google-explicit-constructor)
  /// One value per axis; throws halfgrad::Error unless the list has exactly D values.
  ExpandingArray(std::initializer_list<int64_t> list) : ExpandingArray(std::vector<int64_t>(list)) {}
  ExpandingArray(const std::vector<int64_t>& list) {  // NOLINT(google-explicit-constructor)
    HG_CHECK(list.size() == D, "ExpandingArray<" << D << ">: expected " << D << " values, got " << list.size());
    for (size_t i = 0; i < D; ++i) values_[i] = list[i];
  }
  ExpandingArray(const std::array<int64_t, D>& values) : values_(values) {}  // NOLINT(google-explicit-constructor)

  int64_t operator[](size_t i) const { return values_[i]; }
  int64_t& operator[](size_t i) { return values_[i]; }
  const std::array<int64_t, D>& array() const { return values_; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(values_.begin(), values_.end()); }
  static constexpr size_t size() { return D; }
  /// True when every axis holds the same value (the cubic case the fast kernels special-case).
  bool uniform() const {
    for (size_t i = 1; i < D; ++i)
      if (values_[i] != values_[0]) return false;
    return true;
  }
  /// "3" when uniform, else "(1, 3, 3)": the spelling of layers' extra_repr and error messages.
  std::string str() const {
    std::ostringstream s;
    if (uniform()) {
      s << values_[0];
    } else {
      s << '(';
      for (size_t i = 0; i < D; ++i) s << (i ? ", " : "") << values_[i];
      s << ')';
    }
    return s.str();
  }
  bool operator==(const ExpandingArray& o) const { return values_ == o.values_; }
  bool operator!=(const ExpandingArray& o) const { return values_ != o.values_; }

 private:
  std::array<int64_t, D> values_{};
};

}  // namespace halfgrad
