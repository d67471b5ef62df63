// check_error.h - the bad-input check the op tests share: f must throw halfgrad::Error whose message
// contains every one of `parts` (the op's name, the shapes, what was expected).
#pragma once
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace halfgrad::testing {

template <typename F>
void check_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL_CHECK("no error thrown; expected one naming " << parts.front());
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& s : parts) CHECK_MESSAGE(msg.find(s) != std::string::npos, "'" << s << "' not in: " << msg);
  }
}

}  // namespace halfgrad::testing
