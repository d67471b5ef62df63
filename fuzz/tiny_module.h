// tiny_module.h - the module the checkpoint fuzzer loads into, and whose checkpoint is one of its
// seeds (fuzz/make_corpus.cpp): a child "head" with one parameter and one buffer (names
// head.weight and head.running_mean), so a load succeeds only for a file that matches it exactly.
#pragma once
#include <memory>

#include "nn/module.h"

namespace halfgrad::fuzz {

struct TinyModule : nn::Module {
  TinyModule() : nn::Module("TinyModule") {
    auto head = std::make_shared<nn::Module>("Head");
    head->register_parameter("weight", Tensor::zeros({3, 2, 1, 1, 1}));
    head->register_buffer("running_mean", Tensor::zeros({2}));
    register_module("head", head);
  }
};

}  // namespace halfgrad::fuzz
