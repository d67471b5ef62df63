// node.h - the tape. Every differentiable op that sees an input with requires_grad records one Node:
// its name, an edge to each input (InputEdge: the node that made it, or the leaf whose .grad it feeds),
// and a closure that maps the gradient of its output to the gradients of its inputs (the chain rule
// for that op). `Tensor::backward()` walks the nodes in
// reverse topological order and calls each closure once.
//
// Convention for every backward in halfgrad: a gradient is ADDED (+=) into a leaf's `.grad`, and the
// engine sums the contributions of a tensor used several times. A closure returns an undefined
// Tensor for an input that needs no gradient (integers, constants, inputs without requires_grad).
//
// Reference cycles: a closure must capture outputs through `Tensor::detach()` (the output's impl
// owns the node, so capturing the output itself would leak the graph).
//
// Saved tensors and their versions (PyTorch's SavedVariable version check). A closure that reads a
// tensor's values (mul reads both operands, relu its output, conv3d its input and weight) would give
// a silently wrong gradient if that tensor were modified in place between forward and backward. So
// each record() call lists what its closure reads - Save::input(i, name) for record()'s i-th input,
// Save::output() for the op's result, Save::tensor(t, name) for another tensor it captured (labels,
// statistics) - and record() notes each one's storage and version (core/tensor.h: the count of
// in-place writes, shared by views and detach()). Before running a node's closure the engine checks
// them and throws halfgrad::Error, as PyTorch does:
//   "conv3d backward: a tensor saved for gradient computation (input 1 'weight', [16, 1, 3, 3, 3]
//    float32) has been modified by an in-place operation: it is at version 3, expected version 2. ..."
// An input whose TensorImpl was given another storage since (Module::to) is reported as replaced
// (the node sees the TensorImpl through a weak_ptr: a parameter, held by its module, always; an
// intermediate only while someone holds it, and nobody can swap its storage otherwise).
// The list says what the closure reads, not what PyTorch's op happens to save: add, sub, affine,
// reshape, cat, the casts, sum/mean and max_pool3d (which keeps only its argmax) read no tensor's
// values, so modifying their inputs is fine and does not throw. Inputs a closure captures only when
// another input needs a gradient (conv3d's input, for dweight) are listed under the same condition.
// A new forward saves the versions anew, so an optimizer step between iterations never trips it;
// a step between a forward and its backward (or between two backwards of a retained graph) does.
// Cost: record() copies a shared_ptr, a shape and an integer per saved tensor; backward compares
// one integer (and, for inputs, one weak_ptr lock and a pointer) per saved tensor. No per-element
// work, and nothing at all without grad mode or inputs that require grad (no node is recorded).
#pragma once
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::autograd {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

/// What a closure reads besides its incoming gradient, for record()'s list (see the file comment).
struct Save {
  enum class Kind : uint8_t { Input, Output, Tensor };
  Kind kind = Kind::Input;
  int index = 0;          // Kind::Input: the position in record()'s inputs
  const char* name = "";  // the argument's name in the error message ("weight"); a string literal
  bool when = true;       // false: not captured this time (e.g. conv3d's input when dweight is not needed)
  halfgrad::Tensor captured;  // Kind::Tensor: the tensor

  /// record()'s inputs[index], named after the op's argument. Skipped when `when` is false or the
  /// input is undefined (an absent bias).
  static Save input(int index, const char* name, bool when = true) { return {Kind::Input, index, name, when, {}}; }
  /// The op's output (which the closure holds through detach()); skipped when `when` is false.
  static Save output(bool when = true) { return {Kind::Output, 0, "result", when, {}}; }
  /// Another tensor the closure captured (integer labels, a statistic); skipped when undefined.
  static Save tensor(const halfgrad::Tensor& t, const char* name) { return {Kind::Tensor, 0, name, true, t}; }
};

/// One saved tensor as record() saw it; the engine compares it with the storage now.
struct SavedTensor {
  Save::Kind kind = Save::Kind::Input;
  int index = 0;
  const char* name = "";
  std::shared_ptr<Storage> storage;  // the buffer at save time (the closure holds it too)
  uint64_t version = 0;              // storage->version() at save time
  Shape shape;                       // for the message
  Dtype dtype = kFloat32;
};

/// Where the gradient for one of a node's inputs goes (PyTorch's Edge): the node that produced a
/// non-leaf input, or the TensorImpl of a leaf that requires grad (whose .grad accumulates it).
/// It holds no activation buffer: a node keeps alive only what its closure saved (Save), so an
/// intermediate that no backward reads (BatchNorm's output, consumed by relu, which saves its own
/// output) is freed as soon as the forward drops it, as in PyTorch. Holding the inputs themselves
/// kept every intermediate of the forward alive until the graph died.
struct InputEdge {
  bool defined = false;                // the op got a tensor here (an absent bias is undefined)
  std::shared_ptr<Node> grad_fn;       // non-leaf input: the node that produced it
  std::shared_ptr<TensorImpl> leaf;    // leaf input with requires_grad: its gradient accumulates here
  std::weak_ptr<TensorImpl> impl;      // the input's TensorImpl, to notice a storage swap (Module::to)
  Shape shape;                         // at record time (the gradient must have it)
  Dtype dtype = kFloat32;
  bool requires_grad() const { return grad_fn != nullptr || (leaf && leaf->requires_grad); }
};

struct Node {
  std::string name;            // op name, used in error messages ("conv3d")
  std::string nvtx_name;       // "backward conv3d": the NVTX range around this node's backward
  std::vector<InputEdge> inputs;  // one per tensor input, in the order the closure returns grads
  // The forward inputs themselves, kept only when anomaly mode (autograd/anomaly.h) was on at
  // record() time, so that its messages can describe their values; empty otherwise. This costs the
  // memory the edges above save, which is why only the debugging mode pays it.
  std::vector<Tensor> anomaly_inputs;
  BackwardFn backward;         // empty once the graph has been freed
  bool freed = false;
  Shape output_shape;          // to check the incoming gradient
  Dtype output_dtype = kFloat32;
  std::vector<SavedTensor> saved;  // what the closure reads, checked before it runs; emptied with it
};

/// Throws halfgrad::Error if a tensor `node` saved was modified in place (or, for an input, given
/// another storage) since record(); the message names the op, the tensor and both versions.
void check_saved_versions(const Node& node);

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
/// `saved` lists every tensor whose values the closure reads ({} when it reads none: add, reshape),
/// with their versions checked at backward (see the file comment). Throws halfgrad::Error for a
/// Save::input index outside `inputs`.
Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, std::initializer_list<Save> saved,
              BackwardFn fn);

