// mricron.cpp - see mricron.h for the files, the lobe grouping and the split.
#include "io/mricron.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace halfgrad::io {
namespace {

namespace fs = std::filesystem;

std::string require_file(const std::string& dir, const char* name) {
  const std::string path = (fs::path(dir) / name).string();
  std::error_code ec;
  HG_CHECK(fs::is_regular_file(path, ec), "load_mricron_atlas: " << path << " not found; expected the mricron-data "
                                                                  << "templates (apt-get install mricron-data)");
  return path;
}

// A line of a text file for an error message: at most 80 bytes, printable ASCII, others as '?'.
std::string excerpt(const std::string& line) {
  std::string out = line.substr(0, 80);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return line.size() > 80 ? out + "..." : out;
}

// aal.nii.txt: "<value> <name> <code>" per line -> value -> lobe class. The file is ~3 KB; more
// than 1 MiB is refused before reading.
std::map<int64_t, int64_t> read_aal_lobes(const std::string& path) {
  constexpr size_t kMaxBytes = size_t{1} << 20;
  std::istringstream in(read_regular_file(path, kMaxBytes, "load_mricron_atlas: " + path,
                                          "a region list of at most 1 MiB"));
  std::map<int64_t, int64_t> lobes;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream fields(line);
    int64_t value = 0, code = 0;
    std::string name;
    HG_CHECK(fields >> value >> name >> code, "load_mricron_atlas: " << path << ": line " << line_no << " reads \""
                                                                     << excerpt(line) << "\"; expected \"<value> <name> <code>\"");
    lobes[value] = aal_code_to_lobe(code);
  }
  HG_CHECK(!lobes.empty(), "load_mricron_atlas: " << path << ": no regions; expected one line per AAL region");
  return lobes;
}

// Affine of a grid downsampled by f whose voxel k covers input voxels [f*k, f*k + f): voxel k maps
// to input coordinate f*k + (f - 1) / 2, the block centre.
std::array<double, 16> block_centre_affine(const std::array<double, 16>& a, int64_t f) {
  std::array<double, 16> out = a;
  const double shift = (static_cast<double>(f) - 1.0) / 2.0;
  for (int r = 0; r < 3; ++r) {
    out[4 * r + 3] = a[4 * r + 3] + shift * (a[4 * r + 0] + a[4 * r + 1] + a[4 * r + 2]);
    for (int c = 0; c < 3; ++c) out[4 * r + c] = a[4 * r + c] * static_cast<double>(f);
  }
  return out;
}

}  // namespace

const std::vector<std::string>& lobe_class_names() {
  static const std::vector<std::string> names = {"background", "frontal",   "temporal",  "parietal",
                                                 "occipital",  "limbic",    "deep_grey", "cerebellum"};
  return names;
}

int64_t aal_code_to_lobe(int64_t code) {
  // Indexed by the code's thousands digit (AAL's own grouping); 3 (insula) joins 4 (limbic).
  constexpr int64_t kLobeOfDigit[10] = {-1, -1, /*2 frontal*/ 1, /*3 insula*/ 5, /*4 limbic*/ 5,
                                        /*5 occipital*/ 4, /*6 parietal*/ 3, /*7 deep grey*/ 6,
                                        /*8 temporal*/ 2, /*9 cerebellum*/ 7};
  const int64_t digit = code / 1000;
  HG_CHECK(code >= 0 && digit < 10 && kLobeOfDigit[digit] > 0,
           "aal_code_to_lobe: AAL code " << code << "; expected a code 2000..9999 whose thousands digit names a lobe");
  return kLobeOfDigit[digit];
}

