#include "examples/05_unet3d/distributed.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/tensor.h"
#include "dist/nccl_communicator.h"
#include "dist/rendezvous.h"

extern char** environ;

namespace unet3d_app {

using namespace halfgrad;

BatchSlice rank_batch_slice(int64_t global_batch, int world_size, int rank) {
  HG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
           "halfgrad-unet3d: rank " << rank << " of world size " << world_size << "; expected 0 <= rank < world size");
  HG_CHECK(global_batch >= world_size && global_batch % world_size == 0,
           "halfgrad-unet3d train: --batch " << global_batch << " is the global batch, split evenly over the "
                                             << world_size << " GPUs; expected a multiple of " << world_size
                                             << " (e.g. --batch " << world_size * std::max<int64_t>(1, global_batch / world_size)
                                             << ")");
  const int64_t per_rank = global_batch / world_size;
  return BatchSlice{rank * per_rank, (rank + 1) * per_rank};
}

std::string visible_device_for(const char* visible, int local_rank) {
  if (!visible || !*visible) return std::to_string(local_rank);
  std::vector<std::string> entries;
  std::stringstream ss(visible);
  for (std::string e; std::getline(ss, e, ',');)
    if (!e.empty()) entries.push_back(e);
  if (entries.size() == 1) return entries[0];  // one GPU given to this process: the launcher chose
  HG_CHECK(local_rank < static_cast<int>(entries.size()),
           "halfgrad-unet3d: CUDA_VISIBLE_DEVICES='" << visible << "' lists " << entries.size()
                                                     << " devices, but local rank " << local_rank
                                                     << " needs at least " << local_rank + 1);
  return entries[local_rank];
}

RankContext join_ranks_from_env(const std::string& device) {
  const dist::RendezvousConfig config = dist::RendezvousConfig::from_env();
  RankContext ctx;
  const char* force = std::getenv("HALFGRAD_FORCE_DISTRIBUTED");
  const bool forced = force && std::string(force) == "1";
  if (config.world_size == 1 && !forced) return ctx;
  HG_CHECK(device == "cuda", "halfgrad-unet3d train: "
                                 << (forced ? "HALFGRAD_FORCE_DISTRIBUTED=1" : "WORLD_SIZE=" + std::to_string(config.world_size))
                                 << " (a distributed launch) needs --device cuda: the ranks talk through NCCL, one "
                                    "GPU each; got --device " << device);
  // Before the first CUDA call: this process sees only its GPU, as device 0.
  const std::string mine = visible_device_for(std::getenv("CUDA_VISIBLE_DEVICES"), config.local_rank);
  ::setenv("CUDA_VISIBLE_DEVICES", mine.c_str(), 1);
  ctx.rank = config.rank;
  ctx.world_size = config.world_size;
  ctx.comm = dist::make_nccl_communicator(config);
  return ctx;
}

std::vector<std::string> args_without_gpus(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--gpus") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--gpus=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

double grace_seconds() {
  const char* g = std::getenv("HALFGRAD_LAUNCH_GRACE_SECONDS");
  if (!g || !*g) return 30;
  char* end = nullptr;
  const double v = std::strtod(g, &end);
  HG_CHECK(end && *end == '\0' && v >= 0 && v < 1e6,
           "halfgrad-unet3d: HALFGRAD_LAUNCH_GRACE_SECONDS='" << g << "'; expected seconds >= 0");
  return v;
}

}  // namespace

