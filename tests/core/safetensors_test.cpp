// safetensors reader/writer (core/safetensors.h): byte-exact round trip of every dtype, 0-dim and
// empty tensors, the file's exact layout, and each rejection of a crafted header by its message.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/safetensors.h"
#include "tests/check_error.h"
#include "tests/temp_dir.h"

using namespace halfgrad;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case (tests/temp_dir.h), named after this file's subject.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("halfgrad_safetensors") {}
};


std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file of the 8-byte size of `header`, `header`, then `buffer`.
void craft(const std::string& path, const std::string& header, const std::string& buffer = "") {
  const uint64_t n = header.size();
  std::string b(reinterpret_cast<const char*>(&n), 8);
  std::ofstream(path, std::ios::binary) << b << header << buffer;
}

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.raw_data()), t.nbytes()); }

}  // namespace

TEST_CASE("safetensors: round trip of F32, F16, F64, I64 tensors, a 0-dim one and an empty one is byte-exact") {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  Generator g(3);
  NamedTensors ts = {{"f32", Tensor::randn({2, 3}, g)},
                     {"f16", Tensor::randn({4, 1, 2}, g, kFloat16)},
                     {"f64", Tensor::randn({3}, g, kFloat64)},
                     {"i64", Tensor::zeros({3}, kInt64)},
                     {"scalar", Tensor::zeros({}, kInt64)},
                     {"empty", Tensor::zeros({0, 5})}};
  ts[3].second.data<int64_t>()[0] = -1;
  ts[3].second.data<int64_t>()[2] = int64_t{1} << 40;
  ts[4].second.data<int64_t>()[0] = -42;
  safetensors::write_file(path, ts, {{"k", "v"}, {"format", "pt"}});
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const safetensors::Contents c = safetensors::read_file(path);
  REQUIRE(c.tensors.size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    CAPTURE(ts[i].first);
    CHECK(c.tensors[i].first == ts[i].first);  // the file's byte order is the order written
    CHECK(c.tensors[i].second.dtype() == ts[i].second.dtype());
    CHECK(c.tensors[i].second.shape() == ts[i].second.shape());
    CHECK(bytes_of(c.tensors[i].second) == bytes_of(ts[i].second));
  }
  CHECK(c.metadata == std::map<std::string, std::string>{{"k", "v"}, {"format", "pt"}});

  // The layout of the spec: u64 header size, JSON padded with spaces to 8-byte alignment, then the bytes.
  const std::string raw = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  CHECK((8 + n) % 8 == 0);
  CHECK(raw.size() == 8 + n + 24 + 16 + 24 + 24 + 8);
  CHECK(raw.substr(8, 8) == "{\"__meta");
  CHECK(raw.find("\"f32\":{\"data_offsets\":[0,24],\"dtype\":\"F32\",\"shape\":[2,3]}") != std::string::npos);
  CHECK(raw.find("\"scalar\":{\"data_offsets\":[88,96],\"dtype\":\"I64\",\"shape\":[]}") != std::string::npos);
  CHECK(raw.substr(8 + n, 24) == bytes_of(ts[0].second));
}

TEST_CASE("safetensors: write_file refuses bad names before creating anything; a failed write leaves the old file") {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  testing::check_error([&] { safetensors::write_file(path, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}); },
                       {"safetensors: " + path, "tensor 'a' appears twice"});
  testing::check_error([&] { safetensors::write_file(path, {{"__metadata__", Tensor::zeros({1})}}); }, {"is empty or reserved"});
  testing::check_error([&] { safetensors::write_file(path, {{"u", Tensor()}}); }, {"tensor 'u' is undefined"});
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  safetensors::write_file(path, {{"a", Tensor::ones({2})}});
  const std::string before = read_bytes(path);
  CHECK_THROWS_AS(safetensors::write_file(path, {{"a", Tensor::ones({3})}, {"a", Tensor::ones({3})}}), Error);
  CHECK(read_bytes(path) == before);
  testing::check_error([&] { safetensors::write_file(dir.file("no_such_dir/t.safetensors"), {}); }, {"cannot create"});
}

