// Checkpoint save/load: bit-exact round trip, and every way a file can be wrong.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "core/json_checked.h"
#include "core/safetensors.h"
#include "fuzz/tiny_module.h"
#include "tests/check_error.h"
#include "tests/temp_dir.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace halfgrad;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case (tests/temp_dir.h), named after this file's subject.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("halfgrad_nn_ckpt") {}
};


nn::UNet3dOptions small() { return nn::UNet3dOptions().channels({2, 4}).bottleneck(8); }

std::vector<char> bytes_of(const Tensor& t) {
  const char* p = static_cast<const char*>(t.raw_data());
  return std::vector<char>(p, p + t.nbytes());
}

// Every parameter's and buffer's bytes, to check a module is unchanged bit for bit.
std::vector<std::vector<char>> snapshot(const nn::Module& m) {
  std::vector<std::vector<char>> out;
  for (auto& p : m.parameters()) out.push_back(bytes_of(p));
  for (auto& b : m.buffers()) out.push_back(bytes_of(b));
  return out;
}

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& path, const std::vector<char>& data) {
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
}

// `text` as a JSON string literal, escaped by hand: nlohmann's dump() refuses invalid UTF-8, which
// the tests below must be able to put into a file.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += c;
  }
  return out + "\"";
}

// A safetensors file with the header text `header` and the buffer `buffer`.
void craft_safetensors(const std::string& path, const std::string& header, const std::string& buffer = "") {
  std::vector<char> b(8);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), buffer.begin(), buffer.end());
  write_all(path, b);
}

// A checkpoint with no tensors and `json` as its extra JSON text (__metadata__["halfgrad"]): what
// anyone can craft.
void craft_checkpoint(const std::string& path, const std::string& json) {
  craft_safetensors(path, "{\"__metadata__\": {\"halfgrad\": " + json_string(json) + "}}");
}

}  // namespace

TEST_CASE("nn: checkpoint round trip of a UNet3d float32 (params, BN buffers, extra JSON and tensors) is bit-exact") {
  TempDir dir;
  const std::string path = dir.file("unet.hgc");
  Generator g1(11), g2(22);
  nn::UNet3d a(small(), g1), b(small(), g2);
  // Move BatchNorm's running statistics and counter off their initial values.
  Tensor x = Tensor::randn({2, 1, 8, 8, 8}, g1);
  a.forward(x);
  REQUIRE(snapshot(a) != snapshot(b));

  nlohmann::json extra = {{"step", 42}, {"scaler", {{"scale", 65536.0}, {"growth_tracker", 3}}}};
  Tensor moment = Tensor::randn({3, 2}, g1, kFloat16);
  nn::save_checkpoint(path, a, extra, {{"optim.exp_avg.head.weight", moment}});
  CHECK_FALSE(fs::exists(path + ".tmp"));

  Tensor w_handle = b.head->weight;
  nn::CheckpointState st = nn::load_checkpoint(path, b);
  CHECK(snapshot(a) == snapshot(b));
  CHECK(w_handle.is_same(b.head->weight));  // loaded in place
  CHECK(b.head->weight.requires_grad());
  CHECK(st.extra == extra);
  CHECK(nn::read_checkpoint_metadata(path) == extra);
  REQUIRE(st.extra_tensors.size() == 1);
  CHECK(st.extra_tensors[0].first == "optim.exp_avg.head.weight");
  CHECK(st.extra_tensors[0].second.dtype() == kFloat16);
  CHECK(bytes_of(st.extra_tensors[0].second) == bytes_of(moment));
  CHECK(b.forward(x).to_float_vector() == a.forward(x).to_float_vector());

  // Saving again replaces the file atomically; no extra JSON reads back as null.
  nn::save_checkpoint(path, b);
  CHECK(nn::read_checkpoint(path).extra.is_null());
}

TEST_CASE("nn: checkpoint of float16 parameters round-trips and refuses a float32 module") {
  TempDir dir;
  const std::string path = dir.file("half.hgc");
  nn::Conv3d a(nn::Conv3dOptions(2, 3, 3)), b(nn::Conv3dOptions(2, 3, 3));
  a.to(kFloat16);
  nn::save_checkpoint(path, a);
  const auto before = snapshot(b);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, b),
                       doctest::Contains("parameter 'weight': dtype float16 in the file, float32 in the module"), Error);
  CHECK(snapshot(b) == before);
  b.to(kFloat16);
  nn::load_checkpoint(path, b);
  CHECK(snapshot(a) == snapshot(b));
}

TEST_CASE("nn: checkpoint load of a missing file throws naming the path") {
  TempDir dir;
  nn::ReLU m;
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(dir.file("nope.hgc"), m), doctest::Contains("nope.hgc: cannot open"), Error);
}

