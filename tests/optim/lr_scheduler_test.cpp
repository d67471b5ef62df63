// LR schedules against torch.optim.lr_scheduler (PyTorch 1.13). The expected lrs were printed by
// Debian's PyTorch with SGD(lr=0.1) and `optimizer.step(); scheduler.step()` per epoch, the first
// value being the lr right after construction:
//   StepLR(opt, 3, 0.5); CosineAnnealingLR(opt, 5, 0.01); LinearLR(opt, 0.25, 1.0, 4);
//   SequentialLR(opt, [LinearLR(opt, 1e-3, 1.0, 3), CosineAnnealingLR(opt, 7, 0.0)], [3])
// (a second param group with lr 0.2 for the last one). PyTorch's recursive formulas are followed
// operation for operation; the doubles agree to 1e-14 relative (GCC fuses a * b + c into an FMA
// under its default -ffp-contract=fast, Python rounds the product first).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"

using namespace halfgrad;

namespace {

std::vector<optim::OptimizerParamGroup> groups_with_lrs(const std::vector<double>& lrs) {
  std::vector<optim::OptimizerParamGroup> groups;
  for (double lr : lrs)
    groups.emplace_back(std::vector<Tensor>{Tensor::zeros({1}).set_requires_grad(true)},
                        std::make_unique<optim::SGDOptions>(lr));
  return groups;
}

// lr of group `g` after construction and after each of the following steps.
template <typename Make>
void check_schedule(Make make, const std::vector<double>& expect, const std::vector<double>& group_lrs = {0.1},
                    size_t g = 0) {
  optim::SGD opt(groups_with_lrs(group_lrs), optim::SGDOptions(0.1));
  auto sched = make(opt);
  for (size_t t = 0; t < expect.size(); ++t) {
    if (t > 0) {
      opt.step();
      sched->step();
    }
    CAPTURE(t);
    const double lr = opt.param_groups()[g].options().get_lr();
    CHECK_MESSAGE(std::abs(lr - expect[t]) <= 1e-14 * std::abs(expect[t]), "lr " << lr << " vs " << expect[t]);
    CHECK(sched->get_last_lr()[g] == opt.param_groups()[g].options().get_lr());
  }
}

}  // namespace

TEST_CASE("optim: StepLR matches PyTorch (step_size 3, gamma 0.5)") {
  check_schedule([](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 3, 0.5); },
                 {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125});
}

TEST_CASE("optim: CosineAnnealingLR matches PyTorch past T_max (T_max 5, eta_min 0.01)") {
  check_schedule([](optim::Optimizer& o) { return std::make_unique<optim::CosineAnnealingLR>(o, 5, 0.01); },
                 {0.1, 0.09140576474687263, 0.06890576474687263, 0.04109423525312736, 0.018594235253127367, 0.01,
                  0.018594235253127367, 0.04109423525312739, 0.06890576474687267, 0.09140576474687269,
                  0.10000000000000006, 0.09140576474687272, 0.06890576474687268, 0.0410942352531274,
                  0.01859423525312738});
}

TEST_CASE("optim: LinearLR warmup matches PyTorch (0.25 -> 1 over 4)") {
  check_schedule([](optim::Optimizer& o) { return std::make_unique<optim::LinearLR>(o, 0.25, 1.0, 4); },
                 {0.025, 0.043750000000000004, 0.06250000000000001, 0.08125000000000002, 0.10000000000000002,
                  0.10000000000000002, 0.10000000000000002, 0.10000000000000002});
}

TEST_CASE("optim: cosine with linear warmup (SequentialLR) matches PyTorch, per param group") {
  const auto make = [](optim::Optimizer& o) { return optim::cosine_with_warmup(o, 3, 10, 1e-3, 0.0); };
  check_schedule(make, {0.0001, 0.0334, 0.0667, 0.1, 0.09504844339512096, 0.08117449009293669,
                        0.061126046697815725, 0.03887395330218429, 0.018825509907063328, 0.004951556604879048, 0.0,
                        0.004951556604879043, 0.018825509907063314});
  check_schedule(make, {0.0002, 0.0668, 0.1334, 0.2, 0.19009688679024192, 0.16234898018587338,
                        0.12225209339563145, 0.07774790660436857, 0.037651019814126656, 0.009903113209758096, 0.0,
                        0.009903113209758086, 0.03765101981412663},
                 {0.1, 0.2}, 1);
}

TEST_CASE("optim: LR scheduler state_dict round trip continues the same schedule") {
  optim::SGD a(groups_with_lrs({0.1}), optim::SGDOptions(0.1)), b(groups_with_lrs({0.1}), optim::SGDOptions(0.1));
  auto sa = optim::cosine_with_warmup(a, 3, 10);
  for (int t = 0; t < 5; ++t) sa->step();
  auto sb = optim::cosine_with_warmup(b, 3, 10);
  sb->load_state_dict(nlohmann::json::parse(sa->state_dict().dump()));
  b.load_state_dict(a.state_dict());  // the lr itself lives in the optimizer's param groups
  for (int t = 0; t < 6; ++t) {
    sa->step();
    sb->step();
    CHECK(a.param_groups()[0].options().get_lr() == b.param_groups()[0].options().get_lr());
  }
}

TEST_CASE("optim: LR schedulers validate their arguments") {
  optim::SGD opt(groups_with_lrs({0.1}), optim::SGDOptions(0.1));
  CHECK_THROWS_AS(optim::StepLR(opt, 0), Error);
  CHECK_THROWS_AS(optim::CosineAnnealingLR(opt, 0), Error);
  CHECK_THROWS_AS(optim::LinearLR(opt, 0.0), Error);
  CHECK_THROWS_AS(optim::cosine_with_warmup(opt, 10, 10), Error);
}
