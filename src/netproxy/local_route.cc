// RouteTypeOf: one RTM_GETROUTE request and its answer on a NETLINK_ROUTE socket.
#include "src/netproxy/local_route.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "sandbox/base/unique_fd.h"

namespace nsbox::netproxy {

StatusOr<int> RouteTypeOf(const sockaddr* address) {
  const void* bytes = nullptr;
  size_t length = 0;
  if (address->sa_family == AF_INET) {
    bytes = &reinterpret_cast<const sockaddr_in*>(address)->sin_addr;
    length = 4;
  } else if (address->sa_family == AF_INET6) {
    bytes = &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    length = 16;
  } else {
    return Status::Error("RTM_GETROUTE: not an IP address");
  }
  struct {
    nlmsghdr header;
    rtmsg route;
    char attributes[RTA_SPACE(16)];
  } request = {};
  request.header.nlmsg_type = RTM_GETROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = 1;
  request.route.rtm_family = static_cast<unsigned char>(address->sa_family);
  request.route.rtm_dst_len = static_cast<unsigned char>(length * 8);
  auto* destination = reinterpret_cast<rtattr*>(request.attributes);
  destination->rta_type = RTA_DST;
  destination->rta_len = static_cast<unsigned short>(RTA_LENGTH(length));
  std::memcpy(RTA_DATA(destination), bytes, length);
  request.header.nlmsg_len = static_cast<uint32_t>(NLMSG_LENGTH(sizeof request.route) + RTA_SPACE(length));

  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) return Status::Errno("socket(AF_NETLINK, NETLINK_ROUTE)");
  sockaddr_nl kernel = {};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), &request, request.header.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0)
    return Status::Errno("sendto(RTM_GETROUTE)");
  alignas(nlmsghdr) char answer[8192];
  ssize_t n;
  do {
    n = ::recv(fd.get(), answer, sizeof answer, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::Errno("recv(RTM_GETROUTE)");
  const auto* header = reinterpret_cast<const nlmsghdr*>(answer);
  if (!NLMSG_OK(header, static_cast<unsigned>(n))) return Status::Error("RTM_GETROUTE: a short answer");
  if (header->nlmsg_type == NLMSG_ERROR) {
    const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(header));
    // No route at all: nothing of this host's is there either.
    if (error->error == -ENETUNREACH || error->error == -EHOSTUNREACH) return RTN_UNREACHABLE;
    return Status::Errno("RTM_GETROUTE", -error->error);
  }
  if (header->nlmsg_type != RTM_NEWROUTE || header->nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg)))
    return Status::Error("RTM_GETROUTE: an answer that is not a route");
  return static_cast<int>(static_cast<const rtmsg*>(NLMSG_DATA(header))->rtm_type);
}

}  // namespace nsbox::netproxy
