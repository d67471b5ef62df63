#include "nn/containers.h"

#include "core/error.h"

namespace halfgrad::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = (*m)(y);  // through operator(): per-module marks apply
  return y;
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  HG_CHECK(i < modules_.size(), "Sequential: index " << i << " out of range for " << modules_.size() << " modules");
  return modules_[i];
}

std::shared_ptr<Module> ModuleList::operator[](size_t i) const {
  HG_CHECK(i < modules_.size(), "ModuleList: index " << i << " out of range for " << modules_.size() << " modules");
  return modules_[i];
}

}  // namespace halfgrad::nn
