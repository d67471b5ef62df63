// containers.h - Sequential and ModuleList (torch.nn.Sequential / torch.nn.ModuleList).
//
// Both register their elements as children named "0", "1", ... in push_back order, so a parameter
// of the third layer of a Sequential is "2.weight", as in PyTorch's state_dict.
//   Sequential  forward(x) = m_{n-1}( ... m_1(m_0(x)) ); an empty Sequential returns x.
//   ModuleList  holds modules that its owner calls itself; calling forward on it throws.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace halfgrad::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Appends `module` as child str(size()) and returns it, typed. Throws halfgrad::Error for null.
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }
  /// Chains the elements, calling each through Module::operator() (so an FP32-marked element runs in
  /// FP32 under autocast); the output of one is the input of the next.
  Tensor forward(const Tensor& x) override;
  size_t size() const { return modules_.size(); }
  /// Element i (throws halfgrad::Error when out of range).
  std::shared_ptr<Module> operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }
  size_t size() const { return modules_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace halfgrad::nn
