// Probe: queues TCP buffers on loopback pairs nobody reads ("tcp_flood PAIRS STOP_BYTES"); prints "pairs queued".
// Each pair's sender, with send and receive buffers as large as the kernel allows, writes until one send blocks for
// 0.1 s; the probe stops after PAIRS pairs or once STOP_BYTES are queued, so that a run without a limit stays small.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  int max_pairs = argc > 1 ? std::atoi(argv[1]) : 24;
  long long stop_bytes = argc > 2 ? std::atoll(argv[2]) : 192ll << 20;
  int big = 1 << 30;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);  // inherited by the accepted sockets
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 64) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tcp_flood: listener");
    return 2;
  }
  static char chunk[65536];
  long long queued = 0;
  int pairs = 0;
  while (pairs < max_pairs && queued <= stop_bytes) {
    int sender = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    timeval blocked = {0, 100000};
    setsockopt(sender, SOL_SOCKET, SO_SNDTIMEO, &blocked, sizeof blocked);
    if (sender < 0 || connect(sender, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        accept(listener, nullptr, nullptr) < 0) {
      std::perror("tcp_flood: a pair");
      break;
    }
    ++pairs;
    for (;;) {
      ssize_t sent = send(sender, chunk, sizeof chunk, MSG_NOSIGNAL);
      if (sent <= 0) break;
      queued += sent;
    }
  }
  std::printf("%d %lld\n", pairs, queued);
  return 0;
}