TEST_CASE("nn: checkpoint truncated at any point throws a clear error and leaves the module unchanged") {
  TempDir dir;
  const std::string path = dir.file("full.hgc"), cut = dir.file("cut.hgc");
  Generator gen(5);
  auto make = [&] {
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 1), gen));
    s->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(2)));
    return s;
  };
  auto a = make(), b = make();
  nn::save_checkpoint(path, *a, {{"k", "v"}});
  const std::vector<char> full = read_all(path);
  const auto before = snapshot(*b);
  // Prefixes ending in the header size, the header JSON and inside the tensor bytes: every length up
  // to 64 bytes, then every 13th, then each of the last 16.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < full.size(); n += (n < 64 ? 1 : 13)) cuts.push_back(n);
  for (size_t n = full.size() - 16; n < full.size(); ++n) cuts.push_back(n);
  for (size_t n : cuts) {
    write_all(cut, std::vector<char>(full.begin(), full.begin() + n));
    INFO("truncated to " << n << " of " << full.size() << " bytes");
    CHECK_THROWS_AS(nn::load_checkpoint(cut, *b), Error);
  }
  CHECK(snapshot(*b) == before);
  write_all(cut, std::vector<char>(full.begin(), full.begin() + 40));
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(cut, *b), doctest::Contains("truncated"), Error);
}

TEST_CASE("nn: checkpoint rejects a foreign file, trailing bytes and a folder") {
  TempDir dir;
  const std::string path = dir.file("m.hgc"), bad = dir.file("bad.hgc");
  nn::Conv3d m(nn::Conv3dOptions(1, 2, 3));
  nn::save_checkpoint(path, m);
  const std::vector<char> good = read_all(path);

  write_all(bad, std::vector<char>{'{', '"', 'a', '"', ':', '1', '}', '\n', ' ', ' ', ' ', ' '});
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(bad, m), doctest::Contains("are accepted (not a safetensors file"), Error);

  std::vector<char> v = good;
  v.push_back(0);
  write_all(bad, v);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(bad, m), doctest::Contains("trailing bytes belong to no tensor"), Error);

  CHECK_THROWS_WITH_AS(nn::load_checkpoint(dir.path.string(), m), doctest::Contains("not a regular file"), Error);
}

TEST_CASE("nn: checkpoint is a safetensors file with the module's names, its kinds and extra JSON in __metadata__") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  auto bn = std::make_shared<nn::Sequential>();
  bn->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 3)));
  bn->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(2)));
  nn::save_checkpoint(path, *bn, {{"epoch", 3}}, {{"optim.x", Tensor::zeros({2})}});
  const safetensors::Header h = safetensors::read_header(path);
  std::vector<std::string> names;
  for (const auto& e : h.entries) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                          "1.num_batches_tracked", "optim.x"});
  CHECK(h.entries[6].dtype == kInt64);
  CHECK(h.entries[6].shape.empty());  // PyTorch's 0-dim int64 counter
  CHECK(h.metadata.at("halfgrad") == "{\"epoch\":3}");
  CHECK(h.metadata.at("halfgrad_buffers") == "[\"1.running_mean\",\"1.running_var\",\"1.num_batches_tracked\"]");
  CHECK(h.metadata.at("halfgrad_extra_tensors") == "[\"optim.x\"]");

  // Without halfgrad's kinds (a file PyTorch wrote), the module decides which tensor is a buffer.
  safetensors::Contents c = safetensors::read_file(path);
  c.tensors.pop_back();
  safetensors::write_file(dir.file("torch.safetensors"), c.tensors);
  const nn::CheckpointState st = nn::read_checkpoint(dir.file("torch.safetensors"));
  CHECK_FALSE(st.kinds_from_file);
  CHECK(st.buffers.size() == 3);  // guessed from PyTorch's BatchNorm names
  nn::load_checkpoint(dir.file("torch.safetensors"), *bn);
}

TEST_CASE("nn: checkpoint with a wrong shape names the tensor and both shapes; module unchanged") {
  TempDir dir;
  const std::string path = dir.file("unet.hgc");
  nn::UNet3d wide(nn::UNet3dOptions().channels({2, 4}).bottleneck(8));
  nn::UNet3d narrow(nn::UNet3dOptions().channels({2, 4}).bottleneck(6));
  nn::save_checkpoint(path, wide);
  const auto before = snapshot(narrow);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, narrow),
                       doctest::Contains("parameter 'bott.0.weight': shape [8, 4, 3, 3, 3] in the file, "
                                         "[6, 4, 3, 3, 3] in the module"),
                       Error);
  CHECK(snapshot(narrow) == before);
}

