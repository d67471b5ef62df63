#include "examples/05_unet3d/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "unet3d/run_folder.h"

namespace unet3d_app {

using halfgrad::amp::OptLevel;

namespace {

// Element counts per sample, for a U-Net with widths c_0..c_{L-1}, bottleneck b, K classes, on V
// voxels (v_l = V / 8^l at level l). Every block is conv, norm, ReLU, conv, norm, ReLU: six tensors
// of c x v, of which the tape keeps four (each conv's output, which the norm saves, and each ReLU's
// output, which the ReLU and the next conv save; the norm's output dies when the ReLU has read it:
// autograd/node.h's InputEdge).
//   training  what the tape keeps at the end of the forward: encoder blocks 4 c_l v_l + the pooled
//             c_l v_l / 8; bottleneck 4 b v_L; decoder concatenation 2 c_l v_l (the up-conv's output
//             dies in it) and block 4 c_l v_l; head and loss 3 K V; the input V.
//   forward   without a tape a tensor lives until its last reader: the skips (c_l v_l each) while
//             the decoder runs, plus the working set of the widest level-0 step (concatenation 2 c_0
//             V, the block's conv in and out 2 c_0 V, up-conv c_0 V) and the logits and argmax 2 K V.
double training_elements(const halfgrad::nn::UNet3dOptions& m, double voxels) {
  double e = 0, v = voxels;
  for (int64_t c : m.channels()) {
    e += (4 + 0.125 + 6) * static_cast<double>(c) * v;
    v /= 8;
  }
  e += 4 * static_cast<double>(m.bottleneck()) * v;
  return e + (3 * static_cast<double>(m.num_classes()) + 1) * voxels;
}

double forward_elements(const halfgrad::nn::UNet3dOptions& m, double voxels) {
  double e = 0, v = voxels;
  for (int64_t c : m.channels()) {
    e += static_cast<double>(c) * v;
    v /= 8;
  }
  const double c0 = static_cast<double>(m.channels().front());
  return e + 5 * c0 * voxels + (2 * static_cast<double>(m.num_classes()) + 1) * voxels;
}

// Bytes per element of the counts above, by opt level: the dtype of the activations, the casts that
// autocast saves beside them, and the gradient buffers alive during backward (which peaks early in
// backward, with most activations still held and the widest gradients being made). Calibrated with
// tests/examples/05_unet3d/memory_estimate_test.cpp's configurations (peak_allocated_bytes of core/allocator.h,
// one training step after the optimizer state exists, then a validation forward):
// The measured peaks and each configuration's estimate / measured ratio: bench/NOTES.md, "Lab notes
// moved out of the code".
// The coefficients below carry a margin of 9-21% over those training peaks.
constexpr double kTrainBytesPerElement[4] = {4.4, 3.05, 3.1, 3.1};  // O0, O1, O2, O3
constexpr double kForwardBytesPerElement[4] = {4.4, 4.0, 4.0, 4.0};
// Model state, bytes per parameter (see the header).
constexpr double kStateBytesPerParameter[4] = {16, 18, 16, 8};
constexpr double kWeightBytesPerParameter[4] = {4, 4, 2, 2};  // eval: the parameters only

uint64_t to_bytes(double b) {
  if (!(b < 1.8e19)) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(std::ceil(b));
}

double voxels_of(const std::array<int64_t, 3>& s) {
  return static_cast<double>(s[0]) * static_cast<double>(s[1]) * static_cast<double>(s[2]);
}

std::string shape_text(const std::array<int64_t, 3>& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
}

uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}

}  // namespace

uint64_t MemoryEstimate::total() const {
  return saturating_add(saturating_add(model_state, std::max(training_step, forward)), augment_volumes);
}

std::string MemoryEstimate::describe() const {
  std::ostringstream os;
  os << human_bytes(total()) << " (model state " << human_bytes(model_state);
  if (!step_what.empty()) os << ", training step of " << step_what << " " << human_bytes(training_step);
  os << ", forward of " << forward_what << " " << human_bytes(forward);
  if (augment_volumes > 0) os << ", training volumes on the GPU for --augment-device cuda " << human_bytes(augment_volumes);
  os << ")";
  return os.str();
}

MemoryEstimate estimate_train_memory(const halfgrad::nn::UNet3dOptions& model, int64_t num_parameters,
                                     const std::array<int64_t, 3>& step_shape, int64_t batch,
                                     const std::array<int64_t, 3>& forward_shape, OptLevel level, bool on_cuda) {
  HG_CHECK(batch >= 1, "estimate_train_memory: batch must be >= 1, got " << batch);
  const int l = static_cast<int>(level);
  const double p = static_cast<double>(num_parameters);
  MemoryEstimate m;
  m.model_state = to_bytes(kStateBytesPerParameter[l] * p);
  m.training_step =
      to_bytes(static_cast<double>(batch) * kTrainBytesPerElement[l] * training_elements(model, voxels_of(step_shape)));
  m.forward = to_bytes(kForwardBytesPerElement[l] * forward_elements(model, voxels_of(forward_shape)));
  m.step_what = "batch " + std::to_string(batch) + " at " + shape_text(step_shape);
  m.forward_what = shape_text(forward_shape);
  return m;
}

