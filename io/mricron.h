// mricron.h - the dataset every fresh machine has: Debian's mricron-data templates.
//
// Source files (apt-get install mricron-data), in /usr/share/mricron/templates:
//   ch2.nii.gz    the "Colin 27" single-subject T1 head (skull included), uint8, 181 x 217 x 181 at 1 mm
//   aal.nii.gz    the AAL atlas on the same grid: 116 regions, uint8 values 1..116, 0 outside the brain
//   aal.nii.txt   one line per region: "<value> <name> <code>", e.g. "1 Precentral_L 2001"
// Both volumes share dims (181, 217, 181) and the affine (1 mm, origin (-90, -125, -71)); the loader
// checks this and throws rather than resample if a future package changes it.
//
// Lobe classes. AAL's own code column groups the regions by its thousands digit; we keep that grouping
// and fold insula (3xxx) into the limbic group (4xxx: cingulum, hippocampus, parahippocampal,
// amygdala) - the insula is part of the paralimbic belt - to stay within 8 classes:
//   0 background (outside the atlas: skull, CSF, air)
//   1 frontal      2xxx  precentral, frontal gyri, rolandic operculum, SMA, olfactory, rectus
//   2 temporal     8xxx  Heschl, superior/middle/inferior temporal, temporal poles
//   3 parietal     6xxx  postcentral, superior/inferior parietal, supramarginal, angular,
//                        precuneus, paracentral lobule
//   4 occipital    5xxx  calcarine, cuneus, lingual, occipital gyri, fusiform
//   5 limbic       3xxx + 4xxx  insula, cingulum, hippocampus, parahippocampal, amygdala
//   6 deep grey    7xxx  caudate, putamen, pallidum, thalamus
//   7 cerebellum   9xxx  cerebellar hemispheres and vermis
//
// Size: both volumes are downsampled by an integer factor (default 2: 91 x 109 x 91 at 2 mm), the
// image by block averaging and the lobe map by block majority (lobes first, then majority).
//
// Split: by hemisphere, because every lobe class exists in both. Voxels whose world x < 0 (the left
// hemisphere, RAS convention of the affine) are the training volume; x >= 0 (right) is the held-out
// validation volume. The two halves share no voxel, so patches drawn from the training half never
// see validation data; the brain's near mirror symmetry keeps the task the same on both sides.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/nifti.h"
#include "io/preprocess.h"

namespace halfgrad::io {

/// Number of lobe classes, background included (see the table above).
constexpr int64_t kNumLobeClasses = 8;

/// "background", "frontal", "temporal", "parietal", "occipital", "limbic", "deep_grey", "cerebellum".
const std::vector<std::string>& lobe_class_names();

/// The lobe class (1..7) of an AAL region code from aal.nii.txt (e.g. 2001 -> 1 frontal, 8111 -> 2
/// temporal). Throws halfgrad::Error for a code whose thousands digit is not 2..9.
int64_t aal_code_to_lobe(int64_t code);

struct MricronOptions {
  std::string dir = "/usr/share/mricron/templates";
  int64_t factor = 2;  // integer downsampling factor per axis (1 keeps 1 mm)
  MricronOptions& with_dir(const std::string& d) { dir = d; return *this; }
  MricronOptions& with_factor(int64_t f) { factor = f; return *this; }
};

/// The ch2 head and its lobe map on one grid.
struct BrainAtlas {
  Volume image;   // float32 (D, H, W) = (z, y, x), ch2 T1 intensities (0..255) block-averaged
  Volume labels;  // int64 (D, H, W), lobe classes in [0, kNumLobeClasses), block majority
};

/// Loads ch2.nii.gz, aal.nii.gz and aal.nii.txt from options.dir, maps AAL regions to lobes and
/// downsamples by options.factor. Spacing is factor * 1 mm; the affine maps each output voxel to the
/// centre of its block. Throws halfgrad::Error naming the missing file (and saying
/// `apt-get install mricron-data`), when factor < 1, when ch2 and aal differ in shape or affine, or
/// when the atlas holds a region value that aal.nii.txt does not list.
BrainAtlas load_mricron_atlas(const MricronOptions& options = MricronOptions());

/// The hemisphere split described above, each half z-scored on its own.
struct AtlasSplit {
  Sample train;        // left hemisphere: x indices [0, split_x)
  Sample val;          // right hemisphere: x indices [split_x, W)
  int64_t split_x = 0; // first x index whose world x >= 0
};

/// Cuts `atlas` at world x = 0 into training (left) and validation (right) volumes.
/// Throws halfgrad::Error if the affine is not axis-aligned in x or x = 0 is not inside the volume.
AtlasSplit split_hemispheres(const BrainAtlas& atlas);

}  // namespace halfgrad::io
