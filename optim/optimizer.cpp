#include "optim/optimizer.h"

#include <unordered_set>

#include "autograd/node.h"
#include "core/error.h"
#include "optim/tensor_json.h"

namespace halfgrad::optim {

// ---- state ------------------------------------------------------------------------------------

namespace {

// Tensors inline, as base64 (state_dict()).
class Base64Codec : public StateTensorCodec {
 public:
  nlohmann::json put(const std::string&, const std::string&, const Tensor& t) override { return tensor_to_json(t); }
  Tensor get(const json_checked::Field& j) override { return tensor_from_json(j); }
};

// Tensors into / out of a NamedTensors list, the JSON holding their names (state_dict(tensors, prefix)).
class ListCodec : public StateTensorCodec {
 public:
  ListCodec(NamedTensors* out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}
  explicit ListCodec(const NamedTensors& in) {
    for (const auto& [n, t] : in) in_[n] = &t;
  }
  nlohmann::json put(const std::string& index, const std::string& field, const Tensor& t) override {
    std::string name = prefix_ + "state." + index + "." + field;
    out_->emplace_back(name, t);
    return name;
  }
  Tensor get(const json_checked::Field& j) override {
    const std::string name = j.as_string();
    auto it = in_.find(name);
    if (it == in_.end()) j.fail("names tensor '" + name + "', which is not among the saved tensors");
    return it->second->clone();  // the list may hold another optimizer's live state: never share it
  }

 private:
  NamedTensors* out_ = nullptr;
  std::string prefix_;
  std::unordered_map<std::string, const Tensor*> in_;
};

}  // namespace

nlohmann::json OptimizerParamState::to_json(StateTensorCodec& codec, const std::string& index) const {
  nlohmann::json j = nlohmann::json::object();
  if (master.defined()) j["master"] = codec.put(index, "master", master);
  return j;
}

void OptimizerParamState::from_json(const json_checked::Field& j, StateTensorCodec& codec) {
  j.require_object();
  master = j.has("master") ? codec.get(j["master"]) : Tensor();
}

void OptimizerParamState::check_matches(const Tensor& param, const std::string& where) const {
  HG_CHECK(master.defined() == is_reduced_float(param.dtype()),
           where << " (" << dtype_name(param.dtype()) << " " << shape_str(param.shape()) << "): "
                 << (master.defined() ? "the saved state has a master weight but the parameter is not float16 or bfloat16"
                                      : "the parameter is 16-bit but the saved state has no master weight"));
  check_buffer(master, "master", param, where);
}

void OptimizerParamState::check_buffer(const Tensor& buffer, const char* name, const Tensor& param,
                                       const std::string& where) {
  if (!buffer.defined()) return;
  HG_CHECK(buffer.shape() == param.shape() && buffer.dtype() == update_dtype(param),
           where << ": saved " << name << " is " << dtype_name(buffer.dtype()) << " " << shape_str(buffer.shape())
                 << "; the parameter needs " << dtype_name(update_dtype(param)) << " " << shape_str(param.shape()));
}

// ---- param group ------------------------------------------------------------------------------

OptimizerParamGroup::OptimizerParamGroup(const OptimizerParamGroup& o)
    : initial_lr(o.initial_lr), params_(o.params_), options_(o.options_ ? o.options_->clone() : nullptr) {}

OptimizerParamGroup& OptimizerParamGroup::operator=(const OptimizerParamGroup& o) {
  if (this != &o) {
    params_ = o.params_;
    options_ = o.options_ ? o.options_->clone() : nullptr;
    initial_lr = o.initial_lr;
  }
  return *this;
}

OptimizerOptions& OptimizerParamGroup::options() {
  HG_CHECK(options_, "OptimizerParamGroup::options: the group has no options (add it to an optimizer first)");
  return *options_;
}
const OptimizerOptions& OptimizerParamGroup::options() const {
  HG_CHECK(options_, "OptimizerParamGroup::options: the group has no options (add it to an optimizer first)");
  return *options_;
}

// ---- optimizer --------------------------------------------------------------------------------

Optimizer::Optimizer(const char* name, std::vector<OptimizerParamGroup> groups,
                     std::unique_ptr<OptimizerOptions> defaults)
    : name_(name), defaults_(std::move(defaults)) {
  defaults_->validate();
  for (const auto& g : groups) add_param_group(g);
  HG_CHECK(!parameters().empty(), name_ << ": optimizer got an empty parameter list");
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& g : param_groups_)
    for (const Tensor& p : g.params()) seen.insert(p.impl());
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    HG_CHECK(p.defined(), name_ << ": parameter " << i << " of a group is an undefined Tensor");
    HG_CHECK(is_floating(p.dtype()),
             name_ << ": can only optimize floating-point tensors; parameter " << i << " is " << dtype_name(p.dtype()));
    HG_CHECK(p.is_leaf(), name_ << ": can't optimize a non-leaf Tensor (parameter " << i << ", produced by '"
                                << p.grad_fn()->name << "')");
    HG_CHECK(p.device() == Device::CPU || p.dtype() != kFloat64,
             name_ << ": parameter " << i << " is a float64 CUDA tensor; CUDA parameters are float32, float16 or bfloat16");
    HG_CHECK(seen.insert(p.impl()).second, name_ << ": some parameters appear in more than one parameter group");
  }
  OptimizerParamGroup g = group;
  if (!g.has_options()) g.set_options(defaults_->clone());
  g.options().validate();
  param_groups_.push_back(std::move(g));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& group : param_groups_)
    for (Tensor& p : group.params()) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (set_to_none) p.set_grad(Tensor());
      else if (g.dtype() == p.dtype()) g.zero_();
      else p.set_grad(Tensor::zeros(p.shape(), p.dtype(), p.device(), p.memory_format()));  // e.g. an FP32 grad a GradScaler left on an FP16 param
    }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (const auto& group : param_groups_) all.insert(all.end(), group.params().begin(), group.params().end());
  return all;
}

