// scaler_agreement.cpp - see scaler_agreement.h.
#include "dist/scaler_agreement.h"

namespace halfgrad::dist {

void set_communicator(amp::GradScaler& scaler, std::shared_ptr<Communicator> comm) {
  if (!comm) {
    scaler.set_found_inf_all_reduce(nullptr);
    return;
  }
  scaler.set_found_inf_all_reduce([comm](Tensor& flag) { comm->all_reduce(flag, ReduceOp::kMax); });
}

}  // namespace halfgrad::dist