int launch_ranks(int gpus, const std::vector<std::string>& args, const std::string& run_dir) {
  HG_CHECK(gpus >= 2, "launch_ranks: " << gpus << " GPUs; expected >= 2 (--gpus 1 runs in this process)");
  const double grace = grace_seconds();
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  HG_CHECK(std::filesystem::is_directory(run_dir),
           "halfgrad-unet3d train --gpus " << gpus << ": cannot create the run folder " << run_dir << " ("
                                           << ec.message() << ") for the rendezvous file");
  // A fresh name per launch: an id left by an earlier launch must never be read.
  const std::string rdv = (std::filesystem::path(run_dir) / (".rendezvous." + std::to_string(::getpid()))).string();
  std::filesystem::remove(rdv, ec);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> devices;
  if (visible && *visible) {
    std::stringstream ss(visible);
    for (std::string e; std::getline(ss, e, ',');)
      if (!e.empty()) devices.push_back(e);
    HG_CHECK(static_cast<int>(devices.size()) >= gpus,
             "halfgrad-unet3d train --gpus " << gpus << ": CUDA_VISIBLE_DEVICES='" << visible << "' lists only "
                                             << devices.size() << " devices");
  } else {
    for (int r = 0; r < gpus; ++r) devices.push_back(std::to_string(r));
  }

  // Everything the children need is built before fork: after it, only exec.
  const std::vector<std::string> child_args = args_without_gpus(args);
  const std::map<std::string, bool> ours = {{"RANK", true}, {"WORLD_SIZE", true}, {"LOCAL_RANK", true},
                                            {"CUDA_VISIBLE_DEVICES", true}, {"HALFGRAD_RENDEZVOUS_FILE", true}};
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!ours.count(kv.substr(0, kv.find('=')))) base_env.push_back(kv);
  }
  // waitpid below needs the children's exit statuses: with SIGCHLD inherited as ignored the kernel
  // would reap them itself and waitpid would fail with ECHILD forever.
  ::signal(SIGCHLD, SIG_DFL);
  std::map<pid_t, int> rank_of;
  for (int r = 0; r < gpus; ++r) {
    std::vector<std::string> env = base_env;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(gpus));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    env.push_back("CUDA_VISIBLE_DEVICES=" + devices[r]);
    env.push_back("HALFGRAD_RENDEZVOUS_FILE=" + rdv);
    std::vector<char*> envp, argv;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe";
    argv.push_back(self.data());
    std::vector<std::string> a = child_args;
    for (std::string& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    HG_CHECK(pid >= 0, "halfgrad-unet3d train --gpus " << gpus << ": fork for rank " << r << " failed: "
                                                       << std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the ranks end with the launcher
      if (::getppid() != parent) ::_exit(1);
      ::execve(argv[0], argv.data(), envp.data());
      const char msg[] = "halfgrad-unet3d: exec of /proc/self/exe failed\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    rank_of[pid] = r;
  }

  using Clock = std::chrono::steady_clock;
  int first_failed = -1, first_status = 0;
  Clock::time_point kill_at{}, hard_kill_at{};
  bool termed = false;
  std::vector<int> killed;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0 && rank_of.count(pid)) {
      const int r = rank_of[pid];
      rank_of.erase(pid);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && first_failed < 0 && !termed) {
        first_failed = r;
        first_status = status;
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
        if (!rank_of.empty())
          std::cerr << "halfgrad-unet3d: rank " << r << " " << describe_status(status) << "; waiting up to " << grace
                    << " s for the other ranks to stop" << std::endl;
      }
      continue;
    }
    if (first_failed >= 0 && !termed && Clock::now() >= kill_at) {
      for (const auto& [p, r] : rank_of) {
        ::kill(p, SIGTERM);
        killed.push_back(r);
      }
      termed = true;
      hard_kill_at = Clock::now() + std::chrono::seconds(5);
    }
    if (termed && Clock::now() >= hard_kill_at)
      for (const auto& [p, r] : rank_of) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::filesystem::remove(rdv, ec);
  if (first_failed < 0) return 0;
  std::cerr << "error: halfgrad-unet3d train --gpus " << gpus << ": rank " << first_failed << " failed ("
            << describe_status(first_status) << ")";
  if (!killed.empty()) {
    std::cerr << "; killed rank";
    for (size_t i = 0; i < killed.size(); ++i) std::cerr << (i ? ", " : " ") << killed[i];
    std::cerr << " after the " << grace << " s grace period";
  }
  std::cerr << std::endl;
  return 1;
}

std::vector<double> StepAgreement::agree(const std::vector<double>& values, const std::string& where) {
  if (!ctx_.distributed()) return values;
  const int n = ctx_.world_size;
  std::vector<double> v = values;
  v.resize(values.size() + n, 0.0);
  if (!error_.empty()) v[values.size() + ctx_.rank] = 1;
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, kFloat64).copy_to(Device::CUDA);
  ctx_.comm->all_reduce(t, dist::ReduceOp::kSum);
  const std::vector<double> sum = t.to_double_vector();  // waits for the collective
  std::vector<int> failed;
  for (int r = 0; r < n; ++r)
    if (sum[values.size() + r] != 0) failed.push_back(r);
  if (!failed.empty()) {
    const std::string mine = error_;
    error_.clear();
    if (!mine.empty()) HG_FAIL("rank " << ctx_.rank << " failed at " << where << ": " << mine);
    std::ostringstream os;
    for (size_t i = 0; i < failed.size(); ++i) os << (i ? ", " : "") << failed[i];
    HG_FAIL("stopping at " << where << ": rank " << os.str() << " failed (its message is on its stderr)");
  }
  return std::vector<double>(sum.begin(), sum.begin() + static_cast<std::ptrdiff_t>(values.size()));
}

}  // namespace unet3d_app
