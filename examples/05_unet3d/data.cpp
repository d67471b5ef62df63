#include "examples/05_unet3d/data.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "io/augment.h"
#include "io/mricron.h"
#include "io/msd.h"
#include "io/preprocess.h"
#include "unet3d/run_folder.h"

namespace unet3d_app {

using namespace halfgrad;

static Shape to_shape(const std::array<int64_t, 3>& a) { return {a[0], a[1], a[2]}; }

// Volumes for the network must be divisible by 2^levels in every extent: round up.
static Shape divisible_shape(const Shape& s, int64_t levels) {
  const int64_t m = int64_t{1} << levels;
  Shape out;
  for (int64_t e : s) out.push_back((e + m - 1) / m * m);
  return out;
}

SegData load_msd_data(const std::string& dir, const Recipe& r, bool all_for_eval, int64_t fold,
                      const SpacingChoice& spacing) {
  io::MsdDataset ds = io::load_msd(dir);
  const std::string json_path = dir + "/dataset.json";
  HG_CHECK(ds.num_classes >= 2, "halfgrad-unet3d: " << json_path << " declares " << ds.num_classes
                                                     << " class(es); expected background and at least one more");
  SegData data;
  data.source = (ds.name.empty() ? std::string("MSD dataset") : ds.name) + " at " + dir;
  data.num_classes = ds.num_classes;
  data.class_names = ds.class_names;
  data.root = dir;
  data.files.push_back("dataset.json");
  const std::filesystem::path base = std::filesystem::path(dir).lexically_normal();
  for (const io::MsdPair& p : ds.pairs)
    for (const std::string* f : {&p.image, &p.label})
      data.files.push_back(std::filesystem::path(*f).lexically_normal().lexically_relative(base).string());
  io::MsdSplit split;
  if (all_for_eval && fold < 0) split.val = ds.pairs;
  else if (all_for_eval) split.val = io::split_fold(ds.pairs, fold, kFolds).val;
  else split = io::split_fold(ds.pairs, fold, kFolds);
  HG_CHECK(!split.val.empty() && (all_for_eval || !split.train.empty()),
           "halfgrad-unet3d: " << json_path << " lists " << ds.pairs.size() << " pair(s); "
                               << (all_for_eval ? "expected at least one to evaluate"
                                                : "expected at least " + std::to_string(std::max<int64_t>(fold + 1, 2)) +
                                                      " for fold " + std::to_string(fold) +
                                                      " (fold k validates on the pairs whose index, sorted by name, "
                                                      "is k mod 5, and trains on the others)"));
  std::vector<io::MsdCase> train_cases, val_cases;
  for (const io::MsdPair& p : split.train) train_cases.push_back(io::load_msd_case(p, ds.num_classes));
  for (const io::MsdPair& p : split.val) val_cases.push_back(io::load_msd_case(p, ds.num_classes));
  // The grid: each volume's own, or one spacing for all (the training cases' median, nnU-Net's rule).
  if (spacing.mode == SpacingChoice::Mode::Fixed) data.spacing_mm = spacing.mm;
  if (spacing.mode == SpacingChoice::Mode::Median) {
    std::vector<Spacing> spacings;
    std::vector<Extent> shapes;
    for (const io::MsdCase& c : train_cases.empty() ? val_cases : train_cases) {
      spacings.push_back(c.image.spacing);
      const Shape& s = c.image.data.shape();
      shapes.push_back({s[0], s[1], s[2]});
    }
    data.spacing_mm = target_spacing(spacings, shapes, "halfgrad-unet3d: the training images of " + dir);
  }
  // Each image is z-scored on its own grid and resampled to the run's spacing (nnU-Net normalises
  // before it resamples), its label map one-hot linearly (unet3d/resample.h); a volume already at that
  // spacing keeps its bits. Then, as the reference's prep, z-scored and zero-padded at the end to the
  // recipe's shape. A volume larger than that shape grows the shape (rounded up so that every level
  // halves evenly) instead of being cropped: cropping could cut the foreground away without a word.
  // The resampled volumes must fit in host memory before any is made: a fine spacing multiplies the
  // voxels (1x16x16 mm at 0.001 mm is 16000x16000 per slice).
  if (data.spacing_mm) {
    double voxels = 0;
    for (const auto& [pairs, cases] : {std::pair{&split.train, &train_cases}, std::pair{&split.val, &val_cases}})
      for (size_t i = 0; i < cases->size(); ++i) {
        const Shape& own = (*cases)[i].image.data.shape();
        const Extent e = resampled_shape({own[0], own[1], own[2]}, (*cases)[i].image.spacing, *data.spacing_mm,
                                         "halfgrad-unet3d: " + (*pairs)[i].image);
        voxels += static_cast<double>(e[0]) * static_cast<double>(e[1]) * static_cast<double>(e[2]);
      }
    const double need = voxels * 24.0;  // each resampled image (4 B) and label (8 B), and their padded copies
    const MemoryAvailable host = available_memory("cpu");
    HG_CHECK(need <= static_cast<double>(host.bytes),
             "halfgrad-unet3d: " << dir << " resampled to " << spacing_str(*data.spacing_mm) << " would be " << voxels
                                 << " voxels, about " << human_bytes(static_cast<uint64_t>(need))
                                 << " of host memory, but " << human_bytes(host.bytes) << " is available ("
                                 << host.source << "); choose a coarser train --spacing (eval uses the model's)");
  }
  std::vector<io::Sample> train_grid, val_grid;
  Shape shape = to_shape(r.volume_shape);
  const int64_t levels = static_cast<int64_t>(r.model.channels().size());
  auto to_grid = [&](const std::vector<io::MsdPair>& pairs, const std::vector<io::MsdCase>& cases,
                     std::vector<io::Sample>& out) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const io::MsdCase& c = cases[i];
      io::Sample s{io::zscore(c.image.data), c.label.data};
      if (data.spacing_mm) {
        const Shape& own = s.image.shape();
        const Extent e = resampled_shape({own[0], own[1], own[2]}, c.image.spacing, *data.spacing_mm,
                                         "halfgrad-unet3d: " + pairs[i].image);
        s = {resample_image(s.image, e), resample_label(s.label, ds.num_classes, e)};
      }
      out.push_back(s);
      const Shape d = divisible_shape(s.image.shape(), levels);
      for (size_t k = 0; k < 3; ++k) shape[k] = std::max(shape[k], d[k]);
    }
  };
  to_grid(split.train, train_cases, train_grid);
  to_grid(split.val, val_cases, val_grid);
  // eval prints one JSON line on stdout: its notes go to stderr.
  std::ostream& note = all_for_eval ? std::cerr : std::cout;
  if (data.spacing_mm)
    note << "data: " << (spacing.mode == SpacingChoice::Mode::Median ? "the training images' median spacing, " : "")
         << spacing_str(*data.spacing_mm) << ": every volume resampled to it" << std::endl;
  if (shape != to_shape(r.volume_shape))
    note << "data: volumes exceed " << shape_str(to_shape(r.volume_shape)) << "; padding all to "
         << shape_str(shape) << " instead of cropping" << std::endl;
  data.volume_shape = {shape[0], shape[1], shape[2]};
  auto prep = [&](const std::vector<io::MsdPair>& pairs, const std::vector<io::MsdCase>& cases,
                  const std::vector<io::Sample>& grid, std::vector<SegVolume>& out) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      io::Sample s = io::prepare_fixed_shape(grid[i].image, grid[i].label, shape);
      const Shape own = grid[i].image.shape();
      out.push_back({pairs[i].image, s.image, s.label, data.spacing_mm.value_or(cases[i].image.spacing),
                     {own[0], own[1], own[2]}});
    }
  };
  prep(split.train, train_cases, train_grid, data.train);
  prep(split.val, val_cases, val_grid, data.val);
  return data;
}

