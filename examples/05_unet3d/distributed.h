// distributed.h - halfgrad-unet3d train on several GPUs (issue 13; docs/distributed.md, "Launching").
//
// Two ways to start a data-parallel run, one process per GPU:
//   --gpus N       (one host) the process the user started spawns N children: fork + exec of
//                  /proc/self/exe with the same arguments minus --gpus, each with RANK, WORLD_SIZE,
//                  LOCAL_RANK, CUDA_VISIBLE_DEVICES (one entry of the caller's list, or the index) and
//                  HALFGRAD_RENDEZVOUS_FILE (a fresh file in the run folder). It waits for all of
//                  them; when one exits non-zero it gives the others a grace period (30 s;
//                  HALFGRAD_LAUNCH_GRACE_SECONDS) to stop by themselves, then kills the rest and exits
//                  1 naming the first rank that failed and its status. `--gpus 1` runs in-process.
//   torchrun etc.  (multi-host) RANK and WORLD_SIZE already in the environment (torchrun
//                  --nproc_per_node, mpirun with the variables exported, a job script): the process
//                  joins through the TCP rendezvous on MASTER_ADDR:MASTER_PORT (dist/rendezvous.h).
//                  It takes GPU LOCAL_RANK of those CUDA_VISIBLE_DEVICES lists (all, when unset).
//
// What each rank does (trainer.cpp): the same seed, so the same global batch at every step; rank r
// builds samples [r * B/N, (r+1) * B/N) of it (rank_batch_slice; B = --batch, the GLOBAL batch, as
// PyTorch's DistributedSampler keeps per-rank batches equal). A global batch is drawn with replacement
// at every step (data.h), so every rank has the same number of steps and no padding is ever needed
// (DistributedSampler pads a permutation by wrapping around; here there is no permutation to pad).
// The model is wrapped in dist::DistributedDataParallel (gradients averaged over the ranks: the
// global batch's mean gradient), GradScaler's inf/NaN flag is agreed through the communicator. Only
// rank 0 writes the run folder (checkpoints, metrics, curves, reports) and prints; the other ranks
// print only their errors, prefixed "[rank R]".
//
// Agreeing to stop (StepAgreement): NCCL cannot tell a rank that its peer died, so before the first
// collective of every step (DDP's gradient buckets in backward) every rank all-reduces one small
// vector: its loss and a "failed" flag per rank. A rank whose batch, forward or loss threw holds the
// error until then; if any flag is set, every rank throws ("rank R failed: ..." on R, "rank R failed;
// stopping" on the others) instead of waiting in a collective forever. The same at the end of each
// epoch (rank 0's validation and checkpoint; --max-minutes, by rank 0's clock), and once after rank
// 0's run-folder check. An error inside backward or the optimizer step (in the middle of the
// collectives), or in the setup between the run-folder check and the first step (data, memory, DDP's
// broadcast), cannot be agreed on: that rank exits, and the launcher's grace period ends the others.
//
// World size 1 (no --gpus, or --gpus 1, and no WORLD_SIZE) uses none of this: no DDP, no
// agreement, the single-GPU program bit for bit. HALFGRAD_FORCE_DISTRIBUTED=1 runs the distributed
// path anyway with one rank (an NCCL group of one, DDP, the agreements, on --device cuda): the way to
// test it on a machine with one GPU. Its checkpoint must be the same bytes as without it with
// --no-cuda-graph (one rank's all-reduce is the identity and DDP divides by nothing at world size 1);
// the single-GPU default, --cuda-graph, runs capturable AdamW, whose device-side scalars may differ
// from the eager path's in a last bit (optim/adamw.h).
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace unet3d_app {

/// Rank `rank`'s samples [begin, end) of each global batch of `global_batch` samples.
struct BatchSlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
/// Contiguous equal slices in rank order. Throws halfgrad::Error naming --batch and the world size
/// when global_batch is not a multiple of world_size (the per-rank batch would differ between ranks).
BatchSlice rank_batch_slice(int64_t global_batch, int world_size, int rank);

/// This process's place in the run: rank 0 of 1 (and no communicator) unless launched as a rank.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<halfgrad::dist::Communicator> comm;  // NCCL; null for world size 1 (unless forced)
  /// The distributed path (DDP, agreements): world size > 1, or HALFGRAD_FORCE_DISTRIBUTED=1.
  bool distributed() const { return comm != nullptr; }
  bool is_root() const { return rank == 0; }
};

/// With RANK and WORLD_SIZE in the environment (set by launch_ranks or torchrun) and world size > 1,
/// or with HALFGRAD_FORCE_DISTRIBUTED=1: picks this rank's GPU (CUDA_VISIBLE_DEVICES, see the file
/// comment; before CUDA is first used), rendezvous and NCCL (dist/nccl_communicator.h). Otherwise
/// RankContext{}. Throws halfgrad::Error
/// for bad variables (naming them), for `device` other than "cuda" in a multi-rank run, and for
/// NCCL's failures.
RankContext join_ranks_from_env(const std::string& device);

/// The CUDA_VISIBLE_DEVICES value for local rank `local_rank`: entry `local_rank` of `visible` (a
/// comma list; a single entry is taken as already chosen by the launcher), or the index itself when
/// `visible` is null or empty. Throws halfgrad::Error when the list is too short.
std::string visible_device_for(const char* visible, int local_rank);

/// `args` without "--gpus N" / "--gpus=N" (what each child of launch_ranks is started with).
std::vector<std::string> args_without_gpus(const std::vector<std::string>& args);

/// The --gpus N parent (see the file comment): `args` are the program's arguments without argv[0];
/// `run_dir` the run folder (created if absent) for the rendezvous file. Returns the exit status:
/// 0 when every rank exited 0, else 1 (the message, on stderr, names the first rank that failed).
/// Throws halfgrad::Error when a child cannot be started or CUDA_VISIBLE_DEVICES lists fewer than
/// `gpus` devices.
int launch_ranks(int gpus, const std::vector<std::string>& args, const std::string& run_dir);

/// The agreement of the file comment. Every rank calls agree() at the same points of the run.
class StepAgreement {
 public:
  explicit StepAgreement(const RankContext& ctx) : ctx_(ctx) {}
  /// Runs fn() and keeps what it throws for agree() (in a world of 1: just fn(), whose exception
  /// propagates). Once an error is held, later guard() calls skip fn until agree().
  template <typename F>
  void guard(F&& fn) {
    if (!ctx_.distributed()) return fn();
    if (!error_.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      if (error_.empty()) error_ = e.what()[0] ? e.what() : "an exception without a message";
    }
  }
  /// A collective: sums `values` over the ranks (identical on every rank afterwards) and, when any
  /// rank's guard() caught an error since the last agree(), throws halfgrad::Error on every rank:
  /// "rank R failed at WHERE: <its message>" on R, "stopping at WHERE: rank R failed (its message is
  /// on its stderr)" on the others. World size 1: returns `values`.
  std::vector<double> agree(const std::vector<double>& values, const std::string& where);

 private:
  const RankContext& ctx_;
  std::string error_;  // this rank's, held until agree()
};

}  // namespace unet3d_app