MemoryEstimate estimate_eval_memory(const halfgrad::nn::UNet3dOptions& model, int64_t num_parameters,
                                    const std::array<int64_t, 3>& forward_shape, OptLevel level) {
  const int l = static_cast<int>(level);
  MemoryEstimate m;
  m.model_state = to_bytes(kWeightBytesPerParameter[l] * static_cast<double>(num_parameters));
  m.forward = to_bytes(kForwardBytesPerElement[l] * forward_elements(model, voxels_of(forward_shape)));
  m.forward_what = shape_text(forward_shape);
  return m;
}

// "0::/user.slice/..." in /proc/self/cgroup names the process's cgroup v2 folder; its memory.max
// ("max" when unlimited) minus memory.current is what the OOM killer lets the process still take.
static bool cgroup_headroom(uint64_t& bytes) {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return false;
  const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
  std::ifstream max_f(dir + "/memory.max"), cur_f(dir + "/memory.current");
  std::string max_s;
  uint64_t cur = 0;
  if (!(max_f >> max_s) || max_s == "max" || !(cur_f >> cur)) return false;
  const uint64_t max = std::stoull(max_s);
  bytes = max > cur ? max - cur : 0;
  return true;
}

MemoryAvailable available_memory(const std::string& device) {
  MemoryAvailable a;
  if (device == "cuda") {
    const halfgrad::cuda::MemoryInfo info = halfgrad::cuda::memory_info();
    const halfgrad::cuda::AllocatorStats st = halfgrad::cuda::allocator_stats();
    a.bytes = info.free_bytes + (st.reserved_bytes - st.allocated_bytes);
    a.source = "cudaMemGetInfo's free bytes and halfgrad's cached blocks, of " + human_bytes(info.total_bytes);
    // Under a memory limit (HALFGRAD_CUDA_MEMORY_LIMIT_MB), reserved memory never passes it, so live
    // bytes never pass it either: what is left is at most the limit less what is live.
    const uint64_t limit = halfgrad::cuda::memory_limit();
    if (limit != 0) {
      const uint64_t left = limit > st.allocated_bytes ? limit - st.allocated_bytes : 0;
      if (left < a.bytes) {
        a.bytes = left;
        a.source = "the CUDA allocator's memory limit of " + human_bytes(limit) + " less the live tensors";
      }
    }
    return a;
  }
  HG_CHECK(device == "cpu", "available_memory: device must be cpu or cuda, got '" << device << "'");
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  bool found = false;
  while (meminfo >> key) {
    if (key == "MemAvailable:" && (meminfo >> kib)) { found = true; break; }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (found) {
    a.bytes = kib * 1024;
    a.source = "MemAvailable in /proc/meminfo";
  } else {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    HG_CHECK(pages > 0 && page > 0, "available_memory: neither /proc/meminfo's MemAvailable nor "
                                    "sysconf(_SC_AVPHYS_PAGES) tells the free memory; pass --no-memory-check");
    a.bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    a.source = "sysconf(_SC_AVPHYS_PAGES)";
  }
  uint64_t cg = 0;
  if (cgroup_headroom(cg) && cg < a.bytes) {
    a.bytes = cg;
    a.source = "the cgroup's memory.max - memory.current";
  }
  return a;
}

// The cgroup v2 memory.max of this process (false when none, or "max").
static bool cgroup_limit(uint64_t& bytes) {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return false;
  std::ifstream max_f("/sys/fs/cgroup" + (path == "/" ? std::string() : path) + "/memory.max");
  std::string max_s;
  if (!(max_f >> max_s) || max_s == "max" || max_s.empty() ||
      !std::all_of(max_s.begin(), max_s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  bytes = std::stoull(max_s);
  return true;
}

MemoryAvailable total_memory(const std::string& device) {
  MemoryAvailable a;
  if (device == "cuda") {
    HG_CHECK(halfgrad::cuda::is_available(),
             "total_memory: no usable GPU here (" << halfgrad::cuda::device_description() << ")");
    a.bytes = halfgrad::cuda::memory_info().total_bytes;
    a.source = "cudaMemGetInfo's total of " + halfgrad::cuda::device_description();
    return a;
  }
  HG_CHECK(device == "cpu", "total_memory: device must be cpu or cuda, got '" << device << "'");
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  bool found = false;
  while (meminfo >> key) {
    if (key == "MemTotal:" && (meminfo >> kib)) { found = true; break; }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (found) {
    a.bytes = kib * 1024;
    a.source = "MemTotal in /proc/meminfo";
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    HG_CHECK(pages > 0 && page > 0, "total_memory: neither /proc/meminfo's MemTotal nor sysconf(_SC_PHYS_PAGES) "
                                    "tells the machine's memory; pass --memory-gib");
    a.bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    a.source = "sysconf(_SC_PHYS_PAGES)";
  }
  uint64_t cg = 0;
  if (cgroup_limit(cg) && cg < a.bytes) {
    a.bytes = cg;
    a.source = "the cgroup's memory.max";
  }
  return a;
}

void check_memory(const MemoryEstimate& need, const MemoryAvailable& available, const std::string& cmd,
                  const std::string& device, const std::string& hint) {
  HG_CHECK(need.total() <= available.bytes,
           "halfgrad-unet3d " << cmd << ": this run needs about " << need.describe() << ", but the "
                              << (device == "cuda" ? "GPU" : "CPU") << " has " << human_bytes(available.bytes)
                              << " available (" << available.source << "); " << hint
                              << ", or pass --no-memory-check to start anyway");
}

}  // namespace unet3d_app
