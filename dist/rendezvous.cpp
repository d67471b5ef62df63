#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "core/error.h"

namespace halfgrad::dist {

namespace {

using Clock = std::chrono::steady_clock;

// Strict decimal in [lo, hi] (no sign, no spaces, no "0x"), or an error naming the variable.
int parse_env_int(const char* name, const char* value, long lo, long hi) {
  const std::string s = value;
  bool digits = !s.empty() && s.size() <= 9;
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  HG_CHECK(digits && std::stol(s) >= lo && std::stol(s) <= hi,
           "rendezvous: environment variable " << name << "='" << s << "'; expected a decimal integer in [" << lo
                                               << ", " << hi << "]");
  return static_cast<int>(std::stol(s));
}

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// The hello a non-zero rank sends and the header rank 0 answers with: magic, then a 32-bit
// little-endian number (the rank, or the blob's length).
constexpr char kMagic[4] = {'H', 'G', 'R', 'V'};
constexpr size_t kMaxBlob = 1 << 20;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// A socket closed when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() { if (fd >= 0) ::close(fd); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Waits until `fd` is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const double left = seconds_left(deadline);
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min(left * 1000.0 + 1, 1e9)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

// Sends or receives exactly n bytes before the deadline; the error names `where` and `what`.
void send_all(int fd, const uint8_t* p, size_t n, Clock::time_point deadline, const std::string& where) {
  while (n > 0) {
    HG_CHECK(wait_ready(fd, POLLOUT, deadline), where << ": timed out sending");
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    HG_CHECK(k > 0, where << ": send failed: " << std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}
void recv_all(int fd, uint8_t* p, size_t n, Clock::time_point deadline, const std::string& where, const char* what) {
  while (n > 0) {
    HG_CHECK(wait_ready(fd, POLLIN, deadline), where << ": timed out waiting for " << what);
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    HG_CHECK(k != 0, where << ": the peer closed the connection before sending " << what);
    HG_CHECK(k > 0, where << ": recv failed while reading " << what << ": " << std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

Blob serve_tcp(int port, int world_size, const Blob& blob, Clock::time_point deadline, double timeout_seconds) {
  const std::string where = "rendezvous (tcp, rank 0, port " + std::to_string(port) + ")";
  HG_CHECK(blob.size() <= kMaxBlob, where << ": blob of " << blob.size() << " bytes; at most " << kMaxBlob);
  Fd listener(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = listener.fd >= 0;
  if (!v6) listener.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HG_CHECK(listener.fd >= 0, where << ": socket failed: " << std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {  // dual stack: IPv4 peers arrive as ::ffff:a.b.c.d
    ::setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  HG_CHECK(rc == 0, where << ": bind failed: " << std::strerror(errno)
                          << " (is another program, or an earlier run, using the port? choose another MASTER_PORT)");
  HG_CHECK(::listen(listener.fd, world_size) == 0, where << ": listen failed: " << std::strerror(errno));
  std::vector<bool> seen(world_size, false);
  for (int joined = 1; joined < world_size;) {
    HG_CHECK(wait_ready(listener.fd, POLLIN, deadline),
             where << ": timed out after " << timeout_seconds << " s with " << joined << " of " << world_size
                   << " ranks joined; check that every rank runs with the same MASTER_ADDR, MASTER_PORT and "
                      "WORLD_SIZE");
    Fd peer(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (peer.fd < 0) continue;  // the peer gave up between poll and accept
    // A connection that closes early or sends no "HGRV" hello is not a rank (a port scanner, a
    // health check): it is dropped, and rank 0 keeps waiting for the real ones.
    uint8_t hello[8];
    try {
      recv_all(peer.fd, hello, sizeof hello, deadline, where, "a peer's hello");
    } catch (const Error&) {
      continue;
    }
    if (std::memcmp(hello, kMagic, 4) != 0) continue;
    const uint32_t r = get_u32(hello + 4);
    HG_CHECK(r >= 1 && r < static_cast<uint32_t>(world_size) && !seen[r],
             where << ": a peer says it is rank " << r << ", but expected a rank in [1, " << world_size
                   << ") not seen before; two ranks with the same RANK, or a different WORLD_SIZE?");
    seen[r] = true;
    std::vector<uint8_t> reply(8 + blob.size());
    std::memcpy(reply.data(), kMagic, 4);
    put_u32(reply.data() + 4, static_cast<uint32_t>(blob.size()));
    std::copy(blob.begin(), blob.end(), reply.begin() + 8);
    send_all(peer.fd, reply.data(), reply.size(), deadline, where + ", to rank " + std::to_string(r));
    ++joined;
  }
  return blob;
}

Blob join_tcp(const std::string& addr, int port, int rank, Clock::time_point deadline, double timeout_seconds) {
  const std::string where =
      "rendezvous (tcp, rank " + std::to_string(rank) + ", " + addr + ":" + std::to_string(port) + ")";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found);
  HG_CHECK(gai == 0, where << ": cannot resolve MASTER_ADDR '" << addr << "': " << ::gai_strerror(gai));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> found_guard(found, ::freeaddrinfo);
  std::string last_error = "no address";
  for (;;) {  // rank 0 may not be listening yet: retry every 100 ms until the deadline
    for (addrinfo* ai = found; ai; ai = ai->ai_next) {
      Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (s.fd < 0) continue;
      if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        continue;
      }
      uint8_t hello[8];
      std::memcpy(hello, kMagic, 4);
      put_u32(hello + 4, static_cast<uint32_t>(rank));
      send_all(s.fd, hello, sizeof hello, deadline, where);
      uint8_t header[8];
      recv_all(s.fd, header, sizeof header, deadline, where, "rank 0's reply");
      HG_CHECK(std::memcmp(header, kMagic, 4) == 0,
               where << ": the reply is not from a halfgrad rank 0 (bad magic); is another program on the port?");
      const uint32_t n = get_u32(header + 4);
      HG_CHECK(n <= kMaxBlob, where << ": rank 0 announced " << n << " bytes; at most " << kMaxBlob);
      Blob blob(n);
      recv_all(s.fd, blob.data(), n, deadline, where, "the blob");
      return blob;
    }
    HG_CHECK(seconds_left(deadline) > 0, where << ": could not reach rank 0 within " << timeout_seconds
                                               << " s (last error: " << last_error
                                               << "); is rank 0 running, and MASTER_ADDR/MASTER_PORT right?");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

RendezvousConfig RendezvousConfig::from_env(const std::function<const char*(const char*)>& getenv_fn) {
  const auto env = [&](const char* name) -> const char* {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  };
  RendezvousConfig c;
  const char* rank = env("RANK");
  const char* world = env("WORLD_SIZE");
  HG_CHECK((rank == nullptr) == (world == nullptr),
           "rendezvous: " << (rank ? "RANK" : "WORLD_SIZE") << " is set but " << (rank ? "WORLD_SIZE" : "RANK")
                          << " is not; a distributed launch sets both (torchrun does), a single process neither");
  if (!world) return c;
  c.world_size = parse_env_int("WORLD_SIZE", world, 1, 1 << 20);
  c.rank = parse_env_int("RANK", rank, 0, c.world_size - 1);
  if (const char* t = env("HALFGRAD_RENDEZVOUS_TIMEOUT")) {
    char* end = nullptr;
    c.timeout_seconds = std::strtod(t, &end);
    HG_CHECK(end && *end == '\0' && c.timeout_seconds > 0 && c.timeout_seconds < 1e7,
             "rendezvous: environment variable HALFGRAD_RENDEZVOUS_TIMEOUT='" << t
                                                                              << "'; expected seconds, a number > 0");
  }
  if (const char* f = env("HALFGRAD_RENDEZVOUS_FILE")) c.file = f;
  if (c.world_size == 1) {
    if (const char* l = env("LOCAL_RANK")) c.local_rank = parse_env_int("LOCAL_RANK", l, 0, 0);
    return c;
  }
  const char* local = env("LOCAL_RANK");
  HG_CHECK(local, "rendezvous: WORLD_SIZE=" << c.world_size
                                            << " but LOCAL_RANK is not set; expected this rank's index on its "
                                               "host (which GPU it uses), as torchrun sets it");
  c.local_rank = parse_env_int("LOCAL_RANK", local, 0, c.world_size - 1);
  if (!c.file.empty()) return c;
  const char* addr = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  HG_CHECK(addr && port, "rendezvous: WORLD_SIZE=" << c.world_size << " but " << (addr ? "MASTER_PORT" : "MASTER_ADDR")
                                                   << " is not set; expected MASTER_ADDR and MASTER_PORT (rank 0's "
                                                      "host and a free port) or HALFGRAD_RENDEZVOUS_FILE");
  c.master_addr = addr;
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  c.agent_store = agent && std::string(agent) == "True";
  c.master_port = parse_env_int("MASTER_PORT", port, 1, c.agent_store ? 65534 : 65535);
  return c;
}

Blob exchange_via_file(const std::string& path, int rank, const Blob& blob, double timeout_seconds) {
  namespace fs = std::filesystem;
  if (rank == 0) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(blob.data()), static_cast<std::streamsize>(blob.size()));
      out.close();
      HG_CHECK(out, "rendezvous (file, rank 0): cannot write " << tmp << "; expected a writable folder");
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) fs::remove(tmp);
    HG_CHECK(!ec, "rendezvous (file, rank 0): cannot rename " << tmp << " to " << path << ": " << ec.message());
    return blob;
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) return Blob(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    HG_CHECK(seconds_left(deadline) > 0, "rendezvous (file, rank " << rank << "): " << path << " did not appear within "
                                                                  << timeout_seconds
                                                                  << " s; did rank 0 start (and fail)?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Blob exchange_via_tcp(const std::string& addr, int port, int rank, int world_size, const Blob& blob,
                      double timeout_seconds) {
  HG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
           "rendezvous (tcp): rank " << rank << " of world size " << world_size << "; expected 0 <= rank < world size");
  HG_CHECK(port >= 1 && port <= 65535, "rendezvous (tcp): port " << port << "; expected [1, 65535]");
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  if (rank == 0) return world_size == 1 ? blob : serve_tcp(port, world_size, blob, deadline, timeout_seconds);
  return join_tcp(addr, port, rank, deadline, timeout_seconds);
}

Blob rendezvous(const RendezvousConfig& c, const Blob& blob) {
  if (c.world_size == 1) return blob;
  if (!c.file.empty()) return exchange_via_file(c.file, c.rank, blob, c.timeout_seconds);
  return exchange_via_tcp(c.master_addr, c.tcp_port(), c.rank, c.world_size, blob, c.timeout_seconds);
}

}  // namespace halfgrad::dist
