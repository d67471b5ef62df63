// Tests of examples/05_unet3d/cli.h: halfgrad-unet3d's command line parsed through the program's
// own CommandLine; every bad value is refused with a message naming the option and the range.
#include "examples/05_unet3d/cli.h"

#include <doctest/doctest.h>

#include <algorithm>

#include "tests/check_error.h"

using unet3d_app::CommandLine;

namespace {

// The message of the CLI::ParseError that parsing `args` throws ("" when it parses).
std::string parse_error(const std::vector<std::string>& args) {
  CommandLine cli;
  try {
    cli.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

void check_parse_error(const std::vector<std::string>& args, const std::vector<std::string>& parts) {
  const std::string msg = parse_error(args);
  CHECK_MESSAGE(!msg.empty(), "no error for " << args.back());
  for (const std::string& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
}

std::vector<std::string> train_with(std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", "--out", "runs/x"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("unet3d cli: integers are decimal (010 is ten) and in range") {
  CommandLine cli;
  cli.parse(train_with({"--epochs", "010", "--batch", "0002", "--seed", "18446744073709551615", "--save-every", "3"}));
  CHECK(cli.train_args.epochs == 10);
  CHECK(cli.train_args.batch == 2);
  CHECK(cli.train_args.seed == UINT64_MAX);
  CHECK(cli.train_args.save_every == 3);
  CHECK(cli.train_args.out == "runs/x");

  check_parse_error(train_with({"--epochs", "99999999999999999999"}),
                    {"--epochs", "'99999999999999999999' is out of range", "expected a decimal integer in [1, 1000000]"});
  check_parse_error(train_with({"--epochs", "1000001"}), {"--epochs", "out of range", "[1, 1000000]"});
  check_parse_error(train_with({"--epochs", "0"}), {"--epochs", "'0' is out of range"});
  check_parse_error(train_with({"--epochs", "0x10"}), {"--epochs", "'0x10' is not a decimal integer"});
  check_parse_error(train_with({"--epochs", "1e3"}), {"--epochs", "'1e3' is not a decimal integer"});
  check_parse_error(train_with({"--epochs", "2.5"}), {"--epochs", "'2.5' is not a decimal integer"});
  check_parse_error(train_with({"--batch", "0"}), {"--batch", "[1, 1000000]"});
  check_parse_error(train_with({"--seed", "-1"}), {"--seed", "'-1' is not a decimal integer",
                                                   "[0, 18446744073709551615]"});
  check_parse_error(train_with({"--seed", "18446744073709551616"}), {"--seed", "out of range"});
  check_parse_error(train_with({"--val-every", "-3"}), {"--val-every", "'-3' is not a decimal integer"});
  check_parse_error(train_with({"--save-every", "0"}), {"--save-every", "out of range"});
  check_parse_error(train_with({"--grad-stats-every", "+4"}), {"--grad-stats-every", "not a decimal integer"});
}

TEST_CASE("unet3d cli: floats are finite, --lr > 0, --max-minutes >= 0") {
  CommandLine cli;
  cli.parse(train_with({"--lr", "3e-4", "--max-minutes", "0"}));
  CHECK(cli.train_args.lr == doctest::Approx(3e-4).epsilon(1e-15));
  CHECK(cli.train_args.max_minutes == 0);
  check_parse_error(train_with({"--lr", "nan"}), {"--lr", "'nan' is not finite", "expected a finite number > 0"});
  check_parse_error(train_with({"--lr", "inf"}), {"--lr", "'inf' is not finite"});
  check_parse_error(train_with({"--lr", "0"}), {"--lr", "'0' is out of range", "> 0"});
  check_parse_error(train_with({"--lr", "-1e-3"}), {"--lr", "> 0"});
  check_parse_error(train_with({"--lr", "1e-3x"}), {"--lr", "'1e-3x' is not a number"});
  check_parse_error(train_with({"--lr", "1e999"}), {"--lr", "'1e999' overflows double precision"});
  check_parse_error(train_with({"--max-minutes", "-0.5"}), {"--max-minutes", ">= 0"});
}

TEST_CASE("unet3d cli: --memory-format ndhwc with --device cpu is refused; unset, nothing is ignored") {
  halfgrad::testing::check_error(
      [] {
        CommandLine cli;
        cli.parse(train_with({"--memory-format", "ndhwc"}));
      },
      {"--memory-format ndhwc", "--device cpu", "NCDHW", "drop --memory-format, or use --device cuda"});
  CommandLine cpu;
  cpu.parse(train_with({"--memory-format", "ncdhw"}));  // what the CPU runs anyway
  CHECK(cpu.train_args.memory_format == "ncdhw");
  CommandLine cuda;
  cuda.parse(train_with({"--device", "cuda", "--memory-format", "ndhwc"}));
  CHECK(cuda.train_args.device == "cuda");
  CommandLine plain;
  plain.parse(train_with({}));
  CHECK(plain.train_args.memory_format.empty());
  check_parse_error(train_with({"--memory-format", "nhwc"}), {"--memory-format", "nhwc"});
}

TEST_CASE("unet3d cli: --overwrite, --no-memory-check, and --help lists them") {
  CommandLine cli;
  cli.parse(train_with({"--overwrite", "--no-memory-check"}));
  CHECK(cli.train_args.overwrite);
  CHECK_FALSE(cli.train_args.memory_check);
  CommandLine plain;
  plain.parse(train_with({}));
  CHECK_FALSE(plain.train_args.overwrite);
  CHECK(plain.train_args.memory_check);
  CommandLine eval;
  eval.parse({"eval", "--checkpoint", "c.bin", "--no-memory-check"});
  CHECK_FALSE(eval.eval_args.memory_check);

  CommandLine help;
  bool asked = false;
  try {
    help.parse({"train", "--help"});
  } catch (const CLI::CallForHelp&) {
    asked = true;
  }
  CHECK(asked);
  const std::string text = help.train->help();
  for (const char* opt : {"--overwrite", "--no-memory-check", "--memory-format", "--epochs", "INT:decimal in [1, 1000000]", "FLOAT:finite, > 0",
                          "refused unless --overwrite"})
    CHECK_MESSAGE(text.find(opt) != std::string::npos, opt << " not in train --help:\n" << text);
  // --out or --resume: checked after parsing (check_train_args), so a halfgrad::Error.
  CommandLine bare;
  CHECK_THROWS_WITH_AS(bare.parse({"train"}), doctest::Contains("--out RUN_DIR is required (or --resume RUN_DIR)"),
                       halfgrad::Error);
  CommandLine resume;
  resume.parse({"train", "--resume", "runs/x", "--epochs", "5", "--no-progress"});
  CHECK(resume.train_args.resume == "runs/x");
  std::vector<std::string> given = resume.train_args.given;
  std::sort(given.begin(), given.end());
  const std::vector<std::string> want = {"--epochs", "--no-progress", "--resume"};
  CHECK(given == want);
  CommandLine refused;
  CHECK_THROWS_WITH_AS(refused.parse({"train", "--resume", "runs/x", "--batch", "2", "--amp"}),
                       doctest::Contains("--batch, --amp cannot be given with --resume"), halfgrad::Error);
  check_parse_error(train_with({"--config", "gpu"}), {"--config", "gpu"});
}

TEST_CASE("unet3d cli: predict's options reach PredictArgs; --checkpoint, --input, --output are required") {
  CommandLine cli;
  cli.parse({"predict", "--checkpoint", "ck.bin", "--input", "imagesTs", "--output", "out", "--device", "cuda", "--tta",
             "--overlap", "0.25", "--probabilities", "p", "--labels", "labelsTr", "--overlay", "png", "--overwrite",
             "--no-progress", "--no-memory-check"});
  REQUIRE(*cli.predict);
  const unet3d_app::PredictArgs& p = cli.predict_args;
  CHECK(p.checkpoints == std::vector<std::string>{"ck.bin"});
  CHECK(p.input == "imagesTs");
  CHECK(p.output == "out");
  CHECK(p.device == "cuda");
  CHECK(p.tta);
  CHECK(p.overlap == 0.25);
  CHECK(p.probabilities == "p");
  CHECK(p.labels == "labelsTr");
  CHECK(p.overlay == "png");
  CHECK(p.overwrite);
  CHECK_FALSE(p.progress);
  CHECK_FALSE(p.memory_check);
  check_parse_error({"predict", "--checkpoint", "c", "--input", "i"}, {"--output"});
  check_parse_error({"predict", "--checkpoint", "c", "--input", "i", "--output", "o", "--overlap", "nan"},
                    {"--overlap", "expected a finite number in [0, 0.9]"});
  check_parse_error({"predict", "--checkpoint", "c", "--input", "i", "--output", "o", "--device", "tpu"}, {"--device"});
  CommandLine e;
  e.parse({"eval", "--checkpoint", "c", "--overlay", "pngs"});
  CHECK(e.eval_args.overlay == "pngs");
}

TEST_CASE("unet3d cli: --amp-dtype takes fp16 (the default) or bf16; anything else is refused by name") {
  {
    CommandLine cli;
    cli.parse(train_with({"--amp"}));
    CHECK(cli.train_args.amp_dtype == "fp16");
  }
  {
    CommandLine cli;
    cli.parse(train_with({"--amp", "--amp-dtype", "bf16"}));
    CHECK(cli.train_args.amp_dtype == "bf16");
  }
  check_parse_error(train_with({"--amp", "--amp-dtype", "bfloat16"}), {"--amp-dtype", "bfloat16"});
}
