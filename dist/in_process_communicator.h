// in_process_communicator.h - running a function on N threads as the N ranks of an in-process group
// (make_in_process_group in communicator.h), as the tests and CPU data-parallel training do.
//
// How the in-process group works (in_process_communicator.cpp): one shared state behind a mutex and a
// condition variable. Every collective a rank calls gets the rank's next sequence number; rank r's
// k-th collective meets every other rank's k-th collective in "round" k. A rank deposits a copy of its
// tensor (and its arguments) in the round and returns at once (all_reduce_async) or waits (broadcast,
// barrier, Work::wait). The rank whose deposit completes the round checks that every rank's arguments
// agree, then sums (or maxes) the deposits in rank order 0..n-1 into one result buffer, so every rank
// gets identical bits, every run; each rank copies the result out in wait(). A round is freed once
// every rank has collected it.
//
// Failure: a rank that throws inside a collective, whose Communicator is destroyed, or that waits past
// the group's timeout marks the group broken and wakes every waiting rank, which throws
// GroupBrokenError "rank R failed: ..." (a round already complete is still delivered).
#pragma once
#include <chrono>
#include <functional>

#include "core/error.h"
#include "dist/communicator.h"

namespace halfgrad::dist {

/// What a rank throws when another rank of its group failed (the other rank's reason in what()).
class GroupBrokenError : public Error {
 public:
  explicit GroupBrokenError(const std::string& msg) : Error(msg) {}
};

/// Runs fn(communicator) on `world_size` threads, thread i as rank i of a fresh in-process group, and
/// joins them. A rank whose fn throws has its communicator destroyed at once, so the other ranks stop
/// with GroupBrokenError instead of waiting for it. Afterwards rethrows the first error that is not a
/// GroupBrokenError (the cause), or else the first error. world_size >= 1.
void run_in_process_ranks(int world_size, const std::function<void(Communicator&)>& fn,
                          std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace halfgrad::dist
