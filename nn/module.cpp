#include "nn/module.h"

#include <sstream>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/error.h"

namespace halfgrad::nn {

Module::Module(std::string name) : name_(std::move(name)) {}

Tensor Module::forward(const Tensor&) {
  HG_FAIL(name_ << ": this module has no forward(Tensor); call its children instead");
  return Tensor();  // unreachable
}

Tensor Module::operator()(const Tensor& x) {
  if (!autocast_fp32_ || !amp::autocast_enabled()) return forward(x);
  // An FP32 region: every op below runs in its inputs' types, and the input is FP32, so the module's
  // FP32 weights are used as they are. The outer autocast state comes back when the guard closes.
  amp::AutocastGuard fp32_region(false);
  return forward(x.defined() && is_reduced_float(x.dtype()) ? x.to(kFloat32) : x);
}

// ---- registration -----------------------------------------------------------------------------------

void Module::check_new_name(const char* what, const std::string& name) const {
  HG_CHECK(!name.empty(), name_ << "::" << what << ": name must not be empty");
  HG_CHECK(name.find('.') == std::string::npos,
           name_ << "::" << what << ": name '" << name << "' must not contain '.' (dots join nested names)");
  for (const auto& p : parameters_)
    HG_CHECK(p.first != name, name_ << "::" << what << ": '" << name << "' is already a parameter");
  for (const auto& b : buffers_)
    HG_CHECK(b.first != name, name_ << "::" << what << ": '" << name << "' is already a buffer");
  for (const auto& c : children_)
    HG_CHECK(c.first != name, name_ << "::" << what << ": '" << name << "' is already a submodule");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name("register_parameter", name);
  HG_CHECK(tensor.defined(), name_ << "::register_parameter: '" << name << "' is an undefined tensor");
  HG_CHECK(is_floating(tensor.dtype()), name_ << "::register_parameter: '" << name << "' is "
                                              << dtype_name(tensor.dtype()) << "; parameters must be floating");
  HG_CHECK(tensor.is_leaf(), name_ << "::register_parameter: '" << name << "' was produced by '"
                                   << tensor.grad_fn()->name << "'; parameters must be leaves (use detach())");
  tensor.set_requires_grad(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name("register_buffer", name);
  HG_CHECK(tensor.defined(), name_ << "::register_buffer: '" << name << "' is an undefined tensor");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name("register_module", name);
  HG_CHECK(module != nullptr, name_ << "::register_module: '" << name << "' is a null module");
  HG_CHECK(module.get() != this, name_ << "::register_module: '" << name << "' is the module itself");
  children_.emplace_back(name, std::move(module));
}

// ---- queries ------------------------------------------------------------------------------------------

void Module::collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out) const {
  for (const auto& [n, t] : params ? parameters_ : buffers_) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, true, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", true, recurse, out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(recurse)) out.push_back(p.second);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& b : named_buffers(recurse)) out.push_back(b.second);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

NamedModules Module::named_children() const { return children_; }

NamedModules Module::named_modules(const std::string& prefix, bool include_self) const {
  NamedModules out;
  if (include_self) {
    // const_pointer_cast: the tree hands out mutable children too; constness guards only the lists.
    auto self = std::const_pointer_cast<Module>(weak_from_this().lock());
    HG_CHECK(self != nullptr, name_ << "::named_modules: include_self needs the module to be held by a "
                                       "std::shared_ptr (create it with std::make_shared)");
    out.emplace_back(prefix, self);
  }
  for (const auto& [n, child] : children_) {
    const std::string child_prefix = prefix.empty() ? n : prefix + "." + n;
    out.emplace_back(child_prefix, child);
    for (auto& m : child->named_modules(child_prefix, false)) out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& m : named_modules("", include_self)) out.push_back(m.second);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

// ---- state --------------------------------------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else g.zero_();
  }
}

// Swap the TensorImpl's storage for a converted copy; shape, requires_grad and identity stay. The
// version counter goes on from the old storage's, plus one (a write, as far as readers can tell).
static void swap_storage(const Tensor& t, const Tensor& replacement) {
  replacement.impl()->storage->set_version(t.version() + 1);
  t.impl()->storage = replacement.impl()->storage;
}

static void cast_in_place(const Tensor& t, Dtype dtype) {
  if (t.dtype() == dtype) return;
  Tensor converted = t.cast_copy(dtype);
  swap_storage(t, converted);
  t.impl()->dtype = dtype;
}

void Module::to(Dtype dtype) {
  HG_CHECK(is_floating(dtype), name_ << "::to: target dtype " << dtype_name(dtype)
                                     << " is not floating; only floating types can be cast to");
  for (auto& [n, p] : parameters_) {
    if (Tensor g = p.grad(); g.defined()) p.set_grad(g.cast_copy(dtype));
    cast_in_place(p, dtype);
  }
  for (auto& [n, b] : buffers_)
    if (is_floating(b.dtype())) cast_in_place(b, dtype);
  for (auto& c : children_) c.second->to(dtype);
}

static void move_in_place(const Tensor& t, Device device) {
  if (t.device() == device) return;
  Tensor moved = t.copy_to(device);
  swap_storage(t, moved);
  t.impl()->device = device;
}

void Module::to(Device device) {
  for (auto& [n, p] : parameters_) {
    if (Tensor g = p.grad(); g.defined()) p.set_grad(g.copy_to(device));
    move_in_place(p, device);
  }
  for (auto& [n, b] : buffers_)
    if (is_floating(b.dtype())) move_in_place(b, device);
  for (auto& c : children_) c.second->to(device);
}

// ---- printing -----------------------------------------------------------------------------------------

void Module::pretty_print(std::ostream& os, int indent) const {
  os << name_ << "(" << extra_repr();
  if (children_.empty()) {
    os << ")";
    return;
  }
  os << "\n";
  const std::string pad(indent + 2, ' ');
  for (const auto& [n, child] : children_) {
    os << pad << "(" << n << "): ";
    child->pretty_print(os, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.pretty_print(os);
  return os;
}

}  // namespace halfgrad::nn
