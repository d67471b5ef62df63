// error.h - how halfgrad reports bad input: an exception whose message names the op (or file), the
// shapes or values involved, and what was expected. Nothing is modified before the check fails.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace halfgrad {

/// Every error halfgrad raises on bad input. what() reads "op: what was wrong; expected ...".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace halfgrad

/// HG_CHECK(cond, "conv3d: input " << shape_str(s) << " ...") throws halfgrad::Error when !cond.
#define HG_CHECK(cond, msg)                                  \
  do {                                                       \
    if (!(cond)) {                                           \
      std::ostringstream hg_check_os_;                       \
      hg_check_os_ << msg;                                   \
      throw ::halfgrad::Error(hg_check_os_.str());           \
    }                                                        \
  } while (0)

#define HG_FAIL(msg) HG_CHECK(false, msg)
