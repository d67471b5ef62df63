// 06_fp16_inspect - look inside FP16: the sign / exponent / mantissa fields of a parameter's values,
// and how a layer's weights spread over FP16's exponent range in two checkpoints (for example an FP32
// run against an AMP run of halfgrad-unet3d).
//
//   build/examples/06_fp16_inspect demo                       # no files needed
//   build/examples/06_fp16_inspect list    RUN/model.safetensors
//   build/examples/06_fp16_inspect dump    RUN/model.safetensors enc.0.0.weight [--begin 0 --count 16]
//   build/examples/06_fp16_inspect compare FP32RUN/model.safetensors AMPRUN/model.safetensors [--param NAME]
//                                          [--csv hist.csv]
//
// `compare` prints one line per parameter (max |w| in each file, max and relative L2 difference, the
// fraction of weights that would be FP16 subnormals) and, for one parameter (--param, default the one
// that differs most), the two log2 |w| histograms side by side, bins marked with what FP16 does to
// them (normal, subnormal, zero, overflow); --csv writes the histograms for plotting.
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>

#include "amp/fp16_inspect.h"
#include "core/error.h"
#include "nn/checkpoint.h"

using namespace halfgrad;

static int demo() {
  Generator gen(0);
  // A conv weight as He-initialised (std ~ 0.1), with a few weights decayed towards zero, and a
  // gradient-sized tensor (std 1e-6): the kind of values FP16 stores with fewer bits, or not at all.
  Tensor w = Tensor::randn({4096}, gen, kFloat32, 0.1);
  for (int64_t i = 0; i < 4096; i += 64) w.data<float>()[i] *= 1e-4f;
  Tensor g = Tensor::randn({4096}, gen, kFloat32, 1e-6);
  std::cout << "An FP32 weight tensor and the FP16 pattern each value rounds to:\n"
            << amp::half_dump(w, 62, 4) << "\nA gradient of typical size (std 1e-6) in FP16:\n"
            << amp::half_dump(g, 0, 4) << "\n";
  std::cout << amp::compare_histograms_text("weight", "float32", amp::log2_abs_histogram(w), "float16 copy",
                                            amp::log2_abs_histogram(w.cast_copy(kFloat16)))
            << "\n";
  std::cout << amp::compare_histograms_text("gradient", "float32", amp::log2_abs_histogram(g), "float16 copy",
                                            amp::log2_abs_histogram(g.cast_copy(kFloat16)))
            << "(the FP16 copy of the gradient loses its smallest values to zero: what loss scaling prevents)\n";
  return 0;
}

static int list(const std::string& path) {
  const nn::CheckpointState s = nn::read_checkpoint(path);
  std::printf("%-32s %-8s %-20s %12s\n", "parameter", "dtype", "shape", "max|w|");
  for (const auto& [name, t] : s.parameters) {
    const amp::Log2Histogram h = amp::log2_abs_histogram(t);
    double max_abs = 0;
    for (double v : t.to_double_vector()) max_abs = std::max(max_abs, std::fabs(v));
    std::printf("%-32s %-8s %-20s %12.5g%s\n", name.c_str(), dtype_name(t.dtype()), shape_str(t.shape()).c_str(), max_abs,
                h.nonfinite ? "  (non-finite values!)" : "");
  }
  return 0;
}

static int dump(const std::string& path, const std::string& param, int64_t begin, int64_t count) {
  const nn::CheckpointState s = nn::read_checkpoint(path);
  std::cout << param << " in " << path << ":\n" << amp::half_dump(amp::find_checkpoint_tensor(s, param), begin, count);
  return 0;
}

static int compare(const std::string& path_a, const std::string& path_b, std::string param, const std::string& csv) {
  const nn::CheckpointState a = nn::read_checkpoint(path_a), b = nn::read_checkpoint(path_b);
  std::vector<std::string> skipped;
  const std::vector<amp::TensorComparison> rows = amp::compare_checkpoints(a, b, &skipped);
  std::cout << "A = " << path_a << "\nB = " << path_b << "\n" << amp::comparison_table(rows);
  for (const std::string& s : skipped) std::cout << "not compared: " << s << "\n";
  HG_CHECK(!rows.empty(), "06_fp16_inspect compare: the two checkpoints share no parameter of the same shape");
  if (param.empty()) {
    size_t most = 0;
    for (size_t i = 1; i < rows.size(); ++i)
      if (rows[i].rel_l2_diff > rows[most].rel_l2_diff) most = i;
    param = rows[most].name;
  }
  const amp::Log2Histogram ha = amp::log2_abs_histogram(amp::find_checkpoint_tensor(a, param));
  const amp::Log2Histogram hb = amp::log2_abs_histogram(amp::find_checkpoint_tensor(b, param));
  std::cout << "\n" << amp::compare_histograms_text(param, "A", ha, "B", hb);
  if (!csv.empty()) {
    amp::write_histograms_csv(csv, ha, hb);
    std::cout << "histograms written to " << csv << "\n";
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"06_fp16_inspect: FP16 fields of a checkpoint's parameters, and log2 |w| histograms of two checkpoints"};
  app.require_subcommand(1);
  app.add_subcommand("demo", "dump and histogram tensors made in memory (no files needed)");
  std::string path, path_b, param, csv;
  int64_t begin = 0, count = 16;
  auto* list_cmd = app.add_subcommand("list", "every parameter of a checkpoint: dtype, shape, max |w|");
  list_cmd->add_option("checkpoint", path, "model.safetensors (or any halfgrad checkpoint)")->required();
  auto* dump_cmd = app.add_subcommand("dump", "FP16 fields of a parameter's values");
  dump_cmd->add_option("checkpoint", path, "model.safetensors (or any halfgrad checkpoint)")->required();
  dump_cmd->add_option("param", param, "parameter name (see list)")->required();
  dump_cmd->add_option("--begin", begin, "first flat index");
  dump_cmd->add_option("--count", count, "number of values");
  auto* cmp_cmd = app.add_subcommand("compare", "compare the parameters of two checkpoints");
  cmp_cmd->add_option("a", path, "first checkpoint (e.g. the FP32 run)")->required();
  cmp_cmd->add_option("b", path_b, "second checkpoint (e.g. the AMP run)")->required();
  cmp_cmd->add_option("--param", param, "parameter whose histograms to show (default: the one that differs most)");
  cmp_cmd->add_option("--csv", csv, "write the two histograms to this CSV file");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*list_cmd) return list(path);
    if (*dump_cmd) return dump(path, param, begin, count);
    if (*cmp_cmd) return compare(path, path_b, param, csv);
    return demo();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
