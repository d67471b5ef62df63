// engine.cpp - reverse-mode replay of the tape, and the autograd members of Tensor.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "core/error.h"

namespace halfgrad::autograd {

static thread_local bool t_grad_mode = true;
bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode(bool enabled) { t_grad_mode = enabled; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.impl()->requires_grad) return true;
  return false;
}

Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!needs_grad(inputs)) return output;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->inputs = inputs;
  node->backward = std::move(fn);
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
  return output;
}

static std::map<int, BackwardHook>& hooks() {
  static std::map<int, BackwardHook> h;
  return h;
}
int add_backward_hook(BackwardHook hook) {
  static int next = 0;
  hooks()[next] = std::move(hook);
  return next++;
}
void remove_backward_hook(int id) { hooks().erase(id); }

// Add g into the slot, converting to the slot's dtype (a leaf's grad has the leaf's dtype).
static void accumulate(std::shared_ptr<TensorImpl>& slot, const Tensor& g, Dtype dtype, const Shape& shape,
                       const std::string& where) {
  HG_CHECK(g.shape() == shape, where << ": gradient of shape " << shape_str(g.shape())
                                     << " for a tensor of shape " << shape_str(shape));
  if (!slot) {
    slot = g.cast_copy(dtype).impl_ptr();  // own copy: later += must not write into an op's buffer
    return;
  }
  Tensor acc(slot);
  const int64_t n = acc.numel();
  if (dtype == kFloat64) {
    Tensor gd = g.dtype() == kFloat64 ? g : g.cast_copy(kFloat64);
    double* a = acc.data<double>();
    const double* b = gd.data<double>();
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  } else if (dtype == kFloat32) {
    Tensor gf = g.dtype() == kFloat32 ? g : g.cast_copy(kFloat32);
    float* a = acc.data<float>();
    const float* b = gf.data<float>();
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  } else {  // half: add in float, round once
    std::vector<float> a = acc.to_float_vector(), b = g.to_float_vector();
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
    float_to_half_array(a.data(), acc.data<uint16_t>(), n);
  }
}

static void run_backward(const Tensor& root, const Tensor& seed, bool retain_graph) {
  // Topological order of the nodes reachable from root (iterative DFS, post-order).
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  Node* root_node = root.grad_fn().get();
  stack.push_back({root_node, 0});
  seen.insert(root_node);
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const Tensor& in = node->inputs[next++];
      if (in.defined() && in.impl()->grad_fn) {
        Node* child = in.impl()->grad_fn.get();
        if (seen.insert(child).second) stack.push_back({child, 0});
      }
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  // Gradient w.r.t. each node's output, summed over its uses.
  std::unordered_map<Node*, std::shared_ptr<TensorImpl>> grads;
  grads[root_node] = seed.impl_ptr();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto found = grads.find(node);
    if (found == grads.end()) continue;  // no gradient flowed here (e.g. through an integer path)
    Tensor g(found->second);
    grads.erase(found);
    HG_CHECK(!node->freed, "backward: trying to backward through the graph a second time (op '" << node->name
                               << "'); its saved tensors were freed. Pass retain_graph=true to the first backward "
                                  "if you need to backward twice");
    for (auto& [id, hook] : hooks()) hook(*node, g);
    std::vector<Tensor> in_grads = node->backward(g);
    HG_CHECK(in_grads.size() == node->inputs.size(),
             "backward: op '" << node->name << "' returned " << in_grads.size() << " gradients for "
                              << node->inputs.size() << " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Tensor& in = node->inputs[i];
      const Tensor& gi = in_grads[i];
      if (!in.defined() || !gi.defined() || !in.impl()->requires_grad) continue;
      const std::string where = "backward of '" + node->name + "', input " + std::to_string(i);
      if (in.impl()->grad_fn) {
        accumulate(grads[in.impl()->grad_fn.get()], gi, in.dtype(), in.shape(), where);
      } else {
        accumulate(in.impl()->grad, gi, in.dtype(), in.shape(), where);
      }
    }
    if (!retain_graph) {
      node->backward = nullptr;  // frees the saved tensors the closure captured
      node->freed = true;
    }
  }
}

}  // namespace halfgrad::autograd

namespace halfgrad {

bool Tensor::requires_grad() const { return defined() && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool r) {
  check_defined("set_requires_grad");
  HG_CHECK(!impl_->grad_fn, "Tensor::set_requires_grad: only leaf tensors can be marked; this one was produced by '"
                                << impl_->grad_fn->name << "' (use detach() first)");
  HG_CHECK(!r || is_floating(dtype()), "Tensor::set_requires_grad: only floating-point tensors can require "
                                       "gradients, this one is " << dtype_name(dtype()));
  impl_->requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->grad ? Tensor(impl_->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  check_defined("set_grad");
  HG_CHECK(!g.defined() || g.shape() == shape(), "Tensor::set_grad: gradient shape " << shape_str(g.shape())
                                                     << " differs from the tensor's " << shape_str(shape()));
  impl_->grad = g.defined() ? g.impl_ptr() : nullptr;
}

bool Tensor::is_leaf() const { return defined() && !impl_->grad_fn; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  check_defined("grad_fn");
  return impl_->grad_fn;
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph) const {
  check_defined("backward");
  HG_CHECK(impl_->requires_grad, "backward: tensor of shape " << shape_str(shape())
                                    << " does not require grad and has no grad_fn (was it computed under "
                                       "NoGradGuard, or from tensors without requires_grad?)");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    HG_CHECK(numel() == 1, "backward: grad can be implicitly created only for a tensor with one element; this one has shape "
                               << shape_str(shape()) << ", pass grad_output");
    seed = Tensor::full(shape(), 1.0, dtype());
  }
  HG_CHECK(seed.shape() == shape(), "backward: grad_output of shape " << shape_str(seed.shape())
                                        << " for a tensor of shape " << shape_str(shape()));
  if (seed.dtype() != dtype()) seed = seed.cast_copy(dtype());
  if (!impl_->grad_fn) {  // a leaf: backward just accumulates the seed
    Tensor self = *this;
    std::shared_ptr<TensorImpl>& slot = self.impl()->grad;
    if (!slot) slot = seed.clone().impl_ptr();
    else {
      Tensor acc(slot);
      std::vector<double> a = acc.to_double_vector(), b = seed.to_double_vector();
      for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
      acc.copy_from(Tensor::from_vector(a, shape()));
    }
    return;
  }
  autograd::run_backward(*this, seed, retain_graph);
}

}  // namespace halfgrad