TEST_CASE("safetensors: every malformed header is an Error naming the file and the tensor") {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  const std::string where = "safetensors: " + p + ": ";
  auto rejects = [&](const std::string& header, const std::string& buffer, const std::vector<std::string>& parts) {
    craft(p, header, buffer);
    std::vector<std::string> all = parts;
    all.insert(all.begin(), where);
    testing::check_error([&] { safetensors::read_file(p); }, all);
  };
  const std::string b8(8, '\0'), b16(16, '\0');
  const std::string a = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  // Overlap, gap, trailing bytes, offset past the end, begin after end, size mismatch.
  rejects("{" + a + R"(, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", b16,
          {"tensor 'b' (bytes [4, 12)) overlaps tensor 'a' (bytes [0, 8))"});
  rejects("{" + a + R"(, "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})", b16,
          {"bytes [8, 12) before tensor 'b' belong to no tensor (a gap in the buffer)"});
  rejects("{" + a + "}", b16, {"the buffer has 16 bytes but its tensors end at byte 8"});
  rejects(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", b8,
          {"tensor 'a': data_offsets [0, 16] reach past the end of the 8-byte buffer"});
  rejects(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", b8, {"tensor 'a'", "end before they begin"});
  rejects(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", b8,
          {"tensor 'a': data_offsets [0, 8] hold 8 bytes; F32 [3] needs 12"});
  // Dtypes: one of the spec's that halfgrad does not hold, and one that is no dtype at all.
  rejects(R"({"a": {"dtype": "U16", "shape": [4], "data_offsets": [0, 8]}})", b8,
          {"tensor 'a': dtype \"U16\" is not one halfgrad holds; expected F32, F16, BF16, F64 or I64"});
  rejects(R"({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", b8, {"dtype \"F33\" is not a safetensors dtype"});
  // Shapes: negative, too many dimensions, not integers.
  rejects(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", b8, {"field 'a.shape[0]' is -2"});
  rejects(R"({"a": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,2], "data_offsets": [0, 8]}})", b8,
          {"tensor 'a': 9 dimensions; at most 8"});
  rejects(R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", b8, {"field 'a.shape[0]' must be an integer"});
  rejects(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", b8, {"tensor 'a': data_offsets has 1 elements"});
  rejects(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "extra": 1}})", b8, {"unexpected key \"extra\""});
  rejects(R"({"a": {"dtype": "F32", "shape": [2]}})", b8, {"field 'a.data_offsets' is missing"});
  // Structure: not an object, a duplicate key, metadata that is not all strings, not JSON.
  rejects("[1, 2]", "", {"the top level must be an object"});
  rejects("{" + a + ", " + a + "}", b8, {"the header: key \"a\" appears twice in one object"});
  rejects(R"({"__metadata__": {"k": 1}})", "", {"field '__metadata__.k' must be a string, got integer"});
  rejects(R"({"__metadata__": [1]})", "", {"field '__metadata__' must be an object of strings"});
  rejects(R"({"a": )", "", {"the header: not valid JSON"});
  rejects(std::string(40, '[') + std::string(40, ']'), "", {"nests arrays/objects more than 16 levels deep"});

  // Header sizes: past the cap (refused before allocating), past the file, and a file under 8 bytes.
  std::string huge(16, ' ');
  const uint64_t big = uint64_t{1} << 40;
  std::memcpy(huge.data(), &big, 8);
  std::ofstream(p, std::ios::binary) << huge;
  testing::check_error([&] { safetensors::read_file(p); },
                       {where, "the header size field says 1099511627776 bytes; at most 100000000 are accepted"});
  std::string past(16, ' ');
  const uint64_t twenty = 20;
  std::memcpy(past.data(), &twenty, 8);
  std::ofstream(p, std::ios::binary) << past;
  testing::check_error([&] { safetensors::read_file(p); }, {where, "says 20 bytes but the file has only 8 after it"});
  std::ofstream(p, std::ios::binary) << "abc";
  testing::check_error([&] { safetensors::read_header(p); }, {where, "the file has 3 bytes"});
  testing::check_error([&] { safetensors::read_file(dir.file("missing")); }, {"missing: cannot open"});
}

TEST_CASE("safetensors: a BF16 tensor round-trips with dtype code \"BF16\" and its exact bits") {
  TempDir dir;
  const std::string path = dir.file("bf16.safetensors");
  Generator g(9);
  const Tensor b = Tensor::randn({3, 5}, g, kBFloat16);
  safetensors::write_file(path, {{"w", b}});
  CHECK(read_bytes(path).find("\"dtype\":\"BF16\"") != std::string::npos);
  const safetensors::Contents c = safetensors::read_file(path);
  REQUIRE(c.tensors.size() == 1);
  CHECK(c.tensors[0].second.dtype() == kBFloat16);
  CHECK(c.tensors[0].second.shape() == b.shape());
  CHECK(bytes_of(c.tensors[0].second) == bytes_of(b));
  // A BF16 entry of the wrong byte count is refused by name, as for the other dtypes.
  craft(dir.file("short.safetensors"), R"({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 4]}})", "12345678");
  CHECK_THROWS_WITH_AS(safetensors::read_file(dir.file("short.safetensors")), doctest::Contains("BF16 [4] needs 8"), Error);
}

TEST_CASE("safetensors: a header padded with spaces, zero-size tensors anywhere and an empty file list are valid") {
  TempDir dir;
  const std::string p = dir.file("ok.safetensors");
  craft(p, R"({"z": {"dtype": "I64", "shape": [0, 3], "data_offsets": [0, 0]}, "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}   )",
        std::string("\x00\x3c\x00\xc0", 4));
  const safetensors::Contents c = safetensors::read_file(p);
  REQUIRE(c.tensors.size() == 2);
  CHECK(c.tensors[0].first == "z");
  CHECK(c.tensors[1].second.to_float_vector() == std::vector<float>{1.0f, -2.0f});
  craft(p, "{}");
  CHECK(safetensors::read_file(p).tensors.empty());
}
