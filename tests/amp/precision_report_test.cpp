// The precision report: per-op dtype and list, casts charged to the op that asked, the dtype-pair
// totals of both passes, the loss-scale timeline, and the files (PNG when gnuplot is installed).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "autocast/autocast.h"
#include "amp/precision_report.h"
#include "core/error.h"
#include "ops/activation/activation.h"
#include "ops/conv/conv3d.h"
#include "ops/dropout/dropout.h"
#include "ops/shape/shape.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;

namespace {

const amp::OpPrecisionRow* find_row(const std::vector<amp::OpPrecisionRow>& rows, const std::string& op) {
  for (const amp::OpPrecisionRow& r : rows)
    if (r.op == op) return &r;
  return nullptr;
}

// One step of: sum(relu(conv3d(x, w, b))) under autocast, then backward.
void conv_step(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor loss;
  {
    amp::AutocastGuard autocast;
    loss = ops::sum(ops::relu(ops::conv3d(x, w, b)));
  }
  loss.backward();
}

}  // namespace

TEST_CASE("precision_report: float32 conv3d (1,1,4,4,4) x (2,1,3,3,3) under autocast, two steps") {
  Generator gen(1);
  Tensor x = Tensor::randn({1, 1, 4, 4, 4}, gen);
  Tensor w = Tensor::randn({2, 1, 3, 3, 3}, gen).set_requires_grad(true);
  Tensor b = Tensor::zeros({2}).set_requires_grad(true);
  amp::PrecisionRecorder report;
  for (int step = 0; step < 2; ++step) {
    amp::PrecisionRecorder::Observe observe(&report);
    conv_step(x, w, b);
  }
  CHECK(report.observed_scopes() == 2);
  const std::vector<amp::OpPrecisionRow> rows = report.op_rows();
  const amp::OpPrecisionRow* conv = find_row(rows, "conv3d");
  REQUIRE(conv);
  CHECK(conv->kind == amp::OpKind::Conv3d);
  CHECK(conv->list == amp::CastPolicy::Lower);
  CHECK(conv->autocast);
  CHECK(conv->dtype == kFloat16);
  CHECK(conv->calls == 2);
  CHECK(conv->casts.casts == 6);  // x, w, b to float16, each step
  CHECK(conv->casts.elements == 2 * (64 + 54 + 2));
  CHECK(conv->casts.bytes_moved() == 2 * (64 + 54 + 2) * (4 + 2));
  CHECK(conv->why().find("FP16 list") == 0);
  CHECK(&rows[0] == conv);  // the op that moved the most bytes comes first

  const amp::OpPrecisionRow* relu = find_row(rows, "relu");
  REQUIRE(relu);
  CHECK_FALSE(relu->kind.has_value());
  CHECK(relu->dtype == kFloat16);
  CHECK(relu->casts.casts == 0);
  CHECK(relu->why().find("asks no autocast list") == 0);

  const amp::OpPrecisionRow* sum = find_row(rows, "sum");
  REQUIRE(sum);
  CHECK(sum->list == amp::CastPolicy::Fp32);
  CHECK(sum->dtype == kFloat32);
  CHECK(sum->casts.casts == 0);  // reads relu's float16 output and accumulates in float32: no cast
  CHECK(find_row(rows, "to") == nullptr);

  // dtype pairs: forward float32 -> float16 for x, w, b; backward float16 -> float32 for the
  // gradients of w and b (x needs no gradient, so its cast has no backward).
  const auto& pairs = report.casts_by_dtype();
  using K = amp::PrecisionRecorder::CastKey;
  CHECK(pairs.size() == 2);
  CHECK(pairs.at(K{kFloat32, kFloat16, amp::CastPass::Forward}).casts == 6);
  CHECK(pairs.at(K{kFloat16, kFloat32, amp::CastPass::Backward}).casts == 4);
  CHECK(pairs.at(K{kFloat16, kFloat32, amp::CastPass::Backward}).elements == 2 * (54 + 2));
  CHECK(report.summary_text().find("conv3d") != std::string::npos);
}

