// scaler_agreement.h - GradScaler's inf/NaN flag agreed over the ranks of a Communicator.
//
// set_communicator(scaler, comm) installs GradScaler::set_found_inf_all_reduce with an all_reduce(kMax)
// over `comm`: unscale_ (and step, which calls it) then MAX-reduces its found_inf flag, so every rank
// skips the same steps and keeps the same scale and growth tracker (amp/grad_scaler.h explains the
// flag, and why the scaler takes a function: dist sits above amp). For CUDA gradients the flag stays
// on the device (the NCCL all-reduce is queued on the stream, no host synchronisation added); the
// host reads it where it already did (step()'s one 4-byte copy). A null `comm` removes the agreement.
// Every rank must call it (or none): the flag's reduction is a collective inside unscale_.
#pragma once
#include <memory>

#include "amp/grad_scaler.h"
#include "dist/communicator.h"

namespace halfgrad::dist {

void set_communicator(amp::GradScaler& scaler, std::shared_ptr<Communicator> comm);

}  // namespace halfgrad::dist
