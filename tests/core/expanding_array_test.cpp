// expanding_array_test.cpp - ExpandingArray<3>: one integer fills every axis, a list gives one per
// axis, a list of the wrong length throws (as libtorch's ExpandingArray).
#include "core/expanding_array.h"

#include <doctest/doctest.h>

#include "tests/check_error.h"

using namespace halfgrad;

TEST_CASE("ExpandingArray: a single value fills every axis, a list sets each") {
  const ExpandingArray<3> cubic = 3;
  CHECK(cubic.vec() == std::vector<int64_t>{3, 3, 3});
  CHECK(cubic.uniform());
  CHECK(cubic.str() == "3");
  const ExpandingArray<3> aniso = {1, 3, 3};
  CHECK(aniso[0] == 1);
  CHECK(aniso[2] == 3);
  CHECK_FALSE(aniso.uniform());
  CHECK(aniso.str() == "(1, 3, 3)");
  CHECK(aniso != cubic);
  CHECK(ExpandingArray<3>(std::vector<int64_t>{2, 2, 2}) == ExpandingArray<3>(2));
}

TEST_CASE("ExpandingArray: a list of the wrong length throws, naming the expected count") {
  testing::check_error([] { ExpandingArray<3>{1, 2}; }, {"ExpandingArray<3>: expected 3 values, got 2"});
  testing::check_error([] { ExpandingArray<3>(std::vector<int64_t>{1, 2, 3, 4}); }, {"got 4"});
}