/// Backward hooks run on every (node, grad_output) pair before the node's closure (process-wide, on
/// whichever thread runs backward). Returns an id for remove_backward_hook. Anomaly mode does not use
/// them: it is per thread and must also see the gradients a closure returns, so the engine calls
/// autograd/anomaly.h's checks itself. Adding and removing are locked, so several threads may run
/// backward while another adds a hook; a backward pass uses the hooks registered when it started.
using BackwardHook = std::function<void(const Node& node, const Tensor& grad_output)>;
int add_backward_hook(BackwardHook hook);
void remove_backward_hook(int id);

/// Post-accumulate-grad hooks, as PyTorch's Tensor.register_post_accumulate_grad_hook: hook(leaf)
/// runs on the thread running backward, once per backward pass that gave `leaf` a gradient, right
/// after the pass's LAST contribution to it has been added into leaf.grad() (the engine adds each
/// contribution as it arrives, so it counts the graph's edges into the leaf first). It sees the
/// accumulated .grad (earlier backwards' sums included) and may read it or copy it; replacing .grad
/// from a hook is allowed. A hook that throws makes backward throw. A leaf that is the root of
/// backward (x.backward() on a leaf) runs its hooks too. DistributedDataParallel launches a bucket's
/// all-reduce from here. `leaf` must be a leaf that requires grad (halfgrad::Error otherwise). The
/// hooks live in a table keyed by the leaf's TensorImpl (locked; a hook of a destroyed tensor is
/// dropped, never run for a new tensor at the same address); remove them with the returned id.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;
int add_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);
/// Removes hook `id` of `leaf` (an unknown id does nothing).
void remove_post_accumulate_grad_hook(const Tensor& leaf, int id);

/// PyTorch's Variable._execution_engine.queue_callback: `fn` runs on this thread at the end of the
/// backward pass now running on it, after every node and every post-accumulate-grad hook, before
/// backward() returns (DistributedDataParallel finalises its gradients here). Callbacks run in the
/// order queued; a callback may queue another, which also runs. Only callable from inside a backward
/// pass (a hook): throws halfgrad::Error otherwise. If the pass throws, its queued callbacks are dropped.
void queue_backward_callback(std::function<void()> fn);

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
