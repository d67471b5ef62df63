#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "core/error.h"
#include "core/half.h"
#include "optim/tensor_json.h"
#ifdef HALFGRAD_CUDA
#include "core/cuda/graph.h"
#include "optim/adamw_cuda.h"
#endif

namespace halfgrad::optim {

// ---- options and state ------------------------------------------------------------------------

void AdamWOptions::validate() const {
  const auto [beta1, beta2] = betas_;
  HG_CHECK(lr_ >= 0.0, "AdamW: invalid learning rate: " << lr_ << "; expected >= 0");
  HG_CHECK(eps_ >= 0.0, "AdamW: invalid epsilon value: " << eps_ << "; expected >= 0");
  HG_CHECK(beta1 >= 0.0 && beta1 < 1.0, "AdamW: invalid beta parameter at index 0: " << beta1 << "; expected in [0, 1)");
  HG_CHECK(beta2 >= 0.0 && beta2 < 1.0, "AdamW: invalid beta parameter at index 1: " << beta2 << "; expected in [0, 1)");
  HG_CHECK(weight_decay_ >= 0.0, "AdamW: invalid weight_decay value: " << weight_decay_ << "; expected >= 0");
}

nlohmann::json AdamWOptions::to_json() const {
  return {{"lr", lr_},
          {"betas", {std::get<0>(betas_), std::get<1>(betas_)}},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"amsgrad", false},
          {"master_weights", master_weights_},  // halfgrad's key; PyTorch ignores unknown group keys
          {"capturable", capturable_}};
}

void AdamWOptions::from_json(const json_checked::Field& j) {
  j.require_object();
  if (j.has("amsgrad", /*null_is_absent=*/true) && j["amsgrad"].as_bool())
    j["amsgrad"].fail("is true; amsgrad is not supported");
  lr_ = j["lr"].as_number();
  const json_checked::Field betas = j["betas"];
  betas.require_array("an array [beta1, beta2]");
  if (betas.size() != 2) betas.fail("has " + std::to_string(betas.size()) + " elements; expected [beta1, beta2]");
  betas_ = {betas[0].as_number(), betas[1].as_number()};
  eps_ = j["eps"].as_number();
  weight_decay_ = j["weight_decay"].as_number();
  master_weights_ = j.has("master_weights") ? j["master_weights"].as_bool() : true;  // absent in PyTorch's dicts
  // "capturable" is not read back: it says how this process runs its step (a CUDA graph or not), not
  // what the training state is, so a checkpoint resumes under either.
}

int64_t AdamWParamState::steps() const {
  return step_device.defined() ? static_cast<int64_t>(step_device.item()) : step;
}

nlohmann::json AdamWParamState::to_json(StateTensorCodec& codec, const std::string& index) const {
  nlohmann::json j = OptimizerParamState::to_json(codec, index);
  j["step"] = steps();
  j["exp_avg"] = codec.put(index, "exp_avg", exp_avg);
  j["exp_avg_sq"] = codec.put(index, "exp_avg_sq", exp_avg_sq);
  return j;
}

void AdamWParamState::from_json(const json_checked::Field& j, StateTensorCodec& codec) {
  OptimizerParamState::from_json(j, codec);
  step = j["step"].as_int(0, std::numeric_limits<int64_t>::max());
  step_device = Tensor();  // made again from `step` by the next capturable step()
  exp_avg = codec.get(j["exp_avg"]);
  exp_avg_sq = codec.get(j["exp_avg_sq"]);
}

void AdamWParamState::check_matches(const Tensor& param, const std::string& where) const {
  if (param.dtype() == kFloat16 && !master.defined() && exp_avg.defined() && exp_avg.dtype() == kFloat16) {
    // The pure-FP16 layout (master_weights(false)): Float16 moments of the parameter's shape.
    for (const Tensor* t : {&exp_avg, &exp_avg_sq})
      HG_CHECK(t->defined() && t->dtype() == kFloat16 && t->shape() == param.shape(),
               where << ": a pure-FP16 AdamW state needs float16 moments of shape " << shape_str(param.shape()));
    return;
  }
  OptimizerParamState::check_matches(param, where);
  check_buffer(exp_avg, "exp_avg", param, where);
  check_buffer(exp_avg_sq, "exp_avg_sq", param, where);
}

// ---- the update -------------------------------------------------------------------------------

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& defaults)
    : AdamW(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

AdamW::AdamW(std::vector<OptimizerParamGroup> groups, const AdamWOptions& defaults)
    : Optimizer("AdamW", std::move(groups), defaults.clone()) {}

namespace {

// The per-step scalars, computed in double as Python does, then rounded once to T (as PyTorch's CPU
// kernels convert a Python-number argument to the tensor's type).
template <typename T>
struct AdamWScalars {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
  AdamWScalars(const AdamWOptions& o, int64_t step) {
    const auto [b1, b2] = o.betas();
    const double t = static_cast<double>(step);
    decay = static_cast<T>(1.0 - o.lr() * o.weight_decay());
    beta1 = static_cast<T>(b1);
    one_minus_beta1 = static_cast<T>(1.0 - b1);
    beta2 = static_cast<T>(b2);
    one_minus_beta2 = static_cast<T>(1.0 - b2);
    bias_correction2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(b2, t)));
    eps = static_cast<T>(o.eps());
    neg_step_size = static_cast<T>(-(o.lr() / (1.0 - std::pow(b1, t))));
  }
};

