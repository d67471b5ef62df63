// engine.cpp - reverse-mode replay of the tape, and the autograd members of Tensor.
#include "core/cuda/tensor_kernels.h"
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "core/nvtx.h"
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

// Forward hooks, per thread. The count is a plain thread_local int so that record() pays one branch
// when no hook is registered; the map is touched only when there is one.
static thread_local int t_forward_hook_count = 0;
static thread_local bool t_in_forward_hook = false;
static std::map<int, ForwardHook>& forward_hooks() {
  static thread_local std::map<int, ForwardHook> h;
  return h;
}
int add_forward_hook(ForwardHook hook) {
  static thread_local int next = 0;
  forward_hooks()[next] = std::move(hook);
  t_forward_hook_count = static_cast<int>(forward_hooks().size());
  return next++;
}
void remove_forward_hook(int id) {
  forward_hooks().erase(id);
  t_forward_hook_count = static_cast<int>(forward_hooks().size());
}
static void run_forward_hooks(const char* name, const Tensor& output, const std::vector<Tensor>& inputs) {
  if (t_in_forward_hook) return;  // an op run by a hook is not observed
  struct Reset {
    ~Reset() { t_in_forward_hook = false; }
  } reset;
  t_in_forward_hook = true;
  for (auto& [id, hook] : forward_hooks()) hook(name, output, inputs);
}

Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, std::initializer_list<Save> saved,
              BackwardFn fn) {
  if (t_forward_hook_count) run_forward_hooks(name, output, inputs);
  if (!needs_grad(inputs)) return output;
  auto node = std::make_shared<Node>();
  node->name = name;
  if (nvtx_enabled()) node->nvtx_name = std::string("backward ") + name;
  node->saved.reserve(saved.size());
  for (const Save& s : saved) {
    HG_CHECK(s.kind != Save::Kind::Input || (s.index >= 0 && static_cast<size_t>(s.index) < inputs.size()),
             name << ": record() saves input " << s.index << " '" << s.name << "' but the op has " << inputs.size()
                  << " inputs");
    if (!s.when) continue;
    const Tensor& t = s.kind == Save::Kind::Input ? inputs[s.index] : s.kind == Save::Kind::Output ? output : s.captured;
    if (!t.defined()) continue;
    node->saved.push_back({s.kind, s.index, s.name, t.impl()->storage, t.version(), t.shape(), t.dtype()});
  }
  node->inputs.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    InputEdge e;
    e.defined = in.defined();
    if (e.defined) {
      e.grad_fn = in.impl()->grad_fn;
      if (!e.grad_fn && in.impl()->requires_grad) e.leaf = in.impl_ptr();
      e.impl = in.impl_ptr();
      e.shape = in.shape();
      e.dtype = in.dtype();
    }
    node->inputs.push_back(std::move(e));
  }
  if (anomaly_mode_enabled()) node->anomaly_inputs = inputs;
  node->backward = std::move(fn);
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
  return output;
}

void check_saved_versions(const Node& node) {
  for (const SavedTensor& s : node.saved) {
    bool replaced = false;
    if (s.kind == Save::Kind::Input) {  // the input still exists (its user holds it) with another storage
      const std::shared_ptr<TensorImpl> live = node.inputs[s.index].impl.lock();
      replaced = live && live->storage.get() != s.storage.get();
    }
    if (!replaced && s.storage->version() == s.version) continue;
    std::ostringstream what;
    if (s.kind == Save::Kind::Input) what << "input " << s.index << " '" << s.name << "'";
    else if (s.kind == Save::Kind::Output) what << "the op's output";
    else what << "'" << s.name << "'";
    what << ", " << shape_str(s.shape) << " " << dtype_name(s.dtype);
    if (replaced)
      HG_FAIL(node.name << " backward: a tensor saved for gradient computation (" << what.str()
                        << ") has been given another storage since (Module::to swaps a parameter's storage): "
                           "backward would read the old values. Call Module::to before the forward");
    HG_FAIL(node.name << " backward: a tensor saved for gradient computation (" << what.str()
                      << ") has been modified by an in-place operation: it is at version " << s.storage->version()
                      << ", expected version " << s.version
                      << ". Hint: the in-place write (fill_, copy_from, an optimizer step, ...) happened between "
                         "the forward and this backward; move it after backward(), or write into a clone()");
  }
}

