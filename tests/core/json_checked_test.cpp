// Tests of core/json_checked.h: the depth pre-scan, the size cap, bounded syntax-error excerpts
// and the typed field accessors' messages.
#include "core/json_checked.h"

#include <doctest/doctest.h>

#include <string>

#include "tests/check_error.h"

using namespace halfgrad;
using json_checked::Field;
using nlohmann::json;

TEST_CASE("core json_checked: nesting_depth counts brackets outside strings and stops past the limit") {
  auto depth = [](const std::string& s, int limit = 100) { return json_checked::nesting_depth(s.data(), s.size(), limit); };
  CHECK(depth("1") == 0);
  CHECK(depth("[[1], {\"a\": [2]}]") == 3);
  CHECK(depth("\"[[[[\"") == 0);
  CHECK(depth("[\"\\\"[[[\"]") == 1);  // an escaped quote does not end the string
  CHECK(depth(std::string(1000000, '['), 64) == 65);
}

TEST_CASE("core json_checked: parse refuses text over max_bytes or max_depth before parsing, and names where") {
  json_checked::ParseLimits lim;
  lim.max_bytes = 10;
  lim.max_depth = 2;
  const std::string long_text = "[1, 2, 3, 4]";
  testing::check_error([&] { json_checked::parse(long_text.data(), long_text.size(), "f.json", lim); },
                       {"f.json: JSON text of 12 bytes exceeds the limit of 10 bytes"});
  const std::string deep = "[[[1]]]";
  testing::check_error([&] { json_checked::parse(deep.data(), deep.size(), "f.json", lim); },
                       {"f.json: JSON nests arrays/objects more than 2 levels deep"});
  const std::string ok = "[[1]]";
  CHECK(json_checked::parse(ok.data(), ok.size(), "f.json", lim) == json::parse(ok));
  const std::string bad = "[1,]";
  testing::check_error([&] { json_checked::parse(bad.data(), bad.size(), "f.json", lim); },
                       {"f.json: not valid JSON: syntax error near byte 3 of 4 (`[1,]`)"});
}

TEST_CASE("core json_checked: Field accessors name the file, the dotted path and both types") {
  const json doc = json::parse(R"({"model": {"width": "8", "list": [1, 2.5, "x"], "big": 18446744073709551615,
                                   "flag": true, "ok": 3}})");
  const Field root(doc, "checkpoint.bin");
  testing::check_error([&] { root["model"]["width"].as_int(); },
                       {"checkpoint.bin: field 'model.width' must be an integer, got string \"8\""});
  testing::check_error([&] { root["model"]["list"].as_int_list(); },
                       {"checkpoint.bin: field 'model.list[1]' must be an integer, got number 2.5"});
  testing::check_error([&] { root["model"]["list"][5]; }, {"field 'model.list[5]' is missing (the array has 3 elements)"});
  testing::check_error([&] { root["model"]["absent"]; }, {"field 'model.absent' is missing"});
  testing::check_error([&] { root["model"]["big"].as_int(); }, {"field 'model.big' is 18446744073709551615"});
  testing::check_error([&] { root["model"]["flag"].as_string(); }, {"field 'model.flag' must be a string, got boolean true"});
  testing::check_error([&] { root["model"]["ok"].as_int(4, 8); }, {"field 'model.ok' is 3; expected an integer in [4, 8]"});
  testing::check_error([&] { root["model"]["list"]["x"]; }, {"field 'model.list' must be an object, got array"});
  testing::check_error([&] { Field(doc["model"]["list"], "f")[0].as_bool(); }, {"f: field '[0]' must be a boolean"});
  testing::check_error([&] { Field(json::array(), "f").require_object(); }, {"f: the top level must be an object, got array"});
  CHECK(root["model"]["ok"].as_int() == 3);
  CHECK(root["model"]["list"][1].as_number() == 2.5);
  CHECK(root["model"].has("flag"));
  CHECK(!root["model"].has("nope"));
  CHECK(json_checked::preview(json(std::string(500, 'a')), 10) == "\"aaaaaaaaaa...\"");
  CHECK(json_checked::preview(json::parse("[1, [2]]")) == "an array of 2 elements");
  CHECK(json_checked::preview(json(std::string("a\nb"))) == "\"a\\x0ab\"");
}
