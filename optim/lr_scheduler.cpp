#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json_checked.h"

namespace halfgrad::optim {

static constexpr double kPi = 3.141592653589793;  // Python's math.pi (the double nearest pi)

// Python's a % b for b > 0: never negative.
static int64_t python_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }
// Python's a // b for b > 0: rounds toward minus infinity.
static int64_t python_floordiv(int64_t a, int64_t b) { return (a - python_mod(a, b)) / b; }

// ---- base -------------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& group : optimizer_.param_groups()) {
    if (!group.initial_lr) group.initial_lr = group.options().get_lr();  // group.setdefault('initial_lr', lr)
    base_lrs_.push_back(*group.initial_lr);
  }
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (const auto& group : optimizer_.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  HG_CHECK(lrs.size() == groups.size(), "LRScheduler: " << lrs.size() << " lrs for " << groups.size()
                                                        << " parameter groups (was a group added after the scheduler?)");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
  last_lr_ = group_lrs();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  apply(get_closed_form_lr());
}

nlohmann::json LRScheduler::state_dict() const {
  return {{"last_epoch", last_epoch_}, {"_step_count", step_count_}, {"base_lrs", base_lrs_}, {"_last_lr", last_lr_}};
}

void LRScheduler::load_state_dict(const nlohmann::json& sd) {
  // Parsed into locals first, so that a bad field leaves the scheduler as it was.
  const json_checked::Field f(sd, "LRScheduler::load_state_dict");
  f.require_object();
  const int64_t last_epoch = f["last_epoch"].as_int();
  const int64_t step_count = f["_step_count"].as_int();
  std::vector<double> base_lrs = f["base_lrs"].as_number_list();
  std::vector<double> last_lr = f["_last_lr"].as_number_list();
  last_epoch_ = last_epoch;
  step_count_ = step_count;
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
}

// ---- StepLR -----------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size >= 1, "StepLR: step_size " << step_size << " must be >= 1");
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || python_mod(last_epoch_, step_size_) != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> StepLR::get_closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * std::pow(gamma_, static_cast<double>(python_floordiv(last_epoch_, step_size_))));
  return lrs;
}

// ---- CosineAnnealingLR ------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  HG_CHECK(T_max >= 1, "CosineAnnealingLR: T_max " << T_max << " must be >= 1");
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const double T = static_cast<double>(T_max_), t = static_cast<double>(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  if (python_mod(last_epoch_ - 1 - T_max_, 2 * T_max_) == 0) {
    // Just past a minimum: the recursive ratio below would be 0/0, so step up from eta_min directly.
    for (size_t i = 0; i < lrs.size(); ++i) lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / T)) / 2;
    return lrs;
  }
  for (double& lr : lrs)
    lr = (1 + std::cos(kPi * t / T)) / (1 + std::cos(kPi * (t - 1) / T)) * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::vector<double> CosineAnnealingLR::get_closed_form_lr() {
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * static_cast<double>(last_epoch_) /
                                                                 static_cast<double>(T_max_))) / 2);
  return lrs;
}

// ---- LinearLR ---------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  // PyTorch 1.13 accepts start_factor 0, then divides by zero on the second step; later versions require > 0.
  HG_CHECK(start_factor > 0.0 && start_factor <= 1.0,
           "LinearLR: start_factor " << start_factor << " must be in (0, 1]");
  HG_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "LinearLR: end_factor " << end_factor << " must be in [0, 1]");
  HG_CHECK(total_iters >= 1, "LinearLR: total_iters " << total_iters << " must be >= 1");
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double delta = end_factor_ - start_factor_;
  for (double& lr : lrs)
    lr *= 1. + delta / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * delta);
  return lrs;
}

std::vector<double> LinearLR::get_closed_form_lr() {
  std::vector<double> lrs;
  const double t = static_cast<double>(std::min(total_iters_, last_epoch_));
  for (double base : base_lrs_)
    lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * t / static_cast<double>(total_iters_)));
  return lrs;
}

// ---- SequentialLR -----------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  HG_CHECK(!schedulers_.empty(), "SequentialLR: needs at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i)
    HG_CHECK(schedulers_[i] && &schedulers_[i]->optimizer_ == &optimizer,
             "SequentialLR: scheduler " << i << " does not belong to this optimizer");
  HG_CHECK(milestones_.size() + 1 == schedulers_.size(),
           "SequentialLR: expects number of schedulers provided to be one more than the number of milestone "
           "points, but got " << schedulers_.size() << " schedulers and " << milestones_.size() << " milestones");
  HG_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR: milestones must be increasing");
  // PyTorch: each scheduler's constructor already stepped once; put the lrs back to initial_lr,
  // undo those steps, and take the initial step of the first scheduler only.
  last_epoch_ = 0;
  for (auto& group : optimizer_.param_groups()) group.options().set_lr(*group.initial_lr);
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  // bisect_right: the number of milestones <= last_epoch picks the scheduler.
  const size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.step_to(0);  // restart it at its epoch 0
  else s.step();
  last_lr_ = s.get_last_lr();
}

std::vector<double> SequentialLR::get_lr() { return group_lrs(); }

nlohmann::json SequentialLR::state_dict() const {
  nlohmann::json sd = {{"last_epoch", last_epoch_}, {"_milestones", milestones_}, {"_last_lr", last_lr_}};
  sd["_schedulers"] = nlohmann::json::array();
  for (const auto& s : schedulers_) sd["_schedulers"].push_back(s->state_dict());
  return sd;
}

void SequentialLR::load_state_dict(const nlohmann::json& sd) {
  const json_checked::Field f(sd, "SequentialLR::load_state_dict");
  f.require_object();
  const json_checked::Field schedulers = f["_schedulers"];
  schedulers.require_array();
  HG_CHECK(schedulers.size() == schedulers_.size(),
           "SequentialLR::load_state_dict: " << schedulers.size() << " saved schedulers for " << schedulers_.size());
  const int64_t last_epoch = f["last_epoch"].as_int();
  std::vector<int64_t> milestones = f["_milestones"].as_int_list();
  std::vector<double> last_lr = f["_last_lr"].as_number_list();
  last_epoch_ = last_epoch;
  milestones_ = std::move(milestones);
  last_lr_ = std::move(last_lr);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(schedulers[i].value());
}

std::unique_ptr<SequentialLR> cosine_with_warmup(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                                                 double warmup_start_factor, double eta_min) {
  HG_CHECK(warmup_steps >= 1 && total_steps > warmup_steps,
           "cosine_with_warmup: need 1 <= warmup_steps < total_steps, got " << warmup_steps << " and " << total_steps);
  auto warmup = std::make_shared<LinearLR>(optimizer, warmup_start_factor, 1.0, warmup_steps);
  auto cosine = std::make_shared<CosineAnnealingLR>(optimizer, total_steps - warmup_steps, eta_min);
  return std::make_unique<SequentialLR>(optimizer, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
                                        std::vector<int64_t>{warmup_steps});
}

}  // namespace halfgrad::optim
