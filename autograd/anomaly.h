// anomaly.h - anomaly mode: stop at the first op whose forward output or backward gradient holds a
// NaN or an infinity, and say which op, which input, and what the values looked like. As
// torch.autograd.detect_anomaly, with the value ranges PyTorch does not print.
//
//   {
//     autograd::DetectAnomalyGuard anomaly;     // this thread only, until the end of the scope
//     Tensor loss = ops::segmentation_loss(model->forward(x), y);
//     loss.backward();
//   }
//   // halfgrad::Error: "anomaly mode: backward of conv3d produced inf in input 1 (weight): float16
//   //   [8, 1, 3, 3, 3], finite range [-3.2e+04, 6.1e+04], 0 NaN, 5 +inf, 0 -inf; ..."
//
// Forward: after every op on this thread (a forward hook, autograd/node.h), the op's floating output
// is scanned; if it holds a NaN or an inf the op throws, naming itself and each input's dtype, shape
// and value range (min / max over finite values, NaN and inf counts), and saying whether the inputs
// were already non-finite (the problem is upstream) or finite (this op made it: typically an FP16
// overflow above 65504, or log/div of zero). Every differentiable halfgrad op ends in
// autograd::record(), which runs the hooks before deciding whether to record, so ops under
// NoGradGuard (evaluation) are checked too; argmax, which has no gradient, is not.
//
// Backward: for every node the engine (autograd/engine.cpp, when the mode was on at the start of
// backward) checks the incoming gradient (the gradient of the node's output, summed over its uses)
// before the node's closure runs, and each gradient the closure returns after it. The first non-finite one throws, naming the op, the input it belongs to ("input
// 1 (weight)"), its dtype, shape and range, and the finite incoming gradient it came from.
// Not checked: the sum of a leaf's .grad with an earlier backward's gradient (the leaf slot itself).
//
// Mixed precision: under GradScaler an inf or NaN in the scaled gradients is EXPECTED now and then:
// that is how the scaler learns the scale is too high (it skips the step and halves the scale).
// Anomaly mode turns each such event into an error, so it is a debugging tool for a run that diverges
// (loss NaN, the scale collapsing step after step), not something to leave on while training.
//
// Cost: off, one branch per op and one per backward. On, one vectorised pass over every output and
// gradient (a max over the bits without the sign; about 5% of a CPU U-Net training step, measured on
// 2 threads with the cpu recipe's model); the value ranges are computed only to build a message.
// In halfgrad-unet3d: `train --detect-anomaly` wraps every training step in a guard.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/node.h"

namespace halfgrad::autograd {

/// Whether anomaly mode is on for this thread (false by default).
bool anomaly_mode_enabled();

/// RAII: turn anomaly mode on (or off, with enabled=false) for this thread within the scope, and
/// restore the previous state on exit, so guards nest. As torch.autograd.detect_anomaly().
/// Once on, the forward of any op whose output holds NaN/Inf and any backward step that produces a
/// NaN/Inf gradient throws halfgrad::Error (see the file comment for the messages).
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true);
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

/// The values of a tensor, summarised for a message. min / max are over the finite elements (NaN
/// when there is none); counts are element counts. Integer tensors have no NaN/Inf.
struct ValueSummary {
  int64_t numel = 0;
  int64_t nan = 0;
  int64_t pos_inf = 0;
  int64_t neg_inf = 0;
  double min = 0;
  double max = 0;
  bool finite() const { return nan == 0 && pos_inf == 0 && neg_inf == 0; }
};

/// One pass over `t` (any dtype; FP16 decoded exactly). Throws halfgrad::Error if `t` is undefined.
ValueSummary summarize_values(const Tensor& t);

/// "float16 [8, 1, 3, 3, 3], finite range [-0.51, 0.49], 0 NaN, 2 +inf, 0 -inf" ("undefined" for an
/// undefined tensor; the range reads "no finite value" when every element is NaN/Inf).
std::string describe_values(const Tensor& t);

/// The role of input `i` of the op recorded as `op`, for messages: "weight" for input 1 of conv3d,
/// "bias" for input 2, "a"/"b" for binary ops; "" when the op has no named inputs.
const char* input_role(const std::string& op, size_t i);

/// Called by the engine (autograd/engine.cpp) when anomaly mode is on: throw halfgrad::Error if the
/// gradient flowing into `node` (`grad_output`, shape = the node's output shape) holds NaN/Inf.
void check_backward_anomaly_incoming(const Node& node, const Tensor& grad_output);
/// Called by the engine after `node`'s closure returned `grads` (one per input, undefined where no
/// gradient): throw halfgrad::Error naming the first input whose gradient holds NaN/Inf.
void check_backward_anomaly_outputs(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grads);
/// The forward check the guard installs as a forward hook: throw halfgrad::Error if `output` (when
/// floating) holds NaN/Inf. Exposed so other instruments can run the same check on a tensor.
void check_forward_anomaly(const char* op, const Tensor& output, const std::vector<Tensor>& inputs);

}  // namespace halfgrad::autograd