TEST_CASE("precision_report: ops that record nothing (flatten of one dim, eval dropout) leave no request for the next op") {
  Generator gen(2);
  Tensor x = Tensor::randn({2, 3, 4}, gen).set_requires_grad(true);
  amp::PrecisionRecorder report;
  {
    amp::PrecisionRecorder::Observe observe(&report);
    amp::AutocastGuard autocast;
    // relu asks no list; before the fix it was charged with flatten's (and then dropout's) request.
    Tensor y = ops::relu(ops::flatten(x, 1, 1));
    Tensor z = ops::relu(ops::dropout(y, 0.5, /*training=*/false, gen));
    CHECK(ops::dropout(y, 0.5, false, gen).data<float>() == y.data<float>());  // eval dropout is the input itself
    ops::sum(z).backward();
  }
  const std::vector<amp::OpPrecisionRow> rows = report.op_rows();
  for (const amp::OpPrecisionRow& r : rows) {
    CAPTURE(r.op);
    if (r.op == "relu") CHECK_FALSE(r.kind.has_value());
    CHECK(r.op != "flatten");
    CHECK(r.op != "dropout");
  }
  REQUIRE(find_row(rows, "relu"));
  CHECK(find_row(rows, "relu")->calls == 2);
}

TEST_CASE("precision_report: set_op_fp32 and autocast off are explained; Observe(nullptr) and nesting") {
  Generator gen(2);
  Tensor x = Tensor::randn({1, 1, 3, 3, 3}, gen);
  Tensor w = Tensor::randn({1, 1, 3, 3, 3}, gen).set_requires_grad(true);
  amp::PrecisionRecorder report;
  {
    amp::PrecisionRecorder::Observe observe(&report);
    CHECK_THROWS_WITH_AS(amp::PrecisionRecorder::Observe{&report}, doctest::Contains("already being observed"), Error);
    const bool prev = amp::set_op_fp32(amp::OpKind::Conv3d, true);
    conv_step(x, w, Tensor());
    amp::set_op_fp32(amp::OpKind::Conv3d, prev);
    (void)ops::conv3d(x, w, Tensor());  // autocast off
  }
  {
    amp::PrecisionRecorder::Observe nothing(nullptr);
    (void)ops::conv3d(x, w, Tensor());
  }
  const std::vector<amp::OpPrecisionRow> rows = report.op_rows();
  int convs = 0;
  for (const amp::OpPrecisionRow& r : rows) {
    if (r.op != "conv3d") continue;
    ++convs;
    CHECK(r.calls == 1);
    CHECK(r.dtype == kFloat32);
    CHECK(r.casts.casts == 0);
    if (r.autocast) {
      CHECK(r.list == amp::CastPolicy::Fp32);
      CHECK(r.why().find("set_op_fp32") != std::string::npos);
    } else {
      CHECK(r.why().find("autocast off") == 0);
    }
  }
  CHECK(convs == 2);
}

TEST_CASE("precision_report: loss-scale timeline and the report files (PNG when gnuplot is present)") {
  amp::PrecisionRecorder report;
  report.record_step(1, 65536, false, 65536);
  report.record_step(2, 65536, true, 32768);
  report.record_step(3, 32768, false, 32768);
  Generator gen(3);
  Tensor x = Tensor::randn({1, 1, 3, 3, 3}, gen);
  Tensor w = Tensor::randn({1, 1, 3, 3, 3}, gen).set_requires_grad(true);
  {
    amp::PrecisionRecorder::Observe observe(&report);
    conv_step(x, w, Tensor());
  }
  CHECK(report.summary_text().find("loss scale: 3 steps, first 65536, last 32768, min 32768, skipped steps 1") !=
        std::string::npos);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("halfgrad_precision_" + std::to_string(::getpid()))).string();
  const amp::PrecisionReportFiles files = report.write(dir);
  for (const char* f : {"precision_ops.csv", "precision_casts.csv", "loss_scale.csv", "precision_report.txt",
                        "loss_scale.gp", "cast_bytes.gp"})
    CHECK(std::filesystem::exists(dir + "/" + f));
  std::ifstream in(dir + "/loss_scale.csv");
  std::string line;
  std::getline(in, line);
  CHECK(line == "step,loss_scale,skipped,scale_after");
  std::getline(in, line);
  std::getline(in, line);
  CHECK(line == "2,65536,1,32768");
  if (amp::gnuplot_available()) {
    CHECK(files.plotted);
    CHECK(std::filesystem::file_size(dir + "/loss_scale.png") > 0);
    CHECK(std::filesystem::file_size(dir + "/cast_bytes.png") > 0);
  } else {
    CHECK_FALSE(files.plotted);
    CHECK(files.note.find("gnuplot") != std::string::npos);
  }
  const amp::PrecisionReportFiles unrendered = report.write(dir, false);
  CHECK(unrendered.note.find("gnuplot loss_scale.gp") != std::string::npos);
  std::filesystem::remove_all(dir);
}