// Backward hooks: process-wide, so locked; each pass copies the list once (a hook added meanwhile
// is seen by the next pass).
static std::mutex g_hooks_mu;
static std::atomic<int> g_backward_hook_count{0};
static std::map<int, BackwardHook>& hooks() {
  static std::map<int, BackwardHook> h;
  return h;
}
int add_backward_hook(BackwardHook hook) {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  static int next = 0;
  hooks()[next] = std::move(hook);
  g_backward_hook_count = static_cast<int>(hooks().size());
  return next++;
}
void remove_backward_hook(int id) {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  hooks().erase(id);
  g_backward_hook_count = static_cast<int>(hooks().size());
}
static std::vector<BackwardHook> backward_hooks_snapshot() {
  std::vector<BackwardHook> out;
  if (g_backward_hook_count.load(std::memory_order_relaxed) == 0) return out;
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  for (auto& [id, hook] : hooks()) out.push_back(hook);
  return out;
}

// Post-accumulate-grad hooks, keyed by the leaf's TensorImpl. The weak_ptr tells a live entry from
// one whose tensor died (its address may since belong to another tensor): a dead entry is erased.
struct LeafHooks {
  std::weak_ptr<TensorImpl> leaf;
  std::vector<std::pair<int, PostAccumulateGradHook>> hooks;
};
static std::atomic<int> g_leaf_hook_count{0};  // entries in the table: 0 = nothing to look up
static std::unordered_map<const TensorImpl*, LeafHooks>& leaf_hooks() {
  static std::unordered_map<const TensorImpl*, LeafHooks> h;
  return h;
}
int add_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  HG_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
           "add_post_accumulate_grad_hook: the tensor must be a leaf that requires grad (a parameter)");
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  static int next = 0;
  LeafHooks& e = leaf_hooks()[leaf.impl()];
  if (e.leaf.lock() != leaf.impl_ptr()) e = LeafHooks{leaf.impl_ptr(), {}};  // new, or a dead tensor's
  e.hooks.emplace_back(next, std::move(hook));
  g_leaf_hook_count = static_cast<int>(leaf_hooks().size());
  return next++;
}
void remove_post_accumulate_grad_hook(const Tensor& leaf, int id) {
  if (!leaf.defined()) return;
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  auto it = leaf_hooks().find(leaf.impl());
  if (it == leaf_hooks().end()) return;
  auto& v = it->second.hooks;
  v.erase(std::remove_if(v.begin(), v.end(), [id](const auto& h) { return h.first == id; }), v.end());
  if (v.empty() || it->second.leaf.expired()) leaf_hooks().erase(it);
  g_leaf_hook_count = static_cast<int>(leaf_hooks().size());
}
// The live hooks of `leaf` (a copy: they run without the lock); empty when none.
static std::vector<PostAccumulateGradHook> leaf_hooks_of(const std::shared_ptr<TensorImpl>& leaf) {
  std::vector<PostAccumulateGradHook> out;
  auto it = leaf_hooks().find(leaf.get());
  if (it == leaf_hooks().end()) return out;
  if (it->second.leaf.lock() != leaf) {  // a dead tensor's entry
    leaf_hooks().erase(it);
    g_leaf_hook_count = static_cast<int>(leaf_hooks().size());
    return out;
  }
  for (auto& [id, hook] : it->second.hooks) out.push_back(hook);
  return out;
}

// The callbacks queued by the backward pass running on this thread (nullptr outside one).
static thread_local std::vector<std::function<void()>>* t_backward_callbacks = nullptr;
void queue_backward_callback(std::function<void()> fn) {
  HG_CHECK(t_backward_callbacks != nullptr,
           "queue_backward_callback: called outside a backward pass (only hooks run by backward may queue)");
  t_backward_callbacks->push_back(std::move(fn));
}
// Installs a fresh callback list for one pass (restoring an enclosing pass's on exit) and runs it.
struct BackwardCallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* saved = t_backward_callbacks;
  BackwardCallbackScope() { t_backward_callbacks = &callbacks; }
  ~BackwardCallbackScope() { t_backward_callbacks = saved; }
  void run() {
    for (size_t i = 0; i < callbacks.size(); ++i) {
      std::function<void()> fn = std::move(callbacks[i]);
      fn();  // may queue more (callbacks grows; i indexes, so no iterator is invalidated)
    }
    callbacks.clear();
  }
};

