// file_io.h - opening files that halfgrad reads from users (checkpoints, NIfTI volumes, dataset.json,
// metrics.csv) without ever blocking, and naming what a path is when it is not a file.
//
// open(2) of a FIFO blocks until a writer appears, so checking "is it a regular file?" after a
// plain open hangs forever on a FIFO (or a terminal device). Here the path is opened with O_NONBLOCK
// (which makes open return at once for a FIFO and does nothing to a regular file), then fstat'ed on
// the descriptor itself (no race with a rename between the check and the open), and anything but a
// regular file is refused with what it is; only then is O_NONBLOCK cleared.
#pragma once
#include <cstddef>
#include <string>

namespace halfgrad {

/// A file descriptor closed on scope exit (-1: none).
struct UniqueFd {
  int fd = -1;
  UniqueFd() = default;
  explicit UniqueFd(int f) : fd(f) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  ~UniqueFd();
  /// Gives up ownership.
  int release() {
    const int f = fd;
    fd = -1;
    return f;
  }
};

/// "a FIFO", "a directory", "a character device", "a block device", "a socket", "a symbolic link",
/// "a regular file" or "not a regular file", for st_mode.
const char* file_type_name(unsigned mode);

/// Opens `path` read-only (O_CLOEXEC) without blocking and checks that it is a regular file. Throws
/// halfgrad::Error "<where>: cannot open: no such file; expected <what>", "<where>: is a FIFO, not a regular
/// file; expected <what>", or "<where>: cannot open (<strerror>)". `where` names the caller and the
/// path ("read_nifti: /x/a.nii.gz"); `what` describes the file wanted ("a .nii or .nii.gz file").
UniqueFd open_regular_file(const std::string& path, const std::string& where, const std::string& what);

/// A new, empty regular file at `path` for writing (O_WRONLY | O_CLOEXEC), for a file whose name the
/// caller owns (a "<file>.tmp" of an atomic write, a log): whatever entry has that name is removed
/// first (a symbolic link is removed itself, never followed; a FIFO is removed, never opened), then
/// the file is created with O_CREAT | O_EXCL | O_NOFOLLOW, so the bytes land in that file and nowhere
/// a planted link points to. Throws halfgrad::Error "<where>: cannot create <path> (<strerror>)",
/// or "<where>: <path> is a directory" (a directory is never removed).
UniqueFd create_fresh_file(const std::string& path, const std::string& where);

/// The whole of a regular file of at most `max_bytes` (open_regular_file's checks; a longer file is
/// refused before it is read). Throws halfgrad::Error starting "<where>: ".
std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& where,
                              const std::string& what);

}  // namespace halfgrad