SegData load_default_data(const Recipe& r) {
  const io::MricronOptions options = io::MricronOptions().with_factor(2);
  io::BrainAtlas atlas = io::load_mricron_atlas(options);
  io::AtlasSplit split = io::split_hemispheres(atlas);
  SegData data;
  data.source = "mricron-data ch2 T1 + AAL lobes (2 mm; left hemisphere trains, right validates)";
  data.num_classes = io::kNumLobeClasses;
  data.class_names = io::lobe_class_names();
  const int64_t levels = static_cast<int64_t>(r.model.channels().size());
  // Validation runs on the whole right hemisphere, padded so that every extent divides by 2^levels.
  const Shape vshape = divisible_shape(split.val.image.shape(), levels);
  io::Sample val = io::prepare_fixed_shape(split.val.image, split.val.label, vshape);
  data.volume_shape = {vshape[0], vshape[1], vshape[2]};
  data.root = options.dir;
  data.files = {"ch2.nii.gz", "aal.nii.gz", "aal.nii.txt"};  // what load_mricron_atlas reads
  const Shape tr = split.train.image.shape(), va = split.val.image.shape();
  data.train.push_back({"ch2 left hemisphere", split.train.image, split.train.label, atlas.image.spacing, {tr[0], tr[1], tr[2]}});
  data.val.push_back({"ch2 right hemisphere", val.image, val.label, atlas.image.spacing, {va[0], va[1], va[2]}});
  return data;
}

