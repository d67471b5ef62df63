// nccl_communicator.h - the Communicator (communicator.h) between processes, one GPU each, over NCCL
// (ncclCommInitRank, ncclAllReduce, ncclBroadcast), as torch.distributed's "nccl" backend.
//
// Streams (what torch's ProcessGroupNCCL does): every collective runs on the communicator's own
// communication stream (created non-blocking), so that a gradient bucket's all-reduce overlaps with
// the backward kernels still running on cuda::stream(). all_reduce_async:
//   1. records an event on cuda::stream() after the kernels that wrote `t`;
//   2. makes the communication stream wait on it;
//   3. queues ncclAllReduce in place on the communication stream, then records a "done" event;
// and Work::wait() makes cuda::stream() wait on "done": kernels queued afterwards see the result.
// Neither call blocks the host.
//
// The caching allocator is stream-ordered on cuda::stream() only (core/cuda/runtime.h): a block freed
// by the host may be handed to the next kernel queued there, while NCCL on the other stream still
// reads or writes it. So the Work keeps the tensor (its storage) alive until wait(); its destructor
// does wait() when nobody did, so the block is returned only after cuda::stream() is ordered after
// the collective. A caller must not write `t` between all_reduce_async and wait() (communicator.h),
// and a Work must not outlive its communicator (wait() asks the communicator for NCCL's async error).
// NCCL does not compare the ranks' arguments: a shape or dtype that differs between ranks is not
// the Error of communicator.h here but a hang or garbage; the in-process group (tests) checks it.
//
// Failure: NCCL has no notion of a rank that died; its peers would wait in the kernel forever. So the
// program must agree to stop (examples/05_unet3d: a reduced stop flag every step) before a rank leaves,
// and the launcher kills ranks that outlive a failed one. Every NCCL or CUDA call is checked: the
// error names the call and ncclGetErrorString's text.
//
// Built when HALFGRAD_NCCL is on (CMake finds nccl.h and libnccl in the CUDA toolkit); otherwise the
// functions below throw halfgrad::Error saying so. libnccl.so.2 is loaded on first use (dlopen:
// LD_LIBRARY_PATH, then the path CMake found), not linked, so programs start without it; where it
// cannot be loaded, the functions below throw "nccl: cannot load libnccl.so.2 (...)".
#pragma once
#include <memory>

#include "dist/communicator.h"
#include "dist/rendezvous.h"

namespace halfgrad::dist {

/// True when halfgrad was built with NCCL (HALFGRAD_NCCL).
bool nccl_compiled();

/// A fresh ncclUniqueId (ncclGetUniqueId; 128 bytes) for rank 0 to hand to the others
/// (rendezvous.h). Throws halfgrad::Error without NCCL, or when NCCL fails (its message).
Blob nccl_unique_id();

/// This process's member of the NCCL group `unique_id` names (every rank passes rank 0's bytes), on
/// the current CUDA device (device 0 of CUDA_VISIBLE_DEVICES: the launcher gives each rank one GPU).
/// Blocks until all `world_size` ranks have joined (ncclCommInitRank). Throws halfgrad::Error for
/// rank outside [0, world_size), a unique_id that is not 128 bytes, no CUDA device, a build without
/// NCCL, or an NCCL failure (naming the call and ncclGetErrorString).
std::shared_ptr<Communicator> make_nccl_communicator(int rank, int world_size, const Blob& unique_id);

/// Rendezvous and join in one: rank 0 makes the id, rendezvous(config, id) spreads it, every rank
/// joins. world_size 1 needs no rendezvous (and no file or port).
std::shared_ptr<Communicator> make_nccl_communicator(const RendezvousConfig& config);

}  // namespace halfgrad::dist
