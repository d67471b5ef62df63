// Rendezvous (dist/rendezvous.h) on the CPU: threads play the ranks and pass a blob through a file
// and through TCP on localhost; a rank that waits for nobody times out with an error naming what it
// waited for; RendezvousConfig::from_env refuses bad variables by name.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "dist/rendezvous.h"
#include "tests/check_error.h"
#include "tests/temp_dir.h"

using namespace halfgrad;
using namespace halfgrad::dist;

namespace {

// 128 bytes like an ncclUniqueId, none of them zero-only (a reader that returned zeros would fail).
Blob test_blob() {
  Blob b(128);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 37 + 11);
  return b;
}

// A port nobody listens on now: bind port 0, read what the kernel chose, close.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(s);
  return ntohs(a.sin_port);
}

// Runs `world` ranks as threads; rank r's result (or error message) lands in out[r].
template <typename F>
void run_ranks(int world, F rank_fn, std::vector<Blob>& out, std::vector<std::string>& errors) {
  out.assign(world, {});
  errors.assign(world, "");
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        out[r] = rank_fn(r);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
}

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("rendezvous file: 4 thread ranks, non-zero ranks start first, all get rank 0's 128 bytes") {
  testing::TempDir dir("rendezvous");
  const std::string path = dir.file("id");
  std::vector<Blob> got;
  std::vector<std::string> errors;
  run_ranks(4, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others poll first
    return exchange_via_file(path, r, r == 0 ? test_blob() : Blob{}, 10);
  }, got, errors);
  for (int r = 0; r < 4; ++r) {
    CHECK_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
    CHECK(got[r] == test_blob());
  }
  // Written by rename: no temp file left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) { (void)e; ++files; }
  CHECK(files == 1);
}

TEST_CASE("rendezvous file: a rank whose file never appears times out naming the file") {
  testing::TempDir dir("rendezvous");
  const std::string path = dir.file("never");
  const auto t0 = std::chrono::steady_clock::now();
  testing::check_error([&] { exchange_via_file(path, 2, {}, 0.2); }, {"rendezvous (file, rank 2)", path, "0.2 s"});
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("rendezvous file: rank 0 refuses a folder it cannot write, naming it") {
  testing::check_error([&] { exchange_via_file("/nonexistent-folder/id", 0, test_blob(), 1); },
                       {"rendezvous (file, rank 0)", "/nonexistent-folder/id"});
}

TEST_CASE("rendezvous tcp: 4 thread ranks on localhost, rank 0 listening late, all get rank 0's bytes") {
  const int port = free_port();
  std::vector<Blob> got;
  std::vector<std::string> errors;
  run_ranks(4, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // clients retry meanwhile
    return exchange_via_tcp("127.0.0.1", port, r, 4, r == 0 ? test_blob() : Blob{}, 20);
  }, got, errors);
  for (int r = 0; r < 4; ++r) {
    CHECK_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
    CHECK(got[r] == test_blob());
  }
}

TEST_CASE("rendezvous tcp: rank 0 with a missing peer, and a peer without rank 0, time out naming the address") {
  const int port = free_port();
  testing::check_error([&] { exchange_via_tcp("127.0.0.1", port, 0, 3, test_blob(), 0.3); },
                       {"rank 0", std::to_string(port), "1 of 3 ranks joined"});
  testing::check_error([&] { exchange_via_tcp("127.0.0.1", port, 1, 3, {}, 0.3); },
                       {"rank 1", "127.0.0.1:" + std::to_string(port), "could not reach rank 0"});
}

TEST_CASE("rendezvous tcp: two peers claiming the same rank are refused by rank 0") {
  const int port = free_port();
  std::vector<Blob> got;
  std::vector<std::string> errors;
  run_ranks(3, [&](int r) {
    const int claimed = r == 0 ? 0 : 1;  // threads 1 and 2 both say rank 1
    if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return exchange_via_tcp("127.0.0.1", port, claimed, 3, r == 0 ? test_blob() : Blob{}, 3);
  }, got, errors);
  CHECK(errors[0].find("says it is rank 1") != std::string::npos);
}

TEST_CASE("RendezvousConfig::from_env: torchrun's variables, the file form, and the single-process default") {
  const RendezvousConfig single = RendezvousConfig::from_env(env_of({}));
  CHECK(single.world_size == 1);
  CHECK(single.rank == 0);

  const RendezvousConfig tcp = RendezvousConfig::from_env(env_of(
      {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}}));
  CHECK(tcp.rank == 3);
  CHECK(tcp.world_size == 8);
  CHECK(tcp.local_rank == 3);
  CHECK(tcp.master_addr == "node0");
  CHECK(tcp.tcp_port() == 29500);
  CHECK(tcp.timeout_seconds == 300);

  const RendezvousConfig agent = RendezvousConfig::from_env(
      env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "localhost"},
              {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  CHECK(agent.tcp_port() == 29501);  // torchrun's own store holds 29500

  const RendezvousConfig file = RendezvousConfig::from_env(
      env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"HALFGRAD_RENDEZVOUS_FILE", "/run/id"},
              {"HALFGRAD_RENDEZVOUS_TIMEOUT", "2.5"}}));
  CHECK(file.file == "/run/id");
  CHECK(file.timeout_seconds == 2.5);
}

TEST_CASE("RendezvousConfig::from_env: bad variables are refused by name") {
  const std::map<std::string, std::string> ok = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  const auto with = [&](const std::string& k, const std::string& v) {
    auto m = ok;
    m[k] = v;
    return env_of(m);
  };
  const auto without = [&](const std::string& k) {
    auto m = ok;
    m.erase(k);
    return env_of(m);
  };
  testing::check_error([&] { RendezvousConfig::from_env(with("RANK", "2")); }, {"RANK='2'", "[0, 1]"});
  testing::check_error([&] { RendezvousConfig::from_env(with("RANK", "-1")); }, {"RANK='-1'"});
  testing::check_error([&] { RendezvousConfig::from_env(with("WORLD_SIZE", "two")); }, {"WORLD_SIZE='two'"});
  testing::check_error([&] { RendezvousConfig::from_env(with("WORLD_SIZE", "0")); }, {"WORLD_SIZE='0'"});
  testing::check_error([&] { RendezvousConfig::from_env(with("MASTER_PORT", "70000")); },
                       {"MASTER_PORT='70000'", "65535"});
  testing::check_error([&] { RendezvousConfig::from_env(with("HALFGRAD_RENDEZVOUS_TIMEOUT", "0")); },
                       {"HALFGRAD_RENDEZVOUS_TIMEOUT='0'"});
  testing::check_error([&] { RendezvousConfig::from_env(without("RANK")); }, {"WORLD_SIZE is set but RANK is not"});
  testing::check_error([&] { RendezvousConfig::from_env(without("LOCAL_RANK")); }, {"LOCAL_RANK is not set"});
  testing::check_error([&] { RendezvousConfig::from_env(without("MASTER_ADDR")); }, {"MASTER_ADDR is not set"});
  testing::check_error([&] { RendezvousConfig::from_env(without("MASTER_PORT")); }, {"MASTER_PORT is not set"});
}
