// rendezvous.h - how the ranks of a distributed run find each other before NCCL can: rank 0 makes a
// secret (NCCL's 128-byte ncclUniqueId) and every other rank must receive the same bytes. The
// functions here move an opaque byte blob from rank 0 to ranks 1..N-1; they know nothing of NCCL, so
// they are tested on the CPU (tests/dist/rendezvous_test.cpp: threads as ranks).
//
// Two ways, as PyTorch has (torch.distributed's FileStore and TCPStore):
//   file  rank 0 writes the blob to PATH.tmp.<pid> and renames it to PATH (atomic on POSIX, so a
//         reader sees no file or the whole blob); the others poll for PATH every 20 ms. One host (or
//         a shared file system). `halfgrad-unet3d train --gpus N` uses this, with a fresh file name per
//         launch in the run folder (a stale file from an earlier launch would hand out an old id).
//   tcp   rank 0 listens on MASTER_PORT (all interfaces) and accepts WORLD_SIZE - 1 connections; each
//         other rank connects to MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not yet listening),
//         sends a hello (magic "HGRV" + its rank), and reads back magic + length + blob. Multi-host,
//         launched by torchrun, mpirun or a job script that sets the variables.
// Both wait at most `timeout_seconds` (default 300 s: a cluster may start ranks minutes apart), then
// throw halfgrad::Error naming the file or the address, the rank and what did not arrive.
//
// Under torchrun the agent's own TCPStore already listens on MASTER_PORT (it sets
// TORCHELASTIC_USE_AGENT_STORE=True for its workers): then the tcp rendezvous uses MASTER_PORT + 1.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace halfgrad::dist {

using Blob = std::vector<uint8_t>;

/// Who this process is in the run, from the environment as torchrun sets it.
struct RendezvousConfig {
  int rank = 0;        // RANK, in [0, world_size)
  int world_size = 1;  // WORLD_SIZE, >= 1
  int local_rank = 0;  // LOCAL_RANK: the rank on this host (which GPU); required when world_size > 1
  std::string master_addr;  // MASTER_ADDR: host name or address of rank 0 (tcp)
  int master_port = 0;      // MASTER_PORT in [1, 65535] (tcp); the port actually used: tcp_port()
  bool agent_store = false; // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's store holds master_port
  std::string file;         // HALFGRAD_RENDEZVOUS_FILE: when set, the file rendezvous (no MASTER_*)
  double timeout_seconds = 300;  // HALFGRAD_RENDEZVOUS_TIMEOUT (seconds, > 0)

  /// The port the tcp rendezvous listens on / connects to: master_port, + 1 under torchrun's agent store.
  int tcp_port() const { return agent_store ? master_port + 1 : master_port; }

  /// Reads the variables above through `getenv` (std::getenv by default; tests pass a map).
  /// Without WORLD_SIZE and RANK: a single process (rank 0 of 1). Throws halfgrad::Error naming the
  /// variable and the value for: a non-integer or out-of-range RANK / WORLD_SIZE / LOCAL_RANK /
  /// MASTER_PORT / timeout, only one of RANK and WORLD_SIZE set, and with world_size > 1: no
  /// LOCAL_RANK, or neither HALFGRAD_RENDEZVOUS_FILE nor both MASTER_ADDR and MASTER_PORT.
  static RendezvousConfig from_env(const std::function<const char*(const char*)>& getenv = {});
};

/// File rendezvous: rank 0 writes `blob` to `path` atomically and returns it; every other rank
/// ignores `blob` and returns the file's bytes once it appears. Throws halfgrad::Error naming `path`
/// when rank 0 cannot write it, or another rank has not seen it after `timeout_seconds`.
Blob exchange_via_file(const std::string& path, int rank, const Blob& blob, double timeout_seconds);

/// TCP rendezvous (see the file comment): rank 0 serves `blob` to world_size - 1 connections on
/// `port` and returns it; the others connect to addr:port and return what rank 0 sent. Throws
/// halfgrad::Error naming addr:port and the rank on a socket error, a reply without the magic
/// (another program on the port), a short read, two peers claiming one rank, or when the ranks
/// have not all arrived within `timeout_seconds`. Rank 0 drops a connection that sends no hello.
Blob exchange_via_tcp(const std::string& addr, int port, int rank, int world_size, const Blob& blob,
                      double timeout_seconds);

/// The exchange `config` selects: nothing to do for world_size 1 (returns `blob`), else the file when
/// config.file is set, else tcp on config.master_addr:config.tcp_port().
Blob rendezvous(const RendezvousConfig& config, const Blob& blob);

}  // namespace halfgrad::dist