// out[i] = a[i] + b[i] in dtype `d` (Float16 / BFloat16: added in float, rounded once).
static void add_into(const Tensor& a, const Tensor& b, Tensor out) {
  const int64_t n = out.numel();
  const Dtype d = out.dtype();
  if (d == kFloat64) {
    Tensor bd = b.dtype() == d ? b : b.cast_copy(d);
    const double *pa = a.data<double>(), *pb = bd.data<double>();
    double* po = out.data<double>();
#pragma omp parallel for if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  } else if (d == kFloat32) {
    Tensor bf = b.dtype() == d ? b : b.cast_copy(d);
    const float *pa = a.data<float>(), *pb = bf.data<float>();
    float* po = out.data<float>();
#pragma omp parallel for if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  } else {
    Tensor af = a.cast_copy(kFloat32), bf = b.cast_copy(kFloat32);
    float* pa = af.data<float>();
    const float* pb = bf.data<float>();
    for (int64_t i = 0; i < n; ++i) pa[i] += pb[i];
    out.copy_from(af);
  }
}

// Sum a gradient contribution into a slot. Leaf slots (.grad) own their buffer and are added to in
// place (users and GradScaler also modify .grad in place). Intermediate slots may alias a tensor an
// op's backward returned (e.g. add passes dy through), so they are never written: the first
// contribution is kept as is (no copy) and later ones are summed into a new buffer.
static void accumulate(std::shared_ptr<TensorImpl>& slot, const Tensor& g, Dtype dtype, const Shape& shape,
                       const std::string& where, bool leaf) {
  HG_CHECK(g.shape() == shape, where << ": gradient of shape " << shape_str(g.shape())
                                     << " for a tensor of shape " << shape_str(shape));
  if (!slot) {
    slot = (leaf || g.dtype() != dtype) ? g.cast_copy(dtype).impl_ptr() : g.impl_ptr();
    return;
  }
  Tensor acc(slot);
  HG_CHECK(acc.dtype() == dtype, where << ": accumulated gradient is " << dtype_name(acc.dtype()) << " but the tensor is "
                                       << dtype_name(dtype) << " (was .grad replaced? call zero_grad before backward)");
  HG_CHECK(acc.device() == g.device(), where << ": gradient on " << device_name(g.device()) << " for a tensor whose gradient is on "
                                             << device_name(acc.device()));
  if (acc.is_cuda()) {
    Tensor gg = (g.dtype() == dtype ? g : g.cast_copy(dtype)).format_copy(acc.memory_format());
    if (!leaf) {
      acc = acc.clone();
      slot = acc.impl_ptr();
    }
    cuda::accumulate(acc.raw_data(), gg.raw_data(), dtype, acc.numel());
    if (leaf) acc.bump_version();  // .grad += g in place
    return;
  }
  if (leaf) {
    add_into(acc, g, acc);
    if (!is_reduced_float(acc.dtype())) acc.bump_version();  // (the 16-bit path writes through copy_from, which counts)
  } else {
    Tensor out = Tensor::empty(shape, dtype);
    add_into(acc, g, out);
    slot = out.impl_ptr();
  }
}

// A leaf with post-accumulate-grad hooks, during one pass: how many edges into it are still to be
// processed, whether one of them brought a gradient, and the hooks to run once none is left.
struct PendingLeaf {
  int remaining = 0;
  bool got_grad = false;
  std::vector<PostAccumulateGradHook> hooks;
};

