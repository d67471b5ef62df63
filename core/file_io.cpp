// file_io.cpp - see file_io.h.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace halfgrad {

UniqueFd::~UniqueFd() {
  if (fd >= 0) ::close(fd);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = o.release();
  }
  return *this;
}

const char* file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFIFO: return "a FIFO";
    case S_IFDIR: return "a directory";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
  }
  return "not a regular file";
}

UniqueFd open_regular_file(const std::string& path, const std::string& where, const std::string& what) {
  UniqueFd f(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (f.fd < 0) {
    const int err = errno;
    struct stat st;
    if (err == ENOENT) HG_FAIL(where << ": cannot open: no such file; expected " << what);
    // open(2) of a socket fails (ENXIO); say what the path is rather than the errno.
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      HG_FAIL(where << ": is " << file_type_name(st.st_mode) << ", not a regular file; expected " << what);
    HG_FAIL(where << ": cannot open (" << std::strerror(err) << "); expected " << what);
  }
  struct stat st;
  HG_CHECK(::fstat(f.fd, &st) == 0, where << ": cannot stat (" << std::strerror(errno) << ")");
  HG_CHECK(S_ISREG(st.st_mode), where << ": is " << file_type_name(st.st_mode) << ", not a regular file; expected " << what);
  const int flags = ::fcntl(f.fd, F_GETFL);
  HG_CHECK(flags >= 0 && ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) == 0,
           where << ": cannot clear O_NONBLOCK (" << std::strerror(errno) << ")");
  return f;
}

std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& where,
                              const std::string& what) {
  UniqueFd f = open_regular_file(path, where, what);
  struct stat st;
  HG_CHECK(::fstat(f.fd, &st) == 0, where << ": cannot stat (" << std::strerror(errno) << ")");
  const auto size = static_cast<uint64_t>(st.st_size);
  HG_CHECK(size <= max_bytes, where << ": is " << size << " bytes; at most " << max_bytes << " are read ("
                                    << what << " is far smaller)");
  std::string text(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::read(f.fd, &text[done], text.size() - done);
    if (r < 0 && errno == EINTR) continue;
    HG_CHECK(r >= 0, where << ": read failed (" << std::strerror(errno) << ")");
    if (r == 0) break;  // the file shrank while being read
    done += static_cast<size_t>(r);
  }
  HG_CHECK(done == text.size(), where << ": read " << done << " of " << text.size()
                                      << " bytes (the file shrank while being read)");
  return text;
}

UniqueFd create_fresh_file(const std::string& path, const std::string& where) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    HG_CHECK(!S_ISDIR(st.st_mode), where << ": " << path << " is a directory; expected a file name to write");
    HG_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT,
             where << ": cannot remove the old " << path << " (" << std::strerror(errno) << ")");
  }
  UniqueFd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  HG_CHECK(f.fd >= 0, where << ": cannot create " << path << " (" << std::strerror(errno) << ")");
  return f;
}

}  // namespace halfgrad
