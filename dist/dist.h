// dist/dist.h - data-parallel training (issue 13, docs/distributed.md): the communicator interface
// (communicator.h), threads as ranks (in_process_communicator.h) and DistributedDataParallel.
#pragma once
#include "dist/communicator.h"
#include "dist/in_process_communicator.h"
#include "dist/distributed_data_parallel.h"
#include "dist/nccl_communicator.h"
#include "dist/rendezvous.h"
#include "dist/scaler_agreement.h"