BrainAtlas load_mricron_atlas(const MricronOptions& options) {
  HG_CHECK(options.factor >= 1, "load_mricron_atlas: factor " << options.factor << "; expected an integer >= 1");
  const std::string ch2_path = require_file(options.dir, "ch2.nii.gz");
  const std::string aal_path = require_file(options.dir, "aal.nii.gz");
  const std::string txt_path = require_file(options.dir, "aal.nii.txt");

  const Volume ch2 = read_nifti(ch2_path);
  const Volume aal = read_label_nifti(aal_path);
  HG_CHECK(ch2.data.shape() == aal.data.shape(), "load_mricron_atlas: " << aal_path << " has shape "
                                                                        << shape_str(aal.data.shape()) << " but " << ch2_path << " has "
                                                                        << shape_str(ch2.data.shape()) << "; expected one grid (no resampling is done)");
  for (int i = 0; i < 16; ++i)
    HG_CHECK(std::fabs(ch2.affine[i] - aal.affine[i]) < 1e-4,
             "load_mricron_atlas: " << aal_path << " and " << ch2_path << " differ in affine entry (" << i / 4 << ", "
                                    << i % 4 << "): " << aal.affine[i] << " vs " << ch2.affine[i]
                                    << "; expected one grid (no resampling is done)");

  const std::map<int64_t, int64_t> lobe_of_region = read_aal_lobes(txt_path);
  Tensor lobes = Tensor::empty(aal.data.shape(), kInt64);
  const int64_t* region = aal.data.data<int64_t>();
  int64_t* lobe = lobes.data<int64_t>();
  for (int64_t i = 0; i < aal.data.numel(); ++i) {
    if (region[i] == 0) {
      lobe[i] = 0;
      continue;
    }
    const auto it = lobe_of_region.find(region[i]);
    HG_CHECK(it != lobe_of_region.end(), "load_mricron_atlas: " << aal_path << " holds region value " << region[i]
                                                                << " which " << txt_path << " does not list; expected listed regions only");
    lobe[i] = it->second;
  }

  const int64_t f = options.factor;
  BrainAtlas atlas;
  atlas.image.data = downsample_mean(ch2.data, f);
  atlas.labels.data = downsample_majority(lobes, f);
  for (int d = 0; d < 3; ++d) atlas.image.spacing[d] = ch2.spacing[d] * static_cast<double>(f);
  atlas.image.affine = block_centre_affine(ch2.affine, f);
  atlas.labels.spacing = atlas.image.spacing;
  atlas.labels.affine = atlas.image.affine;
  return atlas;
}

AtlasSplit split_hemispheres(const BrainAtlas& atlas) {
  const auto& a = atlas.image.affine;
  HG_CHECK(a[0] > 0 && std::fabs(a[1]) < 1e-6 * a[0] && std::fabs(a[2]) < 1e-6 * a[0],
           "split_hemispheres: affine row x is (" << a[0] << ", " << a[1] << ", " << a[2]
                                                  << "); expected world x to grow with the x index alone");
  const int64_t W = atlas.image.data.size(2);
  // First index i with world x = a[0] * i + a[3] >= 0.
  const double split_at = std::ceil(-a[3] / a[0]);
  HG_CHECK(split_at > 0 && split_at < static_cast<double>(atlas.image.data.size(2)),
           "split_hemispheres: world x = 0 falls at x index " << split_at << "; expected it inside (0, "
                                                              << atlas.image.data.size(2) << ")");
  const auto split_x = static_cast<int64_t>(split_at);
  HG_CHECK(split_x > 0 && split_x < W, "split_hemispheres: world x = 0 falls at x index " << split_x
                                                                                          << "; expected it inside (0, " << W << ")");
  const int64_t D = atlas.image.data.size(0), H = atlas.image.data.size(1);
  auto half = [&](int64_t x0, int64_t width) {
    return Sample{zscore(extract_region(atlas.image.data, {0, 0, x0}, {D, H, width})),
                  extract_region(atlas.labels.data, {0, 0, x0}, {D, H, width})};
  };
  return AtlasSplit{half(0, split_x), half(split_x, W - split_x), split_x};
}

}  // namespace halfgrad::io