TEST_CASE("nn: checkpoint with a wrong, missing or unexpected name names it; module unchanged") {
  TempDir dir;
  const std::string path = dir.file("m.hgc");
  auto with_bn = std::make_shared<nn::Sequential>();
  with_bn->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 3)));
  with_bn->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(2)));
  auto with_in = std::make_shared<nn::Sequential>();
  with_in->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 3)));
  with_in->push_back(std::make_shared<nn::InstanceNorm3d>(nn::InstanceNorm3dOptions(2)));
  nn::save_checkpoint(path, *with_bn);
  const auto before = snapshot(*with_in);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *with_in),
                       doctest::Contains("the file has parameter '1.weight', which the module (Sequential) does not"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *with_in), doctest::Contains("buffer '1.running_mean'"), Error);
  CHECK(snapshot(*with_in) == before);

  // The other way: the module has tensors the file lacks.
  nn::save_checkpoint(path, *with_in);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *with_bn),
                       doctest::Contains("parameter '1.weight' of the module is missing from the file"), Error);

  // A parameter stored as a buffer is a mismatch too.
  nn::CheckpointState st;
  st.parameters = with_in->named_parameters();
  st.buffers = {{"0.weight", Tensor::zeros({2, 1, 3, 3, 3})}};
  st.parameters.erase(st.parameters.begin());
  nn::write_checkpoint(path, st);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, *with_in), doctest::Contains("(the file has it as a buffer)"), Error);
}

TEST_CASE("nn: write_checkpoint refuses duplicate or empty names before touching the file") {
  TempDir dir;
  const std::string path = dir.file("m.hgc");
  nn::CheckpointState st;
  st.parameters = {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}};
  CHECK_THROWS_WITH_AS(nn::write_checkpoint(path, st), doctest::Contains("appears twice"), Error);
  st.parameters = {{"", Tensor::zeros({1})}};
  CHECK_THROWS_AS(nn::write_checkpoint(path, st), Error);
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK_THROWS_WITH_AS(nn::write_checkpoint(dir.file("no_such_dir/m.hgc"), nn::CheckpointState()),
                       doctest::Contains("cannot create"), Error);
}

// ---- crafted metadata (issue 8): a valid checksum proves nothing, the JSON is parsed as hostile -----

TEST_CASE("nn: checkpoint whose metadata nests 100,000 arrays is an Error before parsing, not a stack overflow") {
  TempDir dir;
  const std::string path = dir.file("deep.bin");
  craft_checkpoint(path, std::string(100000, '[') + std::string(100000, ']'));
  testing::check_error([&] { nn::read_checkpoint_metadata(path); },
                       {"read_checkpoint: " + path + ": the extra JSON", "nests arrays/objects more than 64 levels deep"});
  // Objects count as levels too, and brackets inside strings do not.
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\":";
  craft_checkpoint(path, objects + "1" + std::string(65, '}'));
  testing::check_error([&] { nn::read_checkpoint_metadata(path); }, {"more than 64 levels deep"});
  craft_checkpoint(path, "{\"s\": \"" + std::string(1000, '[') + "\\\"\"}");
  CHECK(nn::read_checkpoint_metadata(path).at("s").get<std::string>().size() == 1001);
  // A header size beyond the limit is refused before anything is read or parsed.
  std::vector<char> b(16, ' ');
  const uint64_t n = uint64_t{1} << 31;
  std::memcpy(b.data(), &n, 8);
  write_all(path, b);
  testing::check_error([&] { nn::read_checkpoint_metadata(path); },
                       {path, "the header size field says 2147483648 bytes; at most 100000000 are accepted"});
}

TEST_CASE("nn: checkpoint metadata of the wrong type names the file and the field, never nlohmann's text") {
  TempDir dir;
  const std::string path = dir.file("checkpoint.bin");
  const nlohmann::json good = {{"recipe", "cpu"}, {"model", small().to_json()}};
  auto model_error = [&](const nlohmann::json& meta, const std::vector<std::string>& parts) {
    craft_checkpoint(path, meta.dump());
    const nlohmann::json back = nn::read_checkpoint_metadata(path);
    std::vector<std::string> all = parts;
    all.insert(all.begin(), path + ": ");
    testing::check_error([&] { nn::UNet3dOptions::from_json(json_checked::Field(back, path)["model"]); }, all);
    try {
      nn::UNet3dOptions::from_json(json_checked::Field(back, path)["model"]);
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find("json.exception") == std::string::npos, e.what());
      CHECK_MESSAGE(std::string(e.what()).size() < 300, e.what());  // no dump of the input
    }
  };
  nlohmann::json m = good;
  m["model"]["in_channels"] = "1";
  model_error(m, {"field 'model.in_channels' must be an integer, got string \"1\""});
  m = good;
  m["model"]["channels"][1] = 4.5;
  model_error(m, {"field 'model.channels[1]' must be an integer, got number 4.5"});
  m = good;
  m["model"]["channels"] = std::string(100000, 'x');  // a long value is shown by a bounded prefix
  model_error(m, {"field 'model.channels' must be an array of level widths, got string \"xxxx", "...\""});
  m = good;
  m["model"]["bottleneck"] = 1 << 20;
  model_error(m, {"field 'model.bottleneck' is 1048576; expected an integer in [1, 4096]"});
  m = good;
  m["model"]["norm"] = nlohmann::json::array({1, 2, 3});
  model_error(m, {"field 'model.norm' must be a string, got array"});
  m = good;
  m["model"] = nlohmann::json::array({small().to_json()});
  model_error(m, {"field 'model' must be an object, got array"});
  m = good;
  m["model"]["channels"] = nlohmann::json::array();
  model_error(m, {"field 'model.channels' has 0 levels; expected 1 to 16"});
  m = good;
  m["model"]["num_classes"] = uint64_t{1} << 63;
  model_error(m, {"field 'model.num_classes' is 9223372036854775808; expected an integer below 2^63"});
  m = good;
  m["model"].erase("norm");
  model_error(m, {"field 'model.norm' is missing"});
  // The unchanged metadata rebuilds the options.
  craft_checkpoint(path, good.dump());
  const nlohmann::json back = nn::read_checkpoint_metadata(path);
  CHECK(nn::UNet3dOptions::from_json(json_checked::Field(back, path)["model"]).describe() == small().describe());
}

