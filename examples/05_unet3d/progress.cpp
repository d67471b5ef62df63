// progress.cpp - see progress.h.
#include "examples/05_unet3d/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace unet3d_app {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, int64_t total, bool wanted)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), active_(wanted && stderr_is_terminal()),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, const std::string& suffix) {
  if (!active_) return;
  constexpr int kWidth = 30;
  done = std::clamp<int64_t>(done, 0, total_);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string bar(static_cast<size_t>(kWidth * done / total_), '#');
  std::fprintf(stderr, "\r%s [%-*s] %lld/%lld %s  %.2f s/it ", label_.c_str(), kWidth, bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), suffix.c_str(),
               done > 0 ? s / done : 0.0);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!active_) return;
  std::fprintf(stderr, "\r%120s\r", "");
  std::fflush(stderr);
  active_ = false;
}

}  // namespace unet3d_app
