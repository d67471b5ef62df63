// node.h - the tape. Every differentiable op that sees an input with requires_grad records one Node:
// its name, the input tensors it read, and a closure that maps the gradient of its output to the
// gradients of its inputs (the chain rule for that op). `Tensor::backward()` walks the nodes in
// reverse topological order and calls each closure once.
//
// Convention for every backward in halfgrad: a gradient is ADDED (+=) into a leaf's `.grad`, and the
// engine sums the contributions of a tensor used several times. A closure returns an undefined
// Tensor for an input that needs no gradient (integers, constants, inputs without requires_grad).
//
// Reference cycles: a closure must capture outputs through `Tensor::detach()` (the output's impl
// owns the node, so capturing the output itself would leak the graph).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::autograd {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  std::string name;            // op name, used in error messages ("conv3d")
  std::string nvtx_name;       // "backward conv3d": the NVTX range around this node's backward
  std::vector<Tensor> inputs;  // the op's tensor inputs, in the order the closure returns grads
  BackwardFn backward;         // empty once the graph has been freed
  bool freed = false;
  Shape output_shape;          // to check the incoming gradient
  Dtype output_dtype = kFloat32;
};

/// Whether ops record the tape on this thread (true by default).
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

/// RAII: no tape is recorded inside its scope (evaluation, optimizer updates). As torch::NoGradGuard.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// True when grad mode is on and any input requires grad: the op must then call record().
bool needs_grad(const std::vector<Tensor>& inputs);

/// Attach a node to `output` (making it a non-leaf that requires grad) if needs_grad(inputs).
/// Returns `output` for chaining. The closure runs at most once unless backward(retain_graph=true).
Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn fn);

/// Backward hooks run on every (node, grad_output) pair before the node's closure (process-wide, on
/// whichever thread runs backward). Returns an id for remove_backward_hook. Anomaly mode does not use
/// them: it is per thread and must also see the gradients a closure returns, so the engine calls
/// autograd/anomaly.h's checks itself.
using BackwardHook = std::function<void(const Node& node, const Tensor& grad_output)>;
int add_backward_hook(BackwardHook hook);
void remove_backward_hook(int id);

/// Forward hooks run at the start of record(), before it decides whether to attach a node, so they
/// see every op on this thread, including ops under NoGradGuard and ops on inputs without
/// requires_grad (every differentiable halfgrad op ends by calling record(); argmax, which has no
/// gradient, does not, and is not seen). `op` is the name given to record()
/// ("conv3d"), `output` the op's result, `inputs` its tensor inputs (some may be undefined). A hook
/// may throw (anomaly mode does), and the op then throws. Hooks are per thread, like grad mode and
/// autocast; ops run inside a hook are not seen by hooks (no recursion). With no hook registered
/// record() pays one branch. Returns an id for remove_forward_hook (removing an unknown id does
/// nothing). Anomaly mode (autograd/anomaly.h) and the precision report (amp/precision_report.h)
/// attach here.
using ForwardHook = std::function<void(const char* op, const Tensor& output, const std::vector<Tensor>& inputs)>;
int add_forward_hook(ForwardHook hook);
void remove_forward_hook(int id);

}  // namespace halfgrad::autograd

namespace halfgrad {
using autograd::NoGradGuard;
}
