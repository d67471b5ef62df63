#include "optim/sgd.h"

#include "autograd/node.h"
#include "core/error.h"
#include "optim/tensor_json.h"
#ifdef HALFGRAD_CUDA
#include "optim/sgd_cuda.h"
#endif

namespace halfgrad::optim {

// ---- options and state ------------------------------------------------------------------------

void SGDOptions::validate() const {
  HG_CHECK(lr_ >= 0.0, "SGD: invalid learning rate: " << lr_ << "; expected >= 0");
  HG_CHECK(momentum_ >= 0.0, "SGD: invalid momentum value: " << momentum_ << "; expected >= 0");
  HG_CHECK(weight_decay_ >= 0.0, "SGD: invalid weight_decay value: " << weight_decay_ << "; expected >= 0");
  HG_CHECK(!nesterov_ || (momentum_ > 0.0 && dampening_ == 0.0),
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum " << momentum_
               << ", dampening " << dampening_ << ")");
}

nlohmann::json SGDOptions::to_json() const {
  return {{"lr", lr_}, {"momentum", momentum_}, {"dampening", dampening_}, {"weight_decay", weight_decay_},
          {"nesterov", nesterov_}};
}

void SGDOptions::from_json(const json_checked::Field& j) {
  j.require_object();
  lr_ = j["lr"].as_number();
  momentum_ = j["momentum"].as_number();
  dampening_ = j["dampening"].as_number();
  weight_decay_ = j["weight_decay"].as_number();
  nesterov_ = j["nesterov"].as_bool();
}

nlohmann::json SGDParamState::to_json(StateTensorCodec& codec, const std::string& index) const {
  nlohmann::json j = OptimizerParamState::to_json(codec, index);
  j["momentum_buffer"] = momentum_buffer.defined() ? codec.put(index, "momentum_buffer", momentum_buffer) : nlohmann::json();
  return j;
}

void SGDParamState::from_json(const json_checked::Field& j, StateTensorCodec& codec) {
  OptimizerParamState::from_json(j, codec);
  const json_checked::Field b = j["momentum_buffer"];
  momentum_buffer = b.value().is_null() ? Tensor() : codec.get(b);
}

void SGDParamState::check_matches(const Tensor& param, const std::string& where) const {
  OptimizerParamState::check_matches(param, where);
  check_buffer(momentum_buffer, "momentum_buffer", param, where);
}

// ---- the update -------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults)
    : SGD(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

SGD::SGD(std::vector<OptimizerParamGroup> groups, const SGDOptions& defaults)
    : Optimizer("SGD", std::move(groups), defaults.clone()) {}

namespace {

// p (and buf, when momentum != 0) updated in place from g; `first` is this parameter's first step
// with momentum, when buf starts as a copy of d instead of being decayed.
template <typename T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SGDOptions& o, bool first) {
  const T weight_decay = static_cast<T>(o.weight_decay());
  const T momentum = static_cast<T>(o.momentum());
  const T one_minus_dampening = static_cast<T>(1.0 - o.dampening());
  const T neg_lr = static_cast<T>(-o.lr());
  const bool decay = o.weight_decay() != 0.0, use_momentum = o.momentum() != 0.0, nesterov = o.nesterov();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    T d = decay ? g[i] + weight_decay * p[i] : g[i];        // d_p = d_p.add(param, alpha=weight_decay)
    if (use_momentum) {
      buf[i] = first ? d : buf[i] * momentum + one_minus_dampening * d;  // buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      d = nesterov ? d + momentum * buf[i] : buf[i];       // d_p = d_p.add(buf, alpha=momentum)  or  d_p = buf
    }
    p[i] = p[i] + neg_lr * d;                              // param.add_(d_p, alpha=-lr)
  }
}

}  // namespace

void SGD::step() {
  NoGradGuard no_grad;
  last_cuda_first_.clear();
#ifdef HALFGRAD_CUDA
  std::vector<SGDCudaTensor> cuda_tensors;
  std::vector<Tensor> keep_alive;  // converted gradients, until the launch is queued
  const float* found_inf = found_inf_for_step();
#endif
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const SGDOptions&>(group.options());
    for (const Tensor& param : group.params()) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      auto& state = state_of<SGDParamState>(param);
      check_state_device(param, state);
      mark_updated(param, state);  // the update below writes them in place
#ifdef HALFGRAD_CUDA
      if (param.is_cuda()) {
        update_target(param, state);  // creates the FP32 master of a Float16 / BFloat16 parameter
        const bool use_momentum = options.momentum() != 0.0;
        const bool first = !state.momentum_buffer.defined();
        if (use_momentum && first) {
          state.momentum_buffer = Tensor::empty(param.shape(), kFloat32, param.device(), param.memory_format());
          last_cuda_first_.push_back(&state);
        }
        const Tensor g = cuda_grad_for(param, grad);
        keep_alive.push_back(g);
        const SGDStepScalars s{static_cast<float>(options.weight_decay()), static_cast<float>(options.momentum()),
                               static_cast<float>(1.0 - options.dampening()), static_cast<float>(-options.lr()),
                               options.weight_decay() != 0.0, use_momentum, options.nesterov(), first};
        cuda_tensors.push_back({param.raw_data(), state.master.defined() ? state.master.data<float>() : nullptr,
                                g.raw_data(), use_momentum ? state.momentum_buffer.data<float>() : nullptr,
                                param.numel(), param.dtype(), g.dtype(), s});
        continue;
      }
#endif
      Tensor target = update_target(param, state);  // the FP32 master for a Float16 / BFloat16 parameter
      const Dtype d = target.dtype();
      const bool first = !state.momentum_buffer.defined();
      if (options.momentum() != 0.0 && first) state.momentum_buffer = Tensor::empty(param.shape(), d);
      const Tensor g = grad_as(grad, d);
      const Tensor& buf = state.momentum_buffer;
      if (d == kFloat64) {
        sgd_update(target.data<double>(), g.data<double>(), buf.defined() ? buf.data<double>() : nullptr,
                   param.numel(), options, first);
      } else {
        sgd_update(target.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr,
                   param.numel(), options, first);
      }
      write_back(param, state);
    }
  }
#ifdef HALFGRAD_CUDA
  sgd_step_cuda(cuda_tensors, found_inf);
#endif
}

void SGD::undo_skipped_step() {
  // A buffer created by the skipped step holds nothing yet: drop it, so that the next step starts it
  // from d again. Masters still equal their unchanged parameters.
  for (SGDParamState* s : last_cuda_first_) s->momentum_buffer = Tensor();
  last_cuda_first_.clear();
}

}  // namespace halfgrad::optim