const OptimizerParamState* Optimizer::param_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : it->second.get();
}

nlohmann::json Optimizer::state_dict() const {
  Base64Codec codec;
  return state_dict_with(codec);
}

nlohmann::json Optimizer::state_dict(NamedTensors& tensors, const std::string& prefix) const {
  ListCodec codec(&tensors, prefix);
  return state_dict_with(codec);
}

void Optimizer::load_state_dict(const nlohmann::json& sd) {
  Base64Codec codec;
  load_state_dict_with(sd, codec);
}

void Optimizer::load_state_dict(const nlohmann::json& sd, const NamedTensors& tensors) {
  ListCodec codec(tensors);
  load_state_dict_with(sd, codec);
}

nlohmann::json Optimizer::state_dict_with(StateTensorCodec& codec) const {
  nlohmann::json state = nlohmann::json::object();
  nlohmann::json groups = nlohmann::json::array();
  int64_t index = 0;
  for (const auto& group : param_groups_) {
    nlohmann::json g = group.options().to_json();
    if (group.initial_lr) g["initial_lr"] = *group.initial_lr;
    std::vector<int64_t> ids;
    for (const Tensor& p : group.params()) {
      auto it = state_.find(p.impl());
      if (it != state_.end()) state[std::to_string(index)] = it->second->to_json(codec, std::to_string(index));
      ids.push_back(index++);
    }
    g["params"] = ids;
    groups.push_back(std::move(g));
  }
  return {{"state", std::move(state)}, {"param_groups", std::move(groups)}};
}