// p, m, v updated in place from g; n elements each.
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWScalars<T>& s) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i] * s.decay;                                  // param.mul_(1 - lr * weight_decay)
    T mi = m[i] * s.beta1 + s.one_minus_beta1 * g[i];       // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    T vi = v[i] * s.beta2 + s.one_minus_beta2 * g[i] * g[i];  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    T denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    p[i] = pi + s.neg_step_size * mi / denom;                // param.addcdiv_(exp_avg, denom, value=-step_size)
    m[i] = mi;
    v[i] = vi;
  }
}

// Pure FP16 (master_weights(false)): p, m, v are Float16. They are widened to float a block at a
// time, updated by adamw_update itself (the same float arithmetic as a master-weight update), and
// rounded back to half (nearest even) once each. kBlock = 1024 elements: 12 KiB of float scratch,
// within L1, and far below kParallelMinElements, so adamw_update's own loop stays serial.
void adamw_update_fp16(uint16_t* p, const float* g, uint16_t* m, uint16_t* v, int64_t n, const AdamWScalars<float>& s) {
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    float pf[kBlock], mf[kBlock], vf[kBlock];
    const int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
    half_to_float_array(p + i0, pf, static_cast<size_t>(len));
    half_to_float_array(m + i0, mf, static_cast<size_t>(len));
    half_to_float_array(v + i0, vf, static_cast<size_t>(len));
    adamw_update(pf, g + i0, mf, vf, len, s);
    float_to_half_array(pf, p + i0, static_cast<size_t>(len));
    float_to_half_array(mf, m + i0, static_cast<size_t>(len));
    float_to_half_array(vf, v + i0, static_cast<size_t>(len));
  }
}

}  // namespace

bool AdamW::skips_on_device() const {
  for (const auto& group : param_groups_)
    if (!static_cast<const AdamWOptions&>(group.options()).capturable()) return false;
  return true;
}