TEST_CASE("nn: checkpoint metadata that is not valid JSON is an Error with a bounded excerpt") {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  craft_checkpoint(path, "{\"model\": {\"in_channels\": 1,, }}");
  testing::check_error([&] { nn::read_checkpoint_metadata(path); },
                       {path + ": the extra JSON: not valid JSON: syntax error near byte", "expected a JSON document"});
  craft_checkpoint(path, "{\"x\": \"\xff\xfe\"}");  // invalid UTF-8
  testing::check_error([&] { nn::read_checkpoint_metadata(path); }, {path, "not valid JSON", "\\xff"});
  craft_checkpoint(path, "[1e99999]");  // beyond double's range
  testing::check_error([&] { nn::read_checkpoint_metadata(path); }, {path, "not valid JSON"});
}

TEST_CASE("nn: checkpoint fuzz seeds load (TinyModule, width-2 U-Net rebuilt from its metadata); findings end in an Error") {
  const std::string dir = HALFGRAD_SOURCE_DIR "/fuzz/corpus/checkpoint/";
  fuzz::TinyModule tiny;
  nn::load_checkpoint(dir + "tiny_module.safetensors", tiny);
  const nlohmann::json meta = nn::read_checkpoint_metadata(dir + "unet_width2.safetensors");
  const nn::UNet3dOptions o = nn::UNet3dOptions::from_json(json_checked::Field(meta, "unet_width2.safetensors")["model"]);
  CHECK(o.channels() == std::vector<int64_t>{2});
  nn::UNet3d unet(o);
  nn::load_checkpoint(dir + "unet_width2.safetensors", unet);
  // Inputs a fuzzer crashed on, replayed as checkpoint_fuzz does.
  std::error_code ec;
  const fs::path findings = HALFGRAD_SOURCE_DIR "/tests/data/fuzz/checkpoint_fuzz";
  if (!fs::is_directory(findings, ec)) return;
  TempDir tmp;
  for (const auto& e : fs::directory_iterator(findings)) {
    CAPTURE(e.path().string());
    write_all(tmp.file("finding.bin"), read_all(e.path().string()));
    try {
      const nlohmann::json m = nn::read_checkpoint_metadata(tmp.file("finding.bin"));
      if (m.is_object() && m.contains("model")) nn::UNet3dOptions::from_json(json_checked::Field(m, "f")["model"]);
    } catch (const Error&) {
    }
    try {
      fuzz::TinyModule t;
      nn::load_checkpoint(tmp.file("finding.bin"), t);
    } catch (const Error&) {
    }
  }
}

TEST_CASE("nn: checkpoint tensor whose extents multiply past 2^63 is an Error, with no overflow on the way") {
  // checkpoint_fuzz found this in the old format: the extents were multiplied after the overflow
  // check had already failed (signed overflow, undefined behaviour). The safetensors reader checks
  // each multiplication the same way.
  TempDir dir;
  const std::string path = dir.file("huge_shape.bin");
  for (const char* shape : {"[4611686018427387904, 4611686018427387904, 4]", "[0, 4611686018427387904, 4611686018427387904]",
                                   "[1152921504606846976, 8, 0]"}) {
    CAPTURE(shape);
    craft_safetensors(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": " + std::string(shape) + ", \"data_offsets\": [0, 0]}}");
    testing::check_error([&] { nn::read_checkpoint(path); }, {"safetensors: " + path, "tensor 'w': shape [", "is too large"});
  }
}
