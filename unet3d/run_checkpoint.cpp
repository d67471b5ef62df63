// run_checkpoint.cpp - see run_checkpoint.h.
#include "unet3d/run_checkpoint.h"

#include <chrono>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/json_checked.h"
#include "core/safetensors.h"
#include "unet3d/run_folder.h"
#include "nn/checkpoint.h"

namespace unet3d_app {

using namespace halfgrad;

namespace {

const char* const kModelPrefix = "model.";
const char* const kOptimPrefix = "optim.";

std::string path_in(const std::string& run_dir, const char* file) { return run_dir + "/" + file; }

uint64_t bytes_of(const NamedTensors& ts) {
  uint64_t n = 0;
  for (const auto& [name, t] : ts) n += t.nbytes();
  return n;
}

}  // namespace

std::string RunCheckpointWrite::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "2 files, " << human_bytes(bytes) << ", " << seconds << " s";
  return os.str();
}

RunCheckpointWrite save_run_checkpoint(const std::string& run_dir, const nn::Module& model, const optim::Optimizer& opt,
                                       const amp::GradScaler& scaler, const nlohmann::json& model_meta,
                                       const nlohmann::json& train_meta) {
  const auto t0 = std::chrono::steady_clock::now();
  nn::CheckpointState state;
  for (const auto& [n, t] : model.named_parameters()) state.parameters.emplace_back(kModelPrefix + n, t);
  for (const auto& [n, t] : model.named_buffers()) state.buffers.emplace_back(kModelPrefix + n, t);
  const nlohmann::json optimizer = opt.state_dict(state.extra_tensors, kOptimPrefix);
  state.extra = {{"optimizer", optimizer}, {"scaler", scaler.state_dict()}, {"train", train_meta}};
  nn::write_checkpoint(path_in(run_dir, kTrainingStateFile), state);  // first: the resume's source
  nn::save_checkpoint(path_in(run_dir, kModelFile), model, model_meta);
  RunCheckpointWrite w;
  w.bytes = 2 * (bytes_of(state.parameters) + bytes_of(state.buffers)) + bytes_of(state.extra_tensors);
  w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return w;
}

nlohmann::json read_run_training_meta(const std::string& run_dir) {
  const std::string path = path_in(run_dir, kTrainingStateFile);
  const nlohmann::json extra = nn::read_checkpoint_metadata(path);
  const json_checked::Field root(extra, path);
  root.require_object("halfgrad's training state {\"optimizer\", \"scaler\", \"train\"}");
  return root["train"].require_object().value();
}

nlohmann::json load_run_checkpoint(const std::string& run_dir, nn::Module& model, optim::Optimizer& opt,
                                   amp::GradScaler& scaler) {
  const std::string path = path_in(run_dir, kTrainingStateFile);
  nn::CheckpointState file = nn::read_checkpoint(path);
  if (!file.checksummed)
    std::cout << "note: " << path << " carries no checksum (saved before 2026-12-04): its tensors are checked for "
                 "NaN/inf but their bytes are not verified" << std::endl;
  const json_checked::Field root(file.extra, path);
  root.require_object("halfgrad's training state {\"optimizer\", \"scaler\", \"train\"}");
  const nlohmann::json train = root["train"].require_object().value();
  // The model's tensors without their "model." prefix; anything else in those lists is an error.
  nn::CheckpointState weights;
  weights.kinds_from_file = file.kinds_from_file;
  const std::string prefix = kModelPrefix;
  for (auto* list : {&file.parameters, &file.buffers}) {
    NamedTensors& dst = list == &file.parameters ? weights.parameters : weights.buffers;
    for (auto& [n, t] : *list) {
      HG_CHECK(n.compare(0, prefix.size(), prefix) == 0,
               "load_run_checkpoint: " << path << ": tensor '" << n << "' is neither a model tensor (\"model.<name>\") "
                                       << "nor an optimizer tensor (\"optim.<...>\")");
      dst.emplace_back(n.substr(prefix.size()), t);
    }
  }
  nn::load_into(weights, path, model);
  try {  // AdamW's state read as SGD's (or the reverse) fails in the optimizer, which knows no file name
    opt.load_state_dict(root["optimizer"].require_object().value(), file.extra_tensors);
  } catch (const Error& e) {
    throw Error("load_run_checkpoint: " + path + ": its optimizer state does not fit this run's optimizer (the "
                "options saved with the run choose it): " + e.what());
  }
  scaler.load_state_dict(root["scaler"].value());
  return train;
}

}  // namespace unet3d_app