// SplitMix64's output function (Steele, Lea & Flood 2014): a bijection of 64-bit words.
static uint64_t splitmix64_finalise(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t batch_seed(uint64_t run_seed, int64_t step) {
  // SplitMix64's finaliser over a Weyl sequence: seed and step enter through different odd constants,
  // so (seed, step) and (seed + 1, step - 1) do not collide.
  uint64_t z = run_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  return splitmix64_finalise(z);
}

uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t b) {
  // One more Weyl step (SplitMix64's increment) per sample index: distinct b, distinct seeds (the
  // finaliser is a bijection).
  return splitmix64_finalise(batch_seed(run_seed, step) + (static_cast<uint64_t>(b) + 1) * 0x9E3779B97F4A7C15ull);
}

io::AugmentOptions augment_options(Augmentation a) {
  return a == Augmentation::NnUnet ? io::AugmentOptions() : io::AugmentOptions::none();
}

void make_training_batch(const SegData& data, const Recipe& r, uint64_t run_seed, int64_t step, Tensor& x,
                         Tensor& y) {
  make_training_batch_slice(data, r, run_seed, step, 0, r.batch, x, y);
}

void make_training_batch_slice(const SegData& data, const Recipe& r, uint64_t run_seed, int64_t step, int64_t begin,
                               int64_t end, Tensor& x, Tensor& y) {
  HG_CHECK(!data.train.empty(), "halfgrad-unet3d: no training volumes");
  HG_CHECK(step >= 0, "halfgrad-unet3d: make_training_batch: step " << step << " is negative");
  HG_CHECK(0 <= begin && begin < end && end <= r.batch,
           "halfgrad-unet3d: make_training_batch: samples [" << begin << ", " << end << ") of a batch of " << r.batch
                                                             << "; expected 0 <= begin < end <= batch");
  Generator gen(batch_seed(run_seed, step));
  std::vector<io::Sample> samples;
  const bool patches = r.patch[0] > 0;
  const io::PatchOptions patch = io::PatchOptions().with_size(to_shape(r.patch)).with_foreground_prob(r.foreground_prob);
  const io::AugmentOptions augment = augment_options(r.augment);
  for (int64_t b = 0; b < end; ++b) {
    const SegVolume& v = data.train[gen.randint(static_cast<int64_t>(data.train.size()))];
    io::Sample s{v.image, v.label};
    if (b < begin) {  // another rank's sample: the same draws, nothing built
      if (patches) io::random_patch_start(s, patch, gen);
      for (size_t i = 0; i < r.flip_axes.size(); ++i) gen.uniform();
      continue;
    }
    if (r.augment == Augmentation::None) {
      if (patches) s = io::random_patch(s, patch, gen);
    } else {
      // The patch corner from the batch's generator, as without augmentation; the augmentation's draws
      // from the sample's own generator, so a rank skipping samples needs none of them.
      const std::array<int64_t, 3> start = patches ? io::random_patch_start(s, patch, gen) : std::array<int64_t, 3>{0, 0, 0};
      Generator sample_gen(sample_seed(run_seed, step, b));
      s = io::augment_patch(s, start, patches ? to_shape(r.patch) : s.image.shape(), augment, sample_gen);
    }
    for (int64_t axis : r.flip_axes)
      if (gen.uniform() < 0.5) s = {io::flip(s.image, axis), io::flip(s.label, axis)};
    samples.push_back(s);
  }
  io::Batch batch = io::make_batch(samples);
  x = batch.image;
  y = batch.label;
}

