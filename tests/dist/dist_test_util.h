// dist_test_util.h - what the tests/dist/ cases share: running a function on N threads as the N ranks
// of an in-process group, guarded against a hang.
#pragma once
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "dist/in_process_communicator.h"

namespace halfgrad::testing {

/// run_in_process_ranks with a 20 s collective timeout, and a 120 s guard on the whole run: a hang is
/// reported and ends the test program (a thread blocked forever cannot be joined), instead of
/// stalling CI. Rethrows what run_in_process_ranks throws.
template <typename F>
void run_ranks(int world_size, F fn) {
  auto done = std::async(std::launch::async, [&] {
    dist::run_in_process_ranks(world_size, fn, std::chrono::seconds(20));
  });
  if (done.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    std::fprintf(stderr, "tests/dist: %d ranks still running after 120 s: a collective hangs\n", world_size);
    std::_Exit(1);
  }
  done.get();
}

}  // namespace halfgrad::testing
