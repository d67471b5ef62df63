// arg.h - HG_ARG(T, name): one option of an options struct (Conv3dOptions, SGDOptions, ...) in one
// line, as libtorch's TORCH_ARG (torch/csrc/api/include/torch/arg.h). Inside a struct or class,
//
//   HG_ARG(ExpandingArray<3>, stride) = 1;
//
// expands to
//
//   public:
//     auto stride(const ExpandingArray<3>& new_stride) -> decltype(*this);  // stride_ = new_stride; return *this
//     auto stride(ExpandingArray<3>&& new_stride) -> decltype(*this);       // the same, moving
//     const ExpandingArray<3>& stride() const noexcept;                     // return stride_
//     ExpandingArray<3>& stride() noexcept;                                 // return stride_
//     ExpandingArray<3> stride_ = 1;
//
// so options chain (Conv3dOptions(1, 8, 3).stride(2).bias(false)) and read back by the same name
// (options.stride()). The macro ends with the member's declaration, so `= value;` after it is the
// member's default and a constructor may initialise `stride_` in its initialiser list.
// Unlike TORCH_ARG, which ends with `private:`, everything HG_ARG declares is public, the member
// included: halfgrad's layers and tests read members directly (options.stride_, o.eps_), as they did
// before the macro. A declaration after HG_ARG is therefore public unless an access specifier
// follows it. T must be one macro argument: a type with a comma at the top level
// (std::tuple<double, double>) needs an alias first (AdamWOptions::betas_t, as libtorch's adam.h).
// Setters that check or convert their argument (AutocastOptions::dtype, UpsampleOptions::size) are
// written by hand instead.
#pragma once
#include <utility>

#define HG_ARG(T, name)                                            \
 public:                                                           \
  auto name(const T& new_##name) -> decltype(*this) { /* NOLINT */ \
    this->name##_ = new_##name;                                    \
    return *this;                                                  \
  }                                                                \
  auto name(T&& new_##name) -> decltype(*this) { /* NOLINT */      \
    this->name##_ = std::move(new_##name);                         \
    return *this;                                                  \
  }                                                                \
  const T& name() const noexcept { /* NOLINT */                    \
    return this->name##_;                                          \
  }                                                                \
  T& name() noexcept { /* NOLINT */                                \
    return this->name##_;                                          \
  }                                                                \
  T name##_ /* NOLINT */
