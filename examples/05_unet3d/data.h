// data.h - the volumes halfgrad-unet3d trains and validates on.
//
// Two sources:
//   --data DIR   a Medical Segmentation Decathlon folder (dataset.json, imagesTr/, labelsTr/); pairs
//                sorted by image file name, every 5th (index % 5 == 4) held out for validation, as
//                ../shared/reference/torch_hippo_train.py does (--fold picks another of the 5).
//                Volumes are z-scored, resampled to the run's spacing (train --spacing: the training
//                images' median by default, unet3d/resample.h) and zero-padded to the recipe's volume
//                shape, as the reference's `prep`.
//   (no --data)  the embedded default: Debian's mricron-data (ch2 T1 brain, AAL regions grouped into
//                lobes), with a held-out slab for validation (io/mricron.h).
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/augment.h"
#include "unet3d/recipe.h"
#include "unet3d/resample.h"

namespace unet3d_app {

struct SegVolume {
  std::string name;
  halfgrad::Tensor image;  // (D, H, W) float32, z-scored
  halfgrad::Tensor label;  // (D, H, W) int64 in [0, num_classes)
  std::array<double, 3> spacing_mm{1.0, 1.0, 1.0};  // (z, y, x) of the grid it is on (eval's surface metrics)
  // (z, y, x) of the volume's own grid: image and label are zero-padded at the end beyond it (eval
  // scores the boundary metrics on this grid, so a prediction in the padding does not count).
  std::array<int64_t, 3> extent{0, 0, 0};
};

struct SegData {
  std::string source;                    // "hippocampus at DIR" / "mricron-data ch2 + aal"
  std::vector<SegVolume> train, val;
  int64_t num_classes = 0;
  std::vector<std::string> class_names;  // class_names[0] is background
  std::array<int64_t, 3> volume_shape{};  // (z, y, x) every validation volume was padded to
  std::string root;                      // the data folder (--data, or the mricron-data templates)
  std::optional<Spacing> spacing_mm;     // the one spacing every volume was resampled to; none: own grids
  std::vector<std::string> files;        // every file read, relative to root (data_fingerprint.h)
};

/// The folds of an MSD folder (io::split_fold): fold k validates on the pairs with index % kFolds == k.
/// kReferenceFold is the reference recipe's split (every fifth pair from the fifth), train's default.
constexpr int64_t kFolds = 5;
constexpr int64_t kReferenceFold = 4;

/// MSD folder `dir`. Training: fold `fold` (0 .. kFolds-1) splits the pairs. all_for_eval (the eval
/// subcommand): every pair in `val` when fold < 0, else fold `fold`'s validation pairs only.
/// `spacing`: Native keeps each volume on its own grid; Median resamples every volume to
/// target_spacing() of the training images (of the evaluated ones when all_for_eval); Fixed to its mm.
/// Throws halfgrad::Error naming the file for a pair that cannot be read or whose image and label
/// differ in grid (io::load_msd_case), and naming the folder when it has too few pairs for the fold.
SegData load_msd_data(const std::string& dir, const Recipe& r, bool all_for_eval, int64_t fold = kReferenceFold,
                      const SpacingChoice& spacing = SpacingChoice::native());
/// The embedded default (mricron-data).
SegData load_default_data(const Recipe& r);

/// The seed of training step `step`'s batch: SplitMix64 (Steele, Lea & Flood 2014) of the run's seed
/// and the step's index, so that every batch is a function of (seed, step) alone: workers can build
/// batches in any order (loader.h) and a resumed run draws the same batches as one that never stopped.
uint64_t batch_seed(uint64_t run_seed, int64_t step);

/// The seed of sample b's augmentation (0 <= b < batch) in step `step`'s batch: SplitMix64 of
/// batch_seed(run_seed, step) and b. Each sample draws its augmentation from its own generator, so a
/// rank building samples [begin, end) draws nothing for the others, and any thread builds the same bits.
uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t b);

/// The transforms of the recipe's augmentation: io::AugmentOptions::none(), or io::AugmentOptions()
/// (nnU-Net v2's defaults) for Augmentation::NnUnet.
halfgrad::io::AugmentOptions augment_options(Augmentation a);

/// Training step `step`'s batch (step counts from 0 over the whole run): x (B, 1, d, h, w) float32,
/// y (B, d, h, w) int64; volumes drawn with replacement, patches (or whole volumes), random flips
/// along each of the recipe's flip axes applied to image and label together, all from
/// Generator(batch_seed(run_seed, step)). With the recipe's augmentation (not None) each sample is
/// io::augment_patch of its patch (the whole volume without patches) before the flips, drawn from
/// Generator(sample_seed(run_seed, step, b)); the batch's generator draws what it draws without.
/// Throws halfgrad::Error when `data` has no training volumes.
void make_training_batch(const SegData& data, const Recipe& r, uint64_t run_seed, int64_t step, halfgrad::Tensor& x,
                         halfgrad::Tensor& y);

/// Samples [begin, end) of that same global batch of r.batch samples: x (end - begin, 1, d, h, w), y
/// likewise, the bits of rows begin..end-1 of make_training_batch's. The samples before `begin` are
/// drawn from the generator (volume, patch corner, flips) but not built, so a rank of a data-parallel
/// run builds only its slice (distributed.h: rank_batch_slice). make_training_batch is (0, r.batch).
/// Throws halfgrad::Error unless 0 <= begin < end <= r.batch.
void make_training_batch_slice(const SegData& data, const Recipe& r, uint64_t run_seed, int64_t step, int64_t begin,
                               int64_t end, halfgrad::Tensor& x, halfgrad::Tensor& y);

/// One sample of a training batch as drawn, before anything is built (--augment-device cuda's split
/// of the draws from the per-voxel work, gpu_batch.h).
struct SamplePlan {
  int64_t volume = 0;                 // index into SegData::train
  std::array<int64_t, 3> start{0, 0, 0};  // the patch's corner in that volume
  halfgrad::Shape size;               // the patch's extent (the volume's own without patches)
  std::array<bool, 3> flip{false, false, false};  // flipped along axis a after the augmentation
  halfgrad::io::AugmentPlan augment;  // io::draw_augment_plan(augment_options(r.augment), Generator(sample_seed))
};

/// What make_training_batch_slice draws for samples [begin, end) of step `step`, from the same batch
/// generator in the same order (volume, patch corner, one draw per flip axis, also for the samples
/// before `begin`), so volumes, corners and flips are make_training_batch_slice's; the augmentation is
/// io::draw_augment_plan's from Generator(sample_seed(run_seed, step, b)) instead of augment_patch's
/// (the same distributions; io/augment.h). Throws as make_training_batch_slice.
std::vector<SamplePlan> plan_training_batch_slice(const SegData& data, const Recipe& r, uint64_t run_seed, int64_t step,
                                                  int64_t begin, int64_t end);

/// The batch of `plans` built from `volumes` (SegData::train's volumes as io::Samples, all on one
/// device: the CPU, or CUDA for --augment-device cuda): io::apply_augment_plan of each sample, then
/// io::copy_into_batch with its flips, into x (B, 1, d, h, w) float32 and y (B, d, h, w) int64 on that
/// device (queued on the stream there, the host does not wait). With Augmentation::None the bits are
/// make_training_batch_slice's. Throws halfgrad::Error when the samples differ in extent or a plan
/// names a volume that is not there.
void build_planned_batch(const std::vector<halfgrad::io::Sample>& volumes, const std::vector<SamplePlan>& plans,
                         halfgrad::Tensor& x, halfgrad::Tensor& y);

}  // namespace unet3d_app
