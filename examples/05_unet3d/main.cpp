// halfgrad-unet3d - the main job: train a 3D U-Net to segment MRI volumes, evaluate it, and
// segment new volumes with it (predict).
//
//   halfgrad-unet3d train [--data DIR] --out RUN_DIR [--overwrite] [--device cpu|cuda]
//                         [--epochs N --batch B --lr X --seed S --config NAME]
//                         [--opt-level O0|O1|O2|O3 | --amp] [--fp32-op NAME ...] [--fp32-module PREFIX ...]
//   halfgrad-unet3d eval  [--data DIR] --checkpoint FILE [--device cpu|cuda] [--overlay DIR]
//   halfgrad-unet3d predict --checkpoint FILE --input FILE|DIR --output FILE|DIR [--device cpu|cuda]
//                         [--overlap F] [--tta] [--probabilities FILE|DIR] [--labels DIR] [--overlay DIR] [--overwrite]
//
// Without --data, train uses the embedded default (Debian's mricron-data). The options are in
// cli.cpp (`halfgrad-unet3d train --help`); see README.md. Exit status: 0 on success (and --help), 2
// for a bad command line (CLI11's message, or check_train_args's), 1 for a run that fails or is
// refused ("error: ..." on stderr).
#include <iostream>
#include <stdexcept>

#include "core/error.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/predict.h"
#include "examples/05_unet3d/train.h"

int main(int argc, char** argv) {
  unet3d_app::CommandLine cli;
  try {
    cli.parse(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const CLI::ParseError& err) {
    return cli.app.exit(err) == 0 ? 0 : 2;
  } catch (const halfgrad::Error& err) {
    std::cerr << "error: " << err.what() << std::endl;
    return 2;
  }
  try {
    if (*cli.train) return unet3d_app::run_train(cli.train_args);
    if (*cli.predict) return unet3d_app::run_predict(cli.predict_args);
    return unet3d_app::run_eval(cli.eval_args);
  } catch (const halfgrad::Error& err) {
    std::cerr << "error: " << err.what() << std::endl;
    return 1;
  } catch (const std::exception& err) {
    std::cerr << "error: " << err.what() << std::endl;
    return 1;
  }
}
