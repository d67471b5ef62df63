// halfgrad-unet3d - the main job: train a 3D U-Net to segment MRI volumes, evaluate it, and
// segment new volumes with it (predict).
//
//   halfgrad-unet3d train [--data DIR] --out RUN_DIR [--overwrite] [--device cpu|cuda [--gpus N]]
//                         [--epochs N --batch B --lr X --seed S --config NAME] [--plan FILE|auto]
//                         [--opt-level O0|O1|O2|O3 | --amp] [--fp32-op NAME ...] [--fp32-module PREFIX ...]
//   halfgrad-unet3d eval  [--data DIR] --checkpoint FILE [--device cpu|cuda] [--overlay DIR]
//   halfgrad-unet3d plan  --data DIR --output FILE [--device cpu|cuda] [--memory-gib X] [--config NAME]
//                         [--amp | --opt-level O0|O1|O2|O3] [--overwrite]
//   halfgrad-unet3d predict --checkpoint FILE --input FILE|DIR --output FILE|DIR [--device cpu|cuda]
//                         [--overlap F] [--tta] [--probabilities FILE|DIR] [--labels DIR] [--overlay DIR] [--overwrite]
//
// Without --data, train uses the embedded default (Debian's mricron-data). The options are in
// cli.cpp (`halfgrad-unet3d train --help`); see README.md. Exit status: 0 on success (and --help), 2
// for a bad command line (CLI11's message, or check_train_args's), 1 for a run that fails or is
// refused ("error: ..." on stderr).
//
// Several GPUs (distributed.h): `train --gpus N` makes this process the launcher of N ranks;
// a process started with RANK and WORLD_SIZE in its environment (by that launcher, or torchrun) is a
// rank, and its errors read "[rank R] error: ...".
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "core/error.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/cv.h"
#include "examples/05_unet3d/distributed.h"
#include "examples/05_unet3d/predict.h"
#include "examples/05_unet3d/resume.h"
#include "unet3d/run_checkpoint.h"
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
  // "[rank R] " before this process's errors once it knows it is one rank of several.
  std::string prefix;
  try {
    if (*cli.train) {
      const unet3d_app::TrainArgs& t = cli.train_args;
      const char* world = std::getenv("WORLD_SIZE");
      if (t.gpus > 1) {
        HG_CHECK(!world || !*world, "halfgrad-unet3d train --gpus " << t.gpus << ": WORLD_SIZE=" << world
                                        << " is set, so a launcher (torchrun, mpirun) already started this process as "
                                           "one rank; drop --gpus, or start the program without that launcher");
        return unet3d_app::launch_ranks(static_cast<int>(t.gpus), std::vector<std::string>(argv + 1, argv + argc),
                                        t.resume.empty() ? t.out : t.resume);
      }
      const char* rank = std::getenv("RANK");
      const bool ranked = world && *world && std::string(world) != "1";
      if (ranked) prefix = "[rank " + std::string(rank ? rank : "?") + "] ";
      // A resumed run's device is the one it was started with (its training state), not --device's default.
      const std::string device =
          !ranked || t.resume.empty()
              ? t.device
              : unet3d_app::resumed_args(t, unet3d_app::read_run_training_meta(t.resume)).device;
      const unet3d_app::RankContext ctx = unet3d_app::join_ranks_from_env(device);
      return unet3d_app::run_train(t, ctx);
    }
    if (*cli.predict) return unet3d_app::run_predict(cli.predict_args);
    if (*cli.plan) return unet3d_app::run_plan(cli.plan_args);
    if (*cli.cv) return unet3d_app::run_cv(cli.cv_runs);
    return unet3d_app::run_eval(cli.eval_args);
  } catch (const halfgrad::Error& err) {
    std::cerr << prefix << "error: " << err.what() << std::endl;
    return 1;
  } catch (const std::exception& err) {
    std::cerr << prefix << "error: " << err.what() << std::endl;
    return 1;
  }
}