std::vector<SamplePlan> plan_training_batch_slice(const SegData& data, const Recipe& r, uint64_t run_seed, int64_t step,
                                                  int64_t begin, int64_t end) {
  HG_CHECK(!data.train.empty(), "halfgrad-unet3d: no training volumes");
  HG_CHECK(step >= 0, "halfgrad-unet3d: plan_training_batch: step " << step << " is negative");
  HG_CHECK(0 <= begin && begin < end && end <= r.batch,
           "halfgrad-unet3d: plan_training_batch: samples [" << begin << ", " << end << ") of a batch of " << r.batch
                                                             << "; expected 0 <= begin < end <= batch");
  Generator gen(batch_seed(run_seed, step));
  const bool patches = r.patch[0] > 0;
  const io::PatchOptions patch = io::PatchOptions().with_size(to_shape(r.patch)).with_foreground_prob(r.foreground_prob);
  const io::AugmentOptions augment = augment_options(r.augment);
  std::vector<SamplePlan> plans;
  for (int64_t b = 0; b < end; ++b) {  // make_training_batch_slice's draws, in its order
    SamplePlan p;
    p.volume = gen.randint(static_cast<int64_t>(data.train.size()));
    const SegVolume& v = data.train[p.volume];
    if (patches) p.start = io::random_patch_start(io::Sample{v.image, v.label}, patch, gen);
    p.size = patches ? to_shape(r.patch) : v.image.shape();
    for (int64_t axis : r.flip_axes)
      if (gen.uniform() < 0.5) p.flip[axis] = !p.flip[axis];
    if (b < begin) continue;  // another rank's sample
    Generator sample_gen(sample_seed(run_seed, step, b));
    p.augment = io::draw_augment_plan(augment, sample_gen);
    plans.push_back(p);
  }
  return plans;
}

void build_planned_batch(const std::vector<io::Sample>& volumes, const std::vector<SamplePlan>& plans, Tensor& x,
                         Tensor& y) {
  HG_CHECK(!plans.empty() && !volumes.empty(), "halfgrad-unet3d: build_planned_batch: no samples or no volumes");
  const Shape& size = plans[0].size;
  const Device device = volumes[0].image.device();
  const int64_t batch = static_cast<int64_t>(plans.size());
  Shape xs{batch, 1}, ys{batch};
  xs.insert(xs.end(), size.begin(), size.end());
  ys.insert(ys.end(), size.begin(), size.end());
  x = Tensor::empty(xs, kFloat32, device);
  y = Tensor::empty(ys, kInt64, device);
  for (int64_t b = 0; b < batch; ++b) {
    const SamplePlan& p = plans[b];
    HG_CHECK(p.size == size, "halfgrad-unet3d: build_planned_batch: sample " << b << " is " << shape_str(p.size)
                                                                            << ", sample 0 " << shape_str(size)
                                                                            << "; expected one extent");
    HG_CHECK(p.volume >= 0 && p.volume < static_cast<int64_t>(volumes.size()),
             "halfgrad-unet3d: build_planned_batch: volume " << p.volume << " of " << volumes.size());
    io::copy_into_batch(io::apply_augment_plan(volumes[p.volume], p.start, p.size, p.augment), p.flip, x, y, b);
  }
}

}  // namespace unet3d_app