void Optimizer::load_state_dict_with(const nlohmann::json& sd, StateTensorCodec& codec) {
  const json_checked::Field root(sd, std::string(name_) + "::load_state_dict");
  root.require_object("an object with \"state\" and \"param_groups\"");
  const json_checked::Field groups = root["param_groups"];
  const json_checked::Field saved_state = root["state"];
  groups.require_array();
  saved_state.require_object();
  HG_CHECK(groups.size() == param_groups_.size(), name_ << "::load_state_dict: loaded state dict has "
                                                          << groups.size() << " parameter groups; the optimizer has "
                                                          << param_groups_.size());
  // Parse everything first, so that a bad entry leaves the optimizer as it was.
  std::vector<std::unique_ptr<OptimizerOptions>> options;
  std::vector<std::optional<double>> initial_lrs;
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>> state;
  int64_t index = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& params = param_groups_[gi].params();
    const json_checked::Field group = groups[gi];
    group.require_object();
    HG_CHECK(group["params"].size() == params.size(),
             name_ << "::load_state_dict: loaded group " << gi << " has " << group["params"].size()
                   << " parameters; the optimizer's has " << params.size());
    auto o = defaults_->clone();
    o->from_json(group);
    o->validate();
    options.push_back(std::move(o));
    initial_lrs.push_back(group.has("initial_lr") ? std::optional<double>(group["initial_lr"].as_number()) : std::nullopt);
    for (const Tensor& p : params) {
      const std::string key = std::to_string(index++);
      if (!saved_state.has(key)) continue;
      auto s = make_param_state();
      s->from_json(saved_state[key], codec);
      s->check_matches(p, name_ + std::string("::load_state_dict: parameter ") + key);
      // Saved as host NCDHW: back onto the parameter's device and into its memory format.
      for (Tensor* t : s->tensors())
        if (t->defined()) *t = t->copy_to(p.device()).format_copy(p.memory_format());
      state[p.impl()] = std::move(s);
    }
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    param_groups_[gi].set_options(std::move(options[gi]));
    if (initial_lrs[gi]) param_groups_[gi].initial_lr = *initial_lrs[gi];
  }
  state_ = std::move(state);
}

// ---- master weights ---------------------------------------------------------------------------

Tensor Optimizer::update_target(const Tensor& param, OptimizerParamState& state) {
  if (!is_reduced_float(param.dtype())) return param;
  if (!state.master.defined()) state.master = param.cast_copy(kFloat32);  // exact: every half / bf16 is a float
  return state.master;
}

void Optimizer::write_back(const Tensor& param, const OptimizerParamState& state) {
  if (!is_reduced_float(param.dtype())) return;
  float_to_reduced_array(param.dtype(), state.master.data<float>(), param.raw_data(), static_cast<size_t>(param.numel()));
}

Tensor Optimizer::grad_as(const Tensor& grad, Dtype d) { return grad.dtype() == d ? grad : grad.cast_copy(d); }

// ---- CUDA -------------------------------------------------------------------------------------

Tensor Optimizer::cuda_grad_for(const Tensor& param, const Tensor& grad) const {
  HG_CHECK(grad.device() == param.device(), name_ << ": the gradient of a parameter of shape " << shape_str(param.shape())
                                                  << " is on " << device_name(grad.device()) << " but the parameter is on "
                                                  << device_name(param.device()));
  HG_CHECK(grad.dtype() == kFloat32 || is_reduced_float(grad.dtype()),
           name_ << ": CUDA gradients must be float32, float16 or bfloat16, got " << dtype_name(grad.dtype()));
  return grad.format_copy(param.memory_format());
}

void Optimizer::mark_updated(const Tensor& param, OptimizerParamState& state) {
  param.bump_version();
  for (const Tensor* t : state.tensors())
    if (t->defined()) t->bump_version();
}

void Optimizer::check_state_device(const Tensor& param, OptimizerParamState& state) const {
  for (const Tensor* t : state.tensors())
    HG_CHECK(!t->defined() || t->device() == param.device(),
             name_ << ": the state of a parameter of shape " << shape_str(param.shape()) << " is on "
                   << device_name(t->device()) << " but the parameter is on " << device_name(param.device())
                   << "; make the optimizer after moving the model");
}

void Optimizer::set_found_inf(const Tensor& found_inf) {
  HG_CHECK(!found_inf.defined() || (found_inf.is_cuda() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1),
           name_ << "::set_found_inf: expected a 1-element float32 CUDA tensor");
  found_inf_ = found_inf;
}

const float* Optimizer::found_inf_for_step() const {
  if (!found_inf_.defined()) return nullptr;
  for (const auto& group : param_groups_)
    for (const Tensor& p : group.params())
      HG_CHECK(p.is_cuda() || !p.grad().defined(),
               name_ << ".step: a found_inf device flag is set (set_found_inf) but a parameter of shape "
                     << shape_str(p.shape()) << " with a gradient is on the CPU, which cannot read it");
  return found_inf_.data<float>();
}

}  // namespace halfgrad::optim
