// lr_scheduler.h - learning-rate schedules, as torch.optim.lr_scheduler (PyTorch 1.13).
//
// A scheduler sets every parameter group's lr once per step() - per epoch or per iteration, as the
// training loop chooses; call it after optimizer.step(). Like PyTorch, each schedule is written in
// its recursive ("chainable") form, new_lr = f(current lr), which is what step() uses; the closed
// form, lr(t) = f(base_lr, t), is used only where PyTorch uses it (SequentialLR's milestones). The
// two agree up to rounding; the recursive one is kept so that the lrs follow PyTorch's arithmetic
// (to the last bit or so: the compiler may fuse a * b + c into one FMA, which Python never does).
//
// Construction performs PyTorch's initial step: last_epoch goes from -1 to 0 and lr becomes the
// schedule's value at 0. The first constructed scheduler records each group's lr as its initial_lr;
// every scheduler's base_lrs are the groups' initial_lr.
//
//   StepLR(step_size, gamma)       lr_t = base_lr * gamma^floor(t / step_size)
//   CosineAnnealingLR(T_max, eta_min)
//                                  lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2
//   LinearLR(start_factor, end_factor, total_iters)
//                                  lr_t = base_lr * (start + (end - start) * min(t, total_iters) / total_iters)
//   SequentialLR(schedulers, milestones)
//                                  runs schedulers[i] between milestones[i-1] and milestones[i],
//                                  restarting each at its own t = 0 on its milestone.
//   cosine_with_warmup(...)        SequentialLR(LinearLR warmup, CosineAnnealingLR): the usual recipe.
#pragma once
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "optim/optimizer.h"

namespace halfgrad::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advance one epoch (or iteration) and set every group's lr.
  virtual void step();
  /// The lrs the last step() set, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  /// {"last_epoch", "_step_count", "base_lrs", "_last_lr"} (PyTorch's keys); nested for SequentialLR.
  virtual nlohmann::json state_dict() const;
  virtual void load_state_dict(const nlohmann::json& state_dict);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  /// PyTorch's _initial_step: every derived constructor ends with it (a base constructor cannot call
  /// the derived get_lr).
  void initial_step();
  /// PyTorch's step(epoch): jump to `epoch` using the closed form.
  void step_to(int64_t epoch);
  /// The recursive form: the lrs for last_epoch_, from the groups' current lrs.
  virtual std::vector<double> get_lr() = 0;
  /// The closed form; schedulers without one use get_lr().
  virtual std::vector<double> get_closed_form_lr() { return get_lr(); }
  /// The groups' current lrs.
  std::vector<double> group_lrs() const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;

 private:
  void apply(const std::vector<double>& lrs);
  friend class SequentialLR;
};

/// lr *= gamma every step_size steps (torch.optim.lr_scheduler.StepLR; gamma defaults to 0.1).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> get_closed_form_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// Half a cosine from base_lr down to eta_min over T_max steps (torch.optim.lr_scheduler.CosineAnnealingLR;
/// past T_max it climbs back, as PyTorch's does).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> get_closed_form_lr() override;

 private:
  int64_t T_max_;
  double eta_min_;
};

/// The lr factor moves linearly from start_factor to end_factor over total_iters steps, then stays
/// (torch.optim.lr_scheduler.LinearLR; defaults 1/3, 1, 5). A linear warmup when start_factor < 1.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> get_closed_form_lr() override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

/// Schedulers one after another (torch.optim.lr_scheduler.SequentialLR): schedulers[i] runs from
/// milestones[i-1] on, restarted at its own epoch 0 there. Needs milestones.size() == schedulers.size() - 1.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state_dict) override;

 protected:
  std::vector<double> get_lr() override;  // unused: step() delegates

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

/// Linear warmup from lr * warmup_start_factor to lr over warmup_steps, then a cosine down to eta_min
/// at total_steps: SequentialLR({LinearLR(warmup_start_factor, 1, warmup_steps),
/// CosineAnnealingLR(total_steps - warmup_steps, eta_min)}, {warmup_steps}), stepped once per iteration.
std::unique_ptr<SequentialLR> cosine_with_warmup(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                                                 double warmup_start_factor = 1e-3, double eta_min = 0.0);

}  // namespace halfgrad::optim
