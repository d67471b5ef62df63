// fp16_inspect.h - look at FP16 numbers field by field, and at where a layer's weights sit on FP16's
// exponent scale in two checkpoints (an FP32 run against an AMP run, or a run before and after).
//
// binary16 (core/half.h): s | eeeee | mmmmmmmmmm
//   normal     e = 1..30   value = (-1)^s * 2^(e-15) * (1 + m/1024)     2^-14 .. 65504
//   subnormal  e = 0, m>0  value = (-1)^s * 2^-14    * (m/1024)         2^-24 .. 2^-14 - 2^-24
//   zero       e = 0, m=0  (+0 or -0)
//   inf        e = 31, m=0
//   NaN        e = 31, m>0
//
// half_dump prints, per element: the index, the value it came from (for an FP32/FP64 tensor: the
// value before rounding to FP16), the 16 bits in hex, the three fields in binary, the decoded value as
// a formula and a number, and the class:
//
//   [   3]  0.0001          -> 0x068e  0 | 00001 | 1010001110  = +2^-14 * 1.639 = 0.0001000   normal
//
// A log2 histogram counts elements by floor(log2 |x|) (the binary exponent), so its bins line up
// with FP16's exponents: bins -24..-15 are FP16's subnormal range, bins <= -26 round to zero, bin
// -25 is the tie (2^-25 itself rounds to 0, the rest of the bin to 2^-24), bins >= 16 overflow.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/checkpoint.h"

namespace halfgrad::amp {

/// The class of a binary16 bit pattern.
enum class HalfClass : uint8_t { Zero, Subnormal, Normal, Inf, NaN };
/// "zero", "subnormal", "normal", "inf", "nan".
const char* half_class_name(HalfClass c);

/// The fields of one binary16 value.
struct HalfFields {
  uint16_t bits = 0;
  int sign = 0;      // the sign bit, 0 or 1
  int exponent = 0;  // the 5-bit biased exponent field, 0..31
  int mantissa = 0;  // the 10-bit fraction field, 0..1023
  HalfClass cls = HalfClass::Zero;
  float value = 0;   // the decoded value (exact: every half is a float)
  /// The power of two the value is scaled by: e - 15 for normals, -14 for subnormals and zeros;
  /// meaningless (16) for inf / NaN.
  int unbiased_exponent() const;
};

/// Split a bit pattern into its fields and class.
HalfFields decode_half(uint16_t bits);

/// One line per element of t.flat[begin, begin + count) (clipped to numel), in the form of the file
/// comment. FP16 tensors show their bits; FP32/FP64/BF16 tensors show each value and the FP16 pattern
/// it rounds to (round to nearest even), so a dump of FP32 master weights shows what an FP16 copy holds
/// (a BF16 tensor's bits are never read as FP16: its values are decoded first).
/// Throws halfgrad::Error for an undefined or integer tensor, or begin outside [0, numel].
std::string half_dump(const Tensor& t, int64_t begin = 0, int64_t count = 16);

/// Counts of floor(log2 |x|) for x in a tensor. Bin i holds exponent lo_exp + i.
struct Log2Histogram {
  int lo_exp = -30;              // first bin: [2^lo_exp, 2^(lo_exp+1))
  int hi_exp = 16;               // last bin: [2^hi_exp, 2^(hi_exp+1))
  std::vector<int64_t> bins;     // hi_exp - lo_exp + 1 counts
  int64_t zeros = 0;             // exact zeros
  int64_t below = 0;             // nonzero, |x| < 2^lo_exp
  int64_t above = 0;             // finite, |x| >= 2^(hi_exp + 1)
  int64_t nonfinite = 0;         // NaN / inf
  int64_t total = 0;             // numel
};

/// Histogram of floor(log2 |x|) over `t` (any floating dtype), with bins lo_exp..hi_exp. Throws
/// halfgrad::Error for an undefined or integer tensor or lo_exp > hi_exp.
Log2Histogram log2_abs_histogram(const Tensor& t, int lo_exp = -30, int hi_exp = 16);

/// What FP16 does to values in the bin of exponent e: "overflow", "normal", "subnormal", "tie" (e =
/// -25) or "zero" (rounds to 0).
const char* fp16_bin_region(int exponent);

/// The two histograms side by side as text: one line per exponent bin where either has a count
/// (plus zero / below / above / non-finite lines), with both counts, both fractions, two bars of '#'
/// and '=' scaled to the larger fraction, and the FP16 region of the bin. `a` and `b` must have the
/// same bins (throws halfgrad::Error otherwise).
std::string compare_histograms_text(const std::string& title, const std::string& label_a, const Log2Histogram& a,
                                    const std::string& label_b, const Log2Histogram& b);

/// The same comparison as CSV: "bin,log2_lo,value_lo,fp16_region,count_a,frac_a,count_b,frac_b" with
/// one row per exponent bin and rows "zero", "below", "above", "nonfinite" (log2_lo and value_lo
/// empty). Written to `path`; throws halfgrad::Error if it cannot be written or the bins differ.
void write_histograms_csv(const std::string& path, const Log2Histogram& a, const Log2Histogram& b);

/// One parameter present in both checkpoints.
struct TensorComparison {
  std::string name;
  Shape shape;
  Dtype dtype_a = kFloat32, dtype_b = kFloat32;
  double max_abs_a = 0, max_abs_b = 0;  // max |w| over finite elements
  double max_abs_diff = 0;              // max |a - b|
  double rel_l2_diff = 0;               // ||a - b|| / ||a|| (0 when both are 0)
  double fp16_subnormal_frac_a = 0;     // fraction of nonzero elements that round to an FP16 subnormal
  double fp16_subnormal_frac_b = 0;
  double fp16_zero_frac_a = 0;          // fraction of nonzero elements that round to 0 in FP16
  double fp16_zero_frac_b = 0;
};

/// Compare the parameters that `a` and `b` share by name (in `a`'s order). Parameters with different
/// shapes are reported in `skipped` (name and both shapes) rather than compared; names in only one
/// file too.
std::vector<TensorComparison> compare_checkpoints(const nn::CheckpointState& a, const nn::CheckpointState& b,
                                                  std::vector<std::string>* skipped = nullptr);

/// The comparisons as a fixed-width text table, one line per parameter.
std::string comparison_table(const std::vector<TensorComparison>& rows);

/// The parameter named `name` in `state` (parameters first, then buffers, then extra tensors).
/// Throws halfgrad::Error naming the file's tensors when there is none.
Tensor find_checkpoint_tensor(const nn::CheckpointState& state, const std::string& name);

}  // namespace halfgrad::amp