static void run_backward(const Tensor& root, const Tensor& seed, bool retain_graph) {
  BackwardCallbackScope callbacks;
  const std::vector<BackwardHook> node_hooks = backward_hooks_snapshot();
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
      const InputEdge& in = node->inputs[next++];
      if (in.grad_fn) {
        Node* child = in.grad_fn.get();
        if (seen.insert(child).second) stack.push_back({child, 0});
      }
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  // Leaves with post-accumulate-grad hooks: count the edges into each (every edge of every reachable
  // node is visited once below, whether or not a gradient flows through it).
  std::unordered_map<TensorImpl*, PendingLeaf> pending;
  if (g_leaf_hook_count.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> lock(g_hooks_mu);
    std::unordered_set<TensorImpl*> without_hooks;
    for (Node* node : order) {
      for (const InputEdge& in : node->inputs) {
        if (!in.defined || in.grad_fn || !in.leaf || without_hooks.count(in.leaf.get())) continue;
        auto it = pending.find(in.leaf.get());
        if (it == pending.end()) {
          std::vector<PostAccumulateGradHook> h = leaf_hooks_of(in.leaf);
          if (h.empty()) {
            without_hooks.insert(in.leaf.get());
            continue;
          }
          it = pending.emplace(in.leaf.get(), PendingLeaf{0, false, std::move(h)}).first;
        }
        ++it->second.remaining;
      }
    }
  }
  // After a node's edges are processed (or skipped): run the hooks of each leaf whose last edge it was.
  auto settle_leaves = [&](Node* node, const std::vector<Tensor>* in_grads) {
    if (pending.empty()) return;
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const InputEdge& in = node->inputs[i];
      if (!in.defined || in.grad_fn || !in.leaf) continue;
      auto it = pending.find(in.leaf.get());
      if (it == pending.end()) continue;
      PendingLeaf& p = it->second;
      if (in_grads && i < in_grads->size() && (*in_grads)[i].defined() && in.requires_grad()) p.got_grad = true;
      if (--p.remaining == 0 && p.got_grad) {
        const Tensor leaf(in.leaf);
        for (const PostAccumulateGradHook& hook : p.hooks) hook(leaf);
      }
    }
  };
  // Gradient w.r.t. each node's output, summed over its uses.
  std::unordered_map<Node*, std::shared_ptr<TensorImpl>> grads;
  grads[root_node] = seed.impl_ptr();
  const bool anomaly = anomaly_mode_enabled();  // autograd/anomaly.h: check every gradient for NaN/Inf
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto found = grads.find(node);
    if (found == grads.end()) {  // no gradient flowed here (e.g. through an integer path)
      settle_leaves(node, nullptr);
      continue;
    }
    Tensor g(found->second);
    grads.erase(found);
    HG_CHECK(!node->freed, "backward: trying to backward through the graph a second time (op '" << node->name
                               << "'); its saved tensors were freed. Pass retain_graph=true to the first backward "
                                  "if you need to backward twice");
    check_saved_versions(*node);
    for (const BackwardHook& hook : node_hooks) hook(*node, g);
    if (anomaly) check_backward_anomaly_incoming(*node, g);
    std::vector<Tensor> in_grads;
    {
      NvtxRange nvtx_range(node->nvtx_name.c_str());
      in_grads = node->backward(g);
    }
    HG_CHECK(in_grads.size() == node->inputs.size(),
             "backward: op '" << node->name << "' returned " << in_grads.size() << " gradients for "
                              << node->inputs.size() << " inputs");
    if (anomaly) check_backward_anomaly_outputs(*node, g, in_grads);
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const InputEdge& in = node->inputs[i];
      const Tensor& gi = in_grads[i];
      if (!in.defined || !gi.defined() || !in.requires_grad()) continue;
      const std::string where = "backward of '" + node->name + "', input " + std::to_string(i);
      if (in.grad_fn) {
        accumulate(grads[in.grad_fn.get()], gi, in.dtype, in.shape, where, false);
      } else {  // a leaf: its dtype and shape now (Module::to may have converted it since)
        accumulate(in.leaf->grad, gi, in.leaf->dtype, in.leaf->shape, where, true);
      }
    }
    settle_leaves(node, &in_grads);
    if (!retain_graph) {
      node->backward = nullptr;  // frees the saved tensors the closure captured
      node->saved.clear();
      node->anomaly_inputs.clear();
      node->freed = true;
    }
  }
  callbacks.run();
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
    seed = Tensor::full(shape(), 1.0, dtype(), device());
  }
  HG_CHECK(seed.device() == device(), "backward: grad_output is on " << device_name(seed.device()) << " but the tensor is on "
                                                                    << device_name(device()));
  HG_CHECK(seed.shape() == shape(), "backward: grad_output of shape " << shape_str(seed.shape())
                                        << " for a tensor of shape " << shape_str(shape()));
  if (seed.dtype() != dtype()) seed = seed.cast_copy(dtype());
  if (seed.memory_format() != memory_format()) seed = seed.format_copy(memory_format());
  if (!impl_->grad_fn) {  // a leaf: backward just accumulates the seed
    Tensor self = *this;
    std::shared_ptr<TensorImpl>& slot = self.impl()->grad;
    if (!slot) slot = seed.clone().impl_ptr();
    else if (is_cuda()) {
      cuda::accumulate(Tensor(slot).raw_data(), seed.raw_data(), dtype(), numel());
      Tensor(slot).bump_version();
    } else {
      Tensor acc(slot);
      std::vector<double> a = acc.to_double_vector(), b = seed.to_double_vector();
      for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
      acc.copy_from(Tensor::from_vector(a, shape()));
    }
    if (autograd::g_leaf_hook_count.load(std::memory_order_relaxed) != 0) {
      autograd::BackwardCallbackScope callbacks;
      std::vector<autograd::PostAccumulateGradHook> hooks;
      {
        std::lock_guard<std::mutex> lock(autograd::g_hooks_mu);
        hooks = autograd::leaf_hooks_of(impl_);
      }
      for (const auto& hook : hooks) hook(*this);
      callbacks.run();
    }
    return;
  }
  autograd::run_backward(*this, seed, retain_graph);
}

}  // namespace halfgrad
