/* LD_PRELOAD shim of the fault tests (tests/netns/faults.rs): while the
 * file named by $TOLLGATE_FAULT_IPSET exists, an ipset write request
 * (create, destroy, flush, rename, swap, add, del) sent over a
 * NETLINK_NETFILTER socket by the process's main thread fails with EPERM,
 * as if the kernel refused it; everything else is sent. The agent's
 * reconcile writes its sets from its main thread; its workers' set writes
 * (learned addresses, cached verdicts) run on threads of their own and
 * `ipset save` only reads, so neither is faulted. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NFNL_SUBSYS_IPSET 6

static int faulted(int fd, const void *buf, size_t len)
{
	const char *flag = getenv("TOLLGATE_FAULT_IPSET");
	const struct nlmsghdr *header = buf;
	int value;
	socklen_t size = sizeof value;

	if (!flag || !buf || len < sizeof *header)
		return 0;
	if (syscall(SYS_gettid) != getpid())
		return 0;
	if (header->nlmsg_type >> 8 != NFNL_SUBSYS_IPSET)
		return 0;
	switch (header->nlmsg_type & 0xff) {
	case 2: case 3: case 4: case 5: case 6: case 9: case 10:
		break;
	default:
		return 0;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &size) || value != AF_NETLINK)
		return 0;
	size = sizeof value;
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &size) || value != NETLINK_NETFILTER)
		return 0;
	return access(flag, F_OK) == 0;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	static ssize_t (*real)(int, const void *, size_t, int);

	if (!real)
		real = dlsym(RTLD_NEXT, "send");
	if (faulted(fd, buf, len)) {
		errno = EPERM;
		return -1;
	}
	return real(fd, buf, len, flags);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags,
	       const struct sockaddr *to, socklen_t to_len)
{
	static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);

	if (!real)
		real = dlsym(RTLD_NEXT, "sendto");
	if (faulted(fd, buf, len)) {
		errno = EPERM;
		return -1;
	}
	return real(fd, buf, len, flags, to, to_len);
}

ssize_t sendmsg(int fd, const struct msghdr *message, int flags)
{
	static ssize_t (*real)(int, const struct msghdr *, int);

	if (!real)
		real = dlsym(RTLD_NEXT, "sendmsg");
	if (message && message->msg_iovlen > 0 &&
	    faulted(fd, message->msg_iov[0].iov_base, message->msg_iov[0].iov_len)) {
		errno = EPERM;
		return -1;
	}
	return real(fd, message, flags);
}
