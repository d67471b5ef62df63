// module.h - the base class of every layer and model, as torch::nn::Module.
//
// A Module owns three ordered lists, each in registration order:
//   parameters  leaf Tensors the optimizer updates (requires_grad true unless registered otherwise),
//   buffers     Tensors that are state but not trained (BatchNorm's running_mean / running_var),
//   children    sub-Modules, held by std::shared_ptr.
// Recursive queries walk the tree depth-first: a module's own entries first, then each child's in
// registration order, with names joined by dots ("enc.0.1.weight"), so names and order match
// PyTorch's `named_parameters()` / `state_dict()` for the same architecture.
//
// Tensors are handles: the Tensor a layer keeps in a member (`weight`) and the one in the
// parameter list are the same TensorImpl. Everything that changes a parameter (an optimizer step,
// `to(dtype)`, loading a checkpoint) changes that TensorImpl in place, so every holder sees it.
//
// Differences from libtorch: there is no ModuleHolder; layers are used as std::shared_ptr<Conv3d>
// (make them with std::make_shared). `forward` takes and returns one Tensor; a module without such a
// forward (ModuleList) throws when it is called.
//
// How a forward call is routed: `(*module)(x)` (operator()) is the call, as PyTorch's __call__;
// `forward(x)` is the computation a layer overrides. operator() is where per-module behaviour that
// is not the layer's own math lives - today the FP32 allow-list: a module marked with
// set_autocast_fp32(true) runs, with everything under it, in FP32 under autocast. Containers and
// models therefore call their children through operator() (Sequential, UNet3d do); calling a child's
// forward() directly bypasses its mark.
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace halfgrad::nn {

/// (name, tensor) pairs in a deterministic order: the form of named_parameters() and named_buffers()
/// (defined in core/safetensors.h, whose files hold them).
using NamedTensors = halfgrad::NamedTensors;

class Module;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  /// `name` is the class name used when printing ("Conv3d").
  explicit Module(std::string name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The class name given at construction ("Conv3d", "UNet3d").
  const std::string& name() const { return name_; }

  /// The module's computation. The base version throws halfgrad::Error ("<name> has no forward").
  virtual Tensor forward(const Tensor& x);
  /// Call the module: forward(x), except that a module marked autocast_fp32 inside an enabled autocast
  /// region runs forward in an FP32 region (AutocastGuard(false)) on x cast to FP32 if it is FP16 or
  /// BF16 (a differentiable cast, so x's gradient comes back in x's dtype). Its output is then FP32. Outside
  /// autocast a mark changes nothing. Same errors as forward.
  Tensor operator()(const Tensor& x);

  /// FP32 allow-list: mark this module (and, since its whole forward runs with autocast off,
  /// everything it calls) to run in FP32 under autocast. PyTorch has no module flag; this is what its
  /// docs recommend writing by hand (`with autocast(enabled=False): y = block(x.float())`), and what
  /// apex O1's FP32 function lists do per function. For a single op kind use amp::set_op_fp32.
  /// Returns *this for chaining.
  Module& set_autocast_fp32(bool fp32 = true) {
    autocast_fp32_ = fp32;
    return *this;
  }
  /// Whether set_autocast_fp32(true) marked this module (not its ancestors).
  bool autocast_fp32() const { return autocast_fp32_; }

  // ---- registration -------------------------------------------------------------------------------
  /// Adds a parameter and returns its handle. `tensor` must be defined, floating and a leaf; it is
  /// marked requires_grad = `requires_grad`. Throws halfgrad::Error if `name` is empty, contains a
  /// '.', or is already a parameter, buffer or child of this module.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  /// Adds a buffer (state that is saved but not trained; any dtype) and returns its handle.
  /// Same name rules as register_parameter; `tensor` must be defined.
  Tensor register_buffer(const std::string& name, Tensor tensor);
  /// Adds a child module and returns it, typed: `conv = register_module("conv", make_shared<Conv3d>(..))`.
  /// Same name rules; `module` must be non-null and not this module.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of<Module, M>::value, "register_module: M must derive from nn::Module");
    add_child(name, module);
    return module;
  }

  // ---- queries --------------------------------------------------------------------------------------
  /// Parameters of this module and (recurse) of every descendant, in named_parameters() order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// ("enc.0.0.weight", tensor) pairs: own parameters first, then each child's, depth first.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// ("enc.0.1.running_mean", tensor) pairs, in the same walk order as named_parameters().
  NamedTensors named_buffers(bool recurse = true) const;
  /// Direct children, in registration order.
  std::vector<std::shared_ptr<Module>> children() const;
  NamedModules named_children() const;
  /// Every module of the tree, pre-order, this one first (name "") when include_self. include_self
  /// needs this module to be held by a std::shared_ptr (throws halfgrad::Error otherwise).
  NamedModules named_modules(const std::string& prefix = "", bool include_self = true) const;
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true) const;
  /// Total number of parameter elements (recursive): 5,646,419 for the default UNet3d.
  int64_t num_parameters() const;

  // ---- state ----------------------------------------------------------------------------------------
  /// Sets training mode on this module and every descendant (BatchNorm then uses batch statistics
  /// and updates its running ones). Modules start in training mode, as in PyTorch.
  virtual void train(bool on = true);
  /// train(false): BatchNorm uses its running statistics.
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Clears every parameter's gradient (recursive). set_to_none (PyTorch's default since 2.0) drops
  /// the .grad tensor; otherwise an existing .grad is filled with zeros.
  void zero_grad(bool set_to_none = true);

  /// Converts every floating parameter and buffer (recursive) to `dtype`, in place: each keeps its
  /// TensorImpl (so optimizers and layers holding it see the change), stays a leaf and keeps
  /// requires_grad; an existing .grad is converted too. Integer buffers (num_batches_tracked) are left
  /// alone. As torch.nn.Module.to(dtype) / .half() / .float(). Throws for a non-floating `dtype`.
  /// Each converted tensor's version (Tensor::version) goes up by one, and a backward through a graph
  /// that saved it before the conversion throws (autograd/node.h).
  virtual void to(Dtype dtype);
  /// Moves every parameter and floating buffer (recursive) to `device`, in place, like to(Dtype): each
  /// keeps its TensorImpl, leaf status and requires_grad; an existing .grad moves too. Integer buffers
  /// (BatchNorm's num_batches_tracked, a host-side counter) stay on the CPU. As torch.nn.Module.to(device).
  /// Make the optimizer after moving the model (its state is created on the parameters' device).
  /// Versions as for to(Dtype).
  virtual void to(Device device);

  // ---- printing -------------------------------------------------------------------------------------
  /// The arguments shown between the parentheses when printing ("1, 16, kernel_size=3, ...").
  /// As PyTorch's extra_repr(); empty by default.
  virtual std::string extra_repr() const { return ""; }
  /// The tree, PyTorch style: "UNet3d(\n  (enc): ModuleList(\n    (0): Sequential(..."
  void pretty_print(std::ostream& os, int indent = 0) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const char* what, const std::string& name) const;
  void collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out) const;

  std::string name_;
  bool training_ = true;
  bool autocast_fp32_ = false;
  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace halfgrad::nn