void AdamW::stage_lr() {
  NoGradGuard no_grad;
  lr_device_.resize(param_groups_.size());
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& options = static_cast<const AdamWOptions&>(param_groups_[g].options());
    if (!options.capturable()) continue;
    bool any_cuda = false;
    for (const Tensor& p : param_groups_[g].params()) any_cuda = any_cuda || p.is_cuda();
    if (!any_cuda) continue;
    // A fill kernel with the lr as its argument: ordered after the queued steps that read the old one.
    if (!lr_device_[g].defined()) lr_device_[g] = Tensor::full({1}, options.lr(), kFloat64, Device::CUDA);
    else lr_device_[g].fill_(options.lr());
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  last_cuda_states_.clear();
#ifdef HALFGRAD_CUDA
  std::vector<AdamWCudaTensor> cuda_tensors;
  std::vector<Tensor> keep_alive;  // converted gradients, until the launch is queued
  const float* found_inf = found_inf_for_step();
  // Capturable groups read their lr from the device: written here, except inside a capture, whose
  // replays take the lr stage_lr() writes before each of them.
  if (!cuda::capturing()) stage_lr();
  lr_device_.resize(param_groups_.size());
#endif
  for (size_t group_index = 0; group_index < param_groups_.size(); ++group_index) {
    auto& group = param_groups_[group_index];
    const auto& options = static_cast<const AdamWOptions&>(group.options());
    for (const Tensor& param : group.params()) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      HG_CHECK(param.dtype() != kBFloat16 || options.master_weights(),
               "AdamW: master_weights(false) (pure FP16, Float16 moments) takes float16 parameters; the bfloat16 "
               "parameter of shape " << shape_str(param.shape()) << " needs master_weights(true)");
      auto& state = state_of<AdamWParamState>(param);
      check_state_device(param, state);
      mark_updated(param, state);  // the update below writes them in place
#ifdef HALFGRAD_CUDA
      if (param.is_cuda()) {
        // The state lives on the parameter's device, in its memory format; the kernel does the rest.
        const bool pure_fp16 = param.dtype() == kFloat16 && !options.master_weights();
        HG_CHECK((!state.exp_avg.defined() || state.exp_avg.dtype() == (pure_fp16 ? kFloat16 : kFloat32)) &&
                     !(pure_fp16 && state.master.defined()),
                 "AdamW: parameter of shape " << shape_str(param.shape()) << " has "
                 << (pure_fp16 ? "FP32 master" : "pure-FP16") << " state, but its group now has master_weights("
                 << (pure_fp16 ? "false" : "true") << "); set it before the first step");
        // Inside a CUDA graph capture nothing may be made or baked: a state created here would be
        // created again (zeroed, copied from the parameter) by every replay, and host scalars would
        // replay the capture's lr and step.
        HG_CHECK(!cuda::capturing() || (options.capturable() && state.exp_avg.defined() && state.step_device.defined()),
                 "AdamW.step: a CUDA graph capture is active, but the parameter of shape " << shape_str(param.shape())
                     << (options.capturable() ? " has no optimizer state yet; run one eager step before capturing"
                                              : "'s group is not capturable; set AdamWOptions().capturable(true)"));
        if (is_reduced_float(param.dtype()) && !pure_fp16) update_target(param, state);  // creates the master
        if (!state.exp_avg.defined()) {
          const Dtype md = pure_fp16 ? kFloat16 : kFloat32;
          state.exp_avg = Tensor::zeros(param.shape(), md, param.device(), param.memory_format());
          state.exp_avg_sq = Tensor::zeros(param.shape(), md, param.device(), param.memory_format());
        }
        AdamWStepScalars host_scalars{};
        AdamWDeviceScalars device_scalars{};
        if (options.capturable()) {
          HG_CHECK(lr_device_[group_index].defined(),
                   "AdamW.step (capturable): group " << group_index << "'s lr has no device copy yet; call "
                   "stage_lr() (or one eager step()) before capturing the step");
          if (!state.step_device.defined())  // from the host count (0, or a loaded checkpoint's)
            state.step_device = Tensor::full({1}, static_cast<double>(state.step), kInt64, param.device());
          const auto [b1, b2] = options.betas();
          device_scalars = {lr_device_[group_index].data<double>(), state.step_device.data<int64_t>(),
                            options.weight_decay(), b1, b2, options.eps()};
        } else {
          state.step += 1;
          last_cuda_states_.push_back(&state);
          const AdamWScalars<float> s(options, state.step);
          host_scalars = {s.decay, s.beta1, s.one_minus_beta1, s.beta2, s.one_minus_beta2,
                          s.bias_correction2_sqrt, s.eps, s.neg_step_size};
        }
        const Tensor g = cuda_grad_for(param, grad);
        keep_alive.push_back(g);
        cuda_tensors.push_back({param.raw_data(), state.master.defined() ? state.master.data<float>() : nullptr,
                                g.raw_data(), state.exp_avg.raw_data(), state.exp_avg_sq.raw_data(), param.numel(),
                                param.dtype(), g.dtype(), state.exp_avg.dtype(), host_scalars, device_scalars});
        continue;
      }
#endif
      if (param.dtype() == kFloat16 && !options.master_weights()) {  // pure FP16: no master
        HG_CHECK(!state.master.defined() && (!state.exp_avg.defined() || state.exp_avg.dtype() == kFloat16),
                 "AdamW: parameter of shape " << shape_str(param.shape()) << " has FP32 master state, but its "
                 "group now has master_weights(false); set it before the first step");
        if (!state.exp_avg.defined()) {
          state.exp_avg = Tensor::zeros(param.shape(), kFloat16);
          state.exp_avg_sq = Tensor::zeros(param.shape(), kFloat16);
        }
        state.step += 1;
        const Tensor g = grad_as(grad, kFloat32);
        adamw_update_fp16(param.data<uint16_t>(), g.data<float>(), state.exp_avg.data<uint16_t>(),
                          state.exp_avg_sq.data<uint16_t>(), param.numel(), AdamWScalars<float>(options, state.step));
        continue;
      }
      HG_CHECK(!state.exp_avg.defined() || param.dtype() != kFloat16 || state.exp_avg.dtype() == kFloat32,
               "AdamW: parameter of shape " << shape_str(param.shape()) << " has pure-FP16 state, but its group "
               "now has master_weights(true); set it before the first step");
      Tensor target = update_target(param, state);  // the FP32 master for a Float16 / BFloat16 parameter
      const Dtype d = target.dtype();
      if (!state.exp_avg.defined()) {
        state.exp_avg = Tensor::zeros(param.shape(), d);
        state.exp_avg_sq = Tensor::zeros(param.shape(), d);
      }
      state.step += 1;
      const Tensor g = grad_as(grad, d);
      if (d == kFloat64) {
        adamw_update(target.data<double>(), g.data<double>(), state.exp_avg.data<double>(),
                     state.exp_avg_sq.data<double>(), param.numel(), AdamWScalars<double>(options, state.step));
      } else {
        adamw_update(target.data<float>(), g.data<float>(), state.exp_avg.data<float>(),
                     state.exp_avg_sq.data<float>(), param.numel(), AdamWScalars<float>(options, state.step));
      }
      write_back(param, state);
    }
  }
#ifdef HALFGRAD_CUDA
  adamw_step_cuda(cuda_tensors, found_inf);
#endif
}

void AdamW::undo_skipped_step() {
  // Fresh moments (zeros) with step 0 are the same as no moments, and a master still equals its
  // unchanged parameter, so the step count is all there is to take back.
  for (AdamWParamState* s : last_cuda_states_) s->step -= 1;
  last_cuda_states_.clear();
}

}  // namespace halfgrad::optim
