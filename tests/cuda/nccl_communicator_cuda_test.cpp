// The NCCL communicator (dist/nccl_communicator.h) at world size 1, on one GPU: every dtype's sum and
// max come back bit-identical (one rank: the reduction is the identity), broadcast and barrier
// return, and a chain kernel -> all_reduce_async -> wait -> kernel on 16 M floats gives the exact
// values. At world size 1 NCCL's reduction is the identity, so a collective misordered against the
// kernels would still read and write the same values: this checks the event plumbing runs and keeps
// the results, not the cross-stream race itself, which needs 2 GPUs (examples/05_unet3d --gpus 2).
// Skipped without a GPU (CUDA_TEST_CASE) and, in a build without NCCL, the error is checked instead.
#include "tests/cuda/cuda_test.h"

#include <vector>

#include "dist/nccl_communicator.h"
#include "ops/elementwise/elementwise.h"
#include "tests/check_error.h"

using namespace halfgrad;
using namespace halfgrad::dist;
using testing::random_tensor;
using testing::to_cuda;

#if HALFGRAD_NCCL

namespace {
std::shared_ptr<Communicator> solo() { return make_nccl_communicator(RendezvousConfig{}); }

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.copy_to(Device::CPU);
  const uint8_t* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}
}  // namespace

CUDA_TEST_CASE("nccl world size 1: all_reduce sum and max of f32, f16, bf16, f64, int64 (70001,) keep the bits") {
  auto comm = solo();
  CHECK(comm->rank() == 0);
  CHECK(comm->world_size() == 1);
  CHECK(std::string(comm->backend()) == "nccl");
  for (Dtype dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(reduce_op_name(op));
      const Tensor host = dt == kInt64 ? Tensor::from_labels(std::vector<int64_t>(70001, -7), {70001})
                                       : random_tensor({70001}, 13, kFloat32).cast_copy(dt);
      Tensor t = to_cuda(host);
      comm->all_reduce(t, op);
      CHECK(bytes_of(t) == bytes_of(host));
    }
  }
}

CUDA_TEST_CASE("nccl world size 1: all_reduce_async orders after the kernel before it and before the kernel after wait") {
  auto comm = solo();
  // 16 M floats: each elementwise kernel runs long enough that a collective not ordered after it on
  // the other stream would start early.
  const Shape s{1 << 24};
  Tensor x = to_cuda(random_tensor(s, 5));
  Tensor t = ops::affine(x, 2.0, 1.0);  // queued on cuda::stream(); the collective must see its output
  auto work = comm->all_reduce_async(t, ReduceOp::kSum);
  work->wait();
  Tensor after = ops::affine(t, 3.0, 0.0);  // must see the collective's result
  const std::vector<float> xs = x.to_float_vector(), got = after.to_float_vector();
  int64_t bad = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    if (got[i] != (xs[i] * 2.0f + 1.0f) * 3.0f) ++bad;
  CHECK(bad == 0);
  work->wait();  // a second wait does nothing
}

CUDA_TEST_CASE("nccl world size 1: broadcast from root 0 and barrier return; a Work dropped unwaited is safe") {
  auto comm = solo();
  const Tensor host = random_tensor({4, 8, 3, 3, 3}, 9, kFloat16);
  Tensor t = to_cuda(host, MemoryFormat::ChannelsLast3d);
  comm->broadcast(t, 0);
  CHECK(bytes_of(t) == bytes_of(to_cuda(host, MemoryFormat::ChannelsLast3d)));
  comm->barrier();
  {
    Tensor tmp = to_cuda(random_tensor({1000}, 3));
    comm->all_reduce_async(tmp, ReduceOp::kMax);  // destroyed without wait(): the destructor orders it
  }
  comm->barrier();
}

CUDA_TEST_CASE("nccl: bad arguments are refused by name") {
  auto comm = solo();
  Tensor cpu = random_tensor({4}, 1);
  testing::check_error([&] { comm->all_reduce(cpu, ReduceOp::kSum); }, {"all_reduce (nccl)", "CPU"});
  Tensor gpu = to_cuda(cpu);
  testing::check_error([&] { comm->broadcast(gpu, 1); }, {"broadcast (nccl)", "root 1"});
  testing::check_error([&] { make_nccl_communicator(0, 1, Blob(5)); }, {"make_nccl_communicator", "5 bytes", "128"});
  testing::check_error([&] { make_nccl_communicator(2, 2, nccl_unique_id()); }, {"rank 2 of world size 2"});
}

#else

TEST_CASE("nccl: a build without NCCL says so") {
  CHECK_FALSE(nccl_compiled());
  testing::check_error([] { make_nccl_communicator(RendezvousConfig{}); }, {"make_nccl_communicator", "without NCCL"});
  testing::check_error([] { nccl_unique_id(); }, {"nccl_unique_id", "without NCCL"});
}

#endif
